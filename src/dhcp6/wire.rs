//! Checks a DHCPv6 datagram before anything decodes it, then decodes the client's
//! message (RFC 8415 §8 layout: type, transaction id, options). Like v4's
//! [`crate::dhcp::wire`], every reason a datagram is dropped is counted by name.
//!
//! The options are walked by hand first: they must tile the message exactly, and a
//! client message may not carry a Relay Message option (9), which only relays send and
//! which dhcproto would decode by recursion as deep as the packet nests.

use dhcproto::v6::Message;
use dhcproto::{Decodable, Decoder};

use super::relay::{self, RelayError, RelayHop};

/// The largest datagram read. Client messages are a few hundred octets; a relay chain
/// adds a few dozen per hop (RFC 8415 §7.6 allows eight).
pub const MAX_DATAGRAM: usize = 4096;

/// Why a datagram was dropped before the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Drop6Reason {
    /// Longer than [`MAX_DATAGRAM`].
    #[error("oversized")]
    Oversized,
    /// A relay layer was malformed or too deep.
    #[error("bad_relay: {0}")]
    Relay(RelayError),
    /// Shorter than a message header (type and transaction id).
    #[error("truncated")]
    Truncated,
    /// A message type a client does not send (an Advertise, a Reply, a Relay-reply…).
    #[error("not_client_message")]
    NotClientMessage,
    /// An option's length runs past the end of the message.
    #[error("bad_option_length")]
    BadOptionLength,
    /// A Relay Message option inside a client's own message.
    #[error("relay_message_in_client_message")]
    RelayMessageInClientMessage,
    /// dhcproto rejected the message after these checks passed.
    #[error("undecodable")]
    Undecodable,
}

impl Drop6Reason {
    /// Stable label for metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Oversized => "oversized",
            Self::Relay(_) => "bad_relay",
            Self::Truncated => "truncated",
            Self::NotClientMessage => "not_client_message",
            Self::BadOptionLength => "bad_option_length",
            Self::RelayMessageInClientMessage => "relay_message_in_client_message",
            Self::Undecodable => "undecodable",
        }
    }
}

/// Message types a client sends to a server (RFC 8415 §7.3): Solicit, Request, Confirm,
/// Renew, Rebind, Release, Decline, Information-request.
const CLIENT_TYPES: [u8; 8] = [1, 3, 4, 5, 6, 8, 9, 11];
/// The Relay Message option (RFC 8415 §21.10).
const OPTION_RELAY_MSG: u16 = 9;

/// Options that carry options of their own after a fixed part (RFC 8415 §21.4, §21.5,
/// §21.6, §21.17, §21.21, §21.22): code and the fixed part's length. dhcproto decodes
/// their insides by recursion.
const CONTAINERS: [(u16, usize); 6] = [(3, 12), (4, 4), (5, 24), (17, 4), (25, 12), (26, 25)];
/// The shortest value dhcproto reads without subtracting past zero (RFC 8415 §21.11
/// Authentication, §21.13 Status Code, §21.16 Vendor Class): a shorter one panics there
/// with overflow checks on, and reads nonsense without.
const MINIMUM: [(u16, usize); 3] = [(11, 11), (13, 2), (16, 4)];
/// Options dhcproto reads at their fixed size whatever length they declare, so any
/// other length would shift every option after them (RFC 8415 §21.8 Preference, §21.9
/// Elapsed Time, §21.12 Server Unicast, §21.14 Rapid Commit, §21.19 Reconfigure
/// Message, §21.20 Reconfigure Accept).
const EXACT: [(u16, usize); 6] = [(7, 1), (8, 2), (12, 16), (14, 0), (19, 1), (20, 0)];
/// DNS Recursive Name Server (RFC 3646 §3): whole addresses only, for the same reason.
const OPTION_DNS_SERVERS: u16 = 23;
/// How deep options may nest inside containers (an IA_NA holding an IA Address holding a
/// Status Code is two levels).
const MAX_NESTING: usize = 3;

/// Options must tile `opts` exactly, at every level of nesting; no Relay Message may
/// appear anywhere inside a client's message; each option at least as long as its fixed
/// part; nesting at most [`MAX_NESTING`] deep.
fn check_options(mut opts: &[u8], depth: usize) -> Result<(), Drop6Reason> {
    if depth > MAX_NESTING {
        return Err(Drop6Reason::BadOptionLength);
    }
    while !opts.is_empty() {
        if opts.len() < 4 {
            return Err(Drop6Reason::BadOptionLength);
        }
        let code = u16::from_be_bytes([opts[0], opts[1]]);
        let len = usize::from(u16::from_be_bytes([opts[2], opts[3]]));
        let value = opts.get(4..4 + len).ok_or(Drop6Reason::BadOptionLength)?;
        if code == OPTION_RELAY_MSG {
            return Err(Drop6Reason::RelayMessageInClientMessage);
        }
        let fixed = CONTAINERS
            .iter()
            .chain(&MINIMUM)
            .find(|(c, _)| *c == code)
            .map(|(_, f)| *f);
        let exact = EXACT.iter().find(|(c, _)| *c == code).map(|(_, n)| *n);
        if fixed.is_some_and(|f| len < f)
            || exact.is_some_and(|n| len != n)
            || (code == OPTION_DNS_SERVERS && len % 16 != 0)
        {
            return Err(Drop6Reason::BadOptionLength);
        }
        if let Some((_, fixed)) = CONTAINERS.iter().find(|(c, _)| *c == code) {
            check_options(&value[*fixed..], depth + 1)?;
        }
        opts = &opts[4 + len..];
    }
    Ok(())
}

/// A client's message and the relays it came through (outermost first).
#[derive(Debug, Clone)]
pub struct Request6 {
    /// The relay layers, outermost first (empty for a client on the segment).
    pub hops: Vec<RelayHop>,
    /// The client's message.
    pub message: Message,
}

/// Checks and decodes `datagram` (a client's message, or relay layers around one).
pub fn decode(datagram: &[u8]) -> Result<Request6, Drop6Reason> {
    if datagram.len() > MAX_DATAGRAM {
        return Err(Drop6Reason::Oversized);
    }
    let unwrapped = relay::unwrap(datagram).map_err(Drop6Reason::Relay)?;
    let m = unwrapped.client_message;
    if m.len() < 4 {
        return Err(Drop6Reason::Truncated);
    }
    if !CLIENT_TYPES.contains(&m[0]) {
        return Err(Drop6Reason::NotClientMessage);
    }
    check_options(&m[4..], 0)?;
    let message = Message::decode(&mut Decoder::new(m)).map_err(|_| Drop6Reason::Undecodable)?;
    Ok(Request6 {
        hops: unwrapped.hops,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dhcproto::v6::{DhcpOption, MessageType, OptionCode};

    fn opt(code: u16, value: &[u8]) -> Vec<u8> {
        [
            &code.to_be_bytes()[..],
            &(value.len() as u16).to_be_bytes(),
            value,
        ]
        .concat()
    }

    /// A Solicit as OVMF sends one: client id (DUID-LLT), IA_NA, elapsed time, vendor
    /// class, and no option 61.
    fn solicit() -> Vec<u8> {
        let duid = [
            0, 1, 0, 1, 0x2f, 0x1e, 0x0a, 0x55, 0x52, 0x54, 0, 0x12, 0x34, 0x56,
        ];
        let ia_na = [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        let class = b"HTTPClient:Arch:00016:UNDI:003001";
        let vendor = [
            &343u32.to_be_bytes()[..],
            &(class.len() as u16).to_be_bytes(),
            class,
        ]
        .concat();
        [
            &[1u8, 0x12, 0x34, 0x56][..],
            &opt(1, &duid),
            &opt(3, &ia_na),
            &opt(8, &[0, 0]),
            &opt(16, &vendor),
        ]
        .concat()
    }

    #[test]
    fn a_firmware_solicit_decodes_with_its_options() {
        let r = decode(&solicit()).unwrap();
        assert!(r.hops.is_empty());
        assert_eq!(r.message.msg_type(), MessageType::Solicit);
        assert_eq!(r.message.xid(), [0x12, 0x34, 0x56]);
        assert!(matches!(
            r.message.opts().get(OptionCode::ClientId),
            Some(DhcpOption::ClientId(d)) if d.len() == 14
        ));
        let class = super::super::boot::classify(r.message.opts());
        assert_eq!(class.arch, Some(16));
    }

    #[test]
    fn relayed_it_decodes_with_its_hops() {
        let mut forward = vec![relay::RELAY_FORW, 0];
        forward.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8].repeat(4));
        forward.extend_from_slice(&[0xfe, 0x80].repeat(8));
        forward.extend_from_slice(&opt(9, &solicit()));
        let r = decode(&forward).unwrap();
        assert_eq!(r.hops.len(), 1);
        assert_eq!(r.message.msg_type(), MessageType::Solicit);
    }

    #[test]
    fn each_malformation_has_its_reason() {
        assert_eq!(decode(&[0u8; 5000]).unwrap_err(), Drop6Reason::Oversized);
        assert_eq!(decode(&[1, 2]).unwrap_err(), Drop6Reason::Truncated);
        // An Advertise (2), a Reply (7), a Relay-reply (13): servers send them.
        for t in [2u8, 7, 13] {
            let mut m = solicit();
            m[0] = t;
            assert_eq!(
                decode(&m).unwrap_err(),
                Drop6Reason::NotClientMessage,
                "{t}"
            );
        }
        let mut cut = solicit();
        cut.truncate(cut.len() - 3);
        assert_eq!(decode(&cut).unwrap_err(), Drop6Reason::BadOptionLength);
        let nested = [&solicit()[..], &opt(9, &solicit())].concat();
        assert_eq!(
            decode(&nested).unwrap_err(),
            Drop6Reason::RelayMessageInClientMessage
        );
        assert!(matches!(
            decode(&[relay::RELAY_FORW, 0, 1]).unwrap_err(),
            Drop6Reason::Relay(RelayError::Truncated)
        ));
    }

    #[test]
    fn options_dhcproto_would_misread_are_refused_first() {
        let header = [1u8, 0xab, 0xcd, 0xef];
        // Found by fuzzing: a Vendor Class shorter than its enterprise number made
        // dhcproto subtract past zero.
        for (code, short) in [(16u16, 3usize), (11, 10), (13, 1), (3, 11), (17, 2)] {
            let m = [&header[..], &opt(code, &vec![0; short])].concat();
            assert_eq!(
                decode(&m).unwrap_err(),
                Drop6Reason::BadOptionLength,
                "option {code}"
            );
        }
        // A Relay Message hidden inside an IA_NA, or inside Vendor Options.
        let hidden = opt(9, &solicit());
        let ia_na = [&[0u8; 12][..], &hidden].concat();
        let vendor_opts = [&343u32.to_be_bytes()[..], &hidden].concat();
        for (code, value) in [(3u16, ia_na), (17, vendor_opts)] {
            let m = [&header[..], &opt(code, &value)].concat();
            assert_eq!(
                decode(&m).unwrap_err(),
                Drop6Reason::RelayMessageInClientMessage,
                "inside option {code}"
            );
        }
        // IA_NA inside IA_NA inside …: refused past the nesting cap.
        let mut nested = opt(5, &[0u8; 24]);
        for _ in 0..5 {
            nested = opt(3, &[&[0u8; 12][..], &nested].concat());
        }
        let m = [&header[..], &nested].concat();
        assert_eq!(decode(&m).unwrap_err(), Drop6Reason::BadOptionLength);
        // Fixed-size options of another length (dhcproto reads the fixed size and would
        // read the rest as the next option): the fuzzer's second find, an Elapsed Time
        // of length 0 followed by what then read as a short Vendor Class.
        for (code, len) in [(8u16, 0usize), (8, 3), (7, 2), (12, 15), (14, 1), (23, 17)] {
            let m = [&header[..], &opt(code, &vec![0; len])].concat();
            assert_eq!(
                decode(&m).unwrap_err(),
                Drop6Reason::BadOptionLength,
                "option {code}"
            );
        }
        let second: &[u8] = &[
            0x01, 0x00, 0x40, 0x20, 0x00, 0x00, 0x00, 0x00, 0x48, 0x00, 0x00, 0x00, 0x00, 0x08,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert!(decode(second).is_err());
        // The fuzzer's own input, as it came.
        let found: &[u8] = &[
            0x01, 0xab, 0xcd, 0xef, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00,
        ];
        let _ = decode(found);
    }

    #[test]
    fn every_cut_of_a_solicit_is_decoded_or_dropped_never_a_panic() {
        let m = solicit();
        for n in 0..=m.len() {
            let _ = decode(&m[..n]);
        }
    }
}
