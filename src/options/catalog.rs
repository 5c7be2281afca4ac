//! The options shardboot knows by name, with the type their value is written in. Names
//! are dnsmasq's (`option:<name>`), so an operator's `dhcp-option` lines read the same,
//! or Kea's in dnsmasq's style for the codes dnsmasq has no name for; codes and types
//! are those of RFC 2132 unless noted. Every RFC 2132 code is here or `reserved`.

/// How an option's value is written and encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One IPv4 address.
    Ip,
    /// One or more IPv4 addresses.
    IpList,
    /// Pairs of addresses, destination then router (option 33).
    IpPairs,
    /// Text, sent as its bytes (no NUL, RFC 2132 §2).
    Text,
    /// An unsigned octet.
    U8,
    /// An unsigned 16-bit integer, network order.
    U16,
    /// One or more unsigned 16-bit integers, network order (option 25).
    U16List,
    /// An unsigned 32-bit integer, network order.
    U32,
    /// A signed 32-bit integer, network order (option 2).
    I32,
    /// One octet, 0 or 1 (RFC 2132's flags).
    Bool,
    /// Octets written in hex (`01:02:ab`).
    Hex,
    /// DNS names, RFC 1035 §3.1 labels, not compressed (option 119, RFC 3397).
    Domains,
    /// RFC 3442 classless routes: `<prefix>/<len>,<router>` pairs (option 121).
    Routes,
    /// One IPv6 address, written `[2001:db8::1]` as dnsmasq does (or bare).
    Ip6,
    /// One or more IPv6 addresses.
    Ip6List,
    /// NTP servers (DHCPv6 option 56, RFC 5908 §4): each address a server address
    /// suboption (1), a multicast address a multicast suboption (2), each name an FQDN
    /// suboption (3).
    NtpServers,
    /// Texts each preceded by its 16-bit length (DHCPv6 option 60, RFC 5970 §3.2).
    Params16,
}

/// (code, dnsmasq name, kind).
const CATALOG: &[(u8, &str, Kind)] = &[
    (1, "netmask", Kind::Ip),
    (2, "time-offset", Kind::I32),
    (3, "router", Kind::IpList),
    (4, "time-server", Kind::IpList),
    (5, "name-server", Kind::IpList),
    (6, "dns-server", Kind::IpList),
    (7, "log-server", Kind::IpList),
    (8, "cookie-server", Kind::IpList),
    (9, "lpr-server", Kind::IpList),
    (10, "impress-server", Kind::IpList),
    (11, "resource-location", Kind::IpList),
    (12, "hostname", Kind::Text),
    (13, "boot-file-size", Kind::U16),
    (14, "merit-dump", Kind::Text),
    (15, "domain-name", Kind::Text),
    (16, "swap-server", Kind::Ip),
    (17, "root-path", Kind::Text),
    (18, "extension-path", Kind::Text),
    (19, "ip-forward-enable", Kind::Bool),
    (20, "non-local-source-routing", Kind::Bool),
    (21, "policy-filter", Kind::IpPairs),
    (22, "max-datagram-reassembly", Kind::U16),
    (23, "default-ttl", Kind::U8),
    (24, "path-mtu-aging-timeout", Kind::U32),
    (25, "path-mtu-plateau-table", Kind::U16List),
    (26, "mtu", Kind::U16),
    (27, "all-subnets-local", Kind::Bool),
    (28, "broadcast", Kind::Ip),
    (29, "mask-discovery", Kind::Bool),
    (30, "mask-supplier", Kind::Bool),
    (31, "router-discovery", Kind::Bool),
    (32, "router-solicitation", Kind::Ip),
    (33, "static-route", Kind::IpPairs),
    (34, "trailer-encapsulation", Kind::Bool),
    (35, "arp-timeout", Kind::U32),
    (36, "ethernet-encap", Kind::Bool),
    (37, "tcp-ttl", Kind::U8),
    (38, "tcp-keepalive", Kind::U32),
    (39, "tcp-keepalive-garbage", Kind::Bool),
    (40, "nis-domain", Kind::Text),
    (41, "nis-server", Kind::IpList),
    (42, "ntp-server", Kind::IpList),
    // Vendor-specific information: octets only the vendor's clients read.
    (43, "vendor-encap", Kind::Hex),
    (44, "netbios-ns", Kind::IpList),
    (45, "netbios-dd", Kind::IpList),
    (46, "netbios-nodetype", Kind::U8),
    (47, "netbios-scope", Kind::Text),
    (48, "x-windows-fs", Kind::IpList),
    (49, "x-windows-dm", Kind::IpList),
    // RFC 2132 §9.9: an error text for the client.
    (56, "message", Kind::Text),
    (60, "vendor-class", Kind::Text),
    (64, "nis+-domain", Kind::Text),
    (65, "nis+-server", Kind::IpList),
    (66, "tftp-server", Kind::Text),
    (67, "bootfile-name", Kind::Text),
    (68, "mobile-ip-home", Kind::IpList),
    (69, "smtp-server", Kind::IpList),
    (70, "pop3-server", Kind::IpList),
    (71, "nntp-server", Kind::IpList),
    (72, "www-server", Kind::IpList),
    (73, "finger-server", Kind::IpList),
    (74, "irc-server", Kind::IpList),
    (75, "streettalk-server", Kind::IpList),
    (76, "streettalk-da-server", Kind::IpList),
    (119, "domain-search", Kind::Domains),
    (121, "classless-static-route", Kind::Routes),
    // RFC 5859: TFTP server addresses (Ironic's dnsmasq provider writes it).
    (150, "tftp-server-address", Kind::IpList),
    // dnsmasq's pseudo-option: not sent, it sets the header's next-server (siaddr).
    (255, "server-ip-address", Kind::Ip),
];

/// The option shardboot sets itself, which configuration may not replace, and why.
pub fn reserved(code: u8) -> Option<&'static str> {
    Some(match code {
        0 => "is the pad option",
        50 | 51 | 58 | 59 => {
            "is set from the lease (subnet.lease_time, renewal_time, rebinding_time)"
        }
        52 => "is set when the reply needs the file and sname fields for options",
        53 | 54 => "is set by shardboot on every reply",
        55 | 57 | 61 => "is sent by clients, not servers",
        82 => "is the relay agent's, echoed unchanged",
        _ => return None,
    })
}

/// The code and kind of `name` (`router`, or a number such as `150`).
pub fn by_name(name: &str) -> Option<(u8, Kind)> {
    CATALOG
        .iter()
        .find(|(_, n, _)| *n == name)
        .map(|&(c, _, k)| (c, k))
}

/// The kind of `code`, if shardboot knows it by name.
pub fn kind_of(code: u8) -> Option<Kind> {
    CATALOG
        .iter()
        .find(|(c, ..)| *c == code)
        .map(|&(_, _, k)| k)
}

/// dnsmasq's name for `code`, for messages.
pub fn name_of(code: u8) -> Option<&'static str> {
    CATALOG
        .iter()
        .find(|(c, ..)| *c == code)
        .map(|&(_, n, _)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_are_unique() {
        for (i, (c, n, _)) in CATALOG.iter().enumerate() {
            for (c2, n2, _) in &CATALOG[..i] {
                assert!(c != c2 && n != n2, "{c} {n} repeats {c2} {n2}");
            }
            assert_eq!(by_name(n).map(|x| x.0), Some(*c));
            assert_eq!(name_of(*c), Some(*n));
            assert!(reserved(*c).is_none(), "{n} is both named and reserved");
        }
    }

    #[test]
    fn every_rfc_2132_code_has_a_type_or_is_shardboots_own() {
        // RFC 2132 defines 1 - 76 but 62 and 63 (RFC 2242, NetWare/IP).
        for code in (1..=76).filter(|c| ![62, 63].contains(c)) {
            assert!(
                kind_of(code).is_some() != reserved(code).is_some(),
                "option {code}"
            );
        }
        assert_eq!(kind_of(29), Some(Kind::Bool));
        assert_eq!(kind_of(30), Some(Kind::Bool));
        assert_eq!(kind_of(39), Some(Kind::Bool));
        assert_eq!(kind_of(25), Some(Kind::U16List));
    }
}
