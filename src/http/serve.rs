//! The one accept loop of every HTTP listener, plain or TLS. Any machine on a
//! provisioning segment may be hostile, so each connection is bounded: in number (a
//! global and a per-source cap, checked at accept; a connection over a cap is closed at
//! once) and in time (the request head or TLS handshake, bytes moving at all, and each
//! request until its answer is sent). `axum::serve` has none of these.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::response::Response;
use axum::Router;
use futures_util::future::{Either, FutureExt};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::metrics::HttpMetrics;
use super::tls::ClientCertVerified;
use crate::config::ConnLimits;

/// Which cap turned a connection away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// `http.max_connections`.
    Global,
    /// `http.max_connections_per_source`.
    PerSource,
}

impl Full {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Full::Global => "global",
            Full::PerSource => "per_source",
        }
    }
}

type Sources = Arc<Mutex<HashMap<IpAddr, u32>>>;

/// The open connections of one listener: a semaphore for all of them and a count per
/// source address.
#[derive(Debug)]
pub struct Gate {
    all: Arc<Semaphore>,
    max: u32,
    per_source: u32,
    sources: Sources,
}

/// One admitted connection's place; dropping it gives the place back.
#[derive(Debug)]
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    source: IpAddr,
    sources: Sources,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut map = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.source) {
            *n -= 1;
            // Forget the source, so the map holds only addresses with open connections.
            if *n == 0 {
                map.remove(&self.source);
            }
        }
    }
}

impl Gate {
    /// A gate for `max` connections, `per_source` of them from one address.
    pub fn new(max: u32, per_source: u32) -> Self {
        Self {
            all: Arc::new(Semaphore::new(max as usize)),
            max,
            per_source,
            sources: Default::default(),
        }
    }

    /// The gate of one listener, shared by its accept loops.
    fn of(limits: &ConnLimits) -> Arc<Self> {
        Arc::new(Self::new(
            limits.max_connections,
            limits.max_connections_per_source,
        ))
    }

    /// A place for one more connection from `source`, or the cap that is full.
    pub fn admit(&self, source: IpAddr) -> Result<Admitted, Full> {
        // An IPv4 client on a dual-stack socket is the same source as over IPv4.
        let source = source.to_canonical();
        let mut map = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.get(&source).copied().unwrap_or(0);
        if n >= self.per_source {
            return Err(Full::PerSource);
        }
        let permit = self
            .all
            .clone()
            .try_acquire_owned()
            .map_err(|_| Full::Global)?;
        map.insert(source, n + 1);
        Ok(Admitted {
            _permit: permit,
            source,
            sources: self.sources.clone(),
        })
    }

    /// Connections open now.
    pub fn open(&self) -> u32 {
        self.max - self.all.available_permits() as u32
    }
}

/// Which of our own timeouts ends a connection (hyper applies the header timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    /// The request head or the TLS handshake did not arrive in time.
    Header,
    /// No byte moved either way for `idle_timeout`.
    Idle,
    /// The current request was not answered within `request_timeout`.
    Request,
}

impl Timeout {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Timeout::Header => "header",
            Timeout::Idle => "idle",
            Timeout::Request => "request",
        }
    }
}

/// When a connection must be closed, in milliseconds since it was accepted, and by
/// which timeout: `last_io` is when it last moved a byte, `request_since` when the
/// request being answered arrived (None between requests).
pub fn deadline(limits: &ConnLimits, last_io: u64, request_since: Option<u64>) -> (u64, Timeout) {
    let idle = last_io.saturating_add(limits.idle_timeout.as_millis() as u64);
    match request_since {
        Some(t) => {
            let request = t.saturating_add(limits.request_timeout.as_millis() as u64);
            if request < idle {
                (request, Timeout::Request)
            } else {
                (idle, Timeout::Idle)
            }
        }
        None => (idle, Timeout::Idle),
    }
}

const NO_REQUEST: u64 = u64::MAX;

/// What a connection's watchdog reads: milliseconds since `born` of the last byte moved
/// and of the start of the request being answered.
#[derive(Debug)]
struct Activity {
    born: Instant,
    last_io: AtomicU64,
    request_since: AtomicU64,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            born: Instant::now(),
            last_io: AtomicU64::new(0),
            request_since: AtomicU64::new(NO_REQUEST),
        })
    }

    fn now(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    fn touch(&self) {
        self.last_io.store(self.now(), Relaxed);
    }

    fn deadline(&self, limits: &ConnLimits) -> (u64, Timeout) {
        let since = self.request_since.load(Relaxed);
        let since = (since != NO_REQUEST).then_some(since);
        deadline(limits, self.last_io.load(Relaxed), since)
    }
}

/// A stream that notes in [`Activity`] every read or write that moved bytes.
#[derive(Debug)]
struct Tracked<T> {
    io: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A response body that ends its request's deadline when hyper is done with it (sent
/// or abandoned): between requests only the idle timeout applies.
struct Answered {
    body: Body,
    activity: Arc<Activity>,
}

impl HttpBody for Answered {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_frame::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_frame::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Answered {
    fn drop(&mut self) {
        self.activity.request_since.store(NO_REQUEST, Relaxed);
    }
}

/// The frame types of [`HttpBody`], named through hyper (which re-exports them).
mod http_frame {
    pub(super) use hyper::body::{Frame, SizeHint};
}

/// Counts a connection as open while it lives.
struct Open(Arc<HttpMetrics>);

impl Open {
    fn new(metrics: Arc<HttpMetrics>) -> Self {
        metrics.open.fetch_add(1, Relaxed);
        Self(metrics)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Relaxed);
    }
}

/// Told of each TLS handshake that fails (the client and rustls's reason): a machine
/// whose firmware does not trust this member's certificate fails here, before any
/// request, so this is the last thing the server saw of it.
pub type TlsFailure = Arc<dyn Fn(std::net::SocketAddr, &str) + Send + Sync>;

/// What every accept loop of one listener shares: the routes' TLS, the connection caps
/// (counted over all of the listener's sockets), the metrics and the stop signal.
#[derive(Clone)]
pub struct Shared {
    /// TLS for every connection, when given.
    pub tls: Option<TlsAcceptor>,
    /// Timeouts and caps.
    pub limits: ConnLimits,
    /// The listener's counters.
    pub metrics: Arc<HttpMetrics>,
    /// Told of failed TLS handshakes.
    pub on_tls_failure: Option<TlsFailure>,
    /// Cancelled to stop accepting.
    pub shutdown: CancellationToken,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("tls", &self.tls.is_some())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// A route answered before the router is asked: given the request and the client, the
/// answer's future, or `None` for a request that is not the route's.
pub type FirstRoute = Arc<
    dyn Fn(
            &hyper::Request<hyper::body::Incoming>,
            std::net::SocketAddr,
        ) -> Option<std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send>>>
        + Send
        + Sync,
>;

/// What a listener answers: a route that is served first (`http::boot_route`, the one
/// every booting machine asks for), then the router.
#[derive(Clone)]
pub struct App {
    /// Tried first for every request.
    pub first: Option<FirstRoute>,
    /// Every other route.
    pub router: Router,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("first", &self.first.is_some())
            .finish_non_exhaustive()
    }
}

/// Serves `app` on `listener` within `shared`'s limits, on the caller's runtime; see
/// [`serve_loop`].
pub async fn serve(listener: TcpListener, app: App, shared: Shared) -> io::Result<()> {
    let gate = Gate::of(&shared.limits);
    serve_loop(listener, app, gate, shared).await;
    Ok(())
}

/// Serves one listener's sockets (bound together with `SO_REUSEPORT`, so the kernel
/// spreads new connections over them), each on a thread of its own that runs a
/// single-threaded runtime, as nginx runs a worker per core: a connection is read,
/// answered and written by one thread, with no hand-off between threads (the
/// multi-threaded runtime's wake-ups between workers were a quarter of the boot route's
/// CPU, docs/benchmarks.md). `make_app` builds each thread's router. Returns when every
/// thread has stopped: after `shutdown`, once their connections are closed.
pub async fn serve_per_core(
    sockets: Vec<std::net::TcpListener>,
    make_app: impl Fn() -> App,
    shared: Shared,
) -> io::Result<()> {
    let gate = Gate::of(&shared.limits);
    let mut done = Vec::with_capacity(sockets.len());
    for (i, socket) in sockets.into_iter().enumerate() {
        let (tx, rx) = tokio::sync::oneshot::channel::<io::Result<()>>();
        let (app, gate, shared) = (make_app(), gate.clone(), shared.clone());
        std::thread::Builder::new()
            .name(format!("http-{i}"))
            .spawn(move || {
                let served = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .and_then(|rt| {
                        rt.block_on(async move {
                            let listener = TcpListener::from_std(socket)?;
                            serve_loop(listener, app, gate, shared).await;
                            Ok(())
                        })
                    });
                let _ = tx.send(served);
            })?;
        done.push(rx);
    }
    for rx in done {
        rx.await.unwrap_or(Ok(()))?;
    }
    Ok(())
}

/// Accepts on `listener` until `shutdown`, every connection within the limits (the caps
/// through `gate`); then stops accepting, lets open connections finish their request
/// and returns when all of this loop's are closed (the timeouts bound the wait).
async fn serve_loop(listener: TcpListener, app: App, gate: Arc<Gate>, shared: Shared) {
    let Shared {
        tls,
        limits,
        metrics,
        on_tls_failure,
        shutdown,
    } = shared;
    let connections = tokio_util::task::TaskTracker::new();
    loop {
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                // Out of descriptors and the like: keep serving the others.
                Err(e) => {
                    debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Small requests and answers (boot scripts, a member's lease batch): never held
        // back by Nagle waiting on a delayed ACK.
        let _ = tcp.set_nodelay(true);
        let place = match gate.admit(peer.ip()) {
            Ok(p) => p,
            Err(full) => {
                // Closed at once: a refused connection costs no task and no timer.
                metrics.refused.inc(full.label());
                debug!(%peer, cap = full.label(), open = gate.open(), "connection refused");
                drop(tcp);
                continue;
            }
        };
        let (app, tls, metrics, stop) =
            (app.clone(), tls.clone(), metrics.clone(), shutdown.clone());
        let on_tls_failure = on_tls_failure.clone();
        connections.spawn(async move {
            let _place = place;
            let _open = Open::new(metrics.clone());
            let activity = Activity::new();
            let tcp = Tracked {
                io: tcp,
                activity: activity.clone(),
            };
            match tls {
                None => {
                    connection(tcp, (peer, false), app, &limits, activity, &metrics, stop).await
                }
                Some(acceptor) => {
                    let tls =
                        match tokio::time::timeout(limits.header_timeout, acceptor.accept(tcp))
                            .await
                        {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                debug!(%peer, error = %e, "TLS handshake failed");
                                if let Some(f) = &on_tls_failure {
                                    f(peer, &e.to_string());
                                }
                                return;
                            }
                            Err(_) => {
                                metrics.timed_out.inc(Timeout::Header.label());
                                debug!(%peer, "TLS handshake timed out");
                                if let Some(f) = &on_tls_failure {
                                    f(peer, "timed out");
                                }
                                return;
                            }
                        };
                    let verified = tls.get_ref().1.peer_certificates().is_some();
                    connection(
                        tls,
                        (peer, verified),
                        app,
                        &limits,
                        activity,
                        &metrics,
                        stop,
                    )
                    .await
                }
            }
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// The client's address, in every request's extensions (the timeline names machines
/// that TFTP and the first-stage script know only by address); an IPv4 client of a
/// dual-stack listener by its IPv4 address, not the v4-mapped one.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub std::net::SocketAddr);

/// Serves one connection until the client closes it, a timeout runs out, or (after
/// `shutdown`) its request in progress is answered.
async fn connection<T>(
    io: T,
    (peer, verified): (std::net::SocketAddr, bool),
    app: App,
    limits: &ConnLimits,
    activity: Arc<Activity>,
    metrics: &HttpMetrics,
    shutdown: CancellationToken,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let act = activity.clone();
    // An IPv4 client of a dual-stack [::] listener is known by its IPv4 address, as the
    // timeline (which DHCPv4 fills) knows it.
    let peer = std::net::SocketAddr::new(peer.ip().to_canonical(), peer.port());
    let service =
        hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            act.request_since.store(act.now(), Relaxed);
            // The first route's answer, or the router's (with the client in the
            // request's extensions, for its handlers).
            let answer = match app.first.as_ref().and_then(|route| route(&req, peer)) {
                Some(answer) => Either::Left(answer.map(Ok)),
                None => {
                    req.extensions_mut().insert(PeerAddr(peer));
                    if verified {
                        req.extensions_mut().insert(ClientCertVerified);
                    }
                    Either::Right(tower::ServiceExt::oneshot(app.router.clone(), req))
                }
            };
            let act = act.clone();
            async move {
                let resp = answer.await?;
                Ok::<_, std::convert::Infallible>(resp.map(|body| {
                    Body::new(Answered {
                        body,
                        activity: act,
                    })
                }))
            }
        });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        let (at, _) = activity.deadline(limits);
        let wake = activity.born + Duration::from_millis(at);
        tokio::select! {
            r = conn.as_mut() => {
                match r {
                    Ok(()) => {}
                    Err(e) if e.is_timeout() => {
                        metrics.timed_out.inc(Timeout::Header.label());
                        debug!("request head timed out");
                    }
                    Err(e) => debug!(error = %e, "HTTP connection ended with an error"),
                }
                return;
            }
            _ = tokio::time::sleep_until(wake) => {
                // Bytes may have moved while we slept: look again before closing.
                let (at, why) = activity.deadline(limits);
                if at <= activity.now() {
                    metrics.timed_out.inc(why.label());
                    debug!(timeout = why.label(), "HTTP connection timed out");
                    return;
                }
            }
            _ = shutdown.cancelled(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_refuse_over_the_limit_and_free_on_drop() {
        let gate = Gate::new(3, 2);
        let a: IpAddr = "192.0.2.10".parse().unwrap();
        let b: IpAddr = "192.0.2.11".parse().unwrap();
        let a1 = gate.admit(a).unwrap();
        let _a2 = gate.admit(a).unwrap();
        assert_eq!(gate.admit(a).unwrap_err(), Full::PerSource);
        // The same source written as an IPv4-mapped IPv6 address.
        let mapped: IpAddr = "::ffff:192.0.2.10".parse().unwrap();
        assert_eq!(gate.admit(mapped).unwrap_err(), Full::PerSource);
        let _b1 = gate.admit(b).unwrap();
        assert_eq!(gate.admit(b).unwrap_err(), Full::Global);
        assert_eq!(gate.open(), 3);
        drop(a1);
        assert_eq!(gate.open(), 2);
        let _b2 = gate.admit(b).unwrap();
        assert_eq!(gate.admit(a).unwrap_err(), Full::Global);
    }

    #[test]
    fn a_source_is_forgotten_when_its_last_connection_closes() {
        let gate = Gate::new(10, 1);
        let a: IpAddr = "192.0.2.10".parse().unwrap();
        drop(gate.admit(a).unwrap());
        assert!(gate.sources.lock().unwrap().is_empty());
        drop(gate.admit(a).unwrap());
    }

    #[test]
    fn the_nearer_timeout_wins() {
        let limits = ConnLimits {
            idle_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
            ..Default::default()
        };
        // Between requests: idle only.
        assert_eq!(deadline(&limits, 5_000, None), (35_000, Timeout::Idle));
        // A request that keeps bytes moving still ends 60 s after it began.
        assert_eq!(
            deadline(&limits, 50_000, Some(0)),
            (60_000, Timeout::Request)
        );
        // A stalled request (the client reads nothing) ends when idle.
        assert_eq!(deadline(&limits, 1_000, Some(0)), (31_000, Timeout::Idle));
        assert_eq!(deadline(&limits, u64::MAX, Some(u64::MAX - 1)).0, u64::MAX);
    }
}
