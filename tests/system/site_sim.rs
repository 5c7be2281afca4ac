//! Issue 19: the pure DHCP engines of nine members on a simulated segment (`sim`), a
//! site's machines powering on at once and renewing for a simulated day through every
//! kind of churn. No address is ever ACKed to two machines, no machine loses its
//! address; and with the shared lease store off (the negative check) both happen, so
//! the checks can fail.

use crate::sim;

use std::time::Instant;

use sim::{Params, Sim};

fn params() -> Params {
    Params {
        machines: 3_000,
        // Every churn kind twice in the day.
        churn_every: 2 * 3600 * sim::SEC,
        ..Params::site(1.0)
    }
}

#[test]
fn nine_members_through_a_day_of_churn_never_duplicate_or_lose_an_address() {
    let started = Instant::now();
    let r = Sim::new(params()).unwrap().run().unwrap();
    eprintln!("{}", r.table(started.elapsed()));
    assert_eq!(r.duplicates, 0, "{:?}", r.duplicate_examples);
    assert_eq!(r.lost.total(), 0, "{:?} {:?}", r.lost, r.lost_examples);
    let bound = r.all_bound_after.expect("every machine bound");
    assert!(bound < 60.0, "all bound only after {bound} s");
    assert_eq!(r.unbound_at_end, 0);
    // It exercised what it claims to: renewals over the day, rebinding and INIT-REBOOT,
    // takeovers, every churn kind.
    assert!(r.acks.renew > u64::from(r.machines) * 20, "{:?}", r.acks);
    assert!(r.acks.rebind > 0 && r.acks.reboot > 0, "{:?}", r.acks);
    assert!(r.takeover_offers > 0);
    let kinds = r.churn_by_kind();
    for kind in [
        "crash-restart",
        "join",
        "crash-lost-store",
        "leave",
        "replace",
    ] {
        assert!(
            kinds.get(kind).is_some_and(|k| k.0 >= 2),
            "{kind}: {kinds:?}"
        );
    }
    // A join or a leave moves about one share, far below the contiguous split.
    let (n, _, blocks, contiguous, ideal) = kinds["join"];
    assert!(
        blocks <= ideal * 5 / 4 * n && blocks < contiguous,
        "{kinds:?}"
    );
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let p = Params {
        machines: 500,
        days: 0.25,
        churn_every: 1800 * sim::SEC,
        ..params()
    };
    let (a, b) = (
        Sim::new(p.clone()).unwrap().run().unwrap(),
        Sim::new(p).unwrap().run().unwrap(),
    );
    assert_eq!(
        (a.decisions, a.client_packets, a.acks.total(), a.refused),
        (b.decisions, b.client_packets, b.acks.total(), b.refused)
    );
}

/// Without the shared store a member back on an empty store, or a replacement, knows
/// none of the leases its predecessor gave: machines lose their addresses at rebinding
/// and the free-looking addresses go to other machines.
#[test]
fn without_the_shared_store_the_checks_catch_duplicates_and_lost_addresses() {
    let started = Instant::now();
    let p = Params {
        machines: 1_000,
        days: 0.5,
        shared_store: false,
        ..params()
    };
    let r = Sim::new(p).unwrap().run().unwrap();
    eprintln!("{}", r.table(started.elapsed()));
    assert!(r.lost.total() > 0, "{:?}", r.lost);
    assert!(r.duplicates > 0);
}
