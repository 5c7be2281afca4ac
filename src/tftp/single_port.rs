//! Single-port mode: every transfer runs on the listening socket, demultiplexed by the
//! client's address and port, for NAT and firewalls that pass only port 69. All state
//! machines are driven from this one task; only file loading leaves it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Span;

use super::admission::{note_refusal, Admission, Prepared, Shared, Slot};
use super::packet::{encode_error, ErrorCode};
use super::path::Refusal;
use super::pktinfo;
use super::shell::{finish, received, started, transfer_span, Outcome, RECV_BUF};
use super::transfer::Status;
use super::TftpError;
use crate::net_error::is_transient;

struct Running {
    p: Prepared,
    /// The local address the request came to, which every reply comes from.
    local: Option<IpAddr>,
    slot: Slot,
    started: Instant,
    /// Deadline last pushed on the timer heap, to avoid pushing duplicates.
    armed: Option<Instant>,
    /// The transfer's span. This task drives every transfer, so events are logged in
    /// it with `in_scope` rather than by instrumenting a future.
    span: Span,
}

/// A request back from file loading, ready to run or refused.
struct Loaded {
    peer: SocketAddr,
    local: Option<IpAddr>,
    slot: Slot,
    datagram: Vec<u8>,
    span: Span,
    res: Result<Prepared, Refusal>,
}

pub(crate) async fn run(
    socket: UdpSocket,
    pktinfo: bool,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) -> Result<(), TftpError> {
    let metrics = shared.metrics.clone();
    let mut transfers: HashMap<SocketAddr, Running> = HashMap::new();
    let mut timers: BinaryHeap<Reverse<(Instant, SocketAddr)>> = BinaryHeap::new();
    let (tx, mut rx) = mpsc::unbounded_channel::<Loaded>();
    let mut buf = vec![0u8; RECV_BUF];
    let mut out = Vec::with_capacity(usize::from(shared.settings.max_blksize) + 4);
    let result = loop {
        let next = timers.peek().map(|Reverse((d, _))| *d);
        let touched: SocketAddr = tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            Some(Loaded { peer, local, slot, datagram, span, res }) = rx.recv() => match res {
                // Taken back while the file loaded (admission counted it), or the peer
                // has a newer transfer meanwhile.
                _ if slot.is_evicted() => continue,
                Ok(p) => {
                    metrics.transfers_started.fetch_add(1, Relaxed);
                    started(&span, &p);
                    let run = Running { p, local, slot, started: Instant::now(), armed: None, span };
                    transfers.insert(peer, run);
                    peer
                }
                Err(r) => {
                    span.in_scope(|| note_refusal(&metrics, &datagram, r));
                    let (code, msg) = r.wire();
                    encode_error(&mut out, code, msg);
                    let _ = pktinfo::send(&socket, &out, peer, local).await;
                    continue;
                }
            },
            _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now).into()), if next.is_some() => {
                let Some(Reverse((_, peer))) = timers.pop() else { continue };
                match transfers.get_mut(&peer) {
                    Some(run) => {
                        if run.armed.is_some_and(|a| a <= Instant::now()) {
                            run.armed = None;
                        }
                        run.p.transfer.handle_timeout(Instant::now());
                        peer
                    }
                    None => continue,
                }
            }
            r = pktinfo::recv(&socket, &mut buf, pktinfo) => {
                let (n, peer, local) = match r {
                    Ok(x) => x,
                    Err(e) if is_transient(&e) => {
                        tracing::debug!(error = %e, "tftp transient receive error");
                        continue;
                    }
                    Err(e) => break Err(TftpError::Recv(e)),
                };
                if let Some(run) = transfers.get_mut(&peer) {
                    received(&mut run.p.transfer, &run.slot, &metrics, &buf[..n], Instant::now());
                    peer
                } else {
                    match shared.admit(&buf[..n], peer, Instant::now()) {
                        Admission::Ignore => continue,
                        Admission::Reject(code, msg) => {
                            encode_error(&mut out, code, msg);
                            let _ = pktinfo::send(&socket, &out, peer, local).await;
                            continue;
                        }
                        Admission::Start(acc) => {
                            let evicted = acc.evicted;
                            let (worker, tx) = (shared.clone(), tx.clone());
                            let span = transfer_span(peer);
                            tokio::task::spawn_blocking(move || {
                                let res = worker.prepare(&acc.datagram, Instant::now());
                                let (slot, datagram) = (acc.slot, acc.datagram);
                                let _ = tx.send(Loaded { peer, local, slot, datagram, span, res });
                            });
                            // This task drives every transfer, so the evicted one is told
                            // here (its slot's signal is for the per-port shell's tasks);
                            // the code below sends its ERROR and retires it.
                            match evicted.and_then(|v| transfers.get_mut(&v).map(|run| (v, run))) {
                                Some((victim, run)) => {
                                    run.p.transfer.handle_eviction();
                                    victim
                                }
                                None => continue,
                            }
                        }
                    }
                }
            }
        };
        // Send whatever the touched transfer has due, then re-arm or retire it.
        let Some(run) = transfers.get_mut(&touched) else {
            continue;
        };
        let mut outcome = Outcome::Finished;
        while run.p.transfer.poll_transmit(&mut out) {
            if let Err(e) = pktinfo::send(&socket, &out, touched, run.local).await {
                if !is_transient(&e) {
                    outcome = Outcome::Socket(e);
                    break;
                }
            }
        }
        match (run.p.transfer.status(), &outcome) {
            (Status::Running, Outcome::Finished) => {
                if let Some(d) = run.p.transfer.poll_timeout() {
                    if run.armed != Some(d) {
                        run.armed = Some(d);
                        timers.push(Reverse((d, touched)));
                    }
                }
            }
            _ => {
                if let Some(run) = transfers.remove(&touched) {
                    run.span
                        .in_scope(|| finish(&metrics, &run.p, touched, outcome, run.started));
                }
            }
        }
        // Stale timer entries accumulate at most one per ACK and expire within one
        // timeout; compact if a burst left many behind.
        if timers.len() > 64 + 8 * transfers.len() {
            timers = transfers
                .iter()
                .filter_map(|(peer, r)| r.armed.map(|d| Reverse((d, *peer))))
                .collect();
        }
    };
    for (peer, run) in transfers.drain() {
        encode_error(&mut out, ErrorCode::NotDefined, "server shutting down");
        let _ = pktinfo::send(&socket, &out, peer, run.local).await;
        run.span
            .in_scope(|| finish(&metrics, &run.p, peer, Outcome::Shutdown, run.started));
    }
    result
}
