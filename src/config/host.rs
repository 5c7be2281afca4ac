//! `[[host]]`: per-MAC reservations and overrides.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::Deserialize;

use super::boot::check_boot_value;
use super::issues::Issues;
use super::subnet::Subnet;
use super::subnet6::Subnet6;
use crate::mac::MacAddr;

/// One `[[host]]` as written: a reservation and/or per-host overrides.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHost {
    mac: Option<String>,
    ip: Option<String>,
    ip6: Option<String>,
    hostname: Option<String>,
    boot_file: Option<String>,
    deny: Option<bool>,
    #[serde(default)]
    dns: Vec<String>,
    router: Option<String>,
    lease_time: Option<u32>,
    #[serde(default)]
    options: Vec<String>,
    #[serde(default)]
    tags: Vec<String>,
}

/// A `[[host]]` entry.
#[derive(Debug, Clone)]
pub struct Host {
    /// The client's MAC.
    pub mac: MacAddr,
    /// Fixed address, if reserved.
    pub ip: Option<Ipv4Addr>,
    /// Fixed DHCPv6 address (IA_NA), if reserved: inside a `[[subnet6]]`, in or out of
    /// its ranges.
    pub ip6: Option<Ipv6Addr>,
    /// Host name (option 12; the v6 lease's name).
    pub hostname: Option<String>,
    /// Boot file or URL that replaces the per-architecture choice.
    pub boot_file: Option<String>,
    /// Never answer this MAC.
    pub deny: bool,
    /// DNS servers replacing the subnet's.
    pub dns: Vec<Ipv4Addr>,
    /// Router replacing the subnet's.
    pub router: Option<Ipv4Addr>,
    /// Lease time replacing the subnet's.
    pub lease_time: Option<u32>,
    /// Options for this host (dnsmasq `dhcp-option` syntax), over the subnet's.
    pub options: Vec<crate::options::OptionRule>,
    /// The `option6:` entries of `options`, over the `[[subnet6]]`'s.
    pub options6: Vec<crate::options::OptionRule6>,
    /// Tags this host sets for option entries (`tag:<name>`).
    pub tags: Vec<String>,
}

impl Host {
    /// An entry that only names the MAC: known, with the subnet's settings.
    pub fn bare(mac: MacAddr) -> Self {
        Self {
            mac,
            ip: None,
            ip6: None,
            hostname: None,
            boot_file: None,
            deny: false,
            dns: Vec::new(),
            router: None,
            lease_time: None,
            options: Vec::new(),
            options6: Vec::new(),
            tags: Vec::new(),
        }
    }
}

/// Validates every `[[host]]`; a reserved address must lie in one of `subnets` (an
/// `ip6` in one of `subnets6`), and no MAC or address may appear twice. A host without
/// a usable MAC is left out.
pub(super) fn validate_all(
    raw: Vec<RawHost>,
    subnets: &[Subnet],
    subnets6: &[Subnet6],
    issues: &mut Issues,
) -> Vec<Host> {
    let mut out = Vec::new();
    let mut seen_mac: HashMap<MacAddr, usize> = HashMap::new();
    let mut seen_ip: HashMap<Ipv4Addr, usize> = HashMap::new();
    let mut seen_ip6: HashMap<Ipv6Addr, usize> = HashMap::new();
    for (i, h) in raw.into_iter().enumerate() {
        let k = |f: &str| format!("host[{i}].{f}");
        let mac = match h.mac.as_deref().map(str::parse::<MacAddr>) {
            Some(Ok(m)) => Some(m),
            Some(Err(e)) => {
                issues.add(k("mac"), e.to_string());
                None
            }
            None => {
                issues.add(k("mac"), "is required");
                None
            }
        };
        if let Some(m) = mac {
            if let Some(prev) = seen_mac.insert(m, i) {
                issues.add(k("mac"), format!("duplicates host[{prev}].mac"));
            }
        }
        let ip = issues.opt_ip(&k("ip"), &h.ip);
        if let Some(ip) = ip {
            if !subnets.iter().any(|s| s.network.contains(&ip)) {
                issues.add(k("ip"), "is not inside any configured subnet");
            }
            if let Some(prev) = seen_ip.insert(ip, i) {
                issues.add(k("ip"), format!("duplicates host[{prev}].ip"));
            }
        }
        let ip6 = h
            .ip6
            .as_deref()
            .and_then(|s| super::subnet6::ip6(issues, &k("ip6"), s));
        if let Some(ip6) = ip6 {
            if !subnets6.iter().any(|s| s.network.contains(&ip6)) {
                issues.add(k("ip6"), "is not inside any configured subnet6");
            }
            if let Some(prev) = seen_ip6.insert(ip6, i) {
                issues.add(k("ip6"), format!("duplicates host[{prev}].ip6"));
            }
        }
        if let Some(name) = &h.hostname {
            if name.is_empty()
                || name.len() > 63
                || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            {
                issues.add(
                    k("hostname"),
                    "must be a DNS label (letters, digits, '-'; at most 63)",
                );
            }
        }
        if let Some(f) = &h.boot_file {
            check_boot_value(&k("boot_file"), f, issues);
        }
        let dns = issues.ips(&k("dns"), &h.dns);
        let router = issues.opt_ip(&k("router"), &h.router);
        if let Some(t) = h.lease_time {
            if t < 60 {
                issues.add(k("lease_time"), "must be at least 60 seconds");
            }
        }
        let (options, options6) = super::options_both(&k("options"), &h.options, issues);
        if let Some(mac) = mac {
            out.push(Host {
                mac,
                ip,
                ip6,
                hostname: h.hostname,
                boot_file: h.boot_file,
                deny: h.deny.unwrap_or(false),
                dns,
                router,
                lease_time: h.lease_time,
                options,
                options6,
                tags: super::tag_list(&k("tags"), &h.tags, issues),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError};

    const SUBNET6: &str =
        "[[subnet6]]\nnetwork = \"fd00:1::/64\"\nranges = [\"fd00:1::100 - fd00:1::1ff\"]\n";

    fn issues(text: &str) -> Vec<(String, String)> {
        match Config::from_toml_with_overrides(text, &[]) {
            Err(ConfigError::Invalid(v)) => v.into_iter().map(|i| (i.key, i.reason)).collect(),
            other => panic!("expected invalid: {other:?}"),
        }
    }

    #[test]
    fn an_ip6_reservation_inside_a_subnet6_is_kept_in_or_out_of_its_ranges() {
        let text = format!(
            "{SUBNET6}[[host]]\nmac = \"52:54:00:aa:bb:01\"\nip6 = \"fd00:1::150\"\n\
             [[host]]\nmac = \"52:54:00:aa:bb:02\"\nip6 = \" fd00:1::9 \"\n"
        );
        let c = Config::from_toml_with_overrides(&text, &[]).expect("valid");
        let got: Vec<_> = c.hosts.iter().map(|h| h.ip6).collect();
        assert_eq!(
            got,
            vec![
                Some("fd00:1::150".parse().unwrap()),
                Some("fd00:1::9".parse().unwrap())
            ]
        );
    }

    #[test]
    fn an_ip6_outside_every_subnet6_is_refused_by_its_key() {
        let text = format!("{SUBNET6}[[host]]\nmac = \"52:54:00:aa:bb:01\"\nip6 = \"fd00:2::5\"\n");
        assert_eq!(
            issues(&text),
            vec![(
                "host[0].ip6".to_string(),
                "is not inside any configured subnet6".to_string()
            )]
        );
        // Without any [[subnet6]] there is nowhere an ip6 could lie.
        let text = "[[host]]\nmac = \"52:54:00:aa:bb:01\"\nip6 = \"fd00:1::5\"\n";
        assert_eq!(issues(text)[0].0, "host[0].ip6");
    }

    #[test]
    fn an_ip6_that_is_no_ipv6_address_is_refused_by_its_key() {
        for bad in ["192.0.2.5", "fd00:1::zz", ""] {
            let text = format!("{SUBNET6}[[host]]\nmac = \"52:54:00:aa:bb:01\"\nip6 = \"{bad}\"\n");
            assert_eq!(
                issues(&text),
                vec![("host[0].ip6".to_string(), "not an IPv6 address".to_string())],
                "{bad:?}"
            );
        }
    }

    #[test]
    fn two_hosts_may_not_reserve_one_ip6() {
        let text = format!(
            "{SUBNET6}[[host]]\nmac = \"52:54:00:aa:bb:01\"\nip6 = \"fd00:1::150\"\n\
             [[host]]\nmac = \"52:54:00:aa:bb:02\"\nip6 = \"fd00:1::150\"\n"
        );
        assert_eq!(
            issues(&text),
            vec![(
                "host[1].ip6".to_string(),
                "duplicates host[0].ip6".to_string()
            )]
        );
    }
}
