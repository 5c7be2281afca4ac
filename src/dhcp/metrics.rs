//! DHCP listener metrics.

use std::sync::Mutex;

use super::engine::{IgnoreReason, Outcome, PoolUsage};
use super::wire::DropReason;
use crate::metrics::{header, sample, Counter, Gauge, Histogram};

const IGNORE_REASONS: [IgnoreReason; 9] = [
    IgnoreReason::NotResponsible,
    IgnoreReason::Denied,
    IgnoreReason::UnknownClient,
    IgnoreReason::NoSubnet,
    IgnoreReason::PoolExhausted,
    IgnoreReason::OtherServer,
    IgnoreReason::NoRecord,
    IgnoreReason::NakSuppressed,
    IgnoreReason::Unsupported,
];

const OUTCOMES: [&str; 6] = ["offer", "ack", "nak", "inform", "release", "decline"];

/// Counters for one DHCP server.
#[derive(Debug, Default)]
pub struct DhcpMetrics {
    /// Datagrams received.
    pub received: Counter,
    /// Datagrams dropped before the engine, by reason (index of `DropReason::ALL`).
    pub dropped: [Counter; 8],
    /// Requests the engine ignored, by reason.
    pub ignored: [Counter; 9],
    /// Decisions by outcome: offer, ack, nak, inform, release, decline.
    pub outcomes: [Counter; 6],
    /// Replies sent.
    pub sent: Counter,
    /// Replies that failed to send.
    pub send_errors: Counter,
    /// Datagrams dropped because the engine queue was full.
    pub queue_full: Counter,
    /// Lease store commits (each one flush).
    pub commits: Counter,
    /// Lease changes written.
    pub committed_effects: Counter,
    /// Failed commits (their replies were not sent).
    pub commit_errors: Counter,
    /// Time from queuing a change to its flush completing.
    pub commit_latency: Histogram,
    /// Lease records held in memory.
    pub leases: Gauge,
    /// Pool usage per subnet, refreshed on every reclaim tick.
    pub pools: Mutex<Vec<PoolUsage>>,
}

impl DhcpMetrics {
    /// Counts a dropped datagram.
    pub fn drop(&self, reason: DropReason) {
        let i = DropReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.dropped[i].inc();
    }

    /// Number dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        let i = DropReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.dropped[i].get()
    }

    /// Counts an engine outcome.
    pub fn outcome(&self, outcome: &Outcome) {
        let i = match outcome {
            Outcome::Offer(_) => 0,
            Outcome::Ack(_) => 1,
            Outcome::Nak => 2,
            Outcome::Inform => 3,
            Outcome::Release(_) => 4,
            Outcome::Decline(_) => 5,
            Outcome::Ignored(r) => {
                let j = IGNORE_REASONS.iter().position(|x| x == r).unwrap_or(0);
                self.ignored[j].inc();
                return;
            }
        };
        self.outcomes[i].inc();
    }

    /// Number of decisions with this outcome label (`offer`, `ack`, …).
    pub fn outcome_count(&self, label: &str) -> u64 {
        OUTCOMES
            .iter()
            .position(|o| *o == label)
            .map_or(0, |i| self.outcomes[i].get())
    }

    /// Writes the Prometheus exposition.
    pub fn render_prometheus(&self, out: &mut String) {
        header(
            out,
            "shardboot_dhcp_received_total",
            "counter",
            "DHCP datagrams received",
        );
        out.push_str(&format!(
            "shardboot_dhcp_received_total {}\n",
            self.received.get()
        ));
        header(
            out,
            "shardboot_dhcp_dropped_total",
            "counter",
            "Malformed or unsupported datagrams dropped",
        );
        for (r, c) in DropReason::ALL.iter().zip(&self.dropped) {
            sample(
                out,
                "shardboot_dhcp_dropped_total",
                "reason",
                &r.to_string(),
                c.get(),
            );
        }
        header(
            out,
            "shardboot_dhcp_ignored_total",
            "counter",
            "Valid requests answered with silence",
        );
        for (r, c) in IGNORE_REASONS.iter().zip(&self.ignored) {
            sample(
                out,
                "shardboot_dhcp_ignored_total",
                "reason",
                r.as_str(),
                c.get(),
            );
        }
        header(
            out,
            "shardboot_dhcp_decisions_total",
            "counter",
            "Engine decisions by outcome",
        );
        for (o, c) in OUTCOMES.iter().zip(&self.outcomes) {
            sample(out, "shardboot_dhcp_decisions_total", "outcome", o, c.get());
        }
        for (name, help, c) in [
            ("shardboot_dhcp_sent_total", "Replies sent", &self.sent),
            (
                "shardboot_dhcp_send_errors_total",
                "Replies that failed to send",
                &self.send_errors,
            ),
            (
                "shardboot_dhcp_queue_full_total",
                "Datagrams dropped on a full engine queue",
                &self.queue_full,
            ),
            (
                "shardboot_lease_commits_total",
                "Lease store flushes",
                &self.commits,
            ),
            (
                "shardboot_lease_committed_changes_total",
                "Lease changes made durable",
                &self.committed_effects,
            ),
            (
                "shardboot_lease_commit_errors_total",
                "Failed lease store commits",
                &self.commit_errors,
            ),
        ] {
            header(out, name, "counter", help);
            out.push_str(&format!("{name} {}\n", c.get()));
        }
        self.commit_latency.render(
            out,
            "shardboot_lease_commit_seconds",
            "Time from a lease change to its durable flush",
        );
        header(out, "shardboot_leases", "gauge", "Lease records in memory");
        out.push_str(&format!("shardboot_leases {}\n", self.leases.get()));
        let pools = self.pools.lock().map(|p| p.clone()).unwrap_or_default();
        header(
            out,
            "shardboot_pool_free_addresses",
            "gauge",
            "Free addresses per subnet",
        );
        for p in &pools {
            sample(
                out,
                "shardboot_pool_free_addresses",
                "subnet",
                &p.network.to_string(),
                p.free,
            );
        }
        header(
            out,
            "shardboot_pool_used_addresses",
            "gauge",
            "Addresses held per subnet",
        );
        for p in &pools {
            sample(
                out,
                "shardboot_pool_used_addresses",
                "subnet",
                &p.network.to_string(),
                p.in_use,
            );
        }
    }
}
