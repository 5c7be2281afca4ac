//! Checks on raw DHCP datagrams before decoding. dhcproto stops parsing options at the
//! first bad one and keeps what it had; a server must instead refuse such a packet, so
//! the option area is walked here first. Every refusal has a reason for the drop counters.

use dhcproto::v4::{Message, MessageType};
use dhcproto::{Decodable, Decoder, Encodable, Encoder};

/// Fixed BOOTP header (RFC 2131 §2, figure 1) before the magic cookie.
const HEADER_LEN: usize = 236;
/// RFC 2131 §3: the "magic cookie" 99.130.83.99 starts the options field.
const MAGIC: [u8; 4] = [99, 130, 83, 99];
/// Largest request accepted: an Ethernet MTU's worth of UDP payload. Clients never
/// fragment DHCP; anything larger is garbage or an attack.
pub const MAX_REQUEST_LEN: usize = 1472;

/// Why a datagram was dropped before reaching the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DropReason {
    /// Shorter than header + magic cookie.
    #[error("truncated")]
    Truncated,
    /// Larger than [`MAX_REQUEST_LEN`].
    #[error("oversized")]
    Oversized,
    /// `op` is not BOOTREQUEST (replies from other servers land here too).
    #[error("not_request")]
    NotRequest,
    /// Not Ethernet with a 6-byte address.
    #[error("unsupported_hardware")]
    UnsupportedHardware,
    /// Missing or wrong magic cookie (plain BOOTP is not served).
    #[error("bad_magic")]
    BadMagic,
    /// An option's length runs past the end of the packet.
    #[error("bad_option_length")]
    BadOptionLength,
    /// No option 53, or an unknown message type.
    #[error("bad_message_type")]
    BadMessageType,
    /// dhcproto rejected the packet after our checks passed.
    #[error("undecodable")]
    Undecodable,
}

impl DropReason {
    /// Stable label for metrics and logs (the same text as `Display`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Truncated => "truncated",
            Self::Oversized => "oversized",
            Self::NotRequest => "not_request",
            Self::UnsupportedHardware => "unsupported_hardware",
            Self::BadMagic => "bad_magic",
            Self::BadOptionLength => "bad_option_length",
            Self::BadMessageType => "bad_message_type",
            Self::Undecodable => "undecodable",
        }
    }

    /// Every reason, for metric exposition.
    pub const ALL: [DropReason; 8] = [
        Self::Truncated,
        Self::Oversized,
        Self::NotRequest,
        Self::UnsupportedHardware,
        Self::BadMagic,
        Self::BadOptionLength,
        Self::BadMessageType,
        Self::Undecodable,
    ];
}

/// Validates and decodes a client request.
pub fn decode_request(buf: &[u8]) -> Result<Message, DropReason> {
    if buf.len() > MAX_REQUEST_LEN {
        return Err(DropReason::Oversized);
    }
    if buf.len() < HEADER_LEN + MAGIC.len() {
        return Err(DropReason::Truncated);
    }
    if buf[0] != 1 {
        return Err(DropReason::NotRequest);
    }
    if buf[1] != 1 || buf[2] != 6 {
        return Err(DropReason::UnsupportedHardware);
    }
    if buf[HEADER_LEN..HEADER_LEN + 4] != MAGIC {
        return Err(DropReason::BadMagic);
    }
    let message_type = walk_options(&buf[HEADER_LEN + 4..])?;
    if !(1..=8).contains(&message_type) {
        return Err(DropReason::BadMessageType);
    }
    let msg = Message::decode(&mut Decoder::new(buf)).map_err(|_| DropReason::Undecodable)?;
    match msg.opts().msg_type() {
        Some(MessageType::Unknown(_)) | None => Err(DropReason::BadMessageType),
        Some(_) => Ok(msg),
    }
}

/// Walks the TLV option area (RFC 2132 §2); returns the option-53 value (0 if absent).
fn walk_options(mut opts: &[u8]) -> Result<u8, DropReason> {
    let mut message_type = 0;
    while let Some((&code, rest)) = opts.split_first() {
        match code {
            0 => opts = rest,
            255 => return Ok(message_type),
            _ => {
                let (&len, rest) = rest.split_first().ok_or(DropReason::BadOptionLength)?;
                let len = len as usize;
                if rest.len() < len {
                    return Err(DropReason::BadOptionLength);
                }
                if code == 53 {
                    if len != 1 {
                        return Err(DropReason::BadOptionLength);
                    }
                    message_type = rest[0];
                }
                opts = &rest[len..];
            }
        }
    }
    // RFC 2131 requires an End option, but some clients omit it when the packet ends
    // exactly at the last option; accept that.
    Ok(message_type)
}

/// The value of option `code` in a request that [`decode_request`] accepted, all its
/// instances concatenated (RFC 3396), exactly as they were on the wire; `None` when the
/// option is absent. Only the options field is read (relay agents never put option 82
/// in an overloaded `file` or `sname`).
pub fn raw_option(request: &[u8], code: u8) -> Option<Vec<u8>> {
    let mut opts = request.get(HEADER_LEN + MAGIC.len()..)?;
    let mut value: Option<Vec<u8>> = None;
    while let Some((&c, rest)) = opts.split_first() {
        match c {
            0 => opts = rest,
            255 => break,
            _ => {
                let (&len, rest) = rest.split_first()?;
                let body = rest.get(..len as usize)?;
                if c == code {
                    value.get_or_insert_with(Vec::new).extend_from_slice(body);
                }
                opts = &rest[len as usize..];
            }
        }
    }
    value
}

/// Smallest BOOTP message: RFC 1542 §2.1 lets relay agents and old clients drop
/// anything shorter, so replies are padded up to it.
pub const MIN_REPLY_LEN: usize = 300;

/// Encodes a reply into `buf` (cleared first), padded to [`MIN_REPLY_LEN`].
pub fn encode_reply(msg: &Message, buf: &mut Vec<u8>) -> Result<(), dhcproto::error::EncodeError> {
    buf.clear();
    msg.encode(&mut Encoder::new(buf))?;
    if buf.len() < MIN_REPLY_LEN {
        // Pad options (code 0) after End (RFC 2132 §3.1).
        buf.resize(MIN_REPLY_LEN, 0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_option_is_every_instance_concatenated_as_sent() {
        let mut p = vec![0u8; HEADER_LEN];
        p.extend_from_slice(&MAGIC);
        p.extend_from_slice(&[53, 1, 1, 82, 3, 2, 1, 9, 0, 82, 2, 1, 0, 255]);
        assert_eq!(raw_option(&p, 82), Some(vec![2, 1, 9, 1, 0]));
        assert_eq!(raw_option(&p, 61), None);
        // A length past the end: nothing rather than a guess.
        let mut cut = p[..p.len() - 3].to_vec();
        cut.truncate(cut.len() - 1);
        assert_eq!(raw_option(&cut, 82), None);
    }
    use dhcproto::v4::{DhcpOption, Opcode};

    fn message(xid: u32, kind: MessageType) -> Message {
        let z = [0, 0, 0, 0].into();
        let mut m = Message::new_with_id(xid, z, z, z, z, &[0x52, 0x54, 0, 1, 2, 3]);
        m.opts_mut().insert(DhcpOption::MessageType(kind));
        m
    }

    fn discover() -> Vec<u8> {
        let mut m = message(7, MessageType::Discover);
        m.opts_mut().insert(DhcpOption::Hostname("node".into()));
        m.to_vec().unwrap()
    }

    #[test]
    fn accepts_a_discover() {
        let m = decode_request(&discover()).unwrap();
        assert_eq!(m.opts().msg_type(), Some(MessageType::Discover));
        assert_eq!(m.opcode(), Opcode::BootRequest);
    }

    #[test]
    fn short_replies_are_padded_to_the_bootp_minimum_and_still_decode() {
        let mut nak = message(9, MessageType::Nak);
        nak.set_opcode(Opcode::BootReply);
        assert!(nak.to_vec().unwrap().len() < MIN_REPLY_LEN);
        let mut buf = Vec::new();
        encode_reply(&nak, &mut buf).unwrap();
        assert_eq!(buf.len(), MIN_REPLY_LEN);
        let back = Message::from_bytes(&buf).unwrap();
        assert_eq!(back.opts().msg_type(), Some(MessageType::Nak));
        assert_eq!(back.xid(), 9);
    }

    #[test]
    fn refuses_each_kind_of_damage() {
        let good = discover();
        let mut cases: Vec<(Vec<u8>, DropReason)> = vec![
            (good[..100].to_vec(), DropReason::Truncated),
            (vec![0u8; 2000], DropReason::Oversized),
        ];
        let mut reply = good.clone();
        reply[0] = 2;
        cases.push((reply, DropReason::NotRequest));
        let mut ib = good.clone();
        ib[1] = 32;
        cases.push((ib, DropReason::UnsupportedHardware));
        let mut magic = good.clone();
        magic[237] = 0;
        cases.push((magic, DropReason::BadMagic));
        // Claim the last option is longer than what remains.
        let mut long = good[..good.len() - 1].to_vec();
        long.extend_from_slice(&[12, 200, b'x']);
        cases.push((long, DropReason::BadOptionLength));
        let mut no_type = good[..240].to_vec();
        no_type.push(255);
        cases.push((no_type, DropReason::BadMessageType));
        let mut bad_type = good[..240].to_vec();
        bad_type.extend_from_slice(&[53, 1, 42, 255]);
        cases.push((bad_type, DropReason::BadMessageType));
        for (bytes, want) in cases {
            assert_eq!(decode_request(&bytes).unwrap_err(), want);
        }
    }
}
