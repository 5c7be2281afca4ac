//! DHCPv6 datagrams (`dhcp6::wire`), relay layers (`dhcp6::relay`) and client-MAC clues
//! (`dhcp6::client_mac`) on arbitrary bytes: checking and decoding never panics,
//! unwrapping never panics and never reads past the depth cap; what
//! unwraps wraps back into Relay-reply layers that unwrap (as a relay reads them) to the
//! same hops and message; a MAC found is the one the clues hold.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardboot::dhcp6::client_mac::{client_mac, Clues};
use shardboot::dhcp6::relay::{unwrap, wrap, HOP_COUNT_LIMIT, RELAY_FORW, RELAY_REPL};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = shardboot::dhcp6::wire::decode(data) {
        let _ = shardboot::dhcp6::boot::classify(r.message.opts());
    }
    let Ok(u) = unwrap(data) else {
        return;
    };
    assert!(u.hops.len() <= HOP_COUNT_LIMIT);
    if let Some(hop) = u.innermost() {
        let clues = Clues {
            option_79: hop.client_link_layer.as_deref(),
            source: Some(hop.peer_addr),
            duid: None,
        };
        let _ = client_mac(&clues);
    }
    // Wrap the client message back and read each Relay-reply layer as a Relay-forward.
    if u.client_message.first() == Some(&RELAY_REPL) {
        return; // would be read as one more layer below: not a round trip
    }
    let mut out = Vec::new();
    wrap(&u.hops, u.client_message, &mut out);
    let mut rest = out;
    for hop in &u.hops {
        assert_eq!(rest[0], RELAY_REPL);
        rest[0] = RELAY_FORW;
        let layer = unwrap(&rest).expect("a wrapped layer reads back");
        // The layer's own fields; its Relay Message is the next Relay-reply (or the
        // client message), so one hop is read, not more.
        let back = &layer.hops[0];
        assert_eq!(
            (
                back.hop_count,
                back.link_addr,
                back.peer_addr,
                &back.interface_id
            ),
            (
                hop.hop_count,
                hop.link_addr,
                hop.peer_addr,
                &hop.interface_id
            )
        );
        rest = layer.client_message.to_vec();
    }
    assert_eq!(rest, u.client_message);
});
