//! Before a boot script chains a conductor's per-node config (or another member's boot
//! route), shardboot asks for it itself with a `HEAD`: iPXE cannot tell a 404 from a
//! refused connection, but the first stage must move to the next NIC at once on a miss
//! and retry only a failure to connect (`http::boot`).
//!
//! Each check costs the conductor a request, so one is shared as far as it can be: an
//! answer is kept for [`CACHE_TTL`] (`http::check_cache`), so a machine's retries and
//! the HEAD of another member followed by the machine's GET cost one check; a URL
//! already being checked is not checked again, its requests wait for the one in flight;
//! and an origin (a conductor, a member) that did not answer is not asked again for any
//! URL until its entry expires, so a rack powering on against a dead conductor costs it
//! one check, not one per machine.
//!
//! Bounded: at most [`MAX_IN_FLIGHT`] checks at once (a boot request is unauthenticated,
//! and every check goes to a configured conductor or member); beyond that, or when the
//! answer says nothing either way (a TLS error iPXE may not share, a redirect), the URL
//! is chained unchecked, as it was before checks existed. The caches hold at most
//! [`CACHE_CAPACITY`] URLs and [`ORIGIN_CAPACITY`] origins.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::boot::Check;
use super::check_cache::TtlCache;
use crate::metrics::LabeledCounters;

/// Checks in flight at once.
pub const MAX_IN_FLIGHT: usize = 64;

/// How long a check may take; a conductor slower than this is treated as not answering
/// (the script then chains it anyway and retries).
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// How long a check's answer is used. Shorter than the 5 s a chain script waits before
/// it asks again (`ipxe/chain.ipxe`), so every retry sees a fresh check: a conductor
/// that came back, or a config that appeared, is seen at the next attempt.
pub const CACHE_TTL: Duration = Duration::from_secs(3);

/// URLs whose answers are kept: every machine of a large site booting within
/// [`CACHE_TTL`], at about 200 bytes each (3 MiB when full).
pub const CACHE_CAPACITY: usize = 16_384;

/// Origins that did not answer, kept: far more than the conductors and members of any
/// configuration, whose URLs are the only ones checked.
pub const ORIGIN_CAPACITY: usize = 256;

/// The client, the cap and the shared answers of every boot request.
#[derive(Debug, Clone)]
pub struct ChainChecker {
    client: Option<reqwest::Client>,
    slots: Arc<Semaphore>,
    known: Arc<Mutex<Known>>,
    /// How each check was answered: `sent` (a HEAD went out), `cached` (a kept
    /// answer), `joined` (waited for the same URL's HEAD in flight), `skipped` (too
    /// many in flight: chained unchecked).
    pub counts: Arc<LabeledCounters<4>>,
}

/// What is known or being found out, under one lock held only for map operations.
#[derive(Debug)]
struct Known {
    /// Answers by URL.
    urls: TtlCache<String, Check>,
    /// Origins that did not answer (refused, timed out, 5xx).
    silent: TtlCache<String, ()>,
    /// The answer of each URL with a HEAD in flight, once it comes; at most
    /// [`MAX_IN_FLIGHT`] entries, one per semaphore permit.
    in_flight: HashMap<String, watch::Receiver<Option<Check>>>,
}

impl Default for ChainChecker {
    fn default() -> Self {
        Self::with_client(Self::builder().build().ok())
    }
}

impl ChainChecker {
    fn builder() -> reqwest::ClientBuilder {
        crate::site_ca::client_builder()
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            // iPXE follows redirects; a redirect is an answer, not a miss.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
    }

    /// A checker that also trusts the CA certificates in `ca` (PEM), the site's CA that
    /// its iPXE build trusts, so an `https://` URL is checked as iPXE will fetch it.
    /// (The running server installs the CA for every client, `crate::site_ca`; this
    /// builds a checker with it explicitly.)
    pub fn with_ca(ca: Option<&std::path::Path>) -> Result<Self, crate::site_ca::SiteCaError> {
        let Some(path) = ca else {
            return Ok(Self::default());
        };
        let builder = crate::site_ca::load(path)?
            .into_iter()
            .fold(Self::builder(), |b, c| b.add_root_certificate(c));
        let client = builder.build().map_err(|e| crate::site_ca::SiteCaError {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Ok(Self::with_client(Some(client)))
    }

    fn with_client(client: Option<reqwest::Client>) -> Self {
        Self {
            client,
            slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            known: Arc::new(Mutex::new(Known {
                urls: TtlCache::new(CACHE_TTL, CACHE_CAPACITY),
                silent: TtlCache::new(CACHE_TTL, ORIGIN_CAPACITY),
                in_flight: HashMap::new(),
            })),
            counts: Arc::new(LabeledCounters::new([
                "sent", "cached", "joined", "skipped",
            ])),
        }
    }
}

/// What a request does about its URL.
enum Step {
    /// The answer is known (or the URL goes unchecked).
    Known(Check),
    /// Another request's HEAD for the URL is in flight: wait for its answer.
    Join(watch::Receiver<Option<Check>>),
    /// Send the HEAD, holding one of the [`MAX_IN_FLIGHT`] permits.
    Send(watch::Sender<Option<Check>>, OwnedSemaphorePermit),
}

impl ChainChecker {
    /// Asks for `url` with `HEAD` (or uses an answer kept or in flight) and classifies
    /// the answer.
    pub async fn check(&self, url: &str) -> Check {
        let Some(client) = &self.client else {
            return Check::Unchecked;
        };
        let (label, step) = self.step(url, Instant::now());
        self.counts.inc(label);
        let rx = match step {
            Step::Known(check) => return check,
            Step::Join(rx) => rx,
            Step::Send(tx, permit) => {
                let rx = tx.subscribe();
                // A task of its own: a boot request that is cancelled (its client went
                // away) must not cancel the check others wait for.
                let (client, me, url) = (client.clone(), self.clone(), url.to_owned());
                tokio::spawn(async move {
                    let _permit = permit;
                    let mut flight = Flight {
                        me,
                        url,
                        landed: false,
                    };
                    let check = classify(client.head(&flight.url).send().await);
                    flight.land(check, Instant::now());
                    let _ = tx.send(Some(check));
                });
                rx
            }
        };
        wait(rx).await
    }

    fn lock(&self) -> MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn step(&self, url: &str, now: Instant) -> (&'static str, Step) {
        let mut known = self.lock();
        if known.silent.get(origin(url), now).is_some() {
            return ("cached", Step::Known(Check::Unreachable));
        }
        if let Some(check) = known.urls.get(url, now) {
            return ("cached", Step::Known(check));
        }
        if let Some(rx) = known.in_flight.get(url) {
            return ("joined", Step::Join(rx.clone()));
        }
        let Ok(permit) = self.slots.clone().try_acquire_owned() else {
            return ("skipped", Step::Known(Check::Unchecked));
        };
        let (tx, rx) = watch::channel(None);
        known.in_flight.insert(url.to_owned(), rx);
        ("sent", Step::Send(tx, permit))
    }

    /// Keeps `check` for `url`: by origin when the origin did not answer.
    fn keep(&self, url: &str, check: Check, now: Instant) {
        let mut known = self.lock();
        match check {
            Check::Unreachable => known.silent.insert(origin(url).to_owned(), (), now),
            _ => known.urls.insert(url.to_owned(), check, now),
        }
        known.in_flight.remove(url);
    }
}

/// One URL's HEAD in flight. Its entry leaves the in-flight map however the check ends
/// (a panic, a runtime shut down), so the map cannot leak and no later request joins a
/// check that is gone; those already waiting see the sender dropped.
struct Flight {
    me: ChainChecker,
    url: String,
    /// The answer is kept and the entry removed (a later entry for the URL is another
    /// flight's, not to be removed on drop).
    landed: bool,
}

impl Flight {
    fn land(&mut self, check: Check, now: Instant) {
        self.me.keep(&self.url, check, now);
        self.landed = true;
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        if !self.landed {
            self.me.lock().in_flight.remove(&self.url);
        }
    }
}

/// The answer of a check in flight; unchecked if the check ended without one.
async fn wait(mut rx: watch::Receiver<Option<Check>>) -> Check {
    match rx.wait_for(Option::is_some).await {
        Ok(v) => v.unwrap_or(Check::Unchecked),
        Err(_) => Check::Unchecked,
    }
}

/// `scheme://host[:port]` of `url`: what answers or does not answer for every path on it.
/// The URLs checked are built from configured conductor and member URLs.
pub fn origin(url: &str) -> &str {
    let host_at = url.find("://").map_or(0, |i| i + 3);
    match url[host_at..].find(['/', '?', '#']) {
        Some(end) => &url[..host_at + end],
        None => url,
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

    #[test]
    fn the_origin_is_everything_before_the_path() {
        for (url, want) in [
            (
                "http://10.0.0.1:8088/pxelinux.cfg/52-54-00-12-34-56",
                "http://10.0.0.1:8088",
            ),
            ("https://[fd00::1]:8443/c1/x", "https://[fd00::1]:8443"),
            ("http://conductor.example", "http://conductor.example"),
            (
                "http://b.example:8080/v1/boot/52-54-00-12-34-56/boot.ipxe?hop=1",
                "http://b.example:8080",
            ),
            ("http://b.example?x", "http://b.example"),
        ] {
            assert_eq!(origin(url), want, "{url}");
        }
    }

    fn port_with_nothing_listening() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[tokio::test]
    async fn a_refused_connection_is_unreachable() {
        let port = port_with_nothing_listening();
        let c = ChainChecker::default();
        assert_eq!(
            c.check(&format!("http://127.0.0.1:{port}/pxelinux.cfg/x"))
                .await,
            Check::Unreachable
        );
    }

    #[tokio::test]
    async fn an_origin_that_did_not_answer_is_not_asked_again_for_any_path() {
        let port = port_with_nothing_listening();
        let c = ChainChecker::default();
        for n in 0..5 {
            assert_eq!(
                c.check(&format!("http://127.0.0.1:{port}/pxelinux.cfg/{n}"))
                    .await,
                Check::Unreachable
            );
        }
        assert_eq!(c.counts.get("sent"), 1);
        assert_eq!(c.counts.get("cached"), 4);
        assert!(c.lock().in_flight.is_empty());
    }
}
