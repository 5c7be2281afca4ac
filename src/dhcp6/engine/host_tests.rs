//! `[[host]] ip6` reservations (and the host name) in the DHCPv6 engine.

use dhcproto::v6::{DhcpOption, MessageType, OptionCode, Status, UnknownOption};

use super::tests::{config, ctx, duid, engine, ia_of, ip, message, SERVER_DUID};
use super::*;
use crate::mac::MacAddr;
use crate::store::Lease6Effect;

/// The `[[host]]` of the machine `duid(1)` / `mac(1)`; the range is fd00:1::10 - ::13.
fn reserving(ip6: &str) -> String {
    format!("[[host]]\nmac = \"52:54:00:00:00:01\"\nip6 = \"{ip6}\"\nhostname = \"node-01\"\n")
}

fn mac(n: u8) -> MacAddr {
    MacAddr([0x52, 0x54, 0, 0, 0, n])
}

/// The context of client `duid(n)`, whose MAC is `mac(n)`.
fn of(n: u8, now: u64) -> Context6<'static> {
    let mut c = ctx(now);
    c.mac = Some(mac(n));
    c
}

/// Solicit, then Request, for IA 1 of client `n` with an optional hint: the address
/// bound, if any.
fn bind(e: &mut Engine6, n: u8, hint: Option<Ipv6Addr>, now: u64) -> Option<Ipv6Addr> {
    let adv = e.handle_message(
        &message(MessageType::Solicit, &duid(n), None, Some((1, hint))),
        &[],
        &of(n, now),
    );
    let offered = ia_of(adv.reply.as_ref()?, 1)
        .0
        .into_iter()
        .find(|(_, valid)| *valid > 0)?
        .0;
    let req = e.handle_message(
        &message(
            MessageType::Request,
            &duid(n),
            Some(SERVER_DUID),
            Some((1, Some(offered))),
        ),
        &[],
        &of(n, now),
    );
    let (addrs, _) = ia_of(req.reply.as_ref()?, 1);
    addrs.into_iter().find(|(_, valid)| *valid > 0).map(|a| a.0)
}

#[test]
fn a_reserved_machine_gets_its_address_outside_the_ranges_at_every_step() {
    let mut e = engine(&reserving("fd00:1::99"));
    let adv = e.handle_message(
        &message(MessageType::Solicit, &duid(1), None, Some((1, None))),
        &[],
        &of(1, 1_000),
    );
    assert_eq!(adv.outcome, Outcome6::Advertise(1));
    assert_eq!(
        ia_of(adv.reply.as_ref().unwrap(), 1),
        (vec![(ip("fd00:1::99"), 1000)], None)
    );
    let req = e.handle_message(
        &message(
            MessageType::Request,
            &duid(1),
            Some(SERVER_DUID),
            Some((1, Some(ip("fd00:1::99")))),
        ),
        &[],
        &of(1, 1_001),
    );
    let [Lease6Effect::Put(l)] = req.effects.as_slice() else {
        panic!("one Put: {:?}", req.effects)
    };
    assert_eq!(
        (l.ip, l.mac, l.state, l.hostname.as_deref()),
        (
            ip("fd00:1::99"),
            Some(mac(1)),
            LeaseState::Bound,
            Some("node-01")
        )
    );
    for (kind, server) in [
        (MessageType::Renew, Some(SERVER_DUID)),
        (MessageType::Rebind, None),
    ] {
        let d = e.handle_message(
            &message(kind, &duid(1), server, Some((1, Some(ip("fd00:1::99"))))),
            &[],
            &of(1, 1_500),
        );
        assert_eq!(d.outcome, Outcome6::Bound(1), "{kind:?}");
        assert_eq!(
            ia_of(d.reply.as_ref().unwrap(), 1).0,
            vec![(ip("fd00:1::99"), 1000)]
        );
    }
    let confirm = |e: &mut Engine6, addr: &str| {
        e.handle_message(
            &message(
                MessageType::Confirm,
                &duid(1),
                None,
                Some((1, Some(ip(addr)))),
            ),
            &[],
            &of(1, 1_600),
        )
        .outcome
    };
    assert_eq!(confirm(&mut e, "fd00:1::99"), Outcome6::Confirmed(true));
    // Back on the link with an address from before the reservation: solicit again.
    assert_eq!(confirm(&mut e, "fd00:1::10"), Outcome6::Confirmed(false));
}

#[test]
fn a_reserved_address_inside_the_range_goes_to_nobody_else() {
    let mut e = engine(&reserving("fd00:1::11"));
    let others: Vec<_> = (2..=5).map(|n| bind(&mut e, n, None, 1_000)).collect();
    assert_eq!(
        others,
        vec![
            Some(ip("fd00:1::10")),
            Some(ip("fd00:1::12")),
            Some(ip("fd00:1::13")),
            None
        ],
        "the range holds three dynamic addresses"
    );
    assert_eq!(bind(&mut e, 1, None, 1_000), Some(ip("fd00:1::11")));
}

#[test]
fn another_client_hinting_at_a_reserved_address_does_not_get_it() {
    for reserved in ["fd00:1::11", "fd00:1::99"] {
        let mut e = engine(&reserving(reserved));
        // Before the machine it is reserved for ever came.
        assert_eq!(
            bind(&mut e, 2, Some(ip(reserved)), 1_000),
            Some(ip("fd00:1::10"))
        );
        let d = e.handle_message(
            &message(
                MessageType::Request,
                &duid(3),
                Some(SERVER_DUID),
                Some((1, Some(ip(reserved)))),
            ),
            &[],
            &of(3, 1_000),
        );
        let (mut addrs, _) = ia_of(d.reply.as_ref().unwrap(), 1);
        addrs.sort_by_key(|a| std::cmp::Reverse(a.1));
        let next = if reserved == "fd00:1::11" {
            "fd00:1::12"
        } else {
            "fd00:1::11"
        };
        assert_eq!(
            addrs,
            vec![(ip(next), 1000), (ip(reserved), 0)],
            "{reserved}"
        );
        // Nor by claiming it in a Renew (as after a lost store).
        let d = e.handle_message(
            &message(
                MessageType::Renew,
                &duid(4),
                Some(SERVER_DUID),
                Some((1, Some(ip(reserved)))),
            ),
            &[],
            &of(4, 1_000),
        );
        assert_eq!(d.outcome, Outcome6::NoBinding, "{reserved}");
        // A client that shows no MAC is not the machine either.
        let mut no_mac = of(1, 1_000);
        no_mac.mac = None;
        let d = e.handle_message(
            &message(
                MessageType::Solicit,
                &[9, 9],
                None,
                Some((1, Some(ip(reserved)))),
            ),
            &[],
            &no_mac,
        );
        let given = ia_of(d.reply.as_ref().unwrap(), 1).0;
        assert!(
            given
                .iter()
                .all(|(a, valid)| *a != ip(reserved) || *valid == 0),
            "{given:?}"
        );
        assert_eq!(bind(&mut e, 1, None, 1_000), Some(ip(reserved)));
    }
}

#[test]
fn the_machine_keeps_its_address_under_a_new_duid_but_gets_only_that_one() {
    let mut e = engine(&reserving("fd00:1::99"));
    assert_eq!(bind(&mut e, 1, None, 1_000), Some(ip("fd00:1::99")));
    // The OS the firmware booted shows another DUID (a DUID-LLT of the same MAC).
    let os = [0, 1, 0, 1, 0x2e, 0x7f, 0, 1, 0x52, 0x54, 0, 0, 0, 1];
    let d = e.handle_message(
        &message(MessageType::Solicit, &os, None, Some((5, None))),
        &[],
        &of(1, 1_100),
    );
    assert_eq!(
        ia_of(d.reply.as_ref().unwrap(), 5).0,
        vec![(ip("fd00:1::99"), 1000)]
    );
    // One address per machine: a second IA of the same client gets none.
    let mut two = message(MessageType::Solicit, &os, None, Some((5, None)));
    two.opts_mut().insert(DhcpOption::IANA(dhcproto::v6::IANA {
        id: 6,
        t1: 0,
        t2: 0,
        opts: Default::default(),
    }));
    let d = e.handle_message(&two, &[], &of(1, 1_100));
    let r = d.reply.as_ref().unwrap();
    assert_eq!(ia_of(r, 5).0, vec![(ip("fd00:1::99"), 1000)]);
    assert_eq!(ia_of(r, 6), (vec![], Some(Status::NoAddrsAvail)));
}

#[test]
fn a_lease_on_an_address_reserved_since_is_taken_back_at_its_renew() {
    let mut before = Engine6::new(&config(""), SERVER_DUID.to_vec(), Vec::new(), 1_000);
    assert_eq!(bind(&mut before, 2, None, 1_000), Some(ip("fd00:1::10")));
    let stored: Vec<Lease6> = before.leases().cloned().collect();
    let mut e = Engine6::new(
        &config(&reserving("fd00:1::10")),
        SERVER_DUID.to_vec(),
        stored,
        1_010,
    );
    let d = e.handle_message(
        &message(
            MessageType::Renew,
            &duid(2),
            Some(SERVER_DUID),
            Some((1, Some(ip("fd00:1::10")))),
        ),
        &[],
        &of(2, 1_020),
    );
    assert_eq!(d.outcome, Outcome6::NoBinding);
    assert_eq!(
        ia_of(d.reply.as_ref().unwrap(), 1),
        (vec![(ip("fd00:1::10"), 0)], Some(Status::NoBinding))
    );
    let [Lease6Effect::Put(l)] = d.effects.as_slice() else {
        panic!("one Put: {:?}", d.effects)
    };
    assert_eq!((l.ip, l.state), (ip("fd00:1::10"), LeaseState::Released));
    assert_eq!(bind(&mut e, 1, None, 1_030), Some(ip("fd00:1::10")));
    assert_eq!(bind(&mut e, 2, None, 1_030), Some(ip("fd00:1::11")));
}

#[test]
fn with_members_only_the_answering_member_gives_the_reservation() {
    let text = |me: &str| {
        format!(
            "[owner]\nself = \"{me}\"\ninsecure_members = true\n[[member]]\nname = \"a\"\nhttp_url = \"http://127.0.0.1:1\"\n[[member]]\nname = \"b\"\nhttp_url = \"http://127.0.0.1:2\"\n{}",
            reserving("fd00:1::12")
        )
    };
    for me in ["a", "b"] {
        let mut e = Engine6::new(&config(&text(me)), SERVER_DUID.to_vec(), Vec::new(), 0);
        let solicit = message(MessageType::Solicit, &duid(1), None, Some((1, None)));
        // As v4: a member not responsible for the machine stays silent...
        let mut not_mine = of(1, 1_000);
        not_mine.responsibility = Responsibility::NotMine;
        assert_eq!(
            e.handle_message(&solicit, &[], &not_mine).outcome,
            Outcome6::Ignored(Ignore6::NotResponsible)
        );
        // ...and the one that answers gives the reserved address, in its share or not.
        let d = e.handle_message(&solicit, &[], &of(1, 1_000));
        assert_eq!(
            ia_of(d.reply.as_ref().unwrap(), 1).0,
            vec![(ip("fd00:1::12"), 1000)],
            "member {me}"
        );
    }
}

#[test]
fn the_host_name_goes_back_in_option_39_to_a_client_that_sent_one() {
    let mut e = engine(&reserving("fd00:1::99"));
    let fqdn = |r: &Message| match r.opts().get(OptionCode::ClientFqdn) {
        Some(DhcpOption::Unknown(u)) => Some(u.data().to_vec()),
        _ => None,
    };
    let plain = e.handle_message(
        &message(MessageType::Solicit, &duid(1), None, Some((1, None))),
        &[],
        &of(1, 1_000),
    );
    assert_eq!(fqdn(plain.reply.as_ref().unwrap()), None);
    let mut asks = message(MessageType::Solicit, &duid(1), None, Some((1, None)));
    // Flags S (update the AAAA record, please) and the name "pc".
    asks.opts_mut()
        .insert(DhcpOption::Unknown(UnknownOption::new(
            OptionCode::ClientFqdn,
            vec![0x01, 2, b'p', b'c', 0],
        )));
    let d = e.handle_message(&asks, &[], &of(1, 1_000));
    // N (no DNS update here) and O (the S asked for is overridden), then the name.
    assert_eq!(
        fqdn(d.reply.as_ref().unwrap()),
        Some([&[0x06, 7][..], b"node-01"].concat())
    );
}
