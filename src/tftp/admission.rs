//! Admission: turns a datagram on the listening port into "start a transfer", "answer
//! with an error" or "ignore", and enforces the concurrency limits. Shared by the
//! per-transfer-port and single-port shells.
//!
//! When the table (`max_transfers`) is full, a new request takes the slot of the
//! oldest transfer that never received an ACK; failing that, of the transfer whose last
//! forward ACK is the oldest, if that is longer ago than the longest retransmission
//! timeout (`max_timeout_secs`); never that of a transfer that is moving: source
//! addresses of UDP requests are spoofable, so a flood of RRQs that nobody answers must
//! not lock real clients out (the per-client cap alone cannot, as it is keyed on that
//! same spoofable address), and a peer that ACKs once and then stalls must not keep its
//! slot until the transfer's deadline either.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use super::cache::Source;
use super::metrics::{Reason, TftpMetrics};
use super::options::{negotiate, Limits};
use super::packet::{ErrorCode, Escaped, Mode, Packet};
use super::path::Refusal;
use super::root::FileRoot;
use super::transfer::{Budget, Transfer};
use crate::config::TftpSettings;

/// State shared by the listener and all transfers.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The root and its file cache, shared with the HTTP file route.
    pub root: Arc<FileRoot>,
    /// `root.settings`, for short access.
    pub settings: Arc<TftpSettings>,
    pub metrics: Arc<TftpMetrics>,
    slots: Mutex<Slots>,
    /// What progress times count from.
    epoch: Instant,
}

#[derive(Debug, Default)]
struct Slots {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
    peers: HashMap<SocketAddr, Held>,
    /// Admission order, so "oldest" needs no clock.
    next_seq: u64,
}

/// The table's view of one running transfer.
#[derive(Debug)]
struct Held {
    seq: u64,
    signal: Arc<Signal>,
}

/// What a slot and the table tell each other without a lock on the table.
#[derive(Debug, Default)]
struct Signal {
    /// When an ACK last moved the transfer forward, in milliseconds after
    /// `Shared::epoch` plus one; 0: never. Set by the shell: a peer that ACKs has shown
    /// it receives our packets, and keeps its slot while it keeps moving.
    progress: AtomicU64,
    /// Cancelled when the table takes the slot back for a newer request.
    evicted: CancellationToken,
}

/// A reserved transfer slot; released on drop, whatever way the transfer ends.
#[derive(Debug)]
pub(crate) struct Slot {
    shared: Arc<Shared>,
    peer: SocketAddr,
    seq: u64,
    signal: Arc<Signal>,
}

impl Slot {
    /// Records an ACK that moved the transfer forward at `now` (see [`Shared::admit`]).
    pub(crate) fn mark_progress(&self, now: Instant) {
        self.signal.progress.store(self.shared.stamp(now), Relaxed);
    }

    /// Resolves when the table has taken this slot back for a newer request.
    pub(crate) fn evicted(&self) -> WaitForCancellationFuture<'_> {
        self.signal.evicted.cancelled()
    }

    /// True once the table has taken this slot back.
    pub(crate) fn is_evicted(&self) -> bool {
        self.signal.evicted.is_cancelled()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = self.shared.lock_slots();
        // An evicted slot was released when it was taken; the peer may hold a newer one.
        if s.peers.get(&self.peer).is_some_and(|h| h.seq == self.seq) {
            s.release(self.peer);
            drop(s);
            self.shared.metrics.transfers_active.fetch_sub(1, Relaxed);
        }
    }
}

impl Slots {
    fn release(&mut self, peer: SocketAddr) {
        self.total -= 1;
        self.peers.remove(&peer);
        if let Some(n) = self.per_ip.get_mut(&peer.ip()) {
            *n -= 1;
            if *n == 0 {
                self.per_ip.remove(&peer.ip());
            }
        }
    }

    /// Among the peers `scope` picks, the oldest transfer that never received an ACK;
    /// else the one whose last forward ACK (a stamp, see `Signal::progress`) is the
    /// oldest, when it is before `stalled_before`. Linear in the table size, paid only
    /// at a cap.
    fn victim(
        &self,
        scope: impl Fn(&SocketAddr) -> bool,
        stalled_before: u64,
    ) -> Option<SocketAddr> {
        let in_scope = || self.peers.iter().filter(|(p, _)| scope(p));
        let silent = in_scope()
            .filter(|(_, h)| h.signal.progress.load(Relaxed) == 0)
            .min_by_key(|(_, h)| h.seq);
        silent
            .or_else(|| {
                in_scope()
                    .map(|(p, h)| (p, h.signal.progress.load(Relaxed)))
                    .filter(|(_, at)| *at < stalled_before)
                    .min_by_key(|(_, at)| *at)
                    .map(|(p, _)| (p, &self.peers[p]))
            })
            .map(|(&peer, _)| peer)
    }

    /// Takes back `peer`'s slot now and tells its transfer through the signal.
    fn evict(&mut self, peer: SocketAddr) {
        if let Some(held) = self.peers.get(&peer) {
            held.signal.evicted.cancel();
            self.release(peer);
        }
    }
}

/// An accepted read request, owned so it can move to another task.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub slot: Slot,
    /// The request datagram, decoded again where it is used.
    pub datagram: Vec<u8>,
    /// The peer whose transfer was evicted to make room, if any; its slot's
    /// [`Slot::evicted`] has fired.
    pub evicted: Option<SocketAddr>,
}

/// What to do with a datagram received on the listening socket.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Start a transfer.
    Start(Accepted),
    /// Answer with this TFTP error and do nothing else.
    Reject(ErrorCode, &'static str),
    /// Drop silently (malformed, stray, or a retransmitted RRQ of a running transfer).
    Ignore,
}

impl Shared {
    pub(super) fn new(root: Arc<FileRoot>, metrics: Arc<TftpMetrics>) -> Arc<Self> {
        Arc::new(Shared {
            settings: root.settings.clone(),
            root,
            metrics,
            slots: Mutex::new(Slots::default()),
            epoch: Instant::now(),
        })
    }

    /// `now` as a progress stamp (`Signal::progress`): never 0.
    fn stamp(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX - 1)
            + 1
    }

    fn lock_slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Classifies one datagram from `peer` on the listening socket, received at `now`.
    pub(super) fn admit(
        self: &Arc<Self>,
        datagram: &[u8],
        peer: SocketAddr,
        now: Instant,
    ) -> Admission {
        let m = &self.metrics;
        let req = match Packet::decode(datagram) {
            Ok(Packet::Read(r)) => r,
            Ok(Packet::Write(r)) => {
                m.error(Reason::WriteRequest);
                tracing::info!(%peer, file = %Escaped(r.filename), "tftp write request refused");
                return Admission::Reject(ErrorCode::AccessViolation, "read-only server");
            }
            // ACK/ERROR/DATA on the listening port belong to no transfer here.
            Ok(_) => return Admission::Ignore,
            Err(e) => {
                m.malformed_packets.fetch_add(1, Relaxed);
                tracing::debug!(%peer, error = %e, len = datagram.len(), "tftp malformed request dropped");
                return Admission::Ignore;
            }
        };
        if req.mode == Mode::Other {
            m.error(Reason::BadMode);
            return Admission::Reject(ErrorCode::IllegalOperation, "unsupported mode");
        }
        let mut s = self.lock_slots();
        if s.peers.contains_key(&peer) {
            // The client resent its RRQ before our first packet arrived; the running
            // transfer retransmits on its own timer.
            return Admission::Ignore;
        }
        // The source address of an RRQ is not verified, so a flood of spoofed requests
        // would fill the table (or one client's share of it, under a real client's own
        // address) with transfers that never hear back. Such a transfer has never seen
        // an ACK; one that has is a real client and keeps its slot while it moves. At
        // either cap the oldest silent transfer in its scope gives way: it has had the
        // longest to answer; failing one, the transfer stalled longest, if no forward
        // ACK came for longer than any retransmission timeout would explain. Only when
        // every transfer in scope is moving is the request refused.
        let ip = peer.ip();
        let client_full = s.per_ip.get(&ip).copied().unwrap_or(0) >= self.settings.max_per_client;
        let table_full = s.total >= self.settings.max_transfers;
        let mut evicted = None;
        if client_full || table_full {
            let stall = u64::try_from(self.settings.max_timeout.as_millis()).unwrap_or(u64::MAX);
            let stalled_before = self.stamp(now).saturating_sub(stall);
            // A victim of the same address frees both caps at once.
            evicted = if client_full {
                s.victim(|p| p.ip() == ip, stalled_before)
            } else {
                s.victim(|_| true, stalled_before)
            };
            if evicted.is_none() {
                if table_full {
                    m.error(Reason::Busy);
                    tracing::warn!(%peer, max = self.settings.max_transfers, "tftp busy, request refused");
                    return Admission::Reject(ErrorCode::NotDefined, "server busy");
                }
                m.error(Reason::PerClientLimit);
                tracing::info!(%peer, max = self.settings.max_per_client, "tftp per-client limit reached");
                return Admission::Reject(
                    ErrorCode::NotDefined,
                    "too many transfers from this client",
                );
            }
        }
        if let Some(victim) = evicted {
            s.evict(victim);
            m.transfers_evicted.fetch_add(1, Relaxed);
            m.transfers_active.fetch_sub(1, Relaxed);
            tracing::info!(%peer, %victim, "tftp at its cap, evicted a transfer that never received an ACK or stalled");
        }
        *s.per_ip.entry(peer.ip()).or_default() += 1;
        s.total += 1;
        let seq = s.next_seq;
        s.next_seq += 1;
        let signal = Arc::new(Signal::default());
        s.peers.insert(
            peer,
            Held {
                seq,
                signal: signal.clone(),
            },
        );
        drop(s);
        m.transfers_active.fetch_add(1, Relaxed);
        Admission::Start(Accepted {
            slot: Slot {
                shared: self.clone(),
                peer,
                seq,
                signal,
            },
            datagram: datagram.to_vec(),
            evicted,
        })
    }

    /// Resolves, loads and negotiates an accepted request. Blocking (file system).
    pub(super) fn prepare(
        &self,
        datagram: &[u8],
        now: std::time::Instant,
    ) -> Result<Prepared, Refusal> {
        let Ok(Packet::Read(req)) = Packet::decode(datagram) else {
            // Admission decoded it already; unreachable in practice.
            return Err(Refusal::Io);
        };
        let st = &self.settings;
        let (target, opened) = self.root.open(req.filename)?;
        if opened.meta.len() > st.max_file_size {
            return Err(Refusal::TooLarge);
        }
        let count = |source| match source {
            Source::Hit => self.metrics.cache_hits.fetch_add(1, Relaxed),
            Source::Miss => self.metrics.cache_misses.fetch_add(1, Relaxed),
        };
        let data = match req.mode {
            Mode::Netascii => {
                let conv = self.root.cache.load_netascii(opened)?;
                match conv.converted_from {
                    None => count(Source::Hit),
                    Some(source) => {
                        self.metrics.netascii_conversions.fetch_add(1, Relaxed);
                        count(source)
                    }
                };
                conv.data
            }
            _ => {
                let (data, source) = self.root.cache.load(opened)?;
                count(source);
                data
            }
        };
        let limits = Limits {
            max_blksize: st.max_blksize,
            max_windowsize: st.max_windowsize,
            default_timeout: st.timeout,
            max_timeout_secs: st.max_timeout.as_secs(),
        };
        let neg = negotiate(&req.options, &limits, data.len() as u64);
        let budget = Budget {
            max_retries: st.retries,
            lifetime: st.transfer_deadline,
        };
        Ok(Prepared {
            file: target,
            blksize: neg.blksize,
            windowsize: neg.windowsize,
            transfer: Transfer::new(data, &neg, budget, now),
        })
    }
}

/// A transfer ready to run.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// Resolved name below the root, for logs.
    pub file: String,
    /// Agreed blksize, for logs.
    pub blksize: u16,
    /// Agreed windowsize, for logs.
    pub windowsize: u16,
    /// The state machine.
    pub transfer: Transfer,
}

/// Logs and counts a refused request. Call it in the transfer's span, which names the
/// peer; the file is the requested name, escaped, as it never resolved.
pub(crate) fn note_refusal(metrics: &TftpMetrics, datagram: &[u8], r: Refusal) {
    metrics.error(Reason::Path(r));
    let file = match Packet::decode(datagram) {
        Ok(Packet::Read(req)) => Escaped(req.filename).to_string(),
        _ => String::new(),
    };
    if r.is_policy() {
        tracing::warn!(%file, reason = r.label(), "tftp request refused by path policy");
    } else {
        tracing::info!(%file, reason = r.label(), "tftp request failed");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn rrq() -> Vec<u8> {
        let mut d = vec![0, 1];
        d.extend_from_slice(b"f\0octet\0");
        d
    }

    fn peer(n: u8) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, n], 2000))
    }

    fn started(a: Admission) -> Accepted {
        match a {
            Admission::Start(acc) => acc,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_transfer_that_acked_once_and_stalled_gives_way_one_that_moves_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let settings = crate::config::TftpSettings {
            root: dir.path().to_owned(),
            max_transfers: 2,
            max_per_client: 2,
            max_timeout: Duration::from_secs(5),
            ..Default::default()
        };
        let shared = Shared::new(FileRoot::new(settings), Arc::new(TftpMetrics::default()));
        let t0 = Instant::now();
        let a = started(shared.admit(&rrq(), peer(1), t0));
        let b = started(shared.admit(&rrq(), peer(2), t0));
        a.slot.mark_progress(t0);
        b.slot.mark_progress(t0);
        // Both moving: a third request is refused.
        let t1 = t0 + Duration::from_secs(1);
        assert!(matches!(
            shared.admit(&rrq(), peer(3), t1),
            Admission::Reject(..)
        ));
        // b keeps ACKing, a went quiet after its first ACK: past the longest
        // retransmission timeout, a is the one that gives way.
        let t2 = t0 + Duration::from_secs(6);
        b.slot.mark_progress(t2);
        let c = started(shared.admit(&rrq(), peer(3), t2));
        assert_eq!(c.evicted, Some(peer(1)));
        assert!(a.slot.is_evicted() && !b.slot.is_evicted());
        // A transfer that never ACKed goes before any stalled one.
        let t3 = t2 + Duration::from_secs(10);
        let d = started(shared.admit(&rrq(), peer(4), t3));
        assert_eq!(d.evicted, Some(peer(3)), "c never ACKed");
        d.slot.mark_progress(t3);
        let e = started(shared.admit(&rrq(), peer(5), t3));
        assert_eq!(e.evicted, Some(peer(2)), "b stalled since t2");
    }
}
