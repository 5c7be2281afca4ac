//! Ironic's MariaDB settings as the shared lease store (`[store]`).
//!
//! ironic-image (`scripts/configure-ironic.sh`, `auth-common.sh`, `tls-common.sh`)
//! uses MariaDB when `IRONIC_USE_MARIADB` is `true`: `MARIADB_HOST` (default
//! 127.0.0.1), `MARIADB_DATABASE` (default `ironic`), the user and password from the
//! files `username` and `password` under `/auth/mariadb`, and TLS verified with
//! `/certs/ca/mariadb/tls.crt` when that file exists. IrSO
//! (`pkg/ironic/containers.go`, `databaseClientEnvVars` and `databaseClientMounts`)
//! sets the two variables from `spec.database.host` and `name`, and mounts the Secrets
//! `credentialsName` and `tlsCertificateName` at exactly those two places.
//!
//! A member given those settings keeps its bindings on the same server, in a database
//! of its own (`SHARDBOOT_DATABASE`, default `shardboot`): Ironic's schema is Ironic's,
//! and its migrations must never meet shardboot's tables.

use std::collections::BTreeMap;

use toml::{Table, Value};

use super::{get, HostFacts, Issues};

/// Where IrSO mounts the database Secret (`spec.database.credentialsName`) and where
/// ironic-image reads `username` and `password` from.
pub const DATABASE_CREDENTIALS_DIR: &str = "/auth/mariadb";
/// Where IrSO mounts `spec.database.tlsCertificateName`: ironic-image's
/// `MARIADB_CACERT_FILE`, whose presence turns TLS on.
pub const DATABASE_CA_FILE: &str = "/certs/ca/mariadb/tls.crt";
/// The database shardboot uses on Ironic's server unless `SHARDBOOT_DATABASE` names
/// another.
pub const DATABASE_NAME: &str = "shardboot";
/// The variable naming shardboot's database. It is read here, not as a config key.
pub const DATABASE_VAR: &str = "SHARDBOOT_DATABASE";

/// The variables that only mean something with `IRONIC_USE_MARIADB=true`.
const NEEDS_MARIADB: [&str; 4] = [
    "MARIADB_HOST",
    "MARIADB_USER",
    "MARIADB_PASSWORD",
    DATABASE_VAR,
];

/// The `[store]` table for Ironic's database settings, or `None` when Ironic uses no
/// MariaDB (then the members check refuses several members, naming `store.shared`).
pub(super) fn store(
    vars: &BTreeMap<String, String>,
    host: &HostFacts,
    issues: &mut Issues,
) -> Option<Table> {
    let enabled = match get(vars, "IRONIC_USE_MARIADB")
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            issues.add(
                "IRONIC_USE_MARIADB",
                format!("{other:?}: must be true or false"),
            );
            return None;
        }
    };
    if !enabled {
        // ironic-image ignores these without IRONIC_USE_MARIADB; here they can only be
        // meant for a shared store that would then silently not exist.
        for var in NEEDS_MARIADB {
            if get(vars, var).is_some() {
                issues.add(
                    var,
                    "is read only with IRONIC_USE_MARIADB=true (the shared lease store on \
                     Ironic's MariaDB server); set that, or unset this",
                );
            }
        }
        return None;
    }
    if get(vars, "MARIADB_PASSWORD").is_some() {
        // It would have to travel in the connection URL; ironic-image deprecates it too.
        issues.add(
            "MARIADB_PASSWORD",
            format!(
                "a password in the environment is not taken: mount the database Secret \
                 (username and password) at {DATABASE_CREDENTIALS_DIR}, as IrSO does"
            ),
        );
    }
    if get(vars, "MARIADB_USER").is_some() {
        // The store reads user and password as a pair from the Secret's files.
        issues.add(
            "MARIADB_USER",
            format!(
                "the user comes from {DATABASE_CREDENTIALS_DIR}/username, beside its \
                 password; unset MARIADB_USER"
            ),
        );
    }
    let server = match get(vars, "MARIADB_HOST").map(authority) {
        None => Some("127.0.0.1".to_string()),
        Some(Ok(a)) => Some(a),
        Some(Err(e)) => {
            issues.add("MARIADB_HOST", e);
            None
        }
    };
    let name = database_name(vars, issues);
    let (server, name) = (server?, name?);

    let mut store = Table::new();
    store.insert(
        "shared".into(),
        Value::String(format!("mysql://{server}/{name}")),
    );
    store.insert(
        "credentials_dir".into(),
        Value::String(DATABASE_CREDENTIALS_DIR.into()),
    );
    // As ironic-image: the CA's presence is what asks for TLS.
    if host.database_ca_readable {
        store.insert("ca_file".into(), Value::String(DATABASE_CA_FILE.into()));
    }
    Some(store)
}

/// `MARIADB_HOST` as a URL authority: a name or address, optionally `:port`; a bare
/// IPv6 address gets its brackets.
fn authority(v: &str) -> Result<String, String> {
    if let Ok(a) = v.parse::<std::net::Ipv6Addr>() {
        return Ok(format!("[{a}]"));
    }
    // Anything that would end the authority or carry credentials in the URL. The value
    // is not repeated: it may hold a password.
    if v.chars()
        .any(|c| c.is_whitespace() || c.is_control() || "/?#@\\\"'".contains(c))
    {
        return Err(
            "must be a host name or address, optionally with :port (no user, password or path)"
                .into(),
        );
    }
    Ok(v.to_string())
}

/// shardboot's database name: never Ironic's.
fn database_name(vars: &BTreeMap<String, String>, issues: &mut Issues) -> Option<String> {
    let name = get(vars, DATABASE_VAR).unwrap_or(DATABASE_NAME);
    // A plain identifier: it goes unquoted into the URL, and the operator's SQL.
    if name.is_empty()
        || name.len() > 64
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        issues.add(
            DATABASE_VAR,
            format!("{name:?}: must be 1 to 64 letters, digits or underscores"),
        );
        return None;
    }
    // ironic-image's default; MariaDB may fold case, so compare without it.
    let ironic = get(vars, "MARIADB_DATABASE").unwrap_or("ironic");
    if name.eq_ignore_ascii_case(ironic) {
        let var = if get(vars, DATABASE_VAR).is_some() {
            DATABASE_VAR
        } else {
            "MARIADB_DATABASE"
        };
        issues.add(
            var,
            format!(
                "{name:?} is Ironic's database; shardboot's tables need one of their own on \
                 that server ({DATABASE_VAR}, default {DATABASE_NAME:?})"
            ),
        );
        return None;
    }
    Some(name.to_string())
}
