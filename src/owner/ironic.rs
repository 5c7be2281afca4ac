//! The Ironic API resolver: which conductor owns a MAC, as Ironic itself reports it.
//!
//! The whole port and node lists are read at start and every `refresh` (paginated
//! `/v1/ports/detail` and `/v1/nodes/detail`); a MAC missing from them is looked up on
//! demand (`/v1/ports/detail?address=` then `/v1/nodes/{uuid}`), one request in flight per
//! MAC, a bounded number overall, and at most `lookups_per_sec` started per second; the
//! DHCP path asks only about a MAC it sees a second time (`IronicCache::seen_again`).
//! While Ironic is unreachable the cache keeps answering and the metrics say it is
//! stale.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT};
use tokio::sync::{OnceCell, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::ironic_cache::{Cached, IronicCache, Known};
use super::ironic_wire::{self, Node, Port};
use super::token_bucket::TokenBucket;
use crate::config::IronicSettings;
use crate::mac::MacAddr;
use crate::metrics::{Counter, Gauge, LabeledCounters};

/// Ironic could not be asked or answered badly.
#[derive(Debug, thiserror::Error)]
pub enum IronicError {
    /// The CA file could not be read or holds no certificate.
    #[error("owner.ironic.ca_file {path}: {reason}")]
    Ca {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Not usable as a header value (validation normally catches this).
    #[error("owner.ironic.api_version {0:?}: not a valid header value")]
    ApiVersion(String),
    /// A parsing task panicked or was cancelled.
    #[error("Ironic response processing: {0}")]
    Task(String),
    /// The HTTP client could not be built.
    #[error("Ironic HTTP client: {0}")]
    Client(reqwest::Error),
    /// Connection, TLS or timeout.
    #[error("Ironic request {path}: {source}")]
    Request {
        /// The API path (no credentials).
        path: String,
        /// The error.
        source: reqwest::Error,
    },
    /// A status other than 200 (or 404 where that means "none").
    #[error("Ironic request {path}: HTTP {status}")]
    Status {
        /// The API path.
        path: String,
        /// The status.
        status: u16,
    },
    /// A body that is not the JSON Ironic sends.
    #[error("Ironic request {path}: {source}")]
    Wire {
        /// The API path.
        path: String,
        /// The error.
        source: ironic_wire::WireError,
    },
    /// A body larger than [`MAX_BODY`]: not what Ironic sends for one page.
    #[error("Ironic request {path}: the response is larger than {limit} bytes")]
    TooLarge {
        /// The API path.
        path: String,
        /// The limit.
        limit: usize,
    },
}

/// The largest response body read from Ironic: a page of `page_size` (at most 10,000)
/// nodes is a few MiB of JSON; anything far beyond is a broken or hostile server.
pub const MAX_BODY: usize = 64 << 20;

/// Counters of the Ironic resolver.
#[derive(Debug)]
pub struct IronicMetrics {
    /// Cache lookups: `hit`, `stale_hit` (served while Ironic is unreachable), `miss`.
    pub cache: LabeledCounters<3>,
    /// On-demand lookups: `found`, `no_port`, `error`, `skipped` (backoff or too many
    /// in flight), `joined` (waited for the same MAC's lookup already in flight),
    /// `limited` (over `lookups_per_sec`), `first_sight` (the DHCP path saw the MAC for
    /// the first time: not asked yet).
    pub lookups: LabeledCounters<7>,
    /// Full refreshes that succeeded.
    pub refresh_ok: Counter,
    /// Full refreshes that failed.
    pub refresh_failed: Counter,
    /// 1 while the last exchange with Ironic succeeded.
    pub up: Gauge,
    /// MACs in the last snapshot.
    pub snapshot_macs: Gauge,
}

impl Default for IronicMetrics {
    fn default() -> Self {
        Self {
            cache: LabeledCounters::new(["hit", "stale_hit", "miss"]),
            lookups: LabeledCounters::new([
                "found",
                "no_port",
                "error",
                "skipped",
                "joined",
                "limited",
                "first_sight",
            ]),
            refresh_ok: Counter::default(),
            refresh_failed: Counter::default(),
            up: Gauge::default(),
            snapshot_macs: Gauge::default(),
        }
    }
}

impl IronicMetrics {
    /// Writes the Prometheus exposition.
    pub fn render_prometheus(&self, out: &mut String) {
        use crate::metrics::{header, sample};
        self.cache.render(
            out,
            "shardboot_owner_ironic_cache_total",
            "result",
            "Ironic owner cache lookups (stale_hit: answered while Ironic is unreachable)",
        );
        self.lookups.render(
            out,
            "shardboot_owner_ironic_lookups_total",
            "result",
            "On-demand Ironic lookups of one MAC",
        );
        header(
            out,
            "shardboot_owner_ironic_refresh_total",
            "counter",
            "Full port/node list reads",
        );
        sample(
            out,
            "shardboot_owner_ironic_refresh_total",
            "result",
            "ok",
            self.refresh_ok.get(),
        );
        sample(
            out,
            "shardboot_owner_ironic_refresh_total",
            "result",
            "failed",
            self.refresh_failed.get(),
        );
        header(
            out,
            "shardboot_owner_ironic_up",
            "gauge",
            "1 while Ironic answers; 0 while cached answers are served stale",
        );
        out.push_str(&format!("shardboot_owner_ironic_up {}\n", self.up.get()));
        header(
            out,
            "shardboot_owner_ironic_snapshot_macs",
            "gauge",
            "MACs known from the last full read",
        );
        out.push_str(&format!(
            "shardboot_owner_ironic_snapshot_macs {}\n",
            self.snapshot_macs.get()
        ));
    }
}

/// Parses one page of a list: its items and the `next` link.
type PageParser<T> = fn(&[u8]) -> Result<(Vec<T>, Option<String>), ironic_wire::WireError>;

type Inflight = Mutex<HashMap<MacAddr, Arc<OnceCell<Option<Known>>>>>;

/// The resolver's client and cache, shared by the HTTP handlers and the refresh task.
pub struct IronicOwners {
    client: reqwest::Client,
    settings: IronicSettings,
    cache: RwLock<IronicCache>,
    inflight: Inflight,
    lookup_slots: Semaphore,
    /// Lookups started per second (`lookups_per_sec`).
    bucket: Mutex<TokenBucket>,
    /// Wakes the refresh task before its interval is up.
    refresh_now: tokio::sync::Notify,
    /// Counters.
    pub metrics: IronicMetrics,
}

impl std::fmt::Debug for IronicOwners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The settings' Debug redacts the password.
        f.debug_struct("IronicOwners")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl IronicOwners {
    /// Builds the client: API version header, basic auth, extra CA, timeouts.
    pub fn new(settings: IronicSettings) -> Result<Self, IronicError> {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        headers.insert(
            "X-OpenStack-Ironic-API-Version",
            HeaderValue::from_str(&settings.api_version)
                .map_err(|_| IronicError::ApiVersion(settings.api_version.clone()))?,
        );
        let mut builder = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .pool_max_idle_per_host(4)
            .user_agent(concat!("shardboot/", env!("CARGO_PKG_VERSION")))
            // Never follow a redirect with credentials to somewhere else.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy();
        if let Some(path) = &settings.ca_file {
            for cert in read_ca(path)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        Ok(Self {
            client: builder.build().map_err(IronicError::Client)?,
            lookup_slots: Semaphore::new(settings.max_lookups),
            bucket: Mutex::new(TokenBucket::new(
                settings.lookups_per_sec,
                settings.lookups_per_sec,
            )),
            cache: RwLock::new(IronicCache::new(settings.negative_ttl)),
            inflight: Mutex::new(HashMap::new()),
            refresh_now: tokio::sync::Notify::new(),
            settings,
            metrics: IronicMetrics::default(),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &IronicSettings {
        &self.settings
    }

    /// The cached answer, without asking Ironic. Counts hits and misses.
    pub fn cached(&self, mac: &MacAddr, now: Instant) -> Cached {
        self.cached_and_stale(mac, now).0
    }

    /// [`Self::cached`], and whether answers are being served while Ironic is
    /// unreachable, under one lock.
    pub fn cached_and_stale(&self, mac: &MacAddr, now: Instant) -> (Cached, bool) {
        let cache = self.cache.read().unwrap_or_else(|p| p.into_inner());
        let answer = cache.get(mac, now);
        let stale = cache.is_stale();
        drop(cache);
        let label = match (&answer, stale) {
            (Cached::Miss, _) => "miss",
            (Cached::Hit(_), true) => "stale_hit",
            (Cached::Hit(_), false) => "hit",
        };
        self.metrics.cache.inc(label);
        (answer, stale)
    }

    /// Every MAC Ironic has a port for, as last read (no request to Ironic).
    pub fn enrolled(&self) -> Vec<MacAddr> {
        let cache = self.cache.read().unwrap_or_else(|p| p.into_inner());
        cache.enrolled()
    }

    /// Whether answers are being served while Ironic is unreachable.
    pub fn is_stale(&self) -> bool {
        self.cache
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_stale()
    }

    /// Seconds since Ironic last answered.
    pub fn age(&self, now: Instant) -> Option<Duration> {
        self.cache
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .age(now)
    }

    /// Asks Ironic about one MAC. Concurrent callers for the same MAC share one request.
    /// `None` when Ironic was not asked (backoff, too many lookups) or did not answer.
    pub async fn lookup(&self, mac: MacAddr) -> Option<Known> {
        if self
            .cache
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .in_backoff(Instant::now(), self.settings.backoff)
        {
            self.metrics.lookups.inc("skipped");
            return None;
        }
        let (cell, joined) = {
            let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            match inflight.get(&mac) {
                Some(c) => (c.clone(), true),
                None => {
                    let c = Arc::new(OnceCell::new());
                    inflight.insert(mac, c.clone());
                    (c, false)
                }
            }
        };
        if joined {
            self.metrics.lookups.inc("joined");
        }
        // Removes the entry however this call ends, a cancelled boot request included.
        let guard = InflightGuard {
            inflight: &self.inflight,
            mac,
            cell,
        };
        guard
            .cell
            .get_or_init(|| async {
                let Ok(_slot) = self.lookup_slots.try_acquire() else {
                    self.metrics.lookups.inc("skipped");
                    return None;
                };
                let admitted = self
                    .bucket
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take(Instant::now());
                if !admitted {
                    self.metrics.lookups.inc("limited");
                    return None;
                }
                let started = Instant::now();
                let result = self.fetch_one(&mac).await;
                let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
                match result {
                    Ok(known) => {
                        self.metrics.lookups.inc(match known {
                            Known::NoPort => "no_port",
                            Known::Node(_) => "found",
                        });
                        self.metrics.up.set(1);
                        cache.insert(mac, known.clone(), started);
                        debug!(%mac, ?known, "ironic lookup");
                        Some(known)
                    }
                    Err(e) => {
                        self.metrics.lookups.inc("error");
                        self.metrics.up.set(0);
                        cache.failed(Instant::now());
                        warn!(%mac, error = %e, "ironic lookup failed; serving from cache");
                        None
                    }
                }
            })
            .await
            .clone()
    }

    /// On-demand lookups whose entry is still in the in-flight map.
    pub fn inflight(&self) -> usize {
        self.inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Reads the full port and node lists and replaces the snapshot.
    pub async fn refresh(&self) -> Result<usize, IronicError> {
        let started = Instant::now();
        let result = async {
            let ports: Vec<Port> = self
                .list("/v1/ports/detail", |b| {
                    ironic_wire::parse_ports(b).map(|p| (p.ports, p.next))
                })
                .await?;
            let nodes: Vec<Node> = self
                .list("/v1/nodes/detail", |b| {
                    ironic_wire::parse_nodes(b).map(|p| (p.nodes, p.next))
                })
                .await?;
            tokio::task::spawn_blocking(move || ironic_wire::owners(&ports, &nodes))
                .await
                .map_err(|e| IronicError::Task(e.to_string()))
        }
        .await;
        let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(owners) => {
                let n = owners.len();
                let old = cache.replace_snapshot(owners, started);
                drop(cache);
                // The old map is freed outside the lock.
                drop(old);
                self.metrics.refresh_ok.inc();
                self.metrics.up.set(1);
                self.metrics.snapshot_macs.set(n as u64);
                Ok(n)
            }
            Err(e) => {
                cache.failed(Instant::now());
                self.metrics.refresh_failed.inc();
                self.metrics.up.set(0);
                Err(e)
            }
        }
    }

    /// Ironic's conductors (`GET /v1/conductors`, every page).
    pub async fn conductors(&self) -> Result<Vec<ironic_wire::Conductor>, IronicError> {
        self.list("/v1/conductors", |b| {
            ironic_wire::parse_conductors(b).map(|p| (p.conductors, p.next))
        })
        .await
    }

    /// Asks the refresh task to read the lists again now: the conductors changed, so
    /// Ironic's hash ring moves nodes between them, and routing must follow within one
    /// refresh, not one `refresh_secs`.
    pub fn refresh_soon(&self) {
        self.refresh_now.notify_one();
    }

    /// Refreshes now and then every `refresh` (sooner, after `backoff`, while Ironic
    /// fails, or when [`Self::refresh_soon`] asks) until `shutdown`.
    pub async fn run_refresh(self: Arc<Self>, shutdown: CancellationToken) {
        let mut was_ok = None;
        loop {
            let wait = match self.refresh().await {
                Ok(n) => {
                    if was_ok != Some(true) {
                        info!(macs = n, url = %self.settings.url, "ironic owner cache loaded");
                    } else {
                        debug!(macs = n, "ironic owner cache refreshed");
                    }
                    was_ok = Some(true);
                    self.settings.refresh
                }
                Err(e) => {
                    if was_ok != Some(false) {
                        warn!(error = %e, "ironic unreachable; serving owners from cache");
                    }
                    was_ok = Some(false);
                    self.settings.backoff.min(self.settings.refresh)
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
                _ = self.refresh_now.notified() => {}
            }
        }
    }

    /// Looks up, in the background, the MACs the DHCP path found missing from the cache
    /// (it never waits on the network), so the answer is there before the client's
    /// next retransmission. Runs until `shutdown` or until every sender is gone.
    pub async fn run_prefetch(
        self: Arc<Self>,
        mut missing: tokio::sync::mpsc::Receiver<MacAddr>,
        shutdown: CancellationToken,
    ) {
        loop {
            let mac = tokio::select! {
                _ = shutdown.cancelled() => return,
                m = missing.recv() => match m { Some(m) => m, None => return },
            };
            // A MAC seen once is not worth a request: firmware sends its DISCOVER again
            // within seconds, each of a flood's random MACs comes once.
            let again = self
                .cache
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .seen_again(mac, Instant::now());
            if !again {
                self.metrics.lookups.inc("first_sight");
                continue;
            }
            let me = self.clone();
            tokio::spawn(async move { me.lookup(mac).await });
        }
    }

    async fn get(&self, path_and_query: &str) -> Result<Option<Vec<u8>>, IronicError> {
        let path = path_and_query.split('?').next().unwrap_or("").to_string();
        let mut req = self
            .client
            .get(format!("{}{path_and_query}", self.settings.url));
        if let Some(user) = &self.settings.username {
            req = req.basic_auth(user, self.settings.password.as_deref());
        }
        let resp = req.send().await.map_err(|source| IronicError::Request {
            path: path.clone(),
            source,
        })?;
        match resp.status().as_u16() {
            200 => {}
            404 => return Ok(None),
            status => return Err(IronicError::Status { path, status }),
        }
        read_limited(resp, path, MAX_BODY).await.map(Some)
    }

    /// Follows `next` links until the last page.
    async fn list<T>(&self, path: &str, parse: PageParser<T>) -> Result<Vec<T>, IronicError>
    where
        T: Send + 'static,
    {
        let mut out = Vec::new();
        let mut query = format!("limit={}", self.settings.page_size);
        // A bound on pages, in case a broken proxy keeps sending the same `next`.
        for _ in 0..100_000 {
            let body =
                self.get(&format!("{path}?{query}"))
                    .await?
                    .ok_or_else(|| IronicError::Status {
                        path: path.to_string(),
                        status: 404,
                    })?;
            // A page of nodes/detail is megabytes of JSON: parsed off the runtime's
            // workers so boot requests on them do not wait behind it.
            let parsed = tokio::task::spawn_blocking(move || parse(&body))
                .await
                .map_err(|e| IronicError::Task(e.to_string()))?;
            let (items, next) = parsed.map_err(|source| IronicError::Wire {
                path: path.to_string(),
                source,
            })?;
            let empty = items.is_empty();
            out.extend(items);
            match next.as_deref().and_then(ironic_wire::next_query) {
                Some(q) if !empty => query = q.to_string(),
                _ => break,
            }
        }
        Ok(out)
    }

    async fn fetch_one(&self, mac: &MacAddr) -> Result<Known, IronicError> {
        let path = format!("/v1/ports/detail?address={mac}");
        let body = self.get(&path).await?.unwrap_or_default();
        let page = ironic_wire::parse_ports(&body).map_err(|source| IronicError::Wire {
            path: "/v1/ports/detail".into(),
            source,
        })?;
        let Some(node_uuid) = page
            .ports
            .into_iter()
            .filter(|p| p.pxe_enabled)
            .find_map(|p| p.node_uuid)
        else {
            return Ok(Known::NoPort);
        };
        // The UUID came from Ironic but still goes into a URL: keep it to UUID bytes.
        if !node_uuid
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-')
        {
            return Ok(Known::NoPort);
        }
        let Some(body) = self
            .get(&format!("/v1/nodes/{node_uuid}?fields=uuid,conductor"))
            .await?
        else {
            return Ok(Known::NoPort);
        };
        let node = ironic_wire::parse_node(&body).map_err(|source| IronicError::Wire {
            path: "/v1/nodes/{uuid}".into(),
            source,
        })?;
        Ok(Known::Node(node.conductor))
    }
}

/// Reads `resp`'s body, refusing one beyond `limit` bytes (by its Content-Length, or
/// once that many arrived).
async fn read_limited(
    mut resp: reqwest::Response,
    path: String,
    limit: usize,
) -> Result<Vec<u8>, IronicError> {
    let too_large = |path: String| IronicError::TooLarge { path, limit };
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large(path));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|source| IronicError::Request {
        path: path.clone(),
        source,
    })? {
        if body.len() + chunk.len() > limit {
            return Err(too_large(path));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Takes a MAC's entry out of the in-flight map when a lookup call ends, finished or
/// cancelled (a boot request whose client went away drops its future mid-way): once
/// the answer is in, or when no other call still waits on the same cell. Entries never
/// outlive their callers.
struct InflightGuard<'a> {
    inflight: &'a Inflight,
    mac: MacAddr,
    cell: Arc<OnceCell<Option<Known>>>,
}

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        let Some(entry) = inflight.get(&self.mac) else {
            return;
        };
        // References: the map's and this call's; more means another call waits on it
        // (and runs the request itself if this one was cancelled while running it).
        if Arc::ptr_eq(entry, &self.cell)
            && (self.cell.initialized() || Arc::strong_count(&self.cell) <= 2)
        {
            inflight.remove(&self.mac);
        }
    }
}

fn read_ca(path: &PathBuf) -> Result<Vec<reqwest::Certificate>, IronicError> {
    let err = |reason: String| IronicError::Ca {
        path: path.clone(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no PEM certificate in the file".into()));
    }
    Ok(certs)
}

#[cfg(test)]
#[path = "ironic_tests.rs"]
mod client_tests;

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn settings() -> IronicSettings {
        IronicSettings {
            url: "https://127.0.0.1:6385".into(),
            username: Some("ironic".into()),
            password: Some("hunter2".into()),
            ca_file: None,
            api_version: "1.49".into(),
            refresh: Duration::from_secs(60),
            timeout: Duration::from_secs(1),
            negative_ttl: Duration::from_secs(10),
            backoff: Duration::from_secs(5),
            max_lookups: 4,
            page_size: 100,
            lookups_per_sec: 20,
            insecure_http: false,
        }
    }

    #[test]
    fn a_ca_file_without_certificates_is_a_start_up_error_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not a certificate\n").unwrap();
        let err = IronicOwners::new(IronicSettings {
            ca_file: Some(ca),
            ..settings()
        })
        .expect_err("garbage CA accepted");
        assert!(
            err.to_string().starts_with("owner.ironic.ca_file "),
            "{err}"
        );
    }

    #[test]
    fn the_password_never_reaches_debug_output() {
        let text = format!("{:?}", settings());
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
    }
}
