//! RFC conformance cases found by an independent conformance suite (issue 30): each
//! drives the engine with real messages and checks the exact reply fields or state.

use super::*;

/// Option 61 of a reply, if it carries one.
fn client_id_of(d: &Decision) -> Option<Vec<u8>> {
    match d
        .reply
        .as_ref()?
        .message
        .opts()
        .get(OptionCode::ClientIdentifier)
    {
        Some(DhcpOption::ClientIdentifier(id)) => Some(id.clone()),
        _ => None,
    }
}

#[test]
fn the_client_identifier_comes_back_unaltered_in_offer_ack_and_nak() {
    // RFC 6842 §3. A DUID-style identifier (type 255, IAID, DUID), as dhclient sends.
    let id = vec![255, 0, 0, 0, 1, 0, 4, 0x8d, 0x2a, 0x11, 0, 0, 0, 0, 0, 7];
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let cid = |m: Message| with(m, DhcpOption::ClientIdentifier(id.clone()));
    let d = e.handle_message(&cid(msg(MessageType::Discover, mac(1))), &ctx(&i, T0));
    assert_eq!(kind(&d), Some(MessageType::Offer));
    assert_eq!(client_id_of(&d).as_deref(), Some(&id[..]), "OFFER");
    let ip = offered(&d);
    let d = e.handle_message(&cid(request_selecting(mac(1), ip)), &ctx(&i, T0));
    assert_eq!(kind(&d), Some(MessageType::Ack));
    assert_eq!(client_id_of(&d).as_deref(), Some(&id[..]), "ACK");
    // INIT-REBOOT on the wrong network: NAK, with the identifier too.
    let wrong = with(
        msg(MessageType::Request, mac(1)),
        DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 9, 9, 9)),
    );
    let d = e.handle_message(&cid(wrong), &ctx(&i, T0));
    assert_eq!(kind(&d), Some(MessageType::Nak));
    assert_eq!(client_id_of(&d).as_deref(), Some(&id[..]), "NAK");
    // It survives encoding and the layout for a client that takes only 576 octets.
    let mut buf = Vec::new();
    d.reply.as_ref().unwrap().encode(&mut buf).unwrap();
    assert_eq!(crate::dhcp::wire::raw_option(&buf, 61), Some(id.clone()));
    // A client that sends none gets none.
    let d = e.handle_message(&msg(MessageType::Discover, mac(2)), &ctx(&i, T0));
    assert_eq!(kind(&d), Some(MessageType::Offer));
    assert_eq!(client_id_of(&d), None);
}

#[test]
fn an_offer_has_ciaddr_zero_even_when_the_discover_carried_one() {
    // RFC 2131 §4.3.1 Table 3: 'ciaddr' 0 in a DHCPOFFER; a DHCPACK copies the
    // REQUEST's. A client re-acquiring after a reboot may leave its old address in.
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let ip = bind(&mut e, &i, mac(1), T0);
    let mut discover = msg(MessageType::Discover, mac(1));
    discover.set_ciaddr(ip);
    let d = e.handle_message(&discover, &ctx(&i, T0 + 5));
    let offer = &d.reply.as_ref().unwrap().message;
    assert_eq!(kind(&d), Some(MessageType::Offer));
    assert_eq!(
        (offer.ciaddr(), offer.yiaddr()),
        (Ipv4Addr::UNSPECIFIED, ip)
    );
    // RENEWING: the ACK's ciaddr is the client's.
    let mut renew = msg(MessageType::Request, mac(1));
    renew.set_ciaddr(ip);
    let d = e.handle_message(&renew, &ctx(&i, T0 + 10));
    assert_eq!(kind(&d), Some(MessageType::Ack));
    assert_eq!(d.reply.as_ref().unwrap().message.ciaddr(), ip);
}

/// A message through the relay on 198.51.100.1: the subnet of three addresses
/// (198.51.100.10 - .12).
fn relayed(kind: MessageType, m: MacAddr) -> Message {
    let mut d = msg(kind, m);
    d.set_giaddr(Ipv4Addr::new(198, 51, 100, 1));
    d
}

#[test]
fn a_quarantine_offer_or_lease_ends_at_its_time_without_waiting_for_a_tick() {
    // A 2 s quarantine: a DISCOVER 5 s after the DECLINE may get the address, though no
    // reclaim pass (`handle_tick`, every `reclaim_interval_secs`) ran since.
    let mut cfg = config("");
    cfg.dhcp.decline_hold_secs = 2;
    let (i, mut e) = (iface(), Engine::new(&cfg, vec![], T0));
    let declined =
        offered(&e.handle_message(&relayed(MessageType::Discover, mac(1)), &ctx(&i, T0)));
    let dec = with(
        relayed(MessageType::Decline, mac(1)),
        DhcpOption::RequestedIpAddress(declined),
    );
    assert_eq!(
        e.handle_message(&dec, &ctx(&i, T0)).outcome,
        Outcome::Decline(declined)
    );
    for n in 2..=3 {
        let ip = offered(&e.handle_message(&relayed(MessageType::Discover, mac(n)), &ctx(&i, T0)));
        let req = with(
            with(
                relayed(MessageType::Request, mac(n)),
                DhcpOption::ServerIdentifier(SERVER),
            ),
            DhcpOption::RequestedIpAddress(ip),
        );
        assert_eq!(
            e.handle_message(&req, &ctx(&i, T0)).outcome,
            Outcome::Ack(ip)
        );
    }
    let newcomer = |e: &mut Engine, n: u8, now: u64| {
        e.handle_message(&relayed(MessageType::Discover, mac(n)), &ctx(&i, now))
            .outcome
    };
    assert_eq!(
        newcomer(&mut e, 4, T0 + 1),
        Outcome::Ignored(IgnoreReason::PoolExhausted),
        "still quarantined"
    );
    assert_eq!(newcomer(&mut e, 4, T0 + 5), Outcome::Offer(declined));
    // That offer is held 60 s; after that the address goes to the next machine.
    assert_eq!(
        newcomer(&mut e, 5, T0 + 64),
        Outcome::Ignored(IgnoreReason::PoolExhausted)
    );
    assert_eq!(newcomer(&mut e, 5, T0 + 66), Outcome::Offer(declined));
    // The two leases run 3600 s: past them, and past the last offer, all three
    // addresses go to new machines.
    let mut got: Vec<Ipv4Addr> = (6..=8)
        .map(|n| match newcomer(&mut e, n, T0 + 3601) {
            Outcome::Offer(ip) => ip,
            o => panic!("machine {n}: {o:?}"),
        })
        .collect();
    got.sort();
    let all: Vec<Ipv4Addr> = (10..=12).map(|n| Ipv4Addr::new(198, 51, 100, n)).collect();
    assert_eq!(got, all);
}

/// An INIT-REBOOT REQUEST (RFC 2131 §4.3.2): option 50, no server identifier, ciaddr 0.
fn init_reboot(m: MacAddr, ip: Ipv4Addr) -> Message {
    with(
        msg(MessageType::Request, m),
        DhcpOption::RequestedIpAddress(ip),
    )
}

#[test]
fn init_reboot_outside_every_range_is_naked_and_a_stranger_is_not_answered() {
    // 192.0.2.0/24 hands out .100 - .199; .20 is reserved for mac 1 outside the range.
    let hosts = "[[host]]\nmac = \"52:54:00:00:00:01\"\nip = \"192.0.2.20\"\n";
    let (i, mut e) = (iface(), Engine::new(&config(hosts), vec![], T0));
    let (outside, reserved) = (Ipv4Addr::new(192, 0, 2, 50), Ipv4Addr::new(192, 0, 2, 20));
    // (a) On the client's network but outside every range: no server of this
    // configuration gave it, so NAK (broadcast, yiaddr 0), for a client with no record.
    let d = e.handle_message(&init_reboot(mac(9), outside), &ctx(&i, T0));
    assert_eq!(kind(&d), Some(MessageType::Nak));
    let nak = d.reply.as_ref().unwrap();
    assert_eq!(
        (nak.message.yiaddr(), nak.destination),
        (Ipv4Addr::UNSPECIFIED, Destination::Broadcast)
    );
    assert!(d.effects.is_empty());
    // Another client's reservation is as wrong for this one.
    assert_eq!(
        kind(&e.handle_message(&init_reboot(mac(9), reserved), &ctx(&i, T0))),
        Some(MessageType::Nak)
    );
    // Its own reservation is not: no record yet, so silence; once bound, ACK.
    assert_eq!(
        e.handle_message(&init_reboot(mac(1), reserved), &ctx(&i, T0))
            .outcome,
        Outcome::Ignored(IgnoreReason::NoRecord)
    );
    assert_eq!(bind(&mut e, &i, mac(1), T0), reserved);
    assert_eq!(
        e.handle_message(&init_reboot(mac(1), reserved), &ctx(&i, T0 + 1))
            .outcome,
        Outcome::Ack(reserved)
    );
    // (b) An address in the range that another client holds: a client this server has
    // no record of gets silence, nothing changes.
    let held = bind(&mut e, &i, mac(2), T0);
    let d = e.handle_message(&init_reboot(mac(9), held), &ctx(&i, T0 + 1));
    assert_eq!(
        (d.outcome, d.reply.is_none(), d.effects.is_empty()),
        (Outcome::Ignored(IgnoreReason::NoRecord), true, true)
    );
    assert_eq!(e.lease(held).map(|l| l.mac), Some(mac(2)));
    // A client it knows (bound elsewhere) asking for that address: its notion is wrong.
    let known = bind(&mut e, &i, mac(3), T0);
    assert_ne!(known, held);
    assert_eq!(
        kind(&e.handle_message(&init_reboot(mac(3), held), &ctx(&i, T0 + 1))),
        Some(MessageType::Nak)
    );
    // The wrong network still gets a NAK, a client's own lease an ACK.
    assert_eq!(
        kind(&e.handle_message(
            &init_reboot(mac(9), Ipv4Addr::new(10, 9, 9, 9)),
            &ctx(&i, T0 + 1)
        )),
        Some(MessageType::Nak)
    );
    assert_eq!(
        e.handle_message(&init_reboot(mac(2), held), &ctx(&i, T0 + 1))
            .outcome,
        Outcome::Ack(held)
    );
}

#[test]
fn init_reboot_from_a_client_a_member_has_no_record_of_is_not_answered() {
    // Three members; a is responsible for the client but never saw it. The address it
    // asks for is one a bound to another client: silence, the others may know better.
    let i = iface();
    let cfg = config(&format!(
        "[owner]\ninsecure_members = true\nself = \"a\"\n{THREE_MEMBERS}"
    ));
    let mut e = Engine::new(&cfg, Vec::new(), T0);
    let held = bind(&mut e, &i, mac(1), T0);
    let d = e.handle_message(&init_reboot(mac(7), held), &ctx(&i, T0 + 10));
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::NoRecord));
    assert!(d.reply.is_none());
    // An address outside every range: another member may have reserved it for the
    // client at run time, so a member without a record stays silent too; one with a
    // record of the client (its lease at another address) says NAK.
    let outside = Ipv4Addr::new(192, 0, 2, 7);
    assert_eq!(
        e.handle_message(&init_reboot(mac(7), outside), &ctx(&i, T0 + 10))
            .outcome,
        Outcome::Ignored(IgnoreReason::NoRecord)
    );
    assert_eq!(
        kind(&e.handle_message(&init_reboot(mac(1), outside), &ctx(&i, T0 + 10))),
        Some(MessageType::Nak)
    );
    // The wrong network is wrong whoever asks.
    assert_eq!(
        kind(&e.handle_message(
            &init_reboot(mac(7), Ipv4Addr::new(10, 9, 9, 9)),
            &ctx(&i, T0 + 10)
        )),
        Some(MessageType::Nak)
    );
}

fn decline(m: MacAddr, ip: Ipv4Addr) -> Message {
    with(
        with(
            msg(MessageType::Decline, m),
            DhcpOption::RequestedIpAddress(ip),
        ),
        DhcpOption::ServerIdentifier(SERVER),
    )
}

fn quarantined(e: &Engine) -> usize {
    e.leases()
        .filter(|l| l.state == LeaseState::Declined)
        .count()
}

#[test]
fn a_known_mac_declines_only_what_it_holds() {
    // mac 9 has a [[host]] entry: known, and so exempt from the overall cap.
    let i = iface();
    let mut e = limited(|c| c.hosts.push(known_host(mac(9))));
    let free = Ipv4Addr::new(192, 0, 2, 150);
    // An address it was never offered: nothing changes.
    let d = e.handle_message(&decline(mac(9), free), &ctx(&i, T0));
    assert_eq!(
        (d.outcome, d.effects.is_empty()),
        (Outcome::Ignored(IgnoreReason::NoRecord), true)
    );
    assert!(e.lease(free).is_none());
    // An address it bound and released: no longer its to decline.
    let ip = bind(&mut e, &i, mac(9), T0);
    let mut rel = msg(MessageType::Release, mac(9));
    rel.set_ciaddr(ip);
    assert_eq!(
        e.handle_message(&rel, &ctx_from(&i, T0 + 1, ip)).outcome,
        Outcome::Release(ip)
    );
    let d = e.handle_message(&decline(mac(9), ip), &ctx(&i, T0 + 2));
    assert_eq!(
        (d.outcome, d.effects.is_empty()),
        (Outcome::Ignored(IgnoreReason::NoRecord), true)
    );
    assert_eq!(e.lease(ip).map(|l| l.state), Some(LeaseState::Released));
    assert_eq!(quarantined(&e), 0);
    // Bound again, it may decline it; declining it once more does not extend the hold.
    assert_eq!(bind(&mut e, &i, mac(9), T0 + 3), ip);
    let d = e.handle_message(&decline(mac(9), ip), &ctx(&i, T0 + 4));
    assert_eq!(d.outcome, Outcome::Decline(ip));
    let until = e.lease(ip).unwrap().expires;
    let d = e.handle_message(&decline(mac(9), ip), &ctx(&i, T0 + 5));
    assert_eq!(d.outcome, Outcome::Ignored(IgnoreReason::NoRecord));
    assert_eq!(e.lease(ip).unwrap().expires, until);
}

#[test]
fn a_known_mac_looping_discover_decline_stops_at_the_per_mac_cap() {
    // A sniffed, allowed MAC (the owner resolver knows it) replayed by an attacker.
    let i = iface();
    let mut e = limited(|c| c.dhcp.declines_per_mac = 2);
    let known = PacketContext {
        known: true,
        ..ctx(&i, T0)
    };
    let mut outcomes = Vec::new();
    for _ in 0..10 {
        let ip = offered(&e.handle_message(&msg(MessageType::Discover, mac(1)), &known));
        outcomes.push(e.handle_message(&decline(mac(1), ip), &known).outcome);
    }
    assert!(matches!(
        outcomes[..2],
        [Outcome::Decline(_), Outcome::Decline(_)]
    ));
    assert!(
        outcomes[2..]
            .iter()
            .all(|o| *o == Outcome::Ignored(IgnoreReason::Limited)),
        "{outcomes:?}"
    );
    assert_eq!(quarantined(&e), 2);
    // The overall cap still binds unknown machines only: at it, an unknown MAC's
    // DECLINE is ignored and a known one's (within its own cap) is not.
    let mut e = limited(|c| c.dhcp.max_declined = 1);
    let ip = offered(&e.handle_message(&msg(MessageType::Discover, mac(2)), &ctx(&i, T0)));
    assert_eq!(
        e.handle_message(&decline(mac(2), ip), &ctx(&i, T0)).outcome,
        Outcome::Decline(ip)
    );
    let ip = offered(&e.handle_message(&msg(MessageType::Discover, mac(3)), &ctx(&i, T0)));
    assert_eq!(
        e.handle_message(&decline(mac(3), ip), &ctx(&i, T0)).outcome,
        Outcome::Ignored(IgnoreReason::Limited)
    );
    let ip = offered(&e.handle_message(&msg(MessageType::Discover, mac(1)), &known));
    assert_eq!(
        e.handle_message(&decline(mac(1), ip), &known).outcome,
        Outcome::Decline(ip)
    );
}

#[test]
fn one_octet_flags_and_octets_written_out_reach_the_ack() {
    // dnsmasq and Kea configs write RFC 2132's flags as `29,00`; any code takes octets.
    let entries = ["29,00", "30,01", "39,1", "26,05:dc", "200,00"].map(String::from);
    let mut cfg = config("");
    cfg.dhcp.options = crate::options::parse_all(&entries).unwrap();
    let (i, mut e) = (iface(), Engine::new(&cfg, vec![], T0));
    let ack = ack_for(&mut e, &i, msg(MessageType::Discover, mac(1)), T0);
    assert_eq!(ack.message.opts().msg_type(), Some(MessageType::Ack));
    for (code, want) in [
        (29, vec![0]),
        (30, vec![1]),
        (39, vec![1]),
        (26, vec![5, 220]),
        (200, vec![0]),
    ] {
        assert_eq!(raw(&ack, code), Some(want), "option {code}");
    }
}

#[test]
fn a_release_on_the_link_counts_only_from_the_address_it_releases() {
    // RFC 2131 §4.4.6: the client unicasts its RELEASE from ciaddr. A hostile host on
    // the link copies a victim's chaddr and ciaddr and sends from its own address (or
    // from none): ignored, nothing to persist, the lease untouched.
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let ip = bind(&mut e, &i, mac(1), T0);
    assert_eq!(ip, Ipv4Addr::new(192, 0, 2, 100));
    let bound = e.lease(ip).cloned().unwrap();
    let mut rel = msg(MessageType::Release, mac(1));
    rel.set_ciaddr(ip);
    for source in [Ipv4Addr::new(192, 0, 2, 77), Ipv4Addr::UNSPECIFIED] {
        let d = e.handle_message(&rel, &ctx_from(&i, T0 + 1, source));
        assert_eq!(
            (d.outcome, d.reply.is_none(), d.effects.is_empty()),
            (Outcome::Ignored(IgnoreReason::NotFromClient), true, true),
            "from {source}"
        );
        assert_eq!(e.lease(ip), Some(&bound), "from {source}");
    }
    assert_eq!(IgnoreReason::NotFromClient.as_str(), "not_from_client");
    // Nobody else is offered the victim's address.
    assert_ne!(
        offered(&e.handle_message(&msg(MessageType::Discover, mac(2)), &ctx(&i, T0 + 2))),
        ip
    );
    // From ciaddr itself: released, the record kept (state released, expired now).
    let d = e.handle_message(&rel, &ctx_from(&i, T0 + 3, ip));
    assert_eq!((d.outcome, d.reply.is_none()), (Outcome::Release(ip), true));
    let [LeaseEffect::Put(l)] = &d.effects[..] else {
        panic!("{:?}", d.effects)
    };
    assert_eq!(
        (l.ip, l.mac, l.state, l.starts, l.expires),
        (ip, mac(1), LeaseState::Released, bound.starts, T0 + 3)
    );
}

#[test]
fn a_relayed_release_counts_from_the_relay() {
    // A relayed RELEASE comes from the relay (giaddr, sending from its own address);
    // the shell lets it through only from a trusted relay (`dhcp.relays`).
    let (i, mut e) = (iface(), Engine::new(&config(""), vec![], T0));
    let relay = Ipv4Addr::new(198, 51, 100, 1);
    let relayed = |mut m: Message| {
        m.set_giaddr(relay);
        m
    };
    let ip = offered(&e.handle_message(
        &relayed(msg(MessageType::Discover, mac(1))),
        &ctx_from(&i, T0, relay),
    ));
    let d = e.handle_message(
        &relayed(request_selecting(mac(1), ip)),
        &ctx_from(&i, T0, relay),
    );
    assert_eq!(d.outcome, Outcome::Ack(ip));
    let mut rel = relayed(msg(MessageType::Release, mac(1)));
    rel.set_ciaddr(ip);
    let d = e.handle_message(&rel, &ctx_from(&i, T0 + 1, relay));
    assert_eq!(d.outcome, Outcome::Release(ip));
    assert_eq!(
        e.lease(ip).map(|l| (l.state, l.expires)),
        Some((LeaseState::Released, T0 + 1))
    );
}
