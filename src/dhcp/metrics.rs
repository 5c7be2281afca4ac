//! DHCP listener metrics.

use std::sync::Mutex;

use super::engine::{IgnoreReason, Outcome, PoolUsage};
use super::wire::DropReason;
use crate::metrics::{header, sample, Counter, Gauge, LabeledCounters};

const IGNORE_REASONS: [IgnoreReason; 13] = [
    IgnoreReason::NotResponsible,
    IgnoreReason::Denied,
    IgnoreReason::UnknownClient,
    IgnoreReason::NoSubnet,
    IgnoreReason::PoolExhausted,
    IgnoreReason::OtherServer,
    IgnoreReason::NoRecord,
    IgnoreReason::NakSuppressed,
    IgnoreReason::Unsupported,
    IgnoreReason::Limited,
    IgnoreReason::NotBootClient,
    IgnoreReason::Probing,
    IgnoreReason::NotFromClient,
];

/// Counters for one DHCP server.
#[derive(Debug)]
pub struct DhcpMetrics {
    /// Datagrams received.
    pub received: Counter,
    /// Datagrams dropped before the engine, by reason.
    pub drops: LabeledCounters<{ DropReason::ALL.len() }>,
    /// Requests the engine ignored, by reason.
    pub ignored: LabeledCounters<{ IGNORE_REASONS.len() }>,
    /// Decisions by outcome: offer, ack, nak, inform, release, decline.
    pub outcomes: LabeledCounters<8>,
    /// Valid requests by message type.
    pub requests: LabeledCounters<6>,
    /// With several members: who answers DISCOVERs and REQUESTs without a server-id
    /// (`responsible`, `takeover`, `other_member`).
    pub responsibility: LabeledCounters<3>,
    /// Replies sent.
    pub sent: Counter,
    /// Replies that failed to send.
    pub send_errors: Counter,
    /// Datagrams dropped because the engine queue was full.
    pub queue_full: Counter,
    /// DISCOVERs left unanswered while the lease store fails writes.
    pub store_failing: Counter,
    /// ACKs withheld because a member holds the address for another client.
    pub store_refused: Counter,
    /// Relayed packets (giaddr set) from a source no `dhcp.relays` entry trusts.
    pub untrusted_relay: Counter,
    /// ICMP echo probes sent before offering an address the store never saw, or one
    /// inherited from a departed member.
    pub probes: Counter,
    /// Probed addresses that answered: quarantined, another offered.
    pub probe_conflicts: Counter,
    /// ICMP echo replies that matched no probe (identifier, sequence and source).
    pub probe_unmatched: Counter,
    /// Addresses offered without the probe they needed because a cap was reached (the
    /// engine's count, published with the pool use).
    pub probes_skipped: Gauge,
    /// Lease records held in memory.
    pub leases: Gauge,
    /// 1 while the DHCP sockets are bound and served.
    pub listening: Gauge,
    /// Unix seconds until which fresh addresses are narrowed after a membership change
    /// (0: no transition).
    pub transition_until: Gauge,
    /// Pool usage per subnet, refreshed on every reclaim tick.
    pub pools: Mutex<Vec<PoolUsage>>,
}

impl Default for DhcpMetrics {
    fn default() -> Self {
        Self {
            received: Counter::default(),
            drops: LabeledCounters::new(DropReason::ALL.map(|r| r.as_str())),
            ignored: LabeledCounters::new(IGNORE_REASONS.map(|r| r.as_str())),
            outcomes: LabeledCounters::new([
                "offer",
                "ack",
                "nak",
                "inform",
                "release",
                "decline",
                "proxy_offer",
                "proxy_ack",
            ]),
            responsibility: LabeledCounters::new(["responsible", "takeover", "other_member"]),
            requests: LabeledCounters::new([
                "discover", "request", "decline", "release", "inform", "other",
            ]),
            sent: Counter::default(),
            send_errors: Counter::default(),
            queue_full: Counter::default(),
            store_failing: Counter::default(),
            store_refused: Counter::default(),
            untrusted_relay: Counter::default(),
            probes: Counter::default(),
            probe_conflicts: Counter::default(),
            probe_unmatched: Counter::default(),
            probes_skipped: Gauge::default(),
            leases: Gauge::default(),
            listening: Gauge::default(),
            transition_until: Gauge::default(),
            pools: Mutex::default(),
        }
    }
}

impl DhcpMetrics {
    /// Counts a dropped datagram.
    pub fn drop(&self, reason: DropReason) {
        self.drops.inc(reason.as_str());
    }

    /// Counts `n` dropped datagrams.
    pub fn drop_many(&self, reason: DropReason, n: u64) {
        self.drops.add(reason.as_str(), n);
    }

    /// Number dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops.get(reason.as_str())
    }

    /// Counts an engine outcome.
    pub fn outcome(&self, outcome: &Outcome) {
        let label = match outcome {
            Outcome::Offer(_) => "offer",
            Outcome::Ack(_) => "ack",
            Outcome::Nak => "nak",
            Outcome::Inform => "inform",
            Outcome::Release(_) => "release",
            Outcome::Decline(_) => "decline",
            Outcome::ProxyOffer => "proxy_offer",
            Outcome::ProxyAck => "proxy_ack",
            // Counted when the echo is sent (`probes`); the DISCOVER's own outcome comes
            // when it is decided again.
            Outcome::Probe(_) => return,
            Outcome::Ignored(r) => return self.ignored.inc(r.as_str()),
        };
        self.outcomes.inc(label);
    }

    /// Number of decisions with this outcome label (`offer`, `ack`, …).
    pub fn outcome_count(&self, label: &str) -> u64 {
        self.outcomes.get(label)
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
        self.drops.render(
            out,
            "shardboot_dhcp_dropped_total",
            "reason",
            "Malformed or unsupported datagrams dropped",
        );
        self.ignored.render(
            out,
            "shardboot_dhcp_ignored_total",
            "reason",
            "Valid requests answered with silence",
        );
        self.requests.render(
            out,
            "shardboot_dhcp_requests_total",
            "type",
            "Valid requests by DHCP message type",
        );
        self.outcomes.render(
            out,
            "shardboot_dhcp_decisions_total",
            "outcome",
            "Engine decisions by outcome",
        );
        self.responsibility.render(
            out,
            "shardboot_dhcp_responsibility_total",
            "why",
            "Whether this member answers a client (several members only)",
        );
        header(
            out,
            "shardboot_dhcp_transition_until_seconds",
            "gauge",
            "Unix time until which fresh addresses are narrowed after a member list change (0: none)",
        );
        out.push_str(&format!(
            "shardboot_dhcp_transition_until_seconds {}\n",
            self.transition_until.get()
        ));
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
                "shardboot_dhcp_store_failing_unanswered_total",
                "DISCOVERs left unanswered while the lease store fails writes",
                &self.store_failing,
            ),
            (
                "shardboot_dhcp_store_refused_total",
                "ACKs withheld because the shared lease store holds the address for another client",
                &self.store_refused,
            ),
            (
                "shardboot_dhcp_untrusted_relay_total",
                "Relayed packets from a source no dhcp.relays entry trusts, dropped",
                &self.untrusted_relay,
            ),
            (
                "shardboot_dhcp_probes_total",
                "ICMP echo probes sent before offering an address the store never saw or one inherited from a departed member",
                &self.probes,
            ),
            (
                "shardboot_dhcp_probe_conflicts_total",
                "Probed addresses that answered: quarantined like a DECLINE, another offered",
                &self.probe_conflicts,
            ),
            (
                "shardboot_dhcp_probe_unmatched_replies_total",
                "ICMP echo replies matching no probe (identifier, sequence, source), ignored",
                &self.probe_unmatched,
            ),
        ] {
            header(out, name, "counter", help);
            out.push_str(&format!("{name} {}\n", c.get()));
        }
        header(
            out,
            "shardboot_dhcp_probes_skipped_total",
            "counter",
            "Addresses offered without the probe they needed because the probe caps were reached",
        );
        out.push_str(&format!(
            "shardboot_dhcp_probes_skipped_total {}\n",
            self.probes_skipped.get()
        ));
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
