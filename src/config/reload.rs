//! A reload (SIGHUP, `POST /v1/reload`): which changes between the running
//! configuration and a newly read one take effect at once, and which need a restart.
//! Pure: two validated configurations in, the configuration to run and the report out.
//!
//! Live: what the DHCP engines decide with and no socket, store or task was built
//! from — the `[[subnet]]` and `[[subnet6]]` contents (ranges, exclusions, options,
//! lease times, router, DNS…) on the same networks and interfaces, the `[[host]]`
//! entries, `[dhcp] options` and the `[dhcp]` limits and rules listed in [`LIVE_DHCP`],
//! and `log_level` (the running filter is swapped; see `src/reload.rs`).
//! Everything else (listeners, interfaces, the store, members and owners, boot, TFTP,
//! HTTP) is named and left as it runs, because sockets, files and tasks were made from
//! it at start-up.

use std::fmt::Debug;

use super::Config;

/// `[dhcp]` keys a reload applies at once: the engine reads them on every packet.
pub const LIVE_DHCP: &[&str] = &[
    "options",
    "options6",
    "relays",
    "server_id",
    "never_nak",
    "known_only",
    "offer_hold_secs",
    "decline_hold_secs",
    "max_offers",
    "unknown_discovers_per_sec",
    "max_declined",
    "declines_per_mac",
];

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReloadReport {
    /// Keys or sections whose new values are now in force.
    pub applied: Vec<String>,
    /// Keys or sections that changed in the file but keep their running value until
    /// a restart.
    pub needs_restart: Vec<String>,
}

impl ReloadReport {
    /// Whether the file changed nothing.
    pub fn unchanged(&self) -> bool {
        self.applied.is_empty() && self.needs_restart.is_empty()
    }
}

fn differs<T: Debug>(a: &T, b: &T) -> bool {
    // Every configuration type derives Debug over all its fields and holds no hash
    // map, so equal Debug text is equal values.
    format!("{a:?}") != format!("{b:?}")
}

/// One `[dhcp]` field by its key, as Debug text.
fn dhcp_field(c: &Config, key: &str) -> String {
    let d = &c.dhcp;
    match key {
        "options" => format!("{:?}", d.options),
        "options6" => format!("{:?}", d.options6),
        // One key, both families (`DhcpSettings::relays6`).
        "relays" => format!("{:?} {:?}", d.relays, d.relays6),
        "server_id" => format!("{:?}", d.server_id),
        "never_nak" => format!("{:?}", d.never_nak),
        "known_only" => format!("{:?}", d.known_only),
        "offer_hold_secs" => format!("{:?}", d.offer_hold_secs),
        "decline_hold_secs" => format!("{:?}", d.decline_hold_secs),
        "max_offers" => format!("{:?}", d.max_offers),
        "unknown_discovers_per_sec" => format!("{:?}", d.unknown_discovers_per_sec),
        "max_declined" => format!("{:?}", d.max_declined),
        "declines_per_mac" => format!("{:?}", d.declines_per_mac),
        other => unreachable!("not a live [dhcp] key: {other}"),
    }
}

fn take_dhcp_field(to: &mut Config, from: &Config, key: &str) {
    let (t, f) = (&mut to.dhcp, &from.dhcp);
    match key {
        "options" => t.options = f.options.clone(),
        "options6" => t.options6 = f.options6.clone(),
        "relays" => {
            t.relays = f.relays.clone();
            t.relays6 = f.relays6.clone();
        }
        "server_id" => t.server_id = f.server_id,
        "never_nak" => t.never_nak = f.never_nak,
        "known_only" => t.known_only = f.known_only,
        "offer_hold_secs" => t.offer_hold_secs = f.offer_hold_secs,
        "decline_hold_secs" => t.decline_hold_secs = f.decline_hold_secs,
        "max_offers" => t.max_offers = f.max_offers,
        "unknown_discovers_per_sec" => t.unknown_discovers_per_sec = f.unknown_discovers_per_sec,
        "max_declined" => t.max_declined = f.max_declined,
        "declines_per_mac" => t.declines_per_mac = f.declines_per_mac,
        other => unreachable!("not a live [dhcp] key: {other}"),
    }
}

/// The sockets a subnet list implies: its networks and named interfaces, in order.
fn subnet_shape(c: &Config) -> (Vec<String>, Vec<String>) {
    let v4 = c
        .subnets
        .iter()
        .map(|s| format!("{} {:?}", s.network, s.interface))
        .collect();
    let v6 = c
        .subnets6
        .iter()
        .map(|s| format!("{} {:?}", s.network, s.interface))
        .collect();
    (v4, v6)
}

/// The configuration to run after reading `new` while `running` runs, and what
/// changed. Live changes are taken from `new`; every other part stays as `running`
/// has it, and is named in [`ReloadReport::needs_restart`] when `new` differs there.
pub fn plan(running: &Config, new: &Config) -> (Config, ReloadReport) {
    let mut next = running.clone();
    let mut report = ReloadReport::default();
    let (shape, new_shape) = (subnet_shape(running), subnet_shape(new));
    if differs(&running.subnets, &new.subnets) {
        if shape.0 == new_shape.0 {
            next.subnets = new.subnets.clone();
            report.applied.push("subnet".into());
        } else {
            report
                .needs_restart
                .push("subnet (a network or interface added, removed or changed)".into());
        }
    }
    if differs(&running.subnets6, &new.subnets6) {
        if shape.1 == new_shape.1 {
            next.subnets6 = new.subnets6.clone();
            report.applied.push("subnet6".into());
        } else {
            report
                .needs_restart
                .push("subnet6 (a network or interface added, removed or changed)".into());
        }
    }
    if differs(&running.hosts, &new.hosts) {
        next.hosts = new.hosts.clone();
        report.applied.push("host".into());
    }
    if running.log_level != new.log_level {
        next.log_level = new.log_level.clone();
        report.applied.push("log_level".into());
    }
    for key in LIVE_DHCP {
        if dhcp_field(running, key) != dhcp_field(new, key) {
            take_dhcp_field(&mut next, new, key);
            report.applied.push(format!("dhcp.{key}"));
        }
    }
    // What is left different needs a restart: named by section, and by key in [dhcp].
    if differs(&next.dhcp, &new.dhcp) {
        let keys = dhcp_restart_keys(&next.dhcp, &new.dhcp);
        if keys.is_empty() {
            // A [dhcp] field in neither list: named by its section, never missed.
            report.needs_restart.push("dhcp".into());
        }
        report
            .needs_restart
            .extend(keys.into_iter().map(|k| format!("dhcp.{k}")));
    }
    let sections: [(&str, bool); 12] = [
        ("state_dir", differs(&next.state_dir, &new.state_dir)),
        ("log_format", differs(&next.log_format, &new.log_format)),
        ("boot", differs(&next.boot, &new.boot)),
        ("tftp", differs(&next.tftp, &new.tftp)),
        ("http", differs(&next.http, &new.http)),
        ("owner", differs(&next.owner, &new.owner)),
        ("health", differs(&next.health, &new.health)),
        ("ra", differs(&next.ra, &new.ra)),
        ("store", differs(&next.store, &new.store)),
        ("member", differs(&next.members, &new.members)),
        ("dhcp6", differs(&next.dhcp6, &new.dhcp6)),
        ("timeline", differs(&next.timeline, &new.timeline)),
    ];
    report.needs_restart.extend(
        sections
            .iter()
            .filter(|(_, changed)| *changed)
            .map(|(name, _)| name.to_string()),
    );
    // A section added to Config and to neither list is still never ignored silently.
    if report.needs_restart.is_empty() && differs(&next, new) {
        report.needs_restart.push("(another section)".into());
    }
    (next, report)
}

/// The `[dhcp]` keys outside [`LIVE_DHCP`] whose values differ.
fn dhcp_restart_keys(
    running: &super::DhcpSettings,
    new: &super::DhcpSettings,
) -> Vec<&'static str> {
    let pairs: [(&str, bool); 13] = [
        ("proxy", differs(&running.proxy, &new.proxy)),
        ("proxy_port", differs(&running.proxy_port, &new.proxy_port)),
        ("enabled", differs(&running.enabled, &new.enabled)),
        ("interfaces", differs(&running.interfaces, &new.interfaces)),
        ("port", differs(&running.port, &new.port)),
        (
            "reclaim_interval_secs",
            differs(&running.reclaim_interval_secs, &new.reclaim_interval_secs),
        ),
        (
            "takeover_secs",
            differs(&running.takeover_secs, &new.takeover_secs),
        ),
        ("hostsdir", differs(&running.hostsdir, &new.hostsdir)),
        ("optsdir", differs(&running.optsdir, &new.optsdir)),
        (
            "hostsdir_poll",
            differs(&running.hostsdir_poll, &new.hostsdir_poll),
        ),
        ("leasefile", differs(&running.leasefile, &new.leasefile)),
        (
            "receive_buffer_kib",
            differs(&running.receive_buffer_kib, &new.receive_buffer_kib),
        ),
        (
            "conflict_probe_ms",
            differs(&running.conflict_probe, &new.conflict_probe),
        ),
    ];
    pairs
        .iter()
        .filter(|(_, changed)| *changed)
        .map(|(k, _)| *k)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        let text = format!(
            "[dhcp]\ninterfaces = [\"eth1\"]\n\n[[subnet]]\nnetwork = \"172.22.0.0/24\"\n\
             ranges = [\"172.22.0.10-172.22.0.100\"]\n{extra}"
        );
        Config::from_toml_with_overrides(&text, &[]).unwrap()
    }

    #[test]
    fn an_unchanged_file_changes_nothing() {
        let c = config("");
        let (next, report) = plan(&c, &config(""));
        assert!(report.unchanged(), "{report:?}");
        assert!(!differs(&next, &c));
    }

    #[test]
    fn a_range_an_option_and_a_host_apply_at_once() {
        let running = config("");
        let new = Config::from_toml_with_overrides(
            "[dhcp]\ninterfaces = [\"eth1\"]\noptions = [\"option:ntp-server,172.22.0.1\"]\n\
             max_offers = 77\n\n[[subnet]]\nnetwork = \"172.22.0.0/24\"\n\
             ranges = [\"172.22.0.10-172.22.0.200\"]\n\n[[host]]\nmac = \"52:54:00:00:00:01\"\n\
             ip = \"172.22.0.5\"\n",
            &[],
        )
        .unwrap();
        let (next, report) = plan(&running, &new);
        assert_eq!(
            report.applied,
            ["subnet", "host", "dhcp.options", "dhcp.max_offers"]
        );
        assert!(report.needs_restart.is_empty(), "{report:?}");
        assert!(!differs(&next, &new), "everything changed was live");
    }

    #[test]
    fn an_ipv6_relay_applies_at_once_as_a_v4_one_does() {
        let running = config("");
        let with = |relays: &str| {
            Config::from_toml_with_overrides(
                "[dhcp]\ninterfaces = [\"eth1\"]\n\n[[subnet]]\nnetwork = \"172.22.0.0/24\"\n\
                 ranges = [\"172.22.0.10-172.22.0.100\"]\n",
                &[("dhcp.relays".to_string(), relays.to_string())],
            )
            .unwrap()
        };
        for relays in ["[\"fd00:9::2\"]", "[\"172.22.1.2\", \"fd00:9::/64@eth1\"]"] {
            let new = with(relays);
            let (next, report) = plan(&running, &new);
            assert_eq!(report.applied, ["dhcp.relays"], "{relays}");
            assert!(report.needs_restart.is_empty(), "{report:?}");
            assert_eq!(next.dhcp.relays6, new.dhcp.relays6);
            assert!(!next.dhcp.relays6.is_empty());
        }
    }

    #[test]
    fn a_listener_change_is_named_and_left_as_it_runs() {
        let running = config("");
        let new = Config::from_toml_with_overrides(
            "[dhcp]\ninterfaces = [\"eth2\"]\nmax_offers = 77\n\n[[subnet]]\n\
             network = \"172.22.0.0/24\"\nranges = [\"172.22.0.10-172.22.0.100\"]\n\
             [tftp]\nenabled = false\n[timeline]\nknown_events = 1000\n",
            &[],
        )
        .unwrap();
        let (next, report) = plan(&running, &new);
        assert_eq!(report.applied, ["dhcp.max_offers"]);
        assert_eq!(
            report.needs_restart,
            ["dhcp.interfaces", "tftp", "timeline"]
        );
        assert_eq!(
            next.dhcp.interfaces,
            ["eth1"],
            "the running interfaces stay"
        );
        assert!(next.tftp.enabled, "TFTP stays as it runs");
        assert_eq!(next.dhcp.max_offers, 77);
    }

    #[test]
    fn the_log_level_applies_at_once() {
        let running = config("");
        let new = Config::from_toml_with_overrides(
            "log_level = \"info,shardboot::dhcp=debug\"\n[dhcp]\ninterfaces = [\"eth1\"]\n\n\
             [[subnet]]\nnetwork = \"172.22.0.0/24\"\nranges = [\"172.22.0.10-172.22.0.100\"]\n",
            &[],
        )
        .unwrap();
        assert_eq!(running.log_level, "info", "the default");
        let (next, report) = plan(&running, &new);
        assert_eq!(report.applied, ["log_level"]);
        assert!(report.needs_restart.is_empty(), "{report:?}");
        assert_eq!(next.log_level, "info,shardboot::dhcp=debug");
    }

    #[test]
    fn a_new_subnet_needs_a_restart_but_a_changed_one_does_not() {
        let running = config("");
        let added =
            config("\n[[subnet]]\nnetwork = \"10.9.0.0/24\"\nranges = [\"10.9.0.10-10.9.0.20\"]\n");
        let (next, report) = plan(&running, &added);
        assert!(report.applied.is_empty(), "{report:?}");
        assert_eq!(report.needs_restart.len(), 1);
        assert!(report.needs_restart[0].starts_with("subnet "));
        assert_eq!(next.subnets.len(), 1);
    }
}
