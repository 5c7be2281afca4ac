//! `[[subnet]]`: the served networks, their dynamic ranges and the options handed out.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Deserialize;

use super::issues::Issues;

/// One `[[subnet]]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSubnet {
    network: Option<String>,
    interface: Option<String>,
    #[serde(default)]
    ranges: Vec<RawRange>,
    #[serde(default)]
    exclude: Vec<String>,
    lease_time: Option<u32>,
    renewal_time: Option<u32>,
    rebinding_time: Option<u32>,
    router: Option<String>,
    #[serde(default)]
    dns: Vec<String>,
    domain: Option<String>,
    mtu: Option<u16>,
    #[serde(default)]
    ntp: Vec<String>,
    reserve_for_known: Option<u32>,
    #[serde(default)]
    options: Vec<String>,
}

/// A range as written: `"a - b"`, or `{ range = "a - b", tag = "name" }` to set a tag
/// for the clients given an address in it (`tag:<name>` option entries match it).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawRange {
    Plain(String),
    Tagged { range: String, tag: String },
}

impl RawRange {
    /// The range's text and its tag, checked (an issue under `key.tag`).
    pub(super) fn text_and_tag(&self, key: &str, issues: &mut Issues) -> (&str, Option<String>) {
        match self {
            RawRange::Plain(t) => (t, None),
            RawRange::Tagged { range, tag } => {
                super::tag_list(&format!("{key}.tag"), std::slice::from_ref(tag), issues);
                (range, Some(tag.clone()))
            }
        }
    }
}

/// A served subnet.
#[derive(Debug, Clone)]
pub struct Subnet {
    /// The network, e.g. 192.0.2.0/24.
    pub network: Ipv4Net,
    /// Only serve direct clients arriving on this interface (relayed clients match by giaddr).
    pub interface: Option<String>,
    /// Inclusive address ranges for dynamic allocation.
    pub ranges: Vec<(Ipv4Addr, Ipv4Addr)>,
    /// Addresses inside the ranges never handed out dynamically.
    pub exclude: Vec<Ipv4Addr>,
    /// Lease time in seconds (option 51).
    pub lease_time: u32,
    /// T1 (option 58), seconds.
    pub renewal_time: u32,
    /// T2 (option 59), seconds.
    pub rebinding_time: u32,
    /// Default gateway (option 3).
    pub router: Option<Ipv4Addr>,
    /// DNS servers (option 6).
    pub dns: Vec<Ipv4Addr>,
    /// Domain name (option 15).
    pub domain: Option<String>,
    /// Interface MTU (option 26).
    pub mtu: Option<u16>,
    /// NTP servers (option 42).
    pub ntp: Vec<Ipv4Addr>,
    /// The tag each range sets (same order as `ranges`), if any.
    pub range_tags: Vec<Option<String>>,
    /// Options of this subnet (dnsmasq `dhcp-option` syntax), over `[dhcp] options`.
    pub options: Vec<crate::options::OptionRule>,
    /// Addresses of this member's share of the ranges that only known machines may take
    /// fresh: a flood of unknown MACs cannot starve the machines the operator knows.
    /// `None` (not set): the engine's default, a quarter of the share wherever a
    /// machine can be known (`dhcp::engine` `limits::reserve_for_known`).
    pub reserve_for_known: Option<u32>,
}

impl Subnet {
    /// Number of addresses in the dynamic ranges (exclusions not subtracted).
    pub fn range_size(&self) -> u64 {
        self.ranges
            .iter()
            .map(|(a, b)| u64::from(u32::from(*b) - u32::from(*a)) + 1)
            .sum()
    }

    /// The tag of the range `ip` lies in, if that range sets one.
    pub fn range_tag(&self, ip: Ipv4Addr) -> Option<&str> {
        self.ranges
            .iter()
            .zip(&self.range_tags)
            .find(|((a, b), _)| *a <= ip && ip <= *b)
            .and_then(|(_, t)| t.as_deref())
    }

    /// Whether `ip` is inside one of the dynamic ranges.
    pub fn in_ranges(&self, ip: Ipv4Addr) -> bool {
        self.ranges.iter().any(|(a, b)| *a <= ip && ip <= *b)
    }
}

/// Validates every `[[subnet]]`, then that no two of them overlap. A subnet without a
/// usable network is left out (its issues are recorded).
pub(super) fn validate_all(raw: Vec<RawSubnet>, issues: &mut Issues) -> Vec<Subnet> {
    let subnets: Vec<Subnet> = raw
        .into_iter()
        .enumerate()
        .filter_map(|(i, s)| subnet(i, s, issues))
        .collect();
    check_overlap(&subnets, issues);
    subnets
}

fn parse_range(
    key: &str,
    s: &str,
    net: Option<Ipv4Net>,
    issues: &mut Issues,
) -> Option<(Ipv4Addr, Ipv4Addr)> {
    let Some((a, b)) = s.split_once('-') else {
        issues.add(key, "must look like \"192.0.2.10 - 192.0.2.200\"");
        return None;
    };
    let (a, b) = (issues.ip(key, a)?, issues.ip(key, b)?);
    if a > b {
        issues.add(key, "start is after end");
        return None;
    }
    if let Some(net) = net {
        if !net.contains(&a) || !net.contains(&b) {
            issues.add(key, format!("not inside network {net}"));
            return None;
        }
        if net.prefix_len() < 31 && (a == net.network() || b == net.broadcast()) {
            issues.add(key, "must not include the network or broadcast address");
            return None;
        }
    }
    Some((a, b))
}

fn subnet(i: usize, raw: RawSubnet, issues: &mut Issues) -> Option<Subnet> {
    let k = |f: &str| format!("subnet[{i}].{f}");
    let network = match raw.network.as_deref().map(str::parse::<Ipv4Net>) {
        Some(Ok(n)) => Some(n.trunc()),
        Some(Err(_)) => {
            issues.add(k("network"), "must be an IPv4 network such as 192.0.2.0/24");
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
            let key = format!("subnet[{i}].ranges[{j}]");
            let (text, tag) = r.text_and_tag(&key, issues);
            let parsed = parse_range(&key, text, network, issues)?;
            range_tags.push(tag);
            Some(parsed)
        })
        .collect();
    for (j, a) in ranges.iter().enumerate() {
        if ranges[..j].iter().any(|b| a.0 <= b.1 && b.0 <= a.1) {
            issues.add(
                format!("subnet[{i}].ranges[{j}]"),
                "overlaps an earlier range",
            );
        }
    }
    let lease_time = raw.lease_time.unwrap_or(3600);
    if lease_time < 60 {
        issues.add(k("lease_time"), "must be at least 60 seconds");
    }
    let renewal_time = raw.renewal_time.unwrap_or(lease_time / 2);
    let rebinding_time = raw.rebinding_time.unwrap_or(lease_time / 8 * 7);
    // RFC 2131 §4.4.5: T1 < T2 < lease time.
    if renewal_time >= lease_time || renewal_time >= rebinding_time {
        issues.add(
            k("renewal_time"),
            "must be less than rebinding_time and lease_time",
        );
    }
    if rebinding_time >= lease_time {
        issues.add(k("rebinding_time"), "must be less than lease_time");
    }
    let exclude = issues.ips(&k("exclude"), &raw.exclude);
    let router = issues.opt_ip(&k("router"), &raw.router);
    let dns = issues.ips(&k("dns"), &raw.dns);
    let ntp = issues.ips(&k("ntp"), &raw.ntp);
    if let Some(d) = &raw.domain {
        issues.dns_name(&k("domain"), d);
    }
    if let Some(mtu) = raw.mtu {
        // RFC 2132 §5.1: the minimum legal MTU is 68.
        if mtu < 68 {
            issues.add(k("mtu"), "must be at least 68");
        }
    }
    // Unset: the engine reserves a quarter of the member's share, and only where a
    // machine can be known at all (its share is known only at run time).
    let size = ranges
        .iter()
        .map(|(a, b)| u64::from(u32::from(*b) - u32::from(*a)) + 1)
        .sum::<u64>();
    let reserve_for_known = raw
        .reserve_for_known
        .map(|n| issues.in_range(&k("reserve_for_known"), u64::from(n), 0, size) as u32);
    let options = super::options_list(&k("options"), &raw.options, issues);
    Some(Subnet {
        range_tags,
        options,
        reserve_for_known,
        network: network?,
        interface: raw.interface,
        ranges,
        exclude,
        lease_time,
        renewal_time,
        rebinding_time,
        router,
        dns,
        domain: raw.domain,
        mtu: raw.mtu,
        ntp,
    })
}

fn check_overlap(subnets: &[Subnet], issues: &mut Issues) {
    for (i, a) in subnets.iter().enumerate() {
        for b in &subnets[..i] {
            if a.network.contains(&b.network.network()) || b.network.contains(&a.network.network())
            {
                issues.add(
                    format!("subnet[{i}].network"),
                    format!("overlaps {}", b.network),
                );
            }
        }
    }
}
