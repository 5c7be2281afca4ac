//! Admission: turns a datagram on the listening port into "start a transfer", "answer
//! with an error" or "ignore", and enforces the concurrency limits. Shared by the
//! per-transfer-port and single-port shells.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use super::cache::Source;
use super::metrics::{Reason, TftpMetrics};
use super::options::{negotiate, Limits};
use super::packet::{ErrorCode, Escaped, Mode, Packet};
use super::path::Refusal;
use super::root::FileRoot;
use super::transfer::{to_netascii, Transfer};
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
}

#[derive(Debug, Default)]
struct Slots {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
    peers: HashSet<SocketAddr>,
}

/// A reserved transfer slot; released on drop, whatever way the transfer ends.
#[derive(Debug)]
pub(crate) struct Slot {
    shared: Arc<Shared>,
    peer: SocketAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = self.shared.lock_slots();
        s.total -= 1;
        s.peers.remove(&self.peer);
        if let Some(n) = s.per_ip.get_mut(&self.peer.ip()) {
            *n -= 1;
            if *n == 0 {
                s.per_ip.remove(&self.peer.ip());
            }
        }
        self.shared.metrics.transfers_active.fetch_sub(1, Relaxed);
    }
}

/// An accepted read request, owned so it can move to another task.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub slot: Slot,
    /// The request datagram, decoded again where it is used.
    pub datagram: Vec<u8>,
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
        })
    }

    fn lock_slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Classifies one datagram from `peer` on the listening socket.
    pub(super) fn admit(self: &Arc<Self>, datagram: &[u8], peer: SocketAddr) -> Admission {
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
        if s.peers.contains(&peer) {
            // The client resent its RRQ before our first packet arrived; the running
            // transfer retransmits on its own timer.
            return Admission::Ignore;
        }
        if s.total >= self.settings.max_transfers {
            m.error(Reason::Busy);
            tracing::warn!(%peer, max = self.settings.max_transfers, "tftp busy, request refused");
            return Admission::Reject(ErrorCode::NotDefined, "server busy");
        }
        let per_ip = s.per_ip.entry(peer.ip()).or_default();
        if *per_ip >= self.settings.max_per_client {
            m.error(Reason::PerClientLimit);
            tracing::info!(%peer, max = self.settings.max_per_client, "tftp per-client limit reached");
            return Admission::Reject(ErrorCode::NotDefined, "too many transfers from this client");
        }
        *per_ip += 1;
        s.total += 1;
        s.peers.insert(peer);
        drop(s);
        m.transfers_active.fetch_add(1, Relaxed);
        Admission::Start(Accepted {
            slot: Slot {
                shared: self.clone(),
                peer,
            },
            datagram: datagram.to_vec(),
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
        let (data, source) = self.root.cache.load(opened)?;
        match source {
            Source::Hit => self.metrics.cache_hits.fetch_add(1, Relaxed),
            Source::Miss => self.metrics.cache_misses.fetch_add(1, Relaxed),
        };
        let data: Arc<[u8]> = match req.mode {
            Mode::Netascii => to_netascii(&data).into(),
            _ => data,
        };
        let limits = Limits {
            max_blksize: st.max_blksize,
            max_windowsize: st.max_windowsize,
            default_timeout: st.timeout,
        };
        let neg = negotiate(&req.options, &limits, data.len() as u64);
        Ok(Prepared {
            file: target,
            blksize: neg.blksize,
            windowsize: neg.windowsize,
            transfer: Transfer::new(data, &neg, st.retries, now),
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
