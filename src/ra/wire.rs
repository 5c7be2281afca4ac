//! The two Neighbor Discovery messages the responder reads and the one it writes
//! (RFC 4861 §4.1 Router Solicitation, §4.2 Router Advertisement), as the ICMPv6 payload a
//! raw socket delivers (no IPv6 header). Pure: no I/O.

/// ICMPv6 type of a Router Solicitation (RFC 4861 §4.1).
pub const ROUTER_SOLICITATION: u8 = 133;
/// ICMPv6 type of a Router Advertisement (RFC 4861 §4.2).
pub const ROUTER_ADVERTISEMENT: u8 = 134;
/// Option type: Source Link-Layer Address (RFC 4861 §4.6.1).
const SOURCE_LINK_LAYER_ADDRESS: u8 = 1;
/// Option type: Prefix Information (RFC 4861 §4.6.2).
const PREFIX_INFORMATION: u8 = 3;
/// Fixed part of a Router Solicitation: type, code, checksum, reserved.
const SOLICITATION_LEN: usize = 8;
/// Fixed part of a Router Advertisement: type, code, checksum, hop limit, flags,
/// router lifetime, reachable time, retrans timer.
const ADVERTISEMENT_LEN: usize = 16;
/// The "Managed address configuration" flag (RFC 4861 §4.2).
const FLAG_MANAGED: u8 = 0x80;
/// The "Other configuration" flag (RFC 4861 §4.2).
const FLAG_OTHER: u8 = 0x40;

/// A Neighbor Discovery message the responder cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdMessage {
    /// A host asks for routers.
    Solicitation {
        /// It carries a Source Link-Layer Address option.
        has_source_link_layer: bool,
    },
    /// A router (or another responder) advertises.
    Advertisement(Advertised),
}

/// What a Router Advertisement announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advertised {
    /// Seconds the sender is a default router for; 0: not a default router.
    pub router_lifetime: u16,
    /// M flag: addresses from DHCPv6.
    pub managed: bool,
    /// O flag: other configuration from DHCPv6.
    pub other: bool,
    /// Prefix Information options carried.
    pub prefixes: usize,
}

impl Advertised {
    /// Whether the segment has real IPv6 service: the sender routes, hands out
    /// prefixes, or points at DHCPv6. A "no router here" advertisement (another
    /// shardboot member's) is none of these.
    ///
    /// With router lifetime 0 and M set, the sender only points hosts at DHCPv6 (a
    /// shardboot member serving `[[subnet6]]`, or dnsmasq's `enable-ra` on a managed
    /// range): what this responder says itself, so it is not a router to stand down
    /// for.
    pub fn offers_ipv6_service(&self) -> bool {
        let dhcpv6_pointer = self.router_lifetime == 0 && self.managed;
        self.router_lifetime > 0 || (!dhcpv6_pointer && (self.other || self.prefixes > 0))
    }
}

/// Why an ICMPv6 message was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Not a Router Solicitation or Advertisement (raw sockets see all ICMPv6 when the
    /// kernel filter is unavailable).
    #[error("ICMPv6 type {0} is not router discovery")]
    OtherType(u8),
    /// Shorter than the message's fixed part (RFC 4861 §6.1.1, §6.1.2).
    #[error("ICMPv6 type {kind}: {len} bytes is too short")]
    Short {
        /// ICMPv6 type.
        kind: u8,
        /// Bytes received.
        len: usize,
    },
    /// ICMP code is not 0 (RFC 4861 §6.1.1, §6.1.2).
    #[error("ICMP code {0} (must be 0)")]
    Code(u8),
    /// An option with length 0 or running past the end (RFC 4861 §4.6).
    #[error("malformed option at byte {0}")]
    Option(usize),
}

/// Parses an ICMPv6 message as delivered by a raw socket.
pub fn parse(icmp: &[u8]) -> Result<NdMessage, WireError> {
    let kind = *icmp.first().ok_or(WireError::Short { kind: 0, len: 0 })?;
    let fixed = match kind {
        ROUTER_SOLICITATION => SOLICITATION_LEN,
        ROUTER_ADVERTISEMENT => ADVERTISEMENT_LEN,
        other => return Err(WireError::OtherType(other)),
    };
    if icmp.len() < fixed {
        return Err(WireError::Short {
            kind,
            len: icmp.len(),
        });
    }
    if icmp[1] != 0 {
        return Err(WireError::Code(icmp[1]));
    }
    let options = option_types(icmp, fixed)?;
    Ok(if kind == ROUTER_SOLICITATION {
        NdMessage::Solicitation {
            has_source_link_layer: options.contains(&SOURCE_LINK_LAYER_ADDRESS),
        }
    } else {
        NdMessage::Advertisement(Advertised {
            router_lifetime: u16::from_be_bytes([icmp[6], icmp[7]]),
            managed: icmp[5] & FLAG_MANAGED != 0,
            other: icmp[5] & FLAG_OTHER != 0,
            prefixes: options.iter().filter(|&&t| t == PREFIX_INFORMATION).count(),
        })
    })
}

/// The type of every option after `start`; each must have a non-zero length in units
/// of 8 bytes that stays inside the message (RFC 4861 §4.6).
fn option_types(icmp: &[u8], start: usize) -> Result<Vec<u8>, WireError> {
    let mut types = Vec::new();
    let mut at = start;
    while at < icmp.len() {
        let len = icmp.get(at + 1).map_or(0, |&l| usize::from(l) * 8);
        if len == 0 || at + len > icmp.len() {
            return Err(WireError::Option(at));
        }
        types.push(icmp[at]);
        at += len;
    }
    Ok(types)
}

/// A Router Advertisement that says "no router here" (RFC 4861 §4.2): router lifetime
/// 0 (not a default router, §6.3.4), M and O clear, no prefixes, hop limit, reachable
/// time and retrans timer unspecified (0). A host that gets it has finished router
/// discovery with nothing to configure but its link-local address. The checksum is left
/// 0: the kernel computes it for ICMPv6 raw sockets (RFC 3542 §3.1).
pub fn no_router_advertisement() -> [u8; ADVERTISEMENT_LEN] {
    let mut ra = [0u8; ADVERTISEMENT_LEN];
    ra[0] = ROUTER_ADVERTISEMENT;
    ra
}

/// Prefix Information option length, in units of 8 octets (RFC 4861 §4.6.2).
const PREFIX_INFORMATION_UNITS: u8 = 4;
/// The on-link (L) flag of a Prefix Information option.
const PREFIX_ON_LINK: u8 = 0x80;

/// A Router Advertisement for a managed provisioning link (what ironic-image's dnsmasq
/// sends with `enable-ra` on a DHCPv6 range): router lifetime 0 (still no default
/// router), M and O set so firmware and hosts ask DHCPv6 for an address and the rest,
/// and each served prefix on-link (L) but not for autoconfiguration (A clear, RFC 4861
/// §4.6.2), so hosts reach the boot servers on the link directly. `valid` is the
/// prefixes' valid and preferred lifetime in seconds. Checksum left to the kernel.
pub fn managed_advertisement(prefixes: &[ipnet::Ipv6Net], valid: u32) -> Vec<u8> {
    let mut ra = vec![0u8; ADVERTISEMENT_LEN];
    ra[0] = ROUTER_ADVERTISEMENT;
    ra[5] = FLAG_MANAGED | FLAG_OTHER;
    for p in prefixes {
        ra.extend_from_slice(&[
            PREFIX_INFORMATION,
            PREFIX_INFORMATION_UNITS,
            p.prefix_len(),
            PREFIX_ON_LINK,
        ]);
        ra.extend_from_slice(&valid.to_be_bytes());
        ra.extend_from_slice(&valid.to_be_bytes());
        ra.extend_from_slice(&[0; 4]);
        ra.extend_from_slice(&p.network().octets());
    }
    ra
}

/// A bare Router Solicitation (RFC 4861 §4.1): the responder's own question on start,
/// so that routers on the segment reveal themselves before it answers anyone.
pub fn router_solicitation() -> [u8; SOLICITATION_LEN] {
    let mut rs = [0u8; SOLICITATION_LEN];
    rs[0] = ROUTER_SOLICITATION;
    rs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Router Solicitation shaped like the one iPXE sends: type 133, code 0,
    /// reserved, a Source Link-Layer Address option for 52:54:00:de:00:01.
    const IPXE_SOLICITATION: [u8; 16] = [
        133, 0, 0x3a, 0x4c, 0, 0, 0, 0, 1, 1, 0x52, 0x54, 0x00, 0xde, 0x00, 0x01,
    ];

    fn advertisement(flags: u8, lifetime: u16, options: &[u8]) -> Vec<u8> {
        let mut ra = vec![134, 0, 0, 0, 64, flags];
        ra.extend_from_slice(&lifetime.to_be_bytes());
        ra.extend_from_slice(&[0; 8]);
        ra.extend_from_slice(options);
        ra
    }

    #[test]
    fn reads_a_solicitation_and_its_source_link_layer_option() {
        assert_eq!(
            parse(&IPXE_SOLICITATION),
            Ok(NdMessage::Solicitation {
                has_source_link_layer: true
            })
        );
        assert_eq!(
            parse(&IPXE_SOLICITATION[..8]),
            Ok(NdMessage::Solicitation {
                has_source_link_layer: false
            })
        );
    }

    #[test]
    fn tells_a_real_router_from_a_no_router_advertisement() {
        let prefix = {
            let mut p = vec![3, 4];
            p.extend_from_slice(&[0; 30]);
            p
        };
        let cases: [(Vec<u8>, bool); 6] = [
            (advertisement(0, 1800, &[]), true),
            // Only "ask DHCPv6", routing nothing: a member serving [[subnet6]].
            (advertisement(FLAG_MANAGED, 0, &[]), false),
            (advertisement(FLAG_MANAGED, 1800, &[]), true),
            (advertisement(FLAG_OTHER, 0, &[]), true),
            (advertisement(0, 0, &prefix), true),
            (no_router_advertisement().to_vec(), false),
        ];
        for (bytes, service) in cases {
            let Ok(NdMessage::Advertisement(a)) = parse(&bytes) else {
                panic!("{bytes:?} did not parse as an advertisement");
            };
            assert_eq!(a.offers_ipv6_service(), service, "{a:?}");
        }
    }

    #[test]
    fn rejects_what_rfc_4861_says_to_discard() {
        assert_eq!(parse(&[]), Err(WireError::Short { kind: 0, len: 0 }));
        assert_eq!(parse(&[128, 0, 0, 0]), Err(WireError::OtherType(128)));
        assert_eq!(
            parse(&IPXE_SOLICITATION[..7]),
            Err(WireError::Short { kind: 133, len: 7 })
        );
        assert_eq!(
            parse(&advertisement(0, 0, &[])[..15]),
            Err(WireError::Short { kind: 134, len: 15 })
        );
        let mut coded = IPXE_SOLICITATION;
        coded[1] = 1;
        assert_eq!(parse(&coded), Err(WireError::Code(1)));
        // An option of length 0 would loop forever; one past the end reads past it.
        let mut zero = IPXE_SOLICITATION;
        zero[9] = 0;
        assert_eq!(parse(&zero), Err(WireError::Option(8)));
        let mut long = IPXE_SOLICITATION;
        long[9] = 2;
        assert_eq!(parse(&long), Err(WireError::Option(8)));
        assert_eq!(parse(&IPXE_SOLICITATION[..9]), Err(WireError::Option(8)));
    }

    #[test]
    fn its_own_solicitation_parses() {
        assert_eq!(
            parse(&router_solicitation()),
            Ok(NdMessage::Solicitation {
                has_source_link_layer: false
            })
        );
    }

    #[test]
    fn the_answer_is_a_bare_advertisement_that_parses_as_no_service() {
        let ra = no_router_advertisement();
        assert_eq!(ra.len(), 16);
        assert_eq!(
            parse(&ra),
            Ok(NdMessage::Advertisement(Advertised {
                router_lifetime: 0,
                managed: false,
                other: false,
                prefixes: 0
            }))
        );
    }

    #[test]
    fn a_managed_advertisement_points_at_dhcpv6_without_routing_and_is_not_a_router() {
        let net: ipnet::Ipv6Net = "fd00:1::/64".parse().unwrap();
        let ra = managed_advertisement(&[net], 3600);
        assert_eq!(ra.len(), 16 + 32);
        let NdMessage::Advertisement(a) = parse(&ra).unwrap() else {
            panic!("not an RA")
        };
        assert_eq!(
            (a.router_lifetime, a.managed, a.other, a.prefixes),
            (0, true, true, 1)
        );
        // Our own kind, from another member: nothing to stand down for.
        assert!(!a.offers_ipv6_service());
        // On-link, not autonomous; the prefix as configured.
        assert_eq!(&ra[16..20], &[3, 4, 64, 0x80]);
        assert_eq!(&ra[32..48], &net.network().octets());
        // A router that routes, or hands out prefixes for SLAAC without M, is service.
        let slaac = advertisement(
            0,
            0,
            &[
                3, 4, 64, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                0, 0, 0, 0, 0, 0,
            ],
        );
        assert!(
            matches!(parse(&slaac).unwrap(), NdMessage::Advertisement(a) if a.offers_ipv6_service())
        );
        let router = advertisement(0x80, 1800, &[]);
        assert!(
            matches!(parse(&router).unwrap(), NdMessage::Advertisement(a) if a.offers_ipv6_service())
        );
    }
}
