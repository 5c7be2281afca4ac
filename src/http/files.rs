//! `GET /ipxe/{file}`: the TFTP root over HTTP, for UEFI HTTP Boot of iPXE itself,
//! through TFTP's own [`FileRoot`](crate::tftp::FileRoot) (the same confinement, aliases,
//! symlink rule and file cache), with single byte ranges (RFC 9110 §14) and HEAD.
//! Files over `tftp.max_file_size` are refused as TFTP refuses them; a body is the
//! cache's own `Arc`ed copy, so parallel downloads of one file hold it once.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::HttpState;
use crate::tftp::path::Refusal;

/// A parsed `Range: bytes=…` request against a body of `len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeRequest {
    /// No (or an ignorable) Range header: the whole body.
    Full,
    /// Inclusive byte range.
    Part(u64, u64),
    /// Cannot be satisfied: 416.
    Unsatisfiable,
}

/// Parses a single-range `bytes=` header (`a-b`, `a-`, `-n`). Multiple ranges and other
/// units are answered with the full body, which RFC 9110 §14.2 allows.
pub fn parse_range(value: Option<&str>, len: u64) -> RangeRequest {
    let Some(spec) = value.and_then(|v| v.trim().strip_prefix("bytes=")) else {
        return RangeRequest::Full;
    };
    if spec.contains(',') {
        return RangeRequest::Full;
    }
    let Some((a, b)) = spec.split_once('-') else {
        return RangeRequest::Full;
    };
    let (a, b) = (a.trim(), b.trim());
    let range = match (a.parse::<u64>().ok(), b.parse::<u64>().ok()) {
        (Some(start), Some(end)) if start <= end => (start, end.min(len.saturating_sub(1))),
        (Some(start), None) if b.is_empty() => (start, len.saturating_sub(1)),
        (None, Some(suffix)) if a.is_empty() && suffix > 0 => {
            (len.saturating_sub(suffix), len.saturating_sub(1))
        }
        _ => return RangeRequest::Full,
    };
    if len == 0 || range.0 >= len {
        return RangeRequest::Unsatisfiable;
    }
    RangeRequest::Part(range.0, range.1)
}

/// The refusal of a file over `tftp.max_file_size`: 403 with TFTP's own words ("file
/// too large"). Not 413, which RFC 9110 §15.5.14 defines for request content.
fn too_large() -> Response {
    (StatusCode::FORBIDDEN, "file too large\n").into_response()
}

/// The answer to `range` of a cached file: status, body and `Content-Range`. The body
/// is a view of the cache's own allocation, never a copy, so a hundred parallel
/// downloads of a large file hold it once.
pub fn part(data: Arc<[u8]>, range: Option<&str>) -> (StatusCode, Bytes, Option<String>) {
    let body = Bytes::from_owner(data);
    let len = body.len() as u64;
    match parse_range(range, len) {
        RangeRequest::Full => (StatusCode::OK, body, None),
        RangeRequest::Part(a, b) => (
            StatusCode::PARTIAL_CONTENT,
            body.slice(a as usize..=b as usize),
            Some(format!("bytes {a}-{b}/{len}")),
        ),
        RangeRequest::Unsatisfiable => (
            StatusCode::RANGE_NOT_SATISFIABLE,
            Bytes::new(),
            Some(format!("bytes */{len}")),
        ),
    }
}

/// Serves one file from the TFTP root.
pub async fn ipxe_file(
    State(s): State<Arc<HttpState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    peer: Option<axum::Extension<super::serve::PeerAddr>>,
) -> Response {
    let not_found = || (StatusCode::NOT_FOUND, "not found\n").into_response();
    // The name is request data: confined lexically, never echoed (the timeline keeps
    // it escaped).
    let shown = name.clone();
    let files = s.files.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        let (_, opened) = files.open(name.as_bytes())?;
        // Checked before the load, as TFTP does, so a huge file is never read at all.
        if opened.meta.len() > files.settings.max_file_size {
            return Err(Refusal::TooLarge);
        }
        files.cache.load(opened)
    })
    .await;
    let body = match loaded {
        Ok(Ok((body, _))) => body,
        Ok(Err(Refusal::TooLarge)) => return too_large(),
        _ => return not_found(),
    };
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let (status, body, content_range) = part(body, range);
    let label = match status {
        StatusCode::OK => "200",
        StatusCode::PARTIAL_CONTENT => "206",
        _ => "416",
    };
    super::note_by_address(&s, peer, "GET /ipxe/{*file}", label, Some(shown));
    let mut resp = (status, body).into_response();
    if let Some(v) = content_range.and_then(|v| HeaderValue::from_str(&v).ok()) {
        resp.headers_mut().insert(header::CONTENT_RANGE, v);
    }
    let h = resp.headers_mut();
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_views_of_the_cached_copy() {
        let data: Arc<[u8]> = (0..=255u8).collect::<Vec<_>>().into();
        let (status, full, range) = part(data.clone(), None);
        assert_eq!((status, range), (StatusCode::OK, None));
        assert_eq!(full.as_ptr(), data.as_ptr());
        let (status, piece, range) = part(data.clone(), Some("bytes=10-19"));
        assert_eq!(status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(range.as_deref(), Some("bytes 10-19/256"));
        assert_eq!(piece.as_ptr(), data[10..].as_ptr());
        assert_eq!(&piece[..], &data[10..20]);
        // Both answers and the cache hold one allocation.
        assert_eq!(Arc::strong_count(&data), 3);
        let (status, _, range) = part(data, Some("bytes=300-"));
        assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(range.as_deref(), Some("bytes */256"));
    }

    #[test]
    fn range_forms() {
        use RangeRequest::*;
        assert_eq!(parse_range(None, 100), Full);
        assert_eq!(parse_range(Some("bytes=0-9"), 100), Part(0, 9));
        assert_eq!(parse_range(Some("bytes=90-"), 100), Part(90, 99));
        assert_eq!(parse_range(Some("bytes=-10"), 100), Part(90, 99));
        assert_eq!(parse_range(Some("bytes=50-500"), 100), Part(50, 99));
        assert_eq!(parse_range(Some("bytes=100-"), 100), Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=0-1,5-6"), 100), Full);
        assert_eq!(parse_range(Some("items=0-1"), 100), Full);
        assert_eq!(parse_range(Some("bytes=9-1"), 100), Full);
        assert_eq!(parse_range(Some("bytes=-0"), 100), Full);
        assert_eq!(parse_range(Some("bytes=0-0"), 0), Unsatisfiable);
    }
}
