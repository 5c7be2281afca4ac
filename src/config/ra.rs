//! `[ra]`: the IPv6 router-solicitation responder ("no router here", or on a
//! `[[subnet6]]` link "ask DHCPv6").

use serde::Deserialize;

use super::issues::Issues;

/// `[ra]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRa {
    enabled: Option<bool>,
    stand_down_secs: Option<u64>,
}

/// `[ra]` after validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaSettings {
    /// Whether to answer Router Solicitations at all.
    pub enabled: bool,
    /// How long to stay silent after a real router's advertisement, in seconds.
    pub stand_down_secs: u64,
}

impl Default for RaSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            // Three times RFC 4861's default MaxRtrAdvInterval (600 s): a router that
            // is still there has advertised again by then.
            stand_down_secs: 1800,
        }
    }
}

/// Validates `[ra]`. With `[[subnet6]]` served, answering is on unless turned off:
/// firmware starts DHCPv6 on the managed flag of an advertisement (iPXE waits for one).
pub(super) fn validate(raw: RawRa, serves_v6: bool, issues: &mut Issues) -> RaSettings {
    let default = RaSettings::default();
    RaSettings {
        enabled: raw.enabled.unwrap_or(default.enabled || serves_v6),
        stand_down_secs: issues.in_range(
            "ra.stand_down_secs",
            raw.stand_down_secs.unwrap_or(default.stand_down_secs),
            1,
            86_400,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ra_is_off_unless_a_config_turns_it_on() {
        let mut issues = Issues::default();
        let off = validate(RawRa::default(), false, &mut issues);
        assert!(validate(RawRa::default(), true, &mut issues).enabled);
        assert!(!off.enabled);
        let on = validate(
            RawRa {
                enabled: Some(true),
                stand_down_secs: Some(0),
            },
            false,
            &mut issues,
        );
        assert!(on.enabled);
        assert_eq!(issues.keys(), ["ra.stand_down_secs"]);
    }
}
