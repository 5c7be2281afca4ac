//! The DHCPv6 options shardboot knows by name (`option6:<name>`), with the type their
//! value is written in. Names are dnsmasq's where it has one, so an operator's
//! `dhcp-option=option6:…` lines read the same; codes are IANA's "DHCPv6 Option Codes"
//! as RFC 8415 §21 and the RFCs cited define them. Any other code takes raw octets.

use super::catalog::Kind;

/// (code, name, kind).
const CATALOG6: &[(u16, &str, Kind)] = &[
    // RFC 8415 §21.17: enterprise number, then the vendor's options, written in hex.
    (17, "vendor-opts", Kind::Hex),
    // RFC 3319.
    (21, "sip-server-domain", Kind::Domains),
    (22, "sip-server", Kind::Ip6List),
    // RFC 3646.
    (23, "dns-server", Kind::Ip6List),
    (24, "domain-search", Kind::Domains),
    // RFC 3898.
    (27, "nis-server", Kind::Ip6List),
    (28, "nis+-server", Kind::Ip6List),
    (29, "nis-domain", Kind::Domains),
    (30, "nis+-domain", Kind::Domains),
    // RFC 4075.
    (31, "sntp-server", Kind::Ip6List),
    // RFC 8415 §21.23: seconds until an Information-request client asks again.
    (32, "information-refresh-time", Kind::U32),
    // RFC 5908.
    (56, "ntp-server", Kind::NtpServers),
    // RFC 5970 §3.1, §3.2: network boot.
    (59, "bootfile-url", Kind::Text),
    (60, "bootfile-param", Kind::Params16),
    // RFC 6334: the DS-Lite tunnel end's name.
    (64, "aftr-name", Kind::Domains),
    // RFC 8415 §21.24, §21.25: the clients' longest retransmission intervals.
    (82, "sol-max-rt", Kind::U32),
    (83, "inf-max-rt", Kind::U32),
];

/// The DHCPv6 options shardboot sets itself or that only clients and relays send,
/// which configuration may not replace, and why.
pub fn reserved6(code: u16) -> Option<&'static str> {
    Some(match code {
        0 => "is not an option code (RFC 8415 §21.1 reserves it)",
        1 => "is the client's own identifier, echoed unchanged",
        2 => "is the server DUID: set it with dhcp6.server_duid",
        3 | 4 | 5 | 25 | 26 => {
            "is set from the binding (subnet6 lease_time, preferred_time, renewal_time, rebinding_time)"
        }
        6 | 8 | 14 | 15 | 20 => "is sent by clients, not servers",
        7 => "is set by shardboot: 255 from the member responsible for the machine (RFC 8415 §21.8)",
        9 | 18 | 37 | 38 | 79 => "is the relay agent's",
        11 => "is authentication, which shardboot does not do",
        12 => "would ask clients to unicast, which shardboot answers with UseMulticast",
        13 => "is set by shardboot to report the outcome",
        19 => "is reconfiguration, which shardboot does not send",
        39 => "is set from the [[host]] hostname",
        _ => return None,
    })
}

/// The code and kind of `name`.
pub fn by_name6(name: &str) -> Option<(u16, Kind)> {
    CATALOG6
        .iter()
        .find(|(_, n, _)| n.eq_ignore_ascii_case(name))
        .map(|&(c, _, k)| (c, k))
}

/// The kind of `code`, if shardboot knows it by name.
pub fn kind_of6(code: u16) -> Option<Kind> {
    CATALOG6
        .iter()
        .find(|(c, ..)| *c == code)
        .map(|&(_, _, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_are_unique_and_never_reserved() {
        for (i, (c, n, _)) in CATALOG6.iter().enumerate() {
            for (c2, n2, _) in &CATALOG6[..i] {
                assert!(c != c2 && n != n2, "{c} {n} repeats {c2} {n2}");
            }
            assert_eq!(by_name6(n).map(|x| x.0), Some(*c));
            assert_eq!(kind_of6(*c), by_name6(n).map(|x| x.1));
            assert!(reserved6(*c).is_none(), "{n} is both named and reserved");
        }
    }

    #[test]
    fn what_the_protocol_sets_is_reserved() {
        // RFC 8415 §21: identifiers, IAs, ORO, status, relay options.
        for code in [1, 2, 3, 5, 6, 9, 13, 14, 18, 25, 26] {
            assert!(reserved6(code).is_some(), "option6 {code}");
        }
        assert_eq!(by_name6("ntp-server"), Some((56, Kind::NtpServers)));
        assert_eq!(kind_of6(23), Some(Kind::Ip6List));
    }
}
