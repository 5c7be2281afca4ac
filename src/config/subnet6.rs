//! `[[subnet6]]`: the served IPv6 networks (DHCPv6, RFC 8415), beside `[[subnet]]`.

use std::net::Ipv6Addr;

use ipnet::Ipv6Net;
use serde::Deserialize;

use super::issues::Issues;

/// The most addresses one range may hold: each range is a bitmap in memory and its
/// share among the members is computed over it, so a whole /64 cannot be a range.
/// Provisioning ranges are a few hundred addresses (ironic-image's `DHCP_RANGE`).
pub const MAX_RANGE6: u32 = 1 << 20;

/// One `[[subnet6]]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSubnet6 {
    network: Option<String>,
    interface: Option<String>,
    #[serde(default)]
    ranges: Vec<super::subnet::RawRange>,
    #[serde(default)]
    exclude: Vec<String>,
    lease_time: Option<u32>,
    preferred_time: Option<u32>,
    renewal_time: Option<u32>,
    rebinding_time: Option<u32>,
    rapid_commit: Option<bool>,
    #[serde(default)]
    dns: Vec<String>,
    #[serde(default)]
    domain_search: Vec<String>,
    interface_id: Option<String>,
    #[serde(default)]
    options: Vec<String>,
}

/// A served IPv6 subnet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subnet6 {
    /// The link's prefix, e.g. fd00:1::/64: relayed clients match it by the relay's
    /// link-address, direct ones by the addresses of the interface they arrive on.
    pub network: Ipv6Net,
    /// Only serve direct clients arriving on this interface.
    pub interface: Option<String>,
    /// Inclusive address ranges for dynamic allocation.
    pub ranges: Vec<(Ipv6Addr, Ipv6Addr)>,
    /// The tag each range sets for the clients given an address in it, by index.
    pub range_tags: Vec<Option<String>>,
    /// Addresses inside the ranges never handed out dynamically.
    pub exclude: Vec<Ipv6Addr>,
    /// Valid lifetime, seconds (RFC 8415 §21.6).
    pub lease_time: u32,
    /// Preferred lifetime, seconds.
    pub preferred_time: u32,
    /// T1, seconds (RFC 8415 §21.4).
    pub renewal_time: u32,
    /// T2, seconds.
    pub rebinding_time: u32,
    /// Answer a Solicit that carries Rapid Commit with a Reply (RFC 8415 §18.3.1).
    pub rapid_commit: bool,
    /// DNS recursive name servers (option 23, RFC 3646).
    pub dns: Vec<Ipv6Addr>,
    /// Domain search list (option 24, RFC 3646).
    pub domain_search: Vec<String>,
    /// A relayed client is on this link when the relay nearest it sends this
    /// Interface-Id (option 18, RFC 8415 §21.18), whatever its link-address says.
    pub interface_id: Option<Vec<u8>>,
    /// Options of this subnet (`option6:` entries), over `[dhcp] options`' ones.
    pub options: Vec<crate::options::OptionRule6>,
}

impl Subnet6 {
    /// The tag of the range `ip` lies in, if that range sets one.
    pub fn range_tag(&self, ip: Ipv6Addr) -> Option<&str> {
        self.ranges
            .iter()
            .zip(&self.range_tags)
            .find(|((a, b), _)| *a <= ip && ip <= *b)
            .and_then(|(_, t)| t.as_deref())
    }

    /// Whether `ip` is inside one of the dynamic ranges.
    pub fn in_ranges(&self, ip: Ipv6Addr) -> bool {
        self.ranges.iter().any(|(a, b)| *a <= ip && ip <= *b)
    }
}

/// Number of addresses in `first..=last`, when it is at most [`MAX_RANGE6`].
pub fn range6_len(first: Ipv6Addr, last: Ipv6Addr) -> Option<u32> {
    let n = u128::from(last).checked_sub(u128::from(first))? + 1;
    u32::try_from(n).ok().filter(|n| *n <= MAX_RANGE6)
}

/// `s` as an IPv6 address, else an issue under `key`.
pub(super) fn ip6(issues: &mut Issues, key: &str, s: &str) -> Option<Ipv6Addr> {
    match s.trim().parse() {
        Ok(ip) => Some(ip),
        Err(_) => {
            issues.add(key, "not an IPv6 address");
            None
        }
    }
}

fn ips6(issues: &mut Issues, key: &str, list: &[String]) -> Vec<Ipv6Addr> {
    list.iter()
        .enumerate()
        .filter_map(|(i, s)| ip6(issues, &format!("{key}[{i}]"), s))
        .collect()
}

/// Validates every `[[subnet6]]`, then that no two of them overlap.
pub(super) fn validate_all(raw: Vec<RawSubnet6>, issues: &mut Issues) -> Vec<Subnet6> {
    let subnets: Vec<Subnet6> = raw
        .into_iter()
        .enumerate()
        .filter_map(|(i, s)| subnet6(i, s, issues))
        .collect();
    for (i, a) in subnets.iter().enumerate() {
        if let Some(b) = subnets[..i].iter().find(|b| {
            a.network.contains(&b.network.network()) || b.network.contains(&a.network.network())
        }) {
            issues.add(
                format!("subnet6[{i}].network"),
                format!("overlaps {}", b.network),
            );
        }
    }
    subnets
}

fn parse_range6(
    key: &str,
    s: &str,
    net: Option<Ipv6Net>,
    issues: &mut Issues,
) -> Option<(Ipv6Addr, Ipv6Addr)> {
    // Addresses hold ':' but never '-', so the dash splits them.
    let Some((a, b)) = s.split_once('-') else {
        issues.add(key, "must look like \"fd00:1::100 - fd00:1::1ff\"");
        return None;
    };
    let (a, b) = (ip6(issues, key, a)?, ip6(issues, key, b)?);
    if a > b {
        issues.add(key, "start is after end");
        return None;
    }
    if range6_len(a, b).is_none() {
        issues.add(key, format!("holds more than {MAX_RANGE6} addresses"));
        return None;
    }
    if let Some(net) = net {
        if !net.contains(&a) || !net.contains(&b) {
            issues.add(key, format!("not inside network {net}"));
            return None;
        }
        // RFC 4291 §2.6.1: the all-zero interface identifier is the subnet-router
        // anycast address.
        if a == net.network() {
            issues.add(key, "must not include the subnet-router anycast address");
            return None;
        }
    }
    Some((a, b))
}

fn subnet6(i: usize, raw: RawSubnet6, issues: &mut Issues) -> Option<Subnet6> {
    let k = |f: &str| format!("subnet6[{i}].{f}");
    let network = match raw.network.as_deref().map(str::parse::<Ipv6Net>) {
        Some(Ok(n)) => Some(n.trunc()),
        Some(Err(_)) => {
            issues.add(k("network"), "must be an IPv6 network such as fd00:1::/64");
            None
        }
        None => {
            issues.add(k("network"), "is required");
            None
        }
    };
    let mut range_tags = Vec::new();
    let ranges: Vec<_> = raw
        .ranges
        .iter()
        .enumerate()
        .filter_map(|(j, r)| {
            let key = format!("subnet6[{i}].ranges[{j}]");
            let (text, tag) = r.text_and_tag(&key, issues);
            let parsed = parse_range6(&key, text, network, issues)?;
            range_tags.push(tag);
            Some(parsed)
        })
        .collect();
    for (j, a) in ranges.iter().enumerate() {
        if ranges[..j].iter().any(|b| a.0 <= b.1 && b.0 <= a.1) {
            issues.add(
                format!("subnet6[{i}].ranges[{j}]"),
                "overlaps an earlier range",
            );
        }
    }
    let lease_time = raw.lease_time.unwrap_or(3600);
    if lease_time < 60 {
        issues.add(k("lease_time"), "must be at least 60 seconds");
    }
    let preferred_time = raw.preferred_time.unwrap_or(lease_time);
    // RFC 8415 §21.6: the preferred lifetime is never above the valid one.
    if preferred_time > lease_time {
        issues.add(k("preferred_time"), "must not be above lease_time");
    }
    // RFC 8415 §21.4: T1 0.5 and T2 0.8 times the shortest preferred lifetime are the
    // recommended values; T1 ≤ T2.
    let renewal_time = raw.renewal_time.unwrap_or(preferred_time / 2);
    let rebinding_time = raw.rebinding_time.unwrap_or(preferred_time / 5 * 4);
    if renewal_time > rebinding_time || renewal_time == 0 {
        issues.add(
            k("renewal_time"),
            "must be above 0 and at most rebinding_time",
        );
    }
    if rebinding_time >= lease_time {
        issues.add(k("rebinding_time"), "must be less than lease_time");
    }
    let exclude = ips6(issues, &k("exclude"), &raw.exclude);
    let dns = ips6(issues, &k("dns"), &raw.dns);
    for (j, d) in raw.domain_search.iter().enumerate() {
        issues.dns_name(&format!("subnet6[{i}].domain_search[{j}]"), d);
    }
    let interface_id = raw.interface_id.map(String::into_bytes);
    if interface_id
        .as_ref()
        .is_some_and(|id| id.is_empty() || id.len() > 255)
    {
        issues.add(k("interface_id"), "must be 1 to 255 octets");
    }
    let options = super::options6_list(&k("options"), &raw.options, issues);
    Some(Subnet6 {
        interface_id,
        options,
        network: network?,
        interface: raw.interface,
        ranges,
        range_tags,
        exclude,
        lease_time,
        preferred_time,
        renewal_time,
        rebinding_time,
        rapid_commit: raw.rapid_commit.unwrap_or(false),
        dns,
        domain_search: raw.domain_search,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawSubnet6 {
        toml::from_str(text).expect("raw subnet6")
    }

    #[test]
    fn a_subnet6_gets_rfc_8415_timers_from_its_lease_time() {
        let mut issues = Issues::default();
        let s = subnet6(
            0,
            raw("network = \"fd00:1::/64\"\nranges = [\"fd00:1::10 - fd00:1::ff\"]\nlease_time = 1000"),
            &mut issues,
        )
        .expect("valid");
        assert!(issues.finish().is_ok());
        assert_eq!(
            (s.preferred_time, s.renewal_time, s.rebinding_time),
            (1000, 500, 800)
        );
        assert!(s.in_ranges("fd00:1::80".parse().unwrap()));
        assert!(!s.in_ranges("fd00:1::100".parse().unwrap()));
        assert!(!s.rapid_commit);
    }

    #[test]
    fn each_bad_key_is_named() {
        let mut issues = Issues::default();
        subnet6(
            2,
            raw(concat!(
                "network = \"fd00:1::/64\"\n",
                "ranges = [\"fd00:1::10 fd00:1::ff\", \"fd00:2::1 - fd00:2::5\", ",
                "\"fd00:1::1 - fd00:1::ffff:ffff\", \"fd00:1::20 - fd00:1::10\", \"fd00:1:: - fd00:1::5\"]\n",
                "lease_time = 600\npreferred_time = 700\nrebinding_time = 600\n",
                "dns = [\"192.0.2.1\"]\ndomain_search = [\"bad name\"]\n",
            )),
            &mut issues,
        );
        let keys = issues.keys();
        assert_eq!(
            keys,
            [
                "subnet6[2].ranges[0]",
                "subnet6[2].ranges[1]",
                "subnet6[2].ranges[2]",
                "subnet6[2].ranges[3]",
                "subnet6[2].ranges[4]",
                "subnet6[2].preferred_time",
                "subnet6[2].rebinding_time",
                "subnet6[2].dns[0]",
                "subnet6[2].domain_search[0]",
            ]
        );
    }

    #[test]
    fn options_and_interface_id_are_read_and_bad_ones_named() {
        let mut issues = Issues::default();
        let s = subnet6(
            0,
            raw(concat!(
                "network = \"fd00:1::/64\"\ninterface_id = \"eth0.42\"\n",
                "options = [\"option6:ntp-server,[fd00:1::5]\", \"tag:ipxe,option6:sntp-server\"]\n",
            )),
            &mut issues,
        )
        .expect("valid");
        assert!(issues.finish().is_ok());
        assert_eq!(s.interface_id.as_deref(), Some(&b"eth0.42"[..]));
        assert_eq!(
            s.options
                .iter()
                .map(|o| (o.code, o.value.is_some()))
                .collect::<Vec<_>>(),
            [(56, true), (31, false)]
        );
        let mut issues = Issues::default();
        subnet6(
            1,
            raw(concat!(
                "network = \"fd00:1::/64\"\ninterface_id = \"\"\n",
                "options = [\"option6:dns-server,[fd00::1]\", \"option:router,192.0.2.1\", \"option6:3,1\"]\n",
            )),
            &mut issues,
        );
        assert_eq!(
            issues.keys(),
            [
                "subnet6[1].interface_id",
                "subnet6[1].options[1]",
                "subnet6[1].options[2]",
            ]
        );
    }

    #[test]
    fn overlapping_subnets6_are_refused() {
        let mut issues = Issues::default();
        validate_all(
            vec![
                raw("network = \"fd00:1::/64\""),
                raw("network = \"fd00:1::/48\""),
            ],
            &mut issues,
        );
        assert_eq!(issues.keys(), ["subnet6[1].network"]);
    }
}
