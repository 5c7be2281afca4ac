//! `[store]`: the shared lease store several members agree through (a MariaDB/MySQL or
//! PostgreSQL database, the server Ironic's own HA already runs). Without `shared`, the
//! embedded store in `state_dir` is the whole store (a single instance).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::issues::Issues;

/// `[store]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    shared: Option<String>,
    credentials_dir: Option<String>,
    ca_file: Option<String>,
    timeout_ms: Option<u64>,
    poll_ms: Option<u64>,
    heartbeat_secs: Option<u64>,
}

impl RawStore {
    /// Whether a shared lease store is configured (members then judge each other by
    /// their heartbeat rows, not by HTTP probes).
    pub(super) fn has_shared(&self) -> bool {
        self.shared.is_some()
    }
}

/// Which SQL the shared store speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// MariaDB or MySQL (Galera included).
    MySql,
    /// PostgreSQL.
    Postgres,
}

/// The shared lease store, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedStoreSettings {
    /// The database URL as written (`mysql://host:port/db`, `postgresql://…`); user and
    /// password may come from `credentials_dir` instead.
    pub url: String,
    /// The SQL it speaks, from the URL's scheme.
    pub dialect: Dialect,
    /// A directory with `username` and `password` files (a mounted Kubernetes Secret,
    /// as IrSO's database `credentialsName` gives Ironic).
    pub credentials_dir: Option<PathBuf>,
    /// Verify the server's TLS certificate against this CA (PEM); TLS is then required.
    pub ca_file: Option<PathBuf>,
    /// How long one batch may try (retries of a failover or a Galera conflict included)
    /// before this member counts the database unreachable.
    pub timeout: Duration,
    /// How often other members' bindings are read into this member's cache.
    pub poll: Duration,
    /// How often this member's heartbeat row is written.
    pub heartbeat: Duration,
}

/// `[store]` after validation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreSettings {
    /// The shared lease store; `None` for a single instance.
    pub shared: Option<SharedStoreSettings>,
}

/// The scheme names a URL may start with, and the dialect each means.
const SCHEMES: [(&str, Dialect); 4] = [
    ("mysql://", Dialect::MySql),
    ("mariadb://", Dialect::MySql),
    ("postgres://", Dialect::Postgres),
    ("postgresql://", Dialect::Postgres),
];

/// Validates `[store]`.
pub(super) fn validate(raw: RawStore, issues: &mut Issues) -> StoreSettings {
    let Some(url) = raw.shared else {
        for (key, set) in [
            ("store.credentials_dir", raw.credentials_dir.is_some()),
            ("store.ca_file", raw.ca_file.is_some()),
        ] {
            if set {
                issues.add(key, "needs store.shared (the shared database's URL)");
            }
        }
        return StoreSettings::default();
    };
    let dialect = SCHEMES
        .iter()
        .find(|(scheme, _)| url.starts_with(scheme))
        .map(|(_, d)| *d);
    if dialect.is_none() {
        issues.add(
            "store.shared",
            "must start with mysql://, mariadb://, postgres:// or postgresql://",
        );
    }
    let path = |key: &str, v: Option<String>, issues: &mut Issues| {
        v.map(|p| {
            if p.is_empty() {
                issues.add(key, "must not be empty");
            }
            PathBuf::from(p)
        })
    };
    let credentials_dir = path("store.credentials_dir", raw.credentials_dir, issues);
    let ca_file = path("store.ca_file", raw.ca_file, issues);
    let ms = |key: &str, v: Option<u64>, default: u64, lo: u64, hi: u64, issues: &mut Issues| {
        Duration::from_millis(issues.in_range(key, v.unwrap_or(default), lo, hi))
    };
    StoreSettings {
        shared: Some(SharedStoreSettings {
            url,
            dialect: dialect.unwrap_or(Dialect::MySql),
            credentials_dir,
            ca_file,
            timeout: ms(
                "store.timeout_ms",
                raw.timeout_ms,
                2000,
                100,
                60_000,
                issues,
            ),
            poll: ms("store.poll_ms", raw.poll_ms, 1000, 50, 60_000, issues),
            heartbeat: Duration::from_secs(issues.in_range(
                "store.heartbeat_secs",
                raw.heartbeat_secs.unwrap_or(5),
                1,
                300,
            )),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(shared: &str) -> RawStore {
        RawStore {
            shared: Some(shared.into()),
            ..RawStore::default()
        }
    }

    #[test]
    fn the_scheme_names_the_dialect() {
        let mut issues = Issues::default();
        for (url, d) in [
            ("mysql://db:3306/shardboot", Dialect::MySql),
            ("mariadb://db/shardboot", Dialect::MySql),
            ("postgresql://db/shardboot", Dialect::Postgres),
            ("postgres://db/shardboot", Dialect::Postgres),
        ] {
            let s = validate(raw(url), &mut issues).shared.unwrap();
            assert_eq!(s.dialect, d, "{url}");
            assert_eq!(s.timeout, Duration::from_secs(2));
        }
        assert!(issues.keys().is_empty());
    }

    #[test]
    fn a_bad_url_and_orphan_keys_are_named() {
        let mut issues = Issues::default();
        validate(raw("sqlite:///x"), &mut issues);
        validate(
            RawStore {
                ca_file: Some("/ca".into()),
                ..RawStore::default()
            },
            &mut issues,
        );
        validate(
            RawStore {
                timeout_ms: Some(5),
                ..raw("mysql://db/x")
            },
            &mut issues,
        );
        assert_eq!(
            issues.keys(),
            ["store.shared", "store.ca_file", "store.timeout_ms"]
        );
    }
}
