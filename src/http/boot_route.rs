//! `GET /v1/boot/{mac}/{name}`: the request every booting machine makes, answered
//! before the router is asked. Axum's matching, path extraction and middleware were a
//! tenth of this route's CPU (docs/benchmarks.md), and the route has one shape: two
//! path segments after `/v1/boot/`, no body. Any other path goes to the router.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use tracing::debug;

use super::boot::{self, BootAnswer, BootContext};
use super::{boot_response, checked_chain, counted, serve, HttpState};
use crate::mac::MacAddr;

/// The route's pattern: its metrics label and its name in the timeline.
pub const ROUTE: &str = "/v1/boot/{mac}/{name}";

/// Where the route's two segments start.
const PREFIX: &str = "/v1/boot/";

/// The boot route of `state`, for [`serve::App`].
pub fn first_route(state: Arc<HttpState>) -> serve::FirstRoute {
    Arc::new(move |req, peer| {
        let method = match *req.method() {
            Method::GET => "GET",
            Method::HEAD => "HEAD",
            _ => return None,
        };
        // Parsed here, so the answer's future owns only what it needs.
        let (mac, name) = segments(req.uri().path())?;
        let asked = parsed(mac, name, req.uri().query(), state.settings.chain_retries);
        let s = state.clone();
        Some(Box::pin(async move {
            counted(&s, ROUTE, method, answer(&s, asked, peer)).await
        }))
    })
}

/// A segment that is not UTF-8 once percent-decoded.
#[derive(Debug, PartialEq, Eq)]
struct NotUtf8;

/// One path segment, percent-decoded.
type Segment<'a> = Result<Cow<'a, str>, NotUtf8>;

/// The MAC and name segments of `path`, percent-decoded; `None` when `path` is not
/// the route's (not two non-empty segments after [`PREFIX`]), as the router's
/// `/v1/boot/{mac}/{name}` would not match it.
fn segments(path: &str) -> Option<(Segment<'_>, Segment<'_>)> {
    let rest = path.strip_prefix(PREFIX)?;
    let (mac, name) = rest.split_once('/')?;
    if mac.is_empty() || name.is_empty() || name.contains('/') {
        return None;
    }
    Some((decoded(mac), decoded(name)))
}

/// `segment` percent-decoded (iPXE may escape a MAC's colons).
fn decoded(segment: &str) -> Segment<'_> {
    if !segment.contains('%') {
        return Ok(Cow::Borrowed(segment));
    }
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .map_err(|_| NotUtf8)
}

/// What a boot request asks for.
#[derive(Debug)]
struct Asked {
    mac: MacAddr,
    /// A checked boot name ([`boot::is_boot_name`]).
    name: String,
    query: boot::BootQuery,
}

/// The request's MAC and name, parsed and checked; `Err` (with the MAC segment's
/// length, for the log) when either is not valid.
fn parsed(
    mac: Segment<'_>,
    name: Segment<'_>,
    query: Option<&str>,
    retries: u32,
) -> Result<Asked, usize> {
    let len = mac.as_ref().map_or(0, |m| m.len());
    let mac = mac.ok().and_then(|m| m.parse::<MacAddr>().ok());
    let name = name.ok().filter(|n| boot::is_boot_name(n));
    match (mac, name) {
        (Some(mac), Some(name)) => Ok(Asked {
            mac,
            name: name.into_owned(),
            query: boot::boot_query(query, retries),
        }),
        _ => Err(len),
    }
}

/// The answer to one boot request.
async fn answer(s: &HttpState, asked: Result<Asked, usize>, peer: SocketAddr) -> Response {
    // Path segments are request data: parsed or checked, never echoed or logged raw.
    let Asked {
        mac,
        name,
        query: q,
    } = match asked {
        Ok(a) => a,
        Err(len) => {
            s.handles.http.count("bad_request");
            debug!(len, "boot request with an invalid MAC or name");
            return (StatusCode::BAD_REQUEST, "invalid MAC address or name\n").into_response();
        }
    };
    let res = s.resolver.resolve(&mac).await;
    let view = s.resolver.roster().current();
    let ctx = BootContext::new(&s.settings, &s.resolver, &view, &res, q.hop);
    debug!(%mac, owner = ?res.member, source = res.source, hop = q.hop, "boot request");
    let chain = boot::route(&mac, &name, &res, &ctx);
    let answer = match &chain {
        None => Ok(BootAnswer::NotFound { kind: "not_found" }),
        Some(chain) => {
            let mut again = String::with_capacity(28 + name.len());
            again.push_str(PREFIX);
            mac.push_hyphenated(&mut again);
            again.push('/');
            again.push_str(&name);
            checked_chain(s, chain, q.attempt, &again, mac.colon_text().as_str()).await
        }
    };
    let (status, why) = match &answer {
        Ok(BootAnswer::Script { kind, .. }) => ("200", *kind),
        Ok(BootAnswer::NotFound { kind }) => ("404", *kind),
        Err(_) => ("500", "unsafe value"),
    };
    // The name is checked (letters, digits, '.', '_', '-'); the URL is this server's own.
    let owner = res.member.as_deref().unwrap_or("none");
    let mut detail = String::with_capacity(96 + name.len() + owner.len());
    for part in [&name, ": owner=", owner, " via=", res.source] {
        detail.push_str(part);
    }
    if let Some(c) = &chain {
        detail.push_str(" chain=");
        detail.push_str(&c.url);
    }
    s.handles.timeline.record(
        mac,
        crate::timeline::Report {
            source: crate::timeline::Source::Http,
            what: "GET /v1/boot/{mac}/{name}",
            outcome: status,
            why: Some(why),
            ip: Some(peer.ip()),
            detail: Some(detail),
        },
    );
    boot_response(s, answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(path: &str) -> Option<(String, String)> {
        let (mac, name) = segments(path)?;
        Some((mac.unwrap().into_owned(), name.unwrap().into_owned()))
    }

    #[test]
    fn two_segments_after_the_prefix_are_the_route() {
        assert_eq!(
            plain("/v1/boot/52:54:00:00:00:01/boot.ipxe"),
            Some(("52:54:00:00:00:01".into(), "boot.ipxe".into()))
        );
        assert_eq!(
            plain("/v1/boot/52%3A54%3a00:00:00:01/boot.ipxe"),
            Some(("52:54:00:00:00:01".into(), "boot.ipxe".into()))
        );
    }

    #[test]
    fn other_shapes_are_left_to_the_router() {
        for path in [
            "/v1/boot/fallback.ipxe",
            "/v1/boot/",
            "/v1/boot//boot.ipxe",
            "/v1/boot/52:54:00:00:00:01/",
            "/v1/boot/52:54:00:00:00:01/a/b",
            "/v1/boots/52:54:00:00:00:01/boot.ipxe",
            "/boot.ipxe",
        ] {
            assert!(segments(path).is_none(), "{path}");
        }
    }

    #[test]
    fn a_segment_that_is_not_utf8_once_decoded_is_refused() {
        let (mac, name) = segments("/v1/boot/%ff%fe/boot.ipxe").unwrap();
        assert_eq!(mac, Err(NotUtf8));
        assert!(name.is_ok());
    }
}
