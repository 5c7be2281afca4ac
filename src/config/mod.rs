//! Configuration: a TOML file (or the built-in default), overridden by `SHARDBOOT_*`
//! environment variables and `--set key=value` flags, then validated into typed settings.
//!
//! Validation collects every problem, each naming its key, so `shardboot check-config`
//! can show an operator all of them in one run.
//!
//! One file per section, its raw serde struct beside its validated type. This module is
//! a leaf: the settings types the domain modules run with live here, and the domain
//! modules import them, never the other way round.

mod boot;
mod dhcp;
mod dhcp6;
mod explain;
mod health;
mod host;
mod http;
mod ironic;
mod ironic_env;
mod issues;
mod member;
mod members_file;
mod overrides;
mod owner;
mod ra;
pub mod reload;
mod store;
mod structure;
mod subnet;
mod subnet6;
mod tftp;
mod timeline;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::mac::MacAddr;

pub use boot::BootSettings;
pub use dhcp::{DhcpSettings, RelayRule, RelayRule6};
pub use dhcp6::Dhcp6Settings;
pub use explain::{env_var_name, explain, ExplainBase, Explained, Layer, Source};
pub use health::HealthSettings;
pub use host::Host;
pub use http::{ConnLimits, HttpSettings, MetricsExposure, TlsFiles};
pub use ironic::{IronicSettings, MIN_API_VERSION};
pub use ironic_env::{
    awaited_address, custom_firmware_dir, HostFacts, BUILTIN_FIRMWARE_DIR, CUSTOM_FIRMWARE_DIR,
    DATABASE_CA_FILE, DATABASE_CREDENTIALS_DIR, DATABASE_NAME, DATABASE_VAR, IPXE_CERT_FILE,
    IPXE_KEY_FILE, IRONIC_CA_FILE,
};
pub use issues::ConfigIssue;
pub use member::{member_name_for_conductor, Member};
pub use members_file::{parse_members_file, read_members_file, MembersFileError};
pub use overrides::{apply_env_overrides, apply_override, parse_flag, OverrideError};
pub use owner::{
    ChainTo, Fallback, FileMembers, IronicMembers, MembersSource, OwnerSettings, ResolverKind,
};
pub use ra::RaSettings;
pub use store::{Dialect, SharedStoreSettings, StoreSettings};
pub use subnet::Subnet;
pub use subnet6::{range6_len, Subnet6, MAX_RANGE6};
pub use tftp::{RawTftp, TftpListener, TftpSettings, BLKSIZE_RANGE, WINDOWSIZE_RANGE};
pub use timeline::TimelineSettings;

use issues::Issues;

/// The configuration used when no file is given: a lab segment on 192.0.2.0/24
/// (RFC 5737 documentation range), served on every interface that has an address in it.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("default.toml");

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
    /// `owner.members = "file"` and its file gives no member list.
    #[error("owner.members_file: {0}")]
    MembersFile(#[from] MembersFileError),
}

/// `log_level` when no layer sets it.
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per event.
    Json,
}

/// The whole TOML document as written: serde structs that reject unknown keys. Values
/// stay strings here so that validation can name the key and the reason for every
/// error at once instead of stopping at the first.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    state_dir: Option<String>,
    log_format: Option<String>,
    log_level: Option<String>,
    #[serde(default)]
    dhcp: dhcp::RawDhcp,
    #[serde(default)]
    boot: boot::RawBoot,
    #[serde(default)]
    tftp: RawTftp,
    #[serde(default)]
    http: http::RawHttp,
    #[serde(default)]
    owner: owner::RawOwner,
    #[serde(default)]
    health: health::RawHealth,
    #[serde(default)]
    ra: ra::RawRa,
    #[serde(default)]
    store: store::RawStore,
    #[serde(default, rename = "member")]
    members: Vec<member::RawMember>,
    #[serde(default, rename = "subnet")]
    subnets: Vec<subnet::RawSubnet>,
    #[serde(default)]
    dhcp6: dhcp6::RawDhcp6,
    #[serde(default, rename = "subnet6")]
    subnets6: Vec<subnet6::RawSubnet6>,
    #[serde(default, rename = "host")]
    hosts: Vec<host::RawHost>,
    #[serde(default)]
    timeline: timeline::RawTimeline,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Directory holding the lease store.
    pub state_dir: PathBuf,
    /// Log output format.
    pub log_format: LogFormat,
    /// Which events are logged: a tracing filter directive ("info",
    /// "info,shardboot::dhcp=debug"), checked at load; `SHARDBOOT_LOG` wins when set.
    pub log_level: String,
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
    pub health: HealthSettings,
    /// IPv6 router solicitations answered with "no router here".
    pub ra: RaSettings,
    /// The shared lease store (several members).
    pub store: StoreSettings,
    /// The shardboot members (one per conductor); empty for a single instance. With
    /// `owner.members = "file"`, the file's list at load ([`Config::read_members_file`]).
    pub members: Vec<Member>,
    /// Served subnets.
    pub subnets: Vec<Subnet>,
    /// DHCPv6 listener settings.
    pub dhcp6: Dhcp6Settings,
    /// Served IPv6 subnets (DHCPv6).
    pub subnets6: Vec<Subnet6>,
    /// Per-MAC reservations and overrides.
    pub hosts: Vec<Host>,
    /// The machines' boot timeline and the boot board.
    pub timeline: TimelineSettings,
}

impl Config {
    /// The `[[subnet]]`s, by index, that no interface of this host (`host`: interface
    /// and address) is on while `dhcp.relays` is empty: their clients could come only
    /// through a relay, and an untrusted relay's packets are dropped, so nobody is
    /// served from them (ironic-image's dnsmasq answers relays without being told).
    pub fn subnets_out_of_reach(&self, host: &[(String, ipnet::Ipv4Net)]) -> Vec<usize> {
        if !self.dhcp.enabled || self.dhcp.proxy || !self.dhcp.relays.is_empty() {
            return Vec::new();
        }
        (0..self.subnets.len())
            .filter(|&i| {
                let net = &self.subnets[i].network;
                !host.iter().any(|(_, a)| net.contains(&a.addr()))
            })
            .collect()
    }

    /// The TFTP file names DHCP may hand out (the per-architecture choices and host
    /// overrides, URLs left out), for `check-config` to look for in the TFTP root.
    pub fn boot_file_names(&self) -> Vec<&str> {
        let b = &self.boot;
        let mut names: Vec<&str> = vec![&b.bios, &b.uefi_ia32, &b.uefi_x64, &b.uefi_arm64];
        names.extend(self.hosts.iter().filter_map(|h| h.boot_file.as_deref()));
        names.retain(|n| !n.contains("://"));
        // One warning per file, also when several architectures load the same one.
        let mut seen = std::collections::HashSet::new();
        names.retain(|n| seen.insert(*n));
        names
    }

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
        Config::from_table(table).map_err(ConfigError::Invalid)
    }

    /// Validates a whole table: the structural problems (unknown keys, wrong types) and,
    /// over what remains once they are left out, the semantic ones, in one list. A
    /// semantic problem at or under a key already named is not said twice.
    fn from_table(table: toml::Table) -> Result<Self, Vec<ConfigIssue>> {
        let (raw, mut issues) = structure::deserialize_lenient::<RawConfig>(table);
        let Some(raw) = raw else {
            return Err(issues);
        };
        let semantic = match Config::try_from(raw) {
            Ok(config) if issues.is_empty() => return Ok(config),
            Ok(_) => Vec::new(),
            Err(semantic) => semantic,
        };
        let named: Vec<String> = issues.iter().map(|i| i.key.clone()).collect();
        let under = |key: &str, of: &str| {
            key == of || key.starts_with(&format!("{of}.")) || key.starts_with(&format!("{of}["))
        };
        issues.extend(
            semantic
                .into_iter()
                .filter(|i| !named.iter().any(|n| under(&i.key, n))),
        );
        Err(issues)
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
        // Named as the variable it is, not as an unknown `database` key: a config file
        // names the database in store.shared.
        if std::env::var_os(DATABASE_VAR).is_some() {
            return Err(ConfigError::Invalid(vec![ConfigIssue {
                key: DATABASE_VAR.into(),
                reason: "is read only with --env ironic-image; with a config file, the \
                         database is the path of store.shared"
                    .into(),
            }]));
        }
        let mut all = apply_env_overrides(std::env::vars());
        all.extend_from_slice(flag_overrides);
        Self::from_toml_with_overrides(&text, &all)?.read_members_file()
    }

    /// With `owner.members = "file"`, puts the file's members in `members` (the list in
    /// force at start, before DHCP starts); an unreadable or invalid file is an error,
    /// so a member never starts with a list it cannot read. Other sources: unchanged.
    pub fn read_members_file(mut self) -> Result<Self, ConfigError> {
        if let MembersSource::File(f) = &self.owner.members {
            self.members = read_members_file(&f.path)?;
        }
        Ok(self)
    }

    /// Derives the configuration from ironic-image's dnsmasq variables
    /// (`--env ironic-image`, see `ironic_env`), then applies `overrides` as
    /// [`Config::from_toml_with_overrides`] does. Problems name the variable.
    pub fn from_ironic_env(
        vars: &BTreeMap<String, String>,
        host: &HostFacts,
        overrides: &[(String, String)],
    ) -> Result<Self, ConfigError> {
        let derived = ironic_env::derive(vars, host).map_err(ConfigError::Invalid)?;
        let mut table = derived.table.clone();
        for (key, value) in overrides {
            apply_override(&mut table, key, value)?;
        }
        let rename = |issues| ConfigError::Invalid(ironic_env::rename(issues, &derived));
        Config::from_table(table)
            .map_err(rename)?
            .read_members_file()
    }

    /// The `[[host]]` entry for `mac`, if any.
    pub fn host(&self, mac: &MacAddr) -> Option<&Host> {
        self.hosts.iter().find(|h| &h.mac == mac)
    }
}

impl TryFrom<RawConfig> for Config {
    type Error = Vec<ConfigIssue>;

    fn try_from(raw: RawConfig) -> Result<Self, Self::Error> {
        let mut issues = Issues::default();
        let log_format = match raw.log_format.as_deref().unwrap_or("text") {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            _ => {
                issues.add("log_format", "must be \"text\" or \"json\"");
                LogFormat::Text
            }
        };
        let log_level = raw.log_level.unwrap_or_else(|| DEFAULT_LOG_LEVEL.into());
        if log_level.trim().is_empty() {
            issues.add("log_level", "must not be empty (\"info\" is the default)");
        } else if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(&log_level) {
            issues.add(
                "log_level",
                format!(
                    "{log_level:?} is not a log filter (a level such as \"info\", or \
                     directives such as \"info,shardboot::dhcp=debug\"): {e}"
                ),
            );
        }
        let state_dir = PathBuf::from(raw.state_dir.unwrap_or_else(|| "/var/lib/shardboot".into()));
        if state_dir.as_os_str().is_empty() {
            issues.add("state_dir", "must not be empty");
        }
        // The order issues are listed in; owner after members (`owner.self` names
        // one) and hosts after subnets (a reservation must lie in one).
        let dhcp = dhcp::validate(raw.dhcp, &mut issues);
        let (mut boot, ipxe_tls) = boot::validate(raw.boot, &mut issues);
        let tftp = tftp::validate(raw.tftp, &mut issues);
        let http = http::validate(raw.http, &mut issues);
        boot::apply_http(&mut boot, ipxe_tls, &http, &mut issues);
        let members = member::validate_all(raw.members, &mut issues);
        let owner = owner::validate(raw.owner, &members, raw.store.has_shared(), &mut issues);
        boot::check_tls_chains(&boot, &members, &owner, &mut issues);
        let health = health::validate(raw.health, &mut issues);
        let ra = ra::validate(raw.ra, !raw.subnets6.is_empty(), &mut issues);
        let store = store::validate(raw.store, &mut issues);
        let subnets = subnet::validate_all(raw.subnets, &mut issues);
        let dhcp6 = dhcp6::validate(raw.dhcp6, &mut issues);
        let subnets6 = subnet6::validate_all(raw.subnets6, &mut issues);
        let hosts = host::validate_all(raw.hosts, &subnets, &subnets6, &mut issues);
        let timeline = timeline::validate(raw.timeline, &mut issues);
        let serves_leases = dhcp.enabled || !subnets6.is_empty();
        if owner.members.several(members.len()) && serves_leases && store.shared.is_none() {
            issues.add(
                "store.shared",
                "is required with two or more [[member]]s or owner.members = \"ironic\" or \
                 \"file\": members agree on every lease through the shared lease store (the \
                 database Ironic's HA runs on); member-to-member lease replication was removed",
            );
        }
        issues.finish()?;
        Ok(Config {
            state_dir,
            log_format,
            log_level,
            dhcp,
            boot,
            tftp,
            http,
            owner,
            health,
            ra,
            store,
            members,
            subnets,
            dhcp6,
            subnets6,
            hosts,
            timeline,
        })
    }
}

/// Parses an `options` list of DHCPv4 entries (dnsmasq `dhcp-option` syntax); each
/// bad entry is an issue under `key[i]` that quotes the offending text.
fn options_list(
    key: &str,
    entries: &[String],
    issues: &mut issues::Issues,
) -> Vec<crate::options::OptionRule> {
    parse_each(key, entries, issues, crate::options::dnsmasq::parse)
}

/// Parses an `options` list of DHCPv6 entries (`option6:`), as [`options_list`].
fn options6_list(
    key: &str,
    entries: &[String],
    issues: &mut issues::Issues,
) -> Vec<crate::options::OptionRule6> {
    parse_each(key, entries, issues, crate::options::dnsmasq::parse6)
}

/// Parses an `options` list that takes both families, as dnsmasq's `dhcp-option` does
/// (`[dhcp] options`, `[[host]] options`): the DHCPv4 entries, then the `option6:` ones.
fn options_both(
    key: &str,
    entries: &[String],
    issues: &mut issues::Issues,
) -> (
    Vec<crate::options::OptionRule>,
    Vec<crate::options::OptionRule6>,
) {
    use crate::options::dnsmasq::AnyRule;
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for rule in parse_each(key, entries, issues, crate::options::dnsmasq::parse_any) {
        match rule {
            AnyRule::V4(r) => v4.push(r),
            AnyRule::V6(r) => v6.push(r),
        }
    }
    (v4, v6)
}

fn parse_each<T>(
    key: &str,
    entries: &[String],
    issues: &mut issues::Issues,
    parse: fn(&str) -> Result<T, crate::options::value::ValueError>,
) -> Vec<T> {
    entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match parse(e) {
            Ok(rule) => Some(rule),
            Err(err) => {
                issues.add(format!("{key}[{i}]"), err.to_string());
                None
            }
        })
        .collect()
}

/// Checks a list of tag names (the names `tag:<name>` entries match).
fn tag_list(key: &str, tags: &[String], issues: &mut issues::Issues) -> Vec<String> {
    for (i, t) in tags.iter().enumerate() {
        let ok = (1..=64).contains(&t.len())
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !ok {
            issues.add(
                format!("{key}[{i}]"),
                format!("{t:?} is not a tag name (1 to 64 letters, digits, '-', '_', '.')"),
            );
        }
    }
    tags.to_vec()
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
    fn a_subnet_behind_an_untrusted_relay_is_named_as_out_of_reach() {
        let text = concat!(
            "state_dir = \"/tmp/x\"\n",
            "[[subnet]]\nnetwork = \"192.0.2.0/24\"\nranges = [\"192.0.2.10 - 192.0.2.20\"]\n",
            "[[subnet]]\nnetwork = \"198.51.100.0/24\"\nranges = [\"198.51.100.10 - 198.51.100.20\"]\n",
        );
        let host = [("prov0".to_string(), "192.0.2.1/24".parse().unwrap())];
        let cfg = Config::from_toml_with_overrides(text, &[]).unwrap();
        assert_eq!(cfg.subnets_out_of_reach(&host), [1]);
        // Trusting a relay (or serving neither) leaves nothing to say.
        let relays = [(
            "dhcp.relays".to_string(),
            "[\"192.0.2.254/32\"]".to_string(),
        )];
        let cfg = Config::from_toml_with_overrides(text, &relays).unwrap();
        assert!(cfg.subnets_out_of_reach(&host).is_empty());
        let off = [("dhcp.enabled".to_string(), "false".to_string())];
        let cfg = Config::from_toml_with_overrides(text, &off).unwrap();
        assert!(cfg.subnets_out_of_reach(&host).is_empty());
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
    fn a_log_level_is_a_filter_or_refused_by_its_key() {
        let with = |v: &str| {
            Config::from_toml_with_overrides(DEFAULT_CONFIG_TOML, &[("log_level".into(), v.into())])
        };
        let cfg = with("info,shardboot::dhcp=debug").unwrap();
        assert_eq!(cfg.log_level, "info,shardboot::dhcp=debug");
        for bad in ["info,shardboot=loudest", " "] {
            let err = with(bad).unwrap_err().to_string();
            assert!(err.starts_with("log_level: "), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }

    #[test]
    fn structural_and_semantic_problems_are_listed_together() {
        let text = r#"
            log_level = "info,shardboot=loudest"
            [dhcp]
            portt = 67
            max_offers = "many"
            server_id = "300.1.1.1"
            [[subnet]]
            network = "192.0.2.0/24"
            ranges = ["192.0.2.50-192.0.2.40"]
            lease_time = "an hour"
        "#;
        let Err(ConfigError::Invalid(issues)) = Config::from_toml_with_overrides(text, &[]) else {
            panic!("expected invalid")
        };
        let keys: Vec<&str> = issues.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                // Structural first, in the order serde meets them (keys sorted), then
                // the semantic ones.
                "dhcp.max_offers",
                "dhcp.portt",
                "subnet[0].lease_time",
                "log_level",
                "dhcp.server_id",
                "subnet[0].ranges[0]",
            ]
        );
        assert!(issues[0].reason.starts_with("invalid type"), "{issues:?}");
        assert!(
            issues[1].reason.ends_with("did you mean `port`?"),
            "{issues:?}"
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = Config::from_toml_with_overrides("[dhcp]\nportt = 67\n", &[]).unwrap_err();
        assert!(err.to_string().contains("portt"), "{err}");
    }
}
