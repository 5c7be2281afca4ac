//! The operator API: leases, host allow/deny, owners, members and pool statistics, as
//! JSON, behind bearer tokens (`auth.rs`). Every error is a JSON object with a 4xx
//! status; request data is parsed before use and never echoed.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::auth::Refusal;
use super::HttpState;
use crate::config::Config;
use crate::dhcp::policy::{HostPolicy, PolicySource};
use crate::dhcp::pool::Pool;
use crate::lease::{Lease, LeaseStore, LeaseView};
use crate::mac::MacAddr;

/// Largest request body the API reads.
pub const MAX_BODY: usize = 16 * 1024;
/// Largest page of `/v1/leases`.
pub const MAX_PAGE: usize = 1000;

/// A JSON error response.
pub fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

/// A 4xx/5xx with a JSON body.
#[derive(Debug, Clone, Copy)]
pub struct ApiError(StatusCode, &'static str);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

/// One operator route: path, methods (for the OpenAPI test), handler.
pub type Route = (
    &'static str,
    &'static [&'static str],
    MethodRouter<Arc<HttpState>>,
);

/// The operator routes. The router and the OpenAPI test both read this list.
pub fn routes() -> Vec<Route> {
    vec![
        ("/v1/leases", &["get"], get(list_leases)),
        (
            "/v1/leases/{key}",
            &["get", "delete"],
            get(one_lease).delete(forget_lease),
        ),
        ("/v1/hosts", &["get"], get(list_hosts)),
        (
            "/v1/hosts/{mac}",
            &["get", "put", "delete"],
            get(get_host).put(put_host).delete(delete_host),
        ),
        ("/v1/reservations", &["get"], get(list_reservations)),
        (
            "/v1/reservations/{mac}",
            &["get", "put", "delete"],
            get(get_reservation)
                .put(put_reservation)
                .delete(delete_reservation),
        ),
        ("/v1/owners/{mac}", &["get"], get(owner)),
        ("/v1/members", &["get"], get(members)),
        ("/v1/stats", &["get"], get(stats)),
    ]
}

/// Refuses requests without a valid bearer token.
pub async fn require_token(State(s): State<Arc<HttpState>>, req: Request, next: Next) -> Response {
    // A client certificate that verified against http.client_ca is enough (mTLS).
    if req
        .extensions()
        .get::<super::tls::ClientCertVerified>()
        .is_some()
    {
        return next.run(req).await;
    }
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    match s.auth.check(header) {
        Ok(()) => next.run(req).await,
        Err(Refusal::Disabled) => error(
            StatusCode::FORBIDDEN,
            "the operator API needs http.token_file or a client certificate (http.client_ca)",
        ),
        Err(Refusal::BadToken) => {
            let mut r = error(StatusCode::UNAUTHORIZED, "a valid bearer token is required");
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
            r
        }
    }
}

fn parse_mac(raw: &str) -> Result<MacAddr, ApiError> {
    raw.parse()
        .map_err(|_| ApiError(StatusCode::BAD_REQUEST, "invalid MAC address"))
}

/// The MAC from the path and the JSON body of a PUT; `usage` describes the body in the
/// 400 answer.
fn mac_and_body<T: serde::de::DeserializeOwned>(
    raw: &str,
    body: &[u8],
    usage: &'static str,
) -> Result<(MacAddr, T), ApiError> {
    let mac = parse_mac(raw)?;
    let parsed =
        serde_json::from_slice::<T>(body).map_err(|_| ApiError(StatusCode::BAD_REQUEST, usage))?;
    Ok((mac, parsed))
}

fn stored(s: &HttpState) -> Result<Vec<Lease>, ApiError> {
    let mut leases = s.store.load().map_err(|e| {
        tracing::error!(error = %e, "lease store read failed");
        ApiError(StatusCode::SERVICE_UNAVAILABLE, "lease store unavailable")
    })?;
    leases.sort_by_key(|l| l.ip);
    Ok(leases)
}

/// `GET /v1/leases` filters and paging.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseQuery {
    mac: Option<String>,
    ip: Option<String>,
    subnet: Option<String>,
    state: Option<String>,
    limit: Option<usize>,
    /// The last address of the previous page: pages are in address order, so a cursor
    /// stays valid while leases come and go.
    cursor: Option<String>,
}

async fn list_leases(
    State(s): State<Arc<HttpState>>,
    query: Result<Query<LeaseQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return error(
            StatusCode::BAD_REQUEST,
            "unknown or malformed query parameter",
        );
    };
    let bad = |what: &str| error(StatusCode::BAD_REQUEST, what);
    let mac = match q.mac.as_deref().map(str::parse::<MacAddr>) {
        Some(Err(_)) => return bad("invalid mac"),
        m => m.and_then(Result::ok),
    };
    let ip = match q.ip.as_deref().map(str::parse::<Ipv4Addr>) {
        Some(Err(_)) => return bad("invalid ip"),
        i => i.and_then(Result::ok),
    };
    let subnet = match q.subnet.as_deref().map(str::parse::<ipnet::Ipv4Net>) {
        Some(Err(_)) => return bad("invalid subnet (a.b.c.d/len)"),
        n => n.and_then(Result::ok),
    };
    let cursor = match q.cursor.as_deref().map(str::parse::<Ipv4Addr>) {
        Some(Err(_)) => return bad("invalid cursor"),
        c => c.and_then(Result::ok),
    };
    if let Some(st) = &q.state {
        if !["offered", "bound", "released", "declined"].contains(&st.as_str()) {
            return bad("state must be offered, bound, released or declined");
        }
    }
    let limit = q.limit.unwrap_or(100);
    if !(1..=MAX_PAGE).contains(&limit) {
        return bad("limit must be between 1 and 1000");
    }
    let leases = match stored(&s) {
        Ok(l) => l,
        Err(r) => return r.into_response(),
    };
    let mut page: Vec<&Lease> = leases
        .iter()
        .filter(|l| cursor.is_none_or(|c| l.ip > c))
        .filter(|l| mac.is_none_or(|m| l.mac == m))
        .filter(|l| ip.is_none_or(|i| l.ip == i))
        .filter(|l| subnet.is_none_or(|n| n.contains(&l.ip)))
        .filter(|l| q.state.as_deref().is_none_or(|st| l.state.as_str() == st))
        .take(limit + 1)
        .collect();
    let next = (page.len() > limit).then(|| {
        page.truncate(limit);
        page.last().map(|l| l.ip.to_string())
    });
    let views: Vec<LeaseView<'_>> = page.into_iter().map(LeaseView::from).collect();
    Json(json!({ "leases": views, "next_cursor": next.flatten() })).into_response()
}

async fn one_lease(State(s): State<Arc<HttpState>>, Path(key): Path<String>) -> Response {
    let ip = key.parse::<Ipv4Addr>().ok();
    let mac = key.parse::<MacAddr>().ok();
    if ip.is_none() && mac.is_none() {
        return error(StatusCode::BAD_REQUEST, "expected an IPv4 address or a MAC");
    }
    let leases = match stored(&s) {
        Ok(l) => l,
        Err(r) => return r.into_response(),
    };
    // A MAC may hold records on several addresses over time: the newest one.
    let found = leases
        .iter()
        .filter(|l| Some(l.ip) == ip || Some(l.mac) == mac)
        .max_by_key(|l| l.starts);
    match found {
        Some(l) => Json(LeaseView::from(l)).into_response(),
        None => error(StatusCode::NOT_FOUND, "no lease"),
    }
}

/// Frees an address: the DHCP engine forgets its lease (durably) and may hand it to
/// any client.
async fn forget_lease(State(s): State<Arc<HttpState>>, Path(key): Path<String>) -> Response {
    let Ok(ip) = key.parse::<Ipv4Addr>() else {
        return error(StatusCode::BAD_REQUEST, "expected an IPv4 address");
    };
    let answer = ask_engine(&s, |done| crate::dhcp::server::Control::Forget { ip, done }).await;
    match answer {
        Ok(Ok(true)) => Json(json!({ "ip": ip.to_string(), "forgotten": true })).into_response(),
        Ok(Ok(false)) => error(StatusCode::NOT_FOUND, "no lease"),
        Ok(Err(e)) => {
            tracing::error!(%ip, error = %e, "forgetting a lease failed");
            error(StatusCode::SERVICE_UNAVAILABLE, "the lease store failed")
        }
        Err(r) => r,
    }
}

/// Sends a change to the DHCP engine thread and waits (bounded) for its answer.
async fn ask_engine<T>(
    s: &HttpState,
    make: impl FnOnce(tokio::sync::oneshot::Sender<T>) -> crate::dhcp::server::Control,
) -> Result<T, Response> {
    let unavailable = |why| error(StatusCode::SERVICE_UNAVAILABLE, why);
    let Some(control) = &s.control else {
        return Err(unavailable("DHCP is not running here"));
    };
    let (done, answer) = tokio::sync::oneshot::channel();
    if control.send(make(done)).await.is_err() {
        return Err(unavailable("DHCP is not running"));
    }
    match tokio::time::timeout(std::time::Duration::from_secs(10), answer).await {
        Ok(Ok(v)) => Ok(v),
        _ => Err(unavailable("DHCP did not answer")),
    }
}

fn reservation_json(r: &crate::dhcp::reserve::Reservation) -> serde_json::Value {
    json!({ "mac": r.mac.to_string(), "ip": r.ip.to_string(), "hostname": r.hostname })
}

fn stored_reservations(s: &HttpState) -> Result<Vec<crate::dhcp::reserve::Reservation>, ApiError> {
    s.store.reservations().map_err(|e| {
        tracing::error!(error = %e, "reservation read failed");
        ApiError(StatusCode::SERVICE_UNAVAILABLE, "lease store unavailable")
    })
}

async fn list_reservations(State(s): State<Arc<HttpState>>) -> Response {
    match stored_reservations(&s) {
        Ok(list) => Json(json!({
            "reservations": list.iter().map(reservation_json).collect::<Vec<_>>()
        }))
        .into_response(),
        Err(e) => e.into_response(),
    }
}

async fn get_reservation(State(s): State<Arc<HttpState>>, Path(raw): Path<String>) -> Response {
    let mac = match parse_mac(&raw) {
        Ok(m) => m,
        Err(r) => return r.into_response(),
    };
    match stored_reservations(&s) {
        Ok(list) => match list.iter().find(|r| r.mac == mac) {
            Some(r) => Json(reservation_json(r)).into_response(),
            None => error(StatusCode::NOT_FOUND, "no run-time reservation"),
        },
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReservationBody {
    ip: String,
    hostname: Option<String>,
}

/// Sends a reservation change to the DHCP engine and maps its answer.
async fn reservation_change(
    s: &HttpState,
    make: impl FnOnce(crate::dhcp::server::ReserveDone) -> crate::dhcp::server::Control,
) -> Result<(), Response> {
    use crate::dhcp::reserve::ReserveError as E;
    match ask_engine(s, make).await? {
        Ok(()) => Ok(()),
        Err(e) => {
            let status = match e {
                E::NoSubnet(_) | E::BadHostname => StatusCode::BAD_REQUEST,
                E::Reserved { .. } | E::Leased { .. } | E::Configured(_) => StatusCode::CONFLICT,
                E::NotFound(_) => StatusCode::NOT_FOUND,
                E::Store => StatusCode::SERVICE_UNAVAILABLE,
            };
            // The message holds parsed values only (addresses, normalised MACs).
            Err((status, Json(json!({ "error": e.to_string() }))).into_response())
        }
    }
}

async fn put_reservation(
    State(s): State<Arc<HttpState>>,
    Path(raw): Path<String>,
    body: Bytes,
) -> Response {
    let (mac, b) = match mac_and_body::<ReservationBody>(
        &raw,
        &body,
        "body must be {\"ip\": \"a.b.c.d\", \"hostname\": optional}",
    ) {
        Ok(x) => x,
        Err(r) => return r.into_response(),
    };
    let Ok(ip) = b.ip.parse::<Ipv4Addr>() else {
        return error(StatusCode::BAD_REQUEST, "ip must be an IPv4 address");
    };
    let reservation = crate::dhcp::reserve::Reservation {
        mac,
        ip,
        hostname: b.hostname,
    };
    let json = reservation_json(&reservation);
    match reservation_change(&s, |done| crate::dhcp::server::Control::Reserve {
        reservation,
        done,
    })
    .await
    {
        Ok(()) => Json(json).into_response(),
        Err(r) => r,
    }
}

async fn delete_reservation(State(s): State<Arc<HttpState>>, Path(raw): Path<String>) -> Response {
    let mac = match parse_mac(&raw) {
        Ok(m) => m,
        Err(r) => return r.into_response(),
    };
    match reservation_change(&s, |done| crate::dhcp::server::Control::Unreserve {
        mac,
        done,
    })
    .await
    {
        Ok(()) => Json(json!({ "mac": mac.to_string(), "deleted": true })).into_response(),
        Err(r) => r,
    }
}

fn policy_name(p: Option<HostPolicy>) -> &'static str {
    p.map_or("default", |p| match p {
        HostPolicy::Allow => "allow",
        HostPolicy::Deny => "deny",
    })
}

fn policy_json(mac: &MacAddr, p: Option<(HostPolicy, PolicySource)>) -> serde_json::Value {
    json!({
        "mac": mac.to_string(),
        "policy": policy_name(p.map(|(p, _)| p)),
        "source": p.map(|(_, s)| s.as_str()),
    })
}

/// The operator's entries, then the hosts directory's (`dhcp.hostsdir`) with its
/// wildcard entry for unknown MACs.
async fn list_hosts(State(s): State<Arc<HttpState>>) -> Response {
    let hosts: Vec<_> = s
        .policies
        .list()
        .into_iter()
        .map(|(m, p)| policy_json(&m, Some((p, PolicySource::Api))))
        .collect();
    let (dir, unknown) = s.policies.hostsdir();
    let hostsdir: Vec<_> = dir
        .into_iter()
        .map(|(m, p)| policy_json(&m, Some((p, PolicySource::HostsDir))))
        .collect();
    Json(json!({
        "hosts": hosts,
        "hostsdir": hostsdir,
        "hostsdir_unknown": unknown.map(|p| policy_name(Some(p))),
    }))
    .into_response()
}

async fn get_host(State(s): State<Arc<HttpState>>, Path(raw): Path<String>) -> Response {
    match parse_mac(&raw) {
        Ok(mac) => Json(policy_json(&mac, s.policies.lookup(&mac))).into_response(),
        Err(r) => r.into_response(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostBody {
    policy: String,
}

fn set_policy(s: &HttpState, mac: MacAddr, policy: Option<HostPolicy>) -> Response {
    match s.policies.set(mac, policy) {
        Ok(()) => {
            tracing::info!(%mac, policy = ?policy, "host policy set");
            Json(policy_json(&mac, s.policies.lookup(&mac))).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "host policy not stored");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "could not store the policy",
            )
        }
    }
}

async fn put_host(
    State(s): State<Arc<HttpState>>,
    Path(raw): Path<String>,
    body: Bytes,
) -> Response {
    let (mac, b) = match mac_and_body::<HostBody>(
        &raw,
        &body,
        "body must be {\"policy\": \"allow\" | \"deny\" | \"default\"}",
    ) {
        Ok(x) => x,
        Err(r) => return r.into_response(),
    };
    let policy = match b.policy.as_str() {
        "allow" => Some(HostPolicy::Allow),
        "deny" => Some(HostPolicy::Deny),
        "default" => None,
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "policy must be allow, deny or default",
            )
        }
    };
    set_policy(&s, mac, policy)
}

async fn delete_host(State(s): State<Arc<HttpState>>, Path(raw): Path<String>) -> Response {
    match parse_mac(&raw) {
        Ok(mac) => set_policy(&s, mac, None),
        Err(r) => r.into_response(),
    }
}

async fn owner(State(s): State<Arc<HttpState>>, Path(raw): Path<String>) -> Response {
    let mac = match parse_mac(&raw) {
        Ok(m) => m,
        Err(r) => return r.into_response(),
    };
    let res = s.resolver.resolve(&mac).await;
    let live = s.resolver.live().alive();
    let responsible = crate::dhcp::responsibility::responsible(res.member.as_deref(), &live, &mac);
    let ironic = s.resolver.ironic().map(|i| {
        json!({
            "stale": i.is_stale(),
            "age_secs": i.age(Instant::now()).map(|d| d.as_secs()),
        })
    });
    Json(json!({
        "mac": mac.to_string(),
        "owner": res.member,
        "source": res.source,
        "owner_alive": res.member.as_deref().map(|m| s.resolver.live().is_alive(m)),
        "dhcp_responsible": responsible,
        "ironic": ironic,
    }))
    .into_response()
}

/// Every member's slice of every range, in sorted-name order.
fn slices(config: &Config, name: &str) -> Vec<serde_json::Value> {
    let mut names: Vec<&str> = config.members.iter().map(|m| m.name.as_str()).collect();
    names.sort_unstable();
    let count = names.len().max(1);
    let index = names.iter().position(|n| *n == name).unwrap_or(0);
    config
        .subnets
        .iter()
        .flat_map(|s| {
            s.ranges.iter().map(move |(a, b)| {
                let bounds = Pool::partitioned(*a, *b, index, count).slice_bounds();
                json!({
                    "subnet": s.network.to_string(),
                    "range": format!("{a} - {b}"),
                    "slice": bounds.map(|(x, y)| format!("{x} - {y}")),
                })
            })
        })
        .collect()
}

async fn members(State(s): State<Arc<HttpState>>) -> Response {
    let config = &s.config;
    let me = config.owner.self_name.as_deref();
    let health = s.resolver.live().snapshot();
    let list: Vec<_> = config
        .members
        .iter()
        .map(|m| {
            let h = health.iter().find(|(n, _)| *n == m.name).map(|(_, h)| h);
            json!({
                "name": m.name,
                "self": Some(m.name.as_str()) == me,
                "alive": s.resolver.live().is_alive(&m.name),
                "failed_probes": h.map(|h| h.failures),
                "http_url": m.http_url,
                "conductor": m.conductor,
                "slices": slices(config, &m.name),
            })
        })
        .collect();
    Json(json!({
        "self": me,
        "fingerprint": s.resolver.members_fingerprint(),
        "members": list,
    }))
    .into_response()
}

async fn stats(State(s): State<Arc<HttpState>>) -> Response {
    let pools = s
        .handles
        .dhcp
        .pools
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default();
    let subnets: Vec<_> = pools
        .iter()
        .map(|p| {
            json!({
                "subnet": p.network.to_string(),
                "free_in_slice": p.free,
                "in_use": p.in_use,
            })
        })
        .collect();
    Json(json!({
        "leases": s.handles.dhcp.leases.get(),
        "transition_until": s.handles.dhcp.transition_until.get(),
        "subnets": subnets,
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// The OpenAPI document lists exactly the operator routes the router serves, with
    /// the same methods.
    #[test]
    fn openapi_matches_the_router() {
        let doc: serde_json::Value = serde_json::from_str(super::super::OPENAPI).unwrap();
        let documented: BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, ops)| {
                ops.as_object()
                    .unwrap()
                    .keys()
                    .map(move |m| (path.clone(), m.clone()))
            })
            .collect();
        let served: BTreeSet<(String, String)> = super::routes()
            .into_iter()
            .flat_map(|(path, methods, _)| {
                methods
                    .iter()
                    .map(move |m| (path.to_string(), m.to_string()))
            })
            .collect();
        assert_eq!(documented, served);
    }
}
