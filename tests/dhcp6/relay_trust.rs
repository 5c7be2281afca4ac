//! DHCPv6 relay trust (RFC 8415 §19, §22): a Relay-forward's link-address and
//! Interface-Id choose the client's subnet, so they are believed only from a relay
//! `dhcp.relays` names. A relayed Solicit from another source on the segment gets no
//! answer and is counted; the same message from the trusted relay is served; a client
//! on the link is served whatever the list says; a reload that adds the stranger
//! makes it a relay at once.

use crate::common;

use std::net::{Ipv6Addr, SocketAddrV6};
use std::time::Duration;

use common::lab6::{client_message, forward_of, ia_address, relay_exchange_from, RELAY6, SERVER6};
use common::relay6::relay_reply;
use dhcproto::v6::{Message, MessageType};
use dhcproto::{Decodable, Decoder, Encodable, Encoder};

/// A host on the client's segment that no `dhcp.relays` entry names.
const STRANGER: &str = "fd00:1::3";

/// `shardboot_dhcp6_dropped_total{reason="untrusted_relay"}`.
fn untrusted_drops(lab: &common::Lab) -> u64 {
    let (_, m) = common::api_lab::curl(
        &lab.server,
        "GET",
        "http://192.0.2.1:8080/metrics",
        None,
        None,
    );
    m.lines()
        .find_map(|l| {
            l.strip_prefix("shardboot_dhcp6_dropped_total{reason=\"untrusted_relay\"} ")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no untrusted_relay count in\n{m}"))
}

/// The Advertise to a relayed Solicit of client `n` sent from `source`, if any.
fn relayed_solicit(lab: &common::Lab, source: &str, n: u8) -> Option<Message> {
    let duid = [0, 3, 0, 1, 0x52, 0x54, 0, 0, 0x7e, n];
    let solicit = client_message(MessageType::Solicit, &duid, None, None);
    let got = relay_exchange_from(lab, source, SERVER6.parse().unwrap(), forward_of(&solicit))?;
    Some(relay_reply(&got).message)
}

/// A client on the link (no relay) solicits from `source` to All_DHCP_Relay_Agents_and_Servers
/// (RFC 8415 §7.1) on the client interface; the Advertise, if any.
fn direct_solicit(lab: &common::Lab, source: &str) -> Option<Message> {
    let duid = [0, 3, 0, 1, 0x52, 0x54, 0, 0, 0x7f, 1];
    let mut bytes = Vec::new();
    client_message(MessageType::Solicit, &duid, None, None)
        .encode(&mut Encoder::new(&mut bytes))
        .unwrap();
    let (source, iface) = (
        SocketAddrV6::new(source.parse().unwrap(), 546, 0, 0),
        lab.client_if.clone(),
    );
    lab.client
        .run(move || {
            let index = nix::net::if_::if_nametoindex(iface.as_str()).unwrap();
            let to = SocketAddrV6::new(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 2), 547, 0, index);
            let s = common::bind_fixed_port(source);
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut buf = [0u8; 4096];
            for _ in 0..5 {
                s.send_to(&bytes, to).unwrap();
                if let Ok((n, _)) = s.recv_from(&mut buf) {
                    return Some(Message::decode(&mut Decoder::new(&buf[..n])).unwrap());
                }
            }
            None
        })
        .join()
        .unwrap()
}

#[test]
fn a_relay_forward_is_answered_only_from_a_relay_dhcp_relays_names() {
    require_root!();
    let lab = common::lab6::lab(&["fd00:1::2/64", "fd00:1::3/64"]);
    let (dir, server) = common::lab6::serve(&lab, "", "");

    // The stranger's five tries (relay_exchange_from) are each dropped and counted.
    let before = untrusted_drops(&lab);
    assert!(
        relayed_solicit(&lab, STRANGER, 1).is_none(),
        "a Relay-forward from {STRANGER} was answered"
    );
    assert_eq!(untrusted_drops(&lab) - before, 5);

    // The same client through the trusted relay gets an address of the relay's link.
    let adv = relayed_solicit(&lab, RELAY6, 1).expect("an Advertise through the relay");
    assert_eq!(adv.msg_type(), MessageType::Advertise);
    let addr = ia_address(&adv).expect("an address");
    assert!(
        "fd00:2::/64"
            .parse::<ipnet::Ipv6Net>()
            .unwrap()
            .contains(&addr),
        "{addr}"
    );

    // A client on the link is no relay: the stranger's own Solicit is served.
    let adv = direct_solicit(&lab, STRANGER).expect("an Advertise to a client on the link");
    let addr = ia_address(&adv).expect("an address");
    assert!(common::lab6::in_range(&addr.to_string()), "{addr}");

    // A reload that names the stranger makes it a relay at once.
    let path = dir.path().join("shardboot.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let trusted = format!("relays = [\"{RELAY6}\"]");
    assert!(text.contains(&trusted), "{text}");
    let text = text.replace(
        &trusted,
        &format!("relays = [\"{RELAY6}\", \"{STRANGER}\"]"),
    );
    let before = server.log_text().len();
    std::fs::write(&path, text).unwrap();
    common::sh(&["kill", "-HUP", &server.pid().unwrap().to_string()]);
    common::members::wait_until("the reload", Duration::from_secs(10), || {
        server.log_text()[before..].contains("dhcp.relays")
    });
    assert!(
        relayed_solicit(&lab, STRANGER, 2).is_some(),
        "no answer after the reload:\n{}",
        server.log_text()
    );
    drop(server);
}
