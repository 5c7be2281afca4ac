//! DHCPv6 relay layers (RFC 8415 §9, §19): a Relay-forward message carries the client's
//! message, or another relay's Relay-forward, in its Relay Message option (9); the
//! server answers with Relay-reply layers built the same way, outermost first, echoing
//! each relay's hop count, link and peer addresses and its Interface-Id option (18,
//! which §19.3 says the server must copy back).
//!
//! Read by hand rather than by dhcproto, which decodes every Relay Message option as a
//! relay message again, recursing as deep as the packet nests: a hostile packet nests
//! as deep as its length allows. Here the depth is capped at RFC 8415 §7.6's
//! HOP_COUNT_LIMIT (8 relays), every length is checked against what is left, and only
//! the innermost client message is handed to a decoder.

use std::net::Ipv6Addr;

/// Relay-forward message type (RFC 8415 §7.3).
pub const RELAY_FORW: u8 = 12;
/// Relay-reply message type (RFC 8415 §7.3).
pub const RELAY_REPL: u8 = 13;
/// Options read or written here (RFC 8415 §21.10, §21.18; RFC 6939).
const OPTION_RELAY_MSG: u16 = 9;
const OPTION_INTERFACE_ID: u16 = 18;
const OPTION_CLIENT_LINKLAYER_ADDR: u16 = 79;
/// RFC 8415 §7.6: a relay drops a message whose hop count reached this, so no valid
/// message has more relay layers.
pub const HOP_COUNT_LIMIT: usize = 8;
/// msg-type, hop-count, link-address, peer-address (RFC 8415 §9).
const RELAY_HEADER: usize = 34;

/// Why a relayed message was dropped before its client message was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    /// Shorter than a relay header.
    #[error("truncated relay header")]
    Truncated,
    /// An option's length runs past the end of its relay layer.
    #[error("relay option runs past the end")]
    BadOptionLength,
    /// More relay layers than RFC 8415 §7.6 allows.
    #[error("more than {HOP_COUNT_LIMIT} relay layers")]
    TooDeep,
    /// A Relay-forward without a Relay Message option.
    #[error("relay-forward without a relay message")]
    NoRelayMessage,
}

/// One relay agent's layer, as the server must echo it in its Relay-reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayHop {
    /// The relay's hop count, echoed in its Relay-reply.
    pub hop_count: u8,
    /// The link the client is on, as that relay names it (§9): picks the subnet.
    pub link_addr: Ipv6Addr,
    /// Where that relay got the message from: the client, or the next relay in.
    pub peer_addr: Ipv6Addr,
    /// Option 18, copied back into the Relay-reply.
    pub interface_id: Option<Vec<u8>>,
    /// Option 79 (RFC 6939): the client's link-layer address, from the relay nearest it.
    pub client_link_layer: Option<Vec<u8>>,
}

/// A client message and the relays it came through, outermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unwrapped<'a> {
    /// The relay layers, outermost first.
    pub hops: Vec<RelayHop>,
    /// The client's own message, still encoded.
    pub client_message: &'a [u8],
}

impl Unwrapped<'_> {
    /// The relay nearest the client (whose link address names the client's link).
    pub fn innermost(&self) -> Option<&RelayHop> {
        self.hops.last()
    }
}

/// Strips every Relay-forward layer of `message`; a message that is not a Relay-forward
/// is the client's own, with no hops.
pub fn unwrap(message: &[u8]) -> Result<Unwrapped<'_>, RelayError> {
    let mut hops = Vec::new();
    let mut rest = message;
    while rest.first() == Some(&RELAY_FORW) {
        if hops.len() == HOP_COUNT_LIMIT {
            return Err(RelayError::TooDeep);
        }
        let (hop, inner) = one_layer(rest)?;
        hops.push(hop);
        rest = inner;
    }
    Ok(Unwrapped {
        hops,
        client_message: rest,
    })
}

fn one_layer(layer: &[u8]) -> Result<(RelayHop, &[u8]), RelayError> {
    if layer.len() < RELAY_HEADER {
        return Err(RelayError::Truncated);
    }
    let addr = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&layer[at..at + 16]);
        Ipv6Addr::from(a)
    };
    let mut hop = RelayHop {
        hop_count: layer[1],
        link_addr: addr(2),
        peer_addr: addr(18),
        interface_id: None,
        client_link_layer: None,
    };
    let mut inner = None;
    let mut opts = &layer[RELAY_HEADER..];
    while !opts.is_empty() {
        if opts.len() < 4 {
            return Err(RelayError::BadOptionLength);
        }
        let code = u16::from_be_bytes([opts[0], opts[1]]);
        let len = usize::from(u16::from_be_bytes([opts[2], opts[3]]));
        let value = opts.get(4..4 + len).ok_or(RelayError::BadOptionLength)?;
        match code {
            // The first one counts; a relay sends one.
            OPTION_RELAY_MSG if inner.is_none() => inner = Some(value),
            OPTION_INTERFACE_ID => hop.interface_id = Some(value.to_vec()),
            OPTION_CLIENT_LINKLAYER_ADDR => hop.client_link_layer = Some(value.to_vec()),
            _ => {}
        }
        opts = &opts[4 + len..];
    }
    Ok((hop, inner.ok_or(RelayError::NoRelayMessage)?))
}

/// Wraps `reply` (the server's message to the client) in a Relay-reply per hop,
/// outermost first, into `out` (cleared first). A reply that would not fit an option
/// (over 65,535 octets inside a layer) is left unwrapped at that layer's depth: the
/// caller never builds one, as replies are capped far below.
pub fn wrap(hops: &[RelayHop], reply: &[u8], out: &mut Vec<u8>) {
    // Built from the inside out: the innermost layer carries the reply itself.
    let mut inner = reply.to_vec();
    for hop in hops.iter().rev() {
        let mut layer = Vec::with_capacity(inner.len() + RELAY_HEADER + 32);
        layer.push(RELAY_REPL);
        layer.push(hop.hop_count);
        layer.extend_from_slice(&hop.link_addr.octets());
        layer.extend_from_slice(&hop.peer_addr.octets());
        if let Some(id) = &hop.interface_id {
            put_option(&mut layer, OPTION_INTERFACE_ID, id);
        }
        put_option(&mut layer, OPTION_RELAY_MSG, &inner);
        inner = layer;
    }
    out.clear();
    out.extend_from_slice(&inner);
}

fn put_option(out: &mut Vec<u8>, code: u16, value: &[u8]) {
    let len = u16::try_from(value.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&value[..usize::from(len)]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Solicit's first octets: type 1, transaction id.
    const SOLICIT: &[u8] = &[1, 0xab, 0xcd, 0xef, 0, 8, 0, 2, 0, 0];

    fn forward(hop_count: u8, inner: &[u8], extra: &[(u16, &[u8])]) -> Vec<u8> {
        let mut m = vec![RELAY_FORW, hop_count];
        m.extend_from_slice(&"2001:db8:1::1".parse::<Ipv6Addr>().unwrap().octets());
        m.extend_from_slice(
            &"fe80::5054:ff:fe12:3456"
                .parse::<Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        for (code, value) in extra {
            put_option(&mut m, *code, value);
        }
        put_option(&mut m, OPTION_RELAY_MSG, inner);
        m
    }

    #[test]
    fn a_direct_message_has_no_hops() {
        let u = unwrap(SOLICIT).unwrap();
        assert!(u.hops.is_empty());
        assert_eq!(u.client_message, SOLICIT);
    }

    #[test]
    fn nested_relays_unwrap_outermost_first_and_wrap_back() {
        let inner = forward(
            0,
            SOLICIT,
            &[
                (OPTION_INTERFACE_ID, b"eth0.42"),
                (
                    OPTION_CLIENT_LINKLAYER_ADDR,
                    &[0, 1, 0x52, 0x54, 0, 0x12, 0x34, 0x56],
                ),
            ],
        );
        let outer = forward(1, &inner, &[(OPTION_INTERFACE_ID, b"uplink")]);
        let u = unwrap(&outer).unwrap();
        assert_eq!(u.client_message, SOLICIT);
        assert_eq!(u.hops.len(), 2);
        assert_eq!(u.hops[0].hop_count, 1);
        assert_eq!(u.hops[0].interface_id.as_deref(), Some(&b"uplink"[..]));
        let nearest = u.innermost().unwrap();
        assert_eq!(nearest.interface_id.as_deref(), Some(&b"eth0.42"[..]));
        assert_eq!(
            nearest.client_link_layer.as_deref(),
            Some(&[0, 1, 0x52, 0x54, 0, 0x12, 0x34, 0x56][..])
        );
        // The reply goes back through the same layers, each Interface-Id copied.
        let advertise = [2, 0xab, 0xcd, 0xef];
        let mut out = Vec::new();
        wrap(&u.hops, &advertise, &mut out);
        assert_eq!(out[0], RELAY_REPL);
        let mut back = out.clone();
        // Read it as a relay would (the same layout, type 13).
        back[0] = RELAY_FORW;
        let outer_layer = unwrap(&back[..]).unwrap();
        assert_eq!(
            outer_layer.hops.len(),
            1,
            "the inner layer is a Relay-reply"
        );
        assert_eq!(
            outer_layer.hops[0].interface_id.as_deref(),
            Some(&b"uplink"[..])
        );
        let mut inner_reply = outer_layer.client_message.to_vec();
        assert_eq!(inner_reply[0], RELAY_REPL);
        inner_reply[0] = RELAY_FORW;
        let inner_layer = unwrap(&inner_reply).unwrap();
        assert_eq!(
            inner_layer.hops[0].interface_id.as_deref(),
            Some(&b"eth0.42"[..])
        );
        assert_eq!(inner_layer.client_message, advertise);
    }

    #[test]
    fn eight_relays_are_read_and_a_ninth_is_refused() {
        let mut m = SOLICIT.to_vec();
        for hop in 0..HOP_COUNT_LIMIT as u8 {
            m = forward(hop, &m, &[]);
        }
        assert_eq!(unwrap(&m).unwrap().hops.len(), HOP_COUNT_LIMIT);
        let deeper = forward(8, &m, &[]);
        assert_eq!(unwrap(&deeper), Err(RelayError::TooDeep));
    }

    #[test]
    fn malformed_layers_are_refused() {
        let good = forward(0, SOLICIT, &[(OPTION_INTERFACE_ID, b"x")]);
        assert_eq!(unwrap(&good[..20]), Err(RelayError::Truncated));
        // An option whose length runs past the end.
        let mut bad = good.clone();
        let at = RELAY_HEADER + 2;
        bad[at..at + 2].copy_from_slice(&999u16.to_be_bytes());
        assert_eq!(unwrap(&bad), Err(RelayError::BadOptionLength));
        // Three stray octets after the options.
        let mut stray = good.clone();
        stray.extend_from_slice(&[0, 1, 0]);
        assert_eq!(unwrap(&stray), Err(RelayError::BadOptionLength));
        // No relay message at all.
        let mut empty = good[..RELAY_HEADER].to_vec();
        put_option(&mut empty, OPTION_INTERFACE_ID, b"x");
        assert_eq!(unwrap(&empty), Err(RelayError::NoRelayMessage));
    }

    #[test]
    fn every_cut_of_a_nested_message_is_refused_or_read_never_a_panic() {
        let m = forward(
            1,
            &forward(0, SOLICIT, &[(OPTION_INTERFACE_ID, b"eth0")]),
            &[],
        );
        for n in 0..=m.len() {
            let _ = unwrap(&m[..n]);
        }
        // A relay message option nested to the packet's full length: refused at the cap.
        let mut deep = SOLICIT.to_vec();
        for _ in 0..200 {
            deep = forward(0, &deep, &[]);
        }
        assert_eq!(unwrap(&deep), Err(RelayError::TooDeep));
    }
}
