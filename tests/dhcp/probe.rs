//! Conflict probes before offering an address inherited from a departed member, with
//! real sockets on one bridge: members `a` and `b` follow a members file; a "squatter"
//! host on the segment uses an address of b's share that no member has a lease for
//! (the lease a member dying right after its ACK would leave). While both run nothing is
//! probed. Then b dies and leaves the file: a inherits b's blocks at once (the shared
//! lease store answers) and, asked by many machines, offers every free address but the squatter's,
//! which answered a's ICMP echo and is quarantined.

use crate::common;

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use common::members::wait_until;
use common::segment::{Seen, Segment};
use common::Server;
use dhcproto::v4::MessageType;
use shardboot::mac::MacAddr;
use shardboot::owner::shares::Split;
use shardboot::owner::{responsible_member, MemberList};

const NAMES: [&str; 2] = ["a", "b"];
const RANGE_START: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 0);
const RANGE_LEN: u32 = 64;

fn member_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, 11 + i as u8)
}

/// Member `k`'s share of the range under `names`.
fn share_of(names: &[&str], k: usize) -> Vec<Ipv4Addr> {
    let last = Ipv4Addr::from(u32::from(RANGE_START) + RANGE_LEN - 1);
    let shares = MemberList::new(names.iter().copied()).shares(Split::CURRENT, RANGE_START, last);
    (0..RANGE_LEN)
        .filter(|&i| shares.owner_of(i) == Some(k))
        .map(|i| Ipv4Addr::from(u32::from(RANGE_START) + i))
        .collect()
}

fn write_members(path: &Path, members: &[usize]) {
    let list: Vec<(&str, String)> = members
        .iter()
        .map(|&k| (NAMES[k], format!("http://{}:8080", member_ip(k))))
        .collect();
    common::members::write_members_file(path, &list);
}

/// Member `i`'s configuration; `store`: the shared lease store's table.
fn config(interface: &str, i: usize, members_file: &Path, store: &str) -> String {
    format!(
        r#"
[dhcp]
interfaces = ["{interface}"]
conflict_probe_ms = 500
[tftp]
enabled = false
[http]
listen = "{ip}:8080"
[health]
interval_ms = 300
timeout_ms = 250
dead_after = 2
[owner]
members = "file"
members_file = "{file}"
members_poll_ms = 200
self = "{name}"
{secret}
[[subnet]]
network = "198.18.0.0/16"
ranges = ["198.18.1.0 - 198.18.1.63"]
lease_time = 3600
{store}"#,
        ip = member_ip(i),
        name = NAMES[i],
        file = members_file.display(),
        secret = common::member_secret_line(),
    )
}

fn mac(n: u32) -> [u8; 6] {
    let b = n.to_be_bytes();
    [0x02, 0x70, b[0], b[1], b[2], b[3]]
}

fn seg_metric(seg: &Segment, member: usize, name: &str) -> Option<u64> {
    seg.metric(member_ip(member), name)
}

fn offers(seen: &[Seen]) -> Vec<Seen> {
    seen.iter()
        .filter(|s| s.kind == MessageType::Offer)
        .copied()
        .collect()
}

#[test]
fn an_inherited_address_in_use_by_a_host_without_a_lease_is_never_offered() {
    require_root!();
    let seg = Segment::new(&["198.18.0.11/16", "198.18.0.12/16"]);
    let mut db = common::db::DbServer::start(common::db::Kind::Postgres, Some(&seg.servers));
    let store = db.store_table();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("members.toml");
    write_members(&file, &[0, 1]);
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let a = Server::start(
        &seg.servers,
        dirs[0].path(),
        &config(&seg.member_ifs[0], 0, &file, &store),
    );
    let mut b = Server::start(
        &seg.servers,
        dirs[1].path(),
        &config(&seg.member_ifs[1], 1, &file, &store),
    );

    // The squatter: on b's first address, leased by nobody.
    let b_share = share_of(&NAMES, 1);
    let squatted = b_share[0];
    let _squatter = seg.host(&format!("{squatted}/16"));
    let mut client = seg.client();

    // 1. Both members run: the ordinary path. a's machines get a's addresses at once,
    // and neither member sends a probe.
    let mine: Vec<[u8; 6]> = (1..200)
        .map(mac)
        .filter(|m| responsible_member(&MacAddr(*m), &NAMES) == Some("a"))
        .take(8)
        .collect();
    let seen = client.discover(&mine, 0, Duration::from_millis(1500));
    for (m, s) in mine.iter().zip(&seen) {
        let o = offers(s);
        assert_eq!(o.len(), 1, "{m:02x?}: {s:?}");
        assert_eq!(o[0].server, member_ip(0), "{m:02x?}: {s:?}");
        assert!(share_of(&NAMES, 0).contains(&o[0].yiaddr), "{o:?}");
    }
    for (k, name) in NAMES.iter().enumerate() {
        assert_eq!(
            seg_metric(&seg, k, "shardboot_dhcp_probes_total"),
            Some(0),
            "{name} probed on the ordinary path"
        );
    }

    // 2. b dies and leaves the list: a serves b's blocks at once.
    let changes = || a.log_text().matches("member list changed").count();
    let before = changes();
    b.kill9();
    write_members(&file, &[0]);
    wait_until(
        "a follows the members file",
        Duration::from_secs(10),
        || changes() > before,
    );

    // 3. Many machines: a offers every free address, b's former ones after a probe,
    // but never the squatter's.
    let many: Vec<[u8; 6]> = (1000..1000 + RANGE_LEN + 8).map(mac).collect();
    let seen = client.discover(&many, 0, Duration::from_secs(4));
    let mut given = HashSet::new();
    for (m, s) in many.iter().zip(&seen) {
        let o = offers(s);
        assert!(o.len() <= 1, "{m:02x?}: {s:?}");
        if let Some(o) = o.first() {
            assert_eq!(o.server, member_ip(0));
            assert_ne!(
                o.yiaddr, squatted,
                "{m:02x?} offered the squatter's address"
            );
            assert!(given.insert(o.yiaddr), "{} offered twice", o.yiaddr);
        }
    }
    let from_b = given.iter().filter(|ip| b_share.contains(ip)).count();
    // Every free address: the range less a's offers of step 1 and the squatter's.
    assert_eq!(
        given.len(),
        RANGE_LEN as usize - mine.len() - 1,
        "offered {given:?}"
    );
    assert_eq!(
        from_b,
        b_share.len() - 1,
        "b's share, the squatter's left out"
    );
    assert_eq!(
        seg_metric(&seg, 0, "shardboot_dhcp_probe_conflicts_total"),
        Some(1),
        "{}",
        a.log_text()
    );
    // One probe per address of b's share before its first offer.
    assert_eq!(
        seg_metric(&seg, 0, "shardboot_dhcp_probes_total"),
        Some(b_share.len() as u64)
    );
    assert!(
        a.log_text().contains("answered a probe"),
        "{}",
        a.log_text()
    );
    eprintln!(
        "a offered {} addresses after b left, {from_b} of them b's, after {} probes; {squatted} answered",
        given.len(),
        b_share.len()
    );
}
