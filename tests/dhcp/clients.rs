//! Real DHCP clients (ISC dhclient, busybox udhcpc) against the shardboot binary, across a
//! veth pair between two network namespaces: obtain, renew, reboot and release.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Lab, Server};

use common::clients::{script, wait_event};

fn lease_state(server: &Server, ip: &str) -> String {
    let leases = server.leases_json();
    let lease = leases
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["ip"] == ip)
        .unwrap_or_else(|| panic!("no lease for {ip} in {leases}"));
    lease["state"].as_str().unwrap().to_string()
}

#[test]
fn dhclient_obtains_renews_reboots_and_releases() {
    require_root!();
    // T1 of 3 s, so the running daemon renews within the test.
    let (lab, dir, mut server) = common::small_lab_with("renewal_time = 3\n");
    let events = dir.path().join("events");
    let wrapper = common::clients::dhclient_hook(dir.path(), "dhclient-script", &events);
    let dhclient = |extra: &[&str]| {
        let status = lab
            .client
            .command("dhclient")
            .args(["-4", "-1", "-sf"])
            .arg(&wrapper)
            .arg("-lf")
            .arg(dir.path().join("dhclient.leases"))
            .arg("-pf")
            .arg(dir.path().join("dhclient.pid"))
            .args(extra)
            .arg(&lab.client_if)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(
            status.success(),
            "dhclient {extra:?} failed: {}",
            server.log_text()
        );
    };

    dhclient(&[]);
    let bound = wait_event(&events, "BOUND", 1);
    let ip = bound[1].clone();
    assert!(
        ip.starts_with("192.0.2.1"),
        "address {ip} outside the range"
    );
    assert_eq!(bound[2], "255.255.255.0");
    assert_eq!(bound[4], "192.0.2.1", "server identifier");
    // dhclient leaves the broadcast flag clear, so the server unicast the OFFER/ACK to the
    // new address after adding a neighbour entry for the client's MAC (RFC 2131 §4.1).
    let neigh = lab
        .server
        .command("ip")
        .args(["neigh", "show", &ip])
        .output()
        .unwrap();
    let neigh = String::from_utf8_lossy(&neigh.stdout).to_string();
    assert!(
        neigh.contains(&lab.client_mac()),
        "no ARP entry for {ip}: {neigh:?}"
    );

    // The daemon stays in the background (without -1 after the first lease) and
    // renews at T1: a unicast REQUEST with ciaddr (RENEWING), ACKed for the same address.
    let renew = wait_event(&events, "RENEW", 1);
    assert_eq!(renew[1], ip, "renewed the same address");
    assert_eq!(renew[4], "192.0.2.1");

    // Stop the daemon without releasing, then start again: dhclient reuses its recorded
    // lease via INIT-REBOOT (REBOOT event) and must get the same address.
    dhclient(&["-x"]);
    dhclient(&[]);
    let reboot = wait_event(&events, "REBOOT", 1);
    assert_eq!(reboot[1], ip, "same address after reboot");

    // Release: the store marks the lease released.
    dhclient(&["-r"]);
    wait_event(&events, "RELEASE", 1);
    server.stop();
    assert_eq!(lease_state(&server, &ip), "released");
    let leases = server.leases_json();
    assert_eq!(leases[0]["mac"], lab.client_mac());
}

#[test]
fn udhcpc_obtains_renews_and_releases() {
    require_root!();
    let (lab, dir, mut server) = common::small_lab();
    let events = dir.path().join("events");
    let mut udhcpc = lab
        .client
        .command("udhcpc")
        .args([
            "-f",
            "-R",
            "-t",
            "5",
            "-T",
            "1",
            "-A",
            "1",
            "-s",
            &script("udhcpc-script"),
            "-i",
            &lab.client_if,
        ])
        .env("SB_EVENTS", &events)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let bound = wait_event(&events, "bound", 1);
    let ip = bound[1].clone();
    assert!(ip.starts_with("192.0.2.1"), "address {ip}");
    assert_eq!(bound[4], "192.0.2.1");

    // SIGUSR1 makes udhcpc renew now: a unicast REQUEST with ciaddr (RENEWING state).
    let pid = udhcpc.id().to_string();
    // `ip netns exec` execs udhcpc in place, so the child pid is udhcpc's.
    Command::new("kill").args(["-USR1", &pid]).status().unwrap();
    let renew = wait_event(&events, "renew", 1);
    assert_eq!(renew[1], ip, "renewed the same address");

    // SIGTERM with -R sends a RELEASE before exiting.
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let _ = udhcpc.wait();
    server.stop();
    assert_eq!(lease_state(&server, &ip), "released");
}

#[test]
fn one_server_serves_two_interfaces_each_from_its_own_subnet() {
    require_root!();
    // The lab's pair plus a second veth from the server namespace to a second client
    // namespace: two provisioning networks on one host.
    let lab = Lab::new(&["192.0.2.1/24"], &[]);
    let second = common::Netns::new("sbc");
    let (server_if2, client_if2) = (common::unique("vs"), common::unique("vc"));
    common::sh(&[
        "ip",
        "link",
        "add",
        &server_if2,
        "type",
        "veth",
        "peer",
        "name",
        &client_if2,
    ]);
    common::sh(&["ip", "link", "set", &server_if2, "netns", &lab.server.name]);
    common::sh(&["ip", "link", "set", &client_if2, "netns", &second.name]);
    lab.server
        .ip(&["addr", "add", "198.51.100.1/24", "dev", &server_if2]);
    lab.server.ip(&["link", "set", &server_if2, "up"]);
    second.ip(&["link", "set", &client_if2, "up"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        r#"
[dhcp]
interfaces = ["{}", "{server_if2}"]

[[subnet]]
network = "192.0.2.0/24"
ranges = ["192.0.2.100 - 192.0.2.199"]
router = "192.0.2.1"

[[subnet]]
network = "198.51.100.0/24"
ranges = ["198.51.100.100 - 198.51.100.199"]
router = "198.51.100.1"
"#,
        lab.server_if
    );
    let mut server = Server::start(&lab.server, dir.path(), &cfg);
    let obtain = |ns: &common::Netns, iface: &str, events: &Path| {
        // One-shot: obtain a lease and quit (-q), fail rather than background (-n).
        let status = common::clients::udhcpc_once(ns, iface, events, &[]);
        assert!(status.success(), "udhcpc on {iface} got no lease");
        wait_event(events, "bound", 1)
    };
    let first = obtain(&lab.client, &lab.client_if, &dir.path().join("events1"));
    let other = obtain(&second, &client_if2, &dir.path().join("events2"));
    assert!(first[1].starts_with("192.0.2.1"), "{first:?}");
    assert_eq!(
        first[4], "192.0.2.1",
        "server identifier on the first network"
    );
    assert!(other[1].starts_with("198.51.100.1"), "{other:?}");
    assert_eq!(
        other[4], "198.51.100.1",
        "server identifier on the second network"
    );
    server.stop();
    let leases = server.leases_json();
    let ips: Vec<&str> = leases
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["ip"].as_str().unwrap())
        .collect();
    assert!(
        ips.contains(&first[1].as_str()) && ips.contains(&other[1].as_str()),
        "{ips:?}"
    );
}

/// ProxyDHCP's boot-server port (PXE spec §2.2.6): a PXE client that already has its
/// address from another server asks shardboot on port 4011, unicast, and gets an ACK
/// with its boot file and no address, back at the port it asked from. Port 67 stays
/// silent for clients that are not network-boot firmware.
#[test]
fn proxydhcp_answers_on_the_boot_server_port_to_the_sender() {
    use dhcproto::v4::{DhcpOption, Message, MessageType, OptionCode};
    use dhcproto::{Decodable, Decoder, Encodable};
    require_root!();
    let lab = Lab::new(&["192.0.2.1/24"], &["192.0.2.50/24"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        "[dhcp]\ninterfaces = [\"{}\"]\nproxy = true\n[tftp]\nenabled = false\n[http]\nenabled = false\n",
        lab.server_if
    );
    let server = Server::start(&lab.server, dir.path(), &cfg);
    let reply = lab
        .client
        .run(|| {
            let s = std::net::UdpSocket::bind("192.0.2.50:0").unwrap();
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let ask = |vendor: Option<&str>| {
                let ip = "192.0.2.50".parse().unwrap();
                let z = "0.0.0.0".parse().unwrap();
                let mut m = Message::new_with_id(42, ip, z, z, z, &[0x52, 0x54, 0, 0x0f, 0, 9]);
                m.opts_mut()
                    .insert(DhcpOption::MessageType(MessageType::Request));
                if let Some(v) = vendor {
                    m.opts_mut()
                        .insert(DhcpOption::ClassIdentifier(v.as_bytes().to_vec()));
                }
                s.send_to(&m.to_vec().unwrap(), "192.0.2.1:4011").unwrap();
                let mut buf = [0u8; 1500];
                s.recv_from(&mut buf).ok().map(|(n, _)| buf[..n].to_vec())
            };
            (ask(None), ask(Some("PXEClient:Arch:00000:UNDI:002001")))
        })
        .join()
        .unwrap();
    assert!(
        reply.0.is_none(),
        "answered a client that is not PXE firmware"
    );
    let ack = Message::decode(&mut Decoder::new(&reply.1.expect("no ACK on port 4011"))).unwrap();
    assert_eq!(ack.opts().msg_type(), Some(MessageType::Ack));
    assert_eq!(ack.xid(), 42);
    assert_eq!(ack.yiaddr().to_string(), "0.0.0.0");
    assert_eq!(
        ack.opts().get(OptionCode::BootfileName),
        Some(&DhcpOption::BootfileName(b"undionly.kpxe".to_vec())),
        "{}",
        server.log_text()
    );
}
