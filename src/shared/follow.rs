//! Following the shared store: other members' binding changes read into this member's
//! engines (so a dead member's clients keep their addresses here, and no fresh address
//! is offered over another member's binding), this member's heartbeat row (which also
//! brings a member back out of degraded mode with no client asking), the other
//! members' heartbeat rows (which members are alive: members talk through the
//! database, as Ironic's conductors do, never to each other), and tombstones purged.
//!
//! The cache is only a cache: a binding it lacks still cannot be given twice, because
//! the database refuses the write. What following buys is availability: a renewal or a
//! rebind answered from the cache with the address the client holds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::bindings::{Decided, KeyValue};
use super::sql::Family;
use super::{SharedStore, TOMBSTONE_MS};
use crate::dhcp::control::DhcpHandle;
use crate::dhcp6::control::Dhcp6Handle;

/// How often tombstones and long-ended bindings are purged.
const PURGE_EVERY: Duration = Duration::from_secs(60);

/// Where following sends what it reads.
#[derive(Debug, Clone, Default)]
pub struct Followers {
    /// The DHCPv4 engine.
    pub dhcp: Option<DhcpHandle>,
    /// The DHCPv6 engine.
    pub dhcp6: Option<Dhcp6Handle>,
    /// Which members are alive, from their heartbeat rows; `None`: a single instance.
    pub liveness: Option<Liveness>,
}

/// Members' liveness from their heartbeat rows: a member of the list in force whose
/// row the database last heard from longer than `dead_after` ago (by the database's
/// clock, so no member's clock matters) is dead; one without a row is dead once this
/// member has run that long (every member starts alive, so a restart does not
/// reshuffle the hash ring while rows are first read).
#[derive(Debug, Clone)]
pub struct Liveness {
    /// The member list in force (its fingerprint goes into this member's row).
    pub roster: Arc<crate::owner::roster::Roster>,
    /// Where the verdicts go (the hash ring, DHCP takeover, `/v1/members`).
    pub live: Arc<crate::owner::LiveSet>,
    /// How long a silent member stays alive.
    pub dead_after: Duration,
}

impl Liveness {
    /// `store.heartbeat_secs` × `health.dead_after`: that many heartbeats missed.
    pub fn new(
        roster: Arc<crate::owner::roster::Roster>,
        live: Arc<crate::owner::LiveSet>,
        heartbeat: Duration,
        dead_after: u32,
    ) -> Self {
        Self {
            roster,
            live,
            dead_after: heartbeat * dead_after.max(1),
        }
    }

    /// Takes one reading of the heartbeat rows, `running` after this member started.
    pub fn observe(&self, rows: &[super::MemberRow], running: Duration) {
        let view = self.roster.current();
        self.live.sync(view.list.names());
        let limit = i64::try_from(self.dead_after.as_millis()).unwrap_or(i64::MAX);
        for m in &view.members {
            if Some(m.name.as_str()) == self.live.self_name() {
                continue;
            }
            let row = rows.iter().find(|r| r.name == m.name);
            let alive = match row {
                Some(r) => r.heartbeat_age_ms <= limit,
                None => running < self.dead_after,
            };
            if let Some(r) = row.filter(|r| alive && !r.fingerprint.is_empty()) {
                if r.fingerprint != view.fingerprint {
                    // A member restarted with another list: its shares overlap ours
                    // (the database still refuses any second binding).
                    warn!(member = %m.name, theirs = %r.fingerprint, ours = %view.fingerprint, "member lists differ; address shares may overlap");
                }
            }
            if self
                .live
                .observe(&m.name, alive, std::time::Instant::now(), 1)
            {
                if alive {
                    info!(member = %m.name, "member is alive again (its heartbeat row is fresh)");
                } else {
                    warn!(member = %m.name, silent_ms = row.map(|r| r.heartbeat_age_ms), "member is dead: its heartbeat row is stale; removed from the hash ring");
                }
            }
        }
    }
}

/// Reads other members' changes every `poll` from `since_ms` on (the newest stamp the
/// start-up load read), writes the heartbeat every `heartbeat`, until `shutdown`.
pub async fn follow(
    shared: Arc<SharedStore>,
    to: Followers,
    since_ms: i64,
    poll: Duration,
    heartbeat: Duration,
    shutdown: CancellationToken,
) {
    // A transaction stamped before another commits may commit after it: re-read a
    // window behind the newest stamp seen, longer than any transaction may run.
    let overlap_ms = (shared.timeout.as_millis() as i64 * 2).max(5_000);
    let mut since = since_ms;
    let mut seen: HashMap<KeyValue, i64> = HashMap::new();
    let mut poll_tick = tokio::time::interval(poll);
    poll_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The heartbeat on its own task: a poll waiting on an unreachable database must
    // not delay noticing it, nor noticing it back.
    tokio::spawn(beat(
        shared.clone(),
        heartbeat,
        to.liveness.clone(),
        shutdown.clone(),
    ));
    let mut failing = false;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => {
                shared.sign_off().await;
                return;
            }
            _ = poll_tick.tick() => {
                match shared.changed_since(since - overlap_ms, &shared.me, crate::clock::unix_now()).await {
                    Ok(rows) => {
                        failing = false;
                        let mut v4 = Vec::new();
                        let mut v6 = Vec::new();
                        for row in rows {
                            since = since.max(row.stamp_ms);
                            let (key, _) = super::bindings::covered_by_decided(&row.change);
                            if seen.get(&key).is_some_and(|g| *g >= row.gen) {
                                continue;
                            }
                            seen.insert(key, row.gen);
                            shared.cover(&row.change);
                            match row.change {
                                Decided::V4(e) => v4.push(e),
                                Decided::V6(e) => v6.push(e),
                            }
                        }
                        shared.metrics.followed.add((v4.len() + v6.len()) as u64);
                        deliver(&to, v4, v6).await;
                    }
                    Err(e) => {
                        if !failing {
                            warn!(error = %e, "other members' bindings not read from the shared lease store");
                            failing = true;
                        }
                    }
                }
            }
        }
    }
}

/// Writes the heartbeat every `every`, reads the other members' (with `liveness`),
/// and purges what ended long ago, until `shutdown`.
async fn beat(
    shared: Arc<SharedStore>,
    every: Duration,
    liveness: Option<Liveness>,
    shutdown: CancellationToken,
) {
    let started = std::time::Instant::now();
    let mut beat_tick = tokio::time::interval(every);
    let mut purge_tick = tokio::time::interval(PURGE_EVERY);
    for t in [&mut beat_tick, &mut purge_tick] {
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    }
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = beat_tick.tick() => {
                if let Some(l) = &liveness {
                    shared.set_fingerprint(&l.roster.current().fingerprint);
                }
                shared.heartbeat().await;
                // Unreachable: nobody is judged (this member cannot tell who is up).
                if let (Some(l), true) = (&liveness, shared.is_up()) {
                    if let Ok(rows) = shared.members().await {
                        l.observe(&rows, started.elapsed());
                    }
                }
            }
            _ = purge_tick.tick() => shared.purge().await,
        }
    }
}

/// Hands the changes to the engines; each answers once what it took is durable in
/// this member's cache.
async fn deliver(
    to: &Followers,
    v4: Vec<crate::store::LeaseEffect>,
    v6: Vec<crate::store::Lease6Effect>,
) {
    if let (Some(d), false) = (&to.dhcp, v4.is_empty()) {
        if let Err(e) = d.decided(v4).await {
            debug!(error = %e, "DHCPv4 engine did not take the shared store's changes");
        }
    }
    if let (Some(d), false) = (&to.dhcp6, v6.is_empty()) {
        if let Err(e) = d.decided(v6).await {
            debug!(error = %e, "DHCPv6 engine did not take the shared store's changes");
        }
    }
}

impl SharedStore {
    /// Writes this member's heartbeat; its result says whether the database answers
    /// (the way back out of degraded mode when no write is tried).
    pub async fn heartbeat(&self) {
        if self.signed_off.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let q = self.sql.heartbeat();
        let r = tokio::time::timeout(
            self.timeout,
            sqlx::query(&q)
                .bind(self.fingerprint())
                .bind(self.me.clone())
                .execute(&self.pool),
        )
        .await;
        match r {
            Ok(Ok(done)) if done.rows_affected() == 0 => {
                // The row is gone (purged by hand, a new database): register again.
                if let Err(e) = self.register().await {
                    self.set_up(false, Some(&e.to_string()));
                }
            }
            Ok(Ok(_)) => self.set_up(true, None),
            Ok(Err(e)) => self.set_up(false, Some(&e.to_string())),
            Err(_) => self.set_up(false, Some("heartbeat ran past store.timeout_ms")),
        }
    }

    /// Says the database this member stops (bounded by `store.timeout_ms`).
    pub async fn sign_off(&self) {
        // No heartbeat after this one, whichever task ticks last.
        self.signed_off
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let q = self.sql.sign_off();
        let r = tokio::time::timeout(
            self.timeout,
            sqlx::query(&q).bind(self.me.clone()).execute(&self.pool),
        )
        .await;
        if !matches!(r, Ok(Ok(_))) {
            debug!("sign-off not written: the others find this member dead by its heartbeat");
        }
    }

    /// Deletes tombstones and bindings that ended long ago (an hour by the database's
    /// clock), so the tables stay the size of the ranges.
    pub(super) async fn purge(&self) {
        let now_ms = match sqlx::query(&format!("SELECT {}", self.sql.now_ms()))
            .fetch_one(&self.pool)
            .await
            .and_then(|r| sqlx::Row::try_get::<i64, _>(&r, 0))
        {
            Ok(n) => n,
            Err(_) => return,
        };
        for family in [Family::V4, Family::V6] {
            let q = self.sql.purge(family);
            let before = now_ms - TOMBSTONE_MS;
            if let Err(e) = sqlx::query(&q)
                .bind(before)
                .bind(before)
                .execute(&self.pool)
                .await
            {
                debug!(error = %e, "shared lease store purge failed");
            }
        }
    }
}
