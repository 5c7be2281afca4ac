//! A RELEASE is believed on the link only from the address it releases (RFC 2131
//! §4.4.6), and from a trusted relay when relayed: a hostile host that copies a
//! victim's chaddr and ciaddr frees nothing, and is counted
//! (`shardboot_dhcp_ignored_total{reason="not_from_client"}`).

use crate::common;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dhcproto::v4::{DhcpOption, Message, MessageType};
use dhcproto::Encodable;

use common::clients::{script, wait_event};
use common::relay_client::{mac, Answer, RelayClient};
use common::segment::Segment;
use common::{config, Lab, Server};

const SPOOFED: &str = "shardboot_dhcp_ignored_total{reason=\"not_from_client\"} ";
const RELEASED: &str = "shardboot_dhcp_decisions_total{outcome=\"release\"} ";

/// A RELEASE of `ciaddr` for `chaddr`, not relayed, sent to `server`:67 from a socket
/// bound to `source` (an address the sending namespace has; any port): the hostile host.
fn release_from(source: Ipv4Addr, server: Ipv4Addr, chaddr: &[u8; 6], ciaddr: Ipv4Addr) {
    let z = Ipv4Addr::UNSPECIFIED;
    let mut m = Message::new_with_id(0x5ee1, ciaddr, z, z, z, chaddr);
    m.opts_mut()
        .insert(DhcpOption::MessageType(MessageType::Release));
    m.opts_mut().insert(DhcpOption::ServerIdentifier(server));
    let s = UdpSocket::bind(SocketAddrV4::new(source, 0)).unwrap();
    s.send_to(&m.to_vec().unwrap(), SocketAddrV4::new(server, 67))
        .unwrap();
}

/// The value of `sample` (name and labels, then a space) in the `/metrics` of the
/// server at `url`, read from `ns`; 0 when absent.
fn metric(ns: &common::Netns, url: &str, sample: &str) -> u64 {
    let (_, body) = common::api_lab::curl(ns, "GET", url, None, None);
    body.lines()
        .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits until `sample` reaches `want` (the server decides asynchronously).
fn wait_metric(ns: &common::Netns, url: &str, sample: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = metric(ns, url, sample);
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{sample}is {got}, not {want}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn state_of(server: &Server, ip: Ipv4Addr) -> String {
    let leases = server.leases_json();
    leases
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["ip"] == ip.to_string())
        .map(|l| l["state"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no lease for {ip} in {leases}"))
}

fn parse_mac(text: &str) -> [u8; 6] {
    let v: Vec<u8> = text
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

#[test]
fn a_spoofed_release_leaves_udhcpcs_lease_and_its_own_release_frees_it() {
    require_root!();
    let (lab, dir, mut server) = common::small_lab();
    let metrics = "http://192.0.2.1:8080/metrics";
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
    let bound = wait_event(&events, "bound", 1);
    let ip: Ipv4Addr = bound[1].parse().unwrap();
    // A hostile host on the same link (another address of the client side) sends the
    // victim's RELEASE: chaddr and ciaddr copied, from its own address.
    lab.client
        .ip(&["addr", "add", "192.0.2.77/24", "dev", &lab.client_if]);
    let victim = parse_mac(&lab.client_mac());
    let server_ip = Ipv4Addr::new(192, 0, 2, 1);
    lab.client
        .run(move || release_from(Ipv4Addr::new(192, 0, 2, 77), server_ip, &victim, ip))
        .join()
        .unwrap();
    wait_metric(&lab.server, metrics, SPOOFED, 1);
    assert_eq!(
        metric(&lab.server, metrics, RELEASED),
        0,
        "the lease was freed"
    );

    // SIGTERM with -R: udhcpc releases from its address, and that counts.
    let pid = udhcpc.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let _ = udhcpc.wait();
    wait_metric(&lab.server, metrics, RELEASED, 1);
    assert_eq!(metric(&lab.server, metrics, SPOOFED), 1);
    server.stop();
    assert_eq!(state_of(&server, ip), "released");
}

#[test]
fn a_relayed_release_counts_from_a_trusted_relay_and_a_direct_one_only_from_ciaddr() {
    require_root!();
    let lab = Lab::new(&["198.18.0.1/16"], &["198.18.0.2/16", "198.18.0.3/16"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &lab.server_if,
        "198.18.0.0/16",
        "198.18.1.0 - 198.18.1.250",
        "relays = [\"198.18.0.3\"]\n[http]\nlisten = \"198.18.0.1:8080\"\n",
    );
    let mut server = Server::start(&lab.server, dir.path(), &cfg);
    let metrics = "http://198.18.0.1:8080/metrics";
    let server_ip = Ipv4Addr::new(198, 18, 0, 1);
    let (victim, released) = lab
        .client
        .run(move || {
            let mut relay = RelayClient::new(Ipv4Addr::new(198, 18, 0, 3), server_ip);
            let acked = relay.obtain(&[mac(1), mac(2)], Duration::from_millis(500));
            let [Answer::Ack(victim), Answer::Ack(released)] = acked[..] else {
                panic!("{acked:?}");
            };
            // 198.18.0.2 is on the link but is not the victim's address.
            release_from(Ipv4Addr::new(198, 18, 0, 2), server_ip, &mac(1), victim);
            relay.release(&mac(2), server_ip, released);
            (victim, released)
        })
        .join()
        .unwrap();
    wait_metric(&lab.server, metrics, SPOOFED, 1);
    wait_metric(&lab.server, metrics, RELEASED, 1);
    server.stop();
    assert_eq!(state_of(&server, victim), "bound");
    assert_eq!(state_of(&server, released), "released");
}

#[test]
fn simulated_machines_release_from_the_address_they_hold() {
    // The broadcast client the member tests share (tests/common/segment.rs) sends each
    // RELEASE from its ciaddr, as a real client does: every one counts.
    require_root!();
    let seg = Segment::new(&["198.18.0.11/16"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &seg.member_ifs[0],
        "198.18.0.0/16",
        "198.18.1.0 - 198.18.1.250",
        "[http]\nlisten = \"198.18.0.11:8080\"\n",
    );
    let mut server = Server::start(&seg.servers, dir.path(), &cfg);
    let mut client = seg.client();
    let macs: Vec<[u8; 6]> = (10..15).map(mac).collect();
    let offers = client.discover(&macs, 0, Duration::from_millis(500));
    let picks: Vec<([u8; 6], Ipv4Addr, Ipv4Addr)> = macs
        .iter()
        .zip(&offers)
        .map(|(m, o)| (*m, o[0].server, o[0].yiaddr))
        .collect();
    let acks = client.request(&picks, Duration::from_millis(500));
    assert!(
        acks.iter()
            .all(|a| a.first().is_some_and(|s| s.kind == MessageType::Ack)),
        "{acks:?}"
    );
    let held: Vec<([u8; 6], Ipv4Addr)> = picks.iter().map(|(m, _, ip)| (*m, *ip)).collect();
    client.release(&held);
    let url = "http://198.18.0.11:8080/metrics";
    wait_metric(&seg.servers, url, RELEASED, held.len() as u64);
    assert_eq!(metric(&seg.servers, url, SPOOFED), 0);
    server.stop();
    for (_, ip) in &held {
        assert_eq!(state_of(&server, *ip), "released");
    }
}
