//! `[owner.ironic]`: the Ironic API the owner resolver asks which conductor owns a MAC.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::issues::Issues;

/// The microversion shardboot asks for at least: the first that reports
/// `node.conductor`.
pub const MIN_API_VERSION: (u32, u32) = (1, 49);

/// `[owner.ironic]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIronic {
    url: Option<String>,
    username: Option<String>,
    password: Option<String>,
    password_file: Option<String>,
    ca_file: Option<String>,
    api_version: Option<String>,
    refresh_secs: Option<u64>,
    timeout_ms: Option<u64>,
    negative_ttl_secs: Option<u64>,
    backoff_secs: Option<u64>,
    max_lookups: Option<usize>,
    page_size: Option<u32>,
    lookups_per_sec: Option<u32>,
    insecure_http: Option<bool>,
}

/// `[owner.ironic]` after validation. Its `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct IronicSettings {
    /// Base URL of the Ironic API, without `/v1`.
    pub url: String,
    /// HTTP basic auth user (Metal3 deploys Ironic with basic auth).
    pub username: Option<String>,
    /// HTTP basic auth password.
    pub password: Option<String>,
    /// PEM file of CA certificates trusted for Ironic's TLS certificate, on top of the
    /// built-in roots.
    pub ca_file: Option<PathBuf>,
    /// `X-OpenStack-Ironic-API-Version`; at least 1.49, where `node.conductor` appears.
    pub api_version: String,
    /// How often the full lists are read again.
    pub refresh: Duration,
    /// Timeout of one request to Ironic.
    pub timeout: Duration,
    /// How long "no such port" is believed.
    pub negative_ttl: Duration,
    /// After a failure, misses skip Ironic for this long.
    pub backoff: Duration,
    /// On-demand lookups in flight at once; more misses fall through to the next
    /// resolver instead of queueing.
    pub max_lookups: usize,
    /// Page size asked for (Ironic caps it at its `[api] max_limit`).
    pub page_size: u32,
    /// On-demand lookups started per second, on average and at most that many at once
    /// (a token bucket): what unknown MACs can cost Ironic, whoever sends them.
    pub lookups_per_sec: u32,
    /// Basic auth over plain `http://` to a host that is not loopback, by explicit
    /// choice (`owner.ironic.insecure_http`); `check-config` names it.
    pub insecure_http: bool,
}

impl std::fmt::Debug for IronicSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IronicSettings")
            .field("url", &self.url)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("ca_file", &self.ca_file)
            .field("api_version", &self.api_version)
            .field("refresh", &self.refresh)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl IronicSettings {
    /// The warning for `owner.ironic.insecure_http = true` when it takes effect.
    pub fn insecure_http_warning(&self) -> Option<String> {
        (self.insecure_http
            && self.username.is_some()
            && self.url.starts_with("http://")
            && !loopback_host(&self.url))
        .then(|| {
            format!(
                "owner.ironic.insecure_http: the Ironic credentials cross the network in clear to {}; anyone on the path can read them and answer for Ironic",
                self.url
            )
        })
    }
}

/// Whether `url`'s host is a loopback address (or `localhost`, RFC 6761 §6.3): traffic
/// to it never leaves the machine (or, in a pod, the pod).
fn loopback_host(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.split(':').next().unwrap_or(""),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
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
pub(super) fn validate(raw: RawIronic, issues: &mut Issues) -> IronicSettings {
    let k = |f: &str| format!("owner.ironic.{f}");
    let url = raw
        .url
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_string();
    let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
    if url.is_empty() {
        issues.add(
            k("url"),
            "is required (the Ironic API, e.g. http://ironic:6385)",
        );
    } else if !scheme_ok || url.contains(['@', ' ', '?', '#']) || url.ends_with("/v1") {
        issues.add(
            k("url"),
            "must be an http(s) base URL without credentials, query or /v1",
        );
    }
    let password = match (raw.password, raw.password_file) {
        (Some(_), Some(_)) => {
            issues.add(
                k("password_file"),
                "give password or password_file, not both",
            );
            None
        }
        (Some(p), None) => Some(p),
        (None, Some(f)) => match std::fs::read_to_string(&f) {
            Ok(p) => Some(p.trim_end_matches(['\r', '\n']).to_string()),
            Err(e) => {
                issues.add(k("password_file"), format!("cannot read {f}: {e}"));
                None
            }
        },
        (None, None) => None,
    };
    if password.is_some() && raw.username.is_none() {
        issues.add(k("username"), "is required with a password");
    }
    // Basic auth in clear: anyone on the path reads the credentials, and can answer in
    // Ironic's place, which decides who owns which machine and which conductors are
    // members. As `http.token_file` is refused without TLS off loopback.
    let insecure_http = raw.insecure_http.unwrap_or(false);
    if url.starts_with("http://")
        && raw.username.is_some()
        && !loopback_host(&url)
        && !insecure_http
    {
        issues.add(
            k("url"),
            "basic auth over plain http:// to a host that is not loopback would send the \
             Ironic credentials in clear and let anyone on the path answer for Ironic: use \
             https:// (with owner.ironic.ca_file), or set owner.ironic.insecure_http = true",
        );
    }
    let ca_file = raw.ca_file.map(PathBuf::from);
    if let Some(ca) = &ca_file {
        if !ca.is_file() {
            issues.add(
                k("ca_file"),
                format!("{} is not a readable file", ca.display()),
            );
        }
    }
    let api_version = raw.api_version.unwrap_or_else(|| "1.49".into());
    if !api_version_ok(&api_version) {
        issues.add(
            k("api_version"),
            "must be a microversion such as 1.49 or later (node.conductor appears in 1.49)",
        );
    }
    IronicSettings {
        url,
        username: raw.username,
        password,
        ca_file,
        api_version,
        refresh: Duration::from_secs(issues.in_range(
            &k("refresh_secs"),
            raw.refresh_secs.unwrap_or(60),
            1,
            86_400,
        )),
        timeout: Duration::from_millis(issues.in_range(
            &k("timeout_ms"),
            raw.timeout_ms.unwrap_or(3_000),
            50,
            120_000,
        )),
        negative_ttl: Duration::from_secs(issues.in_range(
            &k("negative_ttl_secs"),
            raw.negative_ttl_secs.unwrap_or(10),
            0,
            3_600,
        )),
        backoff: Duration::from_secs(issues.in_range(
            &k("backoff_secs"),
            raw.backoff_secs.unwrap_or(5),
            1,
            3_600,
        )),
        max_lookups: issues.in_range(&k("max_lookups"), raw.max_lookups.unwrap_or(16), 1, 1_024),
        page_size: issues.in_range(&k("page_size"), raw.page_size.unwrap_or(1_000), 1, 10_000),
        lookups_per_sec: issues.in_range(
            &k("lookups_per_sec"),
            raw.lookups_per_sec.unwrap_or(20),
            1,
            10_000,
        ),
        insecure_http,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(raw: RawIronic) -> Vec<String> {
        let mut issues = Issues::default();
        validate(raw, &mut issues);
        issues.keys()
    }

    #[test]
    fn bad_ironic_settings_name_their_key() {
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
    fn basic_auth_over_plain_http_is_refused_off_loopback_unless_insecure_is_set() {
        let raw = |url: &str, user: bool, insecure: Option<bool>| RawIronic {
            url: Some(url.into()),
            username: user.then(|| "ironic".into()),
            password: user.then(|| "pw".into()),
            insecure_http: insecure,
            ..Default::default()
        };
        let mut issues = Issues::default();
        validate(raw("http://ironic.example:6385", true, None), &mut issues);
        assert_eq!(issues.keys(), ["owner.ironic.url"]);
        let text = issues.finish().unwrap_err()[0].to_string();
        assert!(
            text.contains("in clear") && text.contains("owner.ironic.insecure_http"),
            "{text}"
        );
        for ok in [
            raw("http://ironic.example:6385", true, Some(true)),
            raw("https://ironic.example:6385", true, None),
            raw("http://ironic.example:6385", false, None),
            raw("http://127.0.0.2:6385", true, None),
            raw("http://[::1]:6385", true, None),
            raw("http://localhost:6385", true, None),
        ] {
            let url = ok.url.clone();
            assert_eq!(keys(ok), Vec::<String>::new(), "{url:?}");
        }
        assert_eq!(
            keys(raw("http://127.0.0.1.example:6385", true, None)),
            ["owner.ironic.url"],
            "a name that only starts like a loopback address"
        );
        assert_eq!(
            keys(raw("http://[::ffff:10.0.0.1]:6385", true, None)),
            ["owner.ironic.url"]
        );
    }

    #[test]
    fn password_file_is_read_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "s3cret\n").unwrap();
        let mut issues = Issues::default();
        let s = validate(
            RawIronic {
                url: Some("https://ironic:6385/".into()),
                username: Some("ironic".into()),
                password_file: Some(f.display().to_string()),
                api_version: Some("1.89".into()),
                ..Default::default()
            },
            &mut issues,
        );
        assert_eq!(issues.keys(), Vec::<String>::new());
        assert_eq!(s.url, "https://ironic:6385");
        assert_eq!(s.password.as_deref(), Some("s3cret"));
        assert_eq!(s.api_version, "1.89");
    }
}
