//! The tokio shell: the listening loop and one task per transfer, each on its own
//! ephemeral socket (RFC 1350 §4: the server picks a new TID per transfer).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::UdpSocket;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::admission::{note_refusal, Accepted, Admission, Shared};
use super::batch::Batch;
use super::metrics::{Reason, TftpMetrics};
use super::packet::{encode_error, ErrorCode};
use super::pktinfo;
use super::transfer::{FailReason, Handled, Status, Transfer};
use super::{TftpError, TftpMetrics as Metrics};
use crate::config::TftpSettings;

/// Largest datagram we read. Requests are ≤ 512 octets by RFC 2347 §2; anything we
/// receive beyond this is truncated and then fails to decode.
pub(crate) const RECV_BUF: usize = 2048;

/// Receive errors that concern one peer, not the socket (e.g. an ICMP port
/// unreachable reported for an earlier send).
pub(crate) fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNREFUSED
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::EINTR
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::EAGAIN
                | libc::EMSGSIZE
        )
    )
}

/// Serves TFTP read requests arriving on `socket` until `shutdown` is cancelled.
/// Only an unrecoverable error on the listening socket ends it early.
pub async fn run(
    socket: UdpSocket,
    settings: Arc<TftpSettings>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Result<(), TftpError> {
    let local = socket.local_addr().map_err(TftpError::LocalAddr)?;
    // Room for bursts: every machine in a rack powers on at once and sends its RRQ
    // within milliseconds.
    crate::sockopt::enlarge_recv_buffer(&socket, 4 << 20);
    tracing::info!(
        %local,
        root = %settings.root.display(),
        single_port = settings.single_port,
        "tftp listening"
    );
    let pktinfo = pktinfo::enable(&socket);
    if settings.single_port {
        let shared = Shared::new(settings, metrics);
        return super::single_port::run(socket, pktinfo, shared, shutdown).await;
    }
    let shared = Shared::new(settings, metrics);
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
        match shared.admit(&buf[..n], peer) {
            Admission::Ignore => {}
            Admission::Reject(code, msg) => {
                encode_error(&mut out, code, msg);
                // Best effort: the peer may be gone; a failed error reply is not fatal.
                let _ = pktinfo::send(&socket, &out, peer, to).await;
            }
            Admission::Start(acc) => {
                let token = shutdown.child_token();
                let shared = shared.clone();
                let span = tracing::info_span!("tftp_transfer", %peer);
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
    to: Option<std::net::Ipv4Addr>,
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
            tracing::warn!(error = %e, %peer, "tftp cannot open a transfer socket");
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
    let mut p = match prepared {
        Ok(p) => p,
        Err(r) => {
            note_refusal(&metrics, peer, &datagram, r);
            let (code, msg) = r.wire();
            encode_error(&mut out, code, msg);
            let _ = sock.send(&out).await;
            return;
        }
    };
    metrics.transfers_started.fetch_add(1, Relaxed);
    tracing::debug!(
        file = %p.file,
        size = p.transfer.len(),
        blksize = p.blksize,
        windowsize = p.windowsize,
        "tftp transfer started"
    );
    let started = Instant::now();
    let mut rbuf = vec![0u8; RECV_BUF];
    let outcome = drive(
        &mut p.transfer,
        &sock,
        &mut out,
        &mut rbuf,
        &metrics,
        &shutdown,
    )
    .await;
    finish(&metrics, &p.transfer, outcome, &p.file, started);
    drop(acc.slot);
}

/// Why the shell stopped driving a transfer, beyond the state machine's own status.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The state machine finished (done or failed).
    Finished,
    /// Server shutdown.
    Shutdown,
    /// The socket failed (e.g. ICMP port unreachable: the client is gone).
    Socket(io::Error),
}

async fn drive(
    t: &mut Transfer,
    sock: &UdpSocket,
    out: &mut Vec<u8>,
    rbuf: &mut [u8],
    metrics: &TftpMetrics,
    shutdown: &CancellationToken,
) -> Outcome {
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
            _ = shutdown.cancelled() => {
                encode_error(out, ErrorCode::NotDefined, "server shutting down");
                let _ = sock.send(out).await;
                return Outcome::Shutdown;
            }
            r = sock.recv(rbuf) => match r {
                Ok(n) => {
                    let handled = t.handle_packet(&rbuf[..n], Instant::now());
                    if handled == Handled::Malformed {
                        metrics.malformed_packets.fetch_add(1, Relaxed);
                    }
                    tracing::trace!(?handled, len = n, "tftp packet");
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Outcome::Socket(e),
            },
            _ = &mut sleep => {
                t.handle_timeout(Instant::now());
                tracing::trace!(status = ?t.status(), "tftp timeout");
            }
        }
    }
}

/// Adds a finished transfer's counters to the metrics and logs its end.
pub(crate) fn finish(
    metrics: &TftpMetrics,
    t: &Transfer,
    outcome: Outcome,
    file: &str,
    started: Instant,
) {
    let st = t.stats();
    metrics.bytes_sent.fetch_add(st.bytes_sent, Relaxed);
    metrics.retransmits.fetch_add(st.retransmits, Relaxed);
    metrics.duplicate_acks.fetch_add(st.duplicate_acks, Relaxed);
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let failure = match (outcome, t.status()) {
        (Outcome::Finished, Status::Done) => None,
        (Outcome::Finished, Status::Failed(FailReason::Timeout)) => Some(Reason::Timeout),
        (Outcome::Finished, Status::Failed(FailReason::PeerError(code))) => {
            tracing::info!(file, code, "tftp client aborted transfer");
            Some(Reason::PeerError)
        }
        (Outcome::Socket(e), _) => {
            tracing::info!(file, error = %e, "tftp transfer socket error");
            Some(Reason::SocketError)
        }
        (Outcome::Finished, Status::Declined(code)) => {
            metrics.transfers_declined.fetch_add(1, Relaxed);
            tracing::debug!(file, code, "tftp client ended the transfer at the OACK");
            return;
        }
        (Outcome::Shutdown, _) | (Outcome::Finished, Status::Running) => None,
    };
    match failure {
        None if t.status() == Status::Done => {
            metrics.transfers_completed.fetch_add(1, Relaxed);
            tracing::info!(
                file,
                size = t.len(),
                elapsed_ms,
                retransmits = st.retransmits,
                "tftp transfer complete"
            );
        }
        None => {
            metrics.transfers_failed.fetch_add(1, Relaxed);
            tracing::info!(file, "tftp transfer cancelled by shutdown");
        }
        Some(reason) => {
            metrics.transfers_failed.fetch_add(1, Relaxed);
            metrics.error(reason);
            tracing::info!(
                file,
                reason = reason.label(),
                elapsed_ms,
                "tftp transfer failed"
            );
        }
    }
}
