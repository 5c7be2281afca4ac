//! `[dhcp]`: the DHCP listener and its timers.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::issues::Issues;

/// `[dhcp]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDhcp {
    enabled: Option<bool>,
    interfaces: Option<Vec<String>>,
    port: Option<u16>,
    server_id: Option<String>,
    never_nak: Option<bool>,
    known_only: Option<bool>,
    offer_hold_secs: Option<u32>,
    decline_hold_secs: Option<u32>,
    reclaim_interval_secs: Option<u32>,
    takeover_secs: Option<u16>,
    hostsdir: Option<String>,
    optsdir: Option<String>,
    proxy: Option<bool>,
    proxy_port: Option<u16>,
    hostsdir_poll_ms: Option<u64>,
    leasefile: Option<String>,
    relays: Option<Vec<String>>,
    max_offers: Option<u32>,
    receive_buffer_kib: Option<u32>,
    unknown_discovers_per_sec: Option<u32>,
    max_declined: Option<u32>,
    declines_per_mac: Option<u32>,
    conflict_probe_ms: Option<u64>,
    #[serde(default)]
    options: Vec<String>,
}

/// `[dhcp]` after validation.
#[derive(Debug, Clone)]
pub struct DhcpSettings {
    /// ProxyDHCP (`proxy`): another server hands out addresses; answer network-boot
    /// firmware with boot information only, on `port` and on `proxy_port`.
    pub proxy: bool,
    /// The PXE boot-server port a ProxyDHCP also answers on (4011, PXE spec §2.2.6).
    pub proxy_port: u16,
    /// Options for every subnet (`options`, dnsmasq `dhcp-option` syntax).
    pub options: Vec<crate::options::OptionRule>,
    /// The `option6:` entries of `options`: for every `[[subnet6]]`.
    pub options6: Vec<crate::options::OptionRule6>,
    /// Whether the DHCP listener runs at all.
    pub enabled: bool,
    /// Interfaces to bind; empty means every interface with an address in a subnet.
    pub interfaces: Vec<String>,
    /// UDP port to listen on (67 in production).
    pub port: u16,
    /// Server identifier (option 54) to advertise instead of the interface address.
    pub server_id: Option<Ipv4Addr>,
    /// Stay silent instead of sending DHCPNAK (some PXE ROMs give up on a NAK).
    pub never_nak: bool,
    /// Answer only MACs that have a `[[host]]` entry.
    pub known_only: bool,
    /// How long an offered address is held for the client, in seconds.
    pub offer_hold_secs: u32,
    /// How long a declined address is quarantined, in seconds.
    pub decline_hold_secs: u32,
    /// How often expired leases are reclaimed, in seconds: the pool-use metrics and
    /// ended transitions follow it; each DHCP decision frees what expired by its time.
    pub reclaim_interval_secs: u32,
    /// With several members: a client whose `secs` reaches this is answered by any
    /// member, not only its responsible one.
    pub takeover_secs: u16,
    /// A dnsmasq `dhcp-hostsdir` to follow (Ironic's PXE filter writes it).
    pub hostsdir: Option<PathBuf>,
    /// A dnsmasq `dhcp-optsdir` to follow (Ironic's dnsmasq DHCP provider writes it),
    /// polled like `hostsdir`.
    pub optsdir: Option<PathBuf>,
    /// How often the hosts directory is read for changes.
    pub hostsdir_poll: Duration,
    /// A dnsmasq-format lease file to keep up to date (Ironic's dnsmasq provider
    /// reads node addresses from it).
    pub leasefile: Option<PathBuf>,
    /// The DHCP relay agents whose word is taken: a packet with giaddr set is served
    /// only from a source inside one of these (port 67), and only then are giaddr,
    /// option 82 link selection and option 118 believed. Empty: no relay is trusted.
    pub relays: Vec<RelayRule>,
    /// The DHCPv6 relay agents whose word is taken: the IPv6 entries of `relays`. A
    /// Relay-forward is served only from a source inside one of these, and only then
    /// are its link-address and Interface-Id believed. Empty: no v6 relay is trusted.
    pub relays6: Vec<RelayRule6>,
    /// Offers outstanding at once; at the cap, unknown machines get no new offer (each
    /// holds an address for `offer_hold_secs`).
    pub max_offers: u32,
    /// Each DHCP socket's receive buffer, in KiB: what a storm may queue while the engine
    /// catches up (a DISCOVER takes about 650 bytes of it); beyond, the kernel drops
    /// (counted as `receive_buffer_full`).
    pub receive_buffer_kib: u32,
    /// DISCOVERs from unknown machines answered per second and per interface or relay;
    /// 0: no limit.
    pub unknown_discovers_per_sec: u32,
    /// Addresses quarantined by DECLINE at once; beyond it an unknown machine's
    /// DECLINE is ignored.
    pub max_declined: u32,
    /// DECLINEs one MAC, known or not, may make per `decline_hold_secs`.
    pub declines_per_mac: u32,
    /// How long an ICMP echo probe waits for an answer before the address is offered
    /// (`conflict_probe_ms`); `None`: no probes. A single instance probes every address
    /// its store never saw; several members probe what they inherit from a departed
    /// member (`dhcp::engine::probe`).
    pub conflict_probe: Option<Duration>,
}

/// One trusted relay source: a network the relay's address is in, and optionally the
/// interface it must arrive on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayRule {
    /// Where the relay's source address lies.
    pub network: ipnet::Ipv4Net,
    /// The interface it must come in on, if only one.
    pub interface: Option<String>,
}

impl RelayRule {
    /// Whether a relayed packet from `source` on `interface` comes from this relay.
    pub fn allows(&self, source: Ipv4Addr, interface: &str) -> bool {
        self.network.contains(&source) && self.interface.as_deref().is_none_or(|i| i == interface)
    }
}

/// One trusted DHCPv6 relay source (RFC 8415 §19): the network the relay's source
/// address is in (the outermost relay's, the one that sends to this server), and
/// optionally the interface it must arrive on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayRule6 {
    /// Where the relay's source address lies.
    pub network: ipnet::Ipv6Net,
    /// The interface it must come in on, if only one.
    pub interface: Option<String>,
}

impl RelayRule6 {
    /// Whether a Relay-forward from `source` on `interface` comes from this relay.
    pub fn allows(&self, source: Ipv6Addr, interface: &str) -> bool {
        self.network.contains(&source) && self.interface.as_deref().is_none_or(|i| i == interface)
    }
}

/// The trusted relays of `dhcp.relays`, by family: one list serves DHCPv4 and DHCPv6
/// as `dhcp.options` does (its `option6:` entries), since a router that relays both
/// is one agent to the operator.
type Relays = (Vec<RelayRule>, Vec<RelayRule6>);

/// `"198.18.0.2"`, `"10.0.0.0/8"`, `"fd00:9::2"`, `"fd00:9::/64"`, any with
/// `@interface`.
fn relay_rules(entries: &[String], issues: &mut Issues) -> Relays {
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for (i, text) in entries.iter().enumerate() {
        let (net, interface) = match text.split_once('@') {
            Some((n, iface)) => (n.trim(), Some(iface.to_string())),
            None => (text.trim(), None),
        };
        let network = net
            .parse::<ipnet::IpNet>()
            .or_else(|_| net.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
        match (network, interface.as_deref() == Some("")) {
            (Ok(ipnet::IpNet::V4(network)), false) => v4.push(RelayRule { network, interface }),
            (Ok(ipnet::IpNet::V6(network)), false) => v6.push(RelayRule6 { network, interface }),
            _ => issues.add(
                format!("dhcp.relays[{i}]"),
                "must be an address or network, optionally @interface (\"10.0.0.0/8@eth1\", \
                 \"fd00:9::/64\")",
            ),
        }
    }
    (v4, v6)
}

/// Validates `[dhcp]`.
pub(super) fn validate(raw: RawDhcp, issues: &mut Issues) -> DhcpSettings {
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
    let optsdir = raw.optsdir.as_deref().map(PathBuf::from);
    if optsdir.as_ref().is_some_and(|d| !d.is_absolute()) {
        issues.add("dhcp.optsdir", "must be an absolute path");
    }
    let leasefile = raw.leasefile.as_deref().map(PathBuf::from);
    if leasefile
        .as_ref()
        .is_some_and(|f| !f.is_absolute() || f.file_name().is_none())
    {
        issues.add("dhcp.leasefile", "must be an absolute file path");
    }
    let hostsdir_poll_ms = issues.in_range(
        "dhcp.hostsdir_poll_ms",
        raw.hostsdir_poll_ms.unwrap_or(1_000),
        100,
        60_000,
    );
    // Short by default: firmware retransmits its DISCOVER after about 4 s (RFC 2131
    // §4.1), and a probe longer than that would only make it ask again. A host on the
    // segment answers an echo within milliseconds (ARP included), and each address
    // waits for it once, before its first offer; behind slow relays, raise it.
    let conflict_probe_ms = issues.in_range(
        "dhcp.conflict_probe_ms",
        raw.conflict_probe_ms.unwrap_or(200),
        0,
        3_000,
    );
    let proxy = raw.proxy.unwrap_or(false);
    if proxy && interfaces.is_empty() {
        issues.add(
            "dhcp.interfaces",
            "ProxyDHCP (dhcp.proxy) answers only on interfaces named here",
        );
    }
    let (options, options6) = super::options_both("dhcp.options", &raw.options, issues);
    let (relays, relays6) = relay_rules(&raw.relays.unwrap_or_default(), issues);
    DhcpSettings {
        proxy,
        proxy_port: raw.proxy_port.unwrap_or(4011),
        options,
        options6,
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
        optsdir,
        hostsdir_poll: Duration::from_millis(hostsdir_poll_ms),
        leasefile,
        relays,
        relays6,
        max_offers: issues.in_range(
            "dhcp.max_offers",
            raw.max_offers.unwrap_or(16_384),
            1,
            1 << 24,
        ),
        receive_buffer_kib: issues.in_range(
            "dhcp.receive_buffer_kib",
            raw.receive_buffer_kib.unwrap_or(16_384),
            256,
            1 << 20,
        ),
        unknown_discovers_per_sec: issues.in_range(
            "dhcp.unknown_discovers_per_sec",
            raw.unknown_discovers_per_sec.unwrap_or(0),
            0,
            10_000_000,
        ),
        max_declined: issues.in_range(
            "dhcp.max_declined",
            raw.max_declined.unwrap_or(256),
            0,
            1 << 24,
        ),
        declines_per_mac: issues.in_range(
            "dhcp.declines_per_mac",
            raw.declines_per_mac.unwrap_or(2),
            0,
            1_000,
        ),
        conflict_probe: (conflict_probe_ms > 0).then(|| Duration::from_millis(conflict_probe_ms)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relays(entries: &[&str]) -> (Relays, Vec<String>) {
        let mut issues = Issues::default();
        let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        let r = relay_rules(&entries, &mut issues);
        (r, issues.keys())
    }

    #[test]
    fn relays_of_both_families_share_one_list_and_a_bad_entry_is_named() {
        let ((v4, v6), keys) = relays(&[
            "198.18.0.2",
            "fd00:9::/64@br0",
            "fe80::1",
            "10.0.0.0/8@eth1",
        ]);
        assert!(keys.is_empty(), "{keys:?}");
        assert_eq!(v4.len(), 2);
        assert!(v4[0].allows(Ipv4Addr::new(198, 18, 0, 2), "any"));
        assert!(v4[1].allows(Ipv4Addr::new(10, 1, 2, 3), "eth1"));
        assert_eq!(v6.len(), 2);
        let ip = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        assert!(v6[0].allows(ip("fd00:9::2"), "br0"));
        assert!(!v6[0].allows(ip("fd00:9::2"), "br1"));
        assert!(!v6[0].allows(ip("fd00:8::2"), "br0"));
        assert!(v6[1].allows(ip("fe80::1"), "br1"));
        assert!(!v6[1].allows(ip("fe80::2"), "br1"));
        for bad in ["fd00:9::/129", "fd00:9::2@", "relay.example"] {
            let ((v4, v6), keys) = relays(&["fd00::1", bad]);
            assert_eq!(
                (v4.len(), v6.len(), keys),
                (0, 1, vec!["dhcp.relays[1]".to_string()]),
                "{bad}"
            );
        }
    }
}
