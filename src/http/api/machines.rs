//! `/v1/machines/{mac}/events`: one machine's boot timeline (`crate::timeline`), oldest
//! first, from every member: this member's events and the other members' (asked over
//! the member channel, `timeline::peers`), in time order, each naming its member, with
//! the members that could not be asked and why. `?after=<seq>` returns only this
//! member's events newer than that seq, without asking the others: how `shardboot
//! trace` follows a machine live.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::Json;

use super::error::{ApiError, ApiResult};
use crate::http::HttpState;
use crate::mac::MacAddr;
use crate::timeline::merge::{self, MemberEvent, Merged};
use crate::timeline::peers;

/// This member's name in answers: `owner.self`, else `local` (a single instance).
pub(super) fn me(s: &HttpState) -> String {
    s.resolver.self_name().unwrap_or("local").to_string()
}

pub(super) async fn events(
    State(s): State<Arc<HttpState>>,
    Path(mac): Path<String>,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let Ok(mac) = mac.parse::<MacAddr>() else {
        return Err(ApiError::bad_request("expected a MAC address"));
    };
    let after = match query
        .as_deref()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("after=")))
    {
        None => None,
        Some(n) => Some(
            n.parse::<u64>()
                .map_err(|_| ApiError::bad_request("after: expected an event number"))?,
        ),
    };
    let me = me(&s);
    let local: Vec<MemberEvent> = s
        .handles
        .timeline
        .events(&mac, after.unwrap_or(0))
        .iter()
        .map(|e| MemberEvent::local(&me, e))
        .collect();
    let asked = match after {
        Some(_) => peers::Asked::default(),
        None => {
            let view = s.resolver.roster().current();
            peers::ask_all(
                &view.members,
                s.resolver.self_name(),
                s.resolver.member_secret().map(|k| &**k),
                mac,
                s.config.timeline.peer_timeout,
            )
            .await
        }
    };
    let mut parts = asked.parts;
    parts.push(local);
    let mut answered = asked.answered;
    answered.insert(0, me.clone());
    Ok(Json(
        serde_json::to_value(Merged {
            mac: mac.to_string(),
            member: me,
            events: merge::merge(parts),
            answered,
            unasked: asked.unasked,
        })
        .map_err(|e| ApiError::unavailable("cannot encode the timeline").caused_by(e))?,
    ))
}
