//! `/v1/reservations`: fixed addresses set at run time, checked and applied by the DHCP
//! engine, durable before the answer.

use std::net::Ipv4Addr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::{dhcp, mac_and_body, parse_mac, read_store, ApiError, ApiResult};
use crate::dhcp::engine::reserve::ReserveError;
use crate::http::HttpState;
use crate::store::Reservation;

fn reservation_json(r: &Reservation) -> serde_json::Value {
    json!({ "mac": r.mac.to_string(), "ip": r.ip.to_string(), "hostname": r.hostname })
}

pub(super) async fn list(State(s): State<Arc<HttpState>>) -> ApiResult {
    let list = read_store(&s, |store| store.reservations()).await?;
    Ok(Json(json!({
        "reservations": list.iter().map(reservation_json).collect::<Vec<_>>()
    })))
}

pub(super) async fn get(State(s): State<Arc<HttpState>>, Path(raw): Path<String>) -> ApiResult {
    let mac = parse_mac(&raw)?;
    let list = read_store(&s, |store| store.reservations()).await?;
    match list.iter().find(|r| r.mac == mac) {
        Some(r) => Ok(Json(reservation_json(r))),
        None => Err(ApiError::not_found("no run-time reservation")),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReservationBody {
    ip: String,
    hostname: Option<String>,
}

/// The engine's refusal as an answer. Its message holds parsed values only (addresses,
/// normalised MACs).
fn refused(e: ReserveError) -> ApiError {
    let status = match e {
        ReserveError::NoSubnet(_) | ReserveError::BadHostname => StatusCode::BAD_REQUEST,
        ReserveError::Reserved { .. }
        | ReserveError::Leased { .. }
        | ReserveError::Configured(_) => StatusCode::CONFLICT,
        ReserveError::NotFound(_) => StatusCode::NOT_FOUND,
        ReserveError::Store => StatusCode::SERVICE_UNAVAILABLE,
    };
    ApiError::new(status, e.to_string())
}

pub(super) async fn put(
    State(s): State<Arc<HttpState>>,
    Path(raw): Path<String>,
    body: Bytes,
) -> ApiResult {
    let (mac, b) = mac_and_body::<ReservationBody>(
        &raw,
        &body,
        "body must be {\"ip\": \"a.b.c.d\", \"hostname\": optional}",
    )?;
    let Ok(ip) = b.ip.parse::<Ipv4Addr>() else {
        return Err(ApiError::bad_request("ip must be an IPv4 address"));
    };
    let reservation = Reservation {
        mac,
        ip,
        hostname: b.hostname,
    };
    let json = reservation_json(&reservation);
    dhcp(&s)?.reserve(reservation).await?.map_err(refused)?;
    Ok(Json(json))
}

pub(super) async fn delete(State(s): State<Arc<HttpState>>, Path(raw): Path<String>) -> ApiResult {
    let mac = parse_mac(&raw)?;
    dhcp(&s)?.unreserve(mac).await?.map_err(refused)?;
    Ok(Json(json!({ "mac": mac.to_string(), "deleted": true })))
}
