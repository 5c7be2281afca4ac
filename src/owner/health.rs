//! Which members are alive: every member probes the others' `/healthz`, and the live set
//! feeds the hash-bucket fallback (and, later, DHCP takeover). No member needs another
//! to answer a packet; a member that cannot be probed is only taken out of the hash
//! ring, so its machines move to the survivors.
//!
//! A member is dead after `dead_after` failed probes in a row and alive again after one
//! good probe. Every member starts alive: a member restarting does not reshuffle the
//! ring for the first few seconds while it learns who is up.

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::{HealthSettings, Member};

/// What is known of one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberHealth {
    /// Counted in the live set.
    pub alive: bool,
    /// Failed probes since the last good one.
    pub failures: u32,
    /// When the last good probe answered.
    pub last_ok: Option<Instant>,
}

impl MemberHealth {
    fn new() -> Self {
        Self {
            alive: true,
            failures: 0,
            last_ok: None,
        }
    }

    /// Applies one probe result; returns whether `alive` changed.
    pub fn observe(&mut self, ok: bool, now: Instant, dead_after: u32) -> bool {
        let before = self.alive;
        if ok {
            self.failures = 0;
            self.last_ok = Some(now);
            self.alive = true;
        } else {
            self.failures = self.failures.saturating_add(1);
            if self.failures >= dead_after {
                self.alive = false;
            }
        }
        before != self.alive
    }
}

/// The members and their health. This member is always alive.
#[derive(Debug)]
pub struct LiveSet {
    self_name: Option<String>,
    health: RwLock<BTreeMap<String, MemberHealth>>,
}

impl LiveSet {
    /// Every member alive.
    pub fn new(members: &[Member], self_name: Option<&str>) -> Self {
        Self {
            self_name: self_name.map(str::to_string),
            health: RwLock::new(
                members
                    .iter()
                    .map(|m| (m.name.clone(), MemberHealth::new()))
                    .collect(),
            ),
        }
    }

    /// Names of the live members, sorted (the hash ring's order).
    pub fn alive(&self) -> Vec<String> {
        self.read()
            .iter()
            .filter(|(n, h)| h.alive || Some(n.as_str()) == self.self_name.as_deref())
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Whether `name` is alive (unknown names are not).
    pub fn is_alive(&self, name: &str) -> bool {
        Some(name) == self.self_name.as_deref() || self.read().get(name).is_some_and(|h| h.alive)
    }

    /// Every member's health, sorted by name.
    pub fn snapshot(&self) -> Vec<(String, MemberHealth)> {
        self.read().iter().map(|(n, h)| (n.clone(), *h)).collect()
    }

    /// Applies one probe result; returns whether the member's liveness changed.
    pub fn observe(&self, name: &str, ok: bool, now: Instant, dead_after: u32) -> bool {
        let mut map = self.health.write().unwrap_or_else(|p| p.into_inner());
        map.get_mut(name)
            .is_some_and(|h| h.observe(ok, now, dead_after))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, MemberHealth>> {
        self.health.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `shardboot_member_up{member="…"}`.
    pub fn render_prometheus(&self, out: &mut String) {
        crate::metrics::header(
            out,
            "shardboot_member_up",
            "gauge",
            "1 while a member answers its health probe (this member: always 1)",
        );
        for (name, _) in self.snapshot() {
            let up = u64::from(self.is_alive(&name));
            crate::metrics::sample(out, "shardboot_member_up", "member", &name, up);
        }
    }
}

/// The header a member's `/healthz` carries: the fingerprint of its member list.
pub const MEMBERS_HEADER: &str = "x-shardboot-members";

/// The header a member in a membership transition carries: until when (Unix seconds)
/// it hands out fresh addresses only where its old and new slices agree.
pub const TRANSITION_HEADER: &str = "x-shardboot-transition-until";

/// A member whose list differs from ours.
#[derive(Debug, thiserror::Error)]
#[error(
    "member {member} at {url} has a different [[member]] list (fingerprint {theirs}, ours {ours}); \
     every member must list the same members, or their address slices overlap"
)]
pub struct MemberListMismatch {
    /// The member's name.
    pub member: String,
    /// Its URL.
    pub url: String,
    /// Its fingerprint.
    pub theirs: String,
    /// Ours.
    pub ours: String,
}

fn probe_client(timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
}

/// What one probe learned.
#[derive(Debug, Default)]
struct Probe {
    ok: bool,
    fingerprint: Option<String>,
    transition_until: Option<u64>,
}

async fn probe(client: &reqwest::Client, url: &str) -> Probe {
    match client.get(url).send().await {
        Ok(r) if r.status().is_success() => {
            let header = |name: &str| {
                r.headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            Probe {
                ok: true,
                fingerprint: header(MEMBERS_HEADER),
                transition_until: header(TRANSITION_HEADER).and_then(|v| v.parse().ok()),
            }
        }
        _ => Probe::default(),
    }
}

/// Before DHCP starts: asks every other member that answers for its member list and
/// refuses to start when one differs. Members that do not answer are not waited for.
/// Returns the latest membership transition a peer reported (0: none), which a member
/// starting on an empty store must respect too.
pub async fn check_member_lists(
    members: &[Member],
    self_name: Option<&str>,
    timeout: Duration,
) -> Result<u64, MemberListMismatch> {
    let ours = super::MemberList::of(members).fingerprint();
    let Ok(client) = probe_client(timeout) else {
        return Ok(0);
    };
    let mut round = tokio::task::JoinSet::new();
    for m in members
        .iter()
        .filter(|m| Some(m.name.as_str()) != self_name)
    {
        let (client, m) = (client.clone(), m.clone());
        round.spawn(async move {
            let p = probe(&client, &format!("{}/healthz", m.http_url)).await;
            (m, p)
        });
    }
    let mut until = 0;
    while let Some(Ok((m, p))) = round.join_next().await {
        until = until.max(p.transition_until.unwrap_or(0));
        if let Some(theirs) = p.fingerprint.filter(|f| *f != ours) {
            return Err(MemberListMismatch {
                member: m.name,
                url: m.http_url,
                theirs,
                ours,
            });
        }
    }
    Ok(until)
}

/// Probes every other member's `/healthz` each `interval` until `shutdown`.
pub async fn run_probes(
    members: Vec<Member>,
    live: std::sync::Arc<LiveSet>,
    settings: HealthSettings,
    shutdown: CancellationToken,
) {
    let ours = super::MemberList::of(&members).fingerprint();
    let others: Vec<Member> = members
        .into_iter()
        .filter(|m| Some(m.name.as_str()) != live.self_name.as_deref())
        .collect();
    if others.is_empty() {
        return;
    }
    let client = match probe_client(settings.timeout) {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "member health probes disabled: HTTP client");
            return;
        }
    };
    let mut tick = tokio::time::interval(settings.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        // One round: every member probed concurrently, so a dead one (which takes the
        // whole timeout) does not delay the others.
        let mut round = tokio::task::JoinSet::new();
        for m in &others {
            let client = client.clone();
            let name = m.name.clone();
            let url = format!("{}/healthz", m.http_url);
            round.spawn(async move {
                let p = probe(&client, &url).await;
                (name, p.ok, p.fingerprint)
            });
        }
        while let Some(Ok((name, ok, fp))) = round.join_next().await {
            if let Some(theirs) = fp.filter(|f| *f != ours) {
                // A member restarted with another list: its slices overlap ours.
                warn!(member = %name, theirs, ours, "member lists differ; address slices may overlap");
            }
            if live.observe(&name, ok, Instant::now(), settings.dead_after) {
                if ok {
                    info!(member = %name, "member is alive again");
                } else {
                    warn!(member = %name, failures = settings.dead_after, "member is dead; removed from the hash ring");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str) -> Member {
        Member {
            name: name.into(),
            http_url: format!("http://{name}:8080"),
            conductor: None,
            conductor_url: None,
        }
    }

    #[test]
    fn dead_after_n_failures_alive_after_one_success() {
        let t = Instant::now();
        let live = LiveSet::new(&[member("a"), member("b"), member("c")], Some("a"));
        assert_eq!(live.alive(), ["a", "b", "c"]);
        assert!(!live.observe("b", false, t, 3));
        assert!(!live.observe("b", false, t, 3));
        assert!(live.alive().contains(&"b".to_string()));
        assert!(live.observe("b", false, t, 3));
        assert_eq!(live.alive(), ["a", "c"]);
        assert!(!live.is_alive("b"));
        assert!(live.observe("b", true, t, 3));
        assert_eq!(live.alive(), ["a", "b", "c"]);
    }

    #[test]
    fn this_member_is_always_alive() {
        let t = Instant::now();
        let live = LiveSet::new(&[member("a"), member("b")], Some("a"));
        for _ in 0..5 {
            live.observe("a", false, t, 1);
        }
        assert_eq!(live.alive(), ["a", "b"]);
        assert!(live.is_alive("a"));
        assert!(!live.is_alive("zzz"));
    }
}
