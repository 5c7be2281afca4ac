//! `/v1/leases6`: pages of DHCPv6 lease records in address order (optionally one
//! client's, by DUID), and one record by address. Read-only: nothing forgets a v6
//! lease yet (that goes through the DHCPv6 engine once it runs).

use std::net::Ipv6Addr;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::{read_store, ApiError, ApiResult, MAX_PAGE};
use crate::http::HttpState;
use crate::store::Lease6View;

/// Longest DUID a filter may name, in octets: a DHCPv6 datagram's worth (a client's
/// DUID is kept whole, whatever its length).
const MAX_DUID: usize = 65_535;

/// `GET /v1/leases6` filter and paging.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Lease6Params {
    /// Only this client's records: the DUID in hex, octets optionally separated by `:`.
    duid: Option<String>,
    limit: Option<usize>,
    /// The last address of the previous page.
    cursor: Option<String>,
}

/// A DUID as the operator writes it: hex digits, pairs optionally separated by colons
/// (`00:03:00:01:…`, as dnsmasq and Kea print it) or not (as this API prints it).
fn parse_duid(raw: &str) -> Option<Vec<u8>> {
    let digits: Vec<u8> = if raw.contains(':') {
        let mut out = Vec::new();
        for pair in raw.split(':') {
            if pair.len() != 2 {
                return None;
            }
            out.extend_from_slice(pair.as_bytes());
        }
        out
    } else {
        raw.as_bytes().to_vec()
    };
    if digits.is_empty() || !digits.len().is_multiple_of(2) || digits.len() / 2 > MAX_DUID {
        return None;
    }
    digits
        .chunks(2)
        .map(|p| {
            let hex = std::str::from_utf8(p).ok()?;
            // from_str_radix takes a sign: only the digits are a DUID's.
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            u8::from_str_radix(hex, 16).ok()
        })
        .collect()
}

pub(super) async fn list(
    State(s): State<Arc<HttpState>>,
    params: Result<Query<Lease6Params>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    let Ok(Query(p)) = params else {
        return Err(ApiError::bad_request(
            "unknown or malformed query parameter",
        ));
    };
    let after = p
        .cursor
        .as_deref()
        .map(str::parse::<Ipv6Addr>)
        .transpose()
        .map_err(|_| ApiError::bad_request("invalid cursor"))?;
    let duid = p
        .duid
        .as_deref()
        .map(|d| parse_duid(d).ok_or_else(|| ApiError::bad_request("invalid duid (hex octets)")))
        .transpose()?;
    let limit = p.limit.unwrap_or(100);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request("limit must be between 1 and 1000"));
    }
    // One more than the page, to know whether another page follows.
    let mut page = read_store(&s, move |store| match duid {
        // One client's records come whole from the DUID index (a handful: one per IA);
        // the cursor and the page apply to them as to the whole table.
        Some(duid) => Ok(store
            .leases6_of(&duid)?
            .into_iter()
            .filter(|l| after.is_none_or(|a| l.ip > a))
            .take(limit + 1)
            .collect()),
        None => store.leases6(after, limit + 1),
    })
    .await?;
    let next = (page.len() > limit).then(|| {
        page.truncate(limit);
        page.last().map(|l| l.ip.to_string())
    });
    let views: Vec<Lease6View<'_>> = page.iter().map(Lease6View::from).collect();
    Ok(Json(
        json!({ "leases": views, "next_cursor": next.flatten() }),
    ))
}

pub(super) async fn one(State(s): State<Arc<HttpState>>, Path(key): Path<String>) -> ApiResult {
    let Ok(ip) = key.parse::<Ipv6Addr>() else {
        return Err(ApiError::bad_request("expected an IPv6 address"));
    };
    match read_store(&s, move |store| store.lease6(ip)).await? {
        Some(l) => Ok(Json(json!(Lease6View::from(&l)))),
        None => Err(ApiError::not_found("no lease")),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duid;

    #[test]
    fn duids_parse_with_or_without_colons_and_nothing_else_does() {
        assert_eq!(
            parse_duid("000300015254"),
            Some(vec![0, 3, 0, 1, 0x52, 0x54])
        );
        assert_eq!(parse_duid("00:03:00:01:52:54"), parse_duid("000300015254"));
        assert_eq!(parse_duid("AbCd"), Some(vec![0xab, 0xcd]));
        for bad in [
            "", "0", "abc", "zz", "+1", "0:03", "00::03", "00:03:", "é0", "00 03", "-1",
        ] {
            assert_eq!(parse_duid(bad), None, "{bad:?}");
        }
        assert_eq!(
            parse_duid(&"ab".repeat(65_535)).map(|d| d.len()),
            Some(65_535)
        );
        assert_eq!(parse_duid(&"ab".repeat(65_536)), None);
    }
}
