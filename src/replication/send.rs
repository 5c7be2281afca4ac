//! The sending side: every flush's lease changes go to every other member of the list
//! in force, concurrently with the local flush, and the ACKs wait for the peers' answers
//! (the committer's [`Replicate`] hook). A peer that does not answer within the timeout
//! falls *behind*: it is no longer waited for, its changes queue up and a background
//! task sends them until it has them all, when it is *in step* again. A peer new to the
//! list (every peer when this member starts) is in step, so it is waited for at once,
//! and is also sent everything the store holds, in the background: it may have missed
//! changes while it was out of the list.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::wire::{self, Batch, Epoch, MAX_CHANGES};
use super::{ReplicationMetrics, BATCH_PATH, SNAPSHOT_PATH};
use crate::config::Member;
use crate::owner::peer_auth::{self, MemberSecret};
use crate::owner::roster::Roster;
use crate::store::{
    Finish, Flushed, Lease6Effect, LeaseEffect, LeaseQuery, Replicate, SharedChange, Store,
    StoreError, Verdict,
};

/// Most changes queued for a peer that is behind; beyond, the queue is dropped and the
/// peer is sent everything the store holds instead.
const MAX_BACKLOG: usize = 200_000;
/// How often changes are sent to peers that are behind.
const CATCH_UP_EVERY: Duration = Duration::from_millis(500);

/// Changes a peer has not acknowledged yet.
#[derive(Debug)]
struct Backlog {
    changes: VecDeque<SharedChange>,
    /// Unix seconds since the peer has been behind.
    since: u64,
}

#[derive(Debug, Default)]
struct Peer {
    behind: Option<Backlog>,
    /// Everything the store holds is to be sent (a peer new to the list, an overflow).
    resync: bool,
    /// Unix seconds of the last answer.
    last_ok: Option<u64>,
    /// Milliseconds the last answer took.
    last_ms: Option<u64>,
}

impl Peer {
    /// Queues changes for a peer that is behind; beyond [`MAX_BACKLOG`] the queue is
    /// dropped for a full resync.
    fn queue(&mut self, changes: &[SharedChange]) {
        if let Some(b) = self.behind.as_mut() {
            b.changes.extend(changes.iter().cloned());
            if b.changes.len() > MAX_BACKLOG {
                b.changes.clear();
                self.resync = true;
            }
        }
    }
}

/// One peer as `/v1/members` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PeerStatus {
    /// The member.
    pub member: String,
    /// Every change acknowledged (an ACK here waits for this peer).
    pub in_step: bool,
    /// Changes queued for it while behind.
    pub backlog: usize,
    /// Whether everything the store holds is still to be sent.
    pub full_resync: bool,
    /// Unix seconds since it has been behind.
    pub behind_since: Option<u64>,
    /// Unix seconds of its last answer.
    pub last_ok: Option<u64>,
    /// Milliseconds its last answer took.
    pub last_ms: Option<u64>,
}

/// Why a batch did not reach a peer.
#[derive(Debug, thiserror::Error)]
enum SendError {
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    #[error("answered {0}")]
    Status(reqwest::StatusCode),
    #[error("answer without a valid proof")]
    Proof,
    #[error("answer: {0}")]
    Wire(#[from] wire::WireError),
    #[error("the sending task panicked")]
    Panicked,
}

/// Lease replication to the other members.
pub struct Replicator {
    me: String,
    roster: Arc<Roster>,
    secret: Option<Arc<MemberSecret>>,
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
    epoch: Epoch,
    seq: AtomicU64,
    peers: Mutex<HashMap<String, Peer>>,
    /// Counters, for `/metrics`.
    pub metrics: ReplicationMetrics,
}

impl std::fmt::Debug for Replicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicator")
            .field("me", &self.me)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

fn unix_now() -> u64 {
    crate::dhcp::shell::unix_now()
}

impl Replicator {
    /// The replicator of member `me`, sending on `runtime` with answers awaited at most
    /// `timeout`. `None` when the HTTP client cannot be built or the OS has no random
    /// numbers.
    pub fn new(
        me: String,
        roster: Arc<Roster>,
        secret: Option<Arc<MemberSecret>>,
        timeout: Duration,
        runtime: tokio::runtime::Handle,
    ) -> Option<Self> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .pool_max_idle_per_host(2)
            .build()
            .ok()?;
        let nonce = peer_auth::new_challenge()?;
        let nonce = u64::from_str_radix(&nonce[..16], 16).ok()?;
        Some(Self {
            me,
            roster,
            secret,
            client,
            runtime,
            epoch: Epoch {
                started: unix_now(),
                nonce,
            },
            seq: AtomicU64::new(0),
            peers: Mutex::new(HashMap::new()),
            metrics: ReplicationMetrics::default(),
        })
    }

    /// This member's name.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// The secret messages are proven with.
    pub fn secret(&self) -> Option<&MemberSecret> {
        self.secret.as_deref()
    }

    /// Whether every other member of the list in force has every change (so another
    /// member knows every lease this one acknowledges).
    pub fn in_step(&self) -> bool {
        // Read against the list in force now: a member that just left is not waited
        // for, one that just joined is behind until it has everything.
        let view = self.roster.current();
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        view.members
            .iter()
            .filter(|m| m.name != self.me)
            .all(|m| peers.get(&m.name).is_none_or(|p| p.behind.is_none()))
    }

    /// Each other member of the list, for `/v1/members`.
    pub fn status(&self) -> Vec<PeerStatus> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<PeerStatus> = peers
            .iter()
            .map(|(name, p)| PeerStatus {
                member: name.clone(),
                in_step: p.behind.is_none(),
                backlog: p.behind.as_ref().map_or(0, |b| b.changes.len()),
                full_resync: p.resync,
                behind_since: p.behind.as_ref().map(|b| b.since),
                last_ok: p.last_ok,
                last_ms: p.last_ms,
            })
            .collect();
        out.sort_by(|a, b| a.member.cmp(&b.member));
        out
    }

    /// The other members of the list in force. Peers that left are forgotten; peers
    /// new to the list are in step and get a full resync (see the module comment).
    fn others(&self, peers: &mut HashMap<String, Peer>) -> Vec<Member> {
        let view = self.roster.current();
        let others: Vec<Member> = view
            .members
            .iter()
            .filter(|m| m.name != self.me)
            .cloned()
            .collect();
        peers.retain(|name, _| others.iter().any(|m| &m.name == name));
        for m in &others {
            peers.entry(m.name.clone()).or_insert_with(|| Peer {
                resync: true,
                ..Peer::default()
            });
        }
        others
    }

    fn next_batches(
        &self,
        changes: &[SharedChange],
        catch_up: bool,
    ) -> Vec<(Vec<u8>, String, usize)> {
        changes
            .chunks(MAX_CHANGES)
            .map(|chunk| {
                let body = wire::encode_batch(&Batch {
                    epoch: self.epoch,
                    seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
                    catch_up,
                    changes: chunk.to_vec(),
                });
                let proof = self.prove(BATCH_PATH, &body);
                (body, proof, chunk.len())
            })
            .collect()
    }

    fn prove(&self, path: &str, body: &[u8]) -> String {
        self.secret
            .as_ref()
            .map_or_else(String::new, |s| s.prove_message(&self.me, path, body))
    }

    /// Sends one message and checks its answer's proof.
    async fn post(
        &self,
        member: &Member,
        path: &str,
        body: Vec<u8>,
        proof: &str,
    ) -> Result<Vec<u8>, SendError> {
        let url = format!("{}{path}", member.http_url);
        let mut request = self
            .client
            .post(url)
            .header(peer_auth::MEMBER_HEADER, &self.me)
            .body(body);
        if !proof.is_empty() {
            request = request.header(peer_auth::PROOF_HEADER, proof);
        }
        let r = request.send().await?;
        if !r.status().is_success() {
            return Err(SendError::Status(r.status()));
        }
        let answer_proof = r
            .headers()
            .get(peer_auth::PROOF_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let named = r
            .headers()
            .get(peer_auth::MEMBER_HEADER)
            .is_some_and(|v| v.as_bytes() == member.name.as_bytes());
        let bytes = r.bytes().await?;
        if let Some(secret) = &self.secret {
            let ok =
                answer_proof.is_some_and(|p| secret.verify_answer(&member.name, proof, &bytes, &p));
            if !(named && ok) {
                return Err(SendError::Proof);
            }
        }
        Ok(bytes.to_vec())
    }

    /// Sends `batches` to `member` in order; the verdicts of all of them.
    async fn send(
        self: Arc<Self>,
        member: Member,
        batches: Arc<Vec<(Vec<u8>, String, usize)>>,
    ) -> Result<Vec<Verdict>, SendError> {
        let started = Instant::now();
        let mut out = Vec::new();
        for (body, proof, n) in batches.iter() {
            let answer = self.post(&member, BATCH_PATH, body.clone(), proof).await?;
            out.extend(wire::decode_answer(&answer, *n)?);
        }
        let ms = started.elapsed().as_millis() as u64;
        if let Some(p) = self
            .peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&member.name)
        {
            p.last_ok = Some(unix_now());
            p.last_ms = Some(ms);
        }
        Ok(out)
    }

    /// Asks every other member for every lease it knows, v4 and v6 (a member
    /// starting: the DHCPv4 and the DHCPv6 server each ask before they serve). Returns
    /// the leases and whether every member answered.
    pub async fn pull_snapshots(&self) -> (wire::Snapshot, bool) {
        let others = {
            let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            self.others(&mut peers)
        };
        let mut all = wire::Snapshot::default();
        let mut every = true;
        for m in &others {
            let body = wire::encode_batch(&Batch {
                epoch: self.epoch,
                seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
                catch_up: true,
                changes: Vec::new(),
            });
            let proof = self.prove(SNAPSHOT_PATH, &body);
            let got = match self.post(m, SNAPSHOT_PATH, body, &proof).await {
                Ok(bytes) => wire::decode_snapshot(&bytes).map_err(SendError::from),
                Err(e) => Err(e),
            };
            match got {
                Ok(got) => {
                    info!(member = %m.name, leases = got.leases.len(), leases6 = got.leases6.len(),
                        "leases read from member");
                    all.leases.extend(got.leases);
                    all.leases6.extend(got.leases6);
                }
                Err(e) => {
                    every = false;
                    warn!(member = %m.name, error = %e, "member did not give its leases");
                }
            }
        }
        (all, every)
    }

    /// Sends what peers that are behind lack, every [`CATCH_UP_EVERY`], until
    /// `shutdown`.
    pub async fn catch_up(self: Arc<Self>, store: Arc<dyn Store>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(CATCH_UP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let (others, full): (Vec<Member>, Vec<bool>) = {
                let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
                let others = self.others(&mut peers);
                others
                    .into_iter()
                    .filter_map(|m| {
                        let p = peers.get(&m.name)?;
                        (p.resync || p.behind.is_some()).then_some((m, p.resync))
                    })
                    .unzip()
            };
            let mut round = tokio::task::JoinSet::new();
            for (m, full) in others.into_iter().zip(full) {
                let (me, store) = (self.clone(), store.clone());
                round.spawn(async move { me.catch_up_one(m, full, store).await });
            }
            while round.join_next().await.is_some() {}
        }
    }

    async fn catch_up_one(self: Arc<Self>, member: Member, full: bool, store: Arc<dyn Store>) {
        if full {
            // Everything the store holds, then what queued meanwhile. Read off the
            // runtime: the store is a disk.
            let now = unix_now();
            let leases = tokio::task::spawn_blocking(move || {
                let v4 = store.leases(&LeaseQuery::default(), usize::MAX)?;
                let v6 = store.leases6(None, usize::MAX)?;
                Ok::<_, StoreError>((v4, v6))
            })
            .await;
            let Ok(Ok((v4, v6))) = leases else {
                warn!(member = %member.name, "store not readable for a full resync");
                return;
            };
            let v4 = v4
                .into_iter()
                .filter(|l| l.is_active(now))
                .map(|l| SharedChange::V4(LeaseEffect::Put(l)));
            let v6 = v6
                .into_iter()
                .filter(|l| l.is_active(now))
                .map(|l| SharedChange::V6(Lease6Effect::Put(l)));
            let changes: Vec<SharedChange> = v4.chain(v6).collect();
            let n = changes.len();
            let batches = Arc::new(self.next_batches(&changes, true));
            match self.clone().send(member.clone(), batches).await {
                Ok(verdicts) => {
                    self.count_late_refusals(&member, &changes, &verdicts);
                    let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(p) = peers.get_mut(&member.name) {
                        p.resync = false;
                    }
                    debug!(member = %member.name, leases = n, "full resync sent");
                }
                Err(e) => {
                    debug!(member = %member.name, error = %e, "member still behind");
                    return;
                }
            }
        }
        loop {
            let chunk: Vec<SharedChange> = {
                let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
                let Some(p) = peers.get_mut(&member.name) else {
                    return;
                };
                if p.resync {
                    return; // overflowed meanwhile: the next round sends everything
                }
                let Some(b) = p.behind.as_mut() else { return };
                if b.changes.is_empty() {
                    p.behind = None;
                    info!(member = %member.name, "member in step: lease changes wait for it again");
                    return;
                }
                b.changes.iter().take(MAX_CHANGES).cloned().collect()
            };
            let batches = Arc::new(self.next_batches(&chunk, true));
            match self.clone().send(member.clone(), batches).await {
                Ok(verdicts) => {
                    self.count_late_refusals(&member, &chunk, &verdicts);
                    let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(p) = peers.get_mut(&member.name).filter(|p| !p.resync) {
                        if let Some(b) = p.behind.as_mut() {
                            b.changes.drain(..chunk.len().min(b.changes.len()));
                        }
                    }
                }
                Err(e) => {
                    debug!(member = %member.name, error = %e, "member still behind");
                    return;
                }
            }
        }
    }

    /// A refusal of a change already answered (sent while the peer was behind): the
    /// peer holds a newer lease on the address. Said loudly; nothing can take the ACK
    /// back.
    fn count_late_refusals(&self, member: &Member, sent: &[SharedChange], verdicts: &[Verdict]) {
        for (c, v) in sent.iter().zip(verdicts) {
            match (c, v) {
                (SharedChange::V4(LeaseEffect::Put(ours)), Verdict::Refused(holder)) => {
                    self.metrics.conflicts.inc();
                    error!(member = %member.name, ip = %ours.ip, ours = %ours.mac, theirs = %holder.mac,
                        "a lease given while the member was behind conflicts with the member's");
                }
                (SharedChange::V6(Lease6Effect::Put(ours)), Verdict::Refused6(holder)) => {
                    self.metrics.conflicts.inc();
                    error!(member = %member.name, ip = %ours.ip, ours = ?ours.mac, theirs = ?holder.mac,
                        "a DHCPv6 lease given while the member was behind conflicts with the member's");
                }
                _ => {}
            }
        }
    }

    fn fall_behind(&self, name: &str, changes: &[SharedChange], why: &SendError) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let Some(p) = peers.get_mut(name) else { return };
        if p.behind.is_none() {
            warn!(member = name, error = %why, "member fell behind: lease changes no longer wait for it; sent again until it has them all");
            self.metrics.fell_behind.inc();
            p.behind = Some(Backlog {
                changes: VecDeque::new(),
                since: unix_now(),
            });
        }
        p.queue(changes);
    }
}

/// The committer's hook, on the committer thread.
#[derive(Debug)]
pub struct Hook(pub Arc<Replicator>);

impl Replicate for Hook {
    fn replicate(&self, changes: Vec<SharedChange>, flushed: Flushed, finish: Finish) {
        let r = self.0.clone();
        let targets: Vec<Member> = {
            let mut peers = r.peers.lock().unwrap_or_else(|p| p.into_inner());
            let others = r.others(&mut peers);
            others
                .into_iter()
                .filter(|m| {
                    let p = peers.get_mut(&m.name).expect("others() adds every member");
                    p.queue(&changes);
                    p.behind.is_none()
                })
                .collect()
        };
        let started = Instant::now();
        let batches = Arc::new(r.next_batches(&changes, false));
        let sends: Vec<_> = targets
            .iter()
            .map(|m| r.runtime.spawn(r.clone().send(m.clone(), batches.clone())))
            .collect();
        let runtime = r.runtime.clone();
        runtime.spawn(async move {
            let mut verdicts = vec![Verdict::Accepted; changes.len()];
            for (m, send) in targets.iter().zip(sends) {
                match send.await {
                    Ok(Ok(vs)) => {
                        for (v, out) in vs.into_iter().zip(verdicts.iter_mut()) {
                            if v.is_refused() && !out.is_refused() {
                                r.metrics.refused.inc();
                                *out = v;
                            }
                        }
                    }
                    Ok(Err(e)) => r.fall_behind(&m.name, &changes, &e),
                    Err(_) => r.fall_behind(&m.name, &changes, &SendError::Panicked),
                }
            }
            if !targets.is_empty() {
                r.metrics.batches.inc();
                r.metrics.changes.add(changes.len() as u64);
                r.metrics.latency.observe(started.elapsed().as_secs_f64());
            }
            let flush = flushed.await.unwrap_or(Err(StoreError::Closed));
            finish(flush, changes, verdicts);
        });
    }
}
