//! Configuration: a TOML file (or the built-in default), overridden by `SHARDBOOT_*`
//! environment variables and `--set key=value` flags, then validated into typed settings.
//!
//! Validation collects every problem, each naming its key, so `shardboot check-config`
//! can show an operator all of them in one run.

mod overrides;
mod raw;
mod routing;
mod sources;
mod structure;
mod validate;

use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use ipnet::Ipv4Net;

use crate::mac::MacAddr;

pub use overrides::{apply_env_overrides, apply_override, parse_flag, OverrideError};
pub use raw::RawConfig;
pub use routing::{ChainTo, Fallback, HttpSettings, Member, OwnerSettings, ResolverKind};

/// The configuration used when no file is given: a lab segment on 192.0.2.0/24
/// (RFC 5737 documentation range), served on every interface that has an address in it.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("default.toml");

/// One invalid setting: the dotted key and why it is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// Dotted path such as `subnet[0].ranges[1]`.
    pub key: String,
    /// Human-readable reason.
    pub reason: String,
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

/// Everything that can stop a configuration from loading.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("{0}")]
    Syntax(String),
    /// An override (environment or flag) could not be applied.
    #[error(transparent)]
    Override(#[from] OverrideError),
    /// Unknown keys, values of the wrong type, and settings that parse but are not
    /// valid; every one is listed.
    #[error("{}", .0.iter().map(|i| i.to_string()).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<ConfigIssue>),
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per event.
    Json,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Directory holding the lease store.
    pub state_dir: PathBuf,
    /// Log output format.
    pub log_format: LogFormat,
    /// DHCP listener settings.
    pub dhcp: DhcpSettings,
    /// Boot file selection.
    pub boot: BootSettings,
    /// TFTP listener.
    pub tftp: TftpListener,
    /// HTTP listener.
    pub http: HttpSettings,
    /// Owner resolution.
    pub owner: OwnerSettings,
    /// How members probe each other.
    pub health: crate::owner::health::HealthSettings,
    /// IPv6 router solicitations answered with "no router here".
    pub ra: crate::ra::RaSettings,
    /// The shardboot members (one per conductor); empty for a single instance.
    pub members: Vec<Member>,
    /// Served subnets.
    pub subnets: Vec<Subnet>,
    /// Per-MAC reservations and overrides.
    pub hosts: Vec<Host>,
}

impl Config {
    /// This member's place among the members for range partitioning: (index in the
    /// sorted member names, member count); (0, 1) for a single instance.
    pub fn partition(&self) -> (usize, usize) {
        let mut names: Vec<&str> = self.members.iter().map(|m| m.name.as_str()).collect();
        names.sort_unstable();
        match self.owner.self_name.as_deref() {
            Some(me) if !names.is_empty() => (
                names.iter().position(|n| *n == me).unwrap_or(0),
                names.len(),
            ),
            _ => (0, 1),
        }
    }
}

/// `[dhcp]` after validation.
#[derive(Debug, Clone)]
pub struct DhcpSettings {
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
    /// How often expired leases are reclaimed, in seconds.
    pub reclaim_interval_secs: u32,
    /// With several members: a client whose `secs` reaches this is answered by any
    /// member, not only its responsible one.
    pub takeover_secs: u16,
    /// A dnsmasq `dhcp-hostsdir` to follow (Ironic's PXE filter writes it).
    pub hostsdir: Option<PathBuf>,
    /// How often the hosts directory is read for changes.
    pub hostsdir_poll: std::time::Duration,
}

/// `[tftp]` after validation: where the listener runs and what it serves.
#[derive(Debug, Clone)]
pub struct TftpListener {
    /// Whether `serve` starts it.
    pub enabled: bool,
    /// Listening address.
    pub listen: std::net::SocketAddr,
    /// Root, aliases, limits.
    pub settings: crate::tftp::TftpSettings,
}

impl Config {
    /// Warnings about configured boot files the TFTP root cannot serve (for `check-config`).
    pub fn boot_file_warnings(&self) -> Vec<String> {
        if !self.tftp.enabled {
            return Vec::new();
        }
        let b = &self.boot;
        let mut names: Vec<&str> = vec![&b.bios, &b.uefi_ia32, &b.uefi_x64, &b.uefi_arm64];
        names.extend(self.hosts.iter().filter_map(|h| h.boot_file.as_deref()));
        names.retain(|n| !n.contains("://"));
        crate::tftp::check_boot_files(&self.tftp.settings, &names)
    }
}

/// `[boot]` after validation: what a PXE or iPXE client is told to load.
#[derive(Debug, Clone)]
pub struct BootSettings {
    /// next-server / option 66; `None` means the address of the answering interface.
    pub tftp_server: Option<Ipv4Addr>,
    /// Base URL of shardboot's HTTP listener; `None` means `http://<interface address>:8080`.
    pub http_url: Option<String>,
    /// Path of the first-stage iPXE script below `http_url`.
    pub ipxe_script: String,
    /// TFTP file for legacy BIOS PXE (arch 0).
    pub bios: String,
    /// TFTP file for 32-bit x86 UEFI (arch 6).
    pub uefi_ia32: String,
    /// TFTP file for x86-64 UEFI (arch 7 and 9).
    pub uefi_x64: String,
    /// TFTP file for arm64 UEFI (arch 11).
    pub uefi_arm64: String,
    /// File (below `http_url`/ipxe/) or absolute URL for x86-64 UEFI HTTP Boot (arch 16).
    pub http_x64: String,
    /// File or absolute URL for arm64 UEFI HTTP Boot (arch 19).
    pub http_arm64: String,
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
}

impl Subnet {
    /// Number of addresses in the dynamic ranges (exclusions not subtracted).
    pub fn range_size(&self) -> u64 {
        self.ranges
            .iter()
            .map(|(a, b)| u64::from(u32::from(*b) - u32::from(*a)) + 1)
            .sum()
    }

    /// Whether `ip` is inside one of the dynamic ranges.
    pub fn in_ranges(&self, ip: Ipv4Addr) -> bool {
        self.ranges.iter().any(|(a, b)| *a <= ip && ip <= *b)
    }
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
}

impl Config {
    /// Parses a TOML document, applies overrides (`key=value`, dotted keys) in order, and
    /// validates the result.
    pub fn from_toml_with_overrides(
        text: &str,
        overrides: &[(String, String)],
    ) -> Result<Self, ConfigError> {
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        for (key, value) in overrides {
            apply_override(&mut table, key, value)?;
        }
        let raw: RawConfig = RawConfig::deserialize_table(table)?;
        Config::try_from(raw).map_err(ConfigError::Invalid)
    }

    /// Reads `path` (or the built-in default when `None`), then applies `SHARDBOOT_*`
    /// environment overrides and then `flag_overrides`.
    pub fn load(
        path: Option<&Path>,
        flag_overrides: &[(String, String)],
    ) -> Result<Self, ConfigError> {
        let text = match path {
            Some(p) => std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                path: p.to_path_buf(),
                source,
            })?,
            None => DEFAULT_CONFIG_TOML.to_string(),
        };
        let mut all = apply_env_overrides(std::env::vars());
        all.extend_from_slice(flag_overrides);
        Self::from_toml_with_overrides(&text, &all)
    }

    /// The `[[host]]` entry for `mac`, if any.
    pub fn host(&self, mac: &MacAddr) -> Option<&Host> {
        self.hosts.iter().find(|h| &h.mac == mac)
    }
}

impl RawConfig {
    fn deserialize_table(table: toml::Table) -> Result<Self, ConfigError> {
        structure::deserialize_all(table).map_err(ConfigError::Invalid)
    }
}

impl TryFrom<RawConfig> for Config {
    type Error = Vec<ConfigIssue>;

    fn try_from(raw: RawConfig) -> Result<Self, Self::Error> {
        validate::validate(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_default_is_valid() {
        let cfg = Config::from_toml_with_overrides(DEFAULT_CONFIG_TOML, &[]).unwrap();
        assert_eq!(cfg.subnets.len(), 1);
        assert_eq!(cfg.dhcp.port, 67);
        assert_eq!(cfg.boot.bios, "undionly.kpxe");
    }

    #[test]
    fn overrides_replace_values_and_errors_name_keys() {
        let cfg = Config::from_toml_with_overrides(
            DEFAULT_CONFIG_TOML,
            &[
                ("dhcp.port".into(), "6767".into()),
                ("state_dir".into(), "/tmp/x".into()),
            ],
        )
        .unwrap();
        assert_eq!(cfg.dhcp.port, 6767);
        assert_eq!(cfg.state_dir, PathBuf::from("/tmp/x"));

        let err = Config::from_toml_with_overrides(
            DEFAULT_CONFIG_TOML,
            &[("subnet.0.lease_time".into(), "0".into())],
        )
        .unwrap_err();
        assert!(err.to_string().contains("subnet[0].lease_time"), "{err}");
    }

    #[test]
    fn boot_urls_must_fit_one_dhcp_option() {
        let set = |k: &str, v: String| (k.to_string(), v);
        let file = format!("{}.efi", "f".repeat(123)); // 127 octets, the most allowed
        let with_base = |base: String| {
            Config::from_toml_with_overrides(
                DEFAULT_CONFIG_TOML,
                &[
                    set("boot.http_url", base),
                    set("boot.http_x64", file.clone()),
                ],
            )
        };
        // 79 + "/ipxe/" + 127 = 212 octets: fits.
        assert!(with_base(format!("http://{}.example.org", "a".repeat(60))).is_ok());
        // 127 + 6 + 127 = 260: each part is valid, the URL is not.
        let base = format!("http://{}.{}.example.org", "a".repeat(60), "b".repeat(47));
        assert_eq!(base.len(), 127);
        let err = with_base(base).unwrap_err().to_string();
        assert!(
            err.contains("boot.http_x64: with boot.http_url its URL is 260 octets"),
            "{err}"
        );
    }

    #[test]
    fn every_problem_is_reported_with_its_key() {
        let text = r#"
            log_format = "xml"
            [dhcp]
            server_id = "300.1.1.1"
            [[subnet]]
            network = "192.0.2.0/24"
            ranges = ["192.0.2.10 - 192.0.3.20", "192.0.2.50-192.0.2.40"]
            lease_time = 100
            renewal_time = 200
            router = "nope"
            [[host]]
            mac = "zz:zz"
            ip = "198.51.100.7"
        "#;
        let Err(ConfigError::Invalid(issues)) = Config::from_toml_with_overrides(text, &[]) else {
            panic!("expected invalid")
        };
        let keys: Vec<&str> = issues.iter().map(|i| i.key.as_str()).collect();
        for want in [
            "log_format",
            "dhcp.server_id",
            "subnet[0].ranges[0]",
            "subnet[0].ranges[1]",
            "subnet[0].renewal_time",
            "subnet[0].router",
            "host[0].mac",
            "host[0].ip",
        ] {
            assert!(keys.contains(&want), "missing {want} in {keys:?}");
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = Config::from_toml_with_overrides("[dhcp]\nportt = 67\n", &[]).unwrap_err();
        assert!(err.to_string().contains("portt"), "{err}");
    }
}
