//! Drop-in for Ironic's dnsmasq PXE filter: shardboot follows a `dhcp-hostsdir` that
//! Ironic's own filter code (`ironic.pxe_filter.dnsmasq`, from the venv that
//! tests/ironic/lab.sh installs) writes. Allow, deny and the unknown-hosts wildcard act
//! on the next DISCOVERs of a real broadcast client in a namespace; a removed file counts
//! (dnsmasq misses removals); the operator API overrides the directory.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::api_lab::{self, Api};
use common::members::wait_until;
use dhcproto::v4::MessageType;

const TOKEN: &str = "hostsdir-test-token-0123456789";

/// Runs Ironic's PXE filter sync against `dir`, as its PXE filter service does.
fn ironic_sync(dir: &Path, allow: &[&str], deny: &[&str], allow_unknown: bool) {
    let script = r#"
import json, sys
from ironic.conf import CONF
CONF([], project='ironic', default_config_files=[])
CONF.set_override('dhcp_hostsdir', sys.argv[1], group='pxe_filter')
from ironic.pxe_filter import dnsmasq
dnsmasq.sync(json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4] == 'yes')
"#;
    let status = Command::new(common::ironic_python())
        .arg("-c")
        .arg(script)
        .arg(dir)
        .arg(serde_json::to_string(allow).unwrap())
        .arg(serde_json::to_string(deny).unwrap())
        .arg(if allow_unknown { "yes" } else { "no" })
        .status()
        .unwrap();
    assert!(status.success(), "Ironic's pxe_filter sync failed");
}

/// Unfiltered DHCP would let every machine through: a hosts directory that cannot be
/// read stops the start, naming the key.
#[test]
fn a_hosts_directory_that_cannot_be_read_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-there");
    let out = Command::new(common::shardboot_bin())
        .args(["serve", "--state-dir"])
        .arg(dir.path().join("state"))
        .arg("--set")
        .arg(format!("dhcp.hostsdir={}", missing.display()))
        .args(["--set", "tftp.enabled=false", "--set", "http.enabled=false"])
        .args(["--set", "dhcp.port=6767"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dhcp.hostsdir: cannot read"), "{err}");
}

fn mac_bytes(s: &str) -> [u8; 6] {
    s.parse::<shardboot::mac::MacAddr>().unwrap().0
}

#[test]
fn shardboot_follows_the_hosts_directory_ironic_writes() {
    require_root!();
    common::ironic_python();
    // Made before shardboot starts: it refuses to start on a directory it cannot read.
    let hostsdir_parent = tempfile::tempdir().unwrap();
    let hostsdir = hostsdir_parent.path().join("dhcp-hostsdir");
    std::fs::create_dir(&hostsdir).unwrap();
    let (lab, _dir, _server, mut client) = api_lab::start(
        TOKEN,
        &format!(
            "hostsdir = \"{}\"\nhostsdir_poll_ms = 200",
            hostsdir.display()
        ),
    );
    let (m1, m2, m3) = (
        "52:54:00:bb:00:01",
        "52:54:00:bb:00:02",
        "52:54:00:bb:00:03",
    );
    let api = |method: &str, path: &str, body: Option<&str>| {
        Api {
            lab: &lab,
            token: TOKEN,
        }
        .json(method, path, body)
    };
    let policy = |mac: &str| api("GET", &format!("/v1/hosts/{mac}"), None);
    let mut offered = |macs: &[&str]| -> Vec<bool> {
        let macs: Vec<[u8; 6]> = macs.iter().map(|m| mac_bytes(m)).collect();
        client
            .discover(&macs, 0, Duration::from_millis(600))
            .iter()
            .map(|seen| seen.iter().any(|s| s.kind == MessageType::Offer))
            .collect()
    };

    // Inspection of m1 only: Ironic allows m1, denies m2 and every unknown MAC.
    ironic_sync(&hostsdir, &[m1], &[m2], false);
    wait_until("the directory applied", Duration::from_secs(10), || {
        policy(m3)["source"] == "hostsdir-unknown"
    });
    assert_eq!(policy(m2)["policy"], "deny");
    assert_eq!(policy(m2)["source"], "hostsdir");
    assert_eq!(offered(&[m1, m2, m3]), [true, false, false]);

    // Inspection opens up: everything allowed, unknown MACs too.
    ironic_sync(&hostsdir, &[m1, m2], &[], true);
    wait_until("the directory applied", Duration::from_secs(10), || {
        policy(m2)["policy"] == "allow" && policy(m3)["policy"] == "allow"
    });
    assert_eq!(offered(&[m1, m2, m3]), [true, true, true]);

    // Closed again, and m1's file removed (dnsmasq would miss the removal): m1 falls
    // to the unknown-hosts entry.
    ironic_sync(&hostsdir, &[m1], &[m2], false);
    std::fs::remove_file(hostsdir.join(m1)).unwrap();
    wait_until("the directory applied", Duration::from_secs(10), || {
        policy(m1)["source"] == "hostsdir-unknown" && policy(m2)["policy"] == "deny"
    });
    assert_eq!(offered(&[m1, m2, m3]), [false, false, false]);

    // The operator's word wins over the directory, and the listing shows both.
    let set = api(
        "PUT",
        &format!("/v1/hosts/{m2}"),
        Some(r#"{"policy": "allow"}"#),
    );
    assert_eq!(
        (set["policy"].as_str(), set["source"].as_str()),
        (Some("allow"), Some("api"))
    );
    assert_eq!(offered(&[m2]), [true]);
    let list = api("GET", "/v1/hosts", None);
    assert_eq!(list["hostsdir_unknown"], "deny", "{list}");
    assert!(
        list["hostsdir"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["mac"] == m2 && h["policy"] == "deny"),
        "{list}"
    );
    assert_eq!(list["hosts"][0]["mac"], m2, "{list}");
}
