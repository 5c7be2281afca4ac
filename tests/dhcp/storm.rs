//! A storm larger than the DHCP socket's receive buffer (`dhcp.receive_buffer_kib`): what
//! the kernel drops never reaches the server, so the server counts it from the socket's
//! own drop counter (`shardboot_dhcp_dropped_total{reason="receive_buffer_full"}`),
//! answers everything the buffer held, and serves the machines that send again.
//!
//! The server is stopped (SIGSTOP) while the burst arrives, so exactly what the buffer
//! holds is queued, whatever the machine's speed: the figure is the kernel's own, and
//! the test compares the two.

use crate::common;

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

use common::qemu::{curl, metric};
use common::relay_client::{mac, RelayClient};
use common::{Lab, Server, RELAYS};

const RELAY: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const SERVER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const BURST: u32 = 3000;

/// Datagrams the kernel dropped at port 67 in `lab`'s server namespace (/proc/net/udp's
/// last column).
fn kernel_drops(lab: &Lab) -> u64 {
    let out = lab
        .server
        .command("cat")
        .arg("/proc/net/udp")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|a| a.ends_with(":0043"))
        })
        .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
        .sum()
}

/// The lab (server 198.18.0.1, client 198.18.0.2) with shardboot serving 198.18.0.0/16
/// (`extra`: more of its `[dhcp]` table), and the server's pid.
fn started(extra: &str) -> (Lab, tempfile::TempDir, Server, u32) {
    let lab = Lab::new(&["198.18.0.1/16"], &["198.18.0.2/16"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config(
        &lab.server_if,
        "198.18.0.0/16",
        "198.18.1.0 - 198.18.255.254",
        extra,
    );
    let server = Server::start(&lab.server, dir.path(), &cfg);
    let pid = server.pid().unwrap();
    (lab, dir, server, pid)
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

#[test]
fn a_storm_beyond_the_receive_buffer_is_counted_and_the_rest_served() {
    require_root!();
    let (lab, _dir, server, pid) = started(&format!("{RELAYS}receive_buffer_kib = 256\n"));
    let metrics = || curl(&lab.server, "http://127.0.0.1:8080/metrics", None);
    let counted = || {
        metric(
            &metrics(),
            "shardboot_dhcp_dropped_total{reason=\"receive_buffer_full\"}",
        )
    };
    assert_eq!(counted(), 0);

    // The burst arrives while the server cannot read: the buffer fills, the kernel drops
    // the rest.
    signal(pid, "-STOP");
    let offers = lab
        .client
        .run(move || {
            let mut client = RelayClient::new(RELAY, SERVER);
            for n in 0..BURST {
                let d = client.discover_raw(&mac(n), &[]);
                client.send_raw(&d);
            }
            client
        })
        .join()
        .unwrap();
    let dropped = kernel_drops(&lab);
    signal(pid, "-CONT");
    assert!(
        dropped > 0 && dropped < u64::from(BURST),
        "a 256 KiB buffer holds some of {BURST} DISCOVERs, not all: the kernel dropped {dropped}"
    );

    // Every DISCOVER the buffer held is answered.
    let mut client = offers;
    let mut answered = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && answered.len() as u64 + dropped < u64::from(BURST) {
        if let Some(reply) = client.recv_raw(Duration::from_millis(200)) {
            answered.insert(reply[4..8].to_vec());
        }
    }
    assert_eq!(answered.len() as u64, u64::from(BURST) - dropped);
    // And the server says how many it never saw, as the kernel does.
    let deadline = Instant::now() + Duration::from_secs(10);
    while counted() != dropped && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(counted(), dropped, "{}", metrics());

    // Machines whose DISCOVER was dropped send again, and are served.
    let answers = lab
        .client
        .run(move || {
            let macs: Vec<[u8; 6]> = (0..BURST).step_by(97).map(mac).collect();
            client.obtain(&macs, Duration::from_secs(5))
        })
        .join()
        .unwrap();
    for (i, a) in answers.iter().enumerate() {
        assert!(
            matches!(a, common::relay_client::Answer::Ack(_)),
            "machine {i}: {a:?}"
        );
    }
    drop(server);
}

/// A burst of machines on the server's own link, each asking for a broadcast reply (as
/// PXE firmware does): the OFFERs of one read burst leave together (`udp_batch`, one
/// GSO send for a run to 255.255.255.255), and each machine still gets its own OFFER,
/// whole, as a datagram of its own.
#[test]
fn a_burst_of_machines_on_the_link_gets_every_broadcast_offer_whole() {
    require_root!();
    const MACHINES: u32 = 200;
    let (lab, _dir, server, pid) = started("");
    let client_if = lab.client_if.clone();
    // The client side: one socket on port 68 of the client's link, as every machine's
    // firmware has (the replies are broadcast: it reads them all).
    let socket = lab
        .client
        .run(move || {
            let s =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
            s.set_reuse_address(true).unwrap();
            s.set_broadcast(true).unwrap();
            s.bind_device(Some(client_if.as_bytes())).unwrap();
            s.bind(&std::net::SocketAddr::from((Ipv4Addr::UNSPECIFIED, 68)).into())
                .unwrap();
            let s: std::net::UdpSocket = s.into();
            shardboot::sockopt::enlarge_recv_buffer(&s, 8 << 20);
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            s
        })
        .join()
        .unwrap();
    let discover = |n: u32| {
        let z = Ipv4Addr::UNSPECIFIED;
        let mut m = dhcproto::v4::Message::new_with_id(0x5b00_0000 + n, z, z, z, z, &mac(n));
        m.set_flags(dhcproto::v4::Flags::default().set_broadcast());
        m.opts_mut().insert(dhcproto::v4::DhcpOption::MessageType(
            dhcproto::v4::MessageType::Discover,
        ));
        dhcproto::Encodable::to_vec(&m).unwrap()
    };
    // Every DISCOVER queued while the server cannot read, so that it reads them in
    // bursts and its OFFERs go out in runs.
    signal(pid, "-STOP");
    for n in 0..MACHINES {
        socket
            .send_to(&discover(n), (Ipv4Addr::BROADCAST, 67))
            .unwrap();
    }
    signal(pid, "-CONT");
    let mut offers = std::collections::HashMap::new();
    let mut buf = [0u8; 1500];
    let deadline = Instant::now() + Duration::from_secs(10);
    while offers.len() < MACHINES as usize && Instant::now() < deadline {
        let Ok((len, _)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let m: dhcproto::v4::Message =
            dhcproto::Decodable::from_bytes(&buf[..len]).expect("each datagram one whole reply");
        if m.opcode() != dhcproto::v4::Opcode::BootReply {
            continue; // our own DISCOVERs, looped back to the broadcast socket
        }
        assert_eq!(m.opts().msg_type(), Some(dhcproto::v4::MessageType::Offer));
        let n = m.xid() - 0x5b00_0000;
        assert_eq!(
            &m.chaddr()[..6],
            &mac(n),
            "the OFFER for xid {:#x} names its machine",
            m.xid()
        );
        assert!(
            offers.insert(n, m.yiaddr()).is_none(),
            "one OFFER per machine"
        );
    }
    assert_eq!(
        offers.len(),
        MACHINES as usize,
        "every machine got its OFFER"
    );
    let addresses: HashSet<Ipv4Addr> = offers.values().copied().collect();
    assert_eq!(addresses.len(), offers.len(), "no address offered twice");
    let sent = metric(
        &curl(&lab.server, "http://127.0.0.1:8080/metrics", None),
        "shardboot_dhcp_sent_total",
    );
    assert_eq!(sent, u64::from(MACHINES), "each OFFER counted once as sent");
    drop(server);
}
