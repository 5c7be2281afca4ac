//! `dhcp.leasefile`: the dnsmasq-format lease file Ironic's `dnsmasq` DHCP provider
//! reads node addresses from. A real client (udhcpc) leases an address from the binary
//! in a namespace; Ironic's own provider code (`ironic.dhcp.dnsmasq`, from the venv
//! tests/ironic/lab.sh installs) then finds that address for the node's port; after
//! the client releases it, Ironic finds none.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Lab, Server};

use common::clients::script;

/// Ironic's `DnsmasqDHCPApi.get_ip_addresses` for a node with one PXE port `mac`.
fn ironic_addresses(leasefile: &Path, mac: &str) -> Vec<String> {
    let code = r#"
import sys
from ironic.conf import CONF
CONF([], project='ironic', default_config_files=[])
CONF.set_override('dhcp_leasefile', sys.argv[1], group='dnsmasq')
from ironic.dhcp import dnsmasq

class Port:
    address = sys.argv[2]
    pxe_enabled = True

class Node:
    uuid = '5b0e7a11-c0de-4b1d-8000-000000000001'

class Task:
    ports = [Port()]
    node = Node()

print(' '.join(dnsmasq.DnsmasqDHCPApi().get_ip_addresses(Task())))
"#;
    let out = Command::new(common::ironic_python())
        .arg("-c")
        .arg(code)
        .arg(leasefile)
        .arg(mac)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "Ironic's get_ip_addresses failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Waits (bounded) until `f` holds for the lease file's text.
fn wait_file(path: &Path, what: &str, f: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if f(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "lease file never {what}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn ironic_reads_the_address_a_real_client_leased() {
    require_root!();
    common::ironic_python();
    let lab = Lab::new(&["192.0.2.1/24"], &[]);
    let dir = tempfile::tempdir().unwrap();
    let leasefile = dir.path().join("dnsmasq.leases");
    let cfg = common::config(
        &lab.server_if,
        "192.0.2.0/24",
        "192.0.2.100 - 192.0.2.199",
        &format!("leasefile = \"{}\"\n", leasefile.display()),
    );
    let _server = Server::start(&lab.server, dir.path(), &cfg);
    let mac = lab.client_mac();

    let events = dir.path().join("events");
    let mut udhcpc = lab
        .client
        .command("udhcpc")
        .args(["-f", "-R", "-t", "5", "-T", "1", "-A", "1", "-s"])
        .arg(script("udhcpc-script"))
        .args(["-i", &lab.client_if])
        .env("SB_EVENTS", &events)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let text = wait_file(&leasefile, "named the client", |t| t.contains(&mac));
    let ip = text
        .lines()
        .find(|l| l.contains(&mac))
        .and_then(|l| l.split_whitespace().nth(2))
        .unwrap()
        .to_string();
    assert!(ip.starts_with("192.0.2.1"), "{text}");
    let bound = std::fs::read_to_string(&events).unwrap_or_default();
    assert!(
        bound
            .lines()
            .any(|l| l.starts_with(&format!("bound {ip} "))),
        "the file's address is not the client's:\n{bound}\n{text}"
    );
    assert_eq!(ironic_addresses(&leasefile, &mac), [ip]);

    // SIGTERM with -R: a RELEASE; the line goes, and Ironic finds no address.
    Command::new("kill")
        .args(["-TERM", &udhcpc.id().to_string()])
        .status()
        .unwrap();
    let _ = udhcpc.wait();
    wait_file(&leasefile, "dropped the released lease", |t| {
        !t.contains(&mac)
    });
    assert!(ironic_addresses(&leasefile, &mac).is_empty());
    // Replaced whole, never edited in place: no temporary file left beside it.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("dnsmasq.leases"))
        .collect();
    assert_eq!(names, ["dnsmasq.leases"]);
}
