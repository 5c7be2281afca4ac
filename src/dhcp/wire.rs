//! Checks on raw DHCP datagrams before decoding. dhcproto stops parsing options at the
//! first bad one and keeps what it had; a server must instead refuse such a packet, so
//! the option area is walked here first. Every refusal has a reason for the drop counters.

use dhcproto::v4::{Message, MessageType};
use dhcproto::{Decodable, Decoder, Encodable, Encoder};

/// Fixed BOOTP header (RFC 2131 §2, figure 1) before the magic cookie.
pub(super) const HEADER_LEN: usize = 236;
/// RFC 2131 §3: the "magic cookie" 99.130.83.99 starts the options field.
pub(super) const MAGIC: [u8; 4] = [99, 130, 83, 99];
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
    /// Option 53 appears more than once: which type the client meant is ambiguous, and
    /// servers that read the first and the last disagree about the same packet.
    #[error("duplicate_message_type")]
    DuplicateMessageType,
    /// dhcproto kept fewer distinct options than the option area carries (it stops at
    /// the first option whose value it cannot read), so the engine would decide on part
    /// of what the client sent.
    #[error("options_lost")]
    OptionsLost,
    /// Option 82's sub-options (RFC 3046 §2.0) do not tile its value: one runs past the
    /// end. dhcproto would keep a trimmed sub-option, so the relay's circuit and link
    /// selection would be read differently from what the relay sent.
    #[error("bad_relay_agent_info")]
    BadRelayAgentInfo,
    /// dhcproto rejected the packet after our checks passed.
    #[error("undecodable")]
    Undecodable,
    /// The kernel dropped it: the socket's receive buffer was full (a storm faster than
    /// the engine; `dhcp.receive_buffer_kib` sizes it). Counted from the socket's own
    /// drop counter, never seen by this process.
    #[error("receive_buffer_full")]
    ReceiveBufferFull,
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
            Self::DuplicateMessageType => "duplicate_message_type",
            Self::OptionsLost => "options_lost",
            Self::BadRelayAgentInfo => "bad_relay_agent_info",
            Self::Undecodable => "undecodable",
            Self::ReceiveBufferFull => "receive_buffer_full",
        }
    }

    /// Every reason, for metric exposition.
    pub const ALL: [DropReason; 12] = [
        Self::Truncated,
        Self::Oversized,
        Self::NotRequest,
        Self::UnsupportedHardware,
        Self::BadMagic,
        Self::BadOptionLength,
        Self::BadMessageType,
        Self::DuplicateMessageType,
        Self::OptionsLost,
        Self::BadRelayAgentInfo,
        Self::Undecodable,
        Self::ReceiveBufferFull,
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
    let walk = walk_options(&buf[HEADER_LEN + 4..])?;
    if walk.message_types > 1 {
        return Err(DropReason::DuplicateMessageType);
    }
    if !(1..=8).contains(&walk.message_type) {
        return Err(DropReason::BadMessageType);
    }
    if walk.has_relay_agent_info && !sub_options_tile(&raw_option(buf, 82).unwrap_or_default()) {
        return Err(DropReason::BadRelayAgentInfo);
    }
    let msg = Message::decode(&mut Decoder::new(buf)).map_err(|_| DropReason::Undecodable)?;
    // dhcproto merges repeated codes (RFC 3396) into one entry, so compare distinct
    // codes, not option instances.
    if msg.opts().len() < walk.distinct_codes {
        return Err(DropReason::OptionsLost);
    }
    match msg.opts().msg_type() {
        Some(MessageType::Unknown(_)) | None => Err(DropReason::BadMessageType),
        Some(_) => Ok(msg),
    }
}

/// What a walk of the raw option area found.
#[derive(Debug, Default)]
struct Walk {
    /// The option-53 value (0 if absent; the last one if repeated).
    message_type: u8,
    /// How many option-53 instances there were.
    message_types: usize,
    /// Distinct option codes, Pad and End excluded.
    distinct_codes: usize,
    /// Option 82 is present (its sub-options are checked once concatenated).
    has_relay_agent_info: bool,
}

/// Walks the TLV option area (RFC 2132 §2) up to End (or the end of the packet).
fn walk_options(mut opts: &[u8]) -> Result<Walk, DropReason> {
    let mut walk = Walk::default();
    // A bit per code: 32 octets to clear per packet, where a flag and a total per code
    // were 2 KiB (the walk runs on every datagram).
    let mut seen = [0u64; 4];
    // RFC 3396: repeated instances are concatenated (dhcproto does so), so the fixed
    // lengths hold for the total too: three well-formed 3-octet option 94s are one
    // 9-octet option 94 (found by `fuzz/` dhcp_engine). Kept for those codes only.
    let mut totals = [0usize; FIXED_LENGTH_CODES.len()];
    while let Some((&code, rest)) = opts.split_first() {
        match code {
            0 => opts = rest,
            255 => break,
            _ => {
                let (&len, rest) = rest.split_first().ok_or(DropReason::BadOptionLength)?;
                let len = len as usize;
                if rest.len() < len {
                    return Err(DropReason::BadOptionLength);
                }
                if !fixed_length_ok(code, len) {
                    return Err(DropReason::BadOptionLength);
                }
                if code == 53 {
                    walk.message_type = rest[0];
                    walk.message_types += 1;
                }
                walk.has_relay_agent_info |= code == 82;
                if let Some(i) = FIXED_LENGTH_CODES.iter().position(|c| *c == code) {
                    totals[i] += len;
                }
                // RFC 3396 §6: several instances of one code are one option, split.
                let (word, bit) = (usize::from(code / 64), 1u64 << (code % 64));
                if seen[word] & bit == 0 {
                    seen[word] |= bit;
                    walk.distinct_codes += 1;
                }
                opts = &rest[len..];
            }
        }
    }
    // RFC 2131 requires an End option, but some clients omit it when the packet ends
    // exactly at the last option; accept that.
    // A repeated 53 is refused as ambiguous, by the caller; absent codes total 0.
    let concatenated_ok = FIXED_LENGTH_CODES
        .iter()
        .zip(totals)
        .all(|(c, total)| total == 0 || fixed_length_ok(*c, total));
    if concatenated_ok {
        Ok(walk)
    } else {
        Err(DropReason::BadOptionLength)
    }
}

/// Whether `value` is a whole number of sub-options (code, length, value; RFC 3046
/// §2.0), as option 82 must be once its instances are concatenated (RFC 3396).
pub(super) fn sub_options_tile(mut value: &[u8]) -> bool {
    while let [_, len, rest @ ..] = value {
        let Some(next) = rest.get(usize::from(*len)..) else {
            return false;
        };
        value = next;
    }
    value.is_empty()
}

/// The codes besides 53 whose length [`fixed_length_ok`] restricts (every other code's
/// length is free).
const FIXED_LENGTH_CODES: [u8; 7] = [80, 81, 94, 152, 153, 154, 155];

/// Whether `len` is a length the option's RFC allows, for the options whose length
/// dhcproto checks only with `debug_assert!`: in a build with debug assertions a wrong
/// length there panics inside its decoder (found by `fuzz/` dhcp_engine), in release
/// it is read as if right. Either way the packet is malformed.
pub(super) fn fixed_length_ok(code: u8, len: usize) -> bool {
    match code {
        // RFC 2132 §9.6: one octet.
        53 => len == 1,
        // RFC 4039 §4: Rapid Commit carries no value.
        80 => len == 0,
        // RFC 4702 §2: flags and two RCODEs before the name.
        81 => len >= 3,
        // RFC 4578 §2.2: type, major, minor.
        94 => len == 3,
        // RFC 6926 §6.2.3–6.2.6: 32-bit times.
        152..=155 => len == 4,
        _ => true,
    }
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

/// Encodes a reply into `buf` (cleared first), padded to [`MIN_REPLY_LEN`], its options
/// in dhcproto's order.
pub fn encode_reply(msg: &Message, buf: &mut Vec<u8>) -> Result<(), dhcproto::error::EncodeError> {
    buf.clear();
    msg.encode(&mut Encoder::new(buf))?;
    pad(buf);
    Ok(())
}

/// Encodes a reply for the client that asked (`fit`: the options it asked for first,
/// no more than it takes; `dhcp::option_fit`), padded to [`MIN_REPLY_LEN`].
pub fn encode_reply_for(
    msg: &Message,
    fit: &crate::dhcp::option_fit::Fit,
    buf: &mut Vec<u8>,
) -> Result<crate::dhcp::option_fit::Laid, dhcproto::error::EncodeError> {
    buf.clear();
    msg.encode(&mut Encoder::new(buf))?;
    let laid = crate::dhcp::option_fit::lay_out(buf, fit);
    pad(buf);
    Ok(laid)
}

fn pad(buf: &mut Vec<u8>) {
    if buf.len() < MIN_REPLY_LEN {
        // Pad options (code 0) after End (RFC 2132 §3.1).
        buf.resize(MIN_REPLY_LEN, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dhcproto::v4::{DhcpOption, Opcode, OptionCode};

    #[test]
    fn the_fixed_length_codes_are_every_code_whose_length_is_checked() {
        for code in 0..=255u8 {
            let checked = (0..=1472).any(|len| !fixed_length_ok(code, len));
            assert_eq!(
                checked,
                code == 53 || FIXED_LENGTH_CODES.contains(&code),
                "code {code}"
            );
        }
    }

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

    /// A DISCOVER's fixed part and cookie followed by `opts` (no End added).
    fn with_options(opts: &[u8]) -> Vec<u8> {
        let mut b = discover()[..240].to_vec();
        b.extend_from_slice(opts);
        b
    }

    #[test]
    fn refuses_option_53_twice_adjacent_or_apart() {
        for opts in [
            &[53, 1, 1, 53, 1, 1, 255][..],
            &[53, 1, 1, 12, 1, b'a', 53, 1, 3, 255][..],
            &[53, 1, 3, 0, 0, 53, 1, 1][..],
        ] {
            assert_eq!(
                decode_request(&with_options(opts)).unwrap_err(),
                DropReason::DuplicateMessageType,
                "{opts:?}"
            );
        }
    }

    #[test]
    fn refuses_a_packet_dhcproto_reads_only_part_of() {
        // Subnet mask (option 1) with 3 octets: a well-formed TLV whose value dhcproto
        // cannot read, so it stops there and loses the host name after it.
        let opts = [
            53, 1, 1, 1, 3, 255, 255, 0, 12, 4, b'n', b'o', b'd', b'e', 255,
        ];
        assert_eq!(
            decode_request(&with_options(&opts)).unwrap_err(),
            DropReason::OptionsLost
        );
    }

    #[test]
    fn fixed_lengths_hold_for_repeated_instances_concatenated() {
        // Two well-formed 3-octet client NIC options are one 6-octet option (RFC 3396).
        let opts = [53, 1, 1, 94, 3, 1, 3, 0, 94, 3, 1, 3, 0, 255];
        assert_eq!(
            decode_request(&with_options(&opts)).unwrap_err(),
            DropReason::BadOptionLength
        );
        assert!(decode_request(&with_options(&[53, 1, 1, 94, 3, 1, 3, 0, 255])).is_ok());
    }

    #[test]
    fn refuses_relay_agent_info_whose_sub_options_do_not_tile() {
        for (opts, ok) in [
            // Circuit id "ab", remote id empty: tiles.
            (&[53, 1, 1, 82, 6, 1, 2, b'a', b'b', 2, 0, 255][..], true),
            // Split over two instances, a sub-option straddling the split (RFC 3396).
            (&[53, 1, 1, 82, 3, 1, 2, b'a', 82, 1, b'b', 255][..], true),
            // A sub-option claiming more than the option holds.
            (&[53, 1, 1, 82, 4, 1, 200, b'a', b'b', 255][..], false),
            // A lone code octet with no length.
            (&[53, 1, 1, 82, 5, 1, 2, b'a', b'b', 9, 255][..], false),
        ] {
            let got = decode_request(&with_options(opts));
            if ok {
                assert!(got.is_ok(), "{opts:?}: {got:?}");
            } else {
                assert_eq!(got.unwrap_err(), DropReason::BadRelayAgentInfo, "{opts:?}");
            }
        }
    }

    #[test]
    fn rfc3396_split_options_are_one_option_not_a_loss() {
        // Host name split over three instances of option 12, adjacent as RFC 3396 §6
        // sends them.
        let opts = [
            53, 1, 1, 12, 2, b'n', b'o', 12, 1, b'd', 12, 1, b'e', 55, 2, 1, 3, 255,
        ];
        let m = decode_request(&with_options(&opts)).unwrap();
        assert_eq!(
            m.opts().get(OptionCode::Hostname),
            Some(&DhcpOption::Hostname("node".into()))
        );
        // A parameter request list longer than 255 octets: two instances.
        let mut opts = vec![53, 1, 1, 55, 255];
        opts.extend((1..=255).map(|i: u32| i as u8));
        opts.extend_from_slice(&[55, 10]);
        opts.extend(1..=10u8);
        opts.push(255);
        assert!(decode_request(&with_options(&opts)).is_ok());
    }

    #[test]
    fn refuses_lengths_dhcproto_only_debug_asserts() {
        // fuzz/artifacts-found/dhcp_engine-rapid-commit-len-1.bin, reduced: a Rapid
        // Commit with a value panicked dhcproto in debug builds.
        for opts in [
            &[53, 1, 1, 80, 1, 1, 255][..],
            &[53, 1, 1, 81, 1, 0, 255][..],
            &[53, 1, 1, 94, 2, 1, 2, 255][..],
            &[53, 1, 1, 152, 3, 0, 0, 0, 255][..],
            &[53, 1, 1, 155, 0, 255][..],
        ] {
            assert_eq!(
                decode_request(&with_options(opts)).unwrap_err(),
                DropReason::BadOptionLength,
                "{opts:?}"
            );
        }
        for opts in [
            &[53, 1, 1, 80, 0, 255][..],
            &[53, 1, 1, 94, 3, 1, 2, 1, 255][..],
            &[53, 1, 1, 152, 4, 0, 0, 0, 1, 255][..],
        ] {
            assert!(decode_request(&with_options(opts)).is_ok(), "{opts:?}");
        }
    }

    #[test]
    fn walk_counts_distinct_codes_and_message_types() {
        let w = walk_options(&[53, 1, 1, 12, 1, b'a', 12, 1, b'b', 0, 61, 0, 255, 9, 9]).unwrap();
        assert_eq!(
            (w.message_type, w.message_types, w.distinct_codes),
            (1, 1, 3)
        );
    }
}
