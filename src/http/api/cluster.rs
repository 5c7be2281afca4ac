//! `/v1/owners`, `/v1/members`, `/v1/stats`: who owns a machine, the members with their
//! slices and liveness, and pool usage.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, State};
use axum::Json;
use serde_json::json;

use super::{parse_mac, ApiResult};
use crate::config::Config;
use crate::http::HttpState;
use crate::owner::MemberList;

pub(super) async fn owner(State(s): State<Arc<HttpState>>, Path(raw): Path<String>) -> ApiResult {
    let mac = parse_mac(&raw)?;
    let res = s.resolver.resolve(&mac).await;
    let live = s.resolver.live().alive();
    let responsible = crate::dhcp::responsibility::responsible(res.member.as_deref(), &live, &mac);
    let ironic = s.resolver.ironic().map(|i| {
        json!({
            "stale": i.is_stale(),
            "age_secs": i.age(Instant::now()).map(|d| d.as_secs()),
        })
    });
    Ok(Json(json!({
        "mac": mac.to_string(),
        "owner": res.member,
        "source": res.source,
        "owner_alive": res.member.as_deref().map(|m| s.resolver.live().is_alive(m)),
        "dhcp_responsible": responsible,
        "ironic": ironic,
    })))
}

/// A member's share of every range (`owner::shares`).
fn shares(config: &Config, list: &MemberList, name: &str) -> Vec<serde_json::Value> {
    config
        .subnets
        .iter()
        .flat_map(|s| {
            s.ranges.iter().map(move |(a, b)| {
                let (addresses, runs) = list.share_runs(*a, *b, name);
                json!({
                    "subnet": s.network.to_string(),
                    "range": format!("{a} - {b}"),
                    "addresses": addresses,
                    "runs": runs,
                })
            })
        })
        .collect()
}

pub(super) async fn members(State(s): State<Arc<HttpState>>) -> ApiResult {
    let config = &s.config;
    let me = s.resolver.self_name();
    let health = s.resolver.live().snapshot();
    let view = s.resolver.roster().current();
    let status = s.resolver.roster().status_now();
    let members: Vec<_> = view
        .members
        .iter()
        .map(|m| {
            let h = health.iter().find(|(n, _)| *n == m.name).map(|(_, h)| h);
            json!({
                "name": m.name,
                "self": Some(m.name.as_str()) == me,
                "alive": s.resolver.live().is_alive(&m.name),
                "failed_probes": h.map(|h| h.failures),
                "rejected_probes": h.map(|h| h.rejected),
                "http_url": m.http_url,
                "conductor": m.conductor,
                "shares": shares(config, &view.list, &m.name),
            })
        })
        .collect();
    // With a shared lease store: whether it answers, and every member's heartbeat row
    // as the database has it.
    let shared = match &s.shared {
        Some(shared) => Some(json!({
            "up": shared.is_up(),
            "heartbeats": shared.members().await.ok(),
        })),
        None => None,
    };
    Ok(Json(json!({
        "self": me,
        "shared_store": shared,
        "source": status.source,
        "generation": view.generation,
        "stale_since": status.stale_since,
        "last_ok": status.last_ok,
        "last_error": status.last_error,
        "skipped_conductors": status.skipped,
        "fingerprint": view.fingerprint,
        "split": crate::owner::shares::Split::CURRENT.as_str(),
        "members": members,
    })))
}

pub(super) async fn stats(State(s): State<Arc<HttpState>>) -> ApiResult {
    let pools = s
        .handles
        .dhcp
        .pools
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default();
    let subnets: Vec<_> = pools
        .iter()
        .map(|p| {
            json!({
                "subnet": p.network.to_string(),
                "free_in_share": p.free,
                "in_use": p.in_use,
            })
        })
        .collect();
    Ok(Json(json!({
        "leases": s.handles.dhcp.leases.get(),
        "transition_until": s.handles.dhcp.transition_until.get(),
        "subnets": subnets,
    })))
}
