//! The `option6:` entries in replies: precedence by level and tag, the Option Request
//! option honoured, built-in options replaced or removed, the server DUID chosen, and
//! a relayed client's subnet picked by the relay's Interface-Id.

use dhcproto::v6::{DhcpOption, Message, MessageType, OptionCode, ORO};

use super::tests::{ctx, duid, engine, ip, message, SERVER_DUID};
use super::*;
use crate::mac::MacAddr;

/// A Solicit from client `n` asking (when `oro` is given) for those option codes.
fn solicit(n: u8, oro: Option<&[u16]>) -> Message {
    let mut m = message(MessageType::Solicit, &duid(n), None, Some((1, None)));
    if let Some(codes) = oro {
        m.opts_mut().insert(DhcpOption::ORO(ORO {
            opts: codes.iter().map(|c| OptionCode::from(*c)).collect(),
        }));
    }
    m
}

/// Each option of the reply as (code, octets on the wire), in code order, without the
/// identifiers, the IA and the preference.
fn configuration(reply: &Message) -> Vec<(u16, Vec<u8>)> {
    use dhcproto::{Encodable, Encoder};
    reply
        .opts()
        .iter()
        .filter(|o| ![1, 2, 3, 7].contains(&u16::from(OptionCode::from(*o))))
        .map(|o| {
            let mut bytes = Vec::new();
            o.encode(&mut Encoder::new(&mut bytes)).unwrap();
            (
                u16::from_be_bytes([bytes[0], bytes[1]]),
                bytes[4..].to_vec(),
            )
        })
        .collect()
}

fn advertise(e: &mut Engine6, m: &Message) -> Message {
    e.handle_message(m, &[], &ctx(1_000))
        .reply
        .expect("a reply")
}

/// The reply to a Solicit from a machine with no `[[host]]` entry (client 9).
fn another_machine(e: &mut Engine6, oro: Option<&[u16]>) -> Message {
    let mut other = ctx(1_000);
    other.mac = Some(MacAddr([0x52, 0x54, 0, 0, 0, 9]));
    e.handle_message(&solicit(9, oro), &[], &other)
        .reply
        .expect("a reply")
}

const HOST: &str = "[[host]]\nmac = \"52:54:00:00:00:01\"\ntags = [\"rack1\"]\n";

#[test]
fn entries_of_every_level_reach_the_reply_the_most_specific_winning() {
    let text = concat!(
        "state_dir = \"/tmp/unused\"\n[store]\nshared = \"postgres://db.test/shardboot\"\n",
        "[dhcp]\noptions = [\"option:ntp-server,192.0.2.5\", ",
        "\"option6:ntp-server,[fd00:1::5]\", \"option6:information-refresh-time,600\", ",
        "\"option6:sntp-server,[fd00:1::6]\"]\n",
        "[[subnet6]]\nnetwork = \"fd00:1::/64\"\nranges = [\"fd00:1::10 - fd00:1::13\"]\n",
        "dns = [\"fd00:1::1\"]\n",
        "options = [\"option6:information-refresh-time,900\", ",
        "\"tag:rack1,option6:sntp-server,[fd00:1::7]\"]\n",
        "[[host]]\nmac = \"52:54:00:00:00:01\"\ntags = [\"rack1\"]\n",
        "options = [\"option6:200,01:02\", \"option6:dns-server,[fd00:1::53]\"]\n",
    );
    let cfg = crate::config::Config::from_toml_with_overrides(text, &[]).expect("config");
    let mut e = Engine6::new(&cfg, SERVER_DUID.to_vec(), Vec::new(), 1_000);
    let r = advertise(&mut e, &solicit(1, None));
    let ntp = [&[0, 1, 0, 16][..], &ip("fd00:1::5").octets()].concat();
    assert_eq!(
        configuration(&r),
        [
            // The host's dns-server replaces the subnet's `dns`.
            (23, ip("fd00:1::53").octets().to_vec()),
            // The subnet's tagged entry holds for a host with that tag.
            (31, ip("fd00:1::7").octets().to_vec()),
            // The subnet's value over the server's.
            (32, 900u32.to_be_bytes().to_vec()),
            (56, ntp),
            (200, vec![1, 2]),
        ]
    );
    // Another machine (no host entry, so no rack1 tag): the server's sntp-server.
    let r = another_machine(&mut e, None);
    let got = configuration(&r);
    assert!(
        got.contains(&(31, ip("fd00:1::6").octets().to_vec())),
        "{got:?}"
    );
    assert!(
        got.contains(&(23, ip("fd00:1::1").octets().to_vec())),
        "{got:?}"
    );
    assert!(!got.iter().any(|(c, _)| *c == 200), "{got:?}");
}

#[test]
fn the_option_request_option_decides_what_configuration_goes_back() {
    let mut e = engine(
        "[dhcp]\noptions = [\"option6:ntp-server,[fd00:1::5]\", \"option6:sntp-server,[fd00:1::6]\"]\n",
    );
    // RFC 8415 §18.3: only what was asked for; the IA and identifiers always.
    let r = advertise(&mut e, &solicit(1, Some(&[23, 56])));
    let codes: Vec<u16> = configuration(&r).iter().map(|(c, _)| *c).collect();
    assert_eq!(codes, [23, 56]);
    let (addrs, _) = super::tests::ia_of(&r, 1);
    assert_eq!(addrs.len(), 1);
    // No Option Request option: everything configured.
    let r = advertise(&mut e, &solicit(2, None));
    let codes: Vec<u16> = configuration(&r).iter().map(|(c, _)| *c).collect();
    assert_eq!(codes, [23, 31, 56]);
    // Information-request too.
    let mut info = message(MessageType::InformationRequest, &duid(3), None, None);
    info.opts_mut().insert(DhcpOption::ORO(ORO {
        opts: vec![OptionCode::from(31)],
    }));
    let r = advertise(&mut e, &info);
    assert_eq!(r.msg_type(), MessageType::Reply);
    assert_eq!(configuration(&r), [(31, ip("fd00:1::6").octets().to_vec())]);
}

#[test]
fn a_valueless_entry_removes_the_subnets_dns_for_tagged_clients_only() {
    let mut e = engine(&format!(
        "{HOST}options = [\"tag:rack1,option6:dns-server\"]\n"
    ));
    let r = advertise(&mut e, &solicit(1, Some(&[23])));
    assert_eq!(configuration(&r), []);
    let r = another_machine(&mut e, Some(&[23]));
    assert_eq!(configuration(&r), [(23, ip("fd00:1::1").octets().to_vec())]);
}

#[test]
fn a_relayed_clients_subnet_is_picked_by_the_relays_interface_id_first() {
    // Two subnets; the relay's link-address names the first, its Interface-Id the second.
    let text = concat!(
        "state_dir = \"/tmp/unused\"\n[store]\nshared = \"postgres://db.test/shardboot\"\n",
        "[[subnet6]]\nnetwork = \"fd00:1::/64\"\nranges = [\"fd00:1::10 - fd00:1::13\"]\n",
        "[[subnet6]]\nnetwork = \"fd00:2::/64\"\nranges = [\"fd00:2::10 - fd00:2::13\"]\ninterface_id = \"rack2-port7\"\n",
    );
    let cfg = crate::config::Config::from_toml_with_overrides(text, &[]).expect("config");
    let mut e = Engine6::new(&cfg, SERVER_DUID.to_vec(), Vec::new(), 1_000);
    let hop = |id: &[u8]| RelayHop {
        hop_count: 0,
        link_addr: ip("fd00:1::fffe"),
        peer_addr: ip("fe80::1"),
        interface_id: Some(id.to_vec()),
        client_link_layer: None,
    };
    let mut relayed = ctx(1_000);
    relayed.arrival.destination = ip("fd00:1::1");
    let m = solicit(1, None);
    let r = e
        .handle_message(&m, &[hop(b"rack2-port7")], &relayed)
        .reply
        .unwrap();
    assert_eq!(super::tests::ia_of(&r, 1).0[0].0, ip("fd00:2::10"));
    let r = e
        .handle_message(&m, &[hop(b"rack1-port1")], &relayed)
        .reply
        .unwrap();
    assert_eq!(super::tests::ia_of(&r, 1).0[0].0, ip("fd00:1::10"));
}

#[test]
fn a_ranges_tag_holds_for_the_clients_given_an_address_in_it() {
    let text = concat!(
        "state_dir = \"/tmp/unused\"\n[store]\nshared = \"postgres://db.test/shardboot\"\n",
        "[[subnet6]]\nnetwork = \"fd00:1::/64\"\n",
        "ranges = [{ range = \"fd00:1::10 - fd00:1::10\", tag = \"first\" }, \"fd00:1::20 - fd00:1::2f\"]\n",
        "options = [\"tag:first,option6:sntp-server,[fd00:1::6]\"]\n",
    );
    let cfg = crate::config::Config::from_toml_with_overrides(text, &[]).expect("config");
    let mut e = Engine6::new(&cfg, SERVER_DUID.to_vec(), Vec::new(), 1_000);
    // The first client gets the tagged range's only address, and its option.
    let r = advertise(&mut e, &solicit(1, None));
    assert_eq!(super::tests::ia_of(&r, 1).0[0].0, ip("fd00:1::10"));
    assert_eq!(configuration(&r), [(31, ip("fd00:1::6").octets().to_vec())]);
    // The next is given one of the untagged range: no option.
    let r = another_machine(&mut e, None);
    assert_eq!(super::tests::ia_of(&r, 1).0[0].0, ip("fd00:1::20"));
    assert_eq!(configuration(&r), []);
}
