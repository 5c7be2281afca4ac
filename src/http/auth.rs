//! Bearer tokens for the operator API, read from a file (one token per line, so a new
//! token can be added before the old one is removed) and re-read when the file
//! changes: rotating a token needs no restart. Without a token file the operator API
//! refuses every request; the boot routes, `/healthz` and `/readyz` stay public, and
//! `/metrics` as `http.metrics` says.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use tracing::warn;

/// The tokens and where they come from.
pub struct TokenAuth {
    path: Option<PathBuf>,
    loaded: Mutex<Loaded>,
}

impl std::fmt::Debug for TokenAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens themselves.
        f.debug_struct("TokenAuth")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Loaded {
    stamp: Option<(SystemTime, u64)>,
    tokens: Vec<Vec<u8>>,
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No token file is configured: the operator API is off.
    Disabled,
    /// No `Authorization: Bearer` header, or a token that is not listed.
    BadToken,
}

/// Shortest token accepted from the file; shorter lines are ignored (and logged), so a
/// stray short line cannot become an easy password.
pub const MIN_TOKEN_LEN: usize = 16;

impl TokenAuth {
    /// Tokens from `path` (None: the operator API is off).
    pub fn new(path: Option<PathBuf>) -> Self {
        Self {
            path,
            loaded: Mutex::new(Loaded::default()),
        }
    }

    /// Checks an `Authorization` header value.
    pub fn check(&self, authorization: Option<&[u8]>) -> Result<(), Refusal> {
        let Some(path) = &self.path else {
            return Err(Refusal::Disabled);
        };
        let presented = authorization
            .and_then(|h| h.strip_prefix(b"Bearer "))
            .map(|t| t.trim_ascii())
            .filter(|t| !t.is_empty())
            .ok_or(Refusal::BadToken)?;
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        reload(path, &mut loaded);
        // Compare against every token without stopping early, each comparison in
        // constant time for its length.
        let mut ok = false;
        for t in &loaded.tokens {
            ok |= constant_time_eq(t, presented);
        }
        if ok {
            Ok(())
        } else {
            Err(Refusal::BadToken)
        }
    }
}

fn reload(path: &PathBuf, loaded: &mut Loaded) {
    let stamp = std::fs::metadata(path)
        .ok()
        .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
    if stamp.is_some() && stamp == loaded.stamp {
        return;
    }
    loaded.stamp = stamp;
    match std::fs::read(path) {
        Ok(text) => {
            loaded.tokens = text
                .split(|b| *b == b'\n')
                .map(|l| l.trim_ascii())
                .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
                .filter(|l| {
                    let long = l.len() >= MIN_TOKEN_LEN;
                    if !long {
                        warn!(path = %path.display(), "ignoring a token shorter than {MIN_TOKEN_LEN} characters");
                    }
                    long
                })
                .map(<[u8]>::to_vec)
                .collect();
        }
        Err(e) => {
            // An unreadable file locks the API rather than keeping stale tokens.
            warn!(path = %path.display(), error = %e, "token file unreadable; operator API refuses all requests");
            loaded.tokens.clear();
        }
    }
}

/// The warning for the settings' token file when its permissions are wider than 0600
/// (`check-config` prints it, `serve` logs it).
pub fn token_file_warning(settings: &crate::config::HttpSettings) -> Option<String> {
    let path = settings.token_file.as_ref()?;
    crate::secret_file::mode_warning("http.token_file", path, "the operator tokens")
}

/// The warning for `http.insecure_operator_api = true` when it takes effect: bearer
/// tokens in clear on a non-loopback address.
pub fn insecure_api_warning(settings: &crate::config::HttpSettings) -> Option<String> {
    let api = settings.operator_listen.unwrap_or(settings.listen);
    let clear = settings.insecure_operator_api
        && settings.token_file.is_some()
        && settings.tls.is_none()
        && !api.ip().is_loopback();
    clear.then(|| {
        format!(
            "http.insecure_operator_api: the operator API takes bearer tokens in clear on {api}; anyone on that network can read them"
        )
    })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_world_readable_token_file_is_named_in_a_warning() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "token-0123456789abcdef\n").unwrap();
        let text = format!(
            "[http]\nlisten = \"127.0.0.1:8080\"\ntoken_file = \"{}\"",
            f.display()
        );
        let config = crate::config::Config::from_toml_with_overrides(&text, &[]).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let w = token_file_warning(&config.http).unwrap();
        assert!(
            w.starts_with("http.token_file ") && w.contains("0644"),
            "{w}"
        );
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(token_file_warning(&config.http), None);
        // Loopback: no clear-text warning either.
        assert_eq!(insecure_api_warning(&config.http), None);
    }

    #[test]
    fn tokens_are_checked_and_rotated_without_restart() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "# operators\nold-token-0123456789\nshort\n").unwrap();
        let auth = TokenAuth::new(Some(f.clone()));
        assert_eq!(auth.check(Some(b"Bearer old-token-0123456789")), Ok(()));
        assert_eq!(auth.check(Some(b"Bearer short")), Err(Refusal::BadToken));
        assert_eq!(
            auth.check(Some(b"Bearer old-token-012345678")),
            Err(Refusal::BadToken)
        );
        assert_eq!(
            auth.check(Some(b"old-token-0123456789")),
            Err(Refusal::BadToken)
        );
        assert_eq!(auth.check(None), Err(Refusal::BadToken));
        // Rotate: the new token works at once, the old one no longer does.
        std::fs::write(&f, "new-token-abcdefghijklmnop\n").unwrap();
        assert_eq!(
            auth.check(Some(b"Bearer new-token-abcdefghijklmnop")),
            Ok(())
        );
        assert_eq!(
            auth.check(Some(b"Bearer old-token-0123456789")),
            Err(Refusal::BadToken)
        );
        // No file configured: off.
        assert_eq!(
            TokenAuth::new(None).check(Some(b"Bearer x")),
            Err(Refusal::Disabled)
        );
    }
}
