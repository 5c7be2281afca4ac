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
