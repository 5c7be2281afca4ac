//! DHCP_RANGE, GATEWAY_IP, DNS_IP and DHCP_OPTIONS as `[[subnet]]` tables: one subnet
//! per network, its `set:` ranges tagged, and DHCP_OPTIONS as the option engine's
//! entries (`crate::options`), whose `tag:` conditions those range tags satisfy.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use toml::{Table, Value};

use super::{dnsmasq, entries, get, HostFacts};
use crate::config::issues::Issues;
use crate::options;

/// One `[[subnet]]` being assembled from DHCP_RANGE, GATEWAY_IP, DNS_IP, DHCP_OPTIONS.
#[derive(Debug)]
struct SubnetPlan {
    network: Ipv4Net,
    tags: Vec<String>,
    /// `"a - b"`, or a `{ range, tag }` table for a `set:` range.
    ranges: Vec<Value>,
    lease_time: Option<(u32, String)>,
}

/// An address variable's value; `0.0.0.0` is this host, as in dnsmasq.
fn address(var: &'static str, v: &str, this_host: Option<Ipv4Addr>) -> Result<Ipv4Addr, String> {
    let a: Ipv4Addr = v
        .parse()
        .map_err(|_| format!("{v:?} is not an IPv4 address"))?;
    match (a.is_unspecified(), this_host) {
        (false, _) => Ok(a),
        (true, Some(h)) => Ok(h),
        (true, None) => Err(format!(
            "0.0.0.0 (this host) in {var} needs IRONIC_IP or PROVISIONING_IP"
        )),
    }
}

/// A DHCP_OPTIONS entry with each `0.0.0.0` value replaced by this host's address.
fn this_host_in(entry: &str, this_host: Option<Ipv4Addr>) -> Result<String, String> {
    let fields: Vec<String> = entry
        .split(',')
        .map(|f| match f.trim() {
            "0.0.0.0" => address("DHCP_OPTIONS", "0.0.0.0", this_host).map(|a| a.to_string()),
            other => Ok(other.to_string()),
        })
        .collect::<Result<_, _>>()?;
    Ok(fields.join(","))
}

/// The `[[subnet6]]` tables of DHCP_RANGE's IPv6 entries: one per prefix, with the
/// entry's lease time and DHCP_OPTIONS' `option6:` entries. (DNS_IP and GATEWAY_IP are
/// IPv4 settings.)
pub(super) fn subnets6(
    vars: &BTreeMap<String, String>,
    issues: &mut Issues,
    origin: &mut impl FnMut(String, &'static str, Option<String>),
) -> Vec<Value> {
    let mut plans: Vec<(ipnet::Ipv6Net, Vec<Value>, Option<u32>)> = Vec::new();
    for entry in entries(vars, "DHCP_RANGE")
        .into_iter()
        .filter(|e| dnsmasq::is_v6_range(e))
    {
        let r = match dnsmasq::range6(entry) {
            Ok(r) => r,
            Err(e) => {
                issues.add("DHCP_RANGE", format!("entry {entry:?}: {e}"));
                continue;
            }
        };
        let network = ipnet::Ipv6Net::new(r.begin, r.prefix)
            .expect("prefix checked")
            .trunc();
        let i = match plans.iter().position(|p| p.0 == network) {
            Some(i) => i,
            None => {
                plans.push((network, Vec::new(), None));
                plans.len() - 1
            }
        };
        let j = plans[i].1.len();
        let text = Value::String(format!("{} - {}", r.begin, r.end));
        plans[i].1.push(match r.tag {
            None => text,
            Some(tag) => {
                let mut t = Table::new();
                t.insert("range".into(), text);
                t.insert("tag".into(), Value::String(tag));
                Value::Table(t)
            }
        });
        plans[i].2 = plans[i].2.or(r.lease_time);
        origin(
            format!("subnet6[{i}].ranges[{j}]"),
            "DHCP_RANGE",
            Some(entry.into()),
        );
        origin(format!("subnet6[{i}]"), "DHCP_RANGE", Some(entry.into()));
    }
    // Bad entries are named once, by `subnets`, which reads DHCP_OPTIONS whole.
    let options6: Vec<&str> = entries(vars, "DHCP_OPTIONS")
        .into_iter()
        .filter(|e| options::dnsmasq::parse6(e).is_ok())
        .collect();
    if plans.is_empty() {
        if let Some(e) = options6.first() {
            issues.add(
                "DHCP_OPTIONS",
                format!("entry {e:?}: a DHCPv6 option, but no DHCP_RANGE entry is IPv6"),
            );
        }
    }
    plans
        .into_iter()
        .enumerate()
        .map(|(i, (network, ranges, lease))| {
            let mut t = Table::new();
            t.insert("network".into(), Value::String(network.to_string()));
            t.insert("ranges".into(), Value::Array(ranges));
            if let Some(secs) = lease {
                t.insert("lease_time".into(), Value::Integer(secs.into()));
            }
            if !options6.is_empty() {
                for (j, entry) in options6.iter().enumerate() {
                    origin(
                        format!("subnet6[{i}].options[{j}]"),
                        "DHCP_OPTIONS",
                        Some(entry.to_string()),
                    );
                }
                let list = options6.iter().map(|e| Value::String(e.to_string()));
                t.insert("options".into(), Value::Array(list.collect()));
            }
            Value::Table(t)
        })
        .collect()
}

/// The `[[subnet]]` tables; `provisioning_net` is PROVISIONING_IP's prefix if it had one,
/// `ironic_ip` this host (for `DNS_IP=provisioning` and `0.0.0.0`).
pub(super) fn subnets(
    vars: &BTreeMap<String, String>,
    host: &HostFacts,
    provisioning_net: Option<Ipv4Net>,
    ironic_ip: Option<Ipv4Addr>,
    issues: &mut Issues,
    origin: &mut impl FnMut(String, &'static str, Option<String>),
) -> Vec<Value> {
    // Ranges: one subnet per network, each keeping the tags its ranges set.
    let mut subnets: Vec<SubnetPlan> = Vec::new();
    for entry in entries(vars, "DHCP_RANGE") {
        let bad = |issues: &mut Issues, why: String| {
            issues.add("DHCP_RANGE", format!("entry {entry:?}: {why}"));
        };
        if dnsmasq::is_v6_range(entry) {
            continue;
        }
        let r = match dnsmasq::range(entry) {
            Ok(r) => r,
            Err(e) => {
                bad(&mut *issues, e);
                continue;
            }
        };
        // Without a netmask dnsmasq takes the network of the interface address the
        // range lies in.
        let network = match r.prefix {
            Some(p) => Ipv4Net::new(r.begin, p).map(|n| n.trunc()).ok(),
            None => host
                .addresses
                .iter()
                .map(|(_, n)| *n)
                .chain(provisioning_net)
                .find(|n| n.contains(&r.begin) && n.contains(&r.end))
                .map(|n| n.trunc()),
        };
        let Some(network) = network else {
            bad(
                &mut *issues,
                "no netmask, and no address of this host is in its network: write it as begin,end,netmask".into(),
            );
            continue;
        };
        let i = match subnets.iter().position(|s| s.network == network) {
            Some(i) => i,
            None => {
                subnets.push(SubnetPlan {
                    network,
                    tags: Vec::new(),
                    ranges: Vec::new(),
                    lease_time: None,
                });
                subnets.len() - 1
            }
        };
        let s = &mut subnets[i];
        let j = s.ranges.len();
        let text = Value::String(format!("{} - {}", r.begin, r.end));
        s.ranges.push(match &r.tag {
            None => text,
            Some(tag) => {
                let mut t = Table::new();
                t.insert("range".into(), text);
                t.insert("tag".into(), Value::String(tag.clone()));
                Value::Table(t)
            }
        });
        s.tags.extend(r.tag);
        origin(
            format!("subnet[{i}].ranges[{j}]"),
            "DHCP_RANGE",
            Some(entry.into()),
        );
        origin(format!("subnet[{i}]"), "DHCP_RANGE", Some(entry.into()));
        if let Some(t) = r.lease_time {
            match &s.lease_time {
                Some((old, first)) if *old != t => bad(
                    &mut *issues,
                    format!("its lease time differs from {first:?} in the same network"),
                ),
                _ => s.lease_time = Some((t, entry.into())),
            }
        }
    }

    // DNS_IP and GATEWAY_IP: the subnet keys of every range (unset: none).
    let mut keys: Vec<(&'static str, Value, &'static str)> = Vec::new();
    if let Some(dns) = get(vars, "DNS_IP") {
        let dns = match dns {
            "provisioning" => ironic_ip.map(|a| a.to_string()).unwrap_or_default(),
            other => other.to_string(),
        };
        match address("DNS_IP", &dns, ironic_ip) {
            Ok(a) => keys.push((
                "dns",
                Value::Array(vec![Value::String(a.to_string())]),
                "DNS_IP",
            )),
            Err(e) => issues.add("DNS_IP", e),
        }
    }
    if let Some(gw) = get(vars, "GATEWAY_IP") {
        match address("GATEWAY_IP", gw, ironic_ip) {
            Ok(a) => keys.push(("router", Value::String(a.to_string()), "GATEWAY_IP")),
            Err(e) => issues.add("GATEWAY_IP", e),
        }
    }
    // DHCP_OPTIONS: every entry in the option engine's syntax, in every subnet's
    // `options`; a range's `set:` tag decides where a `tag:` entry holds, as in dnsmasq.
    let set_tags: Vec<String> = subnets
        .iter()
        .flat_map(|s| s.tags.iter().cloned())
        .chain(
            entries(vars, "DHCP_RANGE")
                .into_iter()
                .filter(|e| dnsmasq::is_v6_range(e))
                .filter_map(|e| dnsmasq::range6(e).ok()?.tag),
        )
        .chain(
            entries(vars, "DHCP_HOSTS")
                .into_iter()
                .filter_map(|e| dnsmasq::host(e).ok())
                .flat_map(|h| h.tags),
        )
        .collect();
    let mut option_entries: Vec<(String, &str)> = Vec::new();
    for entry in entries(vars, "DHCP_OPTIONS") {
        let parsed = this_host_in(entry, ironic_ip).and_then(|text| {
            // `option6:` entries go to the `[[subnet6]]` tables (`subnets6`).
            let (tags, v6) = match options::dnsmasq::parse_any(&text).map_err(|e| e.to_string())? {
                options::dnsmasq::AnyRule::V4(r) => (r.tags, false),
                options::dnsmasq::AnyRule::V6(r) => (r.tags, true),
            };
            let unset = tags.iter().find(|t| {
                !t.negated
                    && !set_tags.contains(&t.name)
                    && !options::BUILTIN_TAGS.contains(&t.name.as_str())
            });
            match unset {
                Some(t) => Err(format!(
                    "no DHCP_RANGE or DHCP_HOSTS entry sets tag {:?}",
                    t.name
                )),
                None => Ok((text, v6)),
            }
        });
        match parsed {
            Ok((_, true)) => {}
            Ok((text, false)) => option_entries.push((text, entry)),
            Err(e) => issues.add("DHCP_OPTIONS", format!("entry {entry:?}: {e}")),
        }
    }

    let mut subnet_values = Vec::new();
    for (i, s) in subnets.into_iter().enumerate() {
        let mut t = Table::new();
        t.insert("network".into(), Value::String(s.network.to_string()));
        t.insert("ranges".into(), Value::Array(s.ranges));
        if let Some((secs, _)) = s.lease_time {
            t.insert("lease_time".into(), Value::Integer(secs.into()));
        }
        for (key, value, var) in &keys {
            origin(format!("subnet[{i}].{key}"), var, None);
            t.insert((*key).into(), value.clone());
        }
        if !option_entries.is_empty() {
            for (j, (_, entry)) in option_entries.iter().enumerate() {
                origin(
                    format!("subnet[{i}].options[{j}]"),
                    "DHCP_OPTIONS",
                    Some(entry.to_string()),
                );
            }
            let list = option_entries
                .iter()
                .map(|(text, _)| Value::String(text.clone()))
                .collect();
            t.insert("options".into(), Value::Array(list));
        }
        subnet_values.push(Value::Table(t));
    }

    subnet_values
}
