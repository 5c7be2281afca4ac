//! What both transfer shells (`server`, one socket per transfer, and `single_port`)
//! share once a transfer is admitted: the receive buffer size, the transfer's span, why
//! a transfer stopped, and how its end is counted and logged.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use tracing::field::Empty;
use tracing::Span;

use super::admission::{Prepared, Slot};
use super::metrics::{Reason, TftpMetrics};
use super::transfer::{FailReason, Handled, Status, Transfer};

/// Largest datagram we read. Requests are ≤ 512 octets by RFC 2347 §2; anything we
/// receive beyond this is truncated and then fails to decode.
pub(crate) const RECV_BUF: usize = 2048;

/// The span of one transfer from `peer` (docs/style.md §8), opened at admission. `file` (the
/// confined, aliased name below the root, never the raw request bytes), `blksize` and
/// `windowsize` are filled in by [`started`] once the request is resolved; a refused
/// request's span keeps only `peer`.
pub(crate) fn transfer_span(peer: SocketAddr) -> Span {
    tracing::info_span!(
        "tftp_transfer",
        %peer,
        file = Empty,
        blksize = Empty,
        windowsize = Empty
    )
}

/// Records what the prepared transfer adds to its span, then logs its start in it.
pub(crate) fn started(span: &Span, p: &Prepared) {
    span.record("file", p.file.as_str());
    span.record("blksize", p.blksize);
    span.record("windowsize", p.windowsize);
    span.in_scope(|| tracing::debug!(size = p.transfer.len(), "tftp transfer started"));
}

/// Feeds one datagram from the transfer's peer to its state machine at `now`, counts a
/// malformed one and tells the slot about progress: while the peer's ACKs move it on,
/// admission never evicts it.
pub(crate) fn received(
    t: &mut Transfer,
    slot: &Slot,
    metrics: &TftpMetrics,
    datagram: &[u8],
    now: Instant,
) -> Handled {
    let handled = t.handle_packet(datagram, now);
    match handled {
        Handled::Progress => slot.mark_progress(now),
        Handled::Malformed => {
            metrics.malformed_packets.fetch_add(1, Relaxed);
        }
        _ => {}
    }
    tracing::trace!(?handled, len = datagram.len(), "tftp packet");
    handled
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

/// Adds a finished transfer's counters to the metrics, logs its end and tells the
/// timeline of the machine at `peer`. Call it in the transfer's span, which names the
/// file.
pub(crate) fn finish(
    metrics: &TftpMetrics,
    p: &Prepared,
    peer: SocketAddr,
    outcome: Outcome,
    started: Instant,
) {
    let t = &p.transfer;
    let (label, why) = outcome_label(&outcome, t.status());
    // An IPv4 client on a dual-stack listener is the same machine as over IPv4.
    if let Some(timeline) = &metrics.timeline {
        let ip = peer.ip().to_canonical();
        timeline.record_for_ip(
            ip,
            crate::timeline::Report {
                source: crate::timeline::Source::Tftp,
                what: "RRQ",
                outcome: label,
                why,
                ip: Some(ip),
                detail: Some(format!(
                    "{} blksize={} windowsize={} sent={}",
                    p.file,
                    p.blksize,
                    p.windowsize,
                    t.stats().bytes_sent
                )),
            },
        );
    }
    let st = t.stats();
    metrics.bytes_sent.fetch_add(st.bytes_sent, Relaxed);
    metrics.retransmits.fetch_add(st.retransmits, Relaxed);
    metrics.duplicate_acks.fetch_add(st.duplicate_acks, Relaxed);
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let failure = match (outcome, t.status()) {
        (Outcome::Finished, Status::Done) => None,
        (Outcome::Finished, Status::Failed(FailReason::Timeout)) => Some(Reason::Timeout),
        (Outcome::Finished, Status::Failed(FailReason::Deadline)) => {
            metrics.transfers_deadline.fetch_add(1, Relaxed);
            Some(Reason::Deadline)
        }
        // Counted in `transfers_evicted` by admission, when the slot was taken.
        (Outcome::Finished, Status::Failed(FailReason::Evicted)) => Some(Reason::Evicted),
        (Outcome::Finished, Status::Failed(FailReason::PeerError(code))) => {
            tracing::info!(code, "tftp client aborted transfer");
            Some(Reason::PeerError)
        }
        (Outcome::Socket(e), _) => {
            tracing::info!(error = %e, "tftp transfer socket error");
            Some(Reason::SocketError)
        }
        (Outcome::Finished, Status::Declined(code)) => {
            metrics.transfers_declined.fetch_add(1, Relaxed);
            tracing::debug!(code, "tftp client ended the transfer at the OACK");
            return;
        }
        (Outcome::Shutdown, _) | (Outcome::Finished, Status::Running) => None,
    };
    match failure {
        None if t.status() == Status::Done => {
            metrics.transfers_completed.fetch_add(1, Relaxed);
            tracing::info!(
                size = t.len(),
                elapsed_ms,
                retransmits = st.retransmits,
                "tftp transfer complete"
            );
        }
        None => {
            metrics.transfers_failed.fetch_add(1, Relaxed);
            tracing::info!("tftp transfer cancelled by shutdown");
        }
        Some(reason) => {
            metrics.transfers_failed.fetch_add(1, Relaxed);
            metrics.error(reason);
            tracing::info!(reason = reason.label(), elapsed_ms, "tftp transfer failed");
        }
    }
}

/// The timeline's words for how a transfer ended.
fn outcome_label(outcome: &Outcome, status: Status) -> (&'static str, Option<&'static str>) {
    match (outcome, status) {
        (Outcome::Finished, Status::Done) => ("complete", None),
        (Outcome::Finished, Status::Declined(_)) => ("declined", Some("size probe")),
        (Outcome::Finished, Status::Failed(FailReason::Timeout)) => ("failed", Some("timeout")),
        (Outcome::Finished, Status::Failed(FailReason::Deadline)) => ("failed", Some("deadline")),
        (Outcome::Finished, Status::Failed(FailReason::Evicted)) => ("failed", Some("evicted")),
        (Outcome::Finished, Status::Failed(FailReason::PeerError(_))) => {
            ("failed", Some("client error"))
        }
        (Outcome::Socket(_), _) => ("failed", Some("socket error")),
        (Outcome::Shutdown, _) | (Outcome::Finished, Status::Running) => ("cancelled", None),
    }
}

#[cfg(test)]
#[path = "span_tests.rs"]
mod span_tests;
