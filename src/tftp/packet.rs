//! TFTP wire format: zero-copy decoding of what clients send, encoding of what we send.
//!
//! Only the packets a read-only server needs are modelled. Decoding borrows from the
//! receive buffer; encoding writes into a caller-owned buffer so the send path does not
//! allocate per block.

use std::fmt;

/// RFC 1350 §5 opcodes (plus OACK from RFC 2347).
pub mod opcode {
    /// Read request.
    pub const RRQ: u16 = 1;
    /// Write request.
    pub const WRQ: u16 = 2;
    /// Data block.
    pub const DATA: u16 = 3;
    /// Acknowledgement.
    pub const ACK: u16 = 4;
    /// Error.
    pub const ERROR: u16 = 5;
    /// Option acknowledgement (RFC 2347).
    pub const OACK: u16 = 6;
}

/// RFC 1350 appendix error codes, plus 8 from RFC 2347.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ErrorCode {
    /// Not defined, see the message.
    NotDefined = 0,
    /// File not found.
    FileNotFound = 1,
    /// Access violation.
    AccessViolation = 2,
    /// Disk full or allocation exceeded.
    AllocationExceeded = 3,
    /// Illegal TFTP operation.
    IllegalOperation = 4,
    /// Unknown transfer ID.
    UnknownTid = 5,
    /// File already exists.
    FileExists = 6,
    /// No such user.
    NoSuchUser = 7,
    /// Option negotiation refused (RFC 2347).
    OptionRefused = 8,
}

/// Transfer mode named in a request (RFC 1350 §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Raw 8-bit bytes.
    Octet,
    /// NVT ASCII: LF becomes CR LF, CR becomes CR NUL (RFC 764).
    Netascii,
    /// Obsolete `mail` mode, or anything unknown.
    Other,
}

/// A request option as sent, before negotiation. Names are matched case-insensitively
/// (RFC 2347: "case in-sensitive").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawOption<'a> {
    /// Option name bytes.
    pub name: &'a [u8],
    /// Option value bytes.
    pub value: &'a [u8],
}

/// A decoded read or write request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// Raw filename bytes; confinement decides what they mean.
    pub filename: &'a [u8],
    /// Transfer mode.
    pub mode: Mode,
    /// Options in the order sent (RFC 2347).
    pub options: Vec<RawOption<'a>>,
}

/// A packet received from a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet<'a> {
    /// RRQ.
    Read(Request<'a>),
    /// WRQ; always refused by this server.
    Write(Request<'a>),
    /// ACK with its wire block number.
    Ack(u16),
    /// ERROR from the peer (e.g. code 8 to decline our OACK).
    Error {
        /// Raw error code (peers may send codes outside the RFC list).
        code: u16,
        /// Message bytes, without the terminating NUL.
        message: &'a [u8],
    },
    /// DATA or OACK: legal TFTP, but never expected by a read-only server.
    Unexpected(u16),
}

/// Why a datagram could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than any TFTP packet.
    #[error("datagram too short")]
    TooShort,
    /// Opcode outside 1..=6.
    #[error("unknown opcode {0}")]
    UnknownOpcode(u16),
    /// A string field is missing its NUL terminator.
    #[error("unterminated string field")]
    Unterminated,
    /// Too many options for a sane request.
    #[error("too many options")]
    TooManyOptions,
}

/// Upper bound on options per request: the four we know fit many times over, and it
/// keeps a hostile request from making us allocate per option.
const MAX_OPTIONS: usize = 16;

impl<'a> Packet<'a> {
    /// Decodes one datagram. Never panics on any input.
    pub fn decode(buf: &'a [u8]) -> Result<Self, DecodeError> {
        if buf.len() < 2 {
            return Err(DecodeError::TooShort);
        }
        let op = u16::from_be_bytes([buf[0], buf[1]]);
        let body = &buf[2..];
        match op {
            opcode::RRQ => decode_request(body).map(Packet::Read),
            opcode::WRQ => decode_request(body).map(Packet::Write),
            opcode::ACK => {
                // RFC 1350 §5: ACK is exactly opcode + block; tolerate trailing bytes
                // as some embedded stacks pad short frames.
                if body.len() < 2 {
                    return Err(DecodeError::TooShort);
                }
                Ok(Packet::Ack(u16::from_be_bytes([body[0], body[1]])))
            }
            opcode::ERROR => {
                if body.len() < 2 {
                    return Err(DecodeError::TooShort);
                }
                let code = u16::from_be_bytes([body[0], body[1]]);
                let rest = &body[2..];
                // A missing NUL on an ERROR is harmless: we only log it.
                let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                Ok(Packet::Error {
                    code,
                    message: &rest[..end],
                })
            }
            opcode::DATA | opcode::OACK => Ok(Packet::Unexpected(op)),
            other => Err(DecodeError::UnknownOpcode(other)),
        }
    }
}

/// Splits off one NUL-terminated field.
fn take_field(buf: &[u8]) -> Result<(&[u8], &[u8]), DecodeError> {
    let end = buf
        .iter()
        .position(|&b| b == 0)
        .ok_or(DecodeError::Unterminated)?;
    Ok((&buf[..end], &buf[end + 1..]))
}

fn decode_request(body: &[u8]) -> Result<Request<'_>, DecodeError> {
    // RFC 1350 §5: filename NUL mode NUL; RFC 2347 §2 appends name NUL value NUL pairs.
    let (filename, rest) = take_field(body)?;
    let (mode, mut rest) = take_field(rest)?;
    let mode = if mode.eq_ignore_ascii_case(b"octet") {
        Mode::Octet
    } else if mode.eq_ignore_ascii_case(b"netascii") {
        Mode::Netascii
    } else {
        Mode::Other
    };
    let mut options = Vec::new();
    while !rest.is_empty() {
        // Trailing NUL padding after the last option is seen in the wild; skip it.
        if rest.iter().all(|&b| b == 0) {
            break;
        }
        // RFC 2347 §2 options come in name/value pairs. An incomplete trailing pair
        // is ignored rather than failing the request, so that the client still gets
        // an answer (an error packet, if the name or mode is bad) instead of silence.
        let Ok((name, r)) = take_field(rest) else {
            break;
        };
        let Ok((value, r)) = take_field(r) else {
            break;
        };
        if options.len() == MAX_OPTIONS {
            return Err(DecodeError::TooManyOptions);
        }
        options.push(RawOption { name, value });
        rest = r;
    }
    Ok(Request {
        filename,
        mode,
        options,
    })
}

/// Writes the 4-byte DATA header for `block` into `out` (cleared first) followed by
/// `payload`.
pub fn encode_data(out: &mut Vec<u8>, block: u16, payload: &[u8]) {
    out.clear();
    out.extend_from_slice(&opcode::DATA.to_be_bytes());
    out.extend_from_slice(&block.to_be_bytes());
    out.extend_from_slice(payload);
}

/// Writes an ERROR packet (RFC 1350 §5) into `out`.
pub fn encode_error(out: &mut Vec<u8>, code: ErrorCode, message: &str) {
    out.clear();
    out.extend_from_slice(&opcode::ERROR.to_be_bytes());
    out.extend_from_slice(&(code as u16).to_be_bytes());
    // Messages are ours and static, but keep the wire format valid regardless.
    out.extend(message.bytes().filter(|&b| b != 0));
    out.push(0);
}

/// Writes an OACK (RFC 2347 §2) listing `options` in order.
pub fn encode_oack(out: &mut Vec<u8>, options: &[(&str, u64)]) {
    out.clear();
    out.extend_from_slice(&opcode::OACK.to_be_bytes());
    for (name, value) in options {
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        out.extend_from_slice(value.to_string().as_bytes());
        out.push(0);
    }
}

/// Shows raw bytes as text for logs, escaping anything that is not printable ASCII so
/// a hostile filename cannot forge log lines.
#[derive(Debug)]
pub struct Escaped<'a>(pub &'a [u8]);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &b in self.0.iter().take(512) {
            if (0x20..0x7f).contains(&b) && b != b'\\' {
                write!(f, "{}", b as char)?;
            } else {
                write!(f, "\\x{b:02x}")?;
            }
        }
        if self.0.len() > 512 {
            f.write_str("...")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rrq(parts: &[&[u8]]) -> Vec<u8> {
        let mut v = vec![0, 1];
        for p in parts {
            v.extend_from_slice(p);
            v.push(0);
        }
        v
    }

    #[test]
    fn decodes_plain_rrq() {
        let buf = rrq(&[b"snponly.efi", b"octet"]);
        let Packet::Read(r) = Packet::decode(&buf).unwrap() else {
            panic!("not a read request")
        };
        assert_eq!(r.filename, b"snponly.efi");
        assert_eq!(r.mode, Mode::Octet);
        assert!(r.options.is_empty());
    }

    #[test]
    fn decodes_rrq_with_options_case_insensitive_mode() {
        let buf = rrq(&[b"a", b"NetASCII", b"BLKSIZE", b"1432", b"tsize", b"0"]);
        let Packet::Read(r) = Packet::decode(&buf).unwrap() else {
            panic!("not a read request")
        };
        assert_eq!(r.mode, Mode::Netascii);
        assert_eq!(r.options.len(), 2);
        assert_eq!(r.options[0].name, b"BLKSIZE");
        assert_eq!(r.options[1].value, b"0");
    }

    #[test]
    fn keeps_non_numeric_option_values_for_negotiation_to_ignore() {
        // tftpd 1.0's parser rejects the whole request here; we must still answer.
        let buf = rrq(&[b"a", b"octet", b"blksize", b"lots"]);
        assert!(matches!(Packet::decode(&buf), Ok(Packet::Read(_))));
    }

    #[test]
    fn decodes_ack_error_and_unexpected() {
        assert_eq!(Packet::decode(&[0, 4, 1, 2]).unwrap(), Packet::Ack(0x0102));
        assert_eq!(
            Packet::decode(&[0, 5, 0, 8, b'n', b'o', 0]).unwrap(),
            Packet::Error {
                code: 8,
                message: b"no"
            }
        );
        assert_eq!(
            Packet::decode(&[0, 3, 0, 1, 9]).unwrap(),
            Packet::Unexpected(3)
        );
    }

    #[test]
    fn rejects_malformed() {
        let cases: &[(&[u8], DecodeError)] = &[
            (&[], DecodeError::TooShort),
            (&[0], DecodeError::TooShort),
            (&[0, 4, 1], DecodeError::TooShort),
            (&[0, 9], DecodeError::UnknownOpcode(9)),
            (&[0, 1, b'a'], DecodeError::Unterminated),
            (&[0, 1, b'a', 0, b'o'], DecodeError::Unterminated),
        ];
        for (buf, want) in cases {
            assert_eq!(Packet::decode(buf), Err(*want), "{buf:?}");
        }
    }

    #[test]
    fn ignores_incomplete_trailing_option() {
        for buf in [
            &b"\0\x01a\0o\0x\0"[..],
            b"\0\x01a\0o\0x\x001",
            b"\0\x01a\0o\0x",
        ] {
            let Ok(Packet::Read(r)) = Packet::decode(buf) else {
                panic!("{buf:?}")
            };
            assert!(r.options.is_empty());
        }
    }

    #[test]
    fn caps_option_count() {
        let mut parts: Vec<&[u8]> = vec![b"a", b"octet"];
        for _ in 0..=MAX_OPTIONS {
            parts.push(b"x");
            parts.push(b"1");
        }
        assert_eq!(
            Packet::decode(&rrq(&parts)),
            Err(DecodeError::TooManyOptions)
        );
    }

    #[test]
    fn never_panics_on_any_short_input() {
        // Exhaustive over all 1..=3-byte datagrams with interesting byte values.
        let alphabet = [0u8, 1, 2, 3, 4, 5, 6, 7, b'a', 0xff];
        for a in alphabet {
            for b in alphabet {
                let _ = Packet::decode(&[a, b]);
                for c in alphabet {
                    let _ = Packet::decode(&[a, b, c]);
                    for d in alphabet {
                        let _ = Packet::decode(&[a, b, c, d, 0, d, c]);
                    }
                }
            }
        }
    }

    #[test]
    fn encodes() {
        let mut out = Vec::new();
        encode_data(&mut out, 0x0102, b"xy");
        assert_eq!(out, [0, 3, 1, 2, b'x', b'y']);
        encode_error(&mut out, ErrorCode::FileNotFound, "nope");
        assert_eq!(out, [0, 5, 0, 1, b'n', b'o', b'p', b'e', 0]);
        encode_oack(&mut out, &[("blksize", 1468), ("tsize", 7)]);
        assert_eq!(out, b"\0\x06blksize\x001468\0tsize\x007\0");
    }

    #[test]
    fn escapes_for_logs() {
        assert_eq!(Escaped(b"a\n\\b\0").to_string(), "a\\x0a\\x5cb\\x00");
    }
}
