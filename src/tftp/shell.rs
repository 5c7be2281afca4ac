//! What both transfer shells (`server`, one socket per transfer, and `single_port`)
//! share once a transfer is admitted: the receive buffer size, why a transfer stopped,
//! and how its end is counted and logged.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use super::metrics::{Reason, TftpMetrics};
use super::transfer::{FailReason, Status, Transfer};

/// Largest datagram we read. Requests are ≤ 512 octets by RFC 2347 §2; anything we
/// receive beyond this is truncated and then fails to decode.
pub(crate) const RECV_BUF: usize = 2048;

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
