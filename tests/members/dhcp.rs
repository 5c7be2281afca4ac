//! Three members on one L2 segment (one bridge), 300 simulated machines broadcasting like
//! PXE ROMs: every machine is answered by exactly its responsible member (the RFC 3074
//! bucket over the live members), every address comes from the answering member's slice,
//! no address is handed out twice; a SIGKILLed member's machines are taken over by the
//! others once `secs` reaches `takeover_secs`, and the member comes back with its leases.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::db::{DbServer, Kind};
use common::members::wait_until;
use common::segment::{Seen, Segment};
use common::Server;
use dhcproto::v4::MessageType;
use shardboot::mac::MacAddr;
use shardboot::owner::responsible_member;
use shardboot::owner::shares::Split;
use shardboot::owner::MemberList;

const NAMES: [&str; 3] = ["a", "b", "c"];
const RANGE_START: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 0);
const RANGE_LEN: u32 = 1024;
const TAKEOVER_SECS: u16 = 3;

fn member_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, 11 + i as u8)
}

fn member_index(ip: Ipv4Addr) -> usize {
    (0..3)
        .find(|&i| member_ip(i) == ip)
        .expect("a member's address")
}

/// Whether `ip` is in member `member`'s share (of `names`) of the range.
fn in_share_of(names: &[&str], ip: Ipv4Addr, member: usize) -> bool {
    let last = Ipv4Addr::from(u32::from(RANGE_START) + RANGE_LEN - 1);
    let shares = MemberList::new(names.iter().copied()).shares(Split::CURRENT, RANGE_START, last);
    shares.owner_of(u32::from(ip) - u32::from(RANGE_START)) == Some(member)
}

fn in_slice(ip: Ipv4Addr, member: usize) -> bool {
    in_share_of(&NAMES, ip, member)
}

/// Member `i`'s configuration; `store`: the shared lease store's table
/// ([`DbServer::store_table`]), which several members serving DHCP need.
fn config(interface: &str, i: usize, store: &str) -> String {
    config_with(interface, i, &NAMES, store)
}

fn config_with(interface: &str, i: usize, names: &[&str], store: &str) -> String {
    let members: Vec<(&str, String)> = names
        .iter()
        .enumerate()
        .map(|(k, n)| (*n, member_ip(k).to_string()))
        .collect();
    format!(
        r#"
[dhcp]
interfaces = ["{interface}"]
takeover_secs = {TAKEOVER_SECS}
{tables}
[[subnet]]
network = "198.18.0.0/16"
ranges = ["198.18.1.0 - 198.18.4.255"]
lease_time = 3600
{store}"#,
        tables = common::members::segment_member_tables(member_ip(i), NAMES[i], &members),
    )
}

fn mac(n: u32) -> [u8; 6] {
    let b = n.to_be_bytes();
    [0x02, 0x6d, b[0], b[1], b[2], b[3]]
}

fn responsible(m: &[u8; 6], live: &[&str]) -> usize {
    let name = responsible_member(&MacAddr(*m), live).unwrap();
    NAMES.iter().position(|n| *n == name).unwrap()
}

fn offers(seen: &[Seen]) -> Vec<Seen> {
    seen.iter()
        .filter(|s| s.kind == MessageType::Offer)
        .copied()
        .collect()
}

/// `curl` a member's metrics from inside the servers namespace.
fn metric(seg: &Segment, member: usize, prefix: &str) -> Option<u64> {
    seg.metrics(member_ip(member))
        .lines()
        .find_map(|l| l.strip_prefix(prefix).map(|v| v.trim().parse().ok()))
        .flatten()
}

#[test]
fn three_members_share_a_segment_without_duplicates_and_take_over() {
    require_root!();
    let addrs: Vec<String> = (0..3).map(|i| format!("{}/16", member_ip(i))).collect();
    let addr_refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let seg = Segment::new(&addr_refs);
    let mut db = DbServer::start(Kind::Postgres, Some(&seg.servers));
    let store = db.store_table();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut servers: Vec<Server> = (0..3)
        .map(|i| {
            Server::start(
                &seg.servers,
                dirs[i].path(),
                &config(&seg.member_ifs[i], i, &store),
            )
        })
        .collect();
    let mut client = seg.client();
    // The client socket was made inside the namespace; using it from this thread is
    // fine (a socket keeps its namespace).

    // 1. 300 machines, all members alive: exactly one OFFER each, from the responsible
    // member, out of its slice; the ACK comes from the same member. Every tenth sends
    // `secs` byte-swapped (0x0100 = 1 s little-endian): still no takeover.
    let macs: Vec<[u8; 6]> = (1..=300).map(mac).collect();
    let mut leases: HashMap<Ipv4Addr, [u8; 6]> = HashMap::new();
    let mut by_member = [0usize; 3];
    for chunk in macs.chunks(100) {
        let mut seen = client.discover(chunk, 0, Duration::from_millis(1500));
        let swapped: Vec<[u8; 6]> = chunk.iter().step_by(10).copied().collect();
        let seen_swapped = client.discover(&swapped, 0x0100, Duration::from_millis(1000));
        for (m, s) in swapped.iter().zip(seen_swapped) {
            assert_eq!(offers(&s).len(), 1, "{m:02x?} with swapped secs: {s:?}");
        }
        let mut requests = Vec::new();
        for (m, s) in chunk.iter().zip(seen.iter_mut()) {
            let o = offers(s);
            assert_eq!(o.len(), 1, "{m:02x?}: offers {o:?}");
            let who = member_index(o[0].server);
            assert_eq!(
                who,
                responsible(m, &NAMES),
                "{m:02x?} answered by {}",
                NAMES[who]
            );
            assert!(
                in_slice(o[0].yiaddr, who),
                "{} outside {}'s slice",
                o[0].yiaddr,
                NAMES[who]
            );
            requests.push((*m, o[0].server, o[0].yiaddr));
        }
        let acks = client.request(&requests, Duration::from_millis(1500));
        for ((m, server, ip), s) in requests.iter().zip(acks) {
            assert_eq!(
                s,
                vec![Seen {
                    kind: MessageType::Ack,
                    server: *server,
                    yiaddr: *ip,
                    lease_secs: None,
                }],
                "{m:02x?}"
            );
            assert!(leases.insert(*ip, *m).is_none(), "{ip} given twice");
            by_member[member_index(*server)] += 1;
        }
    }
    assert_eq!(leases.len(), 300);
    assert!(
        by_member.iter().all(|&n| n > 50),
        "uneven buckets {by_member:?}"
    );
    eprintln!("300 machines answered by a/b/c: {by_member:?}");
    // Each member counts every request it stayed silent on, whether it was decided from
    // the raw packet or after a full decode: 330 DISCOVERs (every tenth machine sent a
    // second, byte-swapped one) and 300 REQUESTs, each naming its answering member.
    for i in 0..3 {
        let not_mine = macs
            .chunks(100)
            .flat_map(|c| c.iter().chain(c.iter().step_by(10)))
            .filter(|m| responsible(m, &NAMES) != i)
            .count() as u64;
        let other_server = (300 - by_member[i]) as u64;
        let count = |prefix: &str| metric(&seg, i, prefix).unwrap_or(0);
        assert_eq!(
            [
                count("shardboot_dhcp_requests_total{type=\"discover\"} "),
                count("shardboot_dhcp_requests_total{type=\"request\"} "),
                count("shardboot_dhcp_ignored_total{reason=\"not_responsible\"} "),
                count("shardboot_dhcp_ignored_total{reason=\"other_server\"} "),
                count("shardboot_dhcp_responsibility_total{why=\"other_member\"} "),
            ],
            [330, 300, not_mine, other_server, not_mine + other_server],
            "member {}: requests, silences and responsibility",
            NAMES[i]
        );
    }

    // A machine that has waited `takeover_secs` is answered by every member (each from
    // its own slice); it takes one offer and the others withdraw theirs.
    let waited: Vec<[u8; 6]> = (2001..2100).map(mac).take(5).collect();
    let seen = client.discover(&waited, TAKEOVER_SECS, Duration::from_millis(1500));
    let mut requests = Vec::new();
    for (m, s) in waited.iter().zip(&seen) {
        let o = offers(s);
        let who: HashSet<usize> = o.iter().map(|x| member_index(x.server)).collect();
        assert_eq!(who.len(), 3, "{m:02x?}: {o:?}");
        assert!(o.iter().all(|x| in_slice(x.yiaddr, member_index(x.server))));
        let pick = o
            .iter()
            .find(|x| member_index(x.server) == responsible(m, &NAMES))
            .unwrap();
        requests.push((*m, pick.server, pick.yiaddr));
    }
    for ((m, server, ip), s) in requests
        .iter()
        .zip(client.request(&requests, Duration::from_millis(1500)))
    {
        assert_eq!(
            s,
            vec![Seen {
                kind: MessageType::Ack,
                server: *server,
                yiaddr: *ip,
                lease_secs: None,
            }],
            "{m:02x?}"
        );
        assert!(leases.insert(*ip, *m).is_none(), "{ip} given twice");
    }

    // 2. SIGKILL b. Its machines get no answer while their secs is low and b is not yet
    // known dead; a machine retrying once a second (secs counting up) is taken over.
    servers[1].kill9();
    let b_owned: Vec<[u8; 6]> = (1001..1200)
        .map(mac)
        .filter(|m| responsible(m, &NAMES) == 1)
        .take(30)
        .collect();
    let started = Instant::now();
    let first = b_owned[0];
    // Like a PXE ROM: a DISCOVER a second, `secs` counting the seconds since the first.
    let (taken_over, offered_at) = loop {
        let secs = started.elapsed().as_secs() as u16;
        if let Some(o) = client.first_offer(&first, secs, Duration::from_millis(1000)) {
            break o;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "nobody took over"
        );
    };
    let ack = client.request(
        &[(first, taken_over.server, taken_over.yiaddr)],
        Duration::from_secs(1),
    );
    assert_eq!(ack[0][0].kind, MessageType::Ack);
    eprintln!(
        "takeover after SIGKILL: first OFFER {:.2} s after the first DISCOVER (by {}; \
         b detected dead by health probes or secs >= {TAKEOVER_SECS})",
        (offered_at - started).as_secs_f64(),
        NAMES[member_index(taken_over.server)]
    );
    assert!(leases.insert(taken_over.yiaddr, first).is_none());
    // The rest, with secs at the threshold: answered by a and/or c from their own
    // slices, never by b, never a duplicate.
    let seen = client.discover(&b_owned[1..], TAKEOVER_SECS, Duration::from_millis(1500));
    let mut requests = Vec::new();
    for (m, s) in b_owned[1..].iter().zip(&seen) {
        let o = offers(s);
        assert!(!o.is_empty(), "{m:02x?} not taken over");
        for x in &o {
            let who = member_index(x.server);
            assert_ne!(who, 1);
            assert!(in_slice(x.yiaddr, who));
        }
        requests.push((*m, o[0].server, o[0].yiaddr));
    }
    for ((m, server, ip), s) in requests
        .iter()
        .zip(client.request(&requests, Duration::from_millis(1500)))
    {
        assert!(
            s.contains(&Seen {
                kind: MessageType::Ack,
                server: *server,
                yiaddr: *ip,
                lease_secs: None,
            }),
            "{m:02x?}: {s:?}"
        );
        assert!(leases.insert(*ip, *m).is_none(), "{ip} given twice");
    }
    wait_until("a sees b dead", Duration::from_secs(10), || {
        metric(&seg, 0, "shardboot_member_up{member=\"b\"} ") == Some(0)
    });
    assert!(
        metric(
            &seg,
            0,
            "shardboot_dhcp_responsibility_total{why=\"takeover\"} "
        )
        .unwrap_or(0)
            + metric(
                &seg,
                2,
                "shardboot_dhcp_responsibility_total{why=\"takeover\"} "
            )
            .unwrap_or(0)
            > 0
    );

    // 3. b restarts on its store: its machines rebooting (INIT-REBOOT) get their old
    // addresses back from b (and from the others, which hold the same leases).
    servers[1].restart();
    // Every member knows b's leases (followed from the shared store): one that still
    // counts b dead would
    // answer b's machines itself, so the check waits until both see b again.
    for other in [0, 2] {
        wait_until("a and c see b again", Duration::from_secs(10), || {
            metric(&seg, other, "shardboot_member_up{member=\"b\"} ") == Some(1)
        });
    }
    let b_leases: Vec<([u8; 6], Ipv4Addr)> = leases
        .iter()
        .filter(|(ip, _)| in_slice(**ip, 1))
        .map(|(ip, m)| (*m, *ip))
        .collect();
    assert!(!b_leases.is_empty());
    // Every member holds these leases (followed from the shared store), so each may
    // ACK; all on the machine's own address, b among them.
    let replies = client.init_reboot(&b_leases, Duration::from_millis(1500));
    for ((m, ip), s) in b_leases.iter().zip(replies) {
        assert!(
            s.iter()
                .all(|x| x.kind == MessageType::Ack && x.yiaddr == *ip)
                && s.iter().any(|x| x.server == member_ip(1)),
            "{m:02x?}: {s:?}"
        );
    }

    // 4. The three stores: every member follows the shared store (every poll_ms), so
    // each comes to hold every ACKed lease, bound to the client it was ACKed to, and no
    // store holds an address for another client than another store does.
    for m in 0..3 {
        wait_until(
            "every member holds as many records",
            Duration::from_secs(10),
            || metric(&seg, m, "shardboot_leases ").is_some_and(|n| n >= leases.len() as u64),
        );
    }
    // Offers of its own count too: two more polls make sure the last rows are in.
    std::thread::sleep(Duration::from_secs(2));
    let mut holder: HashMap<Ipv4Addr, String> = HashMap::new();
    for (i, s) in servers.iter_mut().enumerate() {
        s.stop();
        let stored = s.leases_json();
        let mut mine = HashSet::new();
        for l in stored.as_array().unwrap() {
            let ip: Ipv4Addr = l["ip"].as_str().unwrap().parse().unwrap();
            let mac = l["mac"].as_str().unwrap().to_string();
            let first = holder.entry(ip).or_insert_with(|| mac.clone());
            assert_eq!(*first, mac, "{ip} held for two clients ({})", NAMES[i]);
            mine.insert(ip);
        }
        for ip in leases.keys() {
            assert!(mine.contains(ip), "{ip} missing from {}'s store", NAMES[i]);
        }
    }
}

#[test]
fn a_member_with_a_different_member_list_refuses_to_start() {
    require_root!();
    let seg = Segment::new(&["198.18.0.11/16", "198.18.0.12/16"]);
    let mut db = DbServer::start(Kind::Postgres, Some(&seg.servers));
    let store = db.store_table();
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    // a runs with the list a, b, c.
    let _a = Server::start(
        &seg.servers,
        dirs[0].path(),
        &config(&seg.member_ifs[0], 0, &store),
    );
    wait_until("a's HTTP up", Duration::from_secs(10), || {
        metric(&seg, 0, "shardboot_member_up{member=\"a\"} ") == Some(1)
    });
    // b is started with only a and b: its slices would overlap a's.
    let text = config(&seg.member_ifs[1], 1, &store).replace(
        "[[member]]\nname = \"c\"\nhttp_url = \"http://198.18.0.13:8080\"\n",
        "",
    );
    assert!(!text.contains("name = \"c\""));
    let path = dirs[1].path().join("b.toml");
    std::fs::write(&path, text).unwrap();
    let mut child = seg
        .servers
        .command(env!("CARGO_BIN_EXE_shardboot"))
        .arg("--config")
        .arg(&path)
        .arg("--state-dir")
        .arg(dirs[1].path().join("state"))
        .arg("serve")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("b started although its member list differs from a's");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(err.contains("different [[member]] list"), "{err}");
    assert!(!err.contains("DHCP listening"), "{err}");
}

#[test]
fn adding_a_member_never_hands_out_an_address_twice() {
    require_root!();
    let addrs: Vec<String> = (0..3).map(|i| format!("{}/16", member_ip(i))).collect();
    let addr_refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let seg = Segment::new(&addr_refs);
    let mut db = DbServer::start(Kind::Postgres, Some(&seg.servers));
    let store = db.store_table();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut client = seg.client();

    // a and b serve the range in halves; 60 machines take leases.
    let two = ["a", "b"];
    let mut ab: Vec<Server> = (0..2)
        .map(|i| {
            Server::start(
                &seg.servers,
                dirs[i].path(),
                &config_with(&seg.member_ifs[i], i, &two, &store),
            )
        })
        .collect();
    let old_slice = |ip: Ipv4Addr, m: usize| in_share_of(&two, ip, m);
    let macs: Vec<[u8; 6]> = (3001..3061).map(mac).collect();
    let seen = client.discover(&macs, 0, Duration::from_millis(1500));
    let requests: Vec<_> = macs
        .iter()
        .zip(&seen)
        .map(|(m, s)| {
            let o = offers(s);
            assert_eq!(o.len(), 1, "{m:02x?}: {o:?}");
            assert!(old_slice(o[0].yiaddr, member_index(o[0].server)));
            (*m, o[0].server, o[0].yiaddr)
        })
        .collect();
    let mut leased: HashSet<Ipv4Addr> = HashSet::new();
    for s in client.request(&requests, Duration::from_millis(1500)) {
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].kind, MessageType::Ack);
        assert!(leased.insert(s[0].yiaddr));
    }

    // All stop; a and b come back with the list a, b, c, then c joins on an empty store.
    for s in &mut ab {
        s.stop();
    }
    drop(ab);
    let servers: Vec<Server> = (0..3)
        .map(|i| {
            Server::start(
                &seg.servers,
                dirs[i].path(),
                &config(&seg.member_ifs[i], i, &store),
            )
        })
        .collect();
    // Every member read the database's bindings before it answered: c, on an empty
    // store, knows the 60 leases a and b gave, and nobody waits out a transition.
    for (m, name) in NAMES.iter().enumerate() {
        let until = metric(&seg, m, "shardboot_dhcp_transition_until_seconds ");
        assert_eq!(until.unwrap_or(0), 0, "{name} in a transition");
    }
    assert!(
        servers[2]
            .log_text()
            .contains("bindings read from the shared lease store leases=60"),
        "{}",
        servers[2].log_text()
    );

    // 90 new machines that have waited long enough for anyone to answer: every offer
    // comes from the answering member's new share, and none is an address the 60
    // machines still hold.
    let macs: Vec<[u8; 6]> = (4001..4091).map(mac).collect();
    let mut seen = client.discover(&macs, TAKEOVER_SECS, Duration::from_millis(2000));
    // A machine whose DISCOVER or OFFER was lost sends again, as a real client does
    // (CI once lost one while QEMU tests loaded both cores).
    let unanswered: Vec<usize> = (0..macs.len())
        .filter(|&i| offers(&seen[i]).is_empty())
        .collect();
    if !unanswered.is_empty() {
        let again: Vec<[u8; 6]> = unanswered.iter().map(|&i| macs[i]).collect();
        let retried = client.discover(&again, TAKEOVER_SECS, Duration::from_millis(2000));
        for (i, s) in unanswered.into_iter().zip(retried) {
            seen[i] = s;
        }
    }
    let mut requests = Vec::new();
    for (m, s) in macs.iter().zip(&seen) {
        let o = offers(s);
        assert!(!o.is_empty(), "{m:02x?} got no offer");
        for x in &o {
            let who = member_index(x.server);
            assert!(in_slice(x.yiaddr, who), "{x:?}");
            assert!(
                !leased.contains(&x.yiaddr),
                "{} offered while still leased",
                x.yiaddr
            );
        }
        requests.push((*m, o[0].server, o[0].yiaddr));
    }
    for ((m, server, ip), s) in requests
        .iter()
        .zip(client.request(&requests, Duration::from_millis(1500)))
    {
        assert!(
            s.contains(&Seen {
                kind: MessageType::Ack,
                server: *server,
                yiaddr: *ip,
                lease_secs: None,
            }),
            "{m:02x?}: {s:?}"
        );
        assert!(leased.insert(*ip), "{ip} given twice");
    }
}

/// Stands in for member `b` at its address: answers every `/healthz` with a member list
/// that differs from a's, a transition that never ends and a proof made without the
/// secret. Returns how many probes it answered once `stop` is set.
fn forge_member_b(
    seg: &Segment,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    let addr = std::net::SocketAddr::from((member_ip(1), 8080));
    seg.servers.run(move || {
        let listener = std::net::TcpListener::bind(addr).expect("bind b's address");
        listener.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut answered = 0;
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            let Ok((mut conn, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            conn.set_nonblocking(false).unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            let mut request = [0u8; 4096];
            let _ = conn.read(&mut request);
            let forged = format!(
                "HTTP/1.1 200 OK\r\nx-shardboot-member: b\r\nx-shardboot-members: 0000000000000000\r\n\
                 x-shardboot-transition-until: {}\r\nx-shardboot-proof: {}\r\n\
                 content-length: 3\r\nconnection: close\r\n\r\nok\n",
                u64::MAX,
                "0".repeat(64),
            );
            if conn.write_all(forged.as_bytes()).is_ok() {
                answered += 1;
            }
        }
        answered
    })
}

#[test]
fn a_forged_member_cannot_stop_a_member_or_freeze_its_allocation() {
    require_root!();
    let seg = Segment::new(&["198.18.0.11/16", "198.18.0.12/16"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let forger = forge_member_b(&seg, stop.clone());
    let two = ["a", "b"];
    let mut db = DbServer::start(Kind::Postgres, Some(&seg.servers));
    let store = db.store_table();
    let secure = config_with(&seg.member_ifs[0], 0, &two, &store);

    // No member secret at all: with the shared store nothing a member says over HTTP
    // is believed, or even asked. a starts, finds b dead because the database has no
    // heartbeat row of b's, adopts no transition and answers every machine itself.
    let dir = tempfile::tempdir().unwrap();
    let without_secret = secure.replace(&common::member_secret_line(), "");
    assert_ne!(without_secret, secure);
    let a = Server::start(&seg.servers, dir.path(), &without_secret);
    wait_until("b dead: no heartbeat row", Duration::from_secs(20), || {
        metric(&seg, 0, "shardboot_member_up{member=\"b\"} ") == Some(0)
    });
    assert_eq!(
        metric(&seg, 0, "shardboot_dhcp_transition_until_seconds "),
        Some(0)
    );
    assert!(
        a.log_text().contains("its heartbeat row is stale"),
        "{}",
        a.log_text()
    );
    let mut client = seg.client();
    let macs: Vec<[u8; 6]> = (5001..5021).map(mac).collect();
    let seen = client.discover(&macs, 0, Duration::from_millis(1500));
    for (m, s) in macs.iter().zip(&seen) {
        let o = offers(s);
        assert_eq!(o.len(), 1, "{m:02x?}: {o:?}");
        assert_eq!(o[0].server, member_ip(0));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        forger.join().unwrap(),
        0,
        "a member asked b's address over HTTP"
    );
}
