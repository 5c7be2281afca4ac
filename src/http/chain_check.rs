//! Before a boot script chains a conductor's per-node config (or another member's boot
//! route), shardboot asks for it itself with a `HEAD`: iPXE cannot tell a 404 from a
//! refused connection, but the first stage must move to the next NIC at once on a miss
//! and retry only a failure to connect (`http::boot`).
//!
//! Bounded: at most [`MAX_IN_FLIGHT`] checks at once (a boot request is unauthenticated,
//! and every check goes to a configured conductor or member); beyond that, or when the
//! answer says nothing either way (a TLS error iPXE may not share, a redirect), the URL
//! is chained unchecked, as it was before checks existed.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::boot::Check;

/// Checks in flight at once.
pub const MAX_IN_FLIGHT: usize = 64;

/// How long a check may take; a conductor slower than this is treated as not answering
/// (the script then chains it anyway and retries).
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// The client and the cap shared by every boot request.
#[derive(Debug, Clone)]
pub struct ChainChecker {
    client: Option<reqwest::Client>,
    slots: Arc<Semaphore>,
}

impl Default for ChainChecker {
    fn default() -> Self {
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            // iPXE follows redirects; a redirect is an answer, not a miss.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .ok();
        Self {
            client,
            slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        }
    }
}

impl ChainChecker {
    /// Asks for `url` with `HEAD` and classifies the answer.
    pub async fn check(&self, url: &str) -> Check {
        let (Some(client), Ok(_slot)) = (&self.client, self.slots.try_acquire()) else {
            return Check::Unchecked;
        };
        classify(client.head(url).send().await)
    }
}

fn classify(result: reqwest::Result<reqwest::Response>) -> Check {
    match result {
        Ok(r) => status_check(r.status().as_u16()),
        Err(e) if e.is_connect() || e.is_timeout() => Check::Unreachable,
        Err(_) => Check::Unchecked,
    }
}

/// What an HTTP status says about a per-node config.
pub fn status_check(status: u16) -> Check {
    match status {
        404 | 410 => Check::Missing,
        500..=599 => Check::Unreachable,
        _ => Check::Answers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_not_found_is_a_miss_and_only_server_errors_count_as_silence() {
        assert_eq!(status_check(200), Check::Answers);
        assert_eq!(status_check(302), Check::Answers);
        // A conductor that does not allow HEAD still has the file as far as we know.
        assert_eq!(status_check(405), Check::Answers);
        assert_eq!(status_check(404), Check::Missing);
        assert_eq!(status_check(410), Check::Missing);
        assert_eq!(status_check(502), Check::Unreachable);
        assert_eq!(status_check(503), Check::Unreachable);
    }

    #[tokio::test]
    async fn a_refused_connection_is_unreachable() {
        // A port just bound and closed again: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = ChainChecker::default();
        assert_eq!(
            c.check(&format!("http://127.0.0.1:{port}/pxelinux.cfg/x"))
                .await,
            Check::Unreachable
        );
    }
}
