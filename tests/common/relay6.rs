//! A DHCPv6 relay agent as tests play it (RFC 8415 §19): Relay-forward layers around a
//! client's message, sent to the servers' addresses on port 547, and the Relay-reply
//! read back.

use std::net::Ipv6Addr;

use dhcproto::v6::Message;
use dhcproto::{Decodable, Decoder};

/// One Relay-forward layer (RFC 8415 §9.2) around `inner`: an Interface-Id, and the
/// client's link-layer address (RFC 6939 option 79, Ethernet) when `mac` is given.
pub(crate) fn relay_forward(
    link: Ipv6Addr,
    peer: Ipv6Addr,
    interface_id: &[u8],
    mac: Option<[u8; 6]>,
    inner: &[u8],
) -> Vec<u8> {
    let mut out = vec![12, 0];
    out.extend_from_slice(&link.octets());
    out.extend_from_slice(&peer.octets());
    let lladdr = mac.map(|m| [&[0u8, 1][..], &m].concat());
    let mut opts: Vec<(u16, &[u8])> = vec![(18, interface_id)];
    if let Some(l) = &lladdr {
        opts.push((79, l));
    }
    opts.push((9, inner));
    for (code, value) in opts {
        out.extend_from_slice(&code.to_be_bytes());
        out.extend_from_slice(&(value.len() as u16).to_be_bytes());
        out.extend_from_slice(value);
    }
    out
}

/// A Relay-reply read back: its link and peer addresses, its options, and the
/// server's message inside.
pub(crate) struct RelayReply {
    pub link: Ipv6Addr,
    pub peer: Ipv6Addr,
    pub options: Vec<(u16, Vec<u8>)>,
    pub message: Message,
}

/// Reads `reply` as one Relay-reply layer around a server message.
pub(crate) fn relay_reply(reply: &[u8]) -> RelayReply {
    assert_eq!(reply[0], 13, "a Relay-reply");
    let addr = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&reply[at..at + 16]).unwrap());
    let mut options = Vec::new();
    let mut rest = &reply[34..];
    while rest.len() >= 4 {
        let code = u16::from_be_bytes([rest[0], rest[1]]);
        let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        options.push((code, rest[4..4 + len].to_vec()));
        rest = &rest[4 + len..];
    }
    let inner = &options
        .iter()
        .find(|(c, _)| *c == 9)
        .expect("a Relay Message")
        .1;
    let message = Message::decode(&mut Decoder::new(inner)).expect("the server's message decodes");
    RelayReply {
        link: addr(2),
        peer: addr(18),
        options,
        message,
    }
}
