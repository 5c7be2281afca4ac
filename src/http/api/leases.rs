//! `/v1/leases`: pages of lease records in address order, one lease by address or MAC,
//! and forgetting an address.

use std::net::Ipv4Addr;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::{dhcp, read_store, ApiError, ApiResult, MAX_PAGE};
use crate::http::HttpState;
use crate::mac::MacAddr;
use crate::store::{LeaseQuery, LeaseState, LeaseView};

/// `GET /v1/leases` filters and paging.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LeaseParams {
    mac: Option<String>,
    ip: Option<String>,
    subnet: Option<String>,
    state: Option<String>,
    limit: Option<usize>,
    /// The last address of the previous page: pages are in address order, so a cursor
    /// stays valid while leases come and go.
    cursor: Option<String>,
}

/// A query parameter that, when given, must parse.
fn param<T: std::str::FromStr>(
    raw: Option<&str>,
    what: &'static str,
) -> Result<Option<T>, ApiError> {
    raw.map(str::parse)
        .transpose()
        .map_err(|_| ApiError::bad_request(what))
}

fn state(raw: Option<&str>) -> Result<Option<LeaseState>, ApiError> {
    let Some(raw) = raw else { return Ok(None) };
    [
        LeaseState::Offered,
        LeaseState::Bound,
        LeaseState::Released,
        LeaseState::Declined,
    ]
    .into_iter()
    .find(|s| s.as_str() == raw)
    .map(Some)
    .ok_or_else(|| ApiError::bad_request("state must be offered, bound, released or declined"))
}

pub(super) async fn list(
    State(s): State<Arc<HttpState>>,
    params: Result<Query<LeaseParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    let Ok(Query(p)) = params else {
        return Err(ApiError::bad_request(
            "unknown or malformed query parameter",
        ));
    };
    let query = LeaseQuery {
        mac: param::<MacAddr>(p.mac.as_deref(), "invalid mac")?,
        ip: param::<Ipv4Addr>(p.ip.as_deref(), "invalid ip")?,
        subnet: param::<ipnet::Ipv4Net>(p.subnet.as_deref(), "invalid subnet (a.b.c.d/len)")?,
        after: param::<Ipv4Addr>(p.cursor.as_deref(), "invalid cursor")?,
        state: state(p.state.as_deref())?,
    };
    let limit = p.limit.unwrap_or(100);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request("limit must be between 1 and 1000"));
    }
    // One more than the page, to know whether another page follows.
    let mut page = read_store(&s, move |store| store.leases(&query, limit + 1)).await?;
    let next = (page.len() > limit).then(|| {
        page.truncate(limit);
        page.last().map(|l| l.ip.to_string())
    });
    let views: Vec<LeaseView<'_>> = page.iter().map(LeaseView::from).collect();
    Ok(Json(
        json!({ "leases": views, "next_cursor": next.flatten() }),
    ))
}

pub(super) async fn one(State(s): State<Arc<HttpState>>, Path(key): Path<String>) -> ApiResult {
    let found = if let Ok(ip) = key.parse::<Ipv4Addr>() {
        read_store(&s, move |store| store.lease(ip)).await?
    } else if let Ok(mac) = key.parse::<MacAddr>() {
        // A MAC may hold records on several addresses over time: the newest one.
        read_store(&s, move |store| store.lease_of(mac)).await?
    } else {
        return Err(ApiError::bad_request("expected an IPv4 address or a MAC"));
    };
    match found {
        Some(l) => Ok(Json(json!(LeaseView::from(&l)))),
        None => Err(ApiError::not_found("no lease")),
    }
}

/// Frees an address: the DHCP engine forgets its lease (durably) and may hand it to
/// any client.
pub(super) async fn forget(State(s): State<Arc<HttpState>>, Path(key): Path<String>) -> ApiResult {
    let Ok(ip) = key.parse::<Ipv4Addr>() else {
        return Err(ApiError::bad_request("expected an IPv4 address"));
    };
    match dhcp(&s)?.forget(ip).await? {
        Ok(true) => Ok(Json(json!({ "ip": ip.to_string(), "forgotten": true }))),
        Ok(false) => Err(ApiError::not_found("no lease")),
        Err(e) => Err(ApiError::unavailable("the lease store failed").caused_by(e)),
    }
}
