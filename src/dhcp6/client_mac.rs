//! The MAC address of a DHCPv6 client. DHCPv6 has no `chaddr`: a client is its DUID
//! (RFC 8415 §11), which need not name the NIC it boots from. Everything shardboot
//! decides per machine (the owning conductor, host policies, reservations, Ironic's
//! hostsdir) is keyed by the NIC's MAC, so it is found, in this order:
//!
//! 1. **Option 79** (RFC 6939, client link-layer address), added by the relay agent
//!    nearest the client: what that relay saw on the wire. Only hardware type 1
//!    (Ethernet) with six octets is taken.
//! 2. **The link-local source address**, for a client on the segment itself, when it is
//!    a modified EUI-64 (RFC 4291 §2.5.1 and appendix A: `ff:fe` in the middle of the
//!    interface identifier, universal/local bit flipped). Firmware (OVMF, iPXE) builds
//!    its link-local address that way from the NIC it boots from.
//! 3. **A DUID-LLT or DUID-LL** (RFC 8415 §11.2, §11.4) with Ethernet and six octets.
//!    Last, because an operating system may make it from another interface and keep it
//!    across NIC changes; firmware commonly sends a DUID-UUID (§11.5) instead, which
//!    names no MAC at all.
//!
//! When none of them gives one (a DUID-UUID or DUID-EN from a client that is relayed
//! without option 79 and has a privacy address), the client has no MAC: it is served as
//! an unknown machine by its DUID alone.

use std::net::Ipv6Addr;

use crate::mac::MacAddr;

/// Where a client's MAC was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacSource {
    /// The relay agent's option 79.
    RelayOption79,
    /// The client's modified EUI-64 link-local source address.
    LinkLocal,
    /// Its DUID-LLT or DUID-LL.
    Duid,
}

impl MacSource {
    /// Stable label for logs and the timeline.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RelayOption79 => "option_79",
            Self::LinkLocal => "link_local",
            Self::Duid => "duid",
        }
    }
}

/// Hardware type 1, Ethernet (IANA ARP parameters, as RFC 6939 and RFC 8415 use them).
const ETHERNET: u16 = 1;

/// What a v6 client offers towards its MAC: the innermost relay's option 79 value, the
/// packet's source address (for a client on the segment), and its DUID.
#[derive(Debug, Clone, Copy, Default)]
pub struct Clues<'a> {
    /// Option 79's value from the relay nearest the client (the innermost
    /// Relay-forward).
    pub option_79: Option<&'a [u8]>,
    /// The source address of a message the client sent on the segment itself.
    pub source: Option<Ipv6Addr>,
    /// Option 1, the client's DUID.
    pub duid: Option<&'a [u8]>,
}

/// The client's MAC and where it came from, in the order of the module's rule.
pub fn client_mac(clues: &Clues<'_>) -> Option<(MacAddr, MacSource)> {
    clues
        .option_79
        .and_then(from_option_79)
        .map(|m| (m, MacSource::RelayOption79))
        .or_else(|| {
            clues
                .source
                .and_then(crate::mac::from_link_local)
                .map(|m| (m, MacSource::LinkLocal))
        })
        .or_else(|| clues.duid.and_then(from_duid).map(|m| (m, MacSource::Duid)))
}

/// RFC 6939 §4: link-layer type (2 octets), then the address.
fn from_option_79(value: &[u8]) -> Option<MacAddr> {
    let (htype, addr) = value.split_at_checked(2)?;
    ethernet(htype, addr)
}

fn ethernet(htype: &[u8], addr: &[u8]) -> Option<MacAddr> {
    if u16::from_be_bytes(htype.try_into().ok()?) != ETHERNET {
        return None;
    }
    let mac: [u8; 6] = addr.try_into().ok()?;
    Some(MacAddr(mac))
}

/// DUID-LLT (type 1: hardware type, time, address) or DUID-LL (type 3: hardware type,
/// address), RFC 8415 §11.2 and §11.4.
fn from_duid(duid: &[u8]) -> Option<MacAddr> {
    let (kind, rest) = duid.split_at_checked(2)?;
    match u16::from_be_bytes(kind.try_into().ok()?) {
        1 => {
            let (htype, rest) = rest.split_at_checked(2)?;
            let (_time, addr) = rest.split_at_checked(4)?;
            ethernet(htype, addr)
        }
        3 => {
            let (htype, addr) = rest.split_at_checked(2)?;
            ethernet(htype, addr)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: MacAddr = MacAddr([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
    const OTHER: MacAddr = MacAddr([0x52, 0x54, 0x00, 0xaa, 0xbb, 0xcc]);

    fn option_79(mac: MacAddr) -> Vec<u8> {
        [&[0, 1][..], &mac.0].concat()
    }

    fn duid_ll(mac: MacAddr) -> Vec<u8> {
        [&[0, 3, 0, 1][..], &mac.0].concat()
    }

    fn duid_llt(mac: MacAddr) -> Vec<u8> {
        [&[0, 1, 0, 1, 0x2f, 0x1e, 0x0a, 0x55][..], &mac.0].concat()
    }

    /// fe80::5054:ff:fe12:3456, as firmware forms it from 52:54:00:12:34:56.
    fn eui64(mac: MacAddr) -> Ipv6Addr {
        let m = mac.0;
        Ipv6Addr::from([
            0xfe,
            0x80,
            0,
            0,
            0,
            0,
            0,
            0,
            m[0] ^ 2,
            m[1],
            m[2],
            0xff,
            0xfe,
            m[3],
            m[4],
            m[5],
        ])
    }

    #[test]
    fn each_clue_alone_gives_the_mac() {
        let o79 = option_79(MAC);
        let c = Clues {
            option_79: Some(&o79),
            ..Clues::default()
        };
        assert_eq!(client_mac(&c), Some((MAC, MacSource::RelayOption79)));
        let c = Clues {
            source: Some(eui64(MAC)),
            ..Clues::default()
        };
        assert_eq!(client_mac(&c), Some((MAC, MacSource::LinkLocal)));
        for duid in [duid_ll(MAC), duid_llt(MAC)] {
            let c = Clues {
                duid: Some(&duid),
                ..Clues::default()
            };
            assert_eq!(client_mac(&c), Some((MAC, MacSource::Duid)));
        }
    }

    #[test]
    fn what_the_wire_shows_wins_over_the_duid() {
        // An OS whose DUID came from another NIC, booting from this one.
        let o79 = option_79(MAC);
        let duid = duid_llt(OTHER);
        let relayed = Clues {
            option_79: Some(&o79),
            source: None,
            duid: Some(&duid),
        };
        assert_eq!(client_mac(&relayed), Some((MAC, MacSource::RelayOption79)));
        let direct = Clues {
            option_79: None,
            source: Some(eui64(MAC)),
            duid: Some(&duid),
        };
        assert_eq!(client_mac(&direct), Some((MAC, MacSource::LinkLocal)));
    }

    #[test]
    fn no_mac_from_a_uuid_duid_a_privacy_address_or_another_hardware_type() {
        // DUID-UUID (type 4), as OVMF and iPXE send when the machine has a UUID.
        let uuid = [&[0, 4][..], &[0x11; 16]].concat();
        // A link-local address with a random identifier (RFC 8981 / RFC 7217).
        let random = "fe80::1c2d:3e4f:5a6b:7c8d".parse().unwrap();
        let c = Clues {
            option_79: None,
            source: Some(random),
            duid: Some(&uuid),
        };
        assert_eq!(client_mac(&c), None);
        // A global address, even with ff:fe in it, is not the client's link-local.
        let global = Ipv6Addr::from([
            0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56,
        ]);
        assert_eq!(crate::mac::from_link_local(global), None);
        // Option 79 and DUIDs of another hardware type (6, IEEE 802), or cut short.
        assert_eq!(from_option_79(&[0, 6, 1, 2, 3, 4, 5, 6]), None);
        assert_eq!(from_option_79(&[0, 1, 1, 2, 3]), None);
        assert_eq!(from_option_79(&[0]), None);
        assert_eq!(from_duid(&[0, 3, 0, 6, 1, 2, 3, 4, 5, 6]), None);
        assert_eq!(from_duid(&[0, 1, 0, 1, 0, 0]), None);
        assert_eq!(from_duid(&[]), None);
    }

    #[test]
    fn never_panics_on_any_short_input() {
        let bytes: Vec<u8> = (0..40).collect();
        for n in 0..bytes.len() {
            let _ = from_option_79(&bytes[..n]);
            let _ = from_duid(&bytes[..n]);
        }
    }
}
