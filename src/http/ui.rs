//! `GET /ui`: a read-only page for people who would rather look than read JSON: the
//! boot board (`/v1/board`, refreshed, paged), the members, this member's pool use, the
//! v4 and DHCPv6 lease tables and a machine's merged timeline, fetched by the browser
//! from the operator API with the operator's token. The page and its
//! script hold no data and are public; the data needs the token like every other API
//! call.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const PAGE: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");

/// Only this origin's script, only fetches to this origin, never framed: an injected
/// host name could not run even if it ever reached the markup.
const POLICY: &str = "default-src 'none'; script-src 'self'; connect-src 'self'; \
                      style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; \
                      frame-ancestors 'none'";

fn respond(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// The page.
pub async fn page() -> Response {
    respond("text/html; charset=utf-8", PAGE)
}

/// Its script.
pub async fn script() -> Response {
    respond("text/javascript; charset=utf-8", SCRIPT)
}
