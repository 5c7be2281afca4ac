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
/// that came back, or a config that appeared, is seen at the next attempt. The second
/// left over is margin for a firmware clock that runs fast; the longer the answer is
/// kept, the fewer HEADs a machine that keeps asking costs (4 s rather than 3 s: a
/// quarter fewer, docs/benchmarks.md).
pub const CACHE_TTL: Duration = Duration::from_secs(4);

/// URLs whose answers are kept: every machine of a large site booting within
/// [`CACHE_TTL`], at about 200 bytes each (3 MiB when full).
pub const CACHE_CAPACITY: usize = 16_384;

/// Origins that did not answer, kept: far more than the conductors and members of any
/// configuration, whose URLs are the only ones checked.
pub const ORIGIN_CAPACITY: usize = 256;

/// The client, the cap and the shared answers of every boot request.
#[derive(Debug, Clone)]
pub struct ChainChecker {
    /// What each thread builds its client from; `None` if no client could be built.
    clients: Option<Arc<ClientRecipe>>,
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
        let recipe = ClientRecipe {
            extra_roots: Vec::new(),
        };
        Self::with_recipe(recipe.build().is_ok().then(|| Arc::new(recipe)))
    }
}

/// The CA certificates a check trusts beyond the site's (`crate::site_ca`), from which
/// each thread builds a client of its own.
///
/// One client per thread: the HTTP server runs a single-threaded runtime per core
/// (`serve::serve_per_core`), and a client's pooled connection is a task on the runtime
/// that opened it. A client shared by the threads sends a HEAD from one runtime to a
/// connection on another and gets the answer back across again: two wake-ups between
/// threads (an eventfd write and an extra `epoll_wait` each) per check, a quarter of
/// what a check cost the server (docs/benchmarks.md, "The checks' HEADs").
#[derive(Debug)]
struct ClientRecipe {
    extra_roots: Vec<reqwest::Certificate>,
}

thread_local! {
    /// This thread's client for each live checker, found by its recipe's address (a
    /// `Weak` keeps that address from being reused while the entry exists).
    static CLIENTS: std::cell::RefCell<Vec<(std::sync::Weak<ClientRecipe>, reqwest::Client)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl ClientRecipe {
    fn build(&self) -> reqwest::Result<reqwest::Client> {
        self.extra_roots
            .iter()
            .cloned()
            .fold(ChainChecker::builder(), |b, c| b.add_root_certificate(c))
            .build()
    }

    /// The calling thread's client, built on its first check.
    fn for_this_thread(self: &Arc<Self>) -> Option<reqwest::Client> {
        CLIENTS.with(|clients| {
            let mut clients = clients.borrow_mut();
            if let Some((_, client)) = clients
                .iter()
                .find(|(recipe, _)| std::ptr::eq(recipe.as_ptr(), Arc::as_ptr(self)))
            {
                return Some(client.clone());
            }
            // Checkers come and go in tests and on reload: drop the clients of gone ones.
            clients.retain(|(recipe, _)| recipe.strong_count() > 0);
            let client = self.build().ok()?;
            clients.push((Arc::downgrade(self), client.clone()));
            Some(client)
        })
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
        let recipe = ClientRecipe {
            extra_roots: crate::site_ca::load(path)?,
        };
        // Built once here so that a CA the client refuses is an error at start-up, not
        // a silent skip of every check.
        recipe.build().map_err(|e| crate::site_ca::SiteCaError {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Ok(Self::with_recipe(Some(Arc::new(recipe))))
    }

    /// `recipe`: `None` when no client can be built (every check is then skipped).
    fn with_recipe(recipe: Option<Arc<ClientRecipe>>) -> Self {
        Self {
            clients: recipe,
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
        let Some(clients) = &self.clients else {
            return Check::Unchecked;
        };
        let (label, step) = self.step(url, Instant::now());
        self.counts.inc(label);
        let rx = match step {
            Step::Known(check) => return check,
            Step::Join(rx) => rx,
            Step::Send(tx, permit) => {
                let rx = tx.subscribe();
                let mut flight = Flight {
                    me: self.clone(),
                    url: url.to_owned(),
                    landed: false,
                };
                let Some(client) = clients.for_this_thread() else {
                    // Dropping the flight frees the URL; those who joined it get
                    // `Unchecked` from the dropped sender.
                    return Check::Unchecked;
                };
                // A task of its own: a boot request that is cancelled (its client went
                // away) must not cancel the check others wait for.
                tokio::spawn(async move {
                    let _permit = permit;
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
        // Almost always empty: then the URL's origin is not even cut out.
        if !known.silent.is_empty() && known.silent.get(origin(url), now).is_some() {
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

    /// A conductor that answers every request with 200 and an empty body on keep-alive
    /// connections, counting the connections it accepted.
    fn counting_conductor() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{BufRead, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
                    let mut writer = conn;
                    let mut line = String::new();
                    while reader.read_line(&mut line).unwrap_or(0) > 0 {
                        if line == "\r\n" {
                            let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                            if writer.write_all(ok).is_err() {
                                return;
                            }
                        }
                        line.clear();
                    }
                });
            }
        });
        (port, accepted)
    }

    #[test]
    fn each_thread_checks_over_its_own_kept_alive_connection() {
        // The HTTP server runs a single-threaded runtime per core: a check sent over a
        // connection whose task lives on another thread's runtime would wait for that
        // runtime to be polled.
        let (port, accepted) = counting_conductor();
        let checker = ChainChecker::default();
        // Each thread keeps its runtime (and so its connections) until both are done.
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let done_rx = Arc::new(Mutex::new(done_rx));
        let checks_on_a_thread_of_its_own = |first: u32| {
            let (checker, done_rx) = (checker.clone(), done_rx.clone());
            let (answers_tx, answers_rx) = std::sync::mpsc::channel();
            let thread = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let answers = rt.block_on(async {
                    let mut answers = Vec::new();
                    for n in first..first + 3 {
                        let url = format!("http://127.0.0.1:{port}/pxelinux.cfg/{n}");
                        answers.push(checker.check(&url).await);
                    }
                    answers
                });
                answers_tx.send(answers).unwrap();
                let _ = done_rx.lock().unwrap().recv();
            });
            (answers_rx.recv().unwrap(), thread)
        };
        let (first, a) = checks_on_a_thread_of_its_own(0);
        let (second, b) = checks_on_a_thread_of_its_own(10);
        drop(done_tx);
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(first, [Check::Answers; 3]);
        assert_eq!(second, [Check::Answers; 3]);
        assert_eq!(checker.counts.get("sent"), 6);
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "one connection per thread, kept alive between its checks"
        );
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
