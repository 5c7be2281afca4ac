//! The operator API's one error type: a status and a message for the client, and the
//! cause (if any) for the log, written in one place when the answer is made.

use std::borrow::Cow;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// A 4xx/5xx answer with a JSON `{"error": message}` body.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    /// What the client reads: fixed text, or text built from parsed values only, never
    /// raw request data.
    message: Cow<'static, str>,
    /// What the log says about a server-side failure.
    cause: Option<String>,
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            status,
            message: message.into(),
            cause: None,
        }
    }

    /// 400.
    pub fn bad_request(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404.
    pub fn not_found(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 503.
    pub fn unavailable(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// The same answer, with `cause` logged when it is made.
    pub fn caused_by(mut self, cause: impl std::fmt::Display) -> Self {
        self.cause = Some(cause.to_string());
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Some(cause) = &self.cause {
            tracing::error!(status = self.status.as_u16(), error = %cause, message = %self.message, "operator API request failed");
        }
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

/// A handler's result: JSON, or an [`ApiError`].
pub type ApiResult = Result<Json<serde_json::Value>, ApiError>;
