//! Per-transfer-port mode, the default: the listening loop and one task per transfer,
//! each on its own ephemeral socket (RFC 1350 §4: the server picks a new TID per transfer).

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::UdpSocket;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::admission::{note_refusal, Accepted, Admission, Shared, Slot};
use super::batch::Batch;
use super::metrics::{Reason, TftpMetrics};
use super::packet::{encode_error, ErrorCode};
use super::pktinfo;
use super::shell::{finish, received, started, transfer_span, Outcome, RECV_BUF};
use super::transfer::Transfer;
use super::TftpError;
use crate::net_error::is_transient;

/// Per-transfer-port mode: serves the listening socket until `shutdown` is cancelled.
/// Only an unrecoverable error on the listening socket ends it early.
pub(crate) async fn run(
    socket: UdpSocket,
    local: SocketAddr,
    pktinfo: bool,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) -> Result<(), TftpError> {
    // Shared with the transfer tasks, which answer from it when they cannot open a
    // socket of their own.
    let socket = Arc::new(socket);
    let mut tasks = JoinSet::new();
    let mut buf = vec![0u8; RECV_BUF];
    let mut out = Vec::with_capacity(64);
    let result = loop {
        let (n, peer, to) = tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            r = pktinfo::recv(&socket, &mut buf, pktinfo) => match r {
                Ok(x) => x,
                Err(e) if is_transient(&e) => {
                    tracing::debug!(error = %e, "tftp transient receive error");
                    continue;
                }
                Err(e) => break Err(TftpError::Recv(e)),
            },
        };
        match shared.admit(&buf[..n], peer, std::time::Instant::now()) {
            Admission::Ignore => {}
            Admission::Reject(code, msg) => {
                encode_error(&mut out, code, msg);
                // Best effort: the peer may be gone; a failed error reply is not fatal.
                let _ = pktinfo::send(&socket, &out, peer, to).await;
            }
            Admission::Start(acc) => {
                let token = shutdown.child_token();
                let shared = shared.clone();
                let span = transfer_span(peer);
                tasks.spawn(
                    {
                        let listener = Listener {
                            socket: socket.clone(),
                            local,
                            to,
                        };
                        async move { serve_transfer(shared, acc, listener, peer, token).await }
                    }
                    .instrument(span),
                );
            }
        }
    };
    // Child tokens are cancelled with `shutdown`; transfers tell their clients and end.
    shutdown.cancel();
    while tasks.join_next().await.is_some() {}
    result
}

/// The listening socket, and the local addresses a request came to.
struct Listener {
    socket: Arc<UdpSocket>,
    /// The listener's own address.
    local: SocketAddr,
    /// The address the request was sent to, when the listener is a wildcard.
    to: Option<std::net::IpAddr>,
}

async fn serve_transfer(
    shared: Arc<Shared>,
    acc: Accepted,
    listener: Listener,
    peer: SocketAddr,
    shutdown: CancellationToken,
) {
    let metrics = shared.metrics.clone();
    let mut out = Vec::with_capacity(usize::from(shared.settings.max_blksize) + 4);
    // New TID: the local address the request came to, fresh port, connected so the
    // kernel drops datagrams from any other source (RFC 1350 §4 TID check).
    let bind = SocketAddr::new(pktinfo::transfer_ip(listener.local, listener.to), 0);
    let opened = match UdpSocket::bind(bind).await {
        Ok(s) => s.connect(peer).await.map(|()| s),
        Err(e) => Err(e),
    };
    let sock = match opened {
        Ok(s) => s,
        Err(e) => {
            // Out of sockets or file descriptors: say so now rather than leave the
            // client to time out.
            metrics.error(Reason::SocketError);
            tracing::warn!(error = %e, "tftp cannot open a transfer socket");
            encode_error(
                &mut out,
                ErrorCode::NotDefined,
                "server cannot start a transfer",
            );
            let _ = pktinfo::send(&listener.socket, &out, peer, listener.to).await;
            return;
        }
    };
    drop(listener);
    let worker = shared.clone();
    let datagram = acc.datagram;
    let prepared =
        tokio::task::spawn_blocking(move || (worker.prepare(&datagram, Instant::now()), datagram))
            .await;
    let (prepared, datagram) = match prepared {
        Ok(x) => x,
        Err(e) => {
            metrics.error(Reason::Path(super::path::Refusal::Io));
            tracing::error!(error = %e, "tftp prepare task failed");
            return;
        }
    };
    if acc.slot.is_evicted() {
        // Taken back while the file loaded; admission counted it.
        return;
    }
    let mut p = match prepared {
        Ok(p) => p,
        Err(r) => {
            note_refusal(&metrics, &datagram, r);
            let (code, msg) = r.wire();
            encode_error(&mut out, code, msg);
            let _ = sock.send(&out).await;
            return;
        }
    };
    metrics.transfers_started.fetch_add(1, Relaxed);
    started(&tracing::Span::current(), &p);
    let began = Instant::now();
    let mut rbuf = vec![0u8; RECV_BUF];
    let io = Io {
        sock: &sock,
        slot: &acc.slot,
        metrics: &metrics,
        shutdown: &shutdown,
    };
    let outcome = drive(&mut p.transfer, &io, &mut out, &mut rbuf).await;
    finish(&metrics, &p, peer, outcome, began);
    drop(acc.slot);
}

/// What `drive` reads from and reports to, besides the transfer itself.
struct Io<'a> {
    sock: &'a UdpSocket,
    slot: &'a Slot,
    metrics: &'a TftpMetrics,
    shutdown: &'a CancellationToken,
}

async fn drive(t: &mut Transfer, io: &Io<'_>, out: &mut Vec<u8>, rbuf: &mut [u8]) -> Outcome {
    let sock = io.sock;
    let mut batch = Batch::default();
    // One timer for the whole transfer, moved rather than re-created per packet.
    let sleep = tokio::time::sleep_until(tokio::time::Instant::now());
    tokio::pin!(sleep);
    let mut armed = None;
    loop {
        let mut sent = Ok(());
        while t.poll_transmit(out) {
            if batch.must_flush_before(out) {
                sent = sent.and(batch.flush(sock).await);
            }
            batch.push(out);
        }
        sent = sent.and(batch.flush(sock).await);
        if let Err(e) = sent {
            // A full local queue loses packets like the network would; the timer
            // resends them. Anything else (ICMP unreachable: client gone) ends it.
            if e.raw_os_error() != Some(libc::ENOBUFS) {
                return Outcome::Socket(e);
            }
        }
        let Some(deadline) = t.poll_timeout() else {
            return Outcome::Finished;
        };
        if armed != Some(deadline) {
            armed = Some(deadline);
            sleep.as_mut().reset(deadline.into());
        }
        tokio::select! {
            biased;
            _ = io.shutdown.cancelled() => {
                encode_error(out, ErrorCode::NotDefined, "server shutting down");
                let _ = sock.send(out).await;
                return Outcome::Shutdown;
            }
            r = sock.recv(rbuf) => match r {
                Ok(n) => {
                    received(t, io.slot, io.metrics, &rbuf[..n], Instant::now());
                }
                // Not `net_error::is_transient`: this socket is connected to one client,
                // so an ICMP error here (ECONNREFUSED) means that client is gone.
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Outcome::Socket(e),
            },
            // The table took the slot for a newer request; the loop sends the ERROR.
            _ = io.slot.evicted() => t.handle_eviction(),
            _ = &mut sleep => {
                t.handle_timeout(Instant::now());
                tracing::trace!(status = ?t.status(), "tftp timeout");
            }
        }
    }
}
