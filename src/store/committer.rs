//! The committer: one thread that makes every durable change, in arrival order. It folds
//! whatever was queued since its last flush into one `commit` (group commit) and only
//! then tells each waiting party, so a DHCP ACK or an operator API answer never leaves
//! before its change is durable, and many of them share one flush.

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tracing::error;

use super::{Change, Store, StoreError};
use crate::metrics::{header, Counter, Gauge, Histogram};

/// Most queued jobs folded into one flush.
const MAX_BATCH: usize = 16_384;
/// Under load (the previous flush covered more than one job), the committer waits this
/// long for more changes before flushing: fewer, larger flushes cost far less CPU, and a
/// few milliseconds on an ACK are invisible to DHCP clients. An idle store flushes at
/// once.
const COMMIT_WINDOW: Duration = Duration::from_millis(3);

/// What runs once a job's changes are durable (`Ok`) or have failed (`Err`). It runs on
/// the committer thread, in commit order: keep it short and never block on the network.
pub(super) type Then = Box<dyn FnOnce(Result<(), &StoreError>) + Send>;

struct Job {
    changes: Vec<Change>,
    queued: Instant,
    then: Then,
}

/// Why a change did not become durable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitFailed {
    /// The store refused or failed the write.
    #[error("the lease store failed: {0}")]
    Store(String),
    /// The committer thread is gone (shutting down).
    #[error("the lease store is closed")]
    Stopped,
}

/// Counters of the commit path.
#[derive(Debug, Default)]
pub struct StoreMetrics {
    /// Commits (each one flush).
    pub commits: Counter,
    /// Changes made durable.
    pub committed_changes: Counter,
    /// Failed commits (their answers were withheld).
    pub commit_errors: Counter,
    /// Time from queuing a change to its flush completing.
    pub commit_latency: Histogram,
    /// Lease records that did not decode and were set aside.
    pub set_aside: Gauge,
}

impl StoreMetrics {
    /// Writes the Prometheus exposition.
    pub fn render_prometheus(&self, out: &mut String) {
        for (name, help, c) in [
            (
                "shardboot_lease_commits_total",
                "Lease store flushes",
                &self.commits,
            ),
            (
                "shardboot_lease_committed_changes_total",
                "Lease changes made durable",
                &self.committed_changes,
            ),
            (
                "shardboot_lease_commit_errors_total",
                "Failed lease store commits",
                &self.commit_errors,
            ),
        ] {
            header(out, name, "counter", help);
            out.push_str(&format!("{name} {}\n", c.get()));
        }
        self.commit_latency.render(
            out,
            "shardboot_lease_commit_seconds",
            "Time from a lease change to its durable flush",
        );
        header(
            out,
            "shardboot_store_set_aside_records",
            "gauge",
            "Lease records that did not decode, set aside at start",
        );
        out.push_str(&format!(
            "shardboot_store_set_aside_records {}\n",
            self.set_aside.get()
        ));
    }
}

/// Where durable changes are sent. Cloning gives another sender to the same thread,
/// which ends once every sender is dropped, after finishing what was queued.
#[derive(Clone, Debug)]
pub struct Committer {
    jobs: mpsc::Sender<Job>,
}

impl Committer {
    /// Starts the committer thread over `store`.
    pub fn start(store: Arc<dyn Store>, metrics: Arc<StoreMetrics>) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("store-commit".into())
            .spawn(move || commit_loop(&*store, &queue, &metrics))?;
        Ok(Self { jobs })
    }

    /// Queues `changes`; `then` runs once they are durable or have failed. Without
    /// waiting: the DHCP engine queues an ACK and goes on to the next packet.
    pub fn submit(
        &self,
        changes: Vec<Change>,
        then: impl FnOnce(Result<(), &StoreError>) + Send + 'static,
    ) -> Result<(), CommitFailed> {
        let job = Job {
            changes,
            queued: Instant::now(),
            then: Box::new(then),
        };
        self.jobs.send(job).map_err(|_| CommitFailed::Stopped)
    }

    /// Makes `changes` durable and waits for it, blocking this thread (start-up, and the
    /// DHCP engine's rare operator changes). With no changes, waits for everything
    /// queued before.
    pub fn commit_blocking(&self, changes: Vec<Change>) -> Result<(), CommitFailed> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.submit(changes, move |r| {
            let _ = tx.send(r.map_err(|e| CommitFailed::Store(e.to_string())));
        })?;
        rx.recv().unwrap_or(Err(CommitFailed::Stopped))
    }

    /// Makes `changes` durable and waits for it without blocking the runtime (operator
    /// API handlers).
    pub async fn commit(&self, changes: Vec<Change>) -> Result<(), CommitFailed> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.submit(changes, move |r| {
            let _ = tx.send(r.map_err(|e| CommitFailed::Store(e.to_string())));
        })?;
        rx.await.unwrap_or(Err(CommitFailed::Stopped))
    }
}

fn commit_loop(store: &dyn Store, queue: &mpsc::Receiver<Job>, metrics: &StoreMetrics) {
    let mut under_load = false;
    while let Ok(first) = queue.recv() {
        let mut jobs = vec![first];
        if under_load {
            // Sleep out the window rather than wait on the channel: a waiting receiver
            // is woken (a futex call and a context switch on both threads) by every job.
            std::thread::sleep(COMMIT_WINDOW);
        }
        jobs.extend(queue.try_iter().take(MAX_BATCH - 1));
        under_load = jobs.len() > 1;
        let mut changes = Vec::with_capacity(jobs.len());
        let mut waiting = Vec::with_capacity(jobs.len());
        for job in jobs {
            changes.extend(job.changes);
            waiting.push((job.queued, job.then));
        }
        let result = store.commit(&changes);
        match &result {
            Ok(()) => {
                metrics.commits.inc();
                metrics.committed_changes.add(changes.len() as u64);
                for (queued, _) in &waiting {
                    metrics
                        .commit_latency
                        .observe(queued.elapsed().as_secs_f64());
                }
            }
            Err(e) => {
                // Every answer is withheld: DHCP clients retry and the engine writes again.
                metrics.commit_errors.inc();
                error!(error = %e, changes = changes.len(), "lease commit failed; answers withheld");
            }
        }
        for (_, then) in waiting {
            then(result.as_ref().map(|_| ()));
        }
    }
}
