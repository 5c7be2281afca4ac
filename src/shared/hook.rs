//! The committer's hook with a shared store: every lease change of a group commit goes
//! to the database in one transaction while the local flush runs (with every other
//! group commit that queued behind the last transaction), and the batch's replies wait
//! for both. The database gives each change its verdict; a refused one is
//! withdrawn by its engine and never answered.
//!
//! Transactions are written one at a time, in commit order, so a release never overtakes
//! the binding it ends. A transient error (a failover, a deadlock, a Galera
//! certification conflict) is tried again within `store.timeout_ms`; past that the
//! database counts as unreachable, and until a write or a heartbeat reaches it again
//! only what it already holds is answered: a renewal up to the binding's current end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::bindings;
use super::SharedStore;
use crate::store::{Arbiter, Finish, Flushed, SharedChange, StoreError, Verdict};

/// One group commit's lease changes, waiting for the database.
struct Batch {
    changes: Vec<SharedChange>,
    flushed: Flushed,
    finish: Finish,
}

/// The hook the committer calls for every flush with lease changes.
#[derive(Debug)]
pub struct Hook {
    tx: mpsc::UnboundedSender<Batch>,
}

impl Hook {
    /// Starts the writer task on `runtime`.
    pub fn start(shared: Arc<SharedStore>, runtime: &tokio::runtime::Handle) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        runtime.spawn(writer(shared, rx));
        Self { tx }
    }
}

impl Arbiter for Hook {
    fn decide(&self, changes: Vec<SharedChange>, flushed: Flushed, finish: Finish) {
        // The committer's queue bounds what can wait here.
        if let Err(mpsc::error::SendError(b)) = self.tx.send(Batch {
            changes,
            flushed,
            finish,
        }) {
            // The writer is gone (shutting down): nothing is answered.
            let n = b.changes.len();
            (b.finish)(
                Err(StoreError::Closed),
                b.changes,
                vec![Verdict::Unavailable(None); n],
            );
        }
    }
}

/// The most changes one transaction takes when group commits have queued up behind a
/// slow one: far above one group commit's, and its script (`script`, at most ~3 KiB a
/// change) far below MySQL's smallest default `max_allowed_packet` (4 MiB).
const MAX_CHANGES_PER_TRANSACTION: usize = 1024;

async fn writer(shared: Arc<SharedStore>, mut rx: mpsc::UnboundedReceiver<Batch>) {
    let mut queued: Vec<Batch> = Vec::new();
    while let Some(first) = rx.recv().await {
        // Every batch that queued while the last transaction ran goes into the next
        // one, in commit order: one BEGIN/COMMIT (and one fsync on the server) for all
        // of them, so the database's latency, not its per-commit cost, paces a member.
        let mut n = first.changes.len();
        queued.push(first);
        while n < MAX_CHANGES_PER_TRANSACTION {
            let Ok(b) = rx.try_recv() else { break };
            n += b.changes.len();
            queued.push(b);
        }
        let sizes: Vec<usize> = queued.iter().map(|b| b.changes.len()).collect();
        let changes: Vec<SharedChange> = queued
            .iter_mut()
            .flat_map(|b| std::mem::take(&mut b.changes))
            .collect();
        let verdicts = shared.commit(&changes).await;
        shared.metrics.group_commits.add(sizes.len() as u64);
        let mut changes = changes.into_iter();
        let mut verdicts = verdicts.into_iter();
        for (b, size) in queued.drain(..).zip(sizes) {
            let flush = b.flushed.await.unwrap_or(Err(StoreError::Closed));
            (b.finish)(
                flush,
                changes.by_ref().take(size).collect(),
                verdicts.by_ref().take(size).collect(),
            );
        }
    }
}

/// The first wait before trying a transaction again; doubled each time.
const FIRST_BACKOFF: Duration = Duration::from_millis(20);

impl SharedStore {
    /// Commits `changes` in one transaction and gives each its verdict; while the
    /// database cannot be reached, the verdicts of [`SharedStore::unreachable`].
    pub async fn commit(&self, changes: &[SharedChange]) -> Vec<Verdict> {
        self.commit_at(changes, crate::clock::unix_now()).await
    }

    /// [`SharedStore::commit`] by a member whose clock reads `now` (the leases' ends
    /// are turned into durations from it).
    pub async fn commit_at(&self, changes: &[SharedChange], now: u64) -> Vec<Verdict> {
        // Known to be down: answer at once from what the database already holds. Each
        // batch waiting out the timeout would hold every later one (and its renewals)
        // behind it; the heartbeat finds the database again.
        if !self.is_up() {
            let v = self.unreachable(changes);
            let covered = v.iter().filter(|v| !v.is_refused()).count();
            debug!(
                changes = changes.len(),
                covered, "shared store down: answered from what it holds"
            );
            return v;
        }
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut backoff = FIRST_BACKOFF;
        loop {
            let attempt = tokio::time::timeout_at(deadline, self.write(changes, now)).await;
            let error = match attempt {
                Ok(Ok(verdicts)) => {
                    self.committed(changes, &verdicts, started);
                    return verdicts;
                }
                Ok(Err(e)) => e,
                Err(_) => {
                    self.set_up(false, Some("a transaction ran past store.timeout_ms"));
                    return self.unreachable(changes);
                }
            };
            let transient = super::is_transient(&error);
            if transient && tokio::time::Instant::now() + backoff < deadline {
                self.metrics.retries.inc();
                debug!(error = %error, "shared lease store transaction tried again");
                tokio::time::sleep(backoff).await;
                backoff *= 2;
                continue;
            }
            if transient {
                self.set_up(false, Some(&error.to_string()));
            } else {
                // Not the network: a change this build cannot write. The batch is not
                // answered; the database stays counted reachable.
                warn!(error = %error, changes = changes.len(), "shared lease store refused a transaction; replies withheld");
            }
            return self.unreachable(changes);
        }
    }

    async fn write(&self, changes: &[SharedChange], now: u64) -> Result<Vec<Verdict>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let verdicts =
            bindings::write(&mut tx, self.sql, &self.me, changes, now, &self.rows).await?;
        tx.commit().await?;
        Ok(verdicts)
    }

    fn committed(&self, changes: &[SharedChange], verdicts: &[Verdict], started: Instant) {
        self.set_up(true, None);
        self.metrics.batches.inc();
        self.metrics.changes.add(changes.len() as u64);
        self.metrics
            .latency
            .observe(started.elapsed().as_secs_f64());
        {
            // Written or refused, the address has a row now: its next binding needs
            // no insert.
            let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
            for c in changes {
                if bindings::put_of(c, 0).is_some() {
                    rows.insert(bindings::key_of(c));
                }
            }
        }
        let mut coverage = self.coverage.lock().unwrap_or_else(|p| p.into_inner());
        for (c, v) in changes.iter().zip(verdicts) {
            if v.is_refused() {
                self.metrics.refused.inc();
                continue;
            }
            match bindings::covered_by(c) {
                Some((key, holder, end)) => {
                    coverage.insert(key, (holder, end));
                }
                None => {
                    coverage.remove(&bindings::key_of(c));
                }
            }
        }
    }

    /// The verdicts while the database cannot be reached: a renewal the database's
    /// binding already covers (same holder, ending no later) stands; nothing else is
    /// answered. A removal is not written: the binding ends by itself.
    pub fn unreachable(&self, changes: &[SharedChange]) -> Vec<Verdict> {
        let coverage = self.coverage.lock().unwrap_or_else(|p| p.into_inner());
        changes
            .iter()
            .map(|c| {
                let Some(holder) = bindings::holder_of(c) else {
                    return Verdict::Accepted;
                };
                let held = coverage
                    .get(&bindings::key_of(c))
                    .filter(|(h, _)| *h == holder)
                    .map(|(_, end)| *end);
                match (held, bindings::covered_by(c)) {
                    (Some(end), Some((_, _, wants))) if wants <= end => {
                        self.metrics.covered.inc();
                        Verdict::Accepted
                    }
                    (_, wants) => {
                        self.metrics.unavailable.inc();
                        debug!(key = ?bindings::key_of(c), ?held, wants = ?wants.map(|w| w.2), "not acknowledged: the shared store is unreachable");
                        Verdict::Unavailable(held)
                    }
                }
            })
            .collect()
    }
}
