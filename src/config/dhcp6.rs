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
    server_duid: Option<String>,
}

/// `[dhcp6]` after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dhcp6Settings {
    /// The server port (RFC 8415 §7.2: 547); relays send to it too.
    pub port: u16,
    /// Interfaces to serve; empty: those with an address in a `[[subnet6]]` or named
    /// by one.
    pub interfaces: Vec<String>,
    /// The server DUID the operator chose (`server_duid`, hex octets): used instead of
    /// the one made at first start and kept in the store.
    pub server_duid: Option<Vec<u8>>,
}

impl Default for Dhcp6Settings {
    fn default() -> Self {
        Self {
            port: 547,
            interfaces: Vec::new(),
            server_duid: None,
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
    let server_duid = raw
        .server_duid
        .as_deref()
        .and_then(|d| duid("dhcp6.server_duid", d, issues));
    Dhcp6Settings {
        port,
        interfaces: raw.interfaces,
        server_duid,
    }
}

impl super::Config {
    /// The `[[subnet6]]`s, by index, that no interface of this host (`host`: interface
    /// and address) is on, or is named by, while `dhcp.relays` trusts no IPv6 relay:
    /// their clients could come only through a relay, and an untrusted relay's
    /// Relay-forward is dropped (RFC 8415 §22: relayed data is believed only from a
    /// relay known to this server), so nobody is served from them.
    pub fn subnets6_out_of_reach(&self, host: &[(String, std::net::Ipv6Addr)]) -> Vec<usize> {
        if !self.dhcp.relays6.is_empty() {
            return Vec::new();
        }
        (0..self.subnets6.len())
            .filter(|&i| {
                let s = &self.subnets6[i];
                !host.iter().any(|(name, a)| {
                    s.network.contains(a) || s.interface.as_deref() == Some(name.as_str())
                })
            })
            .collect()
    }
}

/// A DUID written as hex octets (`00:02:00:00:ab:11:01`): RFC 8415 §11.1, a 2-octet
/// type that is not 0, then at most 128 octets of identifier.
fn duid(key: &str, text: &str, issues: &mut Issues) -> Option<Vec<u8>> {
    let Ok(octets) = crate::options::value::hex(text.trim()) else {
        issues.add(key, "must be hex octets such as 00:02:00:00:ab:11:01:02");
        return None;
    };
    let why = match octets.as_slice() {
        [0, 0, ..] => "must not be of type 0 (RFC 8415 §11.1)",
        o if o.len() < 3 => "must hold a 2-octet type and an identifier",
        o if o.len() > 130 => "must be at most 130 octets (RFC 8415 §11.1)",
        _ => return Some(octets),
    };
    issues.add(key, why);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subnet6_behind_an_untrusted_relay_is_named_as_out_of_reach() {
        let text = concat!(
            "state_dir = \"/tmp/x\"\n",
            "[[subnet6]]\nnetwork = \"fd00:1::/64\"\nranges = [\"fd00:1::10 - fd00:1::20\"]\n",
            "[[subnet6]]\nnetwork = \"fd00:2::/64\"\nranges = [\"fd00:2::10 - fd00:2::20\"]\n",
            "[[subnet6]]\nnetwork = \"fd00:3::/64\"\ninterface = \"prov1\"\n",
            "ranges = [\"fd00:3::10 - fd00:3::20\"]\n",
        );
        let host = [
            ("prov0".to_string(), "fd00:1::1".parse().unwrap()),
            ("prov1".to_string(), "fe80::1".parse().unwrap()),
        ];
        let cfg = crate::config::Config::from_toml_with_overrides(text, &[]).unwrap();
        assert_eq!(cfg.subnets6_out_of_reach(&host), [1]);
        // A v4 relay says nothing of v6; a v6 one leaves nothing to say.
        for (relay, want) in [("198.18.0.2", vec![1]), ("fd00:1::2", vec![])] {
            let relays = [("dhcp.relays".to_string(), format!("[\"{relay}\"]"))];
            let cfg = crate::config::Config::from_toml_with_overrides(text, &relays).unwrap();
            assert_eq!(cfg.subnets6_out_of_reach(&host), want, "{relay}");
        }
    }

    fn check(text: &str) -> (Dhcp6Settings, Vec<String>) {
        let mut issues = Issues::default();
        let s = validate(toml::from_str(text).expect("raw dhcp6"), &mut issues);
        (s, issues.keys())
    }

    #[test]
    fn a_chosen_server_duid_is_read_as_octets_and_a_bad_one_named() {
        // A DUID-EN (RFC 8415 §11.3): type 2, enterprise 343, an identifier.
        let (s, keys) = check("server_duid = \"00:02:00:00:01:57:0a:0b\"");
        assert!(keys.is_empty(), "{keys:?}");
        assert_eq!(s.server_duid, Some(vec![0, 2, 0, 0, 1, 0x57, 0x0a, 0x0b]));
        assert_eq!(check("").0.server_duid, None);
        let long = vec!["01"; 131].join(":");
        for bad in ["00:00:01:02", "00:02", "not hex", long.as_str()] {
            let (s, keys) = check(&format!("server_duid = \"{bad}\""));
            assert_eq!(
                (s.server_duid, keys),
                (None, vec!["dhcp6.server_duid".to_string()]),
                "{bad}"
            );
        }
    }
}
