//! The member channel's lease replication routes, on the boot listener (the member URL
//! peers know): `POST /v1/members/leases` takes a peer's batch of lease changes and
//! answers once what it took is durable; `POST /v1/members/leases/snapshot` gives every
//! live lease to a member starting. Both take only messages proven with the member
//! secret (`owner::peer_auth`), once each (`replication::ReplayGuard`), and prove their
//! answers, bound to the request's proof.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tracing::debug;

use super::HttpState;
use crate::owner::peer_auth;
use crate::replication::{wire, BATCH_PATH, SNAPSHOT_PATH};

/// A proven, fresh message: its sender, its proof and the decoded batch.
struct Admitted {
    proof: String,
    batch: wire::Batch,
}

/// Why a message was refused: its status and the reason given.
type Refusal = (StatusCode, &'static str);

fn refuse(s: &HttpState, (status, why): Refusal) -> Response {
    if let Some(r) = &s.replication {
        r.metrics.rejected.inc();
    }
    debug!(why, "replication message refused");
    (status, format!("{why}\n")).into_response()
}

/// Checks the sender's proof, decodes the batch and refuses a replay.
fn admit(s: &HttpState, path: &str, headers: &HeaderMap, body: &[u8]) -> Result<Admitted, Refusal> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // Member names are at most 64 characters (`config::member`); a longer header is no
    // member's.
    let Some(member) = header(peer_auth::MEMBER_HEADER).filter(|m| !m.is_empty() && m.len() <= 64)
    else {
        return Err((StatusCode::FORBIDDEN, "no member named"));
    };
    let proof = header(peer_auth::PROOF_HEADER).unwrap_or("").to_string();
    match s.resolver.member_secret() {
        Some(secret) if secret.verify_message(member, path, body, &proof) => {}
        Some(_) => return Err((StatusCode::FORBIDDEN, "no valid proof")),
        // Without a secret only `owner.insecure_members` takes unproven messages.
        None if s.config.owner.insecure_members => {}
        None => return Err((StatusCode::FORBIDDEN, "no member secret here")),
    }
    let batch = match wire::decode_batch(body) {
        Ok(b) => b,
        Err(_) => return Err((StatusCode::BAD_REQUEST, "malformed batch")),
    };
    if !s.replays.admit(member, batch.epoch, batch.seq) {
        return Err((StatusCode::CONFLICT, "replayed or out of order"));
    }
    Ok(Admitted { proof, batch })
}

/// The answer, named and proven by this member.
fn answer(s: &HttpState, request_proof: &str, body: Vec<u8>) -> Response {
    let me = s.resolver.self_name().unwrap_or_default();
    let proof = s
        .resolver
        .member_secret()
        .map(|secret| secret.prove_answer(me, request_proof, &body));
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    // A validated member name and a hex proof: valid header text.
    if let Ok(v) = HeaderValue::from_str(me) {
        h.insert(peer_auth::MEMBER_HEADER, v);
    }
    if let Some(v) = proof.and_then(|p| HeaderValue::from_str(&p).ok()) {
        h.insert(peer_auth::PROOF_HEADER, v);
    }
    r
}

/// Why this member cannot take or give leases now: 503 with the reason.
fn unavailable(why: impl std::fmt::Display) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response()
}

/// `POST /v1/members/leases`.
pub async fn take_batch(
    State(s): State<Arc<HttpState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let a = match admit(&s, BATCH_PATH, &headers, &body) {
        Ok(a) => a,
        Err(why) => return refuse(&s, why),
    };
    let Some(dhcp) = &s.dhcp else {
        return unavailable("DHCP is off here");
    };
    if let Some(r) = &s.replication {
        r.metrics.received.inc();
    }
    match dhcp.peer_changes(a.batch.changes, a.batch.catch_up).await {
        Ok(Ok(verdicts)) => answer(&s, &a.proof, wire::encode_answer(&verdicts)),
        Ok(Err(e)) => unavailable(e),
        Err(e) => unavailable(e),
    }
}

/// `POST /v1/members/leases/snapshot`.
pub async fn give_snapshot(
    State(s): State<Arc<HttpState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let a = match admit(&s, SNAPSHOT_PATH, &headers, &body) {
        Ok(a) => a,
        Err(why) => return refuse(&s, why),
    };
    let Some(dhcp) = &s.dhcp else {
        return unavailable("DHCP is off here");
    };
    match dhcp.live_leases().await {
        Ok(leases) => answer(&s, &a.proof, wire::encode_snapshot(&leases)),
        Err(e) => unavailable(e),
    }
}
