//! BOOTP/DHCPv4 packets built and read by hand for the load generators (no allocation per
//! packet): a relayed BOOTREQUEST from a template, and the few fields of a BOOTREPLY a
//! generator checks. RFC 2131 §2 gives the fixed layout; §3 the options used.

use std::net::Ipv4Addr;

pub(crate) const OP: usize = 0;
pub(crate) const XID: usize = 4;
pub(crate) const CIADDR: usize = 12;
pub(crate) const YIADDR: usize = 16;
pub(crate) const GIADDR: usize = 24;
pub(crate) const CHADDR: usize = 28;
pub(crate) const OPTIONS: usize = 240;
pub(crate) const DISCOVER: u8 = 1;
pub(crate) const OFFER: u8 = 2;
pub(crate) const REQUEST: u8 = 3;
pub(crate) const ACK: u8 = 5;
pub(crate) const NAK: u8 = 6;

/// A generator's MAC for machine `n`: locally administered, `prefix` telling the
/// generators apart, never a real NIC's.
pub(crate) fn mac(prefix: u8, n: u32) -> [u8; 6] {
    let b = n.to_be_bytes();
    [0x02, prefix, b[0], b[1], b[2], b[3]]
}

/// What goes into one BOOTREQUEST.
pub(crate) struct Request<'a> {
    pub(crate) kind: u8,
    pub(crate) xid: u32,
    pub(crate) mac: [u8; 6],
    /// Sent as giaddr: replies come back to this relay's port 67.
    pub(crate) relay: Ipv4Addr,
    /// A RENEWING or REBINDING client's own address (RFC 2131 §4.3.2).
    pub(crate) ciaddr: Ipv4Addr,
    /// Option 50 and option 54, for a SELECTING REQUEST.
    pub(crate) selecting: Option<(Ipv4Addr, Ipv4Addr)>,
    /// Further options, already encoded (code, length, value).
    pub(crate) extra: &'a [u8],
}

/// Lays `r` out into `buf` (cleared first), padded to 300 octets as clients do.
pub(crate) fn build(buf: &mut Vec<u8>, r: &Request<'_>) {
    buf.clear();
    buf.resize(OPTIONS, 0);
    buf[OP] = 1;
    buf[1] = 1; // Ethernet
    buf[2] = 6;
    buf[3] = 1; // hops: one relay
    buf[XID..XID + 4].copy_from_slice(&r.xid.to_be_bytes());
    buf[CIADDR..CIADDR + 4].copy_from_slice(&r.ciaddr.octets());
    buf[GIADDR..GIADDR + 4].copy_from_slice(&r.relay.octets());
    buf[CHADDR..CHADDR + 6].copy_from_slice(&r.mac);
    buf[236..240].copy_from_slice(&[99, 130, 83, 99]);
    buf.extend_from_slice(&[53, 1, r.kind]);
    if let Some((ip, server)) = r.selecting {
        buf.extend_from_slice(&[50, 4]);
        buf.extend_from_slice(&ip.octets());
        buf.extend_from_slice(&[54, 4]);
        buf.extend_from_slice(&server.octets());
    }
    buf.extend_from_slice(r.extra);
    buf.push(255);
    if buf.len() < 300 {
        buf.resize(300, 0);
    }
}

/// The fields of a BOOTREPLY a generator checks.
pub(crate) struct Reply {
    pub(crate) xid: u32,
    pub(crate) kind: u8,
    pub(crate) yiaddr: Ipv4Addr,
    pub(crate) server_id: Option<Ipv4Addr>,
}

/// Reads a BOOTREPLY; `None` for anything else or anything cut short.
pub(crate) fn parse(b: &[u8]) -> Option<Reply> {
    if b.len() < OPTIONS + 3 || b[OP] != 2 || b[236..240] != [99, 130, 83, 99] {
        return None;
    }
    let xid = u32::from_be_bytes(b[XID..XID + 4].try_into().ok()?);
    let yiaddr = Ipv4Addr::from(<[u8; 4]>::try_from(&b[YIADDR..YIADDR + 4]).ok()?);
    let (mut kind, mut server_id) = (None, None);
    let mut i = OPTIONS;
    while i < b.len() {
        match b[i] {
            0 => i += 1,
            255 => break,
            code => {
                let len = *b.get(i + 1)? as usize;
                let v = b.get(i + 2..i + 2 + len)?;
                match (code, len) {
                    (53, 1) => kind = Some(v[0]),
                    (54, 4) => server_id = Some(Ipv4Addr::new(v[0], v[1], v[2], v[3])),
                    _ => {}
                }
                i += 2 + len;
            }
        }
    }
    Some(Reply {
        xid,
        kind: kind?,
        yiaddr,
        server_id,
    })
}
