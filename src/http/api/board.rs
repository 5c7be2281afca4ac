//! `GET /v1/board`: the boot board (`timeline::board`): every machine the members saw
//! within `timeline.board_window_s`, by stage, stuck machines first, one page at a time
//! (`?q=` part of a MAC or address, `?stage=`, `?stuck=1`, `?offset=`, `?limit=`), each
//! machine with the members that saw it, and the members with their liveness, pools
//! and pool fill over the last hour. The other members are asked for their own boards
//! over the member channel (`timeline::peers`, bounded by `timeline.peer_timeout_ms`,
//! answers verified) and the ones that could not be asked are named; `?local=1` shows
//! this member's view alone, asking nobody. `/ui` and `shardboot board` read it.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde_json::json;

use super::error::{ApiError, ApiResult};
use crate::http::peer::{pool_fill, pool_lines};
use crate::http::HttpState;
use crate::timeline::board::{self, Query, MAX_SEARCH};
use crate::timeline::board_merge::{self, MemberBoard, SharedRow};
use crate::timeline::peers::{self, AskedBoards};
use crate::timeline::stage::Stage;

/// The query, checked, and whether only this member's view is asked for (`local`);
/// request data never reaches the answer except as a filter.
fn parse(raw: Option<&str>) -> Result<(Query, bool), ApiError> {
    let mut q = Query {
        limit: board::DEFAULT_LIMIT,
        ..Query::default()
    };
    let mut local = false;
    for kv in raw.unwrap_or("").split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let number =
            |what: &'static str| v.parse::<usize>().map_err(|_| ApiError::bad_request(what));
        match k {
            "q" => {
                let text: String = v.replace('+', " ").replace("%3A", ":").replace("%3a", ":");
                if text.len() > MAX_SEARCH
                    || !text
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b":.-_ ".contains(&b))
                {
                    return Err(ApiError::bad_request(
                        "q: part of a MAC or an address (letters, digits, ':', '.', '-')",
                    ));
                }
                q.search = Some(text);
            }
            "stage" => {
                q.stage = Some(Stage::parse(v).ok_or_else(|| {
                    ApiError::bad_request(
                    "stage: silent, offered, bound, boot_file, first_stage, chained or fallback",
                )
                })?)
            }
            "stuck" => q.stuck = v == "1" || v == "true",
            "offset" => q.offset = number("offset: expected a number")?,
            "limit" => q.limit = number("limit: expected a number")?,
            "local" => local = v == "1" || v == "true",
            _ => return Err(ApiError::bad_request("unknown parameter")),
        }
    }
    Ok((q, local))
}

pub(super) async fn board(State(s): State<Arc<HttpState>>, RawQuery(query): RawQuery) -> ApiResult {
    let (q, local) = parse(query.as_deref())?;
    let settings = &s.config.timeline;
    let now_ms = crate::clock::unix_now_ms();
    let window_ms = settings.board_window.as_millis() as u64;
    let stuck_ms = settings.stuck_after.as_millis() as u64;
    let me = super::machines::me(&s);
    let view = s.resolver.roster().current();
    let asked = if local {
        AskedBoards::default()
    } else {
        peers::ask_boards(
            &view.members,
            s.resolver.self_name(),
            s.resolver.member_secret().map(|k| &**k),
            settings.peer_timeout,
        )
        .await
    };
    let mut others: Vec<(String, Vec<SharedRow>)> = Vec::new();
    let mut boards: Vec<(String, MemberBoard)> = Vec::new();
    for (member, mut b) in asked.boards {
        others.push((member.clone(), std::mem::take(&mut b.rows)));
        boards.push((member, b));
    }
    // Off the async workers: at 100,000 machines the copy takes about 10 ms (under
    // the timeline's lock), the join and the sort about 50 ms each.
    let timeline = s.handles.timeline.clone();
    let name = me.clone();
    let (page, seen_by) = tokio::task::spawn_blocking(move || {
        let rows = timeline.rows(now_ms.saturating_sub(window_ms));
        let joined = board_merge::join(&name, rows, &others);
        let page = board::page(joined.rows, now_ms, stuck_ms, &q);
        let seen_by: Vec<Vec<String>> = page
            .machines
            .iter()
            .map(|l| {
                l.mac
                    .parse()
                    .ok()
                    .and_then(|mac| joined.seen_by.get(&mac).cloned())
                    .unwrap_or_default()
            })
            .collect();
        (page, seen_by)
    })
    .await
    .map_err(|e| ApiError::unavailable("cannot read the board").caused_by(e))?;
    let pools = pool_lines(&s);
    let own = json!({ "pools": pools, "pool_fill": pool_fill(&s, now_ms) });
    let member = |name: &str, alive: bool| {
        let (answered, part) = if name == me {
            (true, own.clone())
        } else {
            match boards.iter().find(|(m, _)| m == name) {
                Some((_, b)) => (
                    true,
                    json!({ "pools": b.pools, "pool_fill": b.pool_fill, "truncated": b.truncated }),
                ),
                None => (false, json!({ "pools": [], "pool_fill": [] })),
            }
        };
        let mut m =
            json!({ "name": name, "self": name == me, "alive": alive, "answered": answered });
        for (k, v) in part.as_object().into_iter().flatten() {
            m[k] = v.clone();
        }
        m
    };
    let mut members: Vec<_> = view
        .members
        .iter()
        .map(|m| member(&m.name, m.name == me || s.resolver.live().is_alive(&m.name)))
        .collect();
    if members.is_empty() {
        // A single instance: the board still says who it is.
        members.push(member(&me, true));
    }
    let mut v = serde_json::to_value(page)
        .map_err(|e| ApiError::unavailable("cannot encode the board").caused_by(e))?;
    if let Some(lines) = v["machines"].as_array_mut() {
        for (line, by) in lines.iter_mut().zip(seen_by) {
            line["members"] = json!(by);
        }
    }
    v["member"] = json!(me);
    v["local"] = json!(local);
    v["now_ms"] = json!(now_ms);
    v["window_ms"] = json!(window_ms);
    v["stuck_after_ms"] = json!(stuck_ms);
    v["members"] = json!(members);
    v["unasked"] = json!(asked.unasked);
    v["pools"] = json!(pools);
    Ok(Json(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_is_checked() {
        let (q, local) = parse(Some(
            "q=52%3A54&stage=bound&stuck=1&offset=20&limit=50&local=1",
        ))
        .unwrap();
        assert!(local);
        assert_eq!(q.search.as_deref(), Some("52:54"));
        assert_eq!(
            (q.stage, q.stuck, q.offset, q.limit),
            (Some(Stage::Bound), true, 20, 50)
        );
        for bad in ["q=%3Cb%3E", "stage=nope", "offset=-1", "x=1"] {
            assert!(parse(Some(bad)).is_err(), "{bad}");
        }
        let (q, local) = parse(None).unwrap();
        assert_eq!((q.limit, local), (board::DEFAULT_LIMIT, false));
    }
}
