//! `[owner.ironic]`, `[health]` and `[ra]`: where owners come from besides the
//! inventory file, how members watch each other, and the IPv6 no-router responder.

use std::path::PathBuf;
use std::time::Duration;

use super::raw::{RawHealth, RawIronic, RawRa};
use crate::owner::health::HealthSettings;
use crate::owner::ironic::IronicSettings;
use crate::owner::ironic_wire::MIN_API_VERSION;

type Add<'a> = &'a mut dyn FnMut(String, String);

fn in_range<T: PartialOrd + Copy + std::fmt::Display>(
    key: &str,
    value: T,
    lo: T,
    hi: T,
    add: Add<'_>,
) -> T {
    if value < lo || value > hi {
        add(key.into(), format!("must be between {lo} and {hi}"));
    }
    value
}

fn api_version_ok(v: &str) -> bool {
    let Some((major, minor)) = v.split_once('.') else {
        return false;
    };
    match (major.parse::<u32>(), minor.parse::<u32>()) {
        (Ok(a), Ok(b)) => (a, b) >= MIN_API_VERSION,
        _ => false,
    }
}

/// Validates `[owner.ironic]`. The password may come from a file (as Metal3 mounts its
/// Ironic credentials); the file is read here so a bad path is a config error.
pub(super) fn ironic(raw: RawIronic, add: Add<'_>) -> IronicSettings {
    let k = |f: &str| format!("owner.ironic.{f}");
    let url = raw
        .url
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_string();
    let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
    if url.is_empty() {
        add(
            k("url"),
            "is required (the Ironic API, e.g. http://ironic:6385)".into(),
        );
    } else if !scheme_ok || url.contains(['@', ' ', '?', '#']) || url.ends_with("/v1") {
        add(
            k("url"),
            "must be an http(s) base URL without credentials, query or /v1".into(),
        );
    }
    let password = match (raw.password, raw.password_file) {
        (Some(_), Some(_)) => {
            add(
                k("password_file"),
                "give password or password_file, not both".into(),
            );
            None
        }
        (Some(p), None) => Some(p),
        (None, Some(f)) => match std::fs::read_to_string(&f) {
            Ok(p) => Some(p.trim_end_matches(['\r', '\n']).to_string()),
            Err(e) => {
                add(k("password_file"), format!("cannot read {f}: {e}"));
                None
            }
        },
        (None, None) => None,
    };
    if password.is_some() && raw.username.is_none() {
        add(k("username"), "is required with a password".into());
    }
    let ca_file = raw.ca_file.map(PathBuf::from);
    if let Some(ca) = &ca_file {
        if !ca.is_file() {
            add(
                k("ca_file"),
                format!("{} is not a readable file", ca.display()),
            );
        }
    }
    let api_version = raw.api_version.unwrap_or_else(|| "1.49".into());
    if !api_version_ok(&api_version) {
        add(
            k("api_version"),
            "must be a microversion such as 1.49 or later (node.conductor appears in 1.49)".into(),
        );
    }
    IronicSettings {
        url,
        username: raw.username,
        password,
        ca_file,
        api_version,
        refresh: Duration::from_secs(in_range(
            &k("refresh_secs"),
            raw.refresh_secs.unwrap_or(60),
            1,
            86_400,
            add,
        )),
        timeout: Duration::from_millis(in_range(
            &k("timeout_ms"),
            raw.timeout_ms.unwrap_or(3_000),
            50,
            120_000,
            add,
        )),
        negative_ttl: Duration::from_secs(in_range(
            &k("negative_ttl_secs"),
            raw.negative_ttl_secs.unwrap_or(10),
            0,
            3_600,
            add,
        )),
        backoff: Duration::from_secs(in_range(
            &k("backoff_secs"),
            raw.backoff_secs.unwrap_or(5),
            1,
            3_600,
            add,
        )),
        max_lookups: in_range(
            &k("max_lookups"),
            raw.max_lookups.unwrap_or(16),
            1,
            1_024,
            add,
        ),
        page_size: in_range(
            &k("page_size"),
            raw.page_size.unwrap_or(1_000),
            1,
            10_000,
            add,
        ),
    }
}

/// Validates `[ra]`.
pub(super) fn ra(raw: RawRa, add: Add<'_>) -> crate::ra::RaSettings {
    let default = crate::ra::RaSettings::default();
    crate::ra::RaSettings {
        enabled: raw.enabled.unwrap_or(default.enabled),
        stand_down_secs: in_range(
            "ra.stand_down_secs",
            raw.stand_down_secs.unwrap_or(default.stand_down_secs),
            1,
            86_400,
            add,
        ),
    }
}

/// Validates `[health]`.
pub(super) fn health(raw: RawHealth, add: Add<'_>) -> HealthSettings {
    let interval = in_range(
        "health.interval_ms",
        raw.interval_ms.unwrap_or(2_000),
        100,
        600_000,
        add,
    );
    let timeout = in_range(
        "health.timeout_ms",
        raw.timeout_ms.unwrap_or(1_000),
        50,
        600_000,
        add,
    );
    if timeout > interval {
        add(
            "health.timeout_ms".into(),
            "must not exceed health.interval_ms".into(),
        );
    }
    HealthSettings {
        interval: Duration::from_millis(interval),
        timeout: Duration::from_millis(timeout),
        dead_after: in_range(
            "health.dead_after",
            raw.dead_after.unwrap_or(3),
            1,
            100,
            add,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issues_of(raw: RawIronic) -> Vec<(String, String)> {
        let mut out = Vec::new();
        ironic(raw, &mut |k, r| out.push((k, r)));
        out
    }

    #[test]
    fn bad_ironic_settings_name_their_key() {
        let keys = |raw| {
            issues_of(raw)
                .into_iter()
                .map(|(k, _)| k)
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(RawIronic::default()), ["owner.ironic.url"]);
        assert_eq!(
            keys(RawIronic {
                url: Some("http://user:pw@ironic:6385".into()),
                api_version: Some("1.48".into()),
                password: Some("x".into()),
                password_file: Some("/nonexistent".into()),
                timeout_ms: Some(0),
                ..Default::default()
            }),
            [
                "owner.ironic.url",
                "owner.ironic.password_file",
                "owner.ironic.api_version",
                "owner.ironic.timeout_ms"
            ]
        );
        assert_eq!(
            keys(RawIronic {
                url: Some("https://ironic.example:6385/".into()),
                password_file: Some("/nonexistent/pw".into()),
                ..Default::default()
            }),
            ["owner.ironic.password_file"]
        );
    }

    #[test]
    fn password_file_is_read_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "s3cret\n").unwrap();
        let mut issues = Vec::new();
        let s = ironic(
            RawIronic {
                url: Some("https://ironic:6385/".into()),
                username: Some("ironic".into()),
                password_file: Some(f.display().to_string()),
                api_version: Some("1.89".into()),
                ..Default::default()
            },
            &mut |k, r| issues.push((k, r)),
        );
        assert!(issues.is_empty(), "{issues:?}");
        assert_eq!(s.url, "https://ironic:6385");
        assert_eq!(s.password.as_deref(), Some("s3cret"));
        assert_eq!(s.api_version, "1.89");
    }

    #[test]
    fn health_timeout_must_fit_the_interval() {
        let mut issues = Vec::new();
        health(
            RawHealth {
                interval_ms: Some(500),
                timeout_ms: Some(1_000),
                dead_after: Some(0),
            },
            &mut |k, _| issues.push(k),
        );
        assert_eq!(issues, ["health.timeout_ms", "health.dead_after"]);
    }

    #[test]
    fn ra_is_off_unless_a_config_turns_it_on() {
        let mut issues = Vec::new();
        let off = ra(RawRa::default(), &mut |k, _| issues.push(k));
        assert!(!off.enabled);
        let on = ra(
            RawRa {
                enabled: Some(true),
                stand_down_secs: Some(0),
            },
            &mut |k, _| issues.push(k),
        );
        assert!(on.enabled);
        assert_eq!(issues, ["ra.stand_down_secs"]);
    }
}
