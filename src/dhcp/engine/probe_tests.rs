//! Conflict probes of inherited addresses (`probe`): which DISCOVERs wait for one, what
//! an answer or its absence does, and the caps.

use super::*;
use crate::dhcp::engine::probe::{ProbeResult, MAX_IN_FLIGHT, PROBES_PER_CLIENT};
use crate::owner::MemberList;

const AB: &str = r#"
[[member]]
name = "a"
http_url = "http://192.0.2.1:8080"
[[member]]
name = "b"
http_url = "http://192.0.2.2:8080"
"#;

fn two_members() -> Config {
    config(&format!(
        "[owner]\ninsecure_members = true\nself = \"a\"\n{AB}"
    ))
}

/// Member a of a, b after b left at T0, the shared store up: a serves b's blocks at once.
fn inheritor(edit: impl FnOnce(&mut Config)) -> Engine {
    let mut cfg = two_members();
    edit(&mut cfg);
    let mut e = Engine::new(&cfg, Vec::new(), T0);
    e.set_probing(true);
    e.adopt_members(MemberList::new(["a", "b"]));
    e.set_shared_store_up(true);
    e.change_members(MemberList::new(["a"]), T0).unwrap();
    assert_eq!(
        e.transition_until(),
        None,
        "the shared store up: the new share at once"
    );
    e
}

/// Member a, back in a, b with the shared store up after serving under b alone: every
/// address of its share was gained at T0.
fn all_inherited(cfg: &Config) -> Engine {
    let mut e = Engine::new(cfg, Vec::new(), T0);
    e.set_probing(true);
    e.adopt_members(MemberList::new(["b"]));
    e.set_shared_store_up(true);
    e.change_members(MemberList::new(["a", "b"]), T0).unwrap();
    e
}

fn b_had(ip: Ipv4Addr) -> bool {
    share(&["a", "b"], "b").contains(&ip)
}

fn discover(e: &mut Engine, m: MacAddr, now: u64) -> Decision {
    e.handle_message(&msg(MessageType::Discover, m), &ctx(&iface(), now))
}

fn discover_for(e: &mut Engine, m: MacAddr, ip: Ipv4Addr, now: u64) -> Decision {
    let d = with(
        msg(MessageType::Discover, m),
        DhcpOption::RequestedIpAddress(ip),
    );
    e.handle_message(&d, &ctx(&iface(), now))
}

/// DISCOVERs from new MACs until one is told to wait for a probe; every offer before
/// it is of an address a held before the change.
fn first_probe(e: &mut Engine, now: u64) -> (MacAddr, Ipv4Addr) {
    for n in 0..100u8 {
        let d = discover(e, mac(n), now);
        match d.outcome {
            Outcome::Probe(ip) => {
                assert!(b_had(ip), "{ip} was a's own, probed");
                assert!(d.reply.is_none() && d.effects.is_empty(), "{d:?}");
                return (mac(n), ip);
            }
            Outcome::Offer(ip) => assert!(!b_had(ip), "{ip} was b's: offered unprobed"),
            o => panic!("{o:?}"),
        }
    }
    panic!("no inherited address came up");
}

#[test]
fn an_inherited_address_is_probed_before_its_first_offer_and_once_clear_not_again() {
    let mut e = inheritor(|_| {});
    let (m, ip) = first_probe(&mut e, T0 + 1);
    // A retransmission while the probe is in flight: silence; the shell answers the
    // newest DISCOVER when the probe ends.
    assert_eq!(
        discover(&mut e, m, T0 + 1).outcome,
        Outcome::Ignored(IgnoreReason::Probing)
    );
    assert_eq!(e.probes_in_flight(), 1);
    // Reports for no probe in flight change nothing.
    let other = Ipv4Addr::new(192, 0, 2, 250);
    assert_eq!(
        e.handle_probe_result(&m, other, ProbeResult::Answered, T0 + 1),
        None
    );
    assert_eq!(
        e.handle_probe_result(&mac(250), ip, ProbeResult::Answered, T0 + 1),
        None
    );
    assert_eq!(e.probes_in_flight(), 1);
    // Nothing answered: the DISCOVER, decided again, gets the address.
    assert_eq!(
        e.handle_probe_result(&m, ip, ProbeResult::Clear, T0 + 1),
        None
    );
    assert_eq!(e.probes_in_flight(), 0);
    let d = discover(&mut e, m, T0 + 1);
    assert_eq!(offered(&d), ip);
    assert!(d.reply.is_some());
    // The client takes another server's offer; another asks for the address: found
    // clear in this window, it is offered without a second probe.
    let elsewhere = with(
        with(
            msg(MessageType::Request, m),
            DhcpOption::ServerIdentifier(Ipv4Addr::new(192, 0, 2, 99)),
        ),
        DhcpOption::RequestedIpAddress(ip),
    );
    e.handle_message(&elsewhere, &ctx(&iface(), T0 + 2));
    assert_eq!(offered(&discover_for(&mut e, mac(201), ip, T0 + 2)), ip);
    assert_eq!(e.probes_skipped(), 0);
}

#[test]
fn an_address_that_answers_is_quarantined_like_a_decline_and_another_offered() {
    let mut e = inheritor(|_| {});
    let (m, ip) = first_probe(&mut e, T0 + 1);
    let Some(LeaseEffect::Put(q)) = e.handle_probe_result(&m, ip, ProbeResult::Answered, T0 + 1)
    else {
        panic!("the quarantine is persisted, like a DECLINE's");
    };
    // decline_hold_secs (600 by default), under no client's MAC.
    assert_eq!(
        (q.ip, q.state, q.mac, q.expires),
        (ip, LeaseState::Declined, MacAddr([0; 6]), T0 + 1 + 600)
    );
    assert_eq!(e.lease(ip).map(|l| l.state), Some(LeaseState::Declined));
    // The client's DISCOVER, decided again, goes to another address.
    match discover(&mut e, m, T0 + 1).outcome {
        Outcome::Offer(x) | Outcome::Probe(x) => assert_ne!(x, ip),
        o => panic!("{o:?}"),
    }
    // Nobody gets it while it is quarantined, even asking for it.
    match discover_for(&mut e, mac(201), ip, T0 + 2).outcome {
        Outcome::Offer(x) | Outcome::Probe(x) => assert_ne!(x, ip),
        o => panic!("{o:?}"),
    }
    // After the quarantine, still in the window: probed again, never offered outright.
    e.handle_tick(T0 + 601);
    assert_eq!(
        discover_for(&mut e, mac(202), ip, T0 + 601).outcome,
        Outcome::Probe(ip)
    );
}

#[test]
fn after_the_window_inherited_addresses_are_offered_without_a_probe() {
    let mut e = inheritor(|_| {});
    // One longest lease of the subnet (3600 s) plus the offer hold (60 s).
    let after = T0 + 3600 + 60;
    e.handle_tick(after);
    let mut from_b = 0;
    for n in 0..100u8 {
        let ip = offered(&discover(&mut e, mac(n), after));
        from_b += usize::from(b_had(ip));
    }
    assert_eq!(
        from_b,
        share(&["a", "b"], "b").len(),
        "b's whole share, unprobed"
    );
    // The last second of the window still probes.
    let mut e = inheritor(|_| {});
    let (_, ip) = first_probe(&mut e, after - 1);
    assert!(b_had(ip));
}

#[test]
fn a_member_whose_share_did_not_grow_never_probes() {
    // A single instance; a member that keeps its list; one whose share shrinks when a
    // member joins; and probes configured off or unavailable.
    let mut single = Engine::new(&config(""), Vec::new(), T0);
    single.set_probing(true);
    let mut same = Engine::new(&two_members(), Vec::new(), T0);
    same.set_probing(true);
    same.adopt_members(MemberList::new(["a", "b"]));
    assert!(same
        .change_members(MemberList::new(["a", "b"]), T0)
        .is_none());
    let mut join = Engine::new(
        &config(&format!(
            "[owner]\ninsecure_members = true\nself = \"a\"\n{AB}[[member]]\nname = \"c\"\nhttp_url = \"http://192.0.2.3:8080\"\n"
        )),
        Vec::new(),
        T0,
    );
    join.set_probing(true);
    join.adopt_members(MemberList::new(["a", "b"]));
    join.set_shared_store_up(true);
    join.change_members(MemberList::new(["a", "b", "c"]), T0)
        .unwrap();
    let off = inheritor(|c| c.dhcp.conflict_probe = None);
    let mut unavailable = inheritor(|_| {});
    unavailable.set_probing(false);
    for (what, mut e) in [
        ("single", single),
        ("same list", same),
        ("join", join),
        ("conflict_probe_ms = 0", off),
        ("no ICMP socket", unavailable),
    ] {
        let mut offers = 0;
        for n in 0..100u8 {
            match discover(&mut e, mac(n), T0 + 1).outcome {
                Outcome::Offer(_) => offers += 1,
                Outcome::Ignored(IgnoreReason::PoolExhausted) => break,
                o => panic!("{what}: {o:?}"),
            }
        }
        assert!(offers > 0, "{what}");
        assert_eq!(e.probes_in_flight(), 0, "{what}");
    }
}

#[test]
fn a_client_waits_for_a_few_probes_at_most_then_gets_an_address_unprobed() {
    let mut e = all_inherited(&two_members());
    let m = mac(1);
    let mut answered = Vec::new();
    for _ in 0..PROBES_PER_CLIENT {
        let Outcome::Probe(ip) = discover(&mut e, m, T0 + 1).outcome else {
            panic!("every address of a's share was gained");
        };
        assert!(e
            .handle_probe_result(&m, ip, ProbeResult::Answered, T0 + 1)
            .is_some());
        answered.push(ip);
    }
    let ip = offered(&discover(&mut e, m, T0 + 1));
    assert!(!answered.contains(&ip) && share(&["a", "b"], "a").contains(&ip));
    assert_eq!(e.probes_skipped(), 1);
    // Its next exchange starts a new count.
    let elsewhere = with(
        msg(MessageType::Request, m),
        DhcpOption::ServerIdentifier(Ipv4Addr::new(192, 0, 2, 99)),
    );
    e.handle_message(&elsewhere, &ctx(&iface(), T0 + 2));
    assert!(matches!(
        discover(&mut e, m, T0 + 2).outcome,
        Outcome::Probe(_)
    ));
}

#[test]
fn beyond_the_probes_in_flight_cap_addresses_are_offered_unprobed() {
    let cfg = Config::from_toml_with_overrides(
        &format!(
            "[[subnet]]\nnetwork = \"192.0.2.0/24\"\nranges = [\"192.0.2.2 - 192.0.2.254\"]\n\
             lease_time = 3600\n{SHARED_STORE}[owner]\ninsecure_members = true\nself = \"a\"\n{AB}"
        ),
        &[],
    )
    .unwrap();
    let mut e = all_inherited(&cfg);
    for n in 0..MAX_IN_FLIGHT {
        let d = discover(&mut e, MacAddr([2, 0, 0, 0, 1, n as u8]), T0 + 1);
        assert!(
            matches!(d.outcome, Outcome::Probe(_)),
            "{n}: {:?}",
            d.outcome
        );
    }
    assert_eq!(e.probes_in_flight(), MAX_IN_FLIGHT);
    offered(&discover(&mut e, mac(250), T0 + 1));
    assert_eq!(e.probes_skipped(), 1);
    // Probes the shell never reports are forgotten, and the cap frees up.
    e.handle_tick(T0 + 20);
    assert_eq!(e.probes_in_flight(), 0);
    assert!(matches!(
        discover(&mut e, mac(251), T0 + 20).outcome,
        Outcome::Probe(_)
    ));
}

#[test]
fn at_start_up_the_stored_change_decides_what_is_probed_for_the_rest_of_its_window() {
    // The store says a, b became a 100 s ago (or while this member was down).
    let mut e = Engine::new(&two_members(), Vec::new(), T0);
    e.set_probing(true);
    e.adopt_members(MemberList::new(["a"]));
    e.inherit_from(&["a".into(), "b".into()], Split::CURRENT, T0 - 100, T0);
    let (_, ip) = first_probe(&mut e, T0);
    assert!(b_had(ip));
    // A change longer ago than the window: nothing.
    let mut old = Engine::new(&two_members(), Vec::new(), T0);
    old.set_probing(true);
    old.adopt_members(MemberList::new(["a"]));
    old.inherit_from(&["a".into(), "b".into()], Split::CURRENT, T0 - 3660, T0);
    for n in 0..100u8 {
        offered(&discover(&mut old, mac(n), T0));
    }
}

/// A single instance (no shared store, no members) serving 192.0.2.100–.102 on the
/// test interface's subnet, with `extra` `[dhcp]` keys.
fn single(extra: &str) -> Config {
    let text = format!(
        "[dhcp]\n{extra}\n[[subnet]]\nnetwork = \"192.0.2.0/24\"\nranges = [\"192.0.2.100 - 192.0.2.102\"]\n"
    );
    Config::from_toml_with_overrides(&text, &[]).unwrap()
}

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 90 + last)
}

#[test]
fn a_single_instance_probes_each_address_its_store_never_saw_before_its_first_offer() {
    // .11 has a stored (expired) lease: the store has seen it.
    let stored = Lease {
        ip: ip(11),
        mac: mac(90),
        state: LeaseState::Bound,
        starts: T0 - 7200,
        expires: T0 - 3600,
        hostname: None,
        client_id: None,
        machine_id: None,
        arch: None,
    };
    let mut e = Engine::new(&single(""), vec![stored], T0);
    e.set_probing(true);
    let d = discover(&mut e, mac(1), T0);
    assert_eq!(d.outcome, Outcome::Probe(ip(10)), "{d:?}");
    assert_eq!(
        e.handle_probe_result(&mac(1), ip(10), ProbeResult::Clear, T0),
        None
    );
    assert_eq!(offered(&discover(&mut e, mac(1), T0)), ip(10));
    // Seen by the store: offered at once.
    assert_eq!(offered(&discover(&mut e, mac(2), T0)), ip(11));
    // .12 answers: held like a DECLINE, and nothing is left to offer.
    assert_eq!(discover(&mut e, mac(3), T0).outcome, Outcome::Probe(ip(12)));
    let Some(LeaseEffect::Put(q)) =
        e.handle_probe_result(&mac(3), ip(12), ProbeResult::Answered, T0)
    else {
        panic!("the hold is persisted");
    };
    assert_eq!((q.state, q.expires), (LeaseState::Declined, T0 + 600));
    assert_eq!(
        discover(&mut e, mac(3), T0).outcome,
        Outcome::Ignored(IgnoreReason::PoolExhausted)
    );
    // When the hold ends it is probed again: the host may still be there.
    let later = T0 + 601;
    assert_eq!(
        discover_for(&mut e, mac(4), ip(12), later).outcome,
        Outcome::Probe(ip(12))
    );
    // .10 and .11, their offers ended, come back without a probe: found clear, seen.
    e.handle_probe_result(&mac(4), ip(12), ProbeResult::Clear, later);
    let again: std::collections::BTreeSet<Ipv4Addr> = [5, 6]
        .into_iter()
        .map(|n| offered(&discover(&mut e, mac(n), later + 1)))
        .collect();
    assert_eq!(again, [ip(10), ip(11)].into());
}

#[test]
fn an_address_bound_by_a_client_is_seen_and_not_probed_again() {
    let mut e = Engine::new(&single(""), Vec::new(), T0);
    // Probes off (a new engine's shell has not turned them on): offered unprobed,
    // then bound.
    assert_eq!(offered(&discover(&mut e, mac(1), T0)), ip(10));
    let req = request_selecting(mac(1), ip(10));
    assert_eq!(
        e.handle_message(&req, &ctx(&iface(), T0)).outcome,
        Outcome::Ack(ip(10))
    );
    e.set_probing(true);
    // Once that lease has long ended, another client asking for .10 gets it without a
    // probe; a never-seen address still waits for one.
    let later = T0 + 30 * 86_400;
    assert_eq!(
        offered(&discover_for(&mut e, mac(2), ip(10), later)),
        ip(10)
    );
    assert!(matches!(
        discover(&mut e, mac(3), later).outcome,
        Outcome::Probe(_)
    ));
}

#[test]
fn several_members_or_probes_off_never_probe_a_fresh_address() {
    // The shared store (every other test's config): only inherited addresses probe.
    let mut e = Engine::new(&config(""), Vec::new(), T0);
    e.set_probing(true);
    assert!(matches!(
        discover(&mut e, mac(1), T0).outcome,
        Outcome::Offer(_)
    ));
    let mut e = Engine::new(&single("conflict_probe_ms = 0"), Vec::new(), T0);
    e.set_probing(true);
    assert!(matches!(
        discover(&mut e, mac(1), T0).outcome,
        Outcome::Offer(_)
    ));
}
