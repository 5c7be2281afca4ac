//! `[http]`: the boot and operator HTTP listeners and their TLS files.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::issues::Issues;

/// `[http]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    enabled: Option<bool>,
    listen: Option<String>,
    chain_timeout_ms: Option<u32>,
    chain_retries: Option<u32>,
    token_file: Option<String>,
    operator_listen: Option<String>,
    tls_cert: Option<String>,
    tls_key: Option<String>,
    client_ca: Option<String>,
}

/// `[http]` after validation.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Whether `serve` starts the HTTP listener.
    pub enabled: bool,
    /// Listening address.
    pub listen: SocketAddr,
    /// `chain --timeout` in rendered scripts, milliseconds.
    pub chain_timeout_ms: u32,
    /// How often a script retries its chain before giving up.
    pub chain_retries: u32,
    /// Bearer tokens of the operator API, one per line; `None`: the API is off.
    pub token_file: Option<PathBuf>,
    /// TLS: for the operator listener when there is one, else for the only listener.
    pub tls: Option<TlsFiles>,
    /// A separate listener for the operator API; the main one then serves boot routes.
    pub operator_listen: Option<SocketAddr>,
}

/// `[http] tls_cert`, `tls_key`, `client_ca` after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM CA certificates for client certificates; `None`: no mTLS.
    pub client_ca: Option<PathBuf>,
}

/// Validates `[http]`. Files are checked for existence here so a typo is a config
/// error, not a listener that fails at start.
pub(super) fn validate(raw: RawHttp, issues: &mut Issues) -> HttpSettings {
    let listen = raw.listen.as_deref().unwrap_or("0.0.0.0:8080");
    let listen = listen.parse().unwrap_or_else(|_| {
        issues.add(
            "http.listen",
            "must be an address:port such as 0.0.0.0:8080",
        );
        SocketAddr::from(([0, 0, 0, 0], 8080))
    });
    let chain_timeout_ms = issues.in_range(
        "http.chain_timeout_ms",
        raw.chain_timeout_ms.unwrap_or(10_000),
        100,
        600_000,
    );
    let chain_retries = issues.in_range(
        "http.chain_retries",
        raw.chain_retries.unwrap_or(5),
        1,
        1000,
    );
    let mut file = |key: &str, v: Option<String>| {
        let p = v.map(PathBuf::from)?;
        if !p.is_file() {
            issues.add(key, format!("{} is not a readable file", p.display()));
        }
        Some(p)
    };
    let token_file = file("http.token_file", raw.token_file);
    let cert = file("http.tls_cert", raw.tls_cert);
    let key = file("http.tls_key", raw.tls_key);
    let client_ca = file("http.client_ca", raw.client_ca);
    let tls = match (cert, key) {
        (Some(cert), Some(key)) => Some(TlsFiles {
            cert,
            key,
            client_ca,
        }),
        (None, None) => {
            if client_ca.is_some() {
                issues.add("http.client_ca", "needs http.tls_cert and http.tls_key");
            }
            None
        }
        (Some(_), None) => {
            issues.add("http.tls_key", "is required with http.tls_cert");
            None
        }
        (None, Some(_)) => {
            issues.add("http.tls_cert", "is required with http.tls_key");
            None
        }
    };
    let operator_listen = raw.operator_listen.as_deref().and_then(|v| {
        let parsed = v.parse::<SocketAddr>().ok();
        match parsed {
            None => issues.add(
                "http.operator_listen",
                "must be an address:port such as 127.0.0.1:8443",
            ),
            Some(a) if a == listen => {
                issues.add("http.operator_listen", "must differ from http.listen")
            }
            Some(_) => {}
        }
        parsed
    });
    HttpSettings {
        enabled: raw.enabled.unwrap_or(true),
        listen,
        chain_timeout_ms,
        chain_retries,
        token_file,
        tls,
        operator_listen,
    }
}
