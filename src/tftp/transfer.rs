//! One read transfer as a sans-IO state machine.
//!
//! The shell feeds it received datagrams (`handle_packet`) and timer expiries
//! (`handle_timeout`), both with `now` passed in, then drains `poll_transmit` into its
//! socket and sleeps until `poll_timeout`. Nothing here reads a clock, a file or a socket,
//! so every protocol rule is unit-tested with synthetic time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::options::Negotiated;
use super::packet::{self, ErrorCode, Packet};

/// Longest wait between retransmissions once backed off (unless the negotiated
/// timeout itself is longer).
pub const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// RFC 2347 §3: the client ends the request at the OACK.
const OPTION_NEGOTIATION_ERROR: u16 = 8;

/// Where a transfer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Still sending or waiting for an ACK.
    Running,
    /// The final block was acknowledged.
    Done,
    /// The transfer ended without delivering the file.
    Failed(FailReason),
    /// The client ended the transfer at the OACK with ERROR 8 (RFC 2347 §3): it wanted
    /// only the negotiated values, as UEFI PXE does to learn `tsize` before its real
    /// request (RFC 2349 §4), or it declined them. Not a failure.
    Declined(u16),
}

/// Why a transfer ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailReason {
    /// No progress after the configured number of retransmissions.
    Timeout,
    /// The transfer's overall deadline passed, progressing or not: a client that ACKs
    /// just often enough to dodge the retransmission limit cannot hold its slot forever.
    Deadline,
    /// The shell took the slot back for a newer request: the table was full and this
    /// transfer had never received an ACK (see `admission`).
    Evicted,
    /// The client sent an ERROR packet (code 8 declines our OACK, RFC 2347 §3).
    PeerError(u16),
}

/// What a received datagram did, for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// An ACK moved the window forward.
    Progress,
    /// An ACK for a block already acknowledged; nothing is resent (RFC 1123 §4.2.3.1).
    DuplicateAck,
    /// Well-formed but meaningless here (stale ACK, DATA, a request on the transfer TID).
    Ignored,
    /// The client aborted with an ERROR packet.
    PeerError,
    /// Not a TFTP packet.
    Malformed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// OACK sent (or due) and waiting for ACK 0 (RFC 2347 §2).
    Oack {
        due: bool,
    },
    Data,
    Finished(Status),
}

/// Counters one transfer accumulates; the shell adds them to the server metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// DATA payload octets sent, retransmissions included.
    pub bytes_sent: u64,
    /// DATA blocks sent again after a timeout or a partial window ACK.
    pub retransmits: u64,
    /// Duplicate ACKs received and ignored.
    pub duplicate_acks: u64,
    /// Timer expiries that led to a resend.
    pub timeouts: u64,
}

/// The limits a transfer runs under besides the negotiated options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Retransmissions without progress before the transfer fails.
    pub max_retries: u32,
    /// Longest the whole transfer may take, from `new`'s `now`.
    pub lifetime: Duration,
}

/// A read transfer of one file to one client.
#[derive(Debug)]
pub struct Transfer {
    data: Arc<[u8]>,
    blksize: usize,
    windowsize: u64,
    timeout: Duration,
    max_retries: u32,
    oack: Option<Vec<u8>>,
    /// Number of DATA blocks including the final short (possibly empty) one.
    total: u64,
    /// Highest block sequence acknowledged; sequences count from 1 and never wrap
    /// (the wire block number is the low 16 bits).
    acked: u64,
    /// Next block sequence to put on the wire.
    next: u64,
    /// Highest block sequence sent so far.
    sent_max: u64,
    /// When `handle_timeout` next retransmits.
    deadline: Instant,
    /// When the transfer fails whatever its progress ([`Budget::lifetime`]).
    end: Instant,
    retries: u32,
    phase: Phase,
    /// An ERROR packet still to send after the transfer finished on our side, so the
    /// client stops at once instead of retrying into a closed port (RFC 1350 §7).
    farewell: Option<&'static str>,
    stats: TransferStats,
}

impl Transfer {
    /// Starts a transfer of `data` with the negotiated parameters within `budget`; the
    /// first packet (OACK or DATA 1) is ready in `poll_transmit`.
    pub fn new(data: Arc<[u8]>, neg: &Negotiated, budget: Budget, now: Instant) -> Self {
        let blksize = usize::from(neg.blksize.max(1));
        // RFC 1350 §6: a block shorter than blksize ends the transfer, so a file whose
        // length is a multiple of blksize ends with an empty block.
        let total = (data.len() / blksize) as u64 + 1;
        let oack = (!neg.oack.is_empty()).then(|| {
            let mut buf = Vec::new();
            packet::encode_oack(&mut buf, &neg.oack);
            buf
        });
        let phase = if oack.is_some() {
            Phase::Oack { due: true }
        } else {
            Phase::Data
        };
        Transfer {
            data,
            blksize,
            windowsize: u64::from(neg.windowsize.max(1)),
            timeout: neg.timeout,
            max_retries: budget.max_retries,
            oack,
            total,
            acked: 0,
            next: 1,
            sent_max: 0,
            deadline: now + neg.timeout,
            end: now + budget.lifetime,
            retries: 0,
            phase,
            farewell: None,
            stats: TransferStats::default(),
        }
    }

    /// Current status.
    pub fn status(&self) -> Status {
        match self.phase {
            Phase::Finished(s) => s,
            _ => Status::Running,
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> TransferStats {
        self.stats
    }

    /// File size as sent.
    pub fn len(&self) -> u64 {
        self.data.len() as u64
    }

    /// True for a zero-length file.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// When `handle_timeout` must next be called, or `None` once finished.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Finished(_) => None,
            _ => Some(self.deadline.min(self.end)),
        }
    }

    /// Writes the next datagram to send into `out`; returns false when nothing is due
    /// until the next input or timeout.
    pub fn poll_transmit(&mut self, out: &mut Vec<u8>) -> bool {
        if let Some(message) = self.farewell.take() {
            packet::encode_error(out, ErrorCode::NotDefined, message);
            return true;
        }
        match self.phase {
            Phase::Oack { due: true } => {
                out.clear();
                out.extend_from_slice(self.oack.as_deref().unwrap_or_default());
                self.phase = Phase::Oack { due: false };
                true
            }
            Phase::Data if self.next <= self.total && self.next <= self.acked + self.windowsize => {
                let seq = self.next;
                let start = ((seq - 1) as usize).saturating_mul(self.blksize);
                let end = start.saturating_add(self.blksize).min(self.data.len());
                let payload = &self.data[start.min(end)..end];
                // The wire block number is the sequence modulo 2^16; after 65535 it
                // rolls over to 0, as tftp-hpa, atftp, iPXE and curl expect.
                packet::encode_data(out, seq as u16, payload);
                self.stats.bytes_sent += payload.len() as u64;
                if seq <= self.sent_max {
                    self.stats.retransmits += 1;
                }
                self.sent_max = self.sent_max.max(seq);
                self.next += 1;
                true
            }
            _ => false,
        }
    }

    /// Feeds one datagram received from the transfer's peer.
    pub fn handle_packet(&mut self, buf: &[u8], now: Instant) -> Handled {
        if matches!(self.phase, Phase::Finished(_)) {
            return Handled::Ignored;
        }
        match Packet::decode(buf) {
            Ok(Packet::Ack(block)) => self.handle_ack(block, now),
            Ok(Packet::Error { code, .. }) => {
                let status = match self.phase {
                    Phase::Oack { .. } if code == OPTION_NEGOTIATION_ERROR => {
                        Status::Declined(code)
                    }
                    _ => Status::Failed(FailReason::PeerError(code)),
                };
                self.phase = Phase::Finished(status);
                Handled::PeerError
            }
            Ok(_) => Handled::Ignored,
            Err(_) => Handled::Malformed,
        }
    }

    fn handle_ack(&mut self, block: u16, now: Instant) -> Handled {
        match self.phase {
            Phase::Oack { .. } => {
                // RFC 2347 §2: ACK 0 confirms the OACK; data starts with block 1.
                if block != 0 {
                    return Handled::Ignored;
                }
                self.phase = Phase::Data;
                self.progress(now);
                Handled::Progress
            }
            Phase::Data => {
                // Distance from the last acknowledged block, modulo 2^16; a window
                // never spans more than 65535 blocks, so this is unambiguous.
                let delta = u64::from(block.wrapping_sub(self.acked as u16));
                if delta == 0 {
                    // RFC 1123 §4.2.3.1: never answer a duplicate ACK with data, or
                    // every later block is sent twice (sorcerer's apprentice).
                    self.stats.duplicate_acks += 1;
                    return Handled::DuplicateAck;
                }
                if delta > self.sent_max - self.acked {
                    // Older than the window, or for a block we never sent.
                    return Handled::Ignored;
                }
                self.acked += delta;
                if self.acked >= self.total {
                    self.phase = Phase::Finished(Status::Done);
                    return Handled::Progress;
                }
                // RFC 7440 §4: an ACK inside the window means the blocks after it were
                // lost; the next window starts right after the acknowledged block.
                self.next = self.acked + 1;
                self.progress(now);
                Handled::Progress
            }
            Phase::Finished(_) => Handled::Ignored,
        }
    }

    fn progress(&mut self, now: Instant) {
        self.retries = 0;
        self.deadline = now + self.timeout;
    }

    /// Call when `now` has reached `poll_timeout`: resends the OACK or the current
    /// window (RFC 1350 §2 retransmission), or fails after `max_retries` attempts.
    pub fn handle_timeout(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Finished(_)) {
            return;
        }
        if now >= self.end {
            self.fail(FailReason::Deadline, "transfer deadline exceeded");
            return;
        }
        if now < self.deadline {
            return;
        }
        if self.retries >= self.max_retries {
            self.phase = Phase::Finished(Status::Failed(FailReason::Timeout));
            return;
        }
        self.retries += 1;
        self.stats.timeouts += 1;
        // RFC 1123 §4.2.3.2: back off exponentially. Some clients (atftp) re-ACK a
        // duplicate block only on their own multi-second timer, so a fixed short
        // interval would exhaust the retries before they answer.
        let backoff = self
            .timeout
            .saturating_mul(1 << self.retries.min(16))
            .min(MAX_BACKOFF.max(self.timeout));
        self.deadline = now + backoff;
        match self.phase {
            Phase::Oack { .. } => self.phase = Phase::Oack { due: true },
            Phase::Data => self.next = self.acked + 1,
            Phase::Finished(_) => {}
        }
    }

    /// Call when the shell takes this transfer's slot for a newer request: it fails
    /// at once and tells the client with an ERROR packet (due in `poll_transmit`).
    pub fn handle_eviction(&mut self) {
        if !matches!(self.phase, Phase::Finished(_)) {
            self.fail(FailReason::Evicted, "server busy");
        }
    }

    fn fail(&mut self, reason: FailReason, message: &'static str) {
        self.phase = Phase::Finished(Status::Failed(reason));
        self.farewell = Some(message);
    }
}

/// Converts a file to netascii (RFC 764 via RFC 1350 §5): CR LF for every LF, CR NUL
/// for a bare CR. The file cache keeps the result per file (`cache::FileCache::load_netascii`),
/// so concurrent netascii transfers of one file share one conversion.
pub fn to_netascii(data: &[u8]) -> Vec<u8> {
    let extra = data.iter().filter(|&&b| b == b'\n' || b == b'\r').count();
    let mut out = Vec::with_capacity(data.len() + extra);
    for &b in data {
        match b {
            b'\n' => out.extend_from_slice(b"\r\n"),
            b'\r' => out.extend_from_slice(b"\r\0"),
            _ => out.push(b),
        }
    }
    out
}

#[cfg(test)]
#[path = "transfer_tests.rs"]
mod tests;
