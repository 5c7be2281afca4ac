//! The operator API: leases (v4 and v6), host allow/deny, reservations, owners, members and pool
//! statistics, as JSON, behind bearer tokens (`auth.rs`) or a client certificate. Every
//! error is an [`ApiError`]: a JSON object with a 4xx/5xx status; request data is
//! parsed before use and never echoed. One file per resource.

mod board;
mod cluster;
mod error;
mod hosts;
mod leases;
mod leases6;
mod machines;
mod reload;
mod reservations;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};

use super::auth::Refusal;
use super::HttpState;
use crate::mac::MacAddr;
use crate::store::{Store, StoreError};
pub use error::{ApiError, ApiResult};

/// Largest request body the API reads.
pub const MAX_BODY: usize = 16 * 1024;
/// Largest page of `/v1/leases` and `/v1/leases6`.
pub const MAX_PAGE: usize = 1000;

/// One operator route: path, methods (for the OpenAPI test), handler.
pub type Route = (
    &'static str,
    &'static [&'static str],
    MethodRouter<Arc<HttpState>>,
);

/// The operator routes. The router and the OpenAPI test both read this list.
pub fn routes() -> Vec<Route> {
    vec![
        ("/v1/leases", &["get"], get(leases::list)),
        (
            "/v1/leases/{key}",
            &["get", "delete"],
            get(leases::one).delete(leases::forget),
        ),
        ("/v1/leases6", &["get"], get(leases6::list)),
        ("/v1/leases6/{ip}", &["get"], get(leases6::one)),
        ("/v1/hosts", &["get"], get(hosts::list)),
        (
            "/v1/hosts/{mac}",
            &["get", "put", "delete"],
            get(hosts::get).put(hosts::put).delete(hosts::delete),
        ),
        ("/v1/reservations", &["get"], get(reservations::list)),
        (
            "/v1/reservations/{mac}",
            &["get", "put", "delete"],
            get(reservations::get)
                .put(reservations::put)
                .delete(reservations::delete),
        ),
        ("/v1/owners/{mac}", &["get"], get(cluster::owner)),
        ("/v1/members", &["get"], get(cluster::members)),
        ("/v1/stats", &["get"], get(cluster::stats)),
        ("/v1/reload", &["post"], post(reload::reload)),
        ("/v1/machines/{mac}/events", &["get"], get(machines::events)),
        ("/v1/board", &["get"], get(board::board)),
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
        Err(Refusal::Disabled) => ApiError::new(
            StatusCode::FORBIDDEN,
            "the operator API needs http.token_file or a client certificate (http.client_ca)",
        )
        .into_response(),
        Err(Refusal::BadToken) => {
            let mut r = ApiError::new(StatusCode::UNAUTHORIZED, "a valid bearer token is required")
                .into_response();
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
        .map_err(|_| ApiError::bad_request("invalid MAC address"))
}

/// The MAC from the path and the JSON body of a PUT; `usage` describes the body in the
/// 400 answer.
fn mac_and_body<T: serde::de::DeserializeOwned>(
    raw: &str,
    body: &[u8],
    usage: &'static str,
) -> Result<(MacAddr, T), ApiError> {
    let mac = parse_mac(raw)?;
    let parsed = serde_json::from_slice::<T>(body).map_err(|_| ApiError::bad_request(usage))?;
    Ok((mac, parsed))
}

/// Runs a store read off the async runtime (it may touch the disk).
async fn read_store<T: Send + 'static>(
    s: &HttpState,
    read: impl FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = s.store.clone();
    let unavailable = || ApiError::unavailable("lease store unavailable");
    match tokio::task::spawn_blocking(move || read(&*store)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(unavailable().caused_by(e)),
        Err(e) => Err(unavailable().caused_by(e)),
    }
}

/// The DHCP engine's handle, or why there is none.
fn dhcp(s: &HttpState) -> Result<&crate::dhcp::shell::DhcpHandle, ApiError> {
    s.dhcp
        .as_ref()
        .ok_or_else(|| ApiError::unavailable("DHCP is not running here"))
}

/// The engine did not answer.
impl From<crate::dhcp::shell::ControlError> for ApiError {
    fn from(e: crate::dhcp::shell::ControlError) -> Self {
        ApiError::unavailable(e.to_string())
    }
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
