//! The engine's inputs from the shell (`dhcp::engine::gate`, held-back addresses), as
//! tables: the rule is v4's.

use std::net::Ipv6Addr;

use dhcproto::v6::MessageType;

use super::tests::{config, ctx, duid, engine, ia_of, ip, message, SERVER_DUID};
use super::*;
use crate::dhcp::engine::Path;

fn hop() -> RelayHop {
    RelayHop {
        hop_count: 0,
        link_addr: ip("fd00:1::1"),
        peer_addr: ip("fe80::1"),
        interface_id: None,
        client_link_layer: None,
    }
}

/// The trusted relay of [`trusting`]'s tables.
const RELAY: &str = "fd00:9::2";

/// An engine trusting `relays` (`dhcp.relays` entries).
fn trusting(relays: &[&str]) -> Engine6 {
    let list: Vec<String> = relays.iter().map(|r| format!("\"{r}\"")).collect();
    engine(&format!("[dhcp]\nrelays = [{}]", list.join(", ")))
}

#[test]
fn only_a_solicit_waits_for_a_store_that_writes() {
    let e = trusting(&[RELAY]);
    let kinds = [
        (MessageType::Solicit, true),
        (MessageType::Request, false),
        (MessageType::Renew, false),
        (MessageType::Rebind, false),
        (MessageType::Confirm, false),
        (MessageType::Release, false),
        (MessageType::Decline, false),
        (MessageType::InformationRequest, false),
    ];
    for hops in [Vec::new(), vec![hop()]] {
        for (kind, asks_offer) in kinds {
            for store_writable in [true, false] {
                let inputs = Inputs {
                    path: e.relay_path(&hops, ip(RELAY), "prov0"),
                    store_writable,
                };
                let want = if asks_offer && !store_writable {
                    Err(Refused::StoreUnwritable)
                } else {
                    Ok(())
                };
                assert_eq!(
                    e.admit(inputs, kind),
                    want,
                    "{kind:?} relayed={} writable={store_writable}",
                    !hops.is_empty()
                );
            }
        }
    }
}

#[test]
fn a_relay_forward_is_believed_only_from_a_relay_dhcp_relays_names() {
    // (trusted relays, sender, interface, relayed?, path)
    let cases: [(&[&str], &str, &str, bool, Path); 9] = [
        // A client on the link: no relay to trust, whatever is configured.
        (&[], "fe80::1234", "prov0", false, Path::Direct),
        (&[RELAY], "fe80::1234", "prov0", false, Path::Direct),
        // Nothing configured: no Relay-forward is believed (the change from 0.x).
        (&[], RELAY, "prov0", true, Path::Relayed { trusted: false }),
        // An address, a network, an interface-bound entry.
        (
            &[RELAY],
            RELAY,
            "prov0",
            true,
            Path::Relayed { trusted: true },
        ),
        (
            &[RELAY],
            "fd00:9::3",
            "prov0",
            true,
            Path::Relayed { trusted: false },
        ),
        (
            &["fd00:9::/64"],
            "fd00:9::3",
            "prov0",
            true,
            Path::Relayed { trusted: true },
        ),
        (
            &["fd00:9::/64@prov1"],
            RELAY,
            "prov0",
            true,
            Path::Relayed { trusted: false },
        ),
        (
            &["fe80::1@prov0"],
            "fe80::1",
            "prov0",
            true,
            Path::Relayed { trusted: true },
        ),
        // A v4 relay trusts no v6 sender.
        (
            &["198.18.0.2", "0.0.0.0/0"],
            RELAY,
            "prov0",
            true,
            Path::Relayed { trusted: false },
        ),
    ];
    for (relays, sender, iface, relayed, want) in cases {
        let e = trusting(relays);
        let hops = if relayed {
            vec![hop(), hop()]
        } else {
            Vec::new()
        };
        let path = e.relay_path(&hops, ip(sender), iface);
        assert_eq!(path, want, "{relays:?} {sender} on {iface}");
        // An untrusted relay is refused before anything else, whatever it carries.
        let inputs = Inputs {
            path,
            store_writable: true,
        };
        let refused = want == (Path::Relayed { trusted: false });
        for kind in [
            MessageType::Solicit,
            MessageType::Renew,
            MessageType::InformationRequest,
        ] {
            assert_eq!(
                e.admit(inputs, kind).is_err(),
                refused,
                "{kind:?} {relays:?} {sender}"
            );
        }
    }
}

#[test]
fn a_reload_changes_which_relays_are_believed() {
    let mut e = trusting(&[]);
    let hops = [hop()];
    assert_eq!(
        e.relay_path(&hops, ip(RELAY), "prov0"),
        Path::Relayed { trusted: false }
    );
    let cfg = config(&format!("[dhcp]\nrelays = [\"{RELAY}\"]"));
    e.reconfigure(Engine6Settings::of(&cfg), 1_001);
    assert_eq!(
        e.relay_path(&hops, ip(RELAY), "prov0"),
        Path::Relayed { trusted: true }
    );
}

#[test]
fn set_aside_addresses_go_to_no_client_for_a_longest_lease() {
    // The range is fd00:1::10 - ::13; three of its addresses had unreadable records.
    let aside = [ip("fd00:1::10"), ip("fd00:1::11"), ip("fd00:1::13")];
    let now = 1_000;
    let (mut e, held) = Engine6::load(
        Engine6Settings::of(&config("")),
        SERVER_DUID.to_vec(),
        Vec::new(),
        &aside,
        now,
    );
    let until = now + 1000;
    let want: Vec<HeldBack<Ipv6Addr>> = aside.iter().map(|&ip| HeldBack { ip, until }).collect();
    assert_eq!(held, want);
    let solicit = |n: u8| message(MessageType::Solicit, &duid(n), None, Some((1, None)));
    let adv = e.handle_message(&solicit(1), &[], &ctx(now)).reply.unwrap();
    assert_eq!(ia_of(&adv, 1).0, [(ip("fd00:1::12"), 1000)]);
    // The hold ends a longest lease after the start: the addresses are free again.
    e.handle_tick(until);
    let adv = e
        .handle_message(&solicit(2), &[], &ctx(until))
        .reply
        .unwrap();
    let (addrs, _) = ia_of(&adv, 1);
    assert_eq!(addrs.len(), 1);
    assert!(aside.contains(&addrs[0].0), "{addrs:?}");
}
