//! The HTTP listeners: boot routes (public, unauthenticated by nature), `/healthz`,
//! `/readyz` and `/metrics`, and the operator API behind a token or a client
//! certificate, on the boot listener or a listener of its own.

pub mod api;
pub mod auth;
pub mod boot;
pub mod boot_route;
pub mod chain_check;
pub mod check_cache;
pub mod files;
pub mod listen;
pub mod metrics;
pub mod peer;
pub mod serve;
pub mod tls;
pub mod ui;

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Extension;
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info};

use crate::config::{Config, HttpSettings};
use crate::dhcp::host_policy::HostPolicies;
use crate::dhcp::shell::DhcpHandle;
use crate::handles::Handles;
use crate::ipxe;
use crate::owner::Resolver;
use crate::store::{Committer, Store};
use boot::{BootAnswer, Chain, FallbackStep};
use chain_check::ChainChecker;
pub use metrics::{HttpMetrics, RequestCounts};

/// Shared state of the HTTP handlers.
#[derive(Debug)]
pub struct HttpState {
    /// The validated configuration (members and ranges for the operator API).
    pub config: Arc<Config>,
    /// The store, read by the operator API.
    pub store: Arc<dyn Store>,
    /// Where the operator API's own changes (host policies) are made durable.
    pub committer: Committer,
    /// Run-time allow/deny per MAC, shared with the DHCP server.
    pub policies: Arc<HostPolicies>,
    /// Operator API tokens.
    pub auth: auth::TokenAuth,
    /// Changes for the DHCP engine (None: DHCP is off).
    pub dhcp: Option<DhcpHandle>,
    /// `/ipxe/{file}`: the TFTP root, and the file cache TFTP shares.
    pub files: Arc<crate::tftp::FileRoot>,
    /// Listener settings.
    pub settings: HttpSettings,
    /// Owner lookups.
    pub resolver: Arc<Resolver>,
    /// Metrics of every listener, for `/metrics`.
    pub handles: Handles,
    /// Checks a URL before a boot script chains it (a 404 is a miss).
    pub chain_check: ChainChecker,
    /// The shared lease store (None: no `store.shared`).
    pub shared: Option<Arc<crate::shared::SharedStore>>,
    /// Requests for the DHCPv6 engine (None: no `[[subnet6]]` is served).
    pub dhcp6: Option<crate::dhcp6::shell::Dhcp6Handle>,
}

impl HttpState {
    /// The state of the listeners of `config`: its own token file and listener
    /// settings, with the shared parts passed in.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        committer: Committer,
        policies: Arc<HostPolicies>,
        dhcp: Option<DhcpHandle>,
        files: Arc<crate::tftp::FileRoot>,
        resolver: Arc<Resolver>,
        handles: Handles,
    ) -> Self {
        // A CA that cannot be read stops `start` (below); here it only means checks of
        // https:// URLs go without it.
        let chain_check =
            ChainChecker::with_ca(config.http.chain_ca.as_deref()).unwrap_or_default();
        Self {
            auth: auth::TokenAuth::new(config.http.token_file.clone()),
            files,
            settings: config.http.clone(),
            config,
            store,
            committer,
            policies,
            dhcp,
            resolver,
            handles,
            chain_check,
            shared: None,
            dhcp6: None,
        }
    }
}

/// Why an HTTP listener cannot start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// Binding or serving failed.
    #[error("HTTP listener on {addr}: {source}")]
    Listener {
        /// The configured address.
        addr: std::net::SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// A TLS certificate, key or CA file cannot be used.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// `http.chain_ca` cannot be used.
    #[error(transparent)]
    ChainCa(#[from] crate::site_ca::SiteCaError),
}

/// One listener serving until shutdown.
pub type Serving =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), HttpError>> + Send>>;

/// Binds the configured listeners (the boot listener, and the operator listener when
/// `http.operator_listen` is set) and returns them, serving once polled. Binding and
/// TLS set-up happen here, so a bad address or certificate stops start-up.
pub async fn start(
    state: Arc<HttpState>,
    shutdown: CancellationToken,
) -> Result<Vec<Serving>, HttpError> {
    let tls = match &state.settings.tls {
        Some(files) => Some(tls::acceptor(files)?),
        None => None,
    };
    if let Some(ca) = &state.settings.chain_ca {
        ChainChecker::with_ca(Some(ca))?;
    }
    for w in [
        auth::token_file_warning(&state.settings),
        auth::insecure_api_warning(&state.settings),
    ]
    .into_iter()
    .flatten()
    {
        tracing::warn!(warning = %w, "operator API");
    }
    let plan = tls::listener_plan(&state.settings, tls);
    let mut serving: Vec<Serving> = Vec::with_capacity(plan.len());
    for (addr, serves, tls) in plan {
        // The boot routes get a thread per core; the operator API and health alone, one.
        let workers = if serves.boot() {
            listen::workers_for_boot()
        } else {
            1
        };
        let sockets = listen::bind_sockets(addr, workers)
            .map_err(|source| HttpError::Listener { addr, source })?;
        match serves {
            Serves::Operator => {
                info!(listen = %addr, tls = tls.is_some(), "operator API listening")
            }
            _ => {
                info!(listen = %addr, tls = tls.is_some(), routes = ?serves, workers, "HTTP listening")
            }
        }
        let (state, stop) = (state.clone(), shutdown.clone());
        serving.push(Box::pin(async move {
            let shared = shared_of(&state, tls, stop);
            serve::serve_per_core(sockets, || app_for(state.clone(), serves), shared)
                .await
                .map_err(|source| HttpError::Listener { addr, source })
        }));
    }
    Ok(serving)
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
    /// Health and public metrics only (`http.plain_boot = false`: the boot routes are
    /// on the TLS listener).
    Health,
}

impl Serves {
    fn boot(self) -> bool {
        matches!(self, Self::Everything | Self::Boot)
    }

    fn operator(self) -> bool {
        matches!(self, Self::Everything | Self::Operator)
    }
}

/// What one listener answers: the boot route first where it serves boot routes
/// (`boot_route`), then the router.
pub fn app_for(state: Arc<HttpState>, serves: Serves) -> serve::App {
    serve::App {
        first: serves
            .boot()
            .then(|| boot_route::first_route(state.clone())),
        router: router_for(state, serves),
    }
}

/// The router of one listener (every route but `boot_route`'s).
pub fn router_for(state: Arc<HttpState>, serves: Serves) -> Router {
    use crate::config::MetricsExposure;
    let mut app = Router::new()
        .route("/readyz", get(readyz))
        .route("/healthz", get(healthz));
    // `http.metrics`: public metrics on every listener; operator metrics on the operator
    // listener, or behind the token where one listener serves everything.
    let metrics_behind_token = match (state.settings.metrics, serves) {
        (MetricsExposure::Public, _) | (MetricsExposure::Operator, Serves::Operator) => {
            app = app.route("/metrics", get(metrics));
            false
        }
        (MetricsExposure::Operator, Serves::Everything) => true,
        (MetricsExposure::Operator, Serves::Boot | Serves::Health) => false,
    };
    if serves.operator() {
        let mut operator = Router::new();
        for (path, _, handler) in api::routes() {
            operator = operator.route(path, handler);
        }
        if metrics_behind_token {
            operator = operator.route("/metrics", get(metrics));
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
    if serves.boot() {
        app = app
            .route("/boot.ipxe", get(first_stage))
            .route("/v1/boot/fallback.ipxe", get(boot_fallback))
            .route(crate::timeline::peers::PEER_ROUTE, get(peer::events))
            .route(crate::timeline::peers::PEER_BOARD_ROUTE, get(peer::board))
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
    let route = route.as_ref().map_or("unmatched", |m| m.as_str());
    let method = req.method().clone();
    counted(&s, route, method.as_str(), next.run(req)).await
}

/// `answer`, in one span per request (docs/style.md §8) named by the route pattern, and
/// counted by route and status; the status is filled in when the answer is known. At
/// debug level, like the DHCP packet span.
pub(super) async fn counted(
    s: &HttpState,
    route: &str,
    method: &str,
    answer: impl std::future::Future<Output = Response>,
) -> Response {
    let span = tracing::debug_span!("http", route, method, status = tracing::field::Empty);
    let resp = tracing::Instrument::instrument(answer, span.clone()).await;
    let status = resp.status().as_u16();
    span.record("status", status);
    s.handles.http.request(route, status);
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
    let shared = shared_of(&state, tls, shutdown);
    serve::serve(listener, app_for(state, serves), shared).await
}

/// What every accept loop of a listener shares: its TLS, limits and metrics, and a
/// failed handshake told to the timeline.
fn shared_of(
    state: &HttpState,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: CancellationToken,
) -> serve::Shared {
    let timeline = state.handles.timeline.clone();
    // A machine is known here only by its address; the timeline keeps the failure
    // under the MAC that holds the address (its text is escaped and cut there).
    let on_tls_failure: serve::TlsFailure = Arc::new(move |peer, why| {
        timeline.record_for_ip(
            peer.ip(),
            crate::timeline::Report {
                source: crate::timeline::Source::Http,
                what: "TLS handshake",
                outcome: "failed",
                why: None,
                ip: Some(peer.ip()),
                detail: Some(why.to_string()),
            },
        );
    });
    serve::Shared {
        tls,
        limits: state.settings.limits,
        metrics: state.handles.http.clone(),
        on_tls_failure: Some(on_tls_failure),
        shutdown,
    }
}

fn ipxe_script(body: String) -> Response {
    let mut r = Response::new(axum::body::Body::from(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn internal(e: impl std::fmt::Display) -> Response {
    error!(error = %e, "could not render a boot script");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "cannot render boot script\n",
    )
        .into_response()
}

/// Tells the timeline of a boot request by a machine known only by its address.
pub(crate) fn note_by_address(
    s: &HttpState,
    peer: Option<Extension<serve::PeerAddr>>,
    what: &'static str,
    status: &'static str,
    detail: Option<String>,
) {
    if let Some(Extension(serve::PeerAddr(addr))) = peer {
        s.handles.timeline.record_for_ip(
            addr.ip(),
            crate::timeline::Report {
                source: crate::timeline::Source::Http,
                what,
                outcome: status,
                why: None,
                ip: Some(addr.ip()),
                detail,
            },
        );
    }
}

async fn first_stage(
    State(s): State<Arc<HttpState>>,
    peer: Option<Extension<serve::PeerAddr>>,
) -> Response {
    s.handles.http.count("first_stage");
    match boot::first_stage(&s.settings) {
        Ok(body) => {
            note_by_address(&s, peer, "GET /boot.ipxe", "200", None);
            ipxe_script(body)
        }
        Err(e) => internal(e),
    }
}

/// After the loop over every NIC: the fallback, once.
async fn boot_fallback(
    State(s): State<Arc<HttpState>>,
    RawQuery(query): RawQuery,
    peer: Option<Extension<serve::PeerAddr>>,
) -> Response {
    let answer = match boot::fallback(&s.resolver.settings().fallback) {
        Ok(FallbackStep::NotFound) => Ok(BootAnswer::NotFound { kind: "not_found" }),
        Ok(FallbackStep::Script(body)) => Ok(BootAnswer::Script {
            kind: "fallback",
            body,
        }),
        Ok(FallbackStep::Chain(chain)) => {
            let again = "/v1/boot/fallback.ipxe";
            let attempt = boot::boot_query(query.as_deref(), s.settings.chain_retries).attempt;
            checked_chain(&s, &chain, attempt, again, "every-nic").await
        }
        Err(e) => Err(e),
    };
    let status = match &answer {
        Ok(BootAnswer::Script { .. }) => "200",
        Ok(BootAnswer::NotFound { .. }) => "404",
        Err(_) => "500",
    };
    note_by_address(&s, peer, "GET /v1/boot/fallback.ipxe", status, None);
    boot_response(&s, answer)
}

/// Checks `chain`'s URL, then decides the script (`boot::answer_chain`).
pub(super) async fn checked_chain(
    s: &HttpState,
    chain: &Chain,
    attempt: u32,
    again: &str,
    label: &str,
) -> Result<BootAnswer, ipxe::UnsafeValue> {
    let check = s.chain_check.check(&chain.url).await;
    debug!(url = %chain.url, ?check, "checked before chaining");
    boot::answer_chain(chain, check, attempt, again, label, &s.settings)
}

pub(super) fn boot_response(
    s: &HttpState,
    answer: Result<BootAnswer, ipxe::UnsafeValue>,
) -> Response {
    match answer {
        Ok(BootAnswer::Script { kind, body }) => {
            s.handles.http.count(kind);
            ipxe_script(body)
        }
        Ok(BootAnswer::NotFound { kind }) => {
            s.handles.http.count(kind);
            (
                StatusCode::NOT_FOUND,
                "no boot configuration for this NIC\n",
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

/// Ready to serve: when DHCP is enabled its sockets are bound, and the store takes
/// writes (after a failed commit, not ready, with the reason, until it does again).
async fn readyz(State(s): State<Arc<HttpState>>) -> Response {
    if s.config.dhcp.enabled && s.handles.dhcp.listening.get() == 0 {
        return (StatusCode::SERVICE_UNAVAILABLE, "DHCP not listening\n").into_response();
    }
    if let Some(why) = s.handles.store.status.reason() {
        // The reason is the store's own error text (paths, OS errors), not request data.
        // The shared store's reason names itself ("shared lease store unreachable: …").
        let body = if s.handles.store.status.is_failing() {
            format!("lease store fails writes: {}\n", why.escape_default())
        } else {
            format!("{}\n", why.escape_default())
        };
        return (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    }
    "ready\n".into_response()
}

/// Process up. To a member's probe (a challenge header, `owner::peer_auth`; with a
/// member secret, the prober's proof of it too) the answer also carries this member's
/// claims — its name, member-list fingerprint and transition end — and their proof.
/// Anyone else (a Kubernetes probe, a curious client) gets only "ok".
async fn healthz(State(s): State<Arc<HttpState>>, headers: axum::http::HeaderMap) -> Response {
    use crate::owner::health::{MEMBERS_HEADER, TRANSITION_HEADER};
    use crate::owner::peer_auth::{self, HealthClaim};
    let mut r = "ok\n".into_response();
    let challenge = headers
        .get(peer_auth::CHALLENGE_HEADER)
        .and_then(|v| peer_auth::parse_challenge(v.as_bytes()));
    let (Some(challenge), Some(me)) = (challenge, s.resolver.self_name()) else {
        return r;
    };
    let secret = s.resolver.member_secret();
    if let Some(secret) = secret {
        let proof = headers
            .get(peer_auth::PROBER_PROOF_HEADER)
            .and_then(|v| v.to_str().ok());
        if !proof.is_some_and(|p| secret.verify_probe(challenge, p)) {
            return r;
        }
    }
    let fingerprint = s.resolver.members_fingerprint();
    let until = s.handles.dhcp.transition_until.get();
    let h = r.headers_mut();
    // Member names and fingerprints are validated config (`config::member`), valid
    // header text; the challenge is echoed only inside the proof.
    for (name, value) in [
        (peer_auth::MEMBER_HEADER, me),
        (MEMBERS_HEADER, fingerprint.as_str()),
    ] {
        if let Ok(v) = axum::http::HeaderValue::from_str(value) {
            h.insert(name, v);
        }
    }
    if until > 0 {
        h.insert(TRANSITION_HEADER, axum::http::HeaderValue::from(until));
    }
    if let Some(secret) = secret {
        let claim = HealthClaim {
            challenge,
            member: me,
            fingerprint: &fingerprint,
            transition_until: until,
        };
        if let Ok(v) = axum::http::HeaderValue::from_str(&secret.prove(&claim)) {
            h.insert(peer_auth::PROOF_HEADER, v);
        }
    }
    r
}

async fn metrics(State(s): State<Arc<HttpState>>) -> Response {
    let mut out = String::with_capacity(8192);
    crate::build_info::render_prometheus(&mut out);
    crate::process_metrics::render_prometheus(&mut out);
    s.handles.dhcp.render_prometheus(&mut out);
    s.handles.store.render_prometheus(&mut out);
    s.handles.tftp.render_prometheus(&mut out);
    s.handles.http.render_prometheus(&mut out);
    s.chain_check.counts.render(
        &mut out,
        "shardboot_http_chain_checks_total",
        "outcome",
        "Checks of a URL before a boot script chains it: sent (a HEAD went out), cached, joined (waited for the same URL's HEAD in flight), skipped (too many in flight)",
    );
    let repeats = "shardboot_timeline_repeats_total";
    crate::metrics::header(
        &mut out,
        repeats,
        "counter",
        "Boot requests not kept in the timeline: the same as the machine's newest event within 5 s",
    );
    crate::metrics::value(&mut out, repeats, s.handles.timeline.repeats());
    if !s.config.subnets6.is_empty() {
        s.handles.dhcp6.render_prometheus(&mut out);
    }
    if s.config.ra.enabled {
        s.handles.ra.render_prometheus(&mut out);
    }
    if let Some(shared) = &s.shared {
        shared.metrics.render_prometheus(&mut out, shared.is_up());
    }
    if let Some(ironic) = s.resolver.ironic() {
        ironic.metrics.render_prometheus(&mut out);
    }
    s.resolver.live().render_prometheus(&mut out);
    s.resolver.roster().render_prometheus(&mut out);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
