//! `POST /v1/reload`: reads the configuration again, as SIGHUP does (`crate::reload`),
//! and answers what took effect and what waits for a restart.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::json;

use super::error::{ApiError, ApiResult};
use crate::http::HttpState;
use crate::reload::ReloadError;

pub(super) async fn reload(State(s): State<Arc<HttpState>>) -> ApiResult {
    match s.handles.reload.reload().await {
        Ok(report) => Ok(Json(json!({
            "applied": report.applied,
            "needs_restart": report.needs_restart,
        }))),
        // The configuration's own problems, each with its key: the operator's file,
        // not request data.
        Err(e @ ReloadError::Invalid(_)) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            e.to_string(),
        )),
        Err(e) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            e.to_string(),
        )),
    }
}
