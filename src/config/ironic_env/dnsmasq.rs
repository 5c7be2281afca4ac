//! The dnsmasq value syntax ironic-image's variables carry: one `dhcp-range` or
//! `dhcp-host` value per entry (`dhcp-option` values are the option engine's,
//! `options::dnsmasq`), and lease times. Parsing only; what
//! an entry means for shardboot is decided in the parent module. Each error is a reason
//! the caller puts after the variable's name and the entry.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::mac::MacAddr;

/// One `dhcp-range` value: `[set:<tag>,]<begin>,<end>[,<netmask>[,<broadcast>]][,<lease>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RangeEntry {
    /// The tag `set:` gives clients of this range.
    pub tag: Option<String>,
    pub begin: Ipv4Addr,
    pub end: Ipv4Addr,
    /// Prefix length from the netmask; `None`: the interface's (dnsmasq's rule).
    pub prefix: Option<u8>,
    /// Lease time in seconds.
    pub lease_time: Option<u32>,
}

/// One IPv6 `dhcp-range` value: `[set:<tag>,]<begin>,<end>[,<prefix-len>][,<lease>]`
/// (dnsmasq: the prefix length takes the place of the netmask, 64 when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Range6Entry {
    /// The tag `set:` gives clients of this range.
    pub tag: Option<String>,
    pub begin: Ipv6Addr,
    pub end: Ipv6Addr,
    pub prefix: u8,
    pub lease_time: Option<u32>,
}

/// Whether a `dhcp-range` value is an IPv6 one (its first address has colons).
pub(super) fn is_v6_range(entry: &str) -> bool {
    entry
        .split(',')
        .map(str::trim)
        .find(|f| !f.starts_with("set:"))
        .is_some_and(|f| f.contains(':'))
}

/// Parses one IPv6 `dhcp-range` value. The modes that make dnsmasq hand out no
/// addresses itself (`ra-only`, `slaac`, `ra-stateless`, `constructor:`) are refused:
/// shardboot's DHCPv6 is stateful.
pub(super) fn range6(entry: &str) -> Result<Range6Entry, String> {
    let (tag, mut fields) = range_fields(entry)?;
    if let Some(f) = fields.iter().find(|f| {
        f.starts_with("constructor:") || f.starts_with("ra-") || **f == "slaac" || **f == "static"
    }) {
        return Err(format!("{f:?}: only stateful DHCPv6 ranges are served"));
    }
    let addr = |f: Option<&&str>, what: &str| -> Result<Ipv6Addr, String> {
        let f = f.ok_or_else(|| format!("the {what} address is missing"))?;
        f.parse()
            .map_err(|_| format!("{f:?} is not an IPv6 {what} address"))
    };
    let begin = addr(fields.first(), "start")?;
    let end = addr(fields.get(1), "end")?;
    fields.drain(..2);
    let mut rest = fields.into_iter().peekable();
    let mut prefix = 64;
    if let Some(p) = rest.next_if(|f| f.parse::<u8>().is_ok_and(|p| p <= 128) && !f.is_empty()) {
        prefix = p.parse().expect("checked above");
        if prefix > 64 {
            return Err(format!(
                "prefix length {prefix}: DHCPv6 ranges need a /64 or wider"
            ));
        }
    }
    let mut lease_time_secs = None;
    if let Some(l) = rest.next_if(|f| looks_like_lease(f)) {
        lease_time_secs = Some(lease_time(l)?);
    }
    if let Some(extra) = rest.next() {
        return Err(format!(
            "{extra:?}: other fields of IPv6 ranges are not supported"
        ));
    }
    Ok(Range6Entry {
        tag,
        begin,
        end,
        prefix,
        lease_time: lease_time_secs,
    })
}

/// One `dhcp-host` value: MACs, an address, a name, a lease time, `ignore`, `set:` tags.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct HostEntry {
    pub macs: Vec<MacAddr>,
    pub ip: Option<Ipv4Addr>,
    pub ip6: Option<Ipv6Addr>,
    pub hostname: Option<String>,
    pub lease_time: Option<u32>,
    pub ignore: bool,
    pub tags: Vec<String>,
}

/// A dnsmasq lease time: seconds, or a number with `m`, `h`, `d` or `w`.
pub(super) fn lease_time(s: &str) -> Result<u32, String> {
    if s == "infinite" {
        return Err("an infinite lease time is not supported".into());
    }
    let (digits, unit) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c.to_ascii_lowercase()),
        _ => (s, 's'),
    };
    let factor = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        'w' => 604_800,
        _ => {
            return Err(format!(
                "{s:?} is not a lease time (like 3600, 45m, 12h, 1d)"
            ))
        }
    };
    digits
        .parse::<u32>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| format!("{s:?} is not a lease time (like 3600, 45m, 12h, 1d)"))
}

fn looks_like_lease(s: &str) -> bool {
    s == "infinite" || s.starts_with(|c: char| c.is_ascii_digit()) && !s.contains('.')
}

/// A contiguous netmask as a prefix length.
fn prefix_of(mask: Ipv4Addr) -> Option<u8> {
    let bits = u32::from(mask);
    let ones = bits.leading_ones();
    (bits.checked_shl(ones).unwrap_or(0) == 0).then_some(ones as u8)
}

/// A `dhcp-range` value's fields after its leading `set:<tag>`, and that tag. Ranges
/// chosen by a tag (`tag:`) and a second `set:` are refused.
fn range_fields(entry: &str) -> Result<(Option<String>, Vec<&str>), String> {
    let mut fields: Vec<&str> = entry.split(',').map(str::trim).collect();
    let mut tag = None;
    if let Some(t) = fields.first().and_then(|f| f.strip_prefix("set:")) {
        tag = Some(t.to_string());
        fields.remove(0);
    }
    if let Some(f) = fields
        .iter()
        .find(|f| f.starts_with("tag:") || f.starts_with("set:"))
    {
        return Err(format!(
            "{f:?}: only one leading set:<tag> is supported (ranges chosen by tag are not)"
        ));
    }
    Ok((tag, fields))
}

/// Parses one `dhcp-range` value.
pub(super) fn range(entry: &str) -> Result<RangeEntry, String> {
    let (tag, fields) = range_fields(entry)?;
    let addr = |f: Option<&&str>, what: &str| -> Result<Ipv4Addr, String> {
        let f = f.ok_or_else(|| format!("the {what} address is missing"))?;
        if f.contains(':') {
            return Err(format!("{f:?}: an IPv6 address in an IPv4 range"));
        }
        f.parse()
            .map_err(|_| format!("{f:?} is not an IPv4 {what} address"))
    };
    let begin = addr(fields.first(), "start")?;
    let end = addr(fields.get(1), "end")?;
    let mut rest = fields.iter().skip(2).peekable();
    let mut prefix = None;
    if let Some(mask) = rest.next_if(|f| f.parse::<Ipv4Addr>().is_ok()) {
        let mask: Ipv4Addr = mask.parse().expect("checked above");
        prefix = Some(prefix_of(mask).ok_or_else(|| format!("{mask} is not a netmask"))?);
        // The broadcast address follows from the netmask; one given explicitly is
        // accepted and not used.
        rest.next_if(|f| f.parse::<Ipv4Addr>().is_ok());
    }
    let mut lease = None;
    if let Some(l) = rest.next_if(|f| looks_like_lease(f)) {
        lease = Some(lease_time(l)?);
    }
    if let Some(extra) = rest.next() {
        return Err(format!(
            "{extra:?}: range modes (static, proxy, ra-…) and other fields are not supported"
        ));
    }
    Ok(RangeEntry {
        tag,
        begin,
        end,
        prefix,
        lease_time: lease,
    })
}

/// Parses one `dhcp-host` value.
pub(super) fn host(entry: &str) -> Result<HostEntry, String> {
    let mut h = HostEntry::default();
    for f in entry.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        if f == "ignore" {
            h.ignore = true;
        } else if let Some(t) = f.strip_prefix("set:") {
            h.tags.push(t.to_string());
        } else if let Some(inner) = f.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            // dnsmasq: `[addr]`, a whole address, or `[::n]`, the host part only (for a
            // `constructor:` range, which is not served).
            let ip6: Ipv6Addr = inner
                .parse()
                .map_err(|_| format!("{f:?}: not an IPv6 address"))?;
            if u128::from(ip6) >> 64 == 0 {
                return Err(format!(
                    "{f:?}: an address's host part only is for constructor ranges, which are not served"
                ));
            }
            if h.ip6.replace(ip6).is_some() {
                return Err("more than one IPv6 address".into());
            }
        } else if f.starts_with("tag:") || f.starts_with("id:") {
            return Err(format!(
                "{f:?}: tags and client identifiers in host entries are not supported yet"
            ));
        } else if let Ok(ip) = f.parse::<Ipv4Addr>() {
            if h.ip.replace(ip).is_some() {
                return Err("more than one IPv4 address".into());
            }
        } else if f.len() == 17 && f.contains([':', '-']) {
            h.macs.push(f.parse().map_err(|e| format!("{f:?}: {e}"))?);
        } else if looks_like_lease(f) {
            h.lease_time = Some(lease_time(f)?);
        } else if h.hostname.replace(f.to_string()).is_some() {
            return Err(format!("{f:?}: more than one host name"));
        }
    }
    if h.macs.is_empty() {
        return Err(
            "names no MAC address (entries by client id or name only are not supported)".into(),
        );
    }
    if (h.ip.is_some() || h.ip6.is_some()) && h.macs.len() > 1 {
        return Err("one address for several MACs is not supported".into());
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_times_take_dnsmasq_units() {
        assert_eq!(lease_time("3600"), Ok(3600));
        assert_eq!(lease_time("45m"), Ok(2700));
        assert_eq!(lease_time("12h"), Ok(43_200));
        assert_eq!(lease_time("2d"), Ok(172_800));
        assert!(lease_time("infinite").is_err());
        assert!(lease_time("12x").is_err());
        assert!(lease_time("99999999999").is_err());
    }

    #[test]
    fn ranges_in_every_form_irso_writes() {
        let r = range("172.22.0.10,172.22.0.100,255.255.255.0").unwrap();
        assert_eq!((r.tag, r.prefix, r.lease_time), (None, Some(24), None));
        let r = range("set:range_2,10.0.0.10,10.0.0.100,255.255.0.0,10.0.255.255,12h").unwrap();
        assert_eq!(r.tag.as_deref(), Some("range_2"));
        assert_eq!((r.prefix, r.lease_time), (Some(16), Some(43_200)));
        let r = range("172.22.0.10,172.22.0.100").unwrap();
        assert_eq!(
            (r.begin, r.end, r.prefix),
            (
                "172.22.0.10".parse().unwrap(),
                "172.22.0.100".parse().unwrap(),
                None
            )
        );
        assert!(range("172.22.0.10,172.22.0.100,255.0.255.0")
            .unwrap_err()
            .contains("netmask"));
        assert!(range("fd00::10,fd00::100,64")
            .unwrap_err()
            .contains("IPv6 address in an IPv4 range"));
        assert!(range("172.22.0.10,static").is_err());
        assert!(range("172.22.0.10,172.22.0.20,255.255.255.0,proxy").is_err());
        assert!(range("tag:x,172.22.0.10,172.22.0.20").is_err());
    }

    #[test]
    fn ipv6_ranges_as_ironic_image_writes_them() {
        assert!(is_v6_range(
            "fd2e:6f44:5dd8:c956::14,fd2e:6f44:5dd8:c956::c8"
        ));
        assert!(!is_v6_range("set:x,192.0.2.10,192.0.2.20"));
        assert_eq!(
            range6("fd2e:6f44:5dd8:c956::14,fd2e:6f44:5dd8:c956::c8,64,12h").unwrap(),
            Range6Entry {
                tag: None,
                begin: "fd2e:6f44:5dd8:c956::14".parse().unwrap(),
                end: "fd2e:6f44:5dd8:c956::c8".parse().unwrap(),
                prefix: 64,
                lease_time: Some(43_200),
            }
        );
        assert_eq!(range6("fd00::10,fd00::ff").unwrap().prefix, 64);
        assert_eq!(
            range6("set:range_6,fd00::10,fd00::ff")
                .unwrap()
                .tag
                .as_deref(),
            Some("range_6")
        );
        assert!(range6("set:a,fd00::10,set:b,fd00::ff").is_err());
        assert!(range6("fd00::,ra-only").unwrap_err().contains("ra-only"));
        assert!(range6("::,constructor:eth0,ra-names")
            .unwrap_err()
            .contains("stateful"));
        assert!(range6("fd00::10,fd00::ff,80").unwrap_err().contains("/64"));
        assert!(range6("fd00::10,192.0.2.1")
            .unwrap_err()
            .contains("IPv6 end"));
    }

    #[test]
    fn hosts_like_dnsmasq_dhcp_host() {
        let h = host("52:54:00:aa:bb:01,192.0.2.50,node-1,12h").unwrap();
        assert_eq!(h.macs.len(), 1);
        assert_eq!(h.ip, Some("192.0.2.50".parse().unwrap()));
        assert_eq!(
            (h.hostname.as_deref(), h.lease_time),
            (Some("node-1"), Some(43_200))
        );
        let h = host("52:54:00:aa:bb:02,ignore").unwrap();
        assert!(h.ignore && h.ip.is_none());
        let h = host("52:54:00:aa:bb:03,52:54:00:aa:bb:04,set:rack1").unwrap();
        assert_eq!((h.macs.len(), h.tags.len()), (2, 1));
        assert!(host("node-only").is_err());
        assert!(host("id:01:02,192.0.2.9").is_err());
        assert!(host("52:54:00:aa:bb:0g,192.0.2.9").is_err());
        assert!(host("52:54:00:aa:bb:03,52:54:00:aa:bb:04,192.0.2.9").is_err());
        // IPv6 as dnsmasq writes it: bracketed, beside or instead of the IPv4 one.
        let h = host("52:54:00:aa:bb:05,192.0.2.51,[fd00:1::51],node-5").unwrap();
        assert_eq!(h.ip6, Some("fd00:1::51".parse().unwrap()));
        assert_eq!(h.ip, Some("192.0.2.51".parse().unwrap()));
        assert!(host("52:54:00:aa:bb:05,[fd00:1::zz]")
            .unwrap_err()
            .contains("not an IPv6 address"));
        assert!(host("52:54:00:aa:bb:05,[::51]")
            .unwrap_err()
            .contains("constructor"));
        assert!(host("52:54:00:aa:bb:05,[fd00::1],[fd00::2]").is_err());
        assert!(host("52:54:00:aa:bb:03,52:54:00:aa:bb:04,[fd00::9]").is_err());
    }
}
