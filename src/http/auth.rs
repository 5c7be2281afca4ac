//! Bearer tokens for the operator API, read from a file (one token per line, so a new
//! token can be added before the old one is removed) and re-read when the file
//! changes: rotating a token needs no restart. The file is looked at (one `stat`) at
//! most every [`RELOAD_INTERVAL`], by one request, not by every request under a lock:
//! a rotation takes effect within that time. Tokens are kept as SHA-256 digests and
//! compared whole, so neither a token's length nor its first differing byte shows in
//! the time a refusal takes. Without a token file the operator API
//! refuses every request; the boot routes, `/healthz` and `/readyz` stay public, and
//! `/metrics` as `http.metrics` says.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::{Duration, Instant, SystemTime};

use ring::digest;

use tracing::warn;

/// The tokens and where they come from.
pub struct TokenAuth {
    path: Option<PathBuf>,
    loaded: RwLock<Loaded>,
    /// Milliseconds after `epoch` when the file is next looked at.
    next_check: AtomicU64,
    epoch: Instant,
}

/// How often the token file is looked at for a change.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

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
    /// SHA-256 of each token.
    tokens: Vec<Digest>,
}

type Digest = [u8; 32];

fn sha256(bytes: &[u8]) -> Digest {
    let mut d = [0u8; 32];
    d.copy_from_slice(digest::digest(&digest::SHA256, bytes).as_ref());
    d
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
            loaded: RwLock::new(Loaded::default()),
            next_check: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Checks an `Authorization` header value.
    pub fn check(&self, authorization: Option<&[u8]>) -> Result<(), Refusal> {
        self.check_at(authorization, Instant::now())
    }

    /// [`Self::check`] at `now`.
    fn check_at(&self, authorization: Option<&[u8]>, now: Instant) -> Result<(), Refusal> {
        let Some(path) = &self.path else {
            return Err(Refusal::Disabled);
        };
        let presented = authorization
            .and_then(|h| h.strip_prefix(b"Bearer "))
            .map(|t| t.trim_ascii())
            .filter(|t| !t.is_empty())
            .ok_or(Refusal::BadToken)?;
        self.reload_if_due(path, now);
        let presented = sha256(presented);
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        // Every token compared, every byte of each: no early return on any difference.
        let ok = loaded
            .tokens
            .iter()
            .fold(false, |ok, t| ok | digests_equal(t, &presented));
        if ok {
            Ok(())
        } else {
            Err(Refusal::BadToken)
        }
    }

    /// Looks at the file when [`RELOAD_INTERVAL`] has passed since the last look; one
    /// caller does, the others go on with the tokens they have.
    fn reload_if_due(&self, path: &PathBuf, now: Instant) {
        let at = u64::try_from(now.saturating_duration_since(self.epoch).as_millis())
            .unwrap_or(u64::MAX);
        let due = self.next_check.load(Ordering::Acquire);
        let next = at.saturating_add(RELOAD_INTERVAL.as_millis() as u64);
        if at < due
            || self
                .next_check
                .compare_exchange(due, next, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return;
        }
        let stamp = std::fs::metadata(path)
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
        let current = self.loaded.read().unwrap_or_else(|p| p.into_inner()).stamp;
        if stamp.is_some() && stamp == current {
            return;
        }
        let mut fresh = Loaded::default();
        reload(path, stamp, &mut fresh);
        *self.loaded.write().unwrap_or_else(|p| p.into_inner()) = fresh;
    }
}

fn reload(path: &PathBuf, stamp: Option<(SystemTime, u64)>, loaded: &mut Loaded) {
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
                .map(sha256)
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

/// Whether two digests are equal, looking at every byte whatever differs.
fn digests_equal(a: &Digest, b: &Digest) -> bool {
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
        let t0 = Instant::now();
        assert_eq!(
            auth.check_at(Some(b"Bearer old-token-0123456789"), t0),
            Ok(())
        );
        assert_eq!(
            auth.check_at(Some(b"Bearer short"), t0),
            Err(Refusal::BadToken)
        );
        assert_eq!(
            auth.check_at(Some(b"Bearer old-token-012345678"), t0),
            Err(Refusal::BadToken)
        );
        assert_eq!(
            auth.check_at(Some(b"old-token-0123456789"), t0),
            Err(Refusal::BadToken)
        );
        assert_eq!(auth.check_at(None, t0), Err(Refusal::BadToken));
        // Rotate: requests within the interval are answered from memory, without
        // looking at the file...
        std::fs::write(&f, "new-token-abcdefghijklmnop\n").unwrap();
        let soon = t0 + RELOAD_INTERVAL / 2;
        assert_eq!(
            auth.check_at(Some(b"Bearer old-token-0123456789"), soon),
            Ok(())
        );
        // ...and once it has passed, the new token works, the old one no longer does.
        let later = t0 + RELOAD_INTERVAL + Duration::from_millis(1);
        assert_eq!(
            auth.check_at(Some(b"Bearer new-token-abcdefghijklmnop"), later),
            Ok(())
        );
        assert_eq!(
            auth.check_at(Some(b"Bearer old-token-0123456789"), later),
            Err(Refusal::BadToken)
        );
        // A token that is a prefix or an extension of a real one is refused like any.
        for t in [
            &b"Bearer new-token-abcdefghijklmno"[..],
            b"Bearer new-token-abcdefghijklmnopq",
        ] {
            assert_eq!(auth.check_at(Some(t), later), Err(Refusal::BadToken));
        }
        // No file configured: off.
        assert_eq!(
            TokenAuth::new(None).check(Some(b"Bearer x")),
            Err(Refusal::Disabled)
        );
    }
}
