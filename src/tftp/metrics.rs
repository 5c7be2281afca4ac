//! TFTP counters, lock-free, rendered in the Prometheus text format.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::path::Refusal;
use crate::confine::BadName;

/// Why a request or transfer ended in an error; the `reason` label of
/// `shardboot_tftp_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A path refusal (confinement, missing file, size).
    Path(Refusal),
    /// `max_transfers` reached.
    Busy,
    /// `max_per_client` reached.
    PerClientLimit,
    /// A write request (this server is read-only).
    WriteRequest,
    /// A transfer mode other than octet or netascii.
    BadMode,
    /// No progress after all retries.
    Timeout,
    /// The transfer's overall deadline (`tftp.transfer_deadline_secs`) passed.
    Deadline,
    /// The slot was taken for a newer request before any ACK arrived.
    Evicted,
    /// The client sent an ERROR packet.
    PeerError,
    /// Sending or receiving on the transfer socket failed.
    SocketError,
}

const REFUSALS: [Refusal; 14] = [
    Refusal::Name(BadName::Empty),
    Refusal::Name(BadName::TooLong),
    Refusal::Name(BadName::ControlChar),
    Refusal::Name(BadName::BadChar),
    Refusal::Name(BadName::DotDot),
    Refusal::Name(BadName::Hidden),
    Refusal::Name(BadName::TooDeep),
    Refusal::SymlinkDir,
    Refusal::SymlinkEscape,
    Refusal::NotRegular,
    Refusal::TooLarge,
    Refusal::NotFound,
    Refusal::PermissionDenied,
    Refusal::Io,
];
const OTHER: [Reason; 9] = [
    Reason::Busy,
    Reason::PerClientLimit,
    Reason::WriteRequest,
    Reason::BadMode,
    Reason::Timeout,
    Reason::Deadline,
    Reason::Evicted,
    Reason::PeerError,
    Reason::SocketError,
];
const N_REASONS: usize = REFUSALS.len() + OTHER.len();

impl Reason {
    fn index(self) -> usize {
        match self {
            Reason::Path(r) => REFUSALS.iter().position(|&x| x == r).unwrap_or(0),
            other => REFUSALS.len() + OTHER.iter().position(|&x| x == other).unwrap_or(0),
        }
    }

    fn from_index(i: usize) -> Reason {
        if i < REFUSALS.len() {
            Reason::Path(REFUSALS[i])
        } else {
            OTHER[i - REFUSALS.len()]
        }
    }

    /// Stable label value.
    pub fn label(self) -> &'static str {
        match self {
            Reason::Path(r) => r.label(),
            Reason::Busy => "busy",
            Reason::PerClientLimit => "per_client_limit",
            Reason::WriteRequest => "write_request",
            Reason::BadMode => "bad_mode",
            Reason::Timeout => "timeout",
            Reason::Deadline => "deadline",
            Reason::Evicted => "evicted",
            Reason::PeerError => "peer_error",
            Reason::SocketError => "socket_error",
        }
    }
}

/// Server-wide TFTP counters, shared by the listener and every transfer.
#[derive(Debug, Default)]
pub struct TftpMetrics {
    /// Where each finished transfer is told (the machines' timeline), if anywhere.
    pub timeline: Option<std::sync::Arc<crate::timeline::Timeline>>,
    /// Read requests accepted (a transfer began).
    pub transfers_started: AtomicU64,
    /// Transfers whose final block was acknowledged.
    pub transfers_completed: AtomicU64,
    /// Transfers that ended early (timeout, client error, socket error).
    pub transfers_failed: AtomicU64,
    /// Transfers the client ended at the OACK: size probes (UEFI PXE asks `tsize`
    /// first) and declined options. Neither delivered the file nor failed.
    pub transfers_declined: AtomicU64,
    /// Transfers ended because their overall deadline passed, progressing or not.
    pub transfers_deadline: AtomicU64,
    /// Transfers that had never received an ACK, evicted when the table was full so a
    /// newer request could start (spoofed sources never ACK).
    pub transfers_evicted: AtomicU64,
    /// Netascii conversions done (cache misses of the converted form); concurrent
    /// netascii transfers of one unchanged file share one.
    pub netascii_conversions: AtomicU64,
    /// Transfers in progress (a gauge).
    pub transfers_active: AtomicU64,
    /// DATA payload octets sent, retransmissions included; added when each transfer
    /// ends.
    pub bytes_sent: AtomicU64,
    /// DATA blocks sent again.
    pub retransmits: AtomicU64,
    /// Duplicate ACKs ignored (RFC 1123 §4.2.3.1).
    pub duplicate_acks: AtomicU64,
    /// Requests refused by the path policy (traversal, symlink escape, bad names);
    /// missing files are not counted here.
    pub refused_paths: AtomicU64,
    /// Datagrams that were not valid TFTP, dropped.
    pub malformed_packets: AtomicU64,
    /// File cache hits.
    pub cache_hits: AtomicU64,
    /// File cache misses and reloads (file read from disk).
    pub cache_misses: AtomicU64,
    errors: [AtomicU64; N_REASONS],
}

impl TftpMetrics {
    /// Counters that also tell `timeline` of every finished transfer.
    pub fn with_timeline(timeline: std::sync::Arc<crate::timeline::Timeline>) -> Self {
        Self {
            timeline: Some(timeline),
            ..Self::default()
        }
    }

    /// Counts one error by reason.
    pub fn error(&self, reason: Reason) {
        self.errors[reason.index()].fetch_add(1, Relaxed);
        if let Reason::Path(r) = reason {
            if r.is_policy() {
                self.refused_paths.fetch_add(1, Relaxed);
            }
        }
    }

    /// Current count for one reason.
    pub fn errors(&self, reason: Reason) -> u64 {
        self.errors[reason.index()].load(Relaxed)
    }

    /// Appends all counters in the Prometheus text exposition format.
    pub fn render_prometheus(&self, out: &mut String) {
        let simple: [(&str, &str, &str, &AtomicU64); 15] = [
            (
                "transfers_started_total",
                "counter",
                "TFTP read transfers started.",
                &self.transfers_started,
            ),
            (
                "transfers_completed_total",
                "counter",
                "TFTP transfers completed.",
                &self.transfers_completed,
            ),
            (
                "transfers_failed_total",
                "counter",
                "TFTP transfers that ended early.",
                &self.transfers_failed,
            ),
            (
                "transfers_declined_total",
                "counter",
                "TFTP transfers the client ended at the OACK (size probes, declined options).",
                &self.transfers_declined,
            ),
            (
                "transfers_deadline_total",
                "counter",
                "TFTP transfers ended by their overall deadline.",
                &self.transfers_deadline,
            ),
            (
                "transfers_evicted_total",
                "counter",
                "TFTP transfers without any ACK evicted for a newer request.",
                &self.transfers_evicted,
            ),
            (
                "netascii_conversions_total",
                "counter",
                "TFTP netascii conversions (converted-form cache misses).",
                &self.netascii_conversions,
            ),
            (
                "transfers_active",
                "gauge",
                "TFTP transfers in progress.",
                &self.transfers_active,
            ),
            (
                "bytes_sent_total",
                "counter",
                "TFTP data octets sent, retransmissions included.",
                &self.bytes_sent,
            ),
            (
                "retransmits_total",
                "counter",
                "TFTP data blocks retransmitted.",
                &self.retransmits,
            ),
            (
                "duplicate_acks_total",
                "counter",
                "TFTP duplicate ACKs ignored.",
                &self.duplicate_acks,
            ),
            (
                "refused_paths_total",
                "counter",
                "TFTP requests refused by the path policy.",
                &self.refused_paths,
            ),
            (
                "malformed_packets_total",
                "counter",
                "TFTP datagrams dropped as malformed.",
                &self.malformed_packets,
            ),
            (
                "cache_hits_total",
                "counter",
                "TFTP file cache hits.",
                &self.cache_hits,
            ),
            (
                "cache_misses_total",
                "counter",
                "TFTP file cache misses and reloads.",
                &self.cache_misses,
            ),
        ];
        for (name, kind, help, v) in simple {
            let _ = writeln!(out, "# HELP shardboot_tftp_{name} {help}");
            let _ = writeln!(out, "# TYPE shardboot_tftp_{name} {kind}");
            let _ = writeln!(out, "shardboot_tftp_{name} {}", v.load(Relaxed));
        }
        out.push_str("# HELP shardboot_tftp_errors_total TFTP errors by reason.\n");
        out.push_str("# TYPE shardboot_tftp_errors_total counter\n");
        for (i, v) in self.errors.iter().enumerate() {
            let _ = writeln!(
                out,
                "shardboot_tftp_errors_total{{reason=\"{}\"}} {}",
                Reason::from_index(i).label(),
                v.load(Relaxed)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_a_distinct_slot() {
        for i in 0..N_REASONS {
            assert_eq!(Reason::from_index(i).index(), i);
        }
    }

    #[test]
    fn renders() {
        let m = TftpMetrics::default();
        m.transfers_started.fetch_add(3, Relaxed);
        m.error(Reason::Path(Refusal::Name(BadName::DotDot)));
        m.error(Reason::Path(Refusal::NotFound));
        m.error(Reason::Busy);
        m.transfers_evicted.fetch_add(2, Relaxed);
        let mut s = String::new();
        m.render_prometheus(&mut s);
        assert!(s.contains("shardboot_tftp_transfers_started_total 3\n"));
        assert!(s.contains("shardboot_tftp_errors_total{reason=\"dot_dot\"} 1\n"));
        assert!(s.contains("shardboot_tftp_errors_total{reason=\"busy\"} 1\n"));
        assert!(s.contains("# TYPE shardboot_tftp_transfers_evicted_total counter\n"));
        assert!(s.contains("shardboot_tftp_transfers_evicted_total 2\n"));
        assert!(s.contains("shardboot_tftp_transfers_deadline_total 0\n"));
        assert!(s.contains("shardboot_tftp_errors_total{reason=\"deadline\"} 0\n"));
        // Missing files are errors but not policy refusals.
        assert!(s.contains("shardboot_tftp_refused_paths_total 1\n"));
    }
}
