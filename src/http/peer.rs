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
use crate::store::{SharedChange, Verdict};

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

/// Why a family's changes got no verdicts: the answer to give.
type NoVerdicts = Response;

/// Hands one family's changes to its server; with none here (that family is not
/// served), they are accepted unstored: this member hands out no such address, so
/// none of them can clash with its own.
async fn verdicts_of<C, F, Fut, E1, E2>(
    changes: Vec<C>,
    server: Option<F>,
) -> Result<Vec<Verdict>, NoVerdicts>
where
    F: FnOnce(Vec<C>) -> Fut,
    Fut: std::future::Future<Output = Result<Result<Vec<Verdict>, E1>, E2>>,
    E1: std::fmt::Display,
    E2: std::fmt::Display,
{
    match server {
        _ if changes.is_empty() => Ok(Vec::new()),
        None => Ok(vec![Verdict::Accepted; changes.len()]),
        Some(apply) => match apply(changes).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(unavailable(e)),
            Err(e) => Err(unavailable(e)),
        },
    }
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
    if s.dhcp.is_none() && s.dhcp6.is_none() {
        return unavailable("DHCP is off here");
    }
    if let Some(r) = &s.replication {
        r.metrics.received.inc();
    }
    // Each family to its own server, the verdicts put back in the batch's order.
    let catch_up = a.batch.catch_up;
    let mut is_v6 = Vec::with_capacity(a.batch.changes.len());
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for c in a.batch.changes {
        is_v6.push(matches!(c, SharedChange::V6(_)));
        match c {
            SharedChange::V4(e) => v4.push(e),
            SharedChange::V6(e) => v6.push(e),
        }
    }
    let (four, six) = tokio::join!(
        verdicts_of(
            v4,
            s.dhcp
                .as_ref()
                .map(|d| move |c| d.peer_changes(c, catch_up))
        ),
        verdicts_of(
            v6,
            s.dhcp6
                .as_ref()
                .map(|d| move |c| d.peer_changes(c, catch_up))
        ),
    );
    let (four, six) = match (four, six) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let (mut four, mut six) = (four.into_iter(), six.into_iter());
    let verdicts: Vec<Verdict> = is_v6
        .iter()
        .filter_map(|&v6| if v6 { six.next() } else { four.next() })
        .collect();
    answer(&s, &a.proof, wire::encode_answer(&verdicts))
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
    if s.dhcp.is_none() && s.dhcp6.is_none() {
        return unavailable("DHCP is off here");
    }
    let mut snapshot = wire::Snapshot::default();
    if let Some(dhcp) = &s.dhcp {
        match dhcp.live_leases().await {
            Ok(leases) => snapshot.leases = leases,
            Err(e) => return unavailable(e),
        }
    }
    if let Some(dhcp6) = &s.dhcp6 {
        match dhcp6.live_leases().await {
            Ok(leases) => snapshot.leases6 = leases,
            Err(e) => return unavailable(e),
        }
    }
    answer(&s, &a.proof, wire::encode_snapshot(&snapshot))
}
