//! Three members on one segment serving DHCPv6 to machines behind a relay (the relay
//! sends every client message to all three servers, as a relay configured with the
//! members' addresses does): each machine is advertised by exactly its responsible
//! member (the bucket of the MAC in option 79), each address comes from that member's
//! share, no address goes to two machines; a SIGKILLed member's machines are then
//! answered by exactly one live member, still without a duplicate. The members share a
//! lease store (PostgreSQL, started by the test): the dead member's machines keep their
//! addresses when they Rebind, and a member restarted on an empty store reads every
//! binding before it hands out one. Each member answers with the server DUID its
//! configuration chose, and the relay names the clients' link only by its
//! Interface-Id (link-address 0), which `[[subnet6]] interface_id` maps to the range.

use crate::common;

use std::collections::HashMap;
use std::net::{Ipv6Addr, SocketAddrV6, UdpSocket};
use std::time::{Duration, Instant};

use common::db::{DbServer, Kind};
use common::members::wait_until;
use common::relay6::{relay_forward, relay_reply, RelayReply};
use common::segment::Segment;
use common::Server;
use dhcproto::v6::{DhcpOption, IAAddr, Message, MessageType, OptionCode, IANA};
use dhcproto::{Encodable, Encoder};
use shardboot::mac::MacAddr;
use shardboot::owner::responsible_member;

const NAMES: [&str; 3] = ["a", "b", "c"];
const RELAY: &str = "fd00:1::2";
/// The relay's link-address: 0, so only its Interface-Id (`rack1`) names the link.
const LINK: &str = "::";
/// The relayed link's range, shared among the members.
const RANGE: (&str, &str) = ("fd00:2::1000", "fd00:2::13ff");

fn member_v4(i: usize) -> String {
    format!("198.18.0.{}", 11 + i)
}

/// Member `i`'s chosen server DUID (`dhcp6.server_duid`): a DUID-EN (RFC 8415 §11.3).
fn member_duid(i: usize) -> Vec<u8> {
    vec![0, 2, 0, 0, 0x01, 0x57, 0xd0, i as u8]
}

fn member_v6(i: usize) -> Ipv6Addr {
    format!("fd00:1::{}", 11 + i).parse().unwrap()
}

/// Member `i`'s configuration; `store`: the shared lease store's table.
fn config(interface: &str, i: usize, store: &str) -> String {
    let members: Vec<(&str, String)> = NAMES
        .iter()
        .enumerate()
        .map(|(k, n)| (*n, member_v4(k)))
        .collect();
    format!(
        r#"
[dhcp]
interfaces = ["{interface}"]
takeover_secs = 3
relays = ["{RELAY}"]
[dhcp6]
interfaces = ["{interface}"]
server_duid = "{duid}"
{tables}
[[subnet]]
network = "198.18.0.0/16"
ranges = ["198.18.1.0 - 198.18.4.255"]
[[subnet6]]
network = "fd00:1::/64"
ranges = ["fd00:1::1000 - fd00:1::1fff"]
lease_time = 60
renewal_time = 2
rebinding_time = 4
[[subnet6]]
network = "fd00:2::/64"
ranges = ["{first} - {last}"]
interface_id = "rack1"
{store}"#,
        duid = member_duid(i)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":"),
        tables = common::members::segment_member_tables(member_v4(i), NAMES[i], &members),
        first = RANGE.0,
        last = RANGE.1,
    )
}

fn mac(n: u32) -> [u8; 6] {
    let b = n.to_be_bytes();
    [0x02, 0x6e, b[0], b[1], b[2], b[3]]
}

fn responsible(m: &[u8; 6], live: &[&str]) -> usize {
    let name = responsible_member(&MacAddr(*m), live).unwrap();
    NAMES.iter().position(|n| *n == name).unwrap()
}

/// The member whose share of the relayed range holds `ip`.
fn share_owner(ip: Ipv6Addr) -> Option<usize> {
    // The share depends on the member list only; the store URL is never opened here.
    let store = "[store]\nshared = \"postgres://db.test/shardboot\"\n";
    let cfg = |i| {
        shardboot::config::Config::from_toml_with_overrides(&config("x", i, store), &[]).unwrap()
    };
    (0..3).find(|&i| {
        let c = cfg(i);
        let e = shardboot::dhcp6::engine::Engine6::new(&c, vec![0, 4, i as u8], Vec::new(), 0);
        e.in_share(ip)
    })
}

fn message(
    kind: MessageType,
    m: &[u8; 6],
    server: Option<&[u8]>,
    addr: Option<Ipv6Addr>,
    elapsed: u16,
) -> Vec<u8> {
    let mut msg = Message::new_with_id(kind, [m[3], m[4], m[5]]);
    let o = msg.opts_mut();
    // DUID-LL (RFC 8415 §11.4), Ethernet.
    o.insert(DhcpOption::ClientId([&[0u8, 3, 0, 1][..], m].concat()));
    if let Some(s) = server {
        o.insert(DhcpOption::ServerId(s.to_vec()));
    }
    let mut ia = dhcproto::v6::DhcpOptions::new();
    if let Some(addr) = addr {
        ia.insert(DhcpOption::IAAddr(IAAddr {
            addr,
            preferred_life: 0,
            valid_life: 0,
            opts: Default::default(),
        }));
    }
    o.insert(DhcpOption::IANA(IANA {
        id: 1,
        t1: 0,
        t2: 0,
        opts: ia,
    }));
    o.insert(DhcpOption::ElapsedTime(elapsed));
    let mut out = Vec::new();
    msg.encode(&mut Encoder::new(&mut out)).unwrap();
    out
}

/// What one member said to one machine.
#[derive(Debug, Clone)]
struct Heard {
    member: usize,
    kind: MessageType,
    server_id: Vec<u8>,
    addr: Option<Ipv6Addr>,
}

fn heard(member: usize, r: &RelayReply) -> Heard {
    let server_id = match r.message.opts().get(OptionCode::ServerId) {
        Some(DhcpOption::ServerId(s)) => s.clone(),
        _ => Vec::new(),
    };
    let addr = match r.message.opts().get(OptionCode::IANA) {
        Some(DhcpOption::IANA(ia)) => match ia.opts.get(OptionCode::IAAddr) {
            Some(DhcpOption::IAAddr(a)) => Some(a.addr),
            _ => None,
        },
        _ => None,
    };
    Heard {
        member,
        kind: r.message.msg_type(),
        server_id,
        addr,
    }
}

/// Relays one message per machine to every member in `to`, and collects what comes
/// back within `wait`, by machine (the transaction id's three MAC octets).
fn relay_round(
    socket: &UdpSocket,
    msgs: &[([u8; 6], Vec<u8>)],
    to: &[usize],
    wait: Duration,
) -> HashMap<[u8; 6], Vec<Heard>> {
    for (m, inner) in msgs {
        let peer: Ipv6Addr = format!(
            "fe80::{:x}:{:x}",
            u16::from_be_bytes([m[2], m[3]]),
            u16::from_be_bytes([m[4], m[5]])
        )
        .parse()
        .unwrap();
        let fwd = relay_forward(LINK.parse().unwrap(), peer, b"rack1", Some(*m), inner);
        for &i in to {
            socket
                .send_to(&fwd, SocketAddrV6::new(member_v6(i), 547, 0, 0))
                .unwrap();
        }
    }
    let mut out: HashMap<[u8; 6], Vec<Heard>> = HashMap::new();
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 4096];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        socket
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        let Ok((n, from)) = socket.recv_from(&mut buf) else {
            break;
        };
        let std::net::SocketAddr::V6(from) = from else {
            continue;
        };
        let member = (0..3)
            .find(|&i| member_v6(i) == *from.ip())
            .expect("a member answered");
        let r = relay_reply(&buf[..n]);
        let xid = r.message.xid();
        let m = msgs
            .iter()
            .map(|(m, _)| *m)
            .find(|m| [m[3], m[4], m[5]] == xid)
            .expect("a machine's transaction");
        out.entry(m).or_default().push(heard(member, &r));
    }
    out
}

/// Solicit then Request for each of `machines` through every member in `to`; returns
/// each machine's address and who bound it, after checking who answered.
fn boot(
    socket: &UdpSocket,
    machines: &[[u8; 6]],
    to: &[usize],
    live: &[&str],
    leases: &mut HashMap<Ipv6Addr, [u8; 6]>,
) -> [usize; 3] {
    let solicits: Vec<_> = machines
        .iter()
        .map(|m| (*m, message(MessageType::Solicit, m, None, None, 0)))
        .collect();
    let adverts = relay_round(socket, &solicits, to, Duration::from_millis(1500));
    let mut requests = Vec::new();
    for m in machines {
        let h = adverts.get(m).cloned().unwrap_or_default();
        assert_eq!(h.len(), 1, "{m:02x?}: one Advertise, got {h:?}");
        let h = &h[0];
        assert_eq!(h.kind, MessageType::Advertise);
        assert_eq!(
            h.server_id,
            member_duid(h.member),
            "the member's chosen DUID"
        );
        assert_eq!(
            h.member,
            responsible(m, live),
            "{m:02x?} advertised by {}",
            NAMES[h.member]
        );
        let addr = h.addr.expect("an address");
        assert_eq!(
            share_owner(addr),
            Some(h.member),
            "{addr} outside {}'s share",
            NAMES[h.member]
        );
        requests.push((
            *m,
            message(MessageType::Request, m, Some(&h.server_id), Some(addr), 0),
            h.member,
            addr,
        ));
    }
    let msgs: Vec<_> = requests
        .iter()
        .map(|(m, r, _, _)| (*m, r.clone()))
        .collect();
    let replies = relay_round(socket, &msgs, to, Duration::from_millis(1500));
    let mut by_member = [0usize; 3];
    for (m, _, member, addr) in &requests {
        let h = replies.get(m).cloned().unwrap_or_default();
        assert_eq!(h.len(), 1, "{m:02x?}: one Reply, got {h:?}");
        assert_eq!(
            (h[0].kind, h[0].member, h[0].addr),
            (MessageType::Reply, *member, Some(*addr)),
            "{m:02x?}"
        );
        assert!(leases.insert(*addr, *m).is_none(), "{addr} given twice");
        by_member[*member] += 1;
    }
    by_member
}

/// Three members on one bridge, each with its v4 (member URL) and v6 address, serving.
/// The database server and the members' `[store]` table come back too: a member
/// restarted in the test needs them.
fn three_members() -> (
    Segment,
    DbServer,
    String,
    Vec<tempfile::TempDir>,
    Vec<Server>,
) {
    let addrs: Vec<String> = (0..3).map(|i| format!("{}/16", member_v4(i))).collect();
    let addr_refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let seg = Segment::new(&addr_refs);
    for (i, m) in seg.member_ifs.iter().enumerate() {
        seg.servers.ip(&[
            "addr",
            "add",
            &format!("{}/64", member_v6(i)),
            "dev",
            m,
            "nodad",
        ]);
    }
    let mut db = DbServer::start(Kind::Postgres, Some(&seg.servers));
    let store = db.store_table();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let servers: Vec<Server> = (0..3)
        .map(|i| {
            Server::start(
                &seg.servers,
                dirs[i].path(),
                &config(&seg.member_ifs[i], i, &store),
            )
        })
        .collect();
    for s in &servers {
        wait_until("DHCPv6 listening", Duration::from_secs(10), || {
            s.log_text().contains("DHCPv6 listening")
        });
    }
    (seg, db, store, dirs, servers)
}

#[test]
fn three_members_serve_relayed_v6_machines_owner_first_without_duplicates() {
    require_root!();
    let (seg, _db, store, _dirs, mut servers) = three_members();
    seg.clients.ip(&[
        "addr",
        "add",
        &format!("{RELAY}/64"),
        "dev",
        &seg.client_if,
        "nodad",
    ]);
    let socket = seg
        .clients
        .run(|| common::bind_fixed_port(format!("[{RELAY}]:547")))
        .join()
        .unwrap();

    let mut leases = HashMap::new();
    let machines: Vec<[u8; 6]> = (1..=150).map(mac).collect();
    let by_member = boot(&socket, &machines, &[0, 1, 2], &NAMES, &mut leases);
    assert_eq!(leases.len(), 150);
    assert!(
        by_member.iter().all(|&n| n > 20),
        "uneven buckets {by_member:?}"
    );
    eprintln!("150 v6 machines bound by a/b/c: {by_member:?}");

    // c dies; once a and b find it dead, its bucket is answered by exactly one of them.
    servers[2].kill9();
    wait_until("c seen dead", Duration::from_secs(10), || {
        (0..2).all(|i| seg.metric(member_v4(i), "shardboot_member_up{member=\"c\"}") == Some(0))
    });
    let more: Vec<[u8; 6]> = (1000..1100).map(mac).collect();
    let by_member = boot(&socket, &more, &[0, 1, 2], &["a", "b"], &mut leases);
    assert_eq!(by_member[2], 0);
    assert_eq!(leases.len(), 250);

    // c's machines Rebind (RFC 8415 §18.2.5: their Renews to c go unanswered). a and b
    // hold c's leases, replicated before c answered its clients, so every one keeps
    // its address; without them the address lies in no live member's share and the
    // machine would be told NoBinding.
    let of_c: Vec<([u8; 6], Ipv6Addr)> = leases
        .iter()
        .filter(|(a, _)| share_owner(**a) == Some(2))
        .map(|(a, m)| (*m, *a))
        .collect();
    assert!(of_c.len() > 20, "c bound {} machines", of_c.len());
    let rebinds: Vec<_> = of_c
        .iter()
        .map(|(m, a)| (*m, message(MessageType::Rebind, m, None, Some(*a), 0)))
        .collect();
    let replies = relay_round(&socket, &rebinds, &[0, 1, 2], Duration::from_millis(2000));
    for (m, a) in &of_c {
        let h = replies.get(m).cloned().unwrap_or_default();
        assert!(!h.is_empty(), "{m:02x?} rebinding {a}: no reply");
        for r in &h {
            assert_eq!(
                (r.kind, r.addr),
                (MessageType::Reply, Some(*a)),
                "{m:02x?} rebinding {a}: {} answered {r:?}",
                NAMES[r.member]
            );
        }
    }
    eprintln!(
        "{} of c's machines rebound with their addresses",
        of_c.len()
    );

    // b is rescheduled onto an empty store: it reads every v6 binding from the shared
    // store before it answers anyone, so the machines it binds next get addresses nobody holds (its
    // share starts with the ones its earlier run handed out).
    servers[1].kill9();
    let fresh = tempfile::tempdir().unwrap();
    servers[1] = Server::start(
        &seg.servers,
        fresh.path(),
        &config(&seg.member_ifs[1], 1, &store),
    );
    wait_until("b knows every v6 lease", Duration::from_secs(15), || {
        seg.metric(member_v4(1), "shardboot_dhcp6_leases")
            .is_some_and(|n| n >= 250)
    });
    // A member starts believing every member alive: b answers as the others once it
    // has found c dead.
    wait_until(
        "a sees b up, b sees c dead",
        Duration::from_secs(10),
        || {
            seg.metric(member_v4(0), "shardboot_member_up{member=\"b\"}") == Some(1)
                && seg.metric(member_v4(1), "shardboot_member_up{member=\"c\"}") == Some(0)
        },
    );
    let last: Vec<[u8; 6]> = (2000..2060).map(mac).collect();
    let by_member = boot(&socket, &last, &[0, 1, 2], &["a", "b"], &mut leases);
    assert!(by_member[1] > 10, "b bound {by_member:?}");
    assert_eq!(leases.len(), 310);
    drop(servers);
}

/// A real client, ISC `dhclient -6` on the members' link (T1 2 s, T2 4 s): bound by
/// its responsible member, which is then SIGKILLed. Its Renews go unanswered; at T2 it
/// Rebinds, and a live member, which followed the binding from the shared store,
/// answers with the same address, then renews it.
#[test]
fn dhclient6_keeps_its_address_when_its_member_dies() {
    require_root!();
    let (seg, _db, _store, dirs, mut servers) = three_members();
    common::lab6::wait_addresses_usable(&seg.clients, &seg.client_if);
    let events = dirs[0].path().join("events6");
    let hook = common::clients::dhclient_hook(dirs[0].path(), "dhclient6-script", &events);
    let status = seg
        .clients
        .command("dhclient")
        .args(["-6", "-1", "-sf"])
        .arg(&hook)
        .arg("-lf")
        .arg(dirs[0].path().join("dhclient6.leases"))
        .arg("-pf")
        .arg(dirs[0].path().join("dhclient6.pid"))
        .arg(&seg.client_if)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    let _stop = StopDaemon(dirs[0].path().join("dhclient6.pid"));
    assert!(status.success(), "dhclient -6 found no server");
    let bound = common::clients::wait_event(&events, "BOUND6", 1);
    let (ip, first_server) = (bound[1].clone(), bound[4].clone());
    let mac: MacAddr = client_mac(&seg).parse().unwrap();
    let owner = responsible(&mac.0, &NAMES);
    assert_eq!(
        share_owner(ip.parse().unwrap()),
        Some(owner),
        "{ip} from {}'s share",
        NAMES[owner]
    );

    servers[owner].kill9();
    let rebound = common::clients::wait_event(&events, "REBIND6", 1);
    assert_eq!(rebound[1], ip, "rebound with its address");
    assert_ne!(rebound[4], first_server, "answered by another member");
    // The new server renews it at the next T1.
    let renews_before = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("RENEW6 ") && l.ends_with(&rebound[4]))
        .count();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&events).unwrap();
        let renewed = text
            .lines()
            .filter(|l| l.starts_with(&format!("RENEW6 {ip} ")) && l.ends_with(&rebound[4]))
            .count();
        if renewed > renews_before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no renewal by the new server:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills the daemon whose pid file this is, when the test ends (pass or fail): it
/// would outlive the namespaces.
struct StopDaemon(std::path::PathBuf);

impl Drop for StopDaemon {
    fn drop(&mut self) {
        if let Some(pid) = std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        }
    }
}

fn client_mac(seg: &Segment) -> String {
    let out = seg
        .clients
        .command("cat")
        .arg(format!("/sys/class/net/{}/address", seg.client_if))
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
