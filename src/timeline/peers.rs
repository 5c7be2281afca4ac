//! Asking the other members for their events of one machine, over their HTTP listener
//! (the member URL every member already probes), authenticated with the member secret
//! (`owner::peer_auth`): the request carries a fresh challenge and the asker's proof,
//! the answer the answering member's name and a proof over the challenge, its name and
//! the whole body. An answer that does not verify is dropped, never merged.
//!
//! Bounded: every member is asked at once, each for at most `timeline.peer_timeout_ms`
//! (connect and read), an answer is read up to [`MAX_ANSWER`] octets and at most
//! `merge::MAX_PEER_EVENTS` events are taken from it. Without a member secret no member
//! is asked (an unauthenticated answer is no evidence), and the answer says so.
//!
//! The board is asked the same way (`ask_boards`): each member's own machines, at
//! most `board_merge::MAX_PEER_ROWS`, its pools and its pool fill; the member route
//! answers its own view only, so asking never recurses.

use std::sync::OnceLock;
use std::time::Duration;

use crate::config::Member;
use crate::mac::MacAddr;
use crate::owner::peer_auth::{self, MemberSecret};

use super::board_merge::{MemberBoard, MAX_PEER_ROWS};
use super::merge::{MemberEvent, PeerAnswer, Unasked, MAX_PEER_EVENTS};
use super::pool_fill;

/// The route a member serves its events of one machine on, to members only.
pub const PEER_ROUTE: &str = "/v1/peer/machines/{mac}/events";
/// The route a member serves its own board on (its machines, pools and pool fill),
/// to members only.
pub const PEER_BOARD_ROUTE: &str = "/v1/peer/board";
/// Largest answer read from a member: its board, at most [`MAX_PEER_ROWS`] machines of
/// about 150 octets (its events of one machine are far less).
pub const MAX_ANSWER: usize = 4 * 1024 * 1024;
/// Most pools taken from a member's board.
const MAX_PEER_POOLS: usize = 1_024;

/// The path for `mac`.
pub fn peer_path(mac: &MacAddr) -> String {
    format!("/v1/peer/machines/{mac}/events")
}

fn client() -> Option<&'static reqwest::Client> {
    static CLIENT: OnceLock<Option<reqwest::Client>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            crate::site_ca::client_builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .build()
                .ok()
        })
        .as_ref()
}

/// What asking every other member gave: each answering member's events, and the
/// members that could not be asked.
#[derive(Debug, Default)]
pub struct Asked {
    /// Events per member that answered.
    pub parts: Vec<Vec<MemberEvent>>,
    /// Those members.
    pub answered: Vec<String>,
    /// The others, with why.
    pub unasked: Vec<Unasked>,
}

/// Asks every member of `members` but `me` for its events of `mac`.
pub async fn ask_all(
    members: &[Member],
    me: Option<&str>,
    secret: Option<&MemberSecret>,
    mac: MacAddr,
    timeout: Duration,
) -> Asked {
    let (answers, unasked) = ask_each(members, me, secret, timeout, |client, m, secret| {
        ask(client, m, secret, mac)
    })
    .await;
    let (answered, parts) = answers.into_iter().unzip();
    Asked {
        parts,
        answered,
        unasked,
    }
}

/// Asks every member of `members` but `me` at once with `ask`, each bounded by
/// `timeout`: the answers by member, and the members that could not be asked, with why
/// (`no_member_secret` for all of them without a secret).
async fn ask_each<'a, T, F, Fut>(
    members: &'a [Member],
    me: Option<&str>,
    secret: Option<&'a MemberSecret>,
    timeout: Duration,
    ask: F,
) -> (Vec<(String, T)>, Vec<Unasked>)
where
    F: Fn(&'static reqwest::Client, &'a Member, &'a MemberSecret) -> Fut,
    Fut: std::future::Future<Output = Result<T, &'static str>>,
{
    let others = members.iter().filter(|m| Some(m.name.as_str()) != me);
    let (Some(secret), Some(client)) = (secret, client()) else {
        let unasked = others
            .map(|m| Unasked {
                member: m.name.clone(),
                why: "no_member_secret",
            })
            .collect();
        return (Vec::new(), unasked);
    };
    let asks = others.map(|m| {
        let asked = ask(client, m, secret);
        async move {
            let r = tokio::time::timeout(timeout, asked).await;
            (m.name.clone(), r.unwrap_or(Err("timeout")))
        }
    });
    let (mut answers, mut unasked) = (Vec::new(), Vec::new());
    for (member, result) in futures_util::future::join_all(asks).await {
        match result {
            Ok(answer) => answers.push((member, answer)),
            Err(why) => unasked.push(Unasked { member, why }),
        }
    }
    (answers, unasked)
}

/// One member's events of `mac`, or why not.
async fn ask(
    client: &reqwest::Client,
    member: &Member,
    secret: &MemberSecret,
    mac: MacAddr,
) -> Result<Vec<MemberEvent>, &'static str> {
    let challenge = peer_auth::new_challenge().ok_or("unreachable")?;
    let mac_text = mac.to_string();
    let proof = secret.prove_events_request(&challenge, &mac_text);
    let verify =
        |body: &[u8], p: &str| secret.verify_events_answer(&challenge, &member.name, body, p);
    let body = signed_get(client, member, &peer_path(&mac), &challenge, &proof, verify).await?;
    let answer: PeerAnswer = serde_json::from_slice(&body).map_err(|_| "unreadable")?;
    if answer.mac.parse::<MacAddr>().ok() != Some(mac) {
        return Err("unreadable");
    }
    Ok(answer
        .events
        .into_iter()
        .rev()
        .take(MAX_PEER_EVENTS)
        .rev()
        .map(|e| MemberEvent::from_peer(&member.name, e))
        .collect())
}

/// What asking every other member for its board gave: each answering member's
/// board, and the members that could not be asked.
#[derive(Debug, Default)]
pub struct AskedBoards {
    /// Each member that answered, with its board.
    pub boards: Vec<(String, MemberBoard)>,
    /// The others, with why.
    pub unasked: Vec<Unasked>,
}

/// Asks every member of `members` but `me` for its own board (never merged again:
/// the member route answers one member's view only).
pub async fn ask_boards(
    members: &[Member],
    me: Option<&str>,
    secret: Option<&MemberSecret>,
    timeout: Duration,
) -> AskedBoards {
    let (boards, unasked) = ask_each(members, me, secret, timeout, ask_board).await;
    AskedBoards { boards, unasked }
}

/// One member's board, or why not.
async fn ask_board(
    client: &reqwest::Client,
    member: &Member,
    secret: &MemberSecret,
) -> Result<MemberBoard, &'static str> {
    let challenge = peer_auth::new_challenge().ok_or("unreachable")?;
    let proof = secret.prove_board_request(&challenge);
    let verify =
        |body: &[u8], p: &str| secret.verify_board_answer(&challenge, &member.name, body, p);
    let body = signed_get(client, member, PEER_BOARD_ROUTE, &challenge, &proof, verify).await?;
    let mut board: MemberBoard = serde_json::from_slice(&body).map_err(|_| "unreadable")?;
    board.rows.truncate(MAX_PEER_ROWS);
    board.pools.truncate(MAX_PEER_POOLS);
    let keep = board.pool_fill.len().saturating_sub(pool_fill::SAMPLES);
    board.pool_fill.drain(..keep);
    Ok(board)
}

/// GETs `path` from `member` with `challenge` and the asker's `proof`; the body, read
/// up to [`MAX_ANSWER`] octets, when the answer names `member` and `verify` accepts
/// its proof over the body.
async fn signed_get(
    client: &reqwest::Client,
    member: &Member,
    path: &str,
    challenge: &str,
    proof: &str,
    verify: impl Fn(&[u8], &str) -> bool,
) -> Result<Vec<u8>, &'static str> {
    let url = format!("{}{path}", member.http_url);
    let mut r = client
        .get(url)
        .header(peer_auth::CHALLENGE_HEADER, challenge)
        .header(peer_auth::PROBER_PROOF_HEADER, proof)
        .send()
        .await
        .map_err(|e| {
            if e.is_timeout() {
                "timeout"
            } else {
                "unreachable"
            }
        })?;
    if !r.status().is_success() {
        return Err("refused");
    }
    let header = |name: &str| {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let (named, proof) = (
        header(peer_auth::MEMBER_HEADER),
        header(peer_auth::PROOF_HEADER),
    );
    let mut body = Vec::new();
    while let Some(chunk) = r.chunk().await.map_err(|_| "unreachable")? {
        if body.len() + chunk.len() > MAX_ANSWER {
            return Err("too_large");
        }
        body.extend_from_slice(&chunk);
    }
    // The member asked must be the one that answered, and the answer must be whole.
    let verified =
        named.as_deref() == Some(member.name.as_str()) && proof.is_some_and(|p| verify(&body, &p));
    if !verified {
        return Err("unverified");
    }
    Ok(body)
}
