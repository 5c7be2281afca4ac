//! `/v1/hosts`: the operator's allow/deny per MAC over what the hosts directory says.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::{mac_and_body, parse_mac, ApiError, ApiResult};
use crate::dhcp::host_policy::{HostPolicy, PolicySource};
use crate::http::HttpState;
use crate::mac::MacAddr;

fn policy_name(p: Option<HostPolicy>) -> &'static str {
    p.map_or("default", HostPolicy::as_str)
}

fn policy_json(mac: &MacAddr, p: Option<(HostPolicy, PolicySource)>) -> serde_json::Value {
    json!({
        "mac": mac.to_string(),
        "policy": policy_name(p.map(|(p, _)| p)),
        "source": p.map(|(_, s)| s.as_str()),
    })
}

/// The operator's entries, then the hosts directory's (`dhcp.hostsdir`) with its
/// wildcard entry for unknown MACs.
pub(super) async fn list(State(s): State<Arc<HttpState>>) -> ApiResult {
    let hosts: Vec<_> = s
        .policies
        .list()
        .into_iter()
        .map(|(m, p)| policy_json(&m, Some((p, PolicySource::Api))))
        .collect();
    let (dir, unknown) = s.policies.hostsdir();
    let hostsdir: Vec<_> = dir
        .into_iter()
        .map(|(m, p)| policy_json(&m, Some((p, PolicySource::HostsDir))))
        .collect();
    Ok(Json(json!({
        "hosts": hosts,
        "hostsdir": hostsdir,
        "hostsdir_unknown": unknown.map(|p| policy_name(Some(p))),
    })))
}

pub(super) async fn get(State(s): State<Arc<HttpState>>, Path(raw): Path<String>) -> ApiResult {
    let mac = parse_mac(&raw)?;
    Ok(Json(policy_json(&mac, s.policies.lookup(&mac))))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostBody {
    policy: String,
}

/// Makes the change durable, then answers with the policy now in effect.
async fn set_policy(s: &HttpState, mac: MacAddr, policy: Option<HostPolicy>) -> ApiResult {
    s.policies
        .set(&s.committer, mac, policy)
        .await
        .map_err(|e| ApiError::unavailable("could not store the policy").caused_by(e))?;
    tracing::info!(%mac, policy = ?policy, "host policy set");
    Ok(Json(policy_json(&mac, s.policies.lookup(&mac))))
}

pub(super) async fn put(
    State(s): State<Arc<HttpState>>,
    Path(raw): Path<String>,
    body: Bytes,
) -> ApiResult {
    let (mac, b) = mac_and_body::<HostBody>(
        &raw,
        &body,
        "body must be {\"policy\": \"allow\" | \"deny\" | \"default\"}",
    )?;
    let policy = match b.policy.as_str() {
        "default" => None,
        other => Some(
            HostPolicy::parse(other.as_bytes())
                .ok_or_else(|| ApiError::bad_request("policy must be allow, deny or default"))?,
        ),
    };
    set_policy(&s, mac, policy).await
}

pub(super) async fn delete(State(s): State<Arc<HttpState>>, Path(raw): Path<String>) -> ApiResult {
    let mac = parse_mac(&raw)?;
    set_policy(&s, mac, None).await
}
