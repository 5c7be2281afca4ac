//! The default configuration under a flood of random MACs (issue 30): machines the
//! operator knows are bound on their first try, without any limit set.

use super::*;

/// The n-th random MAC of a flood (locally administered, never a known one).
fn random_mac(n: u32) -> MacAddr {
    let b = n.wrapping_mul(2_654_435_761).to_be_bytes();
    MacAddr([0x06, 0x17, b[0], b[1], b[2], b[3]])
}

fn known_mac(n: u8) -> MacAddr {
    MacAddr([0x52, 0x54, 0x00, 0x77, 0x00, n])
}

/// The built-in configuration (192.0.2.100-.199) with `n` `[[host]]` entries, nothing
/// else changed.
fn default_with_known(n: u8) -> Engine {
    limited(|c| c.hosts.extend((0..n).map(|k| known_host(known_mac(k)))))
}

/// 20,000 DISCOVERs from random MACs over 20 s (`exchange`: each followed by its
/// REQUEST, as a flood that binds does); returns how many were bound.
fn flood(e: &mut Engine, i: &Interface, exchange: bool) -> usize {
    let mut bound = 0;
    for n in 0..20_000u32 {
        let now = T0 + u64::from(n / 1000);
        let m = random_mac(n);
        let d = e.handle_message(&msg(MessageType::Discover, m), &ctx(i, now));
        if let (Outcome::Offer(ip), true) = (d.outcome, exchange) {
            let d = e.handle_message(&request_selecting(m, ip), &ctx(i, now));
            bound += usize::from(d.outcome == Outcome::Ack(ip));
        }
    }
    bound
}

/// Each known machine's first DISCOVER and REQUEST, at `now`: how many were bound.
fn first_tries(e: &mut Engine, i: &Interface, known: u8, now: u64) -> usize {
    (0..known)
        .filter(|k| {
            let m = known_mac(*k);
            match e
                .handle_message(&msg(MessageType::Discover, m), &ctx(i, now))
                .outcome
            {
                Outcome::Offer(ip) => {
                    e.handle_message(&request_selecting(m, ip), &ctx(i, now))
                        .outcome
                        == Outcome::Ack(ip)
                }
                _ => false,
            }
        })
        .count()
}

#[test]
fn by_default_a_discover_flood_leaves_known_machines_bound_on_their_first_try() {
    let i = iface();
    let mut e = default_with_known(50);
    flood(&mut e, &i, false);
    // A quarter of the 100 addresses stays free for known machines; the other 75 are
    // held as offers for the flood, and known machines take those too.
    assert_eq!(e.table.offered(), 75);
    assert_eq!(first_tries(&mut e, &i, 50, T0 + 20), 50);
}

#[test]
fn by_default_a_binding_flood_stops_at_the_quarter_kept_for_known_machines() {
    let i = iface();
    let mut e = default_with_known(25);
    assert_eq!(flood(&mut e, &i, true), 75);
    assert_eq!(first_tries(&mut e, &i, 25, T0 + 20), 25);
}

#[test]
fn without_a_known_machine_in_the_configuration_nothing_is_reserved() {
    let i = iface();
    let mut e = limited(|_| {});
    assert_eq!(flood(&mut e, &i, true), 100);
}

#[test]
fn a_known_machine_takes_the_oldest_offer_held_for_an_unknown_one() {
    let i = iface();
    let mut e = limited(|c| {
        c.subnets[0].reserve_for_known = Some(0);
        c.hosts.push(known_host(known_mac(1)));
    });
    let first =
        offered(&e.handle_message(&msg(MessageType::Discover, random_mac(0)), &ctx(&i, T0)));
    for n in 1..100 {
        offered(&e.handle_message(&msg(MessageType::Discover, random_mac(n)), &ctx(&i, T0)));
    }
    let d = e.handle_message(&msg(MessageType::Discover, random_mac(100)), &ctx(&i, T0));
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::PoolExhausted));
    // The machine the operator knows gets the oldest offer's address...
    assert_eq!(
        offered(&e.handle_message(&msg(MessageType::Discover, known_mac(1)), &ctx(&i, T0))),
        first
    );
    // ...and the unknown client that held it is refused when it asks for it.
    let d = e.handle_message(&request_selecting(random_mac(0), first), &ctx(&i, T0));
    assert_eq!(d.outcome, Outcome::Nak);
    let d = e.handle_message(&request_selecting(known_mac(1), first), &ctx(&i, T0));
    assert_eq!(d.outcome, Outcome::Ack(first));
    // A bound lease is never taken: with every address bound, a known machine waits.
    let mut e = limited(|c| {
        c.subnets[0].reserve_for_known = Some(0);
        c.hosts.push(known_host(known_mac(1)));
    });
    assert_eq!(flood(&mut e, &i, true), 100);
    let d = e.handle_message(&msg(MessageType::Discover, known_mac(1)), &ctx(&i, T0 + 20));
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::PoolExhausted));
}

/// A change to the configuration.
type Edit = Box<dyn Fn(&mut Config)>;

#[test]
fn every_way_a_machine_can_be_known_turns_the_default_reserve_on() {
    let i = iface();
    let unknown_bound = |e: &mut Engine| {
        (0..100u32)
            .filter(|n| {
                let m = random_mac(*n);
                match e
                    .handle_message(&msg(MessageType::Discover, m), &ctx(&i, T0))
                    .outcome
                {
                    Outcome::Offer(ip) => {
                        e.handle_message(&request_selecting(m, ip), &ctx(&i, T0))
                            .outcome
                            == Outcome::Ack(ip)
                    }
                    _ => false,
                }
            })
            .count()
    };
    let ironic = {
        let text =
            format!("{DEFAULT_CONFIG_TOML}\n[owner.ironic]\nurl = \"https://127.0.0.1:6385\"\n");
        Config::from_toml_with_overrides(&text, &[])
            .unwrap()
            .owner
            .ironic
    };
    let edits: Vec<(&str, Edit)> = vec![
        (
            "[[host]]",
            Box::new(|c| c.hosts.push(known_host(known_mac(1)))),
        ),
        (
            "hostsdir",
            Box::new(|c| c.dhcp.hostsdir = Some("/nonexistent".into())),
        ),
        (
            "token_file",
            Box::new(|c| c.http.token_file = Some("/nonexistent".into())),
        ),
        ("ironic", Box::new(move |c| c.owner.ironic = ironic.clone())),
        (
            "inventory",
            Box::new(|c| c.owner.inventory = Some("/nonexistent".into())),
        ),
    ];
    for (what, edit) in edits {
        let mut e = limited(|c| edit(c));
        assert_eq!(unknown_bound(&mut e), 75, "{what}");
    }
}

#[test]
fn unknown_clients_asking_again_and_again_keep_one_entry_each_in_the_preemption_list() {
    // 200 unknown clients send 50 DISCOVERs each (perfdhcp -R, a flood that retries);
    // the 100 that got an offer get the same one every time.
    let i = iface();
    let mut e = limited(|_| {});
    let mut longest = 0;
    for _ in 0..50 {
        for n in 0..200u32 {
            e.handle_message(&msg(MessageType::Discover, random_mac(n)), &ctx(&i, T0));
            longest = longest.max(e.unknown_offers.len());
        }
    }
    assert_eq!(e.table.offered(), 100);
    // Never more than the live offers and the slack: each sweep leaves one entry per
    // live offer, so sweeps are at least SLACK DISCOVERs apart.
    let most = e.table.offered() + crate::dhcp::engine::preempt::SLACK;
    assert!(
        longest <= most,
        "{longest} entries for {} offers",
        e.table.offered()
    );
}
