//! Turns a [`RawConfig`] into a [`Config`], collecting every invalid key with its reason.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use ipnet::Ipv4Net;

use super::raw::{RawBoot, RawConfig, RawDhcp, RawHost, RawSubnet};
use super::{
    BootSettings, Config, ConfigIssue, DhcpSettings, Host, LogFormat, Subnet, TftpListener,
};
use crate::mac::MacAddr;
use crate::tftp::{RawTftp, TftpSettings};

/// Longest boot file name that fits the BOOTP `file` field with its NUL (RFC 2131 §2).
const MAX_BOOT_FILE: usize = 127;

#[derive(Default)]
struct Issues(Vec<ConfigIssue>);

impl Issues {
    fn add(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.0.push(ConfigIssue {
            key: key.into(),
            reason: reason.into(),
        });
    }

    fn ip(&mut self, key: &str, s: &str) -> Option<Ipv4Addr> {
        match s.trim().parse() {
            Ok(ip) => Some(ip),
            Err(_) => {
                self.add(key, "not an IPv4 address");
                None
            }
        }
    }

    fn opt_ip(&mut self, key: &str, s: &Option<String>) -> Option<Ipv4Addr> {
        s.as_deref().and_then(|s| self.ip(key, s))
    }

    fn ips(&mut self, key: &str, list: &[String]) -> Vec<Ipv4Addr> {
        list.iter()
            .enumerate()
            .filter_map(|(i, s)| self.ip(&format!("{key}[{i}]"), s))
            .collect()
    }
}

pub(super) fn validate(raw: RawConfig) -> Result<Config, Vec<ConfigIssue>> {
    let mut issues = Issues::default();

    let log_format = match raw.log_format.as_deref().unwrap_or("text") {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        _ => {
            issues.add("log_format", "must be \"text\" or \"json\"");
            LogFormat::Text
        }
    };
    let state_dir = PathBuf::from(raw.state_dir.unwrap_or_else(|| "/var/lib/shardboot".into()));
    if state_dir.as_os_str().is_empty() {
        issues.add("state_dir", "must not be empty");
    }

    let dhcp = dhcp_settings(raw.dhcp, &mut issues);
    let boot = boot_settings(raw.boot, &mut issues);
    let tftp = tftp_listener(raw.tftp, &mut issues);
    let mut add = |k: String, r: String| issues.add(k, r);
    let http = super::routing::http(raw.http, &mut add);
    let members = super::routing::members(raw.members, &mut add);
    let owner = super::routing::owner(raw.owner, &members, &mut add);
    let health = super::sources::health(raw.health, &mut add);
    let ra = super::sources::ra(raw.ra, &mut add);
    let subnets: Vec<Subnet> = raw
        .subnets
        .into_iter()
        .enumerate()
        .filter_map(|(i, s)| subnet(i, s, &mut issues))
        .collect();
    check_subnet_overlap(&subnets, &mut issues);
    let hosts = hosts(raw.hosts, &subnets, &mut issues);

    if issues.0.is_empty() {
        Ok(Config {
            state_dir,
            log_format,
            dhcp,
            boot,
            tftp,
            http,
            owner,
            health,
            ra,
            members,
            subnets,
            hosts,
        })
    } else {
        Err(issues.0)
    }
}

fn dhcp_settings(raw: RawDhcp, issues: &mut Issues) -> DhcpSettings {
    let interfaces = raw.interfaces.unwrap_or_default();
    for (i, name) in interfaces.iter().enumerate() {
        // IFNAMSIZ is 16 including the NUL.
        if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '\0']) {
            issues.add(
                format!("dhcp.interfaces[{i}]"),
                "not a valid interface name",
            );
        }
    }
    let port = raw.port.unwrap_or(67);
    if port == 0 {
        issues.add("dhcp.port", "must not be 0");
    }
    let offer_hold_secs = raw.offer_hold_secs.unwrap_or(60);
    if offer_hold_secs == 0 {
        issues.add("dhcp.offer_hold_secs", "must be at least 1");
    }
    let reclaim_interval_secs = raw.reclaim_interval_secs.unwrap_or(10);
    if reclaim_interval_secs == 0 {
        issues.add("dhcp.reclaim_interval_secs", "must be at least 1");
    }
    if raw.takeover_secs == Some(0) {
        issues.add(
            "dhcp.takeover_secs",
            "must be at least 1 (0 would make every member answer every client)",
        );
    }
    let hostsdir = raw.hostsdir.as_deref().map(PathBuf::from);
    if hostsdir.as_ref().is_some_and(|d| !d.is_absolute()) {
        issues.add("dhcp.hostsdir", "must be an absolute path");
    }
    let hostsdir_poll_ms = raw.hostsdir_poll_ms.unwrap_or(1_000);
    if !(100..=60_000).contains(&hostsdir_poll_ms) {
        issues.add("dhcp.hostsdir_poll_ms", "must be between 100 and 60000");
    }
    DhcpSettings {
        enabled: raw.enabled.unwrap_or(true),
        interfaces,
        port,
        server_id: issues.opt_ip("dhcp.server_id", &raw.server_id),
        never_nak: raw.never_nak.unwrap_or(false),
        known_only: raw.known_only.unwrap_or(false),
        offer_hold_secs,
        decline_hold_secs: raw.decline_hold_secs.unwrap_or(600),
        reclaim_interval_secs,
        takeover_secs: raw.takeover_secs.unwrap_or(5),
        hostsdir,
        hostsdir_poll: std::time::Duration::from_millis(hostsdir_poll_ms),
    }
}

fn tftp_listener(mut raw: RawTftp, issues: &mut Issues) -> TftpListener {
    let enabled = raw.enabled.take().unwrap_or(true);
    let listen = match raw.listen.take().as_deref().unwrap_or("0.0.0.0:69").parse() {
        Ok(a) => a,
        Err(_) => {
            issues.add("tftp.listen", "must be an address:port such as 0.0.0.0:69");
            "0.0.0.0:69".parse().expect("valid literal")
        }
    };
    let settings = match TftpSettings::try_from(raw) {
        Ok(s) => s,
        Err(e) => {
            issues.add(format!("tftp.{}", e.key), e.reason);
            TftpSettings::default()
        }
    };
    TftpListener {
        enabled,
        listen,
        settings,
    }
}

/// A boot file name or URL is placed into DHCP replies verbatim, so it must be short
/// printable ASCII with no quoting characters.
fn check_boot_value(key: &str, value: &str, issues: &mut Issues) {
    if value.is_empty() || value.len() > MAX_BOOT_FILE {
        issues.add(key, format!("must be 1 to {MAX_BOOT_FILE} characters"));
    } else if !value.bytes().all(|b| b.is_ascii_graphic()) || value.contains(['"', '\'', '\\']) {
        issues.add(
            key,
            "must be printable ASCII without spaces, quotes or backslashes",
        );
    }
}

fn boot_settings(raw: RawBoot, issues: &mut Issues) -> BootSettings {
    let tftp_server = issues.opt_ip("boot.tftp_server", &raw.tftp_server);
    let http_url = raw.http_url.map(|u| u.trim_end_matches('/').to_string());
    if let Some(u) = &http_url {
        check_boot_value("boot.http_url", u, issues);
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            issues.add("boot.http_url", "must start with http:// or https://");
        }
    }
    let mut file = |key: &str, value: Option<String>, default: &str| {
        let v = value.unwrap_or_else(|| default.to_string());
        check_boot_value(&format!("boot.{key}"), &v, issues);
        v
    };
    let settings = BootSettings {
        ipxe_script: file("ipxe_script", raw.ipxe_script, "boot.ipxe"),
        bios: file("bios", raw.bios, "undionly.kpxe"),
        uefi_ia32: file("uefi_ia32", raw.uefi_ia32, "ipxe-ia32.efi"),
        uefi_x64: file("uefi_x64", raw.uefi_x64, "snponly.efi"),
        uefi_arm64: file("uefi_arm64", raw.uefi_arm64, "snponly-arm64.efi"),
        http_x64: file("http_x64", raw.http_x64, "snponly.efi"),
        http_arm64: file("http_arm64", raw.http_arm64, "snponly-arm64.efi"),
        tftp_server,
        http_url,
    };
    check_composed_urls(&settings, issues);
    settings
}

/// The URLs iPXE and UEFI HTTP Boot get are composed from `http_url` and a file name;
/// each must fit one option 67 (255 octets, RFC 2132 §2): a longer one would have to
/// be split (RFC 3396), which not all firmware reads.
fn check_composed_urls(b: &BootSettings, issues: &mut Issues) {
    const MAX_OPTION: usize = 255;
    // Without http_url the base is http://<interface address>:<port>.
    let base = b
        .http_url
        .as_ref()
        .map_or("http://255.255.255.255:65535".len(), String::len);
    let composed = [
        (
            "boot.ipxe_script",
            base + 1 + b.ipxe_script.len(),
            &b.ipxe_script,
        ),
        (
            "boot.http_x64",
            base + "/ipxe/".len() + b.http_x64.len(),
            &b.http_x64,
        ),
        (
            "boot.http_arm64",
            base + "/ipxe/".len() + b.http_arm64.len(),
            &b.http_arm64,
        ),
    ];
    for (key, len, file) in composed {
        if len > MAX_OPTION && !file.contains("://") {
            issues.add(
                key,
                format!(
                    "with boot.http_url its URL is {len} octets; DHCP option 67 holds {MAX_OPTION}"
                ),
            );
        }
    }
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
    let ranges: Vec<_> = raw
        .ranges
        .iter()
        .enumerate()
        .filter_map(|(j, r)| parse_range(&format!("subnet[{i}].ranges[{j}]"), r, network, issues))
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
        if d.is_empty()
            || d.len() > 253
            || !d
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            issues.add(
                k("domain"),
                "must be a DNS name (letters, digits, '-' and '.')",
            );
        }
    }
    if let Some(mtu) = raw.mtu {
        // RFC 2132 §5.1: the minimum legal MTU is 68.
        if mtu < 68 {
            issues.add(k("mtu"), "must be at least 68");
        }
    }
    Some(Subnet {
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

fn check_subnet_overlap(subnets: &[Subnet], issues: &mut Issues) {
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

fn hosts(raw: Vec<RawHost>, subnets: &[Subnet], issues: &mut Issues) -> Vec<Host> {
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
            });
        }
    }
    out
}
