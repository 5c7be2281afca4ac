//! The DHCP socket loop: the I/O shell around the pure engine.
//!
//! - One thread ("dhcp-engine", its own single-threaded runtime) reads every interface
//!   socket and decides each request in arrival order against one in-memory state: no
//!   locks, no cross-thread hand-off per packet.
//! - Replies without lease changes (OFFER, NAK, INFORM) are sent at once.
//! - Lease changes go to the store's committer, which writes everything queued since its
//!   last flush with one flush (group commit), and only then sends the ACKs that depended
//!   on them. An ACK never leaves before its lease is durable.

pub mod arp;
mod control;
mod follow;
mod probe;
pub mod socket;
mod start;

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::clock::unix_now;

use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::engine::{
    DnsmasqDirs, Engine, Interface, Outcome, PacketContext, Reply, Responsibility,
};
use super::host_policy::HostPolicies;
use super::metrics::DhcpMetrics;
use super::peek::{self, Peek, PeekKind};
use super::responsibility::Responder;
use super::wire::{self, MAX_REQUEST_LEN};
use crate::dhcp::engine::reply::Destination;
use crate::mac::MacAddr;
use crate::store::{Change, Committer, StoreMetrics, StoreStatus};
use crate::udp_batch::{Counted, Outbox};
pub(crate) use control::{ask, take_decided};
pub use control::{ControlError, ControlReceiver, DhcpHandle};
pub use follow::follow_members;
pub use probe::ProbeError;
pub use start::{prepare, Parts, StartError, Stored};

/// Datagrams read from one socket before looking at the others, the clock and shutdown.
const READ_BURST: usize = 64;

/// One bound socket and the interface it serves.
#[derive(Debug)]
pub struct Listener {
    /// The interface.
    pub interface: Interface,
    /// Its socket, non-blocking (see [`socket::bind`]).
    pub socket: std::net::UdpSocket,
}

/// A DHCP server ready to run: sockets bound, engine loaded.
#[derive(Debug)]
pub struct Server {
    /// Bound sockets.
    pub listeners: Vec<Listener>,
    /// The engine, already loaded with the stored leases and reservations.
    pub engine: Engine,
    /// Where lease changes are made durable.
    pub committer: Committer,
    /// Whether the store takes writes (and its counters).
    pub store: Arc<StoreMetrics>,
    /// Metrics to update.
    pub metrics: Arc<DhcpMetrics>,
    /// Server port; relays are answered on it and clients on `port + 1` (67 → 68).
    pub port: u16,
    /// How often expired leases are reclaimed.
    pub reclaim_interval: Duration,
    /// Who answers with several members; `None` answers everything.
    pub responder: Option<Responder>,
    /// Which machines the owner resolver knows (Ironic, an inventory); `None` when no
    /// such resolver is configured.
    pub owners: Option<Arc<crate::owner::Resolver>>,
    /// The operator's run-time allow/deny per MAC.
    pub policies: Arc<HostPolicies>,
    /// The relays whose giaddr is believed.
    pub relays: Vec<crate::config::RelayRule>,
    /// Every machine's timeline, told of each decision.
    pub timeline: Arc<crate::timeline::Timeline>,
    /// Operator changes to apply; `None`: no operator API.
    pub control: Option<ControlReceiver>,
    /// Whether a shared lease store decides the bindings (`store.shared`).
    pub shared: bool,
    /// How long a conflict probe waits (`dhcp.conflict_probe_ms`);
    /// `None`: no probes.
    pub conflict_probe: Option<Duration>,
}

/// What the committer tells the engine of a lease it did not acknowledge.
enum Withdrawal {
    /// The shared store refused it: the lease that holds its address.
    Refused(Box<crate::store::Lease>, Box<crate::store::Lease>),
    /// The shared store could not be reached, and holds the same client's binding
    /// until this time: the engine's lease ends there.
    Capped(Box<crate::store::Lease>, u64),
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
    /// A thread could not be started.
    #[error("starting the DHCP threads: {0}")]
    Thread(std::io::Error),
}

/// A reply that waits for its lease change to be durable.
struct Pending {
    changes: Vec<Change>,
    listener: usize,
    reply: Option<(Vec<u8>, SocketAddr)>,
}

/// Runs until `shutdown` is cancelled or a socket fails. On shutdown, changes already
/// queued are flushed and their replies sent before returning.
pub async fn run(server: Server, shutdown: CancellationToken) -> Result<(), ServerError> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("dhcp-engine".into())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(ServerError::Thread)
                .and_then(|rt| rt.block_on(engine_loop(server, shutdown)));
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

async fn engine_loop(server: Server, shutdown: CancellationToken) -> Result<(), ServerError> {
    let Server {
        listeners,
        mut engine,
        committer,
        store,
        metrics,
        port,
        reclaim_interval,
        responder,
        owners,
        policies,
        relays,
        timeline,
        control,
        shared,
        conflict_probe,
    } = server;
    let mut prober = probe::Prober::new(conflict_probe.unwrap_or_default());
    // Probes that ended (answered or timed out) and whose DISCOVERs are decided again.
    let mut ended: Vec<probe::Ended> = Vec::new();
    let mut control = control.map(|c| c.0);
    // Refused leases come back from the committer thread: withdrawn here, on the
    // engine's thread, like every change of its state.
    let (withdraw_tx, mut withdrawals) = tokio::sync::mpsc::unbounded_channel::<Withdrawal>();
    let mut interfaces = Vec::with_capacity(listeners.len());
    let mut sockets = Vec::with_capacity(listeners.len());
    // The committer sends ACKs from its own thread, on clones of the same sockets.
    let mut reply_sockets = Vec::with_capacity(listeners.len());
    for l in listeners {
        let socket_err = |source| ServerError::Socket {
            interface: l.interface.name.clone(),
            source,
        };
        reply_sockets.push(Arc::new(l.socket.try_clone().map_err(socket_err)?));
        sockets.push(UdpSocket::from_std(l.socket).map_err(socket_err)?);
        interfaces.push(l.interface);
    }

    let mut ctx = LoopState {
        store: &store.status,
        interfaces: &interfaces,
        metrics: &metrics,
        responder: responder.as_ref(),
        owners: owners.as_deref(),
        policies: &policies,
        relays,
        timeline: &timeline,
        port,
        out: Vec::with_capacity(600),
    };
    let outputs = Outputs {
        sockets: &sockets,
        reply_sockets: &reply_sockets,
        committer: &committer,
        metrics: &metrics,
        withdraw: &withdraw_tx,
        outboxes: std::cell::RefCell::new(sockets.iter().map(|_| Outbox::default()).collect()),
    };
    let mut buf = vec![0u8; MAX_REQUEST_LEN + 1];
    // Pool usage and lease count from the start, not only after the first tick.
    reclaim(&mut engine, &metrics);
    metrics.listening.set(1);
    let mut next_tick = Instant::now() + reclaim_interval;
    // Lease count and pool use as the operator reads them (/v1/stats, /metrics, /ui)
    // follow every change: published once a burst is handled, and at least every
    // PUBLISH_EVERY under continuous load, so figures read side by side agree.
    let mut stats_dirty = false;
    let mut published = Instant::now();
    let mut kernel_drops = KernelDrops::new(sockets.len());
    let result = 'outer: loop {
        if shutdown.is_cancelled() {
            break Ok(());
        }
        if Instant::now() >= next_tick {
            next_tick = Instant::now() + reclaim_interval;
            reclaim(&mut engine, &metrics);
            kernel_drops.count(&sockets, &metrics);
        }
        if kernel_drops.due.is_some_and(|d| Instant::now() >= d) {
            kernel_drops.count(&sockets, &metrics);
        }
        if shared {
            engine.set_shared_store_up(!store.status.shared_is_down());
        }
        while let Ok(w) = withdrawals.try_recv() {
            take_back(&mut engine, w, &committer);
            stats_dirty = true;
        }
        // Probes that ended since the last look, also under load.
        ended.extend(prober.poll(Instant::now(), &metrics));
        if !ended.is_empty() {
            stats_dirty = true;
            outputs
                .settle_probes(&mut ended, &mut engine, &mut ctx, &mut prober)
                .await;
        }
        // Operator changes are applied between bursts, also under load.
        if let Some(rx) = control.as_mut() {
            while let Ok(cmd) = rx.try_recv() {
                if let Some(config) = control::apply(&mut engine, cmd, &committer, unix_now()) {
                    ctx.relays = config.dhcp.relays.clone();
                }
                stats_dirty = true;
            }
        }
        // Drain what the sockets hold, a burst per socket at a time. Only a socket that
        // filled its burst is read again before waiting: one found empty has just said
        // so, and another read would be one more system call per wake-up, which with
        // several members is paid for every broadcast another member answers.
        let mut busy = false;
        let now = unix_now();
        for (i, socket) in sockets.iter().enumerate() {
            for read in 0..=READ_BURST {
                if read == READ_BURST {
                    busy = true;
                    break;
                }
                match socket.try_recv_from(&mut buf) {
                    Ok((n, from)) => {
                        metrics.received.inc();
                        let action = ctx.handle(&mut engine, i, socket, &buf[..n], from, now);
                        stats_dirty |= outputs.act(action, &ctx.out, &mut prober, &mut ended).await;
                        if !ended.is_empty() {
                            outputs
                                .settle_probes(&mut ended, &mut engine, &mut ctx, &mut prober)
                                .await;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if crate::net_error::is_transient(&e) => {}
                    Err(source) => {
                        error!(interface = %interfaces[i].name, error = %source, "DHCP socket failed");
                        break 'outer Err(ServerError::Socket {
                            interface: interfaces[i].name.clone(),
                            source,
                        });
                    }
                }
            }
            // The burst's replies leave together (udp_batch: one trip through the
            // kernel for many); a burst is at most READ_BURST datagrams.
            outputs.flush().await;
        }
        if stats_dirty && (!busy || published.elapsed() >= PUBLISH_EVERY) {
            publish(&engine, &metrics);
            kernel_drops.count_every(PUBLISH_EVERY, &sockets, &metrics);
            stats_dirty = false;
            published = Instant::now();
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
        let wake = prober
            .next_deadline()
            .map_or(next_tick, |d| d.min(next_tick));
        let wake = kernel_drops.due.map_or(wake, |d| d.min(wake));
        tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = readable => {}
            replies = prober.replies(&metrics) => ended.extend(replies),
            Some(cmd) = command => {
                if let Some(config) = control::apply(&mut engine, cmd, &committer, unix_now()) {
                    ctx.relays = config.dhcp.relays.clone();
                }
                publish(&engine, &metrics);
            }
            Some(w) = withdrawals.recv() => take_back(&mut engine, w, &committer),
        }
    };
    metrics.listening.set(0);
    // Wait for what is queued, so no durable change loses its reply.
    let _ = committer.commit_blocking(Vec::new());
    info!(
        received = metrics.received.get(),
        sent = metrics.sent.get(),
        "DHCP server stopped"
    );
    result
}

/// Queues a decision's lease changes; its reply is sent from the committer's thread
/// once they are durable, and withheld if they fail (the client retries).
fn submit(
    committer: &Committer,
    pending: Pending,
    sockets: &[Arc<std::net::UdpSocket>],
    metrics: &Arc<DhcpMetrics>,
    withdraw: &tokio::sync::mpsc::UnboundedSender<Withdrawal>,
) {
    let Pending {
        changes,
        listener,
        reply,
    } = pending;
    // Sent by the committer with the flush's other replies, never waiting for room:
    // the committer must not stall on one slow socket.
    let reply = reply.map(|(bytes, to)| crate::store::Reply {
        socket: sockets[listener].clone(),
        counted: metrics.clone(),
        to,
        bytes,
    });
    let metrics = metrics.clone();
    let withdraw = withdraw.clone();
    let _ = committer.submit_with_reply(changes, reply, move |r| match r {
        Err(crate::store::StoreError::HeldByAnother { ours, holder }) => {
            metrics.store_refused.inc();
            let _ = withdraw.send(Withdrawal::Refused(ours.clone(), holder.clone()));
        }
        Err(crate::store::StoreError::SharedUnavailable {
            ours: Some(ours),
            bound_until: Some(until),
            ..
        }) => {
            let _ = withdraw.send(Withdrawal::Capped(ours.clone(), *until));
        }
        _ => {}
    });
}

/// Applies what the committer said of a lease it did not acknowledge.
fn take_back(engine: &mut Engine, w: Withdrawal, committer: &Committer) {
    match w {
        Withdrawal::Refused(ours, holder) => withdraw(engine, &ours, &holder, committer),
        Withdrawal::Capped(ours, until) => engine.cap_to_binding(&ours, until),
    }
}

/// Withdraws a lease the shared store refused (never acknowledged: its reply was
/// withheld).
fn withdraw(
    engine: &mut Engine,
    ours: &crate::store::Lease,
    holder: &crate::store::Lease,
    committer: &Committer,
) {
    warn!(ip = %ours.ip, mac = %ours.mac, holder = %holder.mac, "the shared lease store holds the address for another client: lease withdrawn, not acknowledged");
    if let Some(effect) = engine.withdraw(ours, holder, unix_now()) {
        // Stored here only: the database holds the other client's row.
        let _ = committer.submit(vec![Change::Replica(effect)], |_| {});
    }
}

fn reclaim(engine: &mut Engine, metrics: &DhcpMetrics) {
    let freed = engine.handle_tick(unix_now());
    if freed > 0 {
        debug!(freed, "reclaimed expired leases and offers");
    }
    publish(engine, metrics);
}

/// How stale the published lease count and pool use may get under continuous load.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// Publishes the lease count and pool use for the operator API and `/metrics`.
fn publish(engine: &Engine, metrics: &DhcpMetrics) {
    metrics.leases.set(engine.leases().count() as u64);
    metrics.probes_skipped.set(engine.probes_skipped());
    if let Ok(mut p) = metrics.pools.lock() {
        *p = engine.pool_usage();
    }
}

/// What each socket's kernel drop counter said last (`SO_MEMINFO`): datagrams lost to a
/// full receive buffer never reach this process, so they are counted from the kernel's
/// side: on every tick, and after a burst at most every [`PUBLISH_EVERY`] (a system call
/// per socket on every wake-up cost about 1 µs per exchange in the closed loop).
struct KernelDrops {
    seen: Vec<u32>,
    counted: Instant,
    /// A burst ended too soon after the last count: count again then, traffic or not.
    due: Option<Instant>,
}

impl KernelDrops {
    fn new(sockets: usize) -> Self {
        Self {
            seen: vec![0; sockets],
            counted: Instant::now(),
            due: None,
        }
    }

    /// [`Self::count`], unless that was done less than `every` ago.
    fn count_every(&mut self, every: Duration, sockets: &[UdpSocket], metrics: &DhcpMetrics) {
        if self.counted.elapsed() >= every {
            self.count(sockets, metrics);
        } else {
            self.due = Some(self.counted + every);
        }
    }

    fn count(&mut self, sockets: &[UdpSocket], metrics: &DhcpMetrics) {
        self.counted = Instant::now();
        self.due = None;
        for (seen, socket) in self.seen.iter_mut().zip(sockets) {
            if let Some(now) = crate::sockopt::receive_drops(socket) {
                let new = now.wrapping_sub(*seen);
                if new > 0 {
                    metrics.drop_many(
                        crate::dhcp::wire::DropReason::ReceiveBufferFull,
                        u64::from(new),
                    );
                    *seen = now;
                }
            }
        }
    }
}

/// What to do after one datagram.
enum Action {
    Nothing,
    /// Send the reply now in `LoopState::out`: it depends on no lease change.
    Send(usize, SocketAddr),
    /// Lease changes to make durable, and the reply (if any) that waits for them.
    Commit(Pending),
    /// Probe this address, keeping the DISCOVER until the probe ends.
    Probe(Box<probe::Kept>, Ipv4Addr),
    /// A DISCOVER from a client whose probe is in flight: kept in place of the last.
    KeepNewest(Box<probe::Kept>),
}

/// Where decisions' results go.
struct Outputs<'a> {
    sockets: &'a [UdpSocket],
    reply_sockets: &'a [Arc<std::net::UdpSocket>],
    committer: &'a Committer,
    metrics: &'a Arc<DhcpMetrics>,
    withdraw: &'a tokio::sync::mpsc::UnboundedSender<Withdrawal>,
    /// Replies of the burst being read, per socket (OFFERs, NAKs: those that wait for
    /// no flush), sent together once the burst ends ([`Outputs::flush`]).
    outboxes: std::cell::RefCell<Vec<Outbox>>,
}

impl Outputs<'_> {
    /// Sends the replies queued by [`Outputs::act`], each socket's together.
    async fn flush(&self) {
        for (i, socket) in self.sockets.iter().enumerate() {
            // Out of the cell while it waits for room: nothing else touches it then.
            let mut outbox = std::mem::take(&mut self.outboxes.borrow_mut()[i]);
            flush(socket, &mut outbox, self.metrics).await;
            self.outboxes.borrow_mut()[i] = outbox;
        }
    }

    /// Carries out `action` (`out`: the encoded reply of a `Send`). A probe that cannot
    /// be sent ends at once, into `ended`. Returns whether state the operator reads
    /// changed.
    async fn act(
        &self,
        action: Action,
        out: &[u8],
        prober: &mut probe::Prober,
        ended: &mut Vec<probe::Ended>,
    ) -> bool {
        match action {
            Action::Nothing => false,
            Action::Send(listener, to) => {
                self.outboxes.borrow_mut()[listener].push(to, out);
                true
            }
            Action::Commit(p) => {
                submit(
                    self.committer,
                    p,
                    self.reply_sockets,
                    self.metrics,
                    self.withdraw,
                );
                true
            }
            Action::Probe(kept, ip) => {
                if let Err(now) = prober.start(ip, kept, self.metrics) {
                    ended.push(now);
                }
                true
            }
            Action::KeepNewest(kept) => {
                if !prober.keep_newest(kept) {
                    debug!("no probe in flight for a DISCOVER told to wait for one");
                }
                false
            }
        }
    }

    /// Tells the engine how each ended probe went, then decides its DISCOVER again
    /// (which may probe another address: at most `engine::probe::PROBES_PER_CLIENT`).
    async fn settle_probes(
        &self,
        ended: &mut Vec<probe::Ended>,
        engine: &mut Engine,
        ctx: &mut LoopState<'_>,
        prober: &mut probe::Prober,
    ) {
        if prober.unavailable() {
            engine.set_probing(false);
        }
        while let Some(e) = ended.pop() {
            let now = unix_now();
            let mac = e.kept.mac;
            if e.result == super::engine::ProbeResult::Answered {
                self.metrics.probe_conflicts.inc();
                // The address is this server's own, not the packet's: nothing to escape.
                warn!(ip = %e.ip, %mac, "an address answered a probe before its offer: in use by a host with no lease here; quarantined, another offered");
            }
            if let Some(effect) = engine.handle_probe_result(&mac, e.ip, e.result, now) {
                // Durable and handed to the peers like a DECLINE; the offer of another
                // address does not wait for it.
                let _ = self.committer.submit(vec![Change::Lease(effect)], |_| {});
            }
            let action = ctx.redecide(engine, self.sockets, *e.kept, now);
            self.act(action, &ctx.out, prober, ended).await;
        }
    }
}

struct LoopState<'a> {
    store: &'a StoreStatus,
    interfaces: &'a [Interface],
    metrics: &'a DhcpMetrics,
    responder: Option<&'a Responder>,
    owners: Option<&'a crate::owner::Resolver>,
    policies: &'a HostPolicies,
    /// The relays whose giaddr is believed (a reload may change them).
    relays: Vec<crate::config::RelayRule>,
    timeline: &'a crate::timeline::Timeline,
    port: u16,
    /// Encoded reply of the last `Action::Send`.
    out: Vec<u8>,
}

impl LoopState<'_> {
    /// Decodes and decides one datagram. A request whose raw bytes already show that
    /// this member stays silent (another member's machine, another server's offer) is
    /// decided from its [`peek`] and never decoded, counted as the full path counts it.
    fn handle(
        &mut self,
        engine: &mut Engine,
        listener: usize,
        socket: &UdpSocket,
        data: &[u8],
        from: SocketAddr,
        now: u64,
    ) -> Action {
        if let Some(p) = peek::peek(data) {
            return self.handle_peeked(engine, listener, socket, data, from, now, &p);
        }
        let msg = match wire::decode_request(data) {
            Ok(m) => m,
            Err(reason) => {
                self.metrics.drop(reason);
                debug!(%from, len = data.len(), %reason, "dropped datagram");
                return Action::Nothing;
            }
        };
        let mac = MacAddr::from_chaddr(msg.chaddr());
        use dhcproto::v4::MessageType as T;
        let discover = msg.opts().msg_type() == Some(T::Discover);
        if !self.admit(msg.giaddr(), discover, listener, from) {
            return Action::Nothing;
        }
        // One span per packet (docs/style.md §8). At debug level: a span per datagram at the
        // default level would cost more than a tenth of the whole decision.
        let span = tracing::debug_span!(
            "dhcp",
            iface = %self.interfaces[listener].name,
            xid = msg.xid(),
            mac = mac.map(tracing::field::display),
        );
        let _entered = span.enter();
        self.metrics.requests.inc(match msg.opts().msg_type() {
            Some(T::Discover) => "discover",
            Some(T::Request) => "request",
            Some(T::Decline) => "decline",
            Some(T::Release) => "release",
            Some(T::Inform) => "inform",
            _ => "other",
        });
        let responsibility = self
            .responder
            .map_or(Responsibility::Mine, |r| r.decide(&msg));
        let policy = mac.and_then(|m| self.policies.lookup(&m));
        let known = match (self.owners, mac) {
            (Some(o), Some(m)) if discover => o.knows(&m),
            _ => false,
        };
        let (tags, node_options) = match mac {
            Some(m) => self.policies.dnsmasq_for(&m),
            None => Default::default(),
        };
        let ctx = PacketContext {
            interface: &self.interfaces[listener],
            responsibility,
            policy,
            known,
            source: source_v4(from),
            now,
            dnsmasq: DnsmasqDirs {
                tags: &tags,
                options: &node_options,
            },
        };
        self.decide(engine, listener, socket, data, from, &msg, &ctx)
    }

    /// [`Self::handle`] for a request [`peek`] could read: the same checks and counters
    /// in the same order, and the full decode only when the answer may not be silence.
    #[allow(clippy::too_many_arguments)]
    fn handle_peeked(
        &mut self,
        engine: &mut Engine,
        listener: usize,
        socket: &UdpSocket,
        data: &[u8],
        from: SocketAddr,
        now: u64,
        p: &Peek,
    ) -> Action {
        let discover = p.kind == PeekKind::Discover;
        if !self.admit(p.giaddr, discover, listener, from) {
            return Action::Nothing;
        }
        self.metrics
            .requests
            .inc(if discover { "discover" } else { "request" });
        let responsibility = self
            .responder
            .map_or(Responsibility::Mine, |r| r.decide_for(&p.mac, p.secs));
        let policy = self.policies.lookup(&p.mac);
        let known = match self.owners {
            Some(o) if discover => o.knows(&p.mac),
            _ => false,
        };
        // The dnsmasq directories shape replies only: a silence never reads them.
        let mut ctx = PacketContext {
            interface: &self.interfaces[listener],
            responsibility,
            policy,
            known,
            source: source_v4(from),
            now,
            dnsmasq: DnsmasqDirs::default(),
        };
        if let Some(reason) = engine.handle_peeked(p, &ctx) {
            // Told to the timeline as `timeline_report` tells a silence.
            let what = if discover { "DISCOVER" } else { "REQUEST" };
            self.timeline.record(p.mac, silent_report(what, reason));
            self.metrics.outcome(&Outcome::Ignored(reason));
            debug!(iface = %ctx.interface.name, xid = p.xid, mac = %p.mac, reason = reason.as_str(), "decided from the raw packet");
            return Action::Nothing;
        }
        let msg = match wire::decode_request(data) {
            Ok(m) => m,
            // `peek` gives a peek only for what decodes; counted as a drop all the same.
            Err(reason) => {
                self.metrics.drop(reason);
                debug!(%from, len = data.len(), %reason, "dropped datagram");
                return Action::Nothing;
            }
        };
        let span = tracing::debug_span!(
            "dhcp",
            iface = %self.interfaces[listener].name,
            xid = p.xid,
            mac = %p.mac,
        );
        let _entered = span.enter();
        let (tags, node_options) = self.policies.dnsmasq_for(&p.mac);
        ctx.dnsmasq = DnsmasqDirs {
            tags: &tags,
            options: &node_options,
        };
        self.decide(engine, listener, socket, data, from, &msg, &ctx)
    }

    /// Whether a request goes on to be decided: its relay is trusted (when relayed) and,
    /// for a DISCOVER, the store takes writes. A refusal is counted here.
    fn admit(&self, giaddr: Ipv4Addr, discover: bool, listener: usize, from: SocketAddr) -> bool {
        // RFC 3046 §2.1 / RFC 2131 §4.1: giaddr is a relay agent's statement. Anyone on
        // the link can set it, so it is believed only from a configured relay, sending
        // from the server port: otherwise it would choose the subnet (and the reply's
        // destination) for the sender.
        if !giaddr.is_unspecified() {
            let trusted = match from {
                SocketAddr::V4(src) if src.port() == self.port => self
                    .relays
                    .iter()
                    .any(|r| r.allows(*src.ip(), &self.interfaces[listener].name)),
                _ => false,
            };
            if !trusted {
                self.metrics.untrusted_relay.inc();
                debug!(%from, "relayed packet from an untrusted source dropped");
                return false;
            }
        }
        if !self.store.offers_fresh() && discover {
            // No OFFER that could never be ACKed: another server, or this one once the
            // store writes again, serves the client.
            self.metrics.store_failing.inc();
            debug!("DISCOVER unanswered: the lease store fails writes or the shared store is unreachable");
            return false;
        }
        true
    }

    /// Runs the engine on a decoded request and turns its decision into an action.
    #[allow(clippy::too_many_arguments)]
    fn decide(
        &mut self,
        engine: &mut Engine,
        listener: usize,
        socket: &UdpSocket,
        data: &[u8],
        from: SocketAddr,
        msg: &dhcproto::v4::Message,
        ctx: &PacketContext<'_>,
    ) -> Action {
        let decision = engine.handle_message(msg, ctx);
        let mac = MacAddr::from_chaddr(msg.chaddr());
        if let Some(mac) = mac {
            self.timeline.record(mac, timeline_report(msg, &decision));
        }
        self.metrics.outcome(&decision.outcome);
        let keep = |mac| {
            Box::new(probe::Kept {
                msg: msg.clone(),
                data: data.to_vec(),
                listener,
                from,
                mac,
                responsibility: ctx.responsibility,
                known: ctx.known,
            })
        };
        match (decision.outcome, mac) {
            (Outcome::Probe(ip), Some(mac)) => return Action::Probe(keep(mac), ip),
            (Outcome::Ignored(super::engine::IgnoreReason::Probing), Some(mac)) => {
                return Action::KeepNewest(keep(mac))
            }
            _ => {}
        }
        let to = decision.reply.and_then(|mut r| {
            echo_relay_information(data, &mut r);
            self.encode(r, listener, socket, from)
        });
        if decision.effects.is_empty() {
            return to.map_or(Action::Nothing, |to| Action::Send(listener, to));
        }
        Action::Commit(Pending {
            changes: decision.effects.into_iter().map(Change::Lease).collect(),
            listener,
            reply: to.map(|to| (self.out.clone(), to)),
        })
    }

    /// Decides a kept DISCOVER again once its probe ended, as it was first decided
    /// (responsibility and whether the owner knows the machine, from then; the
    /// operator's policy and the dnsmasq directories, from now).
    fn redecide(
        &mut self,
        engine: &mut Engine,
        sockets: &[UdpSocket],
        kept: probe::Kept,
        now: u64,
    ) -> Action {
        let probe::Kept {
            msg,
            data,
            listener,
            from,
            mac,
            responsibility,
            known,
        } = kept;
        let span = tracing::debug_span!(
            "dhcp",
            iface = %self.interfaces[listener].name,
            xid = msg.xid(),
            %mac,
        );
        let _entered = span.enter();
        let (tags, node_options) = self.policies.dnsmasq_for(&mac);
        let ctx = PacketContext {
            interface: &self.interfaces[listener],
            responsibility,
            policy: self.policies.lookup(&mac),
            known,
            source: source_v4(from),
            now,
            dnsmasq: DnsmasqDirs {
                tags: &tags,
                options: &node_options,
            },
        };
        self.decide(
            engine,
            listener,
            &sockets[listener],
            &data,
            from,
            &msg,
            &ctx,
        )
    }

    /// Encodes `reply` into `self.out`; returns where it goes.
    fn encode(
        &mut self,
        reply: Reply,
        listener: usize,
        socket: &UdpSocket,
        from: SocketAddr,
    ) -> Option<SocketAddr> {
        match reply.encode(&mut self.out) {
            Err(e) => {
                warn!(error = %e, "could not encode reply");
                return None;
            }
            Ok(laid) if laid.dropped > 0 => {
                debug!(
                    dropped = laid.dropped,
                    "options left out: the client takes no more"
                );
            }
            Ok(_) => {}
        }
        let client_port = self.port.wrapping_add(1);
        let to = match reply.destination {
            Destination::Relay(ip) => SocketAddrV4::new(ip, self.port),
            Destination::Unicast(ip) => SocketAddrV4::new(ip, client_port),
            Destination::Broadcast => SocketAddrV4::new(Ipv4Addr::BROADCAST, client_port),
            Destination::Sender => return Some(from),
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

/// What the timeline is told of one decision: the message type, and what was sent or
/// why nothing was.
fn timeline_report(
    msg: &dhcproto::v4::Message,
    d: &super::engine::Decision,
) -> crate::timeline::Report {
    use super::engine::Outcome as O;
    use dhcproto::v4::MessageType as T;
    let what = match msg.opts().msg_type() {
        Some(T::Discover) => "DISCOVER",
        Some(T::Request) => "REQUEST",
        Some(T::Decline) => "DECLINE",
        Some(T::Release) => "RELEASE",
        Some(T::Inform) => "INFORM",
        _ => "other",
    };
    let (outcome, why, ip) = match d.outcome {
        O::Offer(ip) => ("offer", None, Some(ip)),
        O::Ack(ip) => ("ack", None, Some(ip)),
        O::Nak => ("nak", None, None),
        O::Inform => ("ack", Some("inform"), None),
        O::Release(ip) => ("released", None, Some(ip)),
        O::Decline(ip) => ("declined", None, Some(ip)),
        O::ProxyOffer => ("proxy offer", None, None),
        O::ProxyAck => ("proxy ack", None, None),
        O::Probe(ip) => ("probe", Some("conflict check"), Some(ip)),
        O::Ignored(r) => ("silent", Some(r.as_str()), None),
    };
    // The boot file told, if any: this server's own choice, shown as sent.
    let detail = d.reply.as_ref().and_then(|r| {
        match r.message.opts().get(dhcproto::v4::OptionCode::BootfileName) {
            Some(dhcproto::v4::DhcpOption::BootfileName(f)) => {
                Some(format!("boot file {}", String::from_utf8_lossy(f)))
            }
            _ => None,
        }
    });
    crate::timeline::Report {
        source: crate::timeline::Source::Dhcp,
        what,
        outcome,
        why,
        ip: ip.map(std::net::IpAddr::V4),
        detail,
    }
}

/// What the timeline is told of a silence decided from the raw packet: what
/// [`timeline_report`] says of the same silence after a full decode.
fn silent_report(
    what: &'static str,
    reason: super::engine::IgnoreReason,
) -> crate::timeline::Report {
    crate::timeline::Report {
        source: crate::timeline::Source::Dhcp,
        what,
        outcome: "silent",
        why: Some(reason.as_str()),
        ip: None,
        detail: None,
    }
}

/// The IPv4 source of a datagram (a v4-mapped one from a dual-stack socket), or
/// 0.0.0.0 when it has none.
fn source_v4(from: SocketAddr) -> Ipv4Addr {
    match from {
        SocketAddr::V4(a) => *a.ip(),
        SocketAddr::V6(a) => a.ip().to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
    }
}

/// RFC 3046 §2.2: the relay agent information goes back exactly as the relay sent it.
/// The engine echoes the decoded option; this puts the request's own bytes (all its
/// option 82 instances, concatenated per RFC 3396) in its place, so sub-options are
/// neither reordered nor re-encoded.
fn echo_relay_information(request: &[u8], reply: &mut Reply) {
    use dhcproto::v4::{DhcpOption, OptionCode, UnknownOption};
    let code = OptionCode::RelayAgentInformation;
    if reply.message.opts().get(code).is_none() {
        return;
    }
    if let Some(raw) = wire::raw_option(request, u8::from(code)) {
        reply
            .message
            .opts_mut()
            .insert(DhcpOption::Unknown(UnknownOption::new(code, raw)));
    }
}

impl Counted for DhcpMetrics {
    fn counted(&self, to: SocketAddr, result: Result<(), &std::io::Error>) {
        match result {
            Ok(()) => self.sent.inc(),
            Err(e) => {
                self.send_errors.inc();
                debug!(%to, error = %e, "send failed");
            }
        }
    }
}

/// Sends what `outbox` holds, waiting for room in the socket's buffer as a single
/// reply would.
async fn flush(socket: &UdpSocket, outbox: &mut Outbox, metrics: &DhcpMetrics) {
    while !outbox.is_empty() {
        match socket.try_io(tokio::io::Interest::WRITABLE, || {
            outbox.send(socket, metrics)
        }) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if let Err(e) = socket.writable().await {
                    debug!(error = %e, dropped = outbox.len(), "replies not sent");
                    metrics.send_errors.add(outbox.len() as u64);
                    outbox.clear();
                }
            }
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dhcp::engine::{Decision, IgnoreReason, Outcome};
    use dhcproto::v4::{DhcpOption, Message, MessageType};

    #[test]
    fn a_silence_from_the_raw_packet_reads_in_the_timeline_as_after_a_full_decode() {
        let z = Ipv4Addr::UNSPECIFIED;
        for (kind, what) in [
            (MessageType::Discover, "DISCOVER"),
            (MessageType::Request, "REQUEST"),
        ] {
            let mut msg = Message::new_with_id(1, z, z, z, z, &[0x52, 0x54, 0, 0, 0, 1]);
            msg.opts_mut().insert(DhcpOption::MessageType(kind));
            for reason in [IgnoreReason::NotResponsible, IgnoreReason::OtherServer] {
                let silent = Decision {
                    reply: None,
                    effects: Vec::new(),
                    outcome: Outcome::Ignored(reason),
                };
                assert_eq!(
                    format!("{:?}", silent_report(what, reason)),
                    format!("{:?}", timeline_report(&msg, &silent))
                );
            }
        }
    }
}
