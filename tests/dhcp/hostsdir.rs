//! Drop-in for Ironic's dnsmasq PXE filter: shardboot follows a `dhcp-hostsdir` that
//! Ironic's own filter code (`ironic.pxe_filter.dnsmasq`, from the venv that
//! tests/ironic/lab.sh installs) writes. Allow, deny and the unknown-hosts wildcard act
//! on the next DISCOVERs of a real broadcast client in a namespace; a removed file counts
//! (dnsmasq misses removals); the operator API overrides the directory.

use crate::common;

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

/// Runs Ironic's dnsmasq DHCP provider (`ironic.dhcp.dnsmasq.DnsmasqDHCPApi`) for a node
/// with one PXE port `mac`: `update` writes the node's options and tags its NIC, as a
/// deploy does; `clean` turns the NIC to `ignore` and removes the options, as the end of
/// a deploy does. The task is a stand-in with the attributes the provider reads.
fn ironic_dhcp_provider(action: &str, hostsdir: &Path, optsdir: &Path, mac: &str, options: &str) {
    let script = r#"
import json, sys, types
from ironic.conf import CONF
CONF([], project='ironic', default_config_files=[])
action, hostsdir, optsdir, mac, options = sys.argv[1:6]
CONF.set_override('dhcp_hostsdir', hostsdir, group='dnsmasq')
CONF.set_override('dhcp_optsdir', optsdir, group='dnsmasq')
from ironic.dhcp import dnsmasq

class Node:
    uuid = '9f1c1e57-7a4e-4e43-9d55-3a1b2c3d4e5f'
    driver_internal_info = {'dnsmasq_tag': '4c0ffee0-aaaa-4bbb-8ccc-123456789abc'}
    def set_driver_internal_info(self, k, v): self.driver_internal_info[k] = v
    def del_driver_internal_info(self, k): self.driver_internal_info.pop(k, None)
    def save(self): pass

task = types.SimpleNamespace(node=Node(), ports=[types.SimpleNamespace(address=mac, pxe_enabled=True)])
api = dnsmasq.DnsmasqDHCPApi()
if action == 'update':
    api.update_dhcp_opts(task, json.loads(options))
else:
    api.clean_dhcp_opts(task)
"#;
    let status = Command::new(common::ironic_python())
        .arg("-c")
        .arg(script)
        .args([action])
        .arg(hostsdir)
        .arg(optsdir)
        .args([mac, options])
        .status()
        .unwrap();
    assert!(
        status.success(),
        "Ironic's dnsmasq DHCP provider ({action}) failed"
    );
}

/// The environment udhcpc handed its script on `bound`, or `None` when it got no lease.
fn udhcpc_env(lab: &common::Lab, events: &Path, extra: &[&str]) -> Option<Vec<(String, String)>> {
    let status = lab
        .client
        .command("udhcpc")
        .args(extra)
        .args(["-q", "-n", "-f", "-t", "3", "-T", "1", "-A", "1", "-s"])
        .arg(common::clients::script("env-dump"))
        .args(["-i", &lab.client_if])
        .env("SB_EVENTS", events)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    let file = format!("{}.bound", events.display());
    let text = std::fs::read_to_string(&file).ok()?;
    let _ = std::fs::remove_file(&file);
    status.success().then(|| {
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    })
}

fn var<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Ironic's dnsmasq DHCP provider writes a node's boot options to the options directory
/// and tags the node's NIC in the hosts directory; shardboot follows both, so the
/// node's PXE and iPXE requests get Ironic's per-node options on the next packet, other
/// machines keep the defaults, and once Ironic cleans up the NIC is ignored.
#[test]
fn shardboot_follows_the_options_ironics_dnsmasq_provider_writes() {
    require_root!();
    common::ironic_python();
    let dirs = tempfile::tempdir().unwrap();
    let (hostsdir, optsdir) = (dirs.path().join("hostsdir"), dirs.path().join("optsdir"));
    std::fs::create_dir(&hostsdir).unwrap();
    std::fs::create_dir(&optsdir).unwrap();
    let lab = common::Lab::new(&["192.0.2.1/24"], &[]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config(
        &lab.server_if,
        "192.0.2.0/24",
        "192.0.2.100 - 192.0.2.199",
        &format!(
            "hostsdir = \"{}\"\noptsdir = \"{}\"\nhostsdir_poll_ms = 200\n[tftp]\nenabled = false\n[http]\nenabled = false",
            hostsdir.display(),
            optsdir.display()
        ),
    );
    let server = common::Server::start(&lab.server, dir.path(), &cfg);
    let node_mac = "52:54:00:bb:01:01";
    lab.client
        .ip(&["link", "set", &lab.client_if, "address", node_mac]);
    // What Ironic's PXE boot interface asks its DHCP provider for (pxe_utils).
    let options = r#"[
        {"opt_name": "tag:!ipxe,67", "opt_value": "ironic-undionly.kpxe", "ip_version": 4},
        {"opt_name": "tag:ipxe,67", "opt_value": "http://192.0.2.9:6180/boot.ipxe", "ip_version": 4},
        {"opt_name": "66", "opt_value": "192.0.2.9", "ip_version": 4},
        {"opt_name": "150", "opt_value": "192.0.2.9", "ip_version": 4},
        {"opt_name": "255", "opt_value": "192.0.2.9", "ip_version": 4}
    ]"#;
    ironic_dhcp_provider("update", &hostsdir, &optsdir, node_mac, options);
    wait_until(
        "the options directory applied",
        Duration::from_secs(10),
        || server.log_text().contains("entries=5"),
    );
    let events = dir.path().join("ev");
    let pxe = ["-V", "PXEClient:Arch:00000:UNDI:002001"];
    let env = udhcpc_env(&lab, &events, &pxe).expect("the node's PXE request got no lease");
    assert_eq!(
        var(&env, "boot_file"),
        Some("ironic-undionly.kpxe"),
        "{env:?}"
    );
    assert_eq!(var(&env, "siaddr"), Some("192.0.2.9"), "{env:?}");
    assert_eq!(var(&env, "tftp"), Some("192.0.2.9"), "{env:?}");
    assert_eq!(var(&env, "opt150"), Some("c0000209"), "{env:?}");
    // iPXE (user class iPXE) on the same NIC: Ironic's iPXE script.
    let ipxe = ["-x", "0x4d:69505845"];
    let env = udhcpc_env(&lab, &events, &ipxe).expect("the node's iPXE request got no lease");
    assert_eq!(
        var(&env, "boot_file"),
        Some("http://192.0.2.9:6180/boot.ipxe"),
        "{env:?}"
    );
    // Another machine: its own defaults, not the node's.
    lab.client.ip(&[
        "link",
        "set",
        &lab.client_if,
        "address",
        "52:54:00:bb:01:02",
    ]);
    let env = udhcpc_env(&lab, &events, &pxe).expect("another machine got no lease");
    assert_eq!(var(&env, "boot_file"), Some("undionly.kpxe"), "{env:?}");
    assert_eq!(var(&env, "opt150"), None, "{env:?}");
    // Ironic cleans up after the deploy: the node's NIC is ignored from then on.
    ironic_dhcp_provider("clean", &hostsdir, &optsdir, node_mac, "[]");
    // Both directories change, and each is followed on its own: wait for both (the
    // ignore line is in the hosts directory).
    wait_until(
        "the options directory emptied and the hosts directory ignores the NIC",
        Duration::from_secs(10),
        || {
            let log = server.log_text();
            log.contains("entries=0") && log.contains("denied=1")
        },
    );
    lab.client
        .ip(&["link", "set", &lab.client_if, "address", node_mac]);
    assert!(
        udhcpc_env(&lab, &events, &pxe).is_none(),
        "the cleaned-up NIC still got a lease"
    );
}
