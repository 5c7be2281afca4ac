//! Where a decision's results go: replies sent at once or queued behind their lease
//! changes in the committer, probes started, and the leases the shared store refused
//! taken back.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use crate::clock::unix_now;

use tokio::net::UdpSocket;
use tracing::{debug, warn};

use super::decisions::LoopState;
use super::probe;
use crate::dhcp::engine::Engine;
use crate::dhcp::metrics::DhcpMetrics;
use crate::store::{Change, Committer};
use crate::udp_batch::{Counted, Outbox};

/// What the committer tells the engine of a lease it did not acknowledge.
pub(super) enum Withdrawal {
    /// The shared store refused it: the lease that holds its address.
    Refused(Box<crate::store::Lease>, Box<crate::store::Lease>),
    /// The shared store could not be reached, and holds the same client's binding
    /// until this time: the engine's lease ends there.
    Capped(Box<crate::store::Lease>, u64),
}

/// A reply that waits for its lease change to be durable.
pub(super) struct Pending {
    pub(super) changes: Vec<Change>,
    pub(super) listener: usize,
    pub(super) reply: Option<(Vec<u8>, SocketAddr)>,
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
pub(super) fn take_back(engine: &mut Engine, w: Withdrawal, committer: &Committer) {
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

/// What to do after one datagram.
pub(super) enum Action {
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
pub(super) struct Outputs<'a> {
    pub(super) sockets: &'a [UdpSocket],
    pub(super) reply_sockets: &'a [Arc<std::net::UdpSocket>],
    pub(super) committer: &'a Committer,
    pub(super) metrics: &'a Arc<DhcpMetrics>,
    pub(super) withdraw: &'a tokio::sync::mpsc::UnboundedSender<Withdrawal>,
    /// Replies of the burst being read, per socket (OFFERs, NAKs: those that wait for
    /// no flush), sent together once the burst ends ([`Outputs::flush`]).
    pub(super) outboxes: std::cell::RefCell<Vec<Outbox>>,
}

impl Outputs<'_> {
    /// Sends the replies queued by [`Outputs::act`], each socket's together.
    pub(super) async fn flush(&self) {
        for (i, socket) in self.sockets.iter().enumerate() {
            // Out of the cell while it waits for room: nothing else touches it then.
            let mut outbox = std::mem::take(&mut self.outboxes.borrow_mut()[i]);
            outbox.flush(socket, &**self.metrics).await;
            self.outboxes.borrow_mut()[i] = outbox;
        }
    }

    /// Carries out `action` (`out`: the encoded reply of a `Send`). A probe that cannot
    /// be sent ends at once, into `ended`. Returns whether state the operator reads
    /// changed.
    pub(super) async fn act(
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
    pub(super) async fn settle_probes(
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
            if e.result == crate::dhcp::engine::ProbeResult::Answered {
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
