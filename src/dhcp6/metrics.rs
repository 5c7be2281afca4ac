//! DHCPv6 counters for `/metrics`.

use crate::metrics::{header, value, Counter, Gauge, LabeledCounters};

/// Why a datagram was dropped before the engine saw it, or after.
pub const DROP_REASONS: [&str; 13] = [
    "oversized",
    "bad_relay",
    "truncated",
    "not_client_message",
    "bad_option_length",
    "relay_message_in_client_message",
    "undecodable",
    "store_failed",
    "queue_full",
    "receive_buffer_full",
    "store_refused",
    "store_unavailable",
    "untrusted_relay",
];

/// What the engine decided.
pub const OUTCOMES: [&str; 17] = [
    "advertise",
    "bound",
    "released",
    "declined",
    "confirmed",
    "not_on_link",
    "informed",
    "no_addresses",
    "no_binding",
    "not_responsible",
    "no_subnet",
    "malformed",
    "other_server",
    "denied",
    "unknown_client",
    "use_multicast",
    "unicast",
];

/// The DHCPv6 listener's counters.
#[derive(Debug)]
pub struct Dhcp6Metrics {
    /// Datagrams received.
    pub received: Counter,
    /// Datagrams dropped, by reason.
    pub dropped: LabeledCounters<13>,
    /// Engine decisions, by outcome (`nothing_to_answer` is counted under
    /// `not_responsible`: both are silences another server covers).
    pub outcomes: LabeledCounters<17>,
    /// Replies sent.
    pub sent: Counter,
    /// Replies the socket refused.
    pub send_errors: Counter,
    /// Leases and advertisements held.
    pub leases: Gauge,
}

impl Default for Dhcp6Metrics {
    fn default() -> Self {
        Self {
            received: Counter::default(),
            dropped: LabeledCounters::new(DROP_REASONS),
            outcomes: LabeledCounters::new(OUTCOMES),
            sent: Counter::default(),
            send_errors: Counter::default(),
            leases: Gauge::default(),
        }
    }
}

impl Dhcp6Metrics {
    /// Counts one engine decision.
    pub fn outcome(&self, outcome: &super::engine::Outcome6) {
        use super::engine::{Ignore6, Outcome6};
        let label = match outcome {
            Outcome6::Advertise(_) => "advertise",
            Outcome6::Bound(_) => "bound",
            Outcome6::Released => "released",
            Outcome6::Declined => "declined",
            Outcome6::Confirmed(true) => "confirmed",
            Outcome6::Confirmed(false) => "not_on_link",
            Outcome6::Informed => "informed",
            Outcome6::NoAddresses => "no_addresses",
            Outcome6::NoBinding => "no_binding",
            Outcome6::Ignored(Ignore6::NotResponsible | Ignore6::NothingToAnswer) => {
                "not_responsible"
            }
            Outcome6::Ignored(Ignore6::NoSubnet) => "no_subnet",
            Outcome6::Ignored(Ignore6::Malformed) => "malformed",
            Outcome6::Ignored(Ignore6::OtherServer) => "other_server",
            Outcome6::Ignored(Ignore6::Denied) => "denied",
            Outcome6::Ignored(Ignore6::UnknownClient) => "unknown_client",
            Outcome6::UseMulticast => "use_multicast",
            Outcome6::Ignored(Ignore6::Unicast) => "unicast",
        };
        self.outcomes.inc(label);
    }

    /// Appends the Prometheus text format.
    pub fn render_prometheus(&self, out: &mut String) {
        for (name, help, v) in [
            (
                "shardboot_dhcp6_received_total",
                "DHCPv6 datagrams received.",
                self.received.get(),
            ),
            (
                "shardboot_dhcp6_sent_total",
                "DHCPv6 replies sent.",
                self.sent.get(),
            ),
            (
                "shardboot_dhcp6_send_errors_total",
                "DHCPv6 replies the socket refused.",
                self.send_errors.get(),
            ),
        ] {
            header(out, name, "counter", help);
            value(out, name, v);
        }
        self.dropped.render(
            out,
            "shardboot_dhcp6_dropped_total",
            "reason",
            "DHCPv6 datagrams dropped, by reason.",
        );
        self.outcomes.render(
            out,
            "shardboot_dhcp6_outcomes_total",
            "outcome",
            "DHCPv6 engine decisions, by outcome.",
        );
        header(
            out,
            "shardboot_dhcp6_leases",
            "gauge",
            "DHCPv6 leases and advertisements held.",
        );
        value(out, "shardboot_dhcp6_leases", self.leases.get());
    }
}
