//! The DHCP socket loop: the I/O shell around the pure engine.
//!
//! - One reader task per interface socket feeds datagrams into one engine task, so all
//!   decisions are made in arrival order against one in-memory state, with no locks.
//! - Replies without lease changes (OFFER, NAK, INFORM) are sent at once.
//! - Lease changes go to the committer, which writes everything queued since its last
//!   flush as one batch and one flush (group commit), and only then sends the ACKs that
//!   depended on them. An ACK never leaves before its lease is on disk.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dhcproto::v4::Message;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::engine::{Engine, Interface, PacketContext, Reply, Responsibility};
use super::metrics::DhcpMetrics;
use super::reply::Destination;
use super::wire::{self, MAX_REQUEST_LEN};
use crate::lease::{LeaseEffect, LeaseStore};
use crate::mac::MacAddr;

/// Decides, per request, whether this member should answer (ARCHITECTURE.md "DHCP
/// decisions" 2). A single instance answers everything.
pub type ResponsibilityFn = Arc<dyn Fn(&Message, u64) -> Responsibility + Send + Sync>;

/// Most datagrams the engine queue holds before new ones are dropped (and counted).
const QUEUE_DEPTH: usize = 16_384;
/// Most queued changes folded into one flush.
const MAX_BATCH: usize = 16_384;

/// One bound socket and the interface it serves.
pub struct Listener {
    /// The interface.
    pub interface: Interface,
    /// Its socket.
    pub socket: UdpSocket,
}

/// Everything the server needs.
pub struct ServerParts {
    /// Bound sockets.
    pub listeners: Vec<Listener>,
    /// The engine, already loaded with the stored leases.
    pub engine: Engine,
    /// Durable lease store.
    pub store: Arc<dyn LeaseStore>,
    /// Metrics to update.
    pub metrics: Arc<DhcpMetrics>,
    /// Server port; relays are answered on it and clients on `port + 1` (67 → 68).
    pub port: u16,
    /// How often expired leases are reclaimed.
    pub reclaim_interval: Duration,
    /// Ownership decision; `None` answers everything.
    pub responsibility: Option<ResponsibilityFn>,
}

/// Errors that end the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A socket failed in a way that cannot be retried.
    #[error("DHCP socket on {interface}: {source}")]
    Socket {
        /// Interface name.
        interface: String,
        /// OS error.
        source: std::io::Error,
    },
}

/// Current Unix time in seconds; the only clock the DHCP path reads.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

struct Inbound {
    listener: usize,
    data: Vec<u8>,
    from: SocketAddr,
}

struct Outgoing {
    listener: usize,
    bytes: Vec<u8>,
    to: SocketAddr,
}

/// What to do after one datagram.
enum Action {
    Nothing,
    /// A reply that depends on no lease change.
    Send(Outgoing),
    /// Lease changes to make durable, and the reply (if any) that waits for them.
    Commit(CommitJob),
}

struct CommitJob {
    effects: Vec<LeaseEffect>,
    reply: Option<Outgoing>,
    queued: Instant,
}

/// Runs until `shutdown` is cancelled or a socket fails. On shutdown, changes already
/// queued are flushed and their replies sent before returning.
pub async fn run(parts: ServerParts, shutdown: CancellationToken) -> Result<(), ServerError> {
    let ServerParts {
        listeners,
        mut engine,
        store,
        metrics,
        port,
        reclaim_interval,
        responsibility,
    } = parts;
    let interfaces: Vec<Interface> = listeners.iter().map(|l| l.interface.clone()).collect();
    let sockets: Arc<Vec<UdpSocket>> = Arc::new(listeners.into_iter().map(|l| l.socket).collect());

    let (in_tx, mut in_rx) = mpsc::channel::<Inbound>(QUEUE_DEPTH);
    let (fatal_tx, mut fatal_rx) = mpsc::channel::<ServerError>(1);
    let readers = CancellationToken::new();
    for (i, iface) in interfaces.iter().enumerate() {
        tokio::spawn(read_loop(
            i,
            iface.name.clone(),
            sockets.clone(),
            in_tx.clone(),
            fatal_tx.clone(),
            metrics.clone(),
            readers.clone(),
        ));
    }
    drop(in_tx);

    let (commit_tx, commit_rx) = mpsc::unbounded_channel::<CommitJob>();
    let committer = tokio::spawn(commit_loop(
        store,
        commit_rx,
        sockets.clone(),
        metrics.clone(),
    ));

    let mut tick = tokio::time::interval(reclaim_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut out_buf = Vec::with_capacity(600);
    let result = loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break Ok(()),
            Some(err) = fatal_rx.recv() => break Err(err),
            Some(first) = in_rx.recv() => {
                let now = unix_now();
                let mut next = Some(first);
                // Drain what is already queued before going back to select!.
                let mut budget = 256;
                while let Some(pkt) = next.take() {
                    let ctx = Context { engine: &mut engine, interfaces: &interfaces, metrics: &metrics, responsibility: responsibility.as_ref(), port, now };
                    match ctx.handle(pkt, &mut out_buf) {
                        Action::Nothing => {}
                        Action::Send(out) => send(&sockets, out, &metrics).await,
                        Action::Commit(job) => {
                            let _ = commit_tx.send(job);
                        }
                    }
                    budget -= 1;
                    if budget > 0 {
                        next = in_rx.try_recv().ok();
                    }
                }
            }
            _ = tick.tick() => {
                let freed = engine.handle_tick(unix_now());
                if freed > 0 {
                    debug!(freed, "reclaimed expired leases and offers");
                }
                metrics.leases.set(engine.leases().count() as u64);
                if let Ok(mut p) = metrics.pools.lock() {
                    *p = engine.pool_usage();
                }
            }
        }
    };
    readers.cancel();
    drop(commit_tx);
    // Let queued commits finish so no durable change loses its reply.
    let _ = committer.await;
    info!("DHCP server stopped");
    result
}

struct Context<'a> {
    engine: &'a mut Engine,
    interfaces: &'a [Interface],
    metrics: &'a DhcpMetrics,
    responsibility: Option<&'a ResponsibilityFn>,
    port: u16,
    now: u64,
}

impl Context<'_> {
    /// Decodes and decides one datagram.
    fn handle(self, pkt: Inbound, buf: &mut Vec<u8>) -> Action {
        let msg = match wire::decode_request(&pkt.data) {
            Ok(m) => m,
            Err(reason) => {
                self.metrics.drop(reason);
                debug!(from = %pkt.from, len = pkt.data.len(), %reason, "dropped datagram");
                return Action::Nothing;
            }
        };
        let responsibility = self
            .responsibility
            .map_or(Responsibility::Mine, |f| f(&msg, self.now));
        let ctx = PacketContext {
            interface: &self.interfaces[pkt.listener],
            responsibility,
            now: self.now,
        };
        let decision = self.engine.handle_message(&msg, &ctx);
        self.metrics.outcome(&decision.outcome);
        if let Some(mac) = MacAddr::from_chaddr(msg.chaddr()) {
            debug!(%mac, xid = msg.xid(), kind = ?msg.opts().msg_type(), outcome = ?decision.outcome, iface = %ctx.interface.name, "decided");
        }
        let out = decision
            .reply
            .and_then(|r| self.encode(r, pkt.listener, buf));
        if decision.effects.is_empty() {
            return out.map(Action::Send).unwrap_or(Action::Nothing);
        }
        Action::Commit(CommitJob {
            effects: decision.effects,
            reply: out,
            queued: Instant::now(),
        })
    }

    fn encode(&self, reply: Reply, listener: usize, buf: &mut Vec<u8>) -> Option<Outgoing> {
        if let Err(e) = wire::encode_reply(&reply.message, buf) {
            warn!(error = %e, "could not encode reply");
            return None;
        }
        let client_port = self.port.wrapping_add(1);
        let to = match reply.destination {
            Destination::Relay(ip) => SocketAddrV4::new(ip, self.port),
            Destination::Unicast(ip) => SocketAddrV4::new(ip, client_port),
            Destination::Broadcast => SocketAddrV4::new(Ipv4Addr::BROADCAST, client_port),
        };
        Some(Outgoing {
            listener,
            bytes: buf.clone(),
            to: SocketAddr::V4(to),
        })
    }
}

async fn send(sockets: &[UdpSocket], out: Outgoing, metrics: &DhcpMetrics) {
    match sockets[out.listener].send_to(&out.bytes, out.to).await {
        Ok(_) => metrics.sent.inc(),
        Err(e) => {
            metrics.send_errors.inc();
            debug!(to = %out.to, error = %e, "send failed");
        }
    }
}

async fn read_loop(
    index: usize,
    name: String,
    sockets: Arc<Vec<UdpSocket>>,
    tx: mpsc::Sender<Inbound>,
    fatal: mpsc::Sender<ServerError>,
    metrics: Arc<DhcpMetrics>,
    stop: CancellationToken,
) {
    // One byte more than we accept, so an oversized datagram is seen as such.
    let mut buf = vec![0u8; MAX_REQUEST_LEN + 1];
    loop {
        let res = tokio::select! {
            _ = stop.cancelled() => return,
            r = sockets[index].recv_from(&mut buf) => r,
        };
        match res {
            Ok((n, from)) => {
                metrics.received.inc();
                let pkt = Inbound {
                    listener: index,
                    data: buf[..n].to_vec(),
                    from,
                };
                if tx.try_send(pkt).is_err() {
                    metrics.queue_full.inc();
                }
            }
            // ICMP errors surface as ECONNREFUSED on Linux; they are not fatal.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => {
                error!(interface = %name, error = %source, "DHCP socket failed");
                let _ = fatal
                    .send(ServerError::Socket {
                        interface: name,
                        source,
                    })
                    .await;
                return;
            }
        }
    }
}

async fn commit_loop(
    store: Arc<dyn LeaseStore>,
    mut rx: mpsc::UnboundedReceiver<CommitJob>,
    sockets: Arc<Vec<UdpSocket>>,
    metrics: Arc<DhcpMetrics>,
) {
    while let Some(first) = rx.recv().await {
        let mut jobs = vec![first];
        while jobs.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let mut effects = Vec::with_capacity(jobs.len());
        let mut replies = Vec::with_capacity(jobs.len());
        let mut queued = Vec::with_capacity(jobs.len());
        for job in jobs {
            effects.extend(job.effects);
            replies.extend(job.reply);
            queued.push(job.queued);
        }
        let n = effects.len() as u64;
        let store = store.clone();
        let result = tokio::task::spawn_blocking(move || store.commit(&effects)).await;
        match result {
            Ok(Ok(())) => {
                metrics.commits.inc();
                metrics.committed_effects.add(n);
                for q in queued {
                    metrics.commit_latency.observe(q.elapsed().as_secs_f64());
                }
                for out in replies {
                    send(&sockets, out, &metrics).await;
                }
            }
            Ok(Err(e)) => {
                // The replies are dropped: the clients retry and the engine re-persists.
                metrics.commit_errors.inc();
                error!(error = %e, changes = n, "lease commit failed; replies withheld");
            }
            Err(e) => {
                metrics.commit_errors.inc();
                error!(error = %e, "lease commit task failed; replies withheld");
            }
        }
    }
}
