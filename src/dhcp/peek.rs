//! "Not mine" from the raw packet (docs/design.md, "DHCP decisions" 2), pure: with
//! several members on one segment every member receives every broadcast, and most of
//! them are for machines another member answers. [`peek`] reads only what the silent
//! decision needs, at fixed BOOTP offsets and from one walk of the options, without
//! allocating, so those packets cost no full decode.
//!
//! A peek is given only for a packet [`wire::decode_request`] accepts, with the same
//! values dhcproto would decode: anything the walk cannot vouch for (a repeated option,
//! a value dhcproto might refuse, a message type the silent paths do not cover) gives
//! `None`, and the packet is decoded in full as before.

use std::net::Ipv4Addr;

use dhcproto::v4::OptionCode;

use super::wire::{self, HEADER_LEN, MAGIC, MAX_REQUEST_LEN};
use crate::mac::MacAddr;

/// The message types a peek covers, with what their silent decision reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeekKind {
    /// DHCPDISCOVER: silent when another member is responsible.
    Discover,
    /// DHCPREQUEST naming a server (RFC 2131 §4.3.2 SELECTING): silent when the server
    /// named is not this one, whoever is responsible.
    Selecting {
        /// Option 54.
        server_id: Ipv4Addr,
    },
}

/// What the silent decision reads of a request, taken from its raw bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peek {
    /// Message type (and, for a REQUEST, the server it names).
    pub kind: PeekKind,
    /// `chaddr` (htype Ethernet, hlen 6).
    pub mac: MacAddr,
    /// Transaction id, for logs.
    pub xid: u32,
    /// `secs` as sent (before [`super::responsibility::effective_secs`]).
    pub secs: u16,
    /// `giaddr`: a relay's address, or unspecified.
    pub giaddr: Ipv4Addr,
}

/// The peek of `buf`, or `None` when only a full decode can tell (see the module doc).
pub fn peek(buf: &[u8]) -> Option<Peek> {
    // The fixed checks of `wire::decode_request`, in its order.
    if buf.len() > MAX_REQUEST_LEN || buf.len() < HEADER_LEN + MAGIC.len() {
        return None;
    }
    if buf[0] != 1 || buf[1] != 1 || buf[2] != 6 || buf[HEADER_LEN..HEADER_LEN + 4] != MAGIC {
        return None;
    }
    let mut opts = &buf[HEADER_LEN + 4..];
    let mut seen = [0u64; 4];
    let (mut message_type, mut server_id) = (None, None);
    while let Some((&code, rest)) = opts.split_first() {
        match code {
            0 => opts = rest,
            255 => break,
            _ => {
                let (&len, rest) = rest.split_first()?;
                let value = rest.get(..usize::from(len))?;
                // A repeated code is one option split (RFC 3396) or, apart, one that
                // dhcproto keeps only the last of: the full decode sorts that out.
                let (word, bit) = (usize::from(code / 64), 1u64 << (code % 64));
                if seen[word] & bit != 0 || !decodes(code, value) {
                    return None;
                }
                seen[word] |= bit;
                match code {
                    53 => message_type = Some(value[0]),
                    54 => server_id = Some(ipv4(value)),
                    _ => {}
                }
                opts = &rest[value.len()..];
            }
        }
    }
    let kind = match (message_type?, server_id) {
        (1, _) => PeekKind::Discover,
        (3, Some(server_id)) => PeekKind::Selecting { server_id },
        // INIT-REBOOT, RENEWING and the rest weigh the lease table: decode in full.
        _ => return None,
    };
    Some(Peek {
        kind,
        mac: MacAddr(buf[28..34].try_into().ok()?),
        xid: u32::from_be_bytes(buf[4..8].try_into().ok()?),
        secs: u16::from_be_bytes([buf[8], buf[9]]),
        giaddr: ipv4(&buf[24..28]),
    })
}

fn ipv4(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

/// Whether one option instance passes `wire::decode_request`'s checks and dhcproto
/// decodes it (its `decode_inner` for that code cannot fail on `value`) under its own
/// code. Conservative: `false` only sends the packet to the full decode.
fn decodes(code: u8, value: &[u8]) -> bool {
    if !wire::fixed_length_ok(code, value.len()) {
        return false;
    }
    match code {
        // Read as a slice of any length.
        43 | 55 | 60 | 61 | 77 | 97 => true,
        // One octet (length fixed by `fixed_length_ok`), or none: Rapid Commit.
        53 | 80 => true,
        // Type, major, minor (length fixed by `fixed_length_ok`).
        94 => true,
        // An address: exactly four octets.
        50 | 54 | 118 => value.len() == 4,
        // A 16-bit value first (Maximum Message Size, Client System Architecture).
        57 | 93 => value.len() >= 2,
        // A 32-bit lease time.
        51 => value.len() >= 4,
        // Text dhcproto reads as UTF-8 (Host Name, Domain Name).
        12 | 15 => std::str::from_utf8(value).is_ok(),
        // RFC 3046 §2.0: sub-options that tile the value (dhcproto stops quietly at one
        // it cannot read, so it never refuses the option itself).
        82 => wire::sub_options_tile(value),
        // Codes dhcproto does not know are kept as raw bytes, under their own code.
        _ => matches!(OptionCode::from(code), OptionCode::Unknown(_)),
    }
}

#[cfg(test)]
mod tests;
