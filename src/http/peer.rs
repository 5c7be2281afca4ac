//! `GET /v1/peer/machines/{mac}/events`: this member's events of one machine, for the
//! other members only (`timeline::peers` asks it). On the boot listener, where the
//! member URLs point; answered only to a request that proves the member secret
//! (`owner::peer_auth`), with a proof over the asker's challenge, this member's name and
//! the whole body. Without a member secret it answers 403 and nothing else.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::HttpState;
use crate::mac::MacAddr;
use crate::owner::peer_auth;

/// The handler.
pub async fn events(
    State(s): State<Arc<HttpState>>,
    Path(raw): Path<String>,
    headers: HeaderMap,
) -> Response {
    let refused = |status: StatusCode| (status, "members only\n").into_response();
    let (Some(secret), Some(me)) = (s.resolver.member_secret(), s.resolver.self_name()) else {
        return refused(StatusCode::FORBIDDEN);
    };
    // Request data: parsed, never echoed.
    let Ok(mac) = raw.parse::<MacAddr>() else {
        return refused(StatusCode::BAD_REQUEST);
    };
    let challenge = headers
        .get(peer_auth::CHALLENGE_HEADER)
        .and_then(|v| peer_auth::parse_challenge(v.as_bytes()));
    let proof = headers
        .get(peer_auth::PROBER_PROOF_HEADER)
        .and_then(|v| v.to_str().ok());
    let Some((challenge, proof)) = challenge.zip(proof) else {
        return refused(StatusCode::UNAUTHORIZED);
    };
    let mac_text = mac.to_string();
    if !secret.verify_events_request(challenge, &mac_text, proof) {
        return refused(StatusCode::UNAUTHORIZED);
    }
    let events = s.handles.timeline.events(&mac, 0);
    let body = serde_json::json!({ "mac": mac_text, "events": events }).to_string();
    let proof = secret.prove_events_answer(challenge, me, body.as_bytes());
    let mut r = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    // Member names are letters, digits, '-', '_', '.' (config validation), and the
    // proof is hex: both are valid header values.
    if let (Ok(name), Ok(proof)) = (HeaderValue::from_str(me), HeaderValue::from_str(&proof)) {
        r.headers_mut().insert(peer_auth::MEMBER_HEADER, name);
        r.headers_mut().insert(peer_auth::PROOF_HEADER, proof);
    }
    r
}
