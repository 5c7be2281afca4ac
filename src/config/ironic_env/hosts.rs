//! DHCP_HOSTS, DHCP_IGNORE and DNSMASQ_EXCEPT_INTERFACE: which machines and which
//! interfaces are served.

use std::collections::BTreeMap;

use ipnet::Ipv4Net;
use toml::{Table, Value};

use super::{dnsmasq, entries, get, HostFacts};
use crate::config::issues::Issues;

/// DHCP_IGNORE: `tag:!known` (dnsmasq's "only hosts with a dhcp-host line") is
/// `dhcp.known_only`; nothing else is expressible.
pub(super) fn known_only(vars: &BTreeMap<String, String>, issues: &mut Issues) -> bool {
    match get(vars, "DHCP_IGNORE") {
        None => false,
        Some("tag:!known") => true,
        Some(other) => {
            issues.add(
                "DHCP_IGNORE",
                format!("{other:?}: only tag:!known (answer only DHCP_HOSTS MACs) is supported"),
            );
            false
        }
    }
}

/// DHCP_HOSTS as `[[host]]` entries (one per MAC).
pub(super) fn hosts(
    vars: &BTreeMap<String, String>,
    table: &mut Table,
    issues: &mut Issues,
    origin: &mut impl FnMut(String, &'static str, Option<String>),
) {
    let mut out = Vec::new();
    for entry in entries(vars, "DHCP_HOSTS") {
        let h = match dnsmasq::host(entry) {
            Ok(h) => h,
            Err(e) => {
                issues.add("DHCP_HOSTS", format!("entry {entry:?}: {e}"));
                continue;
            }
        };
        for mac in &h.macs {
            let mut t = Table::new();
            t.insert("mac".into(), Value::String(mac.to_string()));
            if let Some(ip) = h.ip {
                t.insert("ip".into(), Value::String(ip.to_string()));
            }
            if let Some(ip6) = h.ip6 {
                t.insert("ip6".into(), Value::String(ip6.to_string()));
            }
            if let Some(n) = &h.hostname {
                t.insert("hostname".into(), Value::String(n.clone()));
            }
            if let Some(l) = h.lease_time {
                t.insert("lease_time".into(), Value::Integer(l.into()));
            }
            if h.ignore {
                t.insert("deny".into(), Value::Boolean(true));
            }
            if !h.tags.is_empty() {
                let tags = h.tags.iter().cloned().map(Value::String).collect();
                t.insert("tags".into(), Value::Array(tags));
            }
            origin(
                format!("host[{}]", out.len()),
                "DHCP_HOSTS",
                Some(entry.into()),
            );
            out.push(Value::Table(t));
        }
    }
    if !out.is_empty() {
        table.insert("host".into(), Value::Array(out));
    }
}

/// DNSMASQ_EXCEPT_INTERFACE (default `lo`): interfaces dnsmasq must not serve. shardboot
/// serves one named interface, or every interface with an address in a range's
/// network; an excluded interface among those cannot be honoured.
pub(super) fn except_interfaces(
    vars: &BTreeMap<String, String>,
    host: &HostFacts,
    served: Option<&str>,
    subnets: &[Value],
    issues: &mut Issues,
) {
    let networks: Vec<Ipv4Net> = subnets
        .iter()
        .filter_map(|s| s.get("network")?.as_str()?.parse().ok())
        .collect();
    for except in get(vars, "DNSMASQ_EXCEPT_INTERFACE")
        .unwrap_or("lo")
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let clash = match served {
            Some(s) => s == except,
            None => host
                .addresses
                .iter()
                .any(|(i, a)| i == except && networks.iter().any(|n| n.contains(&a.addr()))),
        };
        if clash {
            issues.add(
                "DNSMASQ_EXCEPT_INTERFACE",
                format!("{except} is the interface DHCP would be served on"),
            );
        }
    }
}
