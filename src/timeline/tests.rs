//! The timeline's bounds and eviction rules, through its public API (and its rings'
//! maps where the rule is about what is left behind).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::rings::Slot;
use super::*;

fn dhcp(what: &'static str, outcome: &'static str, ip: Option<Ipv4Addr>) -> Report {
    Report {
        source: Source::Dhcp,
        what,
        outcome,
        why: None,
        ip: ip.map(IpAddr::V4),
        detail: None,
    }
}

fn dhcp6(what: &'static str, outcome: &'static str, ip: Option<Ipv6Addr>) -> Report {
    Report {
        source: Source::Dhcp6,
        ip: ip.map(IpAddr::V6),
        ..dhcp(what, outcome, None)
    }
}

const A: MacAddr = MacAddr([0x52, 0x54, 0, 0, 0, 1]);

#[test]
fn a_machines_events_in_order_and_tftp_found_by_its_address() {
    let t = Timeline::default();
    let ip = Ipv4Addr::new(192, 0, 2, 100);
    t.record_at(A, dhcp("DISCOVER", "offer", Some(ip)), 1);
    t.record_at(A, dhcp("REQUEST", "ack", Some(ip)), 2);
    let tftp = Report {
        source: Source::Tftp,
        what: "RRQ",
        outcome: "complete",
        why: None,
        ip: Some(ip.into()),
        detail: Some("snponly.efi blksize=1468\n\u{1b}[31m".into()),
    };
    assert!(t.record_for_ip(ip, tftp.clone()));
    assert!(!t.record_for_ip(Ipv4Addr::new(192, 0, 2, 9), tftp));
    let ev = t.events(&A, 0);
    let whats: Vec<&str> = ev.iter().map(|e| e.what).collect();
    assert_eq!(whats, ["DISCOVER", "REQUEST", "RRQ"]);
    // Control characters from a packet never reach a reader unescaped.
    assert_eq!(
        ev[2].detail.as_deref(),
        Some("snponly.efi blksize=1468\\n\\u{1b}[31m")
    );
    assert_eq!(t.events(&A, ev[1].seq).len(), 1);
}

#[test]
fn bounded_per_machine_and_in_all() {
    // What the module's size bound counts on (an address of either family).
    assert!(std::mem::size_of::<Event>() <= 104);
    assert!(
        std::mem::size_of::<Slot>() <= 136,
        "{}",
        std::mem::size_of::<Slot>()
    );
    let t = Timeline::default();
    for i in 0..(PER_MAC as u64 + 10) {
        t.record_at(A, dhcp("DISCOVER", "offer", None), i);
    }
    let ev = t.events(&A, 0);
    assert_eq!(ev.len(), PER_MAC);
    assert_eq!(ev[0].at_ms, 10, "the oldest went first");
    for n in 0..(TOTAL / PER_MAC + 10) {
        let mac = MacAddr([2, 0, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
        for _ in 0..PER_MAC {
            t.record_at(mac, dhcp("DISCOVER", "offer", None), 0);
        }
    }
    assert!(t.len() <= TOTAL, "{}", t.len());
    assert!(
        t.events(&A, 0).is_empty(),
        "the oldest machine's events went first"
    );
    let long = "x".repeat(1000);
    t.record(
        A,
        Report {
            detail: Some(long),
            ..dhcp("DISCOVER", "offer", None)
        },
    );
    assert_eq!(
        t.events(&A, 0)[0].detail.as_ref().unwrap().len(),
        MAX_DETAIL
    );
}

#[test]
fn a_flood_of_random_macs_never_answered_evicts_no_machine_that_was() {
    let t = Timeline::default();
    let ip = Ipv4Addr::new(192, 0, 2, 100);
    t.record_at(A, dhcp("DISCOVER", "offer", Some(ip)), 1);
    t.record_at(A, dhcp("REQUEST", "ack", Some(ip)), 2);
    // A stranger, silent at first, then answered: its earlier events move with it.
    let b = MacAddr([0x52, 0x54, 0, 0, 0, 2]);
    t.record_at(b, dhcp("DISCOVER", "silent", None), 3);
    // Three times more random MACs than the whole timeline holds, each silent.
    for n in 0..(3 * TOTAL) {
        let mac = MacAddr([6, 0, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
        t.record_at(mac, dhcp("DISCOVER", "silent", None), 10);
    }
    assert!(t.len() <= TOTAL, "{}", t.len());
    let whats: Vec<&str> = t.events(&A, 0).iter().map(|e| e.what).collect();
    assert_eq!(whats, ["DISCOVER", "REQUEST"]);
    assert!(t.record_for_ip(
        ip,
        Report {
            source: Source::Tftp,
            ..dhcp("RRQ", "complete", None)
        }
    ));
    // b's silent DISCOVER went with the flood; a new one and its answer are kept.
    assert!(t.events(&b, 0).is_empty());
    t.record_at(b, dhcp("DISCOVER", "silent", None), 20);
    t.record_at(
        b,
        dhcp("DISCOVER", "offer", Some(Ipv4Addr::new(192, 0, 2, 101))),
        24,
    );
    for n in 0..(2 * STRANGERS) {
        let mac = MacAddr([6, 1, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
        t.record_at(mac, dhcp("DISCOVER", "silent", None), 30);
    }
    let b_events: Vec<(u64, &str)> = t
        .events(&b, 0)
        .iter()
        .map(|e| (e.at_ms, e.outcome))
        .collect();
    assert_eq!(b_events, [(20, "silent"), (24, "offer")]);
    // An HTTP request names any MAC it likes: it is no reason to keep one.
    let c = MacAddr([6, 2, 0, 0, 0, 1]);
    t.record_at(
        c,
        Report {
            source: Source::Http,
            ..dhcp("GET /v1/boot/{mac}/{name}", "200", None)
        },
        40,
    );
    assert!(!t.inner.lock().unwrap().known.machines.contains_key(&c));
}

#[test]
fn an_enrolled_machine_only_ever_met_with_silence_outlives_a_flood() {
    // Small rings, so the flood is many times what they hold.
    let limits = Limits {
        per_machine: 8,
        known_events: 100,
        unknown_events: 100,
    };
    let t = Timeline::new(limits);
    // Enrolled (a reservation, say) and answered by another member: this member
    // stays silent for it, and its boot requests name it only in the URL.
    t.set_enrolled([A].into_iter().collect());
    t.record_at(A, dhcp("DISCOVER", "silent", None), 1);
    t.record_at(
        A,
        Report {
            source: Source::Http,
            ..dhcp("GET /v1/boot/{mac}/{name}", "200", None)
        },
        2,
    );
    // A stranger kept before the operator enrolled it moves over with its next event.
    let b = MacAddr([0x52, 0x54, 0, 0, 0, 2]);
    t.record_at(b, dhcp("DISCOVER", "silent", None), 3);
    t.set_enrolled([A, b].into_iter().collect());
    t.record_at(b, dhcp("DISCOVER", "silent", None), 4);
    for n in 0..10_000u32 {
        let mac = MacAddr([6, 0, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
        t.record_at(mac, dhcp("DISCOVER", "silent", None), 10);
    }
    assert_eq!(t.events(&A, 0).len(), 2);
    assert_eq!(t.events(&b, 0).len(), 2, "both of b's events moved");
    assert!(t.len() <= 200);
    // The board sees the flood as silent strangers and A as known.
    let rows = t.rows(0);
    let a = rows.iter().find(|r| r.mac == A).unwrap();
    assert!(a.known);
    assert_eq!(a.progress.stage, stage::Stage::Chained);
    assert!(rows.iter().filter(|r| !r.known).count() <= 100);
}

#[test]
fn an_address_finds_its_machine_until_the_machine_is_forgotten() {
    let t = Timeline::default();
    let ip = |n: usize| Ipv4Addr::from(0x0a00_0000 + n as u32);
    let mac = |n: usize| MacAddr([2, 0, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
    let rrq = || Report {
        source: Source::Tftp,
        ..dhcp("RRQ", "complete", None)
    };
    // More machines than the timeline keeps: each one offered an address.
    let machines = TOTAL + 1000;
    for n in 0..machines {
        t.record_at(mac(n), dhcp("DISCOVER", "offer", Some(ip(n))), 0);
    }
    assert!(t.record_for_ip(ip(machines - 1), rrq()));
    assert!(
        !t.record_for_ip(ip(0), rrq()),
        "a forgotten machine's address finds nothing"
    );
    // An address given to another machine since finds the new one, also after the
    // first is forgotten.
    t.record_at(mac(1), dhcp("DISCOVER", "offer", Some(ip(1001))), 0);
    for n in 0..TOTAL {
        t.record_at(mac(machines + n), dhcp("DISCOVER", "offer", None), 0);
    }
    assert!(!t.record_for_ip(ip(1001), rrq()));
    assert_eq!(
        t.inner.lock().unwrap().known.by_ip.len(),
        0,
        "nothing left behind"
    );
    // One machine given many addresses keeps only its newest few.
    let m = mac(7_000_000);
    for n in 0..(IPS_PER_MAC + 5) {
        t.record_at(m, dhcp("DISCOVER", "offer", Some(ip(2_000_000 + n))), 0);
    }
    assert!(t.record_for_ip(ip(2_000_000 + IPS_PER_MAC + 4), rrq()));
    assert!(!t.record_for_ip(ip(2_000_000), rrq()));
    assert_eq!(t.inner.lock().unwrap().known.by_ip.len(), IPS_PER_MAC);
}

#[test]
fn an_address_given_back_finds_its_new_machine_after_the_old_is_forgotten() {
    let t = Timeline::default();
    let b = MacAddr([0x52, 0x54, 0, 0, 0, 2]);
    let ip = Ipv4Addr::new(192, 0, 2, 100);
    let rrq = || Report {
        source: Source::Tftp,
        ..dhcp("RRQ", "complete", None)
    };
    t.record_at(A, dhcp("REQUEST", "ack", Some(ip)), 1);
    t.record_at(b, dhcp("REQUEST", "ack", Some(ip)), 2);
    assert!(t.record_for_ip(ip, rrq()));
    assert_eq!(t.events(&b, 0).len(), 2, "the address went to b");
    t.record_at(A, dhcp("REQUEST", "ack", Some(ip)), 3);
    // b's events are all overwritten by A's: b is forgotten, the address stays A's.
    for n in 0..TOTAL {
        t.record_at(A, dhcp("DISCOVER", "silent", None), 4 + n as u64);
    }
    assert!(t.events(&b, 0).is_empty());
    let before = t.events(&A, 0).len();
    assert!(t.record_for_ip(ip, rrq()));
    assert_eq!(t.events(&A, 0).len(), before, "PER_MAC shown at most");
    assert_eq!(t.events(&A, 0).last().map(|e| e.what), Some("RRQ"));
    let g = t.inner.lock().unwrap();
    assert_eq!(g.known.machines.len(), 1);
    assert_eq!(g.known.by_ip.get(&IpAddr::V4(ip)), Some(&A));
}

#[test]
fn an_ipv6_boot_is_found_by_its_dhcpv6_address_or_its_link_local_mac() {
    let t = Timeline::default();
    let given: Ipv6Addr = "fd00:1::105".parse().unwrap();
    let rrq = |ip: IpAddr| Report {
        source: Source::Tftp,
        ip: Some(ip),
        ..dhcp("RRQ", "complete", None)
    };
    // Nothing given yet: a global address finds no machine, a silence gives none.
    assert!(!t.record_for_ip(given, rrq(given.into())));
    t.record_at(A, dhcp6("SOLICIT", "silent", Some(given)), 1);
    assert!(!t.record_for_ip(given, rrq(given.into())));
    t.record_at(A, dhcp6("SOLICIT", "advertise", Some(given)), 2);
    t.record_at(A, dhcp6("REQUEST", "reply", Some(given)), 3);
    assert!(t.record_for_ip(given, rrq(given.into())));
    // The link-local address firmware makes from its NIC (modified EUI-64) names
    // the MAC without any DHCP; one that is not EUI-64, or not link-local, does not.
    let eui64: Ipv6Addr = "fe80::5054:ff:fe00:1".parse().unwrap();
    assert!(t.record_for_ip(
        eui64,
        Report {
            source: Source::Http,
            ..rrq(eui64.into())
        }
    ));
    let (b, b_ip) = (MacAddr([0x52, 0x54, 0, 0, 0, 2]), "fe80::5054:ff:fe00:2");
    let b_ip: Ipv6Addr = b_ip.parse().unwrap();
    assert!(t.record_for_ip(b_ip, rrq(b_ip.into())));
    assert_eq!(t.events(&b, 0).len(), 1);
    for other in ["fe80::1234:5678:9abc:def0", "fd00:1::5054:ff:fe00:3"] {
        let ip: Ipv6Addr = other.parse().unwrap();
        assert!(!t.record_for_ip(ip, rrq(ip.into())), "{other}");
    }
    let sources: Vec<(Source, &str)> = t.events(&A, 0).iter().map(|e| (e.source, e.what)).collect();
    assert_eq!(
        sources,
        [
            (Source::Dhcp6, "SOLICIT"),
            (Source::Dhcp6, "SOLICIT"),
            (Source::Dhcp6, "REQUEST"),
            (Source::Tftp, "RRQ"),
            (Source::Http, "RRQ"),
        ]
    );
    // The JSON names the source and the address as an operator reads them.
    let json = serde_json::to_value(&t.events(&A, 0)[2]).unwrap();
    assert_eq!(json["source"], "dhcp6");
    assert_eq!(json["ip"], "fd00:1::105");
}

#[test]
fn an_ipv4_client_of_a_dual_stack_listener_is_its_ipv4_address() {
    let t = Timeline::default();
    let ip = Ipv4Addr::new(192, 0, 2, 100);
    t.record_at(A, dhcp("REQUEST", "ack", Some(ip)), 1);
    let mapped = IpAddr::V6(ip.to_ipv6_mapped());
    assert!(t.record_for_ip(mapped, dhcp("RRQ", "complete", None)));
    assert_eq!(t.events(&A, 0).len(), 2);
}

fn boot(outcome: &'static str, detail: &str) -> Report {
    let ip = Some(Ipv4Addr::new(192, 0, 2, 100));
    Report {
        source: Source::Http,
        why: Some("chain"),
        detail: Some(detail.into()),
        ..dhcp("GET /v1/boot/{mac}/{name}", outcome, ip)
    }
}

#[test]
fn a_boot_request_repeated_within_the_window_is_counted_not_kept_again() {
    let t = Timeline::default();
    let chain = "boot.ipxe: owner=a via=ironic chain=http://c1/pxe";
    t.record_at(A, boot("200", chain), 1_000);
    // Again within the window: one event, the machine last seen at the repeat.
    t.record_at(A, boot("200", chain), 1_000 + REPEAT_WINDOW_MS - 1);
    assert_eq!(t.events(&A, 0).len(), 1);
    assert_eq!(t.repeats(), 1);
    let row = t.rows(0).into_iter().find(|r| r.mac == A).unwrap();
    assert_eq!(row.progress.last_ms, 1_000 + REPEAT_WINDOW_MS - 1);
    // Anything different is kept: another answer, another detail, or the window passed
    // since the event kept (not since the repeat).
    t.record_at(A, boot("404", chain), 7_000);
    t.record_at(A, boot("404", "boot.ipxe: owner=b"), 7_001);
    t.record_at(
        A,
        boot("404", "boot.ipxe: owner=b"),
        7_001 + REPEAT_WINDOW_MS,
    );
    assert_eq!(t.events(&A, 0).len(), 4);
    assert_eq!(t.repeats(), 1);
}

#[test]
fn a_boot_request_after_another_kind_of_event_is_kept_even_within_the_window() {
    let t = Timeline::default();
    let chain = "boot.ipxe: owner=a via=ironic chain=http://c1/pxe";
    let ip = Ipv4Addr::new(192, 0, 2, 100);
    t.record_at(A, boot("200", chain), 1_000);
    t.record_at(A, dhcp("REQUEST", "ack", Some(ip)), 1_001);
    // The same boot request as before, but the machine's newest event is the DHCP one.
    t.record_at(A, boot("200", chain), 1_002);
    assert_eq!(t.events(&A, 0).len(), 3);
    assert_eq!(t.repeats(), 0);
    // Now it repeats the newest.
    t.record_at(A, boot("200", chain), 1_003);
    assert_eq!(t.events(&A, 0).len(), 3);
    assert_eq!(t.repeats(), 1);
}

#[test]
fn dhcp_events_are_kept_even_when_they_repeat() {
    let t = Timeline::default();
    let ip = Ipv4Addr::new(192, 0, 2, 100);
    t.record_at(A, dhcp("REQUEST", "ack", Some(ip)), 1);
    t.record_at(A, dhcp("REQUEST", "ack", Some(ip)), 2);
    assert_eq!(t.events(&A, 0).len(), 2);
    assert_eq!(t.repeats(), 0);
}
