//! DHCP_RANGE, GATEWAY_IP, DNS_IP and DHCP_OPTIONS as `[[subnet]]` tables: one subnet
//! per network, each remembering the `set:` tags of its ranges so tagged options find
//! it.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use toml::{Table, Value};

use super::dnsmasq::{self, SubnetOption};
use super::{entries, get, HostFacts};
use crate::config::issues::Issues;

/// One `[[subnet]]` being assembled from DHCP_RANGE, GATEWAY_IP, DNS_IP, DHCP_OPTIONS.
#[derive(Debug)]
struct SubnetPlan {
    network: Ipv4Net,
    tags: Vec<String>,
    ranges: Vec<String>,
    lease_time: Option<(u32, String)>,
    /// Option values as config values, each with its origin.
    options: BTreeMap<&'static str, (Value, &'static str, Option<String>)>,
}

/// The config key an option sets and its value from the dnsmasq values.
fn option_value(
    option: SubnetOption,
    values: &[String],
    this_host: Option<Ipv4Addr>,
) -> Result<(&'static str, Value), String> {
    // dnsmasq: 0.0.0.0 in an address option means the machine dnsmasq runs on.
    let ip = |v: &String| -> Result<Value, String> {
        let a: Ipv4Addr = v
            .parse()
            .map_err(|_| format!("{v:?} is not an IPv4 address"))?;
        match (a.is_unspecified(), this_host) {
            (false, _) => Ok(Value::String(a.to_string())),
            (true, Some(h)) => Ok(Value::String(h.to_string())),
            (true, None) => Err("0.0.0.0 (this host) needs IRONIC_IP or PROVISIONING_IP".into()),
        }
    };
    let list = || -> Result<Value, String> {
        Ok(Value::Array(
            values.iter().map(ip).collect::<Result<_, _>>()?,
        ))
    };
    let single = |what: &str| -> Result<Option<&String>, String> {
        match values {
            [] => Ok(None),
            [v] => Ok(Some(v)),
            _ => Err(format!("{what} takes one value")),
        }
    };
    Ok(match option {
        SubnetOption::Router => (
            "router",
            single("router")?.map_or(Ok(Value::Boolean(false)), ip)?,
        ),
        SubnetOption::DnsServer => ("dns", list()?),
        SubnetOption::NtpServer => ("ntp", list()?),
        SubnetOption::DomainName => (
            "domain",
            single("domain-name")?.map_or(Value::Boolean(false), |v| Value::String(v.clone())),
        ),
        SubnetOption::Mtu => (
            "mtu",
            match single("mtu")? {
                None => Value::Boolean(false),
                Some(v) => Value::Integer(
                    v.parse::<u16>()
                        .map_err(|_| format!("{v:?} is not an MTU"))?
                        .into(),
                ),
            },
        ),
    })
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
                    options: BTreeMap::new(),
                });
                subnets.len() - 1
            }
        };
        let s = &mut subnets[i];
        let j = s.ranges.len();
        s.ranges.push(format!("{} - {}", r.begin, r.end));
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

    // The template's own options first: DNS_IP and GATEWAY_IP go to every range
    // (unset: none), then DHCP_OPTIONS, tagged entries replacing untagged ones as in
    // dnsmasq.
    let mut global: Vec<(SubnetOption, Vec<String>, &'static str, Option<String>)> = Vec::new();
    if let Some(dns) = get(vars, "DNS_IP") {
        let dns = if dns == "provisioning" {
            ironic_ip.map(|a| a.to_string()).unwrap_or_default()
        } else {
            dns.to_string()
        };
        global.push((SubnetOption::DnsServer, vec![dns], "DNS_IP", None));
    }
    if let Some(gw) = get(vars, "GATEWAY_IP") {
        global.push((
            SubnetOption::Router,
            vec![gw.to_string()],
            "GATEWAY_IP",
            None,
        ));
    }
    let mut tagged = Vec::new();
    for entry in entries(vars, "DHCP_OPTIONS") {
        match dnsmasq::option(entry) {
            Ok(o) if o.tags.is_empty() => {
                if let Some(g) = global.iter().find(|g| g.0 == o.option) {
                    issues.add(
                        "DHCP_OPTIONS",
                        format!(
                            "entry {entry:?}: {} is already set by {}",
                            o.option.name(),
                            g.2
                        ),
                    );
                } else {
                    global.push((o.option, o.values, "DHCP_OPTIONS", Some(entry.into())));
                }
            }
            Ok(o) => tagged.push((o, entry)),
            Err(e) => issues.add("DHCP_OPTIONS", format!("entry {entry:?}: {e}")),
        }
    }
    let apply = |s: &mut SubnetPlan,
                 option: SubnetOption,
                 values: &[String],
                 var: &'static str,
                 entry: Option<String>,
                 issues: &mut Issues| {
        match option_value(option, values, ironic_ip) {
            Ok((key, value)) => {
                s.options.insert(key, (value, var, entry));
            }
            Err(e) => {
                let what = entry.map_or(String::new(), |e| format!("entry {e:?}: "));
                issues.add(var, format!("{what}{e}"));
            }
        }
    };
    // Without a range nothing is served, but a bad value is still a bad value.
    if subnets.is_empty() {
        for (option, values, var, entry) in &global {
            if let Err(e) = option_value(*option, values, ironic_ip) {
                let what = entry
                    .as_ref()
                    .map_or(String::new(), |e| format!("entry {e:?}: "));
                issues.add(*var, format!("{what}{e}"));
            }
        }
    }
    for s in subnets.iter_mut() {
        for (option, values, var, entry) in &global {
            apply(s, *option, values, var, entry.clone(), &mut *issues);
        }
    }
    for (o, entry) in &tagged {
        let matching: Vec<usize> = (0..subnets.len())
            .filter(|&i| o.tags.iter().all(|t| subnets[i].tags.contains(t)))
            .collect();
        if matching.is_empty() {
            issues.add(
                "DHCP_OPTIONS",
                format!("entry {entry:?}: no DHCP_RANGE entry sets every tag it names"),
            );
        }
        for i in matching {
            // Two tags of one network that want different values cannot both hold.
            if subnets[i].tags.len() > 1 {
                issues.add(
                    "DHCP_OPTIONS",
                    format!(
                        "entry {entry:?}: its range shares network {} with other tagged ranges; per-range options there wait for issue 16",
                        subnets[i].network
                    ),
                );
                continue;
            }
            apply(
                &mut subnets[i],
                o.option,
                &o.values,
                "DHCP_OPTIONS",
                Some(entry.to_string()),
                &mut *issues,
            );
        }
    }

    let mut subnet_values = Vec::new();
    for (i, s) in subnets.into_iter().enumerate() {
        let mut t = Table::new();
        t.insert("network".into(), Value::String(s.network.to_string()));
        t.insert(
            "ranges".into(),
            Value::Array(s.ranges.into_iter().map(Value::String).collect()),
        );
        if let Some((secs, _)) = s.lease_time {
            t.insert("lease_time".into(), Value::Integer(secs.into()));
        }
        for (key, (value, var, entry)) in s.options {
            origin(format!("subnet[{i}].{key}"), var, entry);
            // `false` stands for "sent to no one": the key is left out.
            if value != Value::Boolean(false) {
                t.insert(key.into(), value);
            }
        }
        subnet_values.push(Value::Table(t));
    }

    subnet_values
}
