//! `[http]`: the boot and operator HTTP listeners and their TLS files.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    tls_listen: Option<String>,
    plain_boot: Option<bool>,
    chain_ca: Option<String>,
    header_timeout_ms: Option<u32>,
    idle_timeout_ms: Option<u32>,
    request_timeout_ms: Option<u32>,
    max_connections: Option<u32>,
    max_connections_per_source: Option<u32>,
    insecure_operator_api: Option<bool>,
    metrics: Option<String>,
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
    /// TLS: for the operator listener when there is one, for `tls_listen`, else for the
    /// only listener.
    pub tls: Option<TlsFiles>,
    /// A TLS listener for the boot routes (`http.tls_listen`, ironic-image's
    /// `IPXE_TLS_PORT`); the operator API moves there too when it has no listener of
    /// its own, and `listen` stays plain HTTP.
    pub tls_listen: Option<SocketAddr>,
    /// Whether the plain `listen` serves the boot routes too (`http.plain_boot`); with
    /// `false` it keeps only health and public metrics.
    pub plain_boot: bool,
    /// Extra trusted CA certificates (PEM) for the HEAD a boot route sends before it
    /// chains an `https://` URL (a conductor's per-node config, another member's TLS
    /// boot route): the site's CA, the one built into its iPXE.
    pub chain_ca: Option<PathBuf>,
    /// A separate listener for the operator API; the main one then serves boot routes.
    pub operator_listen: Option<SocketAddr>,
    /// Connection limits and timeouts of every HTTP listener.
    pub limits: ConnLimits,
    /// Allows bearer tokens over plain HTTP on a non-loopback address
    /// (`http.insecure_operator_api`); `check-config` warns when it is set.
    pub insecure_operator_api: bool,
    /// Who may read `/metrics` (pool fill, member names, request counts).
    pub metrics: MetricsExposure,
}

/// Who may read `/metrics` (`http.metrics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsExposure {
    /// Anyone who reaches an HTTP listener, boot port included (`"public"`; the
    /// default with a single listener).
    Public,
    /// Operators only (`"operator"`; the default with `http.operator_listen`): served
    /// on the operator listener, or, with one listener, behind the operator token.
    Operator,
}

/// `[http]` timeouts and connection caps. Any machine on a provisioning segment may be
/// hostile, so every connection is bounded in time and in number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// A request head (or a TLS handshake) must arrive within this after it is awaited.
    pub header_timeout: Duration,
    /// A connection that moves no byte either way for this long is closed.
    pub idle_timeout: Duration,
    /// A request must be answered (body included) within this after its head arrived.
    pub request_timeout: Duration,
    /// Open connections over all sources, per listener.
    pub max_connections: u32,
    /// Open connections from one source address, per listener.
    pub max_connections_per_source: u32,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
            max_connections: 4096,
            max_connections_per_source: 64,
        }
    }
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
    let limits = validate_limits(&raw, issues);
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
    let chain_ca = file("http.chain_ca", raw.chain_ca);
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
    let tls_listen = validate_tls_listen(
        raw.tls_listen.as_deref(),
        listen,
        operator_listen,
        tls.is_some(),
        issues,
    );
    let plain_boot = raw.plain_boot.unwrap_or(true);
    if !plain_boot && tls_listen.is_none() {
        issues.add(
            "http.plain_boot",
            "false needs http.tls_listen: no listener would serve the boot routes",
        );
    }
    let insecure_operator_api = raw.insecure_operator_api.unwrap_or(false);
    // Bearer tokens in clear on the segment would be readable by every machine on it.
    if token_file.is_some() && tls.is_none() && !insecure_operator_api {
        let api = operator_listen.unwrap_or(listen);
        if !api.ip().is_loopback() {
            issues.add(
                "http.token_file",
                format!(
                    "the operator API would take bearer tokens in clear on {api}: \
                     set http.tls_cert and http.tls_key, a loopback http.operator_listen, \
                     or http.insecure_operator_api = true"
                ),
            );
        }
    }
    let metrics = match raw.metrics.as_deref() {
        None if operator_listen.is_some() => MetricsExposure::Operator,
        None | Some("public") => MetricsExposure::Public,
        Some("operator") => MetricsExposure::Operator,
        Some(_) => {
            issues.add("http.metrics", "must be \"public\" or \"operator\"");
            MetricsExposure::Public
        }
    };
    if metrics == MetricsExposure::Operator && operator_listen.is_none() && token_file.is_none() {
        issues.add(
            "http.metrics",
            "\"operator\" needs http.operator_listen or http.token_file (the token Prometheus sends)",
        );
    }
    HttpSettings {
        metrics,
        enabled: raw.enabled.unwrap_or(true),
        listen,
        chain_timeout_ms,
        chain_retries,
        token_file,
        tls,
        tls_listen,
        plain_boot,
        chain_ca,
        operator_listen,
        limits,
        insecure_operator_api,
    }
}

/// `http.tls_listen`: an address of its own, and the certificate to serve it with.
fn validate_tls_listen(
    v: Option<&str>,
    listen: SocketAddr,
    operator_listen: Option<SocketAddr>,
    has_tls: bool,
    issues: &mut Issues,
) -> Option<SocketAddr> {
    let v = v?;
    let Ok(addr) = v.parse::<SocketAddr>() else {
        issues.add(
            "http.tls_listen",
            "must be an address:port such as 0.0.0.0:8084",
        );
        return None;
    };
    if addr == listen || Some(addr) == operator_listen {
        issues.add(
            "http.tls_listen",
            "must differ from http.listen and http.operator_listen",
        );
    }
    if !has_tls {
        issues.add("http.tls_listen", "needs http.tls_cert and http.tls_key");
    }
    Some(addr)
}

/// The timeouts and caps of `[http]`, each checked against its range.
fn validate_limits(raw: &RawHttp, issues: &mut Issues) -> ConnLimits {
    let d = ConnLimits::default();
    let ms = |d: Duration| d.as_millis() as u32;
    let mut timeout = |key: &str, v: Option<u32>, default: Duration, hi: u32| {
        Duration::from_millis(
            issues
                .in_range(key, v.unwrap_or(ms(default)), 100, hi)
                .into(),
        )
    };
    let header_timeout = timeout(
        "http.header_timeout_ms",
        raw.header_timeout_ms,
        d.header_timeout,
        600_000,
    );
    let idle_timeout = timeout(
        "http.idle_timeout_ms",
        raw.idle_timeout_ms,
        d.idle_timeout,
        3_600_000,
    );
    let request_timeout = timeout(
        "http.request_timeout_ms",
        raw.request_timeout_ms,
        d.request_timeout,
        3_600_000,
    );
    let max_connections = issues.in_range(
        "http.max_connections",
        raw.max_connections.unwrap_or(d.max_connections),
        1,
        1_000_000,
    );
    let max_connections_per_source = issues.in_range(
        "http.max_connections_per_source",
        raw.max_connections_per_source
            .unwrap_or(d.max_connections_per_source),
        1,
        max_connections.max(1),
    );
    ConnLimits {
        header_timeout,
        idle_timeout,
        request_timeout,
        max_connections,
        max_connections_per_source,
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError};

    fn issues(http: &str) -> Vec<String> {
        match Config::from_toml_with_overrides(&format!("[http]\n{http}"), &[]) {
            Ok(_) => vec![],
            Err(ConfigError::Invalid(v)) => v.iter().map(|i| i.to_string()).collect(),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn limits_have_defaults_and_ranges() {
        let c = Config::from_toml_with_overrides("", &[]).unwrap();
        assert_eq!(c.http.limits, super::ConnLimits::default());
        let got = issues(
            "header_timeout_ms = 50\nidle_timeout_ms = 4000000\nrequest_timeout_ms = 0\n\
             max_connections = 0\nmax_connections_per_source = 10",
        );
        for key in [
            "http.header_timeout_ms: must be between 100 and 600000",
            "http.idle_timeout_ms: must be between 100 and 3600000",
            "http.request_timeout_ms: must be between 100 and 3600000",
            "http.max_connections: must be between 1 and 1000000",
            "http.max_connections_per_source: must be between 1 and 1",
        ] {
            assert!(got.iter().any(|g| g == key), "{key} not in {got:?}");
        }
        let c = Config::from_toml_with_overrides(
            "[http]\nheader_timeout_ms = 2000\nmax_connections = 100\nmax_connections_per_source = 100",
            &[],
        )
        .unwrap();
        assert_eq!(c.http.limits.header_timeout.as_millis(), 2000);
        assert_eq!(c.http.limits.max_connections_per_source, 100);
    }

    #[test]
    fn tokens_in_clear_need_loopback_tls_or_the_insecure_key() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens");
        std::fs::write(&tokens, "token-0123456789abcdef\n").unwrap();
        let t = format!("token_file = \"{}\"", tokens.display());
        let refused = issues(&format!("listen = \"192.0.2.1:8080\"\n{t}"));
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0].starts_with("http.token_file: the operator API would take bearer tokens in clear on 192.0.2.1:8080"),
            "{refused:?}"
        );
        // The default listener (every address) is not loopback either.
        assert_eq!(issues(&t).len(), 1);
        assert_eq!(
            issues(&format!("listen = \"127.0.0.1:8080\"\n{t}")),
            Vec::<String>::new()
        );
        assert_eq!(
            issues(&format!("listen = \"[::1]:8080\"\n{t}")),
            Vec::<String>::new()
        );
        // The API on its own loopback listener; the boot listener stays on the segment.
        assert_eq!(
            issues(&format!(
                "listen = \"192.0.2.1:8080\"\noperator_listen = \"127.0.0.1:8443\"\n{t}"
            )),
            Vec::<String>::new()
        );
        // A separate operator listener that is not loopback is refused too.
        assert_eq!(
            issues(&format!(
                "listen = \"127.0.0.1:8080\"\noperator_listen = \"192.0.2.1:8443\"\n{t}"
            ))
            .len(),
            1
        );
        assert_eq!(
            issues(&format!(
                "listen = \"192.0.2.1:8080\"\ninsecure_operator_api = true\n{t}"
            )),
            Vec::<String>::new()
        );
        // Without a token file there are no tokens to leak.
        assert_eq!(issues("listen = \"192.0.2.1:8080\""), Vec::<String>::new());
    }
}
