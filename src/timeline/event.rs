//! What the timeline keeps of one exchange: the [`Event`] as stored and shown, the
//! [`Report`] a listener hands in, and how its free text is made safe to show
//! ([`clean`]) and logged as one exchange line.

use std::net::IpAddr;

use serde::Serialize;

use super::MAX_DETAIL;
use crate::mac::MacAddr;

/// Which listener saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// DHCPv4.
    Dhcp,
    /// DHCPv6.
    Dhcp6,
    /// TFTP.
    Tftp,
    /// The HTTP boot routes.
    Http,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Increases by one per event recorded (over all MACs): `?after=` pages on it.
    pub seq: u64,
    /// Unix time, milliseconds.
    pub at_ms: u64,
    /// Which listener.
    pub source: Source,
    /// What the machine asked: a DHCP or DHCPv6 message type, `RRQ`, an HTTP route.
    pub what: &'static str,
    /// What it got: `offer`, `ack`, `advertise`, `reply`, `silent`, `complete`, `200`, …
    pub outcome: &'static str,
    /// Why, for a silence or a failure (`not_responsible`, `timeout`, `miss`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<&'static str>,
    /// The address given (DHCP, DHCPv6: the first of the reply's) or the client's
    /// (TFTP, HTTP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
    /// A file with its options, an owner and the URL chained, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Box<str>>,
}

/// What a listener reports; [`Timeline::record`] stamps it.
#[derive(Debug, Clone)]
pub struct Report {
    /// Which listener.
    pub source: Source,
    /// What was asked.
    pub what: &'static str,
    /// What it got.
    pub outcome: &'static str,
    /// Why.
    pub why: Option<&'static str>,
    /// The address.
    pub ip: Option<IpAddr>,
    /// Free text, escaped and cut to [`MAX_DETAIL`] when recorded.
    pub detail: Option<String>,
}

/// An event as the disk journal keeps it: its machine, and whether it went to the
/// known machines (so a restart puts it back where it was).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journaled {
    /// The machine.
    pub mac: MacAddr,
    /// The event.
    pub event: Event,
    /// Kept with the known machines.
    pub known: bool,
}

/// `text` with every control or non-ASCII character escaped, at most [`MAX_DETAIL`]
/// (the escaped text is ASCII: octets and characters are the same count). One
/// allocation: DHCPv6 keeps a detail for every message.
pub(crate) fn clean(text: &str) -> Box<str> {
    // Most details need no escape (every boot request's does not): copied whole.
    if text.len() <= MAX_DETAIL && text.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return text.into();
    }
    let mut out = String::with_capacity(text.len().min(MAX_DETAIL));
    for c in text.chars() {
        if c.is_ascii_graphic() || c == ' ' {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
        if out.len() >= MAX_DETAIL {
            out.truncate(MAX_DETAIL);
            break;
        }
    }
    out.into_boxed_str()
}

/// The exchange as one log line, as dnsmasq's `log-dhcp` gives one per message (what
/// ironic-image's operators read with `kubectl logs`): on target `exchange`, at info
/// for what was answered or served, at debug for a silence (on several members, two
/// of three stay silent for every machine, and a flood of strangers is all silences).
/// `SHARDBOOT_LOG=info,exchange=warn` turns them off. Every field is shardboot's own
/// or escaped (`clean`).
pub(super) fn log_exchange(mac: MacAddr, e: &Event) {
    let source = match e.source {
        Source::Dhcp => "dhcp",
        Source::Dhcp6 => "dhcp6",
        Source::Tftp => "tftp",
        Source::Http => "http",
    };
    let ip = e.ip.map(tracing::field::display);
    let detail = e.detail.as_deref();
    if e.outcome == "silent" {
        tracing::debug!(target: "exchange", source, %mac, what = e.what, outcome = e.outcome, why = e.why, ip, detail, "{} {mac}: {}", e.what, e.outcome);
    } else {
        tracing::info!(target: "exchange", source, %mac, what = e.what, outcome = e.outcome, why = e.why, ip, detail, "{} {mac}: {}", e.what, e.outcome);
    }
}

/// Whether `e` gave the machine an address (DHCP OFFER/ACK, DHCPv6 ADVERTISE/REPLY).
pub(super) fn gives_address(e: &Event) -> bool {
    match e.source {
        Source::Dhcp => matches!(e.outcome, "offer" | "ack"),
        Source::Dhcp6 => matches!(e.outcome, "advertise" | "reply"),
        Source::Tftp | Source::Http => false,
    }
}
