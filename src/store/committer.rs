//! The committer: one thread that makes every durable change, in arrival order. It folds
//! whatever was queued since its last flush into one `commit` (group commit) and only
//! then tells each waiting party, so a DHCP ACK or an operator API answer never leaves
//! before its change is durable, and many of them share one flush.

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tracing::error;

use super::Lease6Effect;
use super::{Change, LeaseEffect, SharedChange, Store, StoreError, Verdict};
use crate::metrics::{header, Counter, Gauge, Histogram};
use crate::udp_batch::{Counted, Replies};

/// Most queued jobs folded into one flush.
const MAX_BATCH: usize = 16_384;
/// Most jobs waiting for the committer. A full queue drops the newest job, as a full
/// socket buffer drops a datagram: its client retries, and memory stays bounded.
const QUEUE_CAPACITY: usize = 16_384;
/// How often a failing store is tried again while nothing else is queued.
const RETRY_EVERY: Duration = Duration::from_secs(1);
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
    reply: Option<Reply>,
}

/// A datagram that leaves once its job's changes are durable and no peer refused them
/// (a DHCP ACK), sent together with the other replies of the same flush
/// ([`crate::udp_batch`]): one trip through the kernel for many where one `sendto`
/// each cost more than the flush.
pub struct Reply {
    /// The socket it leaves by.
    pub socket: Arc<std::net::UdpSocket>,
    /// Told whether it was sent.
    pub counted: Arc<dyn Counted>,
    /// Where it goes.
    pub to: std::net::SocketAddr,
    /// The datagram.
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("to", &self.to)
            .field("len", &self.bytes.len())
            .finish()
    }
}

/// One job's answer: when it was queued, what runs, and the reply that leaves.
type Waiting = (Instant, Then, Option<Reply>);

/// Hands lease changes to the shared lease store while the local flush runs: an ACK
/// then waits for both, so the database has decided every acknowledged binding before
/// its client hears of it (`shared::hook`).
pub trait Arbiter: Send + Sync + std::fmt::Debug {
    /// Sends `changes` to the arbiter without waiting. Once it has answered (or given
    /// up) and the local flush has ended (`flushed`), `finish` runs, on another thread,
    /// with the flush's result and one verdict per change: `Refused` when the address
    /// is held for another client, `Unavailable` when the arbiter cannot be reached.
    fn decide(&self, changes: Vec<SharedChange>, flushed: Flushed, finish: Finish);
}

/// The local flush's result, sent once it has ended.
pub type Flushed = tokio::sync::oneshot::Receiver<Result<(), StoreError>>;
/// What runs once a decided flush has been answered: the flush's result, the changes
/// sent and one verdict per change.
pub type Finish = Box<dyn FnOnce(Result<(), StoreError>, Vec<SharedChange>, Vec<Verdict>) + Send>;

/// Why a change did not become durable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitFailed {
    /// The store refused or failed the write.
    #[error("the lease store failed: {0}")]
    Store(String),
    /// The committer thread is gone (shutting down).
    #[error("the lease store is closed")]
    Stopped,
    /// The commit queue is full; nothing was queued.
    #[error("the lease store is overloaded")]
    QueueFull,
}

/// Whether the store takes writes, for readiness and for the DHCP server, which stops
/// offering new addresses while it does not: an OFFER it could never ACK only delays the
/// client (another server, or this one once the disk is back, can serve it).
#[derive(Debug, Default)]
pub struct StoreStatus {
    failing: std::sync::atomic::AtomicBool,
    reason: std::sync::Mutex<String>,
    /// Why the shared lease store cannot be reached, while it cannot.
    shared_down: std::sync::Mutex<Option<String>>,
    shared_is_down: std::sync::atomic::AtomicBool,
}

impl StoreStatus {
    /// Whether the last commit failed (and no retry has succeeded since).
    pub fn is_failing(&self) -> bool {
        self.failing.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the shared lease store cannot be reached (no fresh address is
    /// acknowledged then; `shared::hook`).
    pub fn shared_is_down(&self) -> bool {
        self.shared_is_down
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a fresh address may be offered: the local store writes and the shared
    /// one, if any, answers. An OFFER that could never be ACKed only delays the client.
    pub fn offers_fresh(&self) -> bool {
        !self.is_failing() && !self.shared_is_down()
    }

    /// Records whether the shared lease store answers (`None`) or why not.
    pub fn set_shared_down(&self, why: Option<String>) {
        self.shared_is_down
            .store(why.is_some(), std::sync::atomic::Ordering::Relaxed);
        *self.shared_down.lock().unwrap_or_else(|p| p.into_inner()) = why;
    }

    /// Why the store does not take writes (the local one failing, or the shared one
    /// unreachable), while it does not.
    pub fn reason(&self) -> Option<String> {
        if self.is_failing() {
            return Some(
                self.reason
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone(),
            );
        }
        self.shared_down
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|why| format!("shared lease store unreachable: {why}"))
    }

    fn set(&self, failure: Option<&StoreError>) {
        if let Some(e) = failure {
            *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = e.to_string();
        }
        self.failing
            .store(failure.is_some(), std::sync::atomic::Ordering::Relaxed);
    }
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
    /// Jobs dropped on a full commit queue.
    pub queue_full: Counter,
    /// Whether the store takes writes.
    pub status: StoreStatus,
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
            (
                "shardboot_lease_commit_queue_full_total",
                "Changes dropped on a full commit queue (their answers withheld)",
                &self.queue_full,
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
        header(
            out,
            "shardboot_store_failing",
            "gauge",
            "1 while the lease store fails writes (no new addresses are offered)",
        );
        out.push_str(&format!(
            "shardboot_store_failing {}\n",
            u8::from(self.status.is_failing())
        ));
    }
}

/// Where durable changes are sent. Cloning gives another sender to the same thread,
/// which ends once every sender is dropped, after finishing what was queued.
#[derive(Clone, Debug)]
pub struct Committer {
    jobs: mpsc::SyncSender<Job>,
    metrics: Arc<StoreMetrics>,
}

impl Committer {
    /// Starts the committer thread over `store`.
    pub fn start(store: Arc<dyn Store>, metrics: Arc<StoreMetrics>) -> std::io::Result<Self> {
        Self::start_decided(store, metrics, None)
    }

    /// Starts the committer thread over `store`; with `arbiter`, the engines' lease
    /// changes ([`Change::Lease`], [`Change::Lease6`]) of every flush also go to it
    /// (the shared lease store), and none is acknowledged before its verdict.
    pub fn start_decided(
        store: Arc<dyn Store>,
        metrics: Arc<StoreMetrics>,
        arbiter: Option<Arc<dyn Arbiter>>,
    ) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::sync_channel(QUEUE_CAPACITY);
        let m = metrics.clone();
        std::thread::Builder::new()
            .name("store-commit".into())
            .spawn(move || {
                let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    commit_loop(&*store, arbiter.as_deref(), &queue, &m)
                }));
                if died.is_err() {
                    // Without the committer nothing is ever ACKed again: a process that
                    // stops is restarted by its supervisor; one that lingers is not.
                    error!("the lease store committer died; stopping shardboot");
                    std::process::exit(70);
                }
            })?;
        Ok(Self { jobs, metrics })
    }

    fn job(
        changes: Vec<Change>,
        then: impl FnOnce(Result<(), &StoreError>) + Send + 'static,
    ) -> Job {
        Job {
            changes,
            queued: Instant::now(),
            then: Box::new(then),
            reply: None,
        }
    }

    fn queue(&self, job: Job) -> Result<(), CommitFailed> {
        match self.jobs.try_send(job) {
            Ok(()) => Ok(()),
            Err(mpsc::TrySendError::Full(_)) => {
                self.metrics.queue_full.inc();
                Err(CommitFailed::QueueFull)
            }
            Err(mpsc::TrySendError::Disconnected(_)) => Err(CommitFailed::Stopped),
        }
    }

    /// [`Committer::submit`] with a reply that is sent once the changes are durable
    /// (and no peer refused them), with the other replies of the same flush; `then`
    /// runs in every case, before the replies leave.
    pub fn submit_with_reply(
        &self,
        changes: Vec<Change>,
        reply: Option<Reply>,
        then: impl FnOnce(Result<(), &StoreError>) + Send + 'static,
    ) -> Result<(), CommitFailed> {
        let mut job = Self::job(changes, then);
        job.reply = reply;
        self.queue(job)
    }

    /// Queues `changes`; `then` runs once they are durable or have failed. Without
    /// waiting: the DHCP engine queues an ACK and goes on to the next packet.
    pub fn submit(
        &self,
        changes: Vec<Change>,
        then: impl FnOnce(Result<(), &StoreError>) + Send + 'static,
    ) -> Result<(), CommitFailed> {
        self.queue(Self::job(changes, then))
    }

    /// Makes `changes` durable and waits for it, blocking this thread (start-up, and the
    /// DHCP engine's rare operator changes). With no changes, waits for everything
    /// queued before.
    pub fn commit_blocking(&self, changes: Vec<Change>) -> Result<(), CommitFailed> {
        let (tx, rx) = mpsc::sync_channel(1);
        // Waits for room in a full queue: this caller waits for the flush anyway.
        self.jobs
            .send(Self::job(changes, move |r| {
                let _ = tx.send(r.map_err(|e| CommitFailed::Store(e.to_string())));
            }))
            .map_err(|_| CommitFailed::Stopped)?;
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

fn commit_loop(
    store: &dyn Store,
    arbiter: Option<&dyn Arbiter>,
    queue: &mpsc::Receiver<Job>,
    metrics: &StoreMetrics,
) {
    let mut under_load = false;
    loop {
        let first = if metrics.status.is_failing() {
            // A failing store is tried again on its own, so that it recovers (and offers
            // resume) even when no client asks anything.
            match queue.recv_timeout(RETRY_EVERY) {
                Ok(job) => job,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    retry(store, metrics);
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        } else {
            match queue.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
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
        // The engine's own lease changes, with the job each came from, for the arbiter.
        let mut shared: Vec<SharedChange> = Vec::new();
        let mut shared_job = Vec::new();
        for (i, job) in jobs.into_iter().enumerate() {
            if arbiter.is_some() {
                for c in &job.changes {
                    let effect = match c {
                        Change::Lease(e) => SharedChange::V4(e.clone()),
                        Change::Lease6(e) => SharedChange::V6(e.clone()),
                        _ => continue,
                    };
                    shared.push(effect);
                    shared_job.push(i);
                }
            }
            changes.extend(job.changes);
            waiting.push((job.queued, job.then, job.reply));
        }
        if metrics.status.is_failing() {
            if let Err(e) = store.recover() {
                tracing::debug!(error = %e, "lease store not back yet");
            }
        }
        // With an arbiter: the changes go out now, the flush runs meanwhile, and the
        // answers wait on another thread for both, so this thread goes on to the next
        // batch.
        let queued: Vec<Instant> = waiting.iter().map(|(q, _, _)| *q).collect();
        let mut waiting = Some(waiting);
        let answer_later = match arbiter {
            Some(r) if !shared.is_empty() => {
                let waiting = waiting.take().expect("not taken yet");
                let (flushed, flush_result) = tokio::sync::oneshot::channel();
                r.decide(
                    shared,
                    flush_result,
                    Box::new(move |flush, changes, verdicts| {
                        answer(waiting, &shared_job, flush, &changes, verdicts);
                    }),
                );
                Some(flushed)
            }
            _ => None,
        };
        let result = store.commit(&changes);
        match &result {
            Ok(()) => {
                metrics.commits.inc();
                metrics.committed_changes.add(changes.len() as u64);
                for q in &queued {
                    metrics.commit_latency.observe(q.elapsed().as_secs_f64());
                }
                recovered(metrics);
            }
            Err(e) => failed(metrics, e, changes.len()),
        }
        match answer_later {
            Some(flushed) => {
                let _ = flushed.send(result);
            }
            None => answer(
                waiting.take().expect("taken only with an arbiter"),
                &[],
                result,
                &[],
                Vec::new(),
            ),
        }
    }
}

/// Tells each waiting party how its job ended: the flush's result, or, when the flush
/// held, a peer's refusal of one of its lease changes (`shared_job[i]` is the job of
/// the i-th decided change, `verdicts[i]` its verdict).
fn answer(
    waiting: Vec<Waiting>,
    shared_job: &[usize],
    flush: Result<(), StoreError>,
    changes: &[SharedChange],
    verdicts: Vec<Verdict>,
) {
    let mut refused: Vec<Option<StoreError>> = Vec::new();
    refused.resize_with(waiting.len(), || None);
    for ((verdict, &job), change) in verdicts.into_iter().zip(shared_job).zip(changes) {
        let refusal = match (verdict, change) {
            (Verdict::Refused(holder), SharedChange::V4(LeaseEffect::Put(ours))) => {
                StoreError::HeldByAnother {
                    ours: Box::new(ours.clone()),
                    holder: Box::new(holder),
                }
            }
            (Verdict::Refused6(holder), SharedChange::V6(Lease6Effect::Put(ours))) => {
                StoreError::HeldByAnother6 {
                    ours: Box::new(ours.clone()),
                    holder: Box::new(holder),
                }
            }
            (Verdict::Unavailable(bound_until), c) => StoreError::SharedUnavailable {
                ip: match c {
                    SharedChange::V4(e) => e.ip().into(),
                    SharedChange::V6(Lease6Effect::Put(l)) => l.ip.into(),
                    SharedChange::V6(Lease6Effect::Remove(ip, _)) => (*ip).into(),
                },
                ours: match c {
                    SharedChange::V4(LeaseEffect::Put(l)) => Some(Box::new(l.clone())),
                    _ => None,
                },
                bound_until,
            },
            _ => continue,
        };
        refused[job].get_or_insert(refusal);
    }
    let mut replies = Replies::default();
    for ((_, then, reply), refusal) in waiting.into_iter().zip(&refused) {
        match (&flush, refusal) {
            (Ok(()), Some(refusal)) => then(Err(refusal)),
            (Ok(()), None) => {
                if let Some(r) = reply {
                    replies.push(&r.socket, &r.counted, r.to, &r.bytes);
                }
                then(Ok(()))
            }
            (Err(e), _) => then(Err(e)),
        }
    }
    replies.send();
}

/// One attempt to bring a failing store back: reopen what a failure left broken, then
/// a small durable write, which needs the disk to take data again.
fn retry(store: &dyn Store, metrics: &StoreMetrics) {
    match store.recover().and_then(|()| store.probe()) {
        Ok(()) => recovered(metrics),
        Err(e) => tracing::debug!(error = %e, "lease store not back yet"),
    }
}

fn recovered(metrics: &StoreMetrics) {
    if metrics.status.is_failing() {
        metrics.status.set(None);
        tracing::warn!("lease store writes again; offering addresses again");
    }
}

fn failed(metrics: &StoreMetrics, e: &StoreError, changes: usize) {
    // Every answer is withheld: DHCP clients retry and the engine writes again.
    metrics.commit_errors.inc();
    if !metrics.status.is_failing() {
        error!(error = %e, changes, "lease commit failed; answers withheld and no new addresses offered until the store writes again");
    }
    metrics.status.set(Some(e));
}
