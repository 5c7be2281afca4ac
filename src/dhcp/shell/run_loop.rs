//! The engine loop: one thread reads every socket in arrival order, hands each
//! datagram to the decisions, applies operator changes and probe results between
//! bursts, reclaims expired leases and publishes the counts the operator reads.

use std::io::ErrorKind;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::unix_now;

use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info};

use super::decisions::LoopState;
use super::outputs::{take_back, Outputs, Withdrawal};
use super::{control, probe, Server, ServerError};
use crate::dhcp::engine::{Engine, Interface};
use crate::dhcp::metrics::DhcpMetrics;
use crate::dhcp::wire::MAX_REQUEST_LEN;
use crate::udp_batch::Outbox;

/// Datagrams read from one socket before looking at the others, the clock and shutdown.
const READ_BURST: usize = 64;

pub(super) async fn engine_loop(
    server: Server,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
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
    let (interfaces, sockets, reply_sockets) = open_sockets(listeners)?;

    let mut ctx = LoopState {
        store: &store.status,
        interfaces: &interfaces,
        metrics: &metrics,
        responder: responder.as_ref(),
        owners: owners.as_deref(),
        policies: &policies,
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
    let result = loop {
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
        let mut looked = Burst {
            engine: &mut engine,
            ctx: &mut ctx,
            outputs: &outputs,
            prober: &mut prober,
            ended: &mut ended,
        };
        stats_dirty |= looked
            .between_bursts(&mut withdrawals, control.as_mut(), &committer)
            .await;
        let busy = match looked.drain(&sockets, &mut buf).await {
            Ok((busy, dirty)) => {
                stats_dirty |= dirty;
                busy
            }
            Err(e) => break Err(e),
        };
        if stats_dirty && (!busy || published.elapsed() >= PUBLISH_EVERY) {
            publish(&engine, &metrics);
            kernel_drops.count_every(PUBLISH_EVERY, &sockets, &metrics);
            stats_dirty = false;
            published = Instant::now();
        }
        if busy {
            continue;
        }
        let wake = prober
            .next_deadline()
            .map_or(next_tick, |d| d.min(next_tick));
        let wake = kernel_drops.due.map_or(wake, |d| d.min(wake));
        tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = crate::engine_thread::any_readable(&sockets) => {}
            replies = prober.replies(&metrics) => ended.extend(replies),
            Some(cmd) = next_command(control.as_mut()) => {
                control::apply(&mut engine, cmd, &committer, unix_now());
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

/// The next operator change; never, without a control channel.
async fn next_command(
    control: Option<&mut tokio::sync::mpsc::Receiver<crate::dhcp::control::Control>>,
) -> Option<crate::dhcp::control::Control> {
    match control {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Splits the listeners into their interfaces, the loop's sockets and the clones the
/// committer sends ACKs on from its own thread.
#[allow(clippy::type_complexity)]
fn open_sockets(
    listeners: Vec<super::Listener>,
) -> Result<
    (
        Vec<Interface>,
        Vec<UdpSocket>,
        Vec<Arc<std::net::UdpSocket>>,
    ),
    ServerError,
> {
    let mut interfaces = Vec::with_capacity(listeners.len());
    let mut sockets = Vec::with_capacity(listeners.len());
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
    Ok((interfaces, sockets, reply_sockets))
}

/// What one turn of the loop works on: the engine, the per-packet state, the outputs and
/// the conflict probes.
struct Burst<'a, 'b> {
    engine: &'a mut Engine,
    ctx: &'a mut LoopState<'b>,
    outputs: &'a Outputs<'b>,
    prober: &'a mut probe::Prober,
    ended: &'a mut Vec<probe::Ended>,
}

impl Burst<'_, '_> {
    /// Applies what arrived since the last look, also under load: leases the committer
    /// refused, probes that ended, operator changes. Whether the engine's state changed.
    async fn between_bursts(
        &mut self,
        withdrawals: &mut tokio::sync::mpsc::UnboundedReceiver<Withdrawal>,
        control: Option<&mut tokio::sync::mpsc::Receiver<crate::dhcp::control::Control>>,
        committer: &crate::store::Committer,
    ) -> bool {
        let mut dirty = false;
        while let Ok(w) = withdrawals.try_recv() {
            take_back(self.engine, w, committer);
            dirty = true;
        }
        self.ended
            .extend(self.prober.poll(Instant::now(), self.ctx.metrics));
        if !self.ended.is_empty() {
            dirty = true;
            self.settle().await;
        }
        if let Some(rx) = control {
            while let Ok(cmd) = rx.try_recv() {
                control::apply(self.engine, cmd, committer, unix_now());
                dirty = true;
            }
        }
        dirty
    }

    async fn settle(&mut self) {
        self.outputs
            .settle_probes(self.ended, self.engine, self.ctx, self.prober)
            .await;
    }

    /// Drains what the sockets hold, a burst per socket at a time. Only a socket that
    /// filled its burst is read again before waiting: one found empty has just said so,
    /// and another read would be one more system call per wake-up, which with several
    /// members is paid for every broadcast another member answers. Whether a socket
    /// filled its burst, and whether the engine's state changed; a socket that failed
    /// for good ends the loop.
    async fn drain(
        &mut self,
        sockets: &[UdpSocket],
        buf: &mut [u8],
    ) -> Result<(bool, bool), ServerError> {
        let (mut busy, mut dirty) = (false, false);
        let now = unix_now();
        for (i, socket) in sockets.iter().enumerate() {
            for read in 0..=READ_BURST {
                if read == READ_BURST {
                    busy = true;
                    break;
                }
                match socket.try_recv_from(buf) {
                    Ok((n, from)) => {
                        self.ctx.metrics.received.inc();
                        let action = self
                            .ctx
                            .handle(self.engine, i, socket, &buf[..n], from, now);
                        dirty |= self
                            .outputs
                            .act(action, &self.ctx.out, self.prober, self.ended)
                            .await;
                        if !self.ended.is_empty() {
                            self.settle().await;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if crate::net_error::is_transient(&e) => {}
                    Err(source) => {
                        let interface = self.ctx.interfaces[i].name.clone();
                        error!(%interface, error = %source, "DHCP socket failed");
                        return Err(ServerError::Socket { interface, source });
                    }
                }
            }
            // The burst's replies leave together (udp_batch: one trip through the
            // kernel for many); a burst is at most READ_BURST datagrams.
            self.outputs.flush().await;
        }
        Ok((busy, dirty))
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
    pub(super) seen: Vec<u32>,
    pub(super) counted: Instant,
    /// A burst ended too soon after the last count: count again then, traffic or not.
    pub(super) due: Option<Instant>,
}

impl KernelDrops {
    pub(super) fn new(sockets: usize) -> Self {
        Self {
            seen: vec![0; sockets],
            counted: Instant::now(),
            due: None,
        }
    }

    /// [`Self::count`], unless that was done less than `every` ago.
    pub(super) fn count_every(
        &mut self,
        every: Duration,
        sockets: &[UdpSocket],
        metrics: &DhcpMetrics,
    ) {
        if self.counted.elapsed() >= every {
            self.count(sockets, metrics);
        } else {
            self.due = Some(self.counted + every);
        }
    }

    pub(super) fn count(&mut self, sockets: &[UdpSocket], metrics: &DhcpMetrics) {
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
