//! `[dhcp6]`: the DHCPv6 listener. It serves when at least one `[[subnet6]]` is
//! configured.

use serde::Deserialize;

use super::issues::Issues;

/// `[dhcp6]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDhcp6 {
    port: Option<u16>,
    #[serde(default)]
    interfaces: Vec<String>,
}

/// `[dhcp6]` after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dhcp6Settings {
    /// The server port (RFC 8415 §7.2: 547); relays send to it too.
    pub port: u16,
    /// Interfaces to serve; empty: those with an address in a `[[subnet6]]` or named
    /// by one.
    pub interfaces: Vec<String>,
}

impl Default for Dhcp6Settings {
    fn default() -> Self {
        Self {
            port: 547,
            interfaces: Vec::new(),
        }
    }
}

/// Validates `[dhcp6]`.
pub(super) fn validate(raw: RawDhcp6, issues: &mut Issues) -> Dhcp6Settings {
    let port = raw.port.unwrap_or(547);
    if port == 0 {
        issues.add("dhcp6.port", "must not be 0");
    }
    for (i, name) in raw.interfaces.iter().enumerate() {
        if name.is_empty() || name.len() > 15 || name.contains(['/', ' ']) {
            issues.add(format!("dhcp6.interfaces[{i}]"), "not an interface name");
        }
    }
    Dhcp6Settings {
        port,
        interfaces: raw.interfaces,
    }
}
