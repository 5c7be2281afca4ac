//! The configuration file as written: serde structs that reject unknown keys. Values stay
//! strings here so that validation (in `config::mod`) can name the key and the reason for
//! every error at once instead of stopping at the first.

use serde::Deserialize;

/// The whole TOML document.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub state_dir: Option<String>,
    pub log_format: Option<String>,
    #[serde(default)]
    pub dhcp: RawDhcp,
    #[serde(default)]
    pub boot: RawBoot,
    #[serde(default)]
    pub tftp: crate::tftp::RawTftp,
    #[serde(default)]
    pub http: RawHttp,
    #[serde(default)]
    pub owner: RawOwner,
    #[serde(default)]
    pub health: RawHealth,
    #[serde(default)]
    pub ra: RawRa,
    #[serde(default, rename = "member")]
    pub members: Vec<RawMember>,
    #[serde(default, rename = "subnet")]
    pub subnets: Vec<RawSubnet>,
    #[serde(default, rename = "host")]
    pub hosts: Vec<RawHost>,
}

/// `[dhcp]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDhcp {
    pub enabled: Option<bool>,
    pub interfaces: Option<Vec<String>>,
    pub port: Option<u16>,
    pub server_id: Option<String>,
    pub never_nak: Option<bool>,
    pub known_only: Option<bool>,
    pub offer_hold_secs: Option<u32>,
    pub decline_hold_secs: Option<u32>,
    pub reclaim_interval_secs: Option<u32>,
    pub takeover_secs: Option<u16>,
    pub hostsdir: Option<String>,
    pub hostsdir_poll_ms: Option<u64>,
}

/// `[boot]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBoot {
    pub tftp_server: Option<String>,
    pub http_url: Option<String>,
    pub ipxe_script: Option<String>,
    pub bios: Option<String>,
    pub uefi_ia32: Option<String>,
    pub uefi_x64: Option<String>,
    pub uefi_arm64: Option<String>,
    pub http_x64: Option<String>,
    pub http_arm64: Option<String>,
}

/// One `[[subnet]]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSubnet {
    pub network: Option<String>,
    pub interface: Option<String>,
    #[serde(default)]
    pub ranges: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    pub lease_time: Option<u32>,
    pub renewal_time: Option<u32>,
    pub rebinding_time: Option<u32>,
    pub router: Option<String>,
    #[serde(default)]
    pub dns: Vec<String>,
    pub domain: Option<String>,
    pub mtu: Option<u16>,
    #[serde(default)]
    pub ntp: Vec<String>,
}

/// One `[[host]]`: a reservation and/or per-host overrides.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHost {
    pub mac: Option<String>,
    pub ip: Option<String>,
    pub hostname: Option<String>,
    pub boot_file: Option<String>,
    pub deny: Option<bool>,
    #[serde(default)]
    pub dns: Vec<String>,
    pub router: Option<String>,
    pub lease_time: Option<u32>,
}

/// `[http]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttp {
    pub enabled: Option<bool>,
    pub listen: Option<String>,
    pub chain_timeout_ms: Option<u32>,
    pub chain_retries: Option<u32>,
    pub token_file: Option<String>,
    pub operator_listen: Option<String>,
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    pub client_ca: Option<String>,
}

/// `[owner]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct RawOwner {
    #[serde(rename = "self")]
    pub self_name: Option<String>,
    pub resolvers: Option<Vec<String>>,
    pub inventory: Option<String>,
    pub fallback: Option<String>,
    pub chain_to: Option<String>,
    pub ironic: Option<RawIronic>,
}

/// `[owner.ironic]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIronic {
    pub url: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub password_file: Option<String>,
    pub ca_file: Option<String>,
    pub api_version: Option<String>,
    pub refresh_secs: Option<u64>,
    pub timeout_ms: Option<u64>,
    pub negative_ttl_secs: Option<u64>,
    pub backoff_secs: Option<u64>,
    pub max_lookups: Option<usize>,
    pub page_size: Option<u32>,
}

/// `[health]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    pub interval_ms: Option<u64>,
    pub timeout_ms: Option<u64>,
    pub dead_after: Option<u32>,
}

/// `[ra]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRa {
    pub enabled: Option<bool>,
    pub stand_down_secs: Option<u64>,
}

/// One `[[member]]`: a shardboot instance beside one Ironic conductor.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMember {
    pub name: Option<String>,
    pub http_url: Option<String>,
    pub conductor: Option<String>,
    pub conductor_url: Option<String>,
}
