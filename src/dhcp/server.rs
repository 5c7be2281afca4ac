//! The DHCP socket loop: the I/O shell around the pure engine.
//!
//! - One thread ("dhcp-engine", its own single-threaded runtime) reads every interface
//!   socket and decides each request in arrival order against one in-memory state: no
//!   locks, no cross-thread hand-off per packet.
//! - Replies without lease changes (OFFER, NAK, INFORM) are sent at once.
//! - Lease changes go to the committer thread, which writes everything queued since its
//!   last flush as one batch and one flush (group commit), and only then sends the ACKs
//!   that depended on them. An ACK never leaves before its lease is on disk.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsFd;
use std::sync::{mpsc as std_mpsc, Arc};
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dhcproto::v4::Message;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::arp;
use super::engine::{Engine, Interface, PacketContext, Reply, Responsibility};
use super::metrics::DhcpMetrics;
use super::policy::HostPolicies;
use super::reply::Destination;
use super::wire::{self, MAX_REQUEST_LEN};
use crate::lease::{LeaseEffect, LeaseStore};
use crate::mac::MacAddr;

/// Decides, per request, whether this member should answer (ARCHITECTURE.md "DHCP
/// decisions" 2). A single instance answers everything.
pub type ResponsibilityFn = Arc<dyn Fn(&Message, u64) -> Responsibility + Send + Sync>;

/// Most queued changes folded into one flush.
const MAX_BATCH: usize = 16_384;
/// Under load (the previous flush covered more than one request), the committer waits
/// this long for more changes before flushing: fewer, larger flushes cost far less CPU in
/// sled, and a few milliseconds on an ACK are invisible to DHCP clients. An idle server
/// flushes at once.
const COMMIT_WINDOW: Duration = Duration::from_millis(3);
/// Datagrams read from one socket before looking at the others, the clock and shutdown.
const READ_BURST: usize = 64;

/// One bound socket and the interface it serves.
pub struct Listener {
    /// The interface.
    pub interface: Interface,
    /// Its socket, non-blocking (see [`super::socket::bind`]).
    pub socket: std::net::UdpSocket,
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
    /// The operator's run-time allow/deny per MAC.
    pub policies: Arc<HostPolicies>,
    /// Operator changes to apply; `None`: no operator API.
    pub control: Option<tokio::sync::mpsc::Receiver<Control>>,
    /// Where run-time reservations are kept; `None`: not persisted (tests).
    pub operator_store: Option<Arc<crate::lease::SledStore>>,
}

/// An operator's change to the engine's state, applied on the engine thread between
/// packets; `done` answers once the change is durable.
#[derive(Debug)]
pub enum Control {
    /// Forget the lease on an address (`Ok(false)`: there was none).
    Forget {
        /// The address.
        ip: std::net::Ipv4Addr,
        /// Answered after the flush.
        done: tokio::sync::oneshot::Sender<Result<bool, String>>,
    },
    /// Reserve an address for a MAC (durable before the answer).
    Reserve {
        /// The reservation.
        reservation: super::reserve::Reservation,
        /// Answered once stored.
        done: ReserveDone,
    },
    /// Remove a MAC's run-time reservation.
    Unreserve {
        /// The MAC.
        mac: crate::mac::MacAddr,
        /// Answered once stored.
        done: ReserveDone,
    },
}

/// Reply channel of a reservation change.
pub type ReserveDone = tokio::sync::oneshot::Sender<Result<(), super::reserve::ReserveError>>;

/// Where the operator API sends [`Control`] messages.
pub type ControlSender = tokio::sync::mpsc::Sender<Control>;

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
    /// A thread could not be started.
    #[error("starting the DHCP threads: {0}")]
    Thread(std::io::Error),
}

/// Current Unix time in seconds; the only clock the DHCP path reads.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

struct Outgoing {
    listener: usize,
    bytes: Vec<u8>,
    to: SocketAddr,
}

struct CommitJob {
    effects: Vec<LeaseEffect>,
    reply: Option<Outgoing>,
    queued: Instant,
    /// Told the outcome once the effects are durable (operator changes).
    done: Option<tokio::sync::oneshot::Sender<Result<bool, String>>>,
}

/// Runs until `shutdown` is cancelled or a socket fails. On shutdown, changes already
/// queued are flushed and their replies sent before returning.
pub async fn run(parts: ServerParts, shutdown: CancellationToken) -> Result<(), ServerError> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("dhcp-engine".into())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(ServerError::Thread)
                .and_then(|rt| rt.block_on(engine_loop(parts, shutdown)));
            let _ = done_tx.send(result);
        })
        .map_err(ServerError::Thread)?;
    // A dropped sender means the engine thread panicked: report it, never a clean stop.
    done_rx.await.unwrap_or_else(|_| {
        Err(ServerError::Thread(std::io::Error::other(
            "the DHCP engine thread panicked",
        )))
    })
}

async fn engine_loop(parts: ServerParts, shutdown: CancellationToken) -> Result<(), ServerError> {
    let ServerParts {
        listeners,
        mut engine,
        store,
        metrics,
        port,
        reclaim_interval,
        responsibility,
        policies,
        control,
        operator_store,
    } = parts;
    let mut control = control;
    let mut interfaces = Vec::with_capacity(listeners.len());
    let mut sockets = Vec::with_capacity(listeners.len());
    let mut committer_sockets = Vec::with_capacity(listeners.len());
    for l in listeners {
        let socket_err = |source| ServerError::Socket {
            interface: l.interface.name.clone(),
            source,
        };
        committer_sockets.push(l.socket.try_clone().map_err(socket_err)?);
        sockets.push(UdpSocket::from_std(l.socket).map_err(socket_err)?);
        interfaces.push(l.interface);
    }

    let (commit_tx, commit_rx) = std_mpsc::channel::<CommitJob>();
    let committer = {
        let metrics = metrics.clone();
        std::thread::Builder::new()
            .name("dhcp-commit".into())
            .spawn(move || commit_loop(store, commit_rx, committer_sockets, metrics))
            .map_err(ServerError::Thread)?
    };

    let mut ctx = LoopState {
        interfaces: &interfaces,
        metrics: &metrics,
        responsibility: responsibility.as_ref(),
        policies: &policies,
        port,
        out: Vec::with_capacity(600),
    };
    let mut buf = vec![0u8; MAX_REQUEST_LEN + 1];
    // Pool usage and lease count from the start, not only after the first tick.
    reclaim(&mut engine, &metrics);
    metrics.listening.set(1);
    let mut next_tick = Instant::now() + reclaim_interval;
    let result = 'outer: loop {
        if shutdown.is_cancelled() {
            break Ok(());
        }
        if Instant::now() >= next_tick {
            next_tick = Instant::now() + reclaim_interval;
            reclaim(&mut engine, &metrics);
        }
        // Operator changes are applied between bursts, also under load.
        if let Some(rx) = control.as_mut() {
            while let Ok(cmd) = rx.try_recv() {
                apply_control(&mut engine, cmd, &commit_tx, operator_store.as_deref());
            }
        }
        // Drain what the sockets hold, a burst per socket at a time.
        let mut busy = false;
        let now = unix_now();
        for (i, socket) in sockets.iter().enumerate() {
            for _ in 0..READ_BURST {
                match socket.try_recv_from(&mut buf) {
                    Ok((n, from)) => {
                        busy = true;
                        metrics.received.inc();
                        match ctx.handle(&mut engine, i, socket, &buf[..n], from, now) {
                            Action::Nothing => {}
                            Action::Send(listener, to) => {
                                send_now(&sockets[listener], &ctx.out, to, &metrics).await
                            }
                            Action::Commit(job) => {
                                let _ = commit_tx.send(job);
                            }
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    // ICMP errors surface as ECONNREFUSED on Linux; they are not fatal.
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::ConnectionRefused | ErrorKind::Interrupted
                        ) => {}
                    Err(source) => {
                        error!(interface = %interfaces[i].name, error = %source, "DHCP socket failed");
                        break 'outer Err(ServerError::Socket {
                            interface: interfaces[i].name.clone(),
                            source,
                        });
                    }
                }
            }
        }
        if busy {
            continue;
        }
        let readable = std::future::poll_fn(|cx| {
            for s in &sockets {
                if let Poll::Ready(r) = s.poll_recv_ready(cx) {
                    return Poll::Ready(r);
                }
            }
            Poll::Pending
        });
        let command = async {
            match control.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            _ = tokio::time::sleep_until(next_tick.into()) => {}
            _ = readable => {}
            Some(cmd) = command => apply_control(&mut engine, cmd, &commit_tx, operator_store.as_deref()),
        }
    };
    metrics.listening.set(0);
    drop(commit_tx);
    // Let queued commits finish so no durable change loses its reply.
    let _ = committer.join();
    info!(
        received = metrics.received.get(),
        sent = metrics.sent.get(),
        commits = metrics.commits.get(),
        committed_changes = metrics.committed_effects.get(),
        "DHCP server stopped"
    );
    result
}

fn apply_control(
    engine: &mut Engine,
    cmd: Control,
    commit_tx: &std_mpsc::Sender<CommitJob>,
    store: Option<&crate::lease::SledStore>,
) {
    use super::reserve::ReserveError;
    // Stores a reservation change; on failure the engine change is undone by the caller.
    let persist = |mac, r: Option<&super::reserve::Reservation>| match store {
        Some(s) => s.set_reservation(mac, r).map_err(|e| {
            error!(error = %e, "reservation not stored");
            e
        }),
        None => Ok(()),
    };
    match cmd {
        Control::Reserve { reservation, done } => {
            let previous = engine
                .reservations()
                .into_iter()
                .find(|r| r.mac == reservation.mac);
            let result = engine.reserve(&reservation, unix_now()).and_then(|()| {
                persist(reservation.mac, Some(&reservation)).map_err(|_| {
                    let _ = engine.unreserve(&reservation.mac);
                    if let Some(p) = &previous {
                        let _ = engine.reserve(p, unix_now());
                    }
                    ReserveError::Store
                })
            });
            if result.is_ok() {
                info!(mac = %reservation.mac, ip = %reservation.ip, "reservation set by the operator");
            }
            let _ = done.send(result);
        }
        Control::Unreserve { mac, done } => {
            let previous = engine.reservations().into_iter().find(|r| r.mac == mac);
            let result = engine.unreserve(&mac).and_then(|()| {
                persist(mac, None).map_err(|_| {
                    if let Some(p) = &previous {
                        let _ = engine.reserve(p, unix_now());
                    }
                    ReserveError::Store
                })
            });
            let _ = done.send(result);
        }
        Control::Forget { ip, done } => match engine.forget(ip) {
            None => {
                let _ = done.send(Ok(false));
            }
            Some(effect) => {
                info!(%ip, "lease forgotten by the operator");
                let _ = commit_tx.send(CommitJob {
                    effects: vec![effect],
                    reply: None,
                    queued: Instant::now(),
                    done: Some(done),
                });
            }
        },
    }
}

fn reclaim(engine: &mut Engine, metrics: &DhcpMetrics) {
    let freed = engine.handle_tick(unix_now());
    if freed > 0 {
        debug!(freed, "reclaimed expired leases and offers");
    }
    metrics.leases.set(engine.leases().count() as u64);
    if let Ok(mut p) = metrics.pools.lock() {
        *p = engine.pool_usage();
    }
}

/// What to do after one datagram.
enum Action {
    Nothing,
    /// Send the reply now in `LoopState::out`: it depends on no lease change.
    Send(usize, SocketAddr),
    /// Lease changes to make durable, and the reply (if any) that waits for them.
    Commit(CommitJob),
}

struct LoopState<'a> {
    interfaces: &'a [Interface],
    metrics: &'a DhcpMetrics,
    responsibility: Option<&'a ResponsibilityFn>,
    policies: &'a HostPolicies,
    port: u16,
    /// Encoded reply of the last `Action::Send`.
    out: Vec<u8>,
}

impl LoopState<'_> {
    /// Decodes and decides one datagram.
    fn handle(
        &mut self,
        engine: &mut Engine,
        listener: usize,
        socket: &UdpSocket,
        data: &[u8],
        from: SocketAddr,
        now: u64,
    ) -> Action {
        let msg = match wire::decode_request(data) {
            Ok(m) => m,
            Err(reason) => {
                self.metrics.drop(reason);
                debug!(%from, len = data.len(), %reason, "dropped datagram");
                return Action::Nothing;
            }
        };
        use dhcproto::v4::MessageType as T;
        self.metrics.requests.inc(match msg.opts().msg_type() {
            Some(T::Discover) => "discover",
            Some(T::Request) => "request",
            Some(T::Decline) => "decline",
            Some(T::Release) => "release",
            Some(T::Inform) => "inform",
            _ => "other",
        });
        let responsibility = self
            .responsibility
            .map_or(Responsibility::Mine, |f| f(&msg, now));
        let policy = MacAddr::from_chaddr(msg.chaddr()).and_then(|m| self.policies.lookup(&m));
        let ctx = PacketContext {
            interface: &self.interfaces[listener],
            responsibility,
            policy,
            now,
        };
        let decision = engine.handle_message(&msg, &ctx);
        self.metrics.outcome(&decision.outcome);
        if tracing::enabled!(tracing::Level::DEBUG) {
            if let Some(mac) = MacAddr::from_chaddr(msg.chaddr()) {
                debug!(%mac, xid = msg.xid(), kind = ?msg.opts().msg_type(), outcome = ?decision.outcome, iface = %ctx.interface.name, "decided");
            }
        }
        let to = decision
            .reply
            .and_then(|r| self.encode(r, listener, socket));
        if decision.effects.is_empty() {
            return to.map_or(Action::Nothing, |to| Action::Send(listener, to));
        }
        Action::Commit(CommitJob {
            effects: decision.effects,
            reply: to.map(|to| Outgoing {
                listener,
                bytes: self.out.clone(),
                to,
            }),
            queued: Instant::now(),
            done: None,
        })
    }

    /// Encodes `reply` into `self.out`; returns where it goes.
    fn encode(&mut self, reply: Reply, listener: usize, socket: &UdpSocket) -> Option<SocketAddr> {
        if let Err(e) = wire::encode_reply(&reply.message, &mut self.out) {
            warn!(error = %e, "could not encode reply");
            return None;
        }
        let client_port = self.port.wrapping_add(1);
        let to = match reply.destination {
            Destination::Relay(ip) => SocketAddrV4::new(ip, self.port),
            Destination::Unicast(ip) => SocketAddrV4::new(ip, client_port),
            Destination::Broadcast => SocketAddrV4::new(Ipv4Addr::BROADCAST, client_port),
            Destination::UnicastNew(ip, mac) => {
                match arp::add_entry(socket, &self.interfaces[listener].name, ip, mac) {
                    Ok(()) => SocketAddrV4::new(ip, client_port),
                    Err(e) => {
                        // RFC 2131 §4.1: without an ARP entry, broadcast instead.
                        debug!(error = %e, "cannot add ARP entry; broadcasting");
                        SocketAddrV4::new(Ipv4Addr::BROADCAST, client_port)
                    }
                }
            }
        };
        Some(SocketAddr::V4(to))
    }
}

async fn send_now(socket: &UdpSocket, bytes: &[u8], to: SocketAddr, metrics: &DhcpMetrics) {
    let res = match socket.try_send_to(bytes, to) {
        Err(e) if e.kind() == ErrorKind::WouldBlock => socket.send_to(bytes, to).await,
        other => other,
    };
    count_send(res, to, metrics);
}

fn count_send(res: std::io::Result<usize>, to: SocketAddr, metrics: &DhcpMetrics) {
    match res {
        Ok(_) => metrics.sent.inc(),
        Err(e) => {
            metrics.send_errors.inc();
            debug!(%to, error = %e, "send failed");
        }
    }
}

/// Sends on a non-blocking std socket, waiting (bounded) for buffer space.
fn send_blocking(
    socket: &std::net::UdpSocket,
    bytes: &[u8],
    to: SocketAddr,
) -> std::io::Result<usize> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut tries = 0;
    loop {
        match socket.send_to(bytes, to) {
            Err(e) if e.kind() == ErrorKind::WouldBlock && tries < 10 => {
                tries += 1;
                let mut fds = [PollFd::new(socket.as_fd(), PollFlags::POLLOUT)];
                let _ = poll(&mut fds, PollTimeout::from(100u16));
            }
            other => return other,
        }
    }
}

fn commit_loop(
    store: Arc<dyn LeaseStore>,
    rx: std_mpsc::Receiver<CommitJob>,
    sockets: Vec<std::net::UdpSocket>,
    metrics: Arc<DhcpMetrics>,
) {
    let mut under_load = false;
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        if under_load {
            // Sleep out the window rather than wait on the channel: a waiting receiver
            // is woken (a futex call and a context switch on both threads) by every job.
            std::thread::sleep(COMMIT_WINDOW);
        }
        jobs.extend(rx.try_iter().take(MAX_BATCH - 1));
        under_load = jobs.len() > 1;
        let mut effects = Vec::with_capacity(jobs.len());
        let mut replies = Vec::with_capacity(jobs.len());
        let mut queued = Vec::with_capacity(jobs.len());
        let mut waiting = Vec::new();
        for job in jobs {
            effects.extend(job.effects);
            replies.extend(job.reply);
            queued.push(job.queued);
            waiting.extend(job.done);
        }
        let result = store.commit(&effects);
        for done in waiting {
            let _ = done.send(match &result {
                Ok(()) => Ok(true),
                Err(e) => Err(e.to_string()),
            });
        }
        match result {
            Ok(()) => {
                metrics.commits.inc();
                metrics.committed_effects.add(effects.len() as u64);
                for q in queued {
                    metrics.commit_latency.observe(q.elapsed().as_secs_f64());
                }
                for out in replies {
                    let res = send_blocking(&sockets[out.listener], &out.bytes, out.to);
                    count_send(res, out.to, &metrics);
                }
            }
            Err(e) => {
                // The replies are withheld: the clients retry and the engine re-persists.
                metrics.commit_errors.inc();
                error!(error = %e, changes = effects.len(), "lease commit failed; replies withheld");
            }
        }
    }
}
