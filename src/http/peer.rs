//! `GET /v1/peer/machines/{mac}/events`: this member's events of one machine, for the
//! other members only (`timeline::peers` asks it). On the boot listener, where the
//! member URLs point; answered only to a request that proves the member secret
//! (`owner::peer_auth`), with a proof over the asker's challenge, this member's name and
//! the whole body. Without a member secret it answers 403 and nothing else.
//!
//! `GET /v1/peer/board`: this member's own board (its machines in the board window,
//! its pools, its pool fill), the same way, for the merged `/v1/board`. It never asks
//! the other members, so a board request never recurses.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::HttpState;
use crate::mac::MacAddr;
use crate::owner::peer_auth::{self, MemberSecret};
use crate::timeline::board_merge::{MemberBoard, PoolLine};
use crate::timeline::pool_fill::Sample;

/// The handler.
pub async fn events(
    State(s): State<Arc<HttpState>>,
    Path(raw): Path<String>,
    headers: HeaderMap,
) -> Response {
    // Request data: parsed, never echoed.
    let Ok(mac) = raw.parse::<MacAddr>() else {
        return refused(StatusCode::BAD_REQUEST);
    };
    let mac_text = mac.to_string();
    let verify = |k: &MemberSecret, c: &str, p: &str| k.verify_events_request(c, &mac_text, p);
    let (secret, me, challenge) = match admitted(&s, &headers, verify) {
        Ok(a) => a,
        Err(status) => return refused(status),
    };
    let events = s.handles.timeline.events(&mac, 0);
    let body = serde_json::json!({ "mac": mac_text, "events": events }).to_string();
    let proof = secret.prove_events_answer(challenge, me, body.as_bytes());
    signed(me, body, &proof)
}

fn refused(status: StatusCode) -> Response {
    (status, "members only\n").into_response()
}

/// `body` as JSON with this member's name and its proof in the headers.
fn signed(me: &str, body: String, proof: &str) -> Response {
    let mut r = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    // Member names are letters, digits, '-', '_', '.' (config validation), and the
    // proof is hex: both are valid header values.
    if let (Ok(name), Ok(proof)) = (HeaderValue::from_str(me), HeaderValue::from_str(proof)) {
        r.headers_mut().insert(peer_auth::MEMBER_HEADER, name);
        r.headers_mut().insert(peer_auth::PROOF_HEADER, proof);
    }
    r
}

/// The member route's gate: this member's secret and name, and the asker's challenge
/// once `verify` accepts its proof; else the status to refuse with.
fn admitted<'a>(
    s: &'a HttpState,
    headers: &'a HeaderMap,
    verify: impl Fn(&MemberSecret, &str, &str) -> bool,
) -> Result<(&'a MemberSecret, &'a str, &'a str), StatusCode> {
    let (Some(secret), Some(me)) = (s.resolver.member_secret(), s.resolver.self_name()) else {
        return Err(StatusCode::FORBIDDEN);
    };
    let challenge = headers
        .get(peer_auth::CHALLENGE_HEADER)
        .and_then(|v| peer_auth::parse_challenge(v.as_bytes()));
    let proof = headers
        .get(peer_auth::PROBER_PROOF_HEADER)
        .and_then(|v| v.to_str().ok());
    match challenge.zip(proof) {
        Some((challenge, proof)) if verify(secret, challenge, proof) => Ok((secret, me, challenge)),
        _ => Err(StatusCode::UNAUTHORIZED),
    }
}

/// The board handler.
pub async fn board(State(s): State<Arc<HttpState>>, headers: HeaderMap) -> Response {
    let (secret, me, challenge) =
        match admitted(&s, &headers, |k, c, p| k.verify_board_request(c, p)) {
            Ok(a) => a,
            Err(status) => return refused(status),
        };
    let Some(board) = member_board(&s).await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "cannot read the board\n").into_response();
    };
    let body = match serde_json::to_string(&board) {
        Ok(b) => b,
        Err(_) => {
            return (StatusCode::SERVICE_UNAVAILABLE, "cannot encode the board\n").into_response()
        }
    };
    let proof = secret.prove_board_answer(challenge, me, body.as_bytes());
    signed(me, body, &proof)
}

/// This member's own board: its machines seen within `timeline.board_window_s` (the
/// newest `board_merge::MAX_PEER_ROWS`), its pools and its pool fill. None when the
/// blocking task fails.
pub(crate) async fn member_board(s: &HttpState) -> Option<MemberBoard> {
    let now_ms = crate::clock::unix_now_ms();
    let window_ms = s.config.timeline.board_window.as_millis() as u64;
    let pools = pool_lines(s);
    let fill = pool_fill(s, now_ms);
    let timeline = s.handles.timeline.clone();
    // Off the async workers: at 100,000 machines the copy and the selection take tens
    // of milliseconds.
    tokio::task::spawn_blocking(move || {
        MemberBoard::of(timeline.rows(now_ms.saturating_sub(window_ms)), pools, fill)
    })
    .await
    .ok()
}

/// This member's DHCPv4 pools, as the DHCP loop last published them.
pub(crate) fn pool_lines(s: &HttpState) -> Vec<PoolLine> {
    let pools = s
        .handles
        .dhcp
        .pools
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default();
    pools
        .iter()
        .map(|p| PoolLine {
            subnet: p.network.to_string(),
            in_use: p.in_use,
            free_in_share: p.free,
        })
        .collect()
}

/// This member's pool fill over the last hour: the minute samples and, last, the
/// pools now (so a member started a minute ago already draws a point).
pub(crate) fn pool_fill(s: &HttpState, now_ms: u64) -> Vec<Sample> {
    let mut fill = s.handles.timeline.pool_fill();
    let now = Sample::of(
        now_ms,
        pool_lines(s).iter().map(|p| (p.in_use, p.free_in_share)),
    );
    fill.push(now);
    fill
}
