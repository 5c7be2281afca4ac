//! `[[host]]`: per-MAC reservations and overrides.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use serde::Deserialize;

use super::boot::check_boot_value;
use super::issues::Issues;
use super::subnet::Subnet;
use crate::mac::MacAddr;

/// One `[[host]]` as written: a reservation and/or per-host overrides.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHost {
    mac: Option<String>,
    ip: Option<String>,
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
    /// Host name (option 12).
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
    pub options: Vec<crate::dhcp::options::OptionRule>,
    /// Tags this host sets for option entries (`tag:<name>`).
    pub tags: Vec<String>,
}

impl Host {
    /// An entry that only names the MAC: known, with the subnet's settings.
    pub fn bare(mac: MacAddr) -> Self {
        Self {
            mac,
            ip: None,
            hostname: None,
            boot_file: None,
            deny: false,
            dns: Vec::new(),
            router: None,
            lease_time: None,
            options: Vec::new(),
            tags: Vec::new(),
        }
    }
}

/// Validates every `[[host]]`; a reserved address must lie in one of `subnets`, and no
/// MAC or address may appear twice. A host without a usable MAC is left out.
pub(super) fn validate_all(
    raw: Vec<RawHost>,
    subnets: &[Subnet],
    issues: &mut Issues,
) -> Vec<Host> {
    let mut out = Vec::new();
    let mut seen_mac: HashMap<MacAddr, usize> = HashMap::new();
    let mut seen_ip: HashMap<Ipv4Addr, usize> = HashMap::new();
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
        if let Some(mac) = mac {
            out.push(Host {
                mac,
                ip,
                hostname: h.hostname,
                boot_file: h.boot_file,
                deny: h.deny.unwrap_or(false),
                dns,
                router,
                lease_time: h.lease_time,
                options: super::options_list(&k("options"), &h.options, issues),
                tags: super::tag_list(&k("tags"), &h.tags, issues),
            });
        }
    }
    out
}
