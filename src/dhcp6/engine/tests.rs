use std::net::Ipv6Addr;

use dhcproto::v6::{
    DhcpOption, DhcpOptions, IAAddr, Message, MessageType, OptionCode, Status, UserClass,
    VendorClass, IANA,
};

use super::*;
use crate::config::Config;
use crate::mac::MacAddr;
use crate::store::Lease6Effect;

pub(super) const SERVER_DUID: &[u8] =
    &[0, 4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];

pub(super) fn config(extra: &str) -> Config {
    let text = format!(
        "state_dir = \"/tmp/unused\"\n{extra}\n[store]\nshared = \"postgres://db.test/shardboot\"\n[[subnet6]]\nnetwork = \"fd00:1::/64\"\nranges = [\"fd00:1::10 - fd00:1::13\"]\nlease_time = 1000\ndns = [\"fd00:1::1\"]\n"
    );
    Config::from_toml_with_overrides(&text, &[]).expect("config")
}

pub(super) fn engine(extra: &str) -> Engine6 {
    Engine6::new(&config(extra), SERVER_DUID.to_vec(), Vec::new(), 1_000)
}

const ADDRS: &[Ipv6Addr] = &[Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1)];

pub(super) fn ctx(now: u64) -> Context6<'static> {
    Context6 {
        arrival: Arrival {
            interface: "prov0",
            addresses: ADDRS,
            destination: "ff02::1:2".parse().unwrap(),
        },
        mac: Some(MacAddr([0x52, 0x54, 0, 0, 0, 1])),
        responsibility: Responsibility::Mine,
        policy: None,
        now,
    }
}

pub(super) fn duid(n: u8) -> Vec<u8> {
    vec![0, 3, 0, 1, 0x52, 0x54, 0, 0, 0, n]
}

pub(super) fn message(
    kind: MessageType,
    client: &[u8],
    server: Option<&[u8]>,
    ia: Option<(u32, Option<Ipv6Addr>)>,
) -> Message {
    let mut m = Message::new_with_id(kind, [1, 2, 3]);
    let o = m.opts_mut();
    o.insert(DhcpOption::ClientId(client.to_vec()));
    if let Some(s) = server {
        o.insert(DhcpOption::ServerId(s.to_vec()));
    }
    if let Some((id, addr)) = ia {
        let mut opts = DhcpOptions::new();
        if let Some(addr) = addr {
            opts.insert(DhcpOption::IAAddr(IAAddr {
                addr,
                preferred_life: 0,
                valid_life: 0,
                opts: DhcpOptions::new(),
            }));
        }
        o.insert(DhcpOption::IANA(IANA {
            id,
            t1: 0,
            t2: 0,
            opts,
        }));
    }
    m
}

/// The addresses (with valid lifetimes) of the reply's IA_NA `iaid`, and its status.
pub(super) fn ia_of(reply: &Message, iaid: u32) -> (Vec<(Ipv6Addr, u32)>, Option<Status>) {
    let ia = reply::ia_nas(reply)
        .into_iter()
        .find(|ia| ia.id == iaid)
        .expect("the IA is answered");
    let addrs = ia
        .opts
        .get_all(OptionCode::IAAddr)
        .unwrap_or(&[])
        .iter()
        .filter_map(|o| match o {
            DhcpOption::IAAddr(a) => Some((a.addr, a.valid_life)),
            _ => None,
        })
        .collect();
    let status = match ia.opts.get(OptionCode::StatusCode) {
        Some(DhcpOption::StatusCode(s)) => Some(s.status),
        _ => None,
    };
    (addrs, status)
}

pub(super) fn ip(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// `reply` as the client reads it: encoded, then decoded.
fn on_the_wire(reply: Message) -> Message {
    use dhcproto::{Decodable, Decoder, Encodable, Encoder};
    let mut bytes = Vec::new();
    reply.encode(&mut Encoder::new(&mut bytes)).unwrap();
    Message::decode(&mut Decoder::new(&bytes)).unwrap()
}

fn boot_url(reply: &Message) -> Option<String> {
    match reply.opts().get(OptionCode::OptBootfileUrl) {
        Some(DhcpOption::Unknown(u)) => Some(String::from_utf8(u.data().to_vec()).unwrap()),
        _ => None,
    }
}

#[test]
fn solicit_request_renew_release_and_the_same_address_again() {
    let mut e = engine("");
    let c = duid(1);
    let adv = e.handle_message(
        &message(MessageType::Solicit, &c, None, Some((7, None))),
        &[],
        &ctx(1_000),
    );
    assert_eq!(adv.outcome, Outcome6::Advertise(1));
    assert!(adv.effects.is_empty(), "an Advertise is not stored");
    let adv = adv.reply.unwrap();
    assert_eq!(adv.msg_type(), MessageType::Advertise);
    assert_eq!(adv.xid(), [1, 2, 3]);
    assert_eq!(
        adv.opts().get(OptionCode::ServerId),
        Some(&DhcpOption::ServerId(SERVER_DUID.to_vec()))
    );
    assert_eq!(
        adv.opts().get(OptionCode::ClientId),
        Some(&DhcpOption::ClientId(c.clone()))
    );
    assert_eq!(
        adv.opts().get(OptionCode::Preference),
        Some(&DhcpOption::Preference(255))
    );
    assert_eq!(
        adv.opts().get(OptionCode::DomainNameServers),
        Some(&DhcpOption::DomainNameServers(vec![ip("fd00:1::1")]))
    );
    let (addrs, status) = ia_of(&adv, 7);
    assert_eq!(
        (addrs.clone(), status),
        (vec![(ip("fd00:1::10"), 1000)], None)
    );

    // A second client is advertised another address while the first is held.
    let other = e.handle_message(
        &message(MessageType::Solicit, &duid(2), None, Some((1, None))),
        &[],
        &ctx(1_001),
    );
    assert_eq!(
        ia_of(other.reply.as_ref().unwrap(), 1).0,
        vec![(ip("fd00:1::11"), 1000)]
    );

    let req = e.handle_message(
        &message(
            MessageType::Request,
            &c,
            Some(SERVER_DUID),
            Some((7, Some(ip("fd00:1::10")))),
        ),
        &[],
        &ctx(1_002),
    );
    assert_eq!(req.outcome, Outcome6::Bound(1));
    let [Lease6Effect::Put(l)] = req.effects.as_slice() else {
        panic!("one Put: {:?}", req.effects)
    };
    assert_eq!(
        (l.ip, l.iaid, l.state, l.expires, l.preferred),
        (ip("fd00:1::10"), 7, LeaseState::Bound, 2_002, 2_002)
    );
    assert_eq!(l.duid, c);
    assert_eq!(l.mac, Some(MacAddr([0x52, 0x54, 0, 0, 0, 1])));
    let reply = req.reply.unwrap();
    assert_eq!(reply.msg_type(), MessageType::Reply);
    let ia = reply::ia_nas(&reply)[0];
    assert_eq!((ia.t1, ia.t2), (500, 800));

    let renew = e.handle_message(
        &message(
            MessageType::Renew,
            &c,
            Some(SERVER_DUID),
            Some((7, Some(ip("fd00:1::10")))),
        ),
        &[],
        &ctx(1_500),
    );
    assert_eq!(renew.outcome, Outcome6::Bound(1));
    assert!(matches!(renew.effects.as_slice(), [Lease6Effect::Put(l)] if l.expires == 2_500));

    let rel = e.handle_message(
        &message(
            MessageType::Release,
            &c,
            Some(SERVER_DUID),
            Some((7, Some(ip("fd00:1::10")))),
        ),
        &[],
        &ctx(1_600),
    );
    assert_eq!(rel.outcome, Outcome6::Released);
    assert!(
        matches!(rel.effects.as_slice(), [Lease6Effect::Put(l)] if l.state == LeaseState::Released)
    );
    assert!(
        matches!(rel.reply.unwrap().opts().get(OptionCode::StatusCode), Some(DhcpOption::StatusCode(s)) if s.status == Status::Success)
    );

    // Released, and nobody took it: the client gets it back.
    let again = e.handle_message(
        &message(MessageType::Solicit, &c, None, Some((7, None))),
        &[],
        &ctx(1_700),
    );
    assert_eq!(
        ia_of(again.reply.as_ref().unwrap(), 7).0[0].0,
        ip("fd00:1::10")
    );
}

#[test]
fn a_restarted_engine_gives_each_ia_its_stored_address() {
    let mut e = engine("");
    let mut stored = Vec::new();
    for n in 1..=3u8 {
        let c = duid(n);
        e.handle_message(
            &message(MessageType::Solicit, &c, None, Some((1, None))),
            &[],
            &ctx(1_000),
        );
        let d = e.handle_message(
            &message(MessageType::Request, &c, Some(SERVER_DUID), Some((1, None))),
            &[],
            &ctx(1_000),
        );
        stored.extend(d.effects.into_iter().map(|e| match e {
            Lease6Effect::Put(l) => l,
            other => panic!("{other:?}"),
        }));
    }
    let mut restarted = Engine6::new(&config(""), SERVER_DUID.to_vec(), stored.clone(), 1_100);
    // A new client first: it must not get any of the three stored addresses.
    let new = restarted.handle_message(
        &message(MessageType::Solicit, &duid(9), None, Some((1, None))),
        &[],
        &ctx(1_100),
    );
    assert_eq!(
        ia_of(new.reply.as_ref().unwrap(), 1).0[0].0,
        ip("fd00:1::13")
    );
    for l in &stored {
        let d = restarted.handle_message(
            &message(MessageType::Solicit, &l.duid, None, Some((1, None))),
            &[],
            &ctx(1_100),
        );
        assert_eq!(ia_of(d.reply.as_ref().unwrap(), 1).0[0].0, l.ip);
    }
}

#[test]
fn an_exhausted_range_says_no_addrs_avail_and_a_decline_quarantines() {
    let mut e = engine("");
    for n in 1..=4u8 {
        let d = e.handle_message(
            &message(MessageType::Solicit, &duid(n), None, Some((1, None))),
            &[],
            &ctx(1_000),
        );
        assert_eq!(d.outcome, Outcome6::Advertise(1));
    }
    let full = e.handle_message(
        &message(MessageType::Solicit, &duid(5), None, Some((1, None))),
        &[],
        &ctx(1_000),
    );
    assert_eq!(full.outcome, Outcome6::NoAddresses);
    let r = full.reply.unwrap();
    assert_eq!(ia_of(&r, 1).1, Some(Status::NoAddrsAvail));
    assert!(
        matches!(r.opts().get(OptionCode::StatusCode), Some(DhcpOption::StatusCode(s)) if s.status == Status::NoAddrsAvail)
    );

    // Client 1 binds, then finds its address in use (DAD) and declines it.
    e.handle_message(
        &message(
            MessageType::Request,
            &duid(1),
            Some(SERVER_DUID),
            Some((1, None)),
        ),
        &[],
        &ctx(1_000),
    );
    let dec = e.handle_message(
        &message(
            MessageType::Decline,
            &duid(1),
            Some(SERVER_DUID),
            Some((1, Some(ip("fd00:1::10")))),
        ),
        &[],
        &ctx(1_001),
    );
    assert_eq!(dec.outcome, Outcome6::Declined);
    assert!(
        matches!(dec.effects.as_slice(), [Lease6Effect::Put(l)] if l.state == LeaseState::Declined && l.ip == ip("fd00:1::10"))
    );
    // The offers of the others lapse; the declined address stays out of use.
    e.handle_tick(1_000 + 121);
    let next = e.handle_message(
        &message(MessageType::Solicit, &duid(1), None, Some((1, None))),
        &[],
        &ctx(1_200),
    );
    assert_ne!(
        ia_of(next.reply.as_ref().unwrap(), 1).0[0].0,
        ip("fd00:1::10")
    );
}

#[test]
fn messages_for_another_server_or_missing_identifiers_are_dropped() {
    let mut e = engine("");
    let c = duid(1);
    let other = e.handle_message(
        &message(
            MessageType::Request,
            &c,
            Some(&[0, 4, 9, 9]),
            Some((1, None)),
        ),
        &[],
        &ctx(1_000),
    );
    assert_eq!(other.outcome, Outcome6::Ignored(Ignore6::OtherServer));
    let unnamed = e.handle_message(
        &message(MessageType::Renew, &c, None, Some((1, None))),
        &[],
        &ctx(1_000),
    );
    assert_eq!(unnamed.outcome, Outcome6::Ignored(Ignore6::Malformed));
    let named_solicit = e.handle_message(
        &message(MessageType::Solicit, &c, Some(SERVER_DUID), Some((1, None))),
        &[],
        &ctx(1_000),
    );
    assert_eq!(named_solicit.outcome, Outcome6::Ignored(Ignore6::Malformed));
    let mut no_client = message(MessageType::Solicit, &c, None, Some((1, None)));
    no_client.opts_mut().remove(OptionCode::ClientId);
    assert_eq!(
        e.handle_message(&no_client, &[], &ctx(1_000)).outcome,
        Outcome6::Ignored(Ignore6::Malformed)
    );
}

/// RFC 8415 §16, §18.4: this server offers no Server Unicast, so a client on the link
/// that unicasts anyway is not served: a Solicit, Rebind, Confirm or
/// Information-request is dropped; a Request, Renew, Release or Decline to this server
/// is told UseMulticast and changes nothing. A relay unicasts by design.
#[test]
fn a_client_that_unicasts_is_told_to_multicast_and_a_relay_is_not() {
    let mut e = engine("");
    let c = duid(1);
    let unicast = |now| {
        let mut x = ctx(now);
        x.arrival.destination = ADDRS[0];
        x
    };
    for kind in [
        MessageType::Solicit,
        MessageType::Rebind,
        MessageType::Confirm,
        MessageType::InformationRequest,
    ] {
        let d = e.handle_message(
            &message(kind, &c, None, Some((1, None))),
            &[],
            &unicast(1_000),
        );
        assert_eq!(d.outcome, Outcome6::Ignored(Ignore6::Unicast), "{kind:?}");
        assert!(d.reply.is_none());
    }
    let req = message(MessageType::Request, &c, Some(SERVER_DUID), Some((1, None)));
    let d = e.handle_message(&req, &[], &unicast(1_000));
    assert_eq!(d.outcome, Outcome6::UseMulticast);
    assert!(d.effects.is_empty(), "no lease for a unicast Request");
    let r = on_the_wire(d.reply.unwrap());
    assert_eq!(r.msg_type(), MessageType::Reply);
    match r.opts().get(OptionCode::StatusCode) {
        Some(DhcpOption::StatusCode(s)) => assert_eq!(s.status, Status::UseMulticast),
        other => panic!("{other:?}"),
    }
    // The same Request to the multicast group binds.
    let d = e.handle_message(&req, &[], &ctx(1_000));
    assert_eq!(d.outcome, Outcome6::Bound(1));
    // Through a relay the server's own address is the destination: served.
    let hop = super::RelayHop {
        hop_count: 0,
        link_addr: ip("fd00:1::1"),
        peer_addr: ip("fe80::1"),
        interface_id: None,
        client_link_layer: None,
    };
    let d = e.handle_message(
        &message(MessageType::Solicit, &duid(2), None, Some((1, None))),
        &[hop],
        &unicast(1_000),
    );
    assert!(
        matches!(d.outcome, Outcome6::Advertise(1)),
        "{:?}",
        d.outcome
    );
}

#[test]
fn another_members_client_gets_no_advertise_but_its_own_binding_is_kept() {
    let mut e = engine("");
    let c = duid(1);
    let mut not_mine = ctx(1_000);
    not_mine.responsibility = Responsibility::NotMine;
    let d = e.handle_message(
        &message(MessageType::Solicit, &c, None, Some((1, None))),
        &[],
        &not_mine,
    );
    assert_eq!(d.outcome, Outcome6::Ignored(Ignore6::NotResponsible));
    e.handle_message(
        &message(MessageType::Solicit, &c, None, Some((1, None))),
        &[],
        &ctx(1_000),
    );
    e.handle_message(
        &message(MessageType::Request, &c, Some(SERVER_DUID), Some((1, None))),
        &[],
        &ctx(1_000),
    );
    // The client holds a lease here: its Rebind (to every server) is answered, with no
    // Preference since it is not a Solicit, by the member that holds it.
    let rebind = e.handle_message(
        &message(
            MessageType::Rebind,
            &c,
            None,
            Some((1, Some(ip("fd00:1::10")))),
        ),
        &[],
        &not_mine,
    );
    assert_eq!(rebind.outcome, Outcome6::Bound(1));
    // A Rebind for an address this member never gave is left to the member that did.
    let stranger = e.handle_message(
        &message(
            MessageType::Rebind,
            &duid(2),
            None,
            Some((1, Some(ip("fd00:1::99")))),
        ),
        &[],
        &not_mine,
    );
    assert_eq!(stranger.outcome, Outcome6::Ignored(Ignore6::NotResponsible));
    assert!(stranger.reply.is_none());
    // The responsible member tells it its binding is unknown, and withdraws an
    // address from another link.
    let lost = e.handle_message(
        &message(
            MessageType::Rebind,
            &duid(2),
            None,
            Some((1, Some(ip("fd00:9::5")))),
        ),
        &[],
        &ctx(1_000),
    );
    // (RFC 8415 §18.3.5: lifetimes 0, no NoBinding for an address off the link.)
    assert_eq!(lost.outcome, Outcome6::NoBinding);
    assert_eq!(
        ia_of(lost.reply.as_ref().unwrap(), 1),
        (vec![(ip("fd00:9::5"), 0)], None)
    );
}

#[test]
fn a_renew_after_the_store_was_lost_rebinds_a_free_address_of_the_share() {
    let mut e = engine("");
    let d = e.handle_message(
        &message(
            MessageType::Renew,
            &duid(1),
            Some(SERVER_DUID),
            Some((1, Some(ip("fd00:1::12")))),
        ),
        &[],
        &ctx(1_000),
    );
    assert_eq!(d.outcome, Outcome6::Bound(1));
    assert_eq!(
        ia_of(d.reply.as_ref().unwrap(), 1).0,
        vec![(ip("fd00:1::12"), 1000)]
    );
    // Now held: another client that claims it gets it back with lifetimes 0 (RFC 8415
    // §18.3.4), not NoBinding.
    let thief = e.handle_message(
        &message(
            MessageType::Renew,
            &duid(2),
            Some(SERVER_DUID),
            Some((1, Some(ip("fd00:1::12")))),
        ),
        &[],
        &ctx(1_000),
    );
    assert_eq!(thief.outcome, Outcome6::NoBinding);
    assert!(thief.effects.is_empty());
    assert_eq!(
        ia_of(thief.reply.as_ref().unwrap(), 1),
        (vec![(ip("fd00:1::12"), 0)], None)
    );
}

#[test]
fn rapid_commit_binds_at_once_only_when_the_subnet_allows_it() {
    let mut m = message(MessageType::Solicit, &duid(1), None, Some((1, None)));
    m.opts_mut().insert(DhcpOption::RapidCommit);
    let mut off = engine("");
    assert_eq!(
        off.handle_message(&m, &[], &ctx(1_000)).outcome,
        Outcome6::Advertise(1)
    );
    let text = "state_dir = \"/tmp/unused\"\n[[subnet6]]\nnetwork = \"fd00:1::/64\"\nranges = [\"fd00:1::10 - fd00:1::13\"]\nrapid_commit = true\n";
    let mut on = Engine6::new(
        &Config::from_toml_with_overrides(text, &[]).unwrap(),
        SERVER_DUID.to_vec(),
        Vec::new(),
        0,
    );
    let d = on.handle_message(&m, &[], &ctx(1_000));
    assert_eq!(d.outcome, Outcome6::Bound(1));
    let r = d.reply.unwrap();
    assert_eq!(r.msg_type(), MessageType::Reply);
    assert!(r.opts().get(OptionCode::RapidCommit).is_some());
    assert!(matches!(d.effects.as_slice(), [Lease6Effect::Put(l)] if l.state == LeaseState::Bound));
}

#[test]
fn firmware_without_option_61_gets_its_boot_url_from_the_vendor_class() {
    let mut e = engine("");
    let mut pxe = message(MessageType::Solicit, &duid(1), None, Some((1, None)));
    pxe.opts_mut().insert(DhcpOption::VendorClass(VendorClass {
        num: 343,
        data: vec![b"PXEClient:Arch:00007:UNDI:003016".to_vec()],
    }));
    let r = on_the_wire(e.handle_message(&pxe, &[], &ctx(1_000)).reply.unwrap());
    let url = boot_url(&r).expect("option 59");
    assert!(url.starts_with("tftp://[fd00:1::1]/"), "{url}");
    assert!(url.ends_with(&config("").boot.uefi_x64), "{url}");
    // No PXEClient echo (dhcp6::boot::BootUrl): UEFI PXE would ask port 4011 first.
    assert!(r.opts().get(OptionCode::VendorClass).is_none());

    let mut ipxe = message(MessageType::Solicit, &duid(2), None, Some((1, None)));
    ipxe.opts_mut().insert(DhcpOption::UserClass(UserClass {
        data: vec![b"iPXE".to_vec()],
    }));
    let r = e.handle_message(&ipxe, &[], &ctx(1_000)).reply.unwrap();
    assert_eq!(
        boot_url(&r).as_deref(),
        Some("http://[fd00:1::1]:8080/boot.ipxe")
    );

    // No firmware markers: an address and no boot file.
    let plain = e.handle_message(
        &message(MessageType::Solicit, &duid(3), None, Some((1, None))),
        &[],
        &ctx(1_000),
    );
    assert_eq!(boot_url(plain.reply.as_ref().unwrap()), None);
}

#[test]
fn the_site_tls_build_asking_over_dhcpv6_is_sent_to_the_tls_route() {
    // A member with boot over TLS (`boot.https_url` here: a TLS listener needs files).
    let mut e = engine("[boot]\nipxe_tls = true\nhttps_url = \"https://prov.site.test:8084\"\n");
    let ask = |e: &mut Engine6, n: u8, class: &[u8]| {
        let mut m = message(MessageType::Solicit, &duid(n), None, Some((1, None)));
        // RFC 8415 §21.15: one item, as iPXE sends its `user-class` setting.
        m.opts_mut().insert(DhcpOption::UserClass(UserClass {
            data: vec![class.to_vec()],
        }));
        let r = on_the_wire(e.handle_message(&m, &[], &ctx(1_000)).reply.unwrap());
        boot_url(&r)
    };
    // The site's build: the TLS route without its scheme, which its script adds.
    assert_eq!(
        ask(&mut e, 1, b"shardboot-tls").as_deref(),
        Some("prov.site.test:8084/boot.ipxe")
    );
    // Stock iPXE still gets the plain script.
    assert_eq!(
        ask(&mut e, 2, b"iPXE").as_deref(),
        Some("http://[fd00:1::1]:8080/boot.ipxe")
    );
    // A member without TLS: the site's build gets the plain URL and fails closed.
    let mut plain = engine("");
    assert_eq!(
        ask(&mut plain, 3, b"shardboot-tls").as_deref(),
        Some("http://[fd00:1::1]:8080/boot.ipxe")
    );
}

#[test]
fn relayed_clients_are_served_from_the_subnet_of_their_link() {
    let mut e = engine("");
    let hop = |link: &str| RelayHop {
        hop_count: 0,
        link_addr: ip(link),
        peer_addr: ip("fe80::5054:ff:fe00:1"),
        interface_id: Some(b"eth0".to_vec()),
        client_link_layer: None,
    };
    let m = message(MessageType::Solicit, &duid(1), None, Some((1, None)));
    let mut relayed = ctx(1_000);
    relayed.arrival.destination = ip("fd00:1::1");
    let d = e.handle_message(&m, &[hop("fd00:1::fffe")], &relayed);
    assert_eq!(d.outcome, Outcome6::Advertise(1));
    let d = e.handle_message(&m, &[hop("fd00:7::1")], &relayed);
    assert_eq!(d.outcome, Outcome6::Ignored(Ignore6::NoSubnet));
    // The interface's address is not the client's link when the relay names another.
    let d = e.handle_message(&m, &[hop("::")], &relayed);
    assert_eq!(d.outcome, Outcome6::Ignored(Ignore6::NoSubnet));
}

#[test]
fn confirm_says_whether_the_addresses_are_on_the_link() {
    let mut e = engine("");
    let on = e.handle_message(
        &message(
            MessageType::Confirm,
            &duid(1),
            None,
            Some((1, Some(ip("fd00:1::50")))),
        ),
        &[],
        &ctx(1_000),
    );
    assert_eq!(on.outcome, Outcome6::Confirmed(true));
    let off = e.handle_message(
        &message(
            MessageType::Confirm,
            &duid(1),
            None,
            Some((1, Some(ip("fd00:2::50")))),
        ),
        &[],
        &ctx(1_000),
    );
    assert_eq!(off.outcome, Outcome6::Confirmed(false));
    assert!(
        matches!(off.reply.unwrap().opts().get(OptionCode::StatusCode), Some(DhcpOption::StatusCode(s)) if s.status == Status::NotOnLink)
    );
}

#[test]
fn members_hand_out_disjoint_addresses() {
    let members = "[owner]\nself = \"a\"\ninsecure_members = true\n[[member]]\nname = \"a\"\nhttp_url = \"http://127.0.0.1:1\"\n[[member]]\nname = \"b\"\nhttp_url = \"http://127.0.0.1:2\"\n";
    let text = |me: &str| {
        format!(
            "state_dir = \"/tmp/unused\"\n{}\n[store]\nshared = \"postgres://db.test/shardboot\"\n[[subnet6]]\nnetwork = \"fd00:1::/64\"\nranges = [\"fd00:1::1000 - fd00:1::1fff\"]\n",
            members.replace("self = \"a\"", &format!("self = \"{me}\""))
        )
    };
    let mut seen = std::collections::HashMap::new();
    for me in ["a", "b"] {
        let cfg = Config::from_toml_with_overrides(&text(me), &[]).expect("config");
        let mut e = Engine6::new(&cfg, vec![0, 4, me.as_bytes()[0]], Vec::new(), 0);
        for n in 0..200u8 {
            let d = e.handle_message(
                &message(
                    MessageType::Solicit,
                    &[me.as_bytes()[0], n],
                    None,
                    Some((1, None)),
                ),
                &[],
                &ctx(1_000),
            );
            let addr = ia_of(d.reply.as_ref().unwrap(), 1).0[0].0;
            assert!(seen.insert(addr, me).is_none(), "{addr} handed out twice");
        }
    }
    assert_eq!(seen.len(), 400);
}

#[test]
fn ironics_pxe_filter_and_known_only_hold_for_v6_too() {
    use crate::dhcp::host_policy::{HostPolicy, PolicySource};
    let mut e = engine("");
    let solicit = message(MessageType::Solicit, &duid(1), None, Some((1, None)));
    let mut denied = ctx(1_000);
    denied.policy = Some((HostPolicy::Deny, PolicySource::HostsDir));
    assert_eq!(
        e.handle_message(&solicit, &[], &denied).outcome,
        Outcome6::Ignored(Ignore6::Denied)
    );
    let mut allowed = ctx(1_000);
    allowed.policy = Some((HostPolicy::Allow, PolicySource::HostsDir));
    assert_eq!(
        e.handle_message(&solicit, &[], &allowed).outcome,
        Outcome6::Advertise(1)
    );

    let mut known_only = engine("[dhcp]\nknown_only = true\n");
    assert_eq!(
        known_only
            .handle_message(&solicit, &[], &ctx(1_000))
            .outcome,
        Outcome6::Ignored(Ignore6::UnknownClient)
    );
    assert_eq!(
        known_only.handle_message(&solicit, &[], &allowed).outcome,
        Outcome6::Advertise(1)
    );
    // A machine that shows no MAC cannot be known.
    let mut no_mac = allowed;
    no_mac.mac = None;
    no_mac.policy = None;
    assert_eq!(
        known_only.handle_message(&solicit, &[], &no_mac).outcome,
        Outcome6::Ignored(Ignore6::UnknownClient)
    );
}

#[test]
fn with_the_shared_store_down_a_renewal_runs_only_to_the_bindings_end() {
    let mut e = engine("");
    let c = duid(1);
    let req = e.handle_message(
        &message(MessageType::Request, &c, Some(SERVER_DUID), Some((7, None))),
        &[],
        &ctx(1_000),
    );
    let (addrs, _) = ia_of(&req.reply.unwrap(), 7);
    let (bound, _) = addrs[0];
    e.set_shared_store_up(false);
    // 400 s later: what is left (600 s of the 1,000), and nothing to store.
    for kind in [MessageType::Renew, MessageType::Rebind] {
        let server = (kind == MessageType::Renew).then_some(SERVER_DUID);
        let d = e.handle_message(
            &message(kind, &c, server, Some((7, Some(bound)))),
            &[],
            &ctx(1_400),
        );
        assert_eq!(d.outcome, Outcome6::Bound(1), "{kind:?}");
        assert!(d.effects.is_empty(), "{kind:?}: {:?}", d.effects);
        let reply = d.reply.unwrap();
        assert_eq!(ia_of(&reply, 7), (vec![(bound, 600)], None), "{kind:?}");
        let ia = &reply::ia_nas(&reply)[0];
        assert!(ia.t1 <= ia.t2 && ia.t2 <= 600, "{ia:?}");
    }
    // An IA with no binding here gets nothing new while the database is unreachable.
    let d = e.handle_message(
        &message(
            MessageType::Renew,
            &duid(2),
            Some(SERVER_DUID),
            Some((1, Some(ip("fd00:1::11")))),
        ),
        &[],
        &ctx(1_400),
    );
    assert!(d.reply.is_none() && d.effects.is_empty(), "{:?}", d.outcome);
    // Back up: extended again.
    e.set_shared_store_up(true);
    let d = e.handle_message(
        &message(
            MessageType::Renew,
            &c,
            Some(SERVER_DUID),
            Some((7, Some(bound))),
        ),
        &[],
        &ctx(1_500),
    );
    assert_eq!(ia_of(&d.reply.unwrap(), 7), (vec![(bound, 1000)], None));
    assert_eq!(d.effects.len(), 1);
}

/// The reply's IA_NA `iaid` field by field: T1, T2, each address (in address order)
/// with its preferred and valid lifetimes, and the status inside the IA.
type ExactIa = (u32, u32, Vec<(Ipv6Addr, u32, u32)>, Option<Status>);

fn ia_exact(reply: &Message, iaid: u32) -> ExactIa {
    let ia = reply::ia_nas(reply)
        .into_iter()
        .find(|ia| ia.id == iaid)
        .expect("the IA is answered");
    let mut addrs: Vec<_> = ia
        .opts
        .get_all(OptionCode::IAAddr)
        .unwrap_or(&[])
        .iter()
        .filter_map(|o| match o {
            DhcpOption::IAAddr(a) => Some((a.addr, a.preferred_life, a.valid_life)),
            _ => None,
        })
        .collect();
    // In address order: the options' order carries no meaning.
    addrs.sort();
    let status = match ia.opts.get(OptionCode::StatusCode) {
        Some(DhcpOption::StatusCode(s)) => Some(s.status),
        _ => None,
    };
    (ia.t1, ia.t2, addrs, status)
}

/// The status at the top level of the reply, outside any IA.
fn top_status(reply: &Message) -> Option<Status> {
    match reply.opts().get(OptionCode::StatusCode) {
        Some(DhcpOption::StatusCode(s)) => Some(s.status),
        _ => None,
    }
}

/// Client `c`'s Request for IA `iaid`; returns the address bound.
fn bind(e: &mut Engine6, c: &[u8], iaid: u32, now: u64) -> Ipv6Addr {
    let d = e.handle_message(
        &message(
            MessageType::Request,
            c,
            Some(SERVER_DUID),
            Some((iaid, None)),
        ),
        &[],
        &ctx(now),
    );
    assert_eq!(d.outcome, Outcome6::Bound(1));
    ia_of(d.reply.as_ref().unwrap(), iaid).0[0].0
}

/// `kind` from client `c` for IA `iaid` naming `addrs` (Renew and Release name this
/// server, Rebind none).
fn naming(kind: MessageType, c: &[u8], iaid: u32, addrs: &[Ipv6Addr]) -> Message {
    let server = (kind != MessageType::Rebind).then_some(SERVER_DUID);
    let mut m = message(kind, c, server, None);
    let mut opts = DhcpOptions::new();
    for addr in addrs {
        opts.insert(DhcpOption::IAAddr(IAAddr {
            addr: *addr,
            preferred_life: 0,
            valid_life: 0,
            opts: DhcpOptions::new(),
        }));
    }
    m.opts_mut().insert(DhcpOption::IANA(IANA {
        id: iaid,
        t1: 0,
        t2: 0,
        opts,
    }));
    m
}

/// RFC 8415 §18.3.4: an IA bound to one address that renews naming another (its old
/// one, one outside the ranges, a free one of the range) keeps and extends its binding;
/// the named address comes back with lifetimes 0 and is never bound. No NoBinding.
#[test]
fn a_renew_naming_an_address_the_ia_does_not_hold_gets_it_with_lifetimes_0() {
    let mut e = engine("");
    let c = duid(1);
    assert_eq!(bind(&mut e, &c, 7, 1_000), ip("fd00:1::10"));
    for named in [ip("fd00:1::66"), ip("fd00:1::12")] {
        let d = e.handle_message(
            &naming(MessageType::Renew, &c, 7, &[named]),
            &[],
            &ctx(1_500),
        );
        assert_eq!(d.outcome, Outcome6::Bound(1), "{named}");
        let r = d.reply.unwrap();
        assert_eq!(
            ia_exact(&r, 7),
            (
                500,
                800,
                vec![(ip("fd00:1::10"), 1000, 1000), (named, 0, 0)],
                None
            ),
            "{named}"
        );
        assert_eq!(top_status(&r), None);
        let [Lease6Effect::Put(l)] = d.effects.as_slice() else {
            panic!("one Put: {:?}", d.effects)
        };
        assert_eq!(
            (l.ip, l.iaid, l.state, l.expires),
            (ip("fd00:1::10"), 7, LeaseState::Bound, 2_500)
        );
        assert!(e.leases().all(|l| l.ip != named), "{named} is never bound");
    }
}

/// RFC 8415 §18.3.4: client A's IA naming client B's address gets it back with
/// lifetimes 0 (with A's own binding extended if it has one, and no NoBinding for A's
/// IA if it has none); B's binding is untouched.
#[test]
fn a_renew_naming_another_clients_address_gets_it_with_lifetimes_0() {
    let mut e = engine("");
    let (a, b) = (duid(1), duid(2));
    let theirs = bind(&mut e, &b, 1, 1_000);
    let before: Vec<Lease6> = e.leases().filter(|l| l.ip == theirs).cloned().collect();
    for kind in [MessageType::Renew, MessageType::Rebind] {
        let d = e.handle_message(&naming(kind, &a, 1, &[theirs]), &[], &ctx(1_100));
        assert!(d.effects.is_empty(), "{kind:?}: {:?}", d.effects);
        let r = d.reply.unwrap();
        assert_eq!(
            ia_exact(&r, 1),
            (0, 0, vec![(theirs, 0, 0)], None),
            "{kind:?}"
        );
        assert_eq!(top_status(&r), None, "{kind:?}");
    }
    let mine = bind(&mut e, &a, 1, 1_200);
    assert_eq!((theirs, mine), (ip("fd00:1::10"), ip("fd00:1::11")));
    let d = e.handle_message(
        &naming(MessageType::Renew, &a, 1, &[mine, theirs]),
        &[],
        &ctx(1_300),
    );
    assert_eq!(d.outcome, Outcome6::Bound(1));
    assert!(matches!(d.effects.as_slice(), [Lease6Effect::Put(l)] if l.ip == mine));
    assert_eq!(
        ia_exact(d.reply.as_ref().unwrap(), 1),
        (500, 800, vec![(theirs, 0, 0), (mine, 1000, 1000)], None)
    );
    let after: Vec<Lease6> = e.leases().filter(|l| l.ip == theirs).cloned().collect();
    assert_eq!(after, before, "B's binding untouched");
}

/// RFC 8415 §18.3.5: a binding on a prefix the configuration no longer serves on the
/// client's link is not extended: the address comes back with lifetimes 0.
#[test]
fn a_rebind_for_an_address_on_no_configured_link_gets_lifetimes_0() {
    let c = duid(1);
    let old = Lease6 {
        ip: ip("fd00:9::5"),
        duid: c.clone(),
        iaid: 1,
        mac: Some(MacAddr([0x52, 0x54, 0, 0, 0, 1])),
        state: LeaseState::Bound,
        starts: 900,
        preferred: 1_900,
        expires: 1_900,
        hostname: None,
        arch: None,
    };
    let mut e = Engine6::new(&config(""), SERVER_DUID.to_vec(), vec![old.clone()], 1_000);
    for kind in [MessageType::Rebind, MessageType::Renew] {
        let d = e.handle_message(&naming(kind, &c, 1, &[old.ip]), &[], &ctx(1_000));
        assert!(
            d.effects.is_empty(),
            "{kind:?}: never extended: {:?}",
            d.effects
        );
        let r = d.reply.unwrap();
        assert_eq!(
            ia_exact(&r, 1),
            (0, 0, vec![(old.ip, 0, 0)], None),
            "{kind:?}"
        );
        assert_eq!(top_status(&r), None, "{kind:?}");
    }
    assert_eq!(e.leases().cloned().collect::<Vec<_>>(), vec![old]);
}

/// RFC 8415 §18.3.7: an address only advertised, or released already, is no binding:
/// its IA gets NoBinding (the Reply's own status stays Success) and nothing is stored;
/// a binding is released with Success and no IA status.
#[test]
fn a_release_of_an_advertised_or_released_address_gets_no_binding() {
    let mut e = engine("");
    let c = duid(1);
    let adv = e.handle_message(
        &message(MessageType::Solicit, &c, None, Some((7, None))),
        &[],
        &ctx(1_000),
    );
    let advertised = ia_of(adv.reply.as_ref().unwrap(), 7).0[0].0;
    let release = naming(MessageType::Release, &c, 7, &[advertised]);
    let no_binding = |d: Decision6| {
        assert!(d.effects.is_empty(), "{:?}", d.effects);
        let r = d.reply.unwrap();
        assert_eq!(ia_exact(&r, 7), (0, 0, vec![], Some(Status::NoBinding)));
        assert_eq!(top_status(&r), Some(Status::Success));
    };
    no_binding(e.handle_message(&release, &[], &ctx(1_010)));

    assert_eq!(bind(&mut e, &c, 7, 1_020), advertised);
    let d = e.handle_message(&release, &[], &ctx(1_030));
    assert_eq!(d.outcome, Outcome6::Released);
    assert!(matches!(d.effects.as_slice(),
        [Lease6Effect::Put(l)] if l.ip == advertised && l.state == LeaseState::Released));
    let r = d.reply.unwrap();
    assert!(
        reply::ia_nas(&r).is_empty(),
        "no IA status for a released binding"
    );
    assert_eq!(top_status(&r), Some(Status::Success));

    no_binding(e.handle_message(&release, &[], &ctx(1_040)));
}

#[test]
fn a_reload_serves_the_new_range_and_options_and_keeps_the_bindings() {
    let mut e = engine("");
    let c = duid(1);
    let req = e.handle_message(
        &message(
            MessageType::Request,
            &c,
            Some(SERVER_DUID),
            Some((7, Some(ip("fd00:1::10")))),
        ),
        &[],
        &ctx(1_002),
    );
    assert_eq!(req.outcome, Outcome6::Bound(1));
    let moved = Config::from_toml_with_overrides(
        "state_dir = \"/tmp/unused\"\n[store]\nshared = \"postgres://db.test/shardboot\"\n\
         [[subnet6]]\nnetwork = \"fd00:1::/64\"\nranges = [\"fd00:1::20 - fd00:1::21\"]\n\
         lease_time = 1000\ndns = [\"fd00:1::9\"]\n",
        &[],
    )
    .unwrap();
    e.reconfigure(Engine6Settings::of(&moved), 1_003);
    assert!(
        e.leases().any(|l| l.ip == ip("fd00:1::10") && l.duid == c),
        "the binding is kept"
    );
    let adv = e.handle_message(
        &message(MessageType::Solicit, &duid(2), None, Some((1, None))),
        &[],
        &ctx(1_004),
    );
    let adv = adv.reply.unwrap();
    assert_eq!(ia_of(&adv, 1).0, vec![(ip("fd00:1::20"), 1000)]);
    assert_eq!(
        adv.opts().get(OptionCode::DomainNameServers),
        Some(&DhcpOption::DomainNameServers(vec![ip("fd00:1::9")]))
    );
}
