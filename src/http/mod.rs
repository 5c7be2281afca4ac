//! The HTTP listener: boot routes (public, unauthenticated by nature), `/healthz` and
//! `/metrics`. The operator API (leases, hosts) joins it in a later change.

pub mod api;
pub mod auth;
pub mod boot;
pub mod files;
pub mod tls;
pub mod ui;

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error};

use crate::app::Handles;
use crate::config::HttpSettings;
use crate::mac::MacAddr;
use crate::metrics::LabeledCounters;
use crate::owner::Resolver;
use boot::{BootAnswer, BootContext};

/// Per route pattern: (status, count) pairs.
pub type RequestCounts =
    std::collections::HashMap<String, Vec<(u16, std::sync::atomic::AtomicU64)>>;

/// HTTP counters.
#[derive(Debug)]
pub struct HttpMetrics {
    /// Boot requests by outcome.
    pub boot: LabeledCounters<6>,
    /// Requests by route pattern and status; a read lock and an atomic add per request,
    /// the write lock only the first time a (route, status) pair is seen.
    pub requests: std::sync::RwLock<RequestCounts>,
}

impl Default for HttpMetrics {
    fn default() -> Self {
        Self {
            boot: LabeledCounters::new([
                "first_stage",
                "local",
                "remote",
                "fallback",
                "not_found",
                "bad_request",
            ]),
            requests: Default::default(),
        }
    }
}

impl HttpMetrics {
    fn count(&self, outcome: &str) {
        self.boot.inc(outcome);
    }

    /// Requests counted with `outcome`.
    pub fn get(&self, outcome: &str) -> u64 {
        self.boot.get(outcome)
    }

    /// Counts one answered request. `route` is the matched pattern (never the raw path,
    /// which is request data), or `unmatched`.
    pub fn request(&self, route: &str, status: u16) {
        use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
        {
            let map = self.requests.read().unwrap_or_else(|p| p.into_inner());
            if let Some((_, c)) = map
                .get(route)
                .and_then(|v| v.iter().find(|(s, _)| *s == status))
            {
                c.fetch_add(1, Relaxed);
                return;
            }
        }
        let mut map = self.requests.write().unwrap_or_else(|p| p.into_inner());
        let v = map.entry(route.to_string()).or_default();
        match v.iter().find(|(s, _)| *s == status) {
            Some((_, c)) => {
                c.fetch_add(1, Relaxed);
            }
            None => v.push((status, AtomicU64::new(1))),
        }
    }

    /// Writes the Prometheus exposition.
    pub fn render_prometheus(&self, out: &mut String) {
        crate::metrics::header(
            out,
            "shardboot_http_requests_total",
            "counter",
            "HTTP requests by route pattern and status",
        );
        let map = self.requests.read().unwrap_or_else(|p| p.into_inner());
        let mut routes: Vec<_> = map.iter().collect();
        routes.sort_by(|a, b| a.0.cmp(b.0));
        for (route, counts) in routes {
            for (status, c) in counts {
                out.push_str(&format!(
                    "shardboot_http_requests_total{{route=\"{route}\",status=\"{status}\"}} {}\n",
                    c.load(std::sync::atomic::Ordering::Relaxed)
                ));
            }
        }
        self.boot.render(
            out,
            "shardboot_http_boot_requests_total",
            "outcome",
            "Boot script requests by outcome",
        );
    }
}

/// The TFTP root as the HTTP file route sees it: settings and its own file cache.
pub struct FileRoot {
    /// Root, aliases, symlink rule, limits.
    pub settings: Arc<crate::config::TftpSettings>,
    /// Cache of file contents.
    pub cache: crate::tftp::cache::FileCache,
}

impl FileRoot {
    /// A file root with an empty cache sized by the settings.
    pub fn new(settings: crate::config::TftpSettings) -> Arc<Self> {
        Arc::new(Self {
            cache: crate::tftp::cache::FileCache::new(settings.cache_bytes),
            settings: Arc::new(settings),
        })
    }
}

/// Shared state of the HTTP handlers.
pub struct HttpState {
    /// The validated configuration (members and ranges for the operator API).
    pub config: Arc<crate::config::Config>,
    /// The lease store.
    pub store: Arc<crate::lease::SledStore>,
    /// Run-time allow/deny per MAC, shared with the DHCP server.
    pub policies: Arc<crate::dhcp::policy::HostPolicies>,
    /// Operator API tokens.
    pub auth: auth::TokenAuth,
    /// Changes for the DHCP engine (None: DHCP is off).
    pub control: Option<crate::dhcp::server::ControlSender>,
    /// `/ipxe/{file}`: the TFTP root.
    pub files: Arc<FileRoot>,
    /// Listener settings.
    pub settings: HttpSettings,
    /// Owner lookups.
    pub resolver: Arc<Resolver>,
    /// Metrics of every listener, for `/metrics`.
    pub handles: Handles,
}

/// Which routes a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serves {
    /// Boot routes, health, metrics and the operator API.
    Everything,
    /// Boot routes, health and metrics (the operator API has its own listener).
    Boot,
    /// The operator API, health, metrics and the OpenAPI document.
    Operator,
}

/// The router of the single listener: everything.
pub fn router(state: Arc<HttpState>) -> Router {
    router_for(state, Serves::Everything)
}

/// The router of one listener.
pub fn router_for(state: Arc<HttpState>, serves: Serves) -> Router {
    let mut app = Router::new()
        .route("/readyz", get(readyz))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics));
    if serves != Serves::Boot {
        let mut operator = Router::new();
        for (path, _, handler) in api::routes() {
            operator = operator.route(path, handler);
        }
        let operator = operator
            .route_layer(axum::middleware::from_fn_with_state(
                state.clone(),
                api::require_token,
            ))
            .layer(axum::extract::DefaultBodyLimit::max(api::MAX_BODY));
        app = app
            .merge(operator)
            .route("/v1/openapi.json", get(openapi))
            .route("/ui", get(ui::page))
            .route("/ui/app.js", get(ui::script));
    }
    if serves != Serves::Operator {
        app = app
            .route("/boot.ipxe", get(first_stage))
            .route("/v1/boot/{mac}/boot.ipxe", get(boot_mac))
            .route("/ipxe/{*file}", get(files::ipxe_file));
    }
    app.layer(axum::middleware::from_fn_with_state(
        state.clone(),
        count_request,
    ))
    .with_state(state)
}

async fn count_request(
    State(s): State<Arc<HttpState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // The pattern, not the path: request data never becomes a label.
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .cloned();
    let resp = next.run(req).await;
    let route = route.as_ref().map_or("unmatched", |m| m.as_str());
    s.handles.http.request(route, resp.status().as_u16());
    resp
}

/// Serves until `shutdown` is cancelled (over TLS when an acceptor is given).
pub async fn run(
    listener: TcpListener,
    state: Arc<HttpState>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    run_with(listener, state, Serves::Everything, None, shutdown).await
}

/// Like `run`, for the routes in `serves`, with optional TLS.
pub async fn run_with(
    listener: TcpListener,
    state: Arc<HttpState>,
    serves: Serves,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = router_for(state, serves);
    match tls {
        Some(acceptor) => tls::serve(listener, acceptor, app, shutdown).await,
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await
        }
    }
}

fn ipxe_script(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

fn internal(e: impl std::fmt::Display) -> Response {
    error!(error = %e, "could not render a boot script");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "cannot render boot script\n",
    )
        .into_response()
}

async fn first_stage(State(s): State<Arc<HttpState>>) -> Response {
    s.handles.http.count("first_stage");
    match boot::first_stage(&s.settings) {
        Ok(body) => ipxe_script(body),
        Err(e) => internal(e),
    }
}

async fn boot_mac(State(s): State<Arc<HttpState>>, Path(raw): Path<String>) -> Response {
    // The path segment is request data: it is parsed, never echoed or logged raw.
    let Ok(mac) = raw.parse::<MacAddr>() else {
        s.handles.http.count("bad_request");
        debug!(len = raw.len(), "boot request with an invalid MAC");
        return (StatusCode::BAD_REQUEST, "invalid MAC address\n").into_response();
    };
    let res = s.resolver.resolve(&mac).await;
    let ctx = BootContext::new(&s.settings, &s.resolver, &res);
    debug!(%mac, owner = ?res.member, source = res.source, "boot request");
    match boot::answer(&mac, &res, &ctx) {
        Ok(BootAnswer::Script { kind, body }) => {
            s.handles.http.count(kind);
            ipxe_script(body)
        }
        Ok(BootAnswer::NotFound) => {
            s.handles.http.count("not_found");
            (
                StatusCode::NOT_FOUND,
                "no boot configuration for this machine\n",
            )
                .into_response()
        }
        Err(e) => internal(e),
    }
}

/// The OpenAPI description of the operator API.
pub const OPENAPI: &str = include_str!("openapi.json");

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// Ready to serve: the store is open (it is, or `serve` would have stopped) and, when
/// DHCP is enabled, its sockets are bound.
async fn readyz(State(s): State<Arc<HttpState>>) -> Response {
    if s.config.dhcp.enabled && s.handles.dhcp.listening.get() == 0 {
        return (StatusCode::SERVICE_UNAVAILABLE, "DHCP not listening\n").into_response();
    }
    "ready\n".into_response()
}

/// Process up; the header tells other members which member list this one runs with.
async fn healthz(State(s): State<Arc<HttpState>>) -> Response {
    use crate::owner::health::{MEMBERS_HEADER, TRANSITION_HEADER};
    let mut r = (
        [(MEMBERS_HEADER, s.resolver.members_fingerprint().to_string())],
        "ok\n",
    )
        .into_response();
    let until = s.handles.dhcp.transition_until.get();
    if until > 0 {
        r.headers_mut()
            .insert(TRANSITION_HEADER, axum::http::HeaderValue::from(until));
    }
    r
}

async fn metrics(State(s): State<Arc<HttpState>>) -> Response {
    let mut out = String::with_capacity(8192);
    s.handles.dhcp.render_prometheus(&mut out);
    s.handles.tftp.render_prometheus(&mut out);
    s.handles.http.render_prometheus(&mut out);
    if s.config.ra.enabled {
        s.handles.ra.render_prometheus(&mut out);
    }
    if let Some(ironic) = s.resolver.ironic() {
        ironic.metrics.render_prometheus(&mut out);
    }
    s.resolver.live().render_prometheus(&mut out);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
