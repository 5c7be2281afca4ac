//! ironic-image's dnsmasq environment as a shardboot configuration (`--env ironic-image`).
//!
//! ironic-image's `rundnsmasq` renders a dnsmasq.conf from these variables; IrSO sets
//! them on its dnsmasq container. Ironic's own database variables give several members
//! their shared lease store (`database`). This module reads the same variables with the same
//! defaults and builds the config table the TOML path validates, remembering which
//! variable set each key, so a problem is reported under the variable's name. A value
//! shardboot cannot honour is an issue too, never silently dropped.
//!
//! Pure: the variables and what the host looks like ([`HostFacts`]) come in as
//! arguments.

mod database;
mod dnsmasq;
mod hosts;
mod subnets;
#[cfg(test)]
mod tests;
mod tls;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use ipnet::Ipv4Net;
use toml::{Table, Value};

use super::issues::Issues;
use super::ConfigIssue;

pub use database::{DATABASE_CA_FILE, DATABASE_CREDENTIALS_DIR, DATABASE_NAME, DATABASE_VAR};
pub use tls::{IPXE_CERT_FILE, IPXE_KEY_FILE, IRONIC_CA_FILE};

/// Where ironic-image looks for a user's iPXE binaries unless `IPXE_CUSTOM_FIRMWARE_DIR`
/// says otherwise.
pub const CUSTOM_FIRMWARE_DIR: &str = "/shared/custom_ipxe_firmware";
/// The image's own iPXE binaries, under the names ironic-image gives them
/// (`undionly.kpxe`, `snponly-x86_64.efi`), as in ironic-image.
pub const BUILTIN_FIRMWARE_DIR: &str = "/tftpboot";

/// What the mapping needs to know about the host, gathered by the caller.
#[derive(Debug, Clone, Default)]
pub struct HostFacts {
    /// Every (interface, IPv4 address/prefix) of this host.
    pub addresses: Vec<(String, Ipv4Net)>,
    /// Every (interface, MAC) of this host, for `PROVISIONING_MACS`.
    pub macs: Vec<(String, crate::mac::MacAddr)>,
    /// Whether [`custom_firmware_dir`] is readable (then it is the TFTP root).
    pub custom_firmware_readable: bool,
    /// Whether [`DATABASE_CA_FILE`] is readable (then the shared store requires TLS
    /// verified with it).
    pub database_ca_readable: bool,
    /// Whether [`IPXE_CERT_FILE`] is readable (then iPXE boots over TLS, as in
    /// ironic-image).
    pub ipxe_cert_readable: bool,
    /// Whether [`IRONIC_CA_FILE`] is readable (then chain checks trust it).
    pub ironic_ca_readable: bool,
}

/// The interface holding the first of `macs` (comma- or space-separated) that this
/// host has, else why not.
fn interface_of_macs(macs: &str, host: &[(String, crate::mac::MacAddr)]) -> Result<String, String> {
    let mut wanted = Vec::new();
    for m in macs
        .split([',', ' '])
        .map(str::trim)
        .filter(|m| !m.is_empty())
    {
        wanted.push(
            m.parse::<crate::mac::MacAddr>()
                .map_err(|_| format!("{m:?} is not a MAC address"))?,
        );
    }
    wanted
        .iter()
        .find_map(|w| host.iter().find(|(_, m)| m == w).map(|(i, _)| i.clone()))
        .ok_or_else(|| "no interface of this host has any of these MACs".to_string())
}

/// The custom firmware directory the variables name (ironic-image's default if unset).
pub fn custom_firmware_dir(vars: &BTreeMap<String, String>) -> PathBuf {
    PathBuf::from(get(vars, "IPXE_CUSTOM_FIRMWARE_DIR").unwrap_or(CUSTOM_FIRMWARE_DIR))
}

/// The config table derived from the environment, and where each key came from.
#[derive(Debug)]
pub(super) struct Derived {
    pub table: Table,
    origins: Vec<Origin>,
}

/// The variable (and entry of it) that set a config key.
#[derive(Debug, Clone)]
struct Origin {
    key: String,
    var: &'static str,
    entry: Option<String>,
}

/// A value as ironic-image's shell reads it: `${X:-default}` treats empty as unset.
fn get<'a>(vars: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    vars.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// `;`-separated entries, as ironic-image's template splits them.
fn entries<'a>(vars: &'a BTreeMap<String, String>, name: &str) -> Vec<&'a str> {
    get(vars, name)
        .map(|v| {
            v.split(';')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// An address as ironic-image's `parse_ip_address` takes it (a `/prefix` is allowed).
fn address(s: &str) -> Result<(Ipv4Addr, Option<Ipv4Net>), String> {
    if s.contains(':') {
        return Err(format!(
            "{s:?}: an IPv6 address here needs the IPv6 form of the variable"
        ));
    }
    if let Ok(net) = s.parse::<Ipv4Net>() {
        return Ok((net.addr(), Some(net)));
    }
    s.parse()
        .map(|a| (a, None))
        .map_err(|_| format!("{s:?} is not an IPv4 address"))
}

/// An IPv6 address, with or without a `/prefix`.
fn address6(s: &str) -> Option<std::net::Ipv6Addr> {
    s.parse::<ipnet::Ipv6Net>()
        .map(|n| n.addr())
        .or_else(|_| s.parse())
        .ok()
}

/// How long `serve` waits for `PROVISIONING_IP` to appear on an interface when
/// `IRONIC_IP_WAIT_TIMEOUT` does not say.
const ADDRESS_WAIT_DEFAULT_SECS: u64 = 60;

/// The address `serve` waits for before it starts, as ironic-image's start script waits
/// for `PROVISIONING_IP` to be configured on an interface (a keepalived VIP arrives
/// late), and for how long (`IRONIC_IP_WAIT_TIMEOUT`, seconds). `None`: nothing to
/// wait for (no `PROVISIONING_IP`, or `IRONIC_IP` names the address outright).
pub fn awaited_address(
    vars: &BTreeMap<String, String>,
) -> Option<(std::net::IpAddr, std::time::Duration)> {
    if get(vars, "IRONIC_IP").is_some() {
        return None;
    }
    let v = get(vars, "PROVISIONING_IP")?;
    let ip = match address6(v) {
        Some(a) => std::net::IpAddr::V6(a),
        None => std::net::IpAddr::V4(address(v).ok()?.0),
    };
    let secs = get(vars, "IRONIC_IP_WAIT_TIMEOUT")
        .and_then(|s| s.parse().ok())
        .unwrap_or(ADDRESS_WAIT_DEFAULT_SECS);
    Some((ip, std::time::Duration::from_secs(secs)))
}

/// Derives the configuration table from ironic-image's variables.
pub(super) fn derive(
    vars: &BTreeMap<String, String>,
    host: &HostFacts,
) -> Result<Derived, Vec<ConfigIssue>> {
    let mut issues = Issues::default();
    let mut origins: Vec<Origin> = Vec::new();
    let mut origin = |key: String, var: &'static str, entry: Option<String>| {
        origins.push(Origin { key, var, entry });
    };
    let mut table = Table::new();
    let mut dhcp = Table::new();
    let mut boot = Table::new();
    let mut tftp = Table::new();
    let mut http = Table::new();

    // Which address is "this host": ironic-image's wait_for_interface_or_ip order.
    // PROVISIONING_INTERFACE, else the interface holding one of PROVISIONING_MACS (what
    // IrSO sets for `macAddresses`), as ironic-image's get_provisioning_interface.
    let iface_var: Option<(String, &'static str)> = match (
        get(vars, "PROVISIONING_INTERFACE"),
        get(vars, "PROVISIONING_MACS"),
    ) {
        (Some(i), _) => Some((i.to_string(), "PROVISIONING_INTERFACE")),
        (None, Some(macs)) => match interface_of_macs(macs, &host.macs) {
            Ok(i) => Some((i, "PROVISIONING_MACS")),
            Err(e) => {
                issues.add("PROVISIONING_MACS", e);
                None
            }
        },
        (None, None) => None,
    };
    let mut provisioning_net = None;
    let mut ip_interface = None;
    // An IPv6 IRONIC_IP or PROVISIONING_IP (an IPv6-only provisioning network): the
    // boot URLs and the HTTP listener take it, in brackets; v4 settings have none.
    let ironic_ip6 = get(vars, "IRONIC_IP")
        .or_else(|| get(vars, "PROVISIONING_IP"))
        .and_then(address6);
    let ironic_ip = if ironic_ip6.is_some() {
        None
    } else if let Some(v) = get(vars, "IRONIC_IP") {
        address(v)
            .map_err(|e| issues.add("IRONIC_IP", e))
            .ok()
            .map(|a| a.0)
    } else if let Some(v) = get(vars, "PROVISIONING_IP") {
        match address(v) {
            Ok((a, net)) => {
                provisioning_net = net;
                // ironic-image serves the interface that holds the address.
                ip_interface = host
                    .addresses
                    .iter()
                    .find(|(_, n)| n.addr() == a)
                    .map(|(i, _)| i.clone());
                Some(a)
            }
            Err(e) => {
                issues.add("PROVISIONING_IP", e);
                None
            }
        }
    } else if let Some((i, var)) = &iface_var {
        let first = host
            .addresses
            .iter()
            .find(|(n, _)| n == i)
            .map(|(_, a)| a.addr());
        if first.is_none() && get(vars, "IRONIC_HTTP_URL").is_none() {
            issues.add(
                *var,
                format!("{i} has no IPv4 address on this host; set IRONIC_IP or PROVISIONING_IP"),
            );
        }
        first
    } else {
        if get(vars, "PROVISIONING_MACS").is_none() {
            issues.add(
                "PROVISIONING_IP",
                "one of IRONIC_IP, PROVISIONING_IP, PROVISIONING_INTERFACE or PROVISIONING_MACS is required",
            );
        }
        None
    };

    // dnsmasq `interface=` is PROVISIONING_INTERFACE, replaced by the interface of
    // PROVISIONING_IP when that is how the address was found.
    let interface = ip_interface.map(|i| (i, "PROVISIONING_IP")).or(iface_var);
    if let Some((i, var)) = &interface {
        dhcp.insert(
            "interfaces".into(),
            Value::Array(vec![Value::String(i.clone())]),
        );
        origin("dhcp.interfaces".into(), var, None);
    }

    let subnet_values = subnets::subnets(
        vars,
        host,
        provisioning_net,
        ironic_ip,
        &mut issues,
        &mut origin,
    );
    let subnet6_values = subnets::subnets6(vars, &mut issues, &mut origin);
    dhcp.insert("enabled".into(), Value::Boolean(!subnet_values.is_empty()));
    if let (Some((i, var)), false) = (&interface, subnet6_values.is_empty()) {
        let mut dhcp6 = Table::new();
        dhcp6.insert(
            "interfaces".into(),
            Value::Array(vec![Value::String(i.clone())]),
        );
        origin("dhcp6.interfaces".into(), var, None);
        table.insert("dhcp6".into(), Value::Table(dhcp6));
    }
    origin("dhcp".into(), "DHCP_RANGE", None);

    hosts::hosts(vars, &mut table, &mut issues, &mut origin);
    if hosts::known_only(vars, &mut issues) {
        dhcp.insert("known_only".into(), Value::Boolean(true));
    }
    hosts::except_interfaces(
        vars,
        host,
        interface.as_ref().map(|i| i.0.as_str()),
        &subnet_values,
        &mut issues,
    );

    // Boot files: ironic-image's dhcp-boot lines, next-server IRONIC_IP.
    if let Some(ip) = ironic_ip {
        boot.insert("tftp_server".into(), Value::String(ip.to_string()));
        // Named after the variable the address came from, as the operator wrote it.
        let var = match &interface {
            _ if get(vars, "IRONIC_IP").is_some() => "IRONIC_IP",
            _ if get(vars, "PROVISIONING_IP").is_some() => "PROVISIONING_IP",
            Some((_, var)) => var,
            None => "IRONIC_IP",
        };
        origin("boot.tftp_server".into(), var, None);
    }
    let snp = get(vars, "SNP_BASENAME").unwrap_or("snponly");
    boot.insert("bios".into(), Value::String("undionly.kpxe".into()));
    // ironic-image tags only arch 7, 9 and 11 as EFI; every other arch (32-bit EFI
    // included) gets the BIOS file.
    boot.insert("uefi_ia32".into(), Value::String("undionly.kpxe".into()));
    for (key, arch) in [("uefi_x64", "x86_64"), ("uefi_arm64", "arm64")] {
        boot.insert(key.into(), Value::String(format!("{snp}-{arch}.efi")));
        origin(format!("boot.{key}"), "SNP_BASENAME", None);
    }
    let http_port = match get(vars, "HTTP_PORT").map(str::parse::<u16>) {
        None => Some(80),
        Some(Ok(p)) if p > 0 => Some(p),
        Some(_) => {
            issues.add("HTTP_PORT", "must be a port number (1 to 65535)");
            None
        }
    };
    // iPXE clients chain Ironic's own boot.ipxe, as with dnsmasq.
    let http_url = get(vars, "IRONIC_HTTP_URL")
        .map(str::to_string)
        .or_else(|| match (ironic_ip, ironic_ip6) {
            (Some(v4), _) => Some(format!("http://{v4}:{}", http_port?)),
            (None, Some(v6)) => Some(format!("http://[{v6}]:{}", http_port?)),
            (None, None) => None,
        });
    if let Some(u) = http_url {
        boot.insert("http_url".into(), Value::String(u));
        let var = if get(vars, "IRONIC_HTTP_URL").is_some() {
            "IRONIC_HTTP_URL"
        } else {
            "HTTP_PORT"
        };
        origin("boot.http_url".into(), var, None);
        origin("boot.ipxe_script".into(), var, None);
    }
    if get(vars, "DNS_PORT").is_some_and(|p| p != "0") {
        issues.add("DNS_PORT", "shardboot serves no DNS; leave it unset or 0");
    }

    // The TFTP root: the user's firmware when readable, else the image's own, under
    // ironic-image's file names (so no aliases).
    let root = if host.custom_firmware_readable {
        custom_firmware_dir(vars)
    } else {
        PathBuf::from(BUILTIN_FIRMWARE_DIR)
    };
    tftp.insert("root".into(), Value::String(root.display().to_string()));
    tftp.insert("aliases".into(), Value::Table(Table::new()));
    origin("tftp".into(), "IPXE_CUSTOM_FIRMWARE_DIR", None);

    // ironic-image binds its HTTP services to IRONIC_IP unless this is true; so does
    // shardboot's HTTP listener. DHCP and TFTP follow the interface, as dnsmasq does.
    match get(vars, "LISTEN_ALL_INTERFACES")
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("true") => {}
        Some("false") => {
            let listen = match (ironic_ip, ironic_ip6) {
                (Some(v4), _) => Some(format!("{v4}:8080")),
                (None, Some(v6)) => Some(format!("[{v6}]:8080")),
                (None, None) => None,
            };
            if let Some(l) = listen {
                http.insert("listen".into(), Value::String(l));
                origin("http.listen".into(), "LISTEN_ALL_INTERFACES", None);
            }
        }
        Some(other) => issues.add(
            "LISTEN_ALL_INTERFACES",
            format!("{other:?}: must be true or false"),
        ),
    }

    // The TLS listener beside the plain one, on the same address.
    let listen_ip = match http.get("listen").and_then(Value::as_str) {
        Some(l) => l
            .rsplit_once(':')
            .map_or("0.0.0.0", |(ip, _)| ip)
            .to_string(),
        None if ironic_ip6.is_some() => "[::]".into(),
        None => "0.0.0.0".into(),
    };
    tls::tls(
        vars,
        host,
        &listen_ip,
        &mut http,
        &mut boot,
        &mut issues,
        &mut origin,
    );

    let store = database::store(vars, host, &mut issues);
    if store.is_some() {
        origin("store".into(), "IRONIC_USE_MARIADB", None);
    }

    issues.finish()?;
    if let Some(store) = store {
        table.insert("store".into(), Value::Table(store));
    }
    table.insert("dhcp".into(), Value::Table(dhcp));
    table.insert("boot".into(), Value::Table(boot));
    table.insert("tftp".into(), Value::Table(tftp));
    if !http.is_empty() {
        table.insert("http".into(), Value::Table(http));
    }
    if !subnet_values.is_empty() {
        table.insert("subnet".into(), Value::Array(subnet_values));
    }
    if !subnet6_values.is_empty() {
        table.insert("subnet6".into(), Value::Array(subnet6_values));
    }
    Ok(Derived { table, origins })
}

impl Derived {
    /// The most specific origin recorded for `key` (`subnet[0].router`), if any.
    fn origin_of(&self, key: &str) -> Option<&Origin> {
        let covers = |o: &&Origin| {
            key == o.key
                || key.starts_with(&format!("{}.", o.key))
                || key.starts_with(&format!("{}[", o.key))
        };
        self.origins
            .iter()
            .filter(covers)
            .max_by_key(|o| o.key.len())
    }

    /// The variable that set `key` (`subnet[0].router`); `None` for what the mapping
    /// fixes whatever the variables say.
    pub(super) fn var_for(&self, key: &str) -> Option<&'static str> {
        self.origin_of(key).map(|o| o.var)
    }
}

/// Puts each issue under the variable that set its key: `DHCP_RANGE: entry "…": …`.
pub(super) fn rename(issues: Vec<ConfigIssue>, derived: &Derived) -> Vec<ConfigIssue> {
    issues
        .into_iter()
        .map(|issue| match derived.origin_of(&issue.key) {
            Some(o) => ConfigIssue {
                key: o.var.to_string(),
                reason: match &o.entry {
                    Some(e) => format!("entry {e:?}: {} (as {})", issue.reason, issue.key),
                    None => format!("{} (as {})", issue.reason, issue.key),
                },
            },
            None => issue,
        })
        .collect()
}
