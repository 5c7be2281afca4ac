//! `/v1/machines/{mac}/events`: one machine's boot timeline (`crate::timeline`), oldest
//! first; `?after=<seq>` returns only newer events, which is how `shardboot trace`
//! follows a machine live.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use serde_json::json;

use super::error::{ApiError, ApiResult};
use crate::http::HttpState;
use crate::mac::MacAddr;

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
        None => 0,
        Some(n) => n
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request("after: expected an event number"))?,
    };
    let events = s.handles.timeline.events(&mac, after);
    Ok(Json(json!({
        "mac": mac.to_string(),
        "events": events,
    })))
}
