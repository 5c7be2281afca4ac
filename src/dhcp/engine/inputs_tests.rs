//! The engine's inputs from the shell (`gate`, `held`): relay trust, whether the store
//! writes, and the addresses held back at start, as tables.

use super::*;
use crate::dhcp::engine::gate::admit;
use crate::store::SetAside;

const R1: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

#[test]
fn the_gate_refuses_untrusted_relays_always_and_offers_while_the_store_cannot_write() {
    use Path::{Direct, Relayed};
    let untrusted = Relayed { trusted: false };
    let trusted = Relayed { trusted: true };
    // (path, asks for an offer, store writable) -> decided?
    let table = [
        (Direct, false, true, Ok(())),
        (Direct, true, true, Ok(())),
        (Direct, false, false, Ok(())),
        (Direct, true, false, Err(Refused::StoreUnwritable)),
        (trusted, false, true, Ok(())),
        (trusted, true, true, Ok(())),
        (trusted, false, false, Ok(())),
        (trusted, true, false, Err(Refused::StoreUnwritable)),
        (untrusted, false, true, Err(Refused::UntrustedRelay)),
        (untrusted, true, true, Err(Refused::UntrustedRelay)),
        (untrusted, false, false, Err(Refused::UntrustedRelay)),
        (untrusted, true, false, Err(Refused::UntrustedRelay)),
    ];
    for (path, asks_offer, store_writable, want) in table {
        let inputs = Inputs {
            path,
            store_writable,
        };
        assert_eq!(
            admit(inputs, asks_offer),
            want,
            "{path:?} offer={asks_offer} writable={store_writable}"
        );
    }
}

/// `config("")` trusting `relays` (`dhcp.relays`: "network[@interface]").
fn with_relays(relays: &[&str]) -> Config {
    let mut cfg = config("");
    cfg.dhcp.relays = relays
        .iter()
        .map(|r| {
            let (net, interface) = match r.split_once('@') {
                Some((n, i)) => (n, Some(i.to_string())),
                None => (*r, None),
            };
            let network = net
                .parse()
                .unwrap_or_else(|_| ipnet::Ipv4Net::from(net.parse::<Ipv4Addr>().unwrap()));
            crate::config::RelayRule { network, interface }
        })
        .collect();
    cfg
}

#[test]
fn giaddr_is_believed_only_from_a_listed_relay_on_its_interface() {
    let e = Engine::new(
        &with_relays(&["198.18.0.0/24@br0", "203.0.113.7"]),
        Vec::new(),
        T0,
    );
    let z = Ipv4Addr::UNSPECIFIED;
    let gi = Ipv4Addr::new(198, 51, 100, 1);
    let other = Ipv4Addr::new(203, 0, 113, 8);
    let relayed = |trusted| Path::Relayed { trusted };
    // (giaddr, sender from the server port, interface) -> path
    let table = [
        (z, None, "br0", Path::Direct),
        (z, Some(other), "br0", Path::Direct),
        (gi, Some(R1), "br0", relayed(true)),
        (gi, Some(R1), "br1", relayed(false)),
        (
            gi,
            Some(Ipv4Addr::new(203, 0, 113, 7)),
            "br1",
            relayed(true),
        ),
        (gi, Some(other), "br0", relayed(false)),
        // Not from the server port, or not over IPv4: no relay's.
        (gi, None, "br0", relayed(false)),
    ];
    for (giaddr, sender, iface, want) in table {
        assert_eq!(
            e.relay_path(giaddr, sender, iface),
            want,
            "giaddr {giaddr} from {sender:?} on {iface}"
        );
    }
    // A DISCOVER through an untrusted relay is refused before the store is asked.
    let inputs = Inputs {
        path: e.relay_path(gi, Some(other), "br0"),
        store_writable: false,
    };
    assert_eq!(e.admit(inputs, true), Err(Refused::UntrustedRelay));
}

#[test]
fn no_relay_is_trusted_by_default_and_a_reload_changes_which_are() {
    let mut e = Engine::new(&config(""), Vec::new(), T0);
    let gi = Ipv4Addr::new(198, 51, 100, 1);
    assert_eq!(
        e.relay_path(gi, Some(R1), "br0"),
        Path::Relayed { trusted: false }
    );
    e.reconfigure(EngineSettings::of(&with_relays(&["198.18.0.2"])), T0 + 1);
    assert_eq!(
        e.relay_path(gi, Some(R1), "br0"),
        Path::Relayed { trusted: true }
    );
    e.reconfigure(EngineSettings::of(&config("")), T0 + 2);
    assert_eq!(
        e.relay_path(gi, Some(R1), "br0"),
        Path::Relayed { trusted: false }
    );
}

#[test]
fn a_discover_is_refused_while_the_store_cannot_write_and_other_requests_are_not() {
    let e = Engine::new(&config(""), Vec::new(), T0);
    for store_writable in [true, false] {
        let inputs = Inputs {
            path: Path::Direct,
            store_writable,
        };
        for discover in [true, false] {
            let want = if discover && !store_writable {
                Err(Refused::StoreUnwritable)
            } else {
                Ok(())
            };
            assert_eq!(e.admit(inputs, discover), want);
        }
    }
}

/// 192.0.2.100 - .102 only.
fn three_addresses() -> Config {
    let mut cfg = config("");
    cfg.subnets[0].ranges = vec![(Ipv4Addr::new(192, 0, 2, 100), Ipv4Addr::new(192, 0, 2, 102))];
    cfg
}

fn aside(ip: Ipv4Addr, since: u64) -> SetAside {
    SetAside {
        key: ip.octets().to_vec(),
        since,
    }
}

#[test]
fn set_aside_addresses_go_to_no_client_until_a_longest_lease_after_they_were_set_aside() {
    let cfg = three_addresses();
    let span = crate::owner::membership::transition_span(&cfg);
    let (a, b, c) = (
        Ipv4Addr::new(192, 0, 2, 100),
        Ipv4Addr::new(192, 0, 2, 101),
        Ipv4Addr::new(192, 0, 2, 102),
    );
    let since = T0 - 100;
    let records = [
        aside(a, since),
        aside(c, since),
        // A damaged key names no address: nothing to hold back.
        SetAside {
            key: vec![1, 2, 3],
            since,
        },
    ];
    let (mut e, held) = Engine::load(EngineSettings::of(&cfg), Vec::new(), &records, T0);
    assert_eq!(
        held,
        [
            HeldBack {
                ip: a,
                until: since + span
            },
            HeldBack {
                ip: c,
                until: since + span
            },
        ]
    );
    let i = iface();
    let d = e.handle_message(&msg(MessageType::Discover, mac(1)), &ctx(&i, T0));
    assert_eq!(offered(&d), b, "only the address no record names");
    let d = e.handle_message(&msg(MessageType::Discover, mac(2)), &ctx(&i, T0));
    assert_eq!(kind(&d), None, "the held addresses stay held: {d:?}");
    // Once the hold ends (and the offer made above lapsed), all three are free again.
    let after = since + span;
    let mut got: Vec<Ipv4Addr> = (2..5).map(|n| bind(&mut e, &i, mac(n), after)).collect();
    got.sort();
    assert_eq!(got, [a, b, c]);
}

#[test]
fn a_hold_from_a_damaged_since_saturates() {
    let cfg = three_addresses();
    let ip = Ipv4Addr::new(192, 0, 2, 100);
    let (_, held) = Engine::load(
        EngineSettings::of(&cfg),
        Vec::new(),
        &[aside(ip, u64::MAX - 1)],
        T0,
    );
    assert_eq!(
        held,
        [HeldBack {
            ip,
            until: u64::MAX
        }]
    );
}
