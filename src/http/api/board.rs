//! `GET /v1/board`: the boot board (`timeline::board`): every machine this member saw
//! within `timeline.board_window_s`, by stage, stuck machines first, one page at a time
//! (`?q=` part of a MAC or address, `?stage=`, `?stuck=1`, `?offset=`, `?limit=`), with
//! the members and their liveness and this member's pool fill. `/ui` and `shardboot
//! board` read it.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde_json::json;

use super::error::{ApiError, ApiResult};
use crate::http::HttpState;
use crate::timeline::board::{self, Query, MAX_SEARCH};
use crate::timeline::stage::Stage;

/// The query, checked; request data never reaches the answer except as a filter.
fn parse(raw: Option<&str>) -> Result<Query, ApiError> {
    let mut q = Query {
        limit: board::DEFAULT_LIMIT,
        ..Query::default()
    };
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
            _ => return Err(ApiError::bad_request("unknown parameter")),
        }
    }
    Ok(q)
}

pub(super) async fn board(State(s): State<Arc<HttpState>>, RawQuery(query): RawQuery) -> ApiResult {
    let q = parse(query.as_deref())?;
    let settings = &s.config.timeline;
    let now_ms = crate::clock::unix_now_ms();
    let window_ms = settings.board_window.as_millis() as u64;
    let stuck_ms = settings.stuck_after.as_millis() as u64;
    // Off the async workers: at 100,000 machines the copy takes about 10 ms (under
    // the timeline's lock) and the sort about 50 ms.
    let timeline = s.handles.timeline.clone();
    let page = tokio::task::spawn_blocking(move || {
        let rows = timeline.rows(now_ms.saturating_sub(window_ms));
        board::page(rows, now_ms, stuck_ms, &q)
    })
    .await
    .map_err(|e| ApiError::unavailable("cannot read the board").caused_by(e))?;
    let me = super::machines::me(&s);
    let view = s.resolver.roster().current();
    let mut members: Vec<_> = view
        .members
        .iter()
        .map(|m| {
            json!({
                "name": m.name,
                "self": m.name == me,
                "alive": m.name == me || s.resolver.live().is_alive(&m.name),
            })
        })
        .collect();
    if members.is_empty() {
        // A single instance: the board still says who it is.
        members.push(json!({ "name": me, "self": true, "alive": true }));
    }
    let pools = s
        .handles
        .dhcp
        .pools
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default();
    let pools: Vec<_> = pools
        .iter()
        .map(|p| {
            json!({
                "subnet": p.network.to_string(),
                "in_use": p.in_use,
                "free_in_share": p.free,
            })
        })
        .collect();
    let mut v = serde_json::to_value(page)
        .map_err(|e| ApiError::unavailable("cannot encode the board").caused_by(e))?;
    v["member"] = json!(me);
    v["now_ms"] = json!(now_ms);
    v["window_ms"] = json!(window_ms);
    v["stuck_after_ms"] = json!(stuck_ms);
    v["members"] = json!(members);
    v["pools"] = json!(pools);
    Ok(Json(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_is_checked() {
        let q = parse(Some("q=52%3A54&stage=bound&stuck=1&offset=20&limit=50")).unwrap();
        assert_eq!(q.search.as_deref(), Some("52:54"));
        assert_eq!(
            (q.stage, q.stuck, q.offset, q.limit),
            (Some(Stage::Bound), true, 20, 50)
        );
        for bad in ["q=%3Cb%3E", "stage=nope", "offset=-1", "x=1"] {
            assert!(parse(Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(parse(None).unwrap().limit, board::DEFAULT_LIMIT);
    }
}
