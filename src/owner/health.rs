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

use super::peer_auth::{self, HealthClaim, MemberSecret};
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
    /// Answers whose proof did not verify (forged, or another secret), since start.
    pub rejected: u64,
}

impl MemberHealth {
    fn new() -> Self {
        Self {
            alive: true,
            failures: 0,
            last_ok: None,
            rejected: 0,
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
    /// This member's name, if it is one of several.
    pub fn self_name(&self) -> Option<&str> {
        self.self_name.as_deref()
    }

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

    /// Calls `f` with the member responsible for `mac`, as
    /// [`super::responsible`] names it over [`Self::alive`] (the
    /// resolver's `owner` if alive, else the RFC 3074 bucket over the live members in
    /// name order), without copying the live set: the DHCP path asks for every packet.
    pub fn with_responsible<R>(
        &self,
        owner: Option<&str>,
        mac: &crate::mac::MacAddr,
        f: impl FnOnce(Option<&str>) -> R,
    ) -> R {
        let map = self.read();
        let me = self.self_name.as_deref();
        let alive = |(n, h): &(&String, &MemberHealth)| h.alive || Some(n.as_str()) == me;
        if let Some(o) = owner {
            if map.get_key_value(o).is_some_and(|e| alive(&e)) {
                return f(Some(o));
            }
        }
        // A map's keys are sorted and distinct, as `responsible_member` sorts and dedups.
        let live = map.iter().filter(alive).count();
        if live == 0 {
            return f(None);
        }
        let bucket = usize::from(super::rfc3074_hash(&mac.0)) % live;
        f(map
            .iter()
            .filter(alive)
            .nth(bucket)
            .map(|(n, _)| n.as_str()))
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

    /// Follows a new member list: new members start alive, departed ones are dropped.
    pub fn sync(&self, names: &[String]) {
        let mut map = self.health.write().unwrap_or_else(|p| p.into_inner());
        map.retain(|n, _| names.contains(n));
        for n in names {
            map.entry(n.clone()).or_insert_with(MemberHealth::new);
        }
    }

    /// Counts an answer from `name` whose proof did not verify.
    pub fn reject(&self, name: &str) {
        let mut map = self.health.write().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = map.get_mut(name) {
            h.rejected += 1;
        }
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
        let members = self.snapshot();
        for (name, _) in &members {
            let up = u64::from(self.is_alive(name));
            crate::metrics::sample(out, "shardboot_member_up", "member", name, up);
        }
        crate::metrics::header(
            out,
            "shardboot_member_probe_rejected_total",
            "counter",
            "health answers whose proof did not verify under the member secret (forged, or another secret); counted as failed probes",
        );
        for (name, h) in &members {
            let name = name.as_str();
            crate::metrics::sample(
                out,
                "shardboot_member_probe_rejected_total",
                "member",
                name,
                h.rejected,
            );
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
    // Members' URLs are https:// with the site's certificates under boot.ipxe_tls.
    crate::site_ca::client_builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
}

/// What one probe learned.
#[derive(Debug, Default)]
struct Probe {
    /// A 2xx answer whose claims verified (or, without a secret, any 2xx answer).
    ok: bool,
    /// A 2xx answer whose proof did not verify: its claims are ignored.
    rejected: bool,
    fingerprint: Option<String>,
    transition_until: Option<u64>,
}

/// Probes `member` with a fresh challenge and checks the answer's proof when a secret
/// is configured (`peer_auth`): only a verified answer is alive, and only its claims
/// are believed.
async fn probe(client: &reqwest::Client, member: &Member, secret: Option<&MemberSecret>) -> Probe {
    let Some(challenge) = peer_auth::new_challenge() else {
        return Probe::default();
    };
    let url = format!("{}/healthz", member.http_url);
    let mut request = client
        .get(url)
        .header(peer_auth::CHALLENGE_HEADER, &challenge);
    if let Some(secret) = secret {
        request = request.header(
            peer_auth::PROBER_PROOF_HEADER,
            secret.prove_probe(&challenge),
        );
    }
    let r = match request.send().await {
        Ok(r) if r.status().is_success() => r,
        _ => return Probe::default(),
    };
    let header = |name: &str| {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let fingerprint = header(MEMBERS_HEADER);
    let transition_until = header(TRANSITION_HEADER).and_then(|v| v.parse().ok());
    if let Some(secret) = secret {
        let claim = HealthClaim {
            challenge: &challenge,
            member: &member.name,
            fingerprint: fingerprint.as_deref().unwrap_or(""),
            transition_until: transition_until.unwrap_or(0),
        };
        let named = header(peer_auth::MEMBER_HEADER).as_deref() == Some(member.name.as_str());
        let proven = header(peer_auth::PROOF_HEADER).is_some_and(|p| secret.verify(&claim, &p));
        if !(named && proven) {
            return Probe {
                rejected: true,
                ..Probe::default()
            };
        }
    }
    Probe {
        ok: true,
        rejected: false,
        fingerprint,
        transition_until,
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
    secret: Option<&std::sync::Arc<MemberSecret>>,
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
        let (client, m, secret) = (client.clone(), m.clone(), secret.cloned());
        round.spawn(async move {
            let p = probe(&client, &m, secret.as_deref()).await;
            (m, p)
        });
    }
    let mut until = 0;
    while let Some(Ok((m, p))) = round.join_next().await {
        if p.rejected {
            warn!(member = %m.name, url = %m.http_url, "member's health answer has no valid proof under owner.member_secret_file; its claims are ignored");
        }
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

/// Probes every other member's `/healthz` each `interval` until `shutdown`, following
/// the roster's member list as it changes.
pub async fn run_probes(
    roster: std::sync::Arc<super::roster::Roster>,
    live: std::sync::Arc<LiveSet>,
    settings: HealthSettings,
    secret: Option<std::sync::Arc<MemberSecret>>,
    shutdown: CancellationToken,
) {
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
        let view = roster.current();
        live.sync(view.list.names());
        let ours = view.fingerprint.clone();
        let others: Vec<Member> = view
            .members
            .iter()
            .filter(|m| Some(m.name.as_str()) != live.self_name.as_deref())
            .cloned()
            .collect();
        // One round: every member probed concurrently, so a dead one (which takes the
        // whole timeout) does not delay the others.
        let mut round = tokio::task::JoinSet::new();
        for m in &others {
            let (client, m, secret) = (client.clone(), m.clone(), secret.clone());
            round.spawn(async move {
                let p = probe(&client, &m, secret.as_deref()).await;
                (m.name, p)
            });
        }
        while let Some(Ok((name, p))) = round.join_next().await {
            let (ok, fp) = (p.ok, p.fingerprint);
            if p.rejected {
                // Logged when the member turns dead below, not once per probe.
                live.reject(&name);
            }
            if let Some(theirs) = fp.filter(|f| *f != ours) {
                // A member restarted with another list: its slices overlap ours.
                warn!(member = %name, theirs, ours, "member lists differ; address slices may overlap");
            }
            if live.observe(&name, ok, Instant::now(), settings.dead_after) {
                if ok {
                    info!(member = %name, "member is alive again");
                } else {
                    let why = if p.rejected {
                        "its answers have no valid proof under owner.member_secret_file"
                    } else {
                        "it does not answer"
                    };
                    warn!(member = %name, failures = settings.dead_after, why, "member is dead; removed from the hash ring");
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

    proptest::proptest! {
        /// The DHCP path's non-copying answer is the one `responsible` gives over
        /// `alive()`, for any health, owner and MAC.
        #[test]
        fn with_responsible_names_whom_responsible_names(
            dead in proptest::collection::vec(proptest::bool::ANY, 5),
            me in 0..7usize,
            owner in proptest::option::of(0..7usize),
            mac in proptest::prelude::any::<[u8; 6]>(),
        ) {
            let names = ["e", "a", "d", "b", "c", "x", "y"];
            let members: Vec<Member> = names[..5].iter().map(|n| member(n)).collect();
            let live = LiveSet::new(&members, Some(names[me]));
            let t = Instant::now();
            for (n, d) in names.iter().zip(&dead) {
                live.observe(n, !d, t, 1);
            }
            let mac = crate::mac::MacAddr(mac);
            let owner = owner.map(|o| names[o]);
            let alive = live.alive();
            let want = crate::owner::responsible(owner, &alive, &mac);
            proptest::prop_assert_eq!(live.with_responsible(owner, &mac, |r| r.map(str::to_string)), want.map(str::to_string));
        }
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
