//! One machine's timeline from every member: this member's events and the ones the
//! other members sent (`peers`), in time order, each naming its member, and which
//! members could not be asked and why. Pure.
//!
//! Members' clocks are only as close as NTP keeps them: events of one member keep
//! their own order (by seq), and events at the same millisecond on two members are
//! ordered by member name, so the answer is the same on every call.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{clean, Event, Source};

/// Largest number of events taken from one member's answer.
pub const MAX_PEER_EVENTS: usize = 1_000;
/// Longest label taken from a member's answer.
const MAX_LABEL: usize = 64;

/// One event of the merged timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberEvent {
    /// The member that recorded it.
    pub member: String,
    /// Its seq on that member.
    pub seq: u64,
    /// Unix time, milliseconds (that member's clock).
    pub at_ms: u64,
    /// Which listener.
    pub source: Source,
    /// What the machine asked.
    pub what: String,
    /// What it got.
    pub outcome: String,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// The address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
    /// A file, an owner, a URL…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl MemberEvent {
    /// This member's `event`.
    pub fn local(member: &str, e: &Event) -> Self {
        Self {
            member: member.to_string(),
            seq: e.seq,
            at_ms: e.at_ms,
            source: e.source,
            what: e.what.to_string(),
            outcome: e.outcome.to_string(),
            why: e.why.map(str::to_string),
            ip: e.ip,
            detail: e.detail.as_deref().map(str::to_string),
        }
    }

    /// An event another member sent, named after the member that was asked (never what
    /// the answer claims), every text escaped and cut as this member's own are.
    pub fn from_peer(member: &str, e: PeerEvent) -> Self {
        let label = |s: &str| clean(&s.chars().take(MAX_LABEL).collect::<String>()).into_string();
        Self {
            member: member.to_string(),
            seq: e.seq,
            at_ms: e.at_ms,
            source: e.source,
            what: label(&e.what),
            outcome: label(&e.outcome),
            why: e.why.as_deref().map(label),
            ip: e.ip,
            detail: e.detail.as_deref().map(|d| clean(d).into_string()),
        }
    }
}

/// An event as a member sends it (its [`Event`] in JSON).
#[derive(Debug, Clone, Deserialize)]
pub struct PeerEvent {
    /// Its seq.
    pub seq: u64,
    /// When.
    pub at_ms: u64,
    /// Which listener.
    pub source: Source,
    /// What was asked.
    pub what: String,
    /// What it got.
    pub outcome: String,
    /// Why.
    #[serde(default)]
    pub why: Option<String>,
    /// The address.
    #[serde(default)]
    pub ip: Option<IpAddr>,
    /// Detail.
    #[serde(default)]
    pub detail: Option<String>,
}

/// What another member sends: its events of one machine.
#[derive(Debug, Clone, Deserialize)]
pub struct PeerAnswer {
    /// The machine, as the member spells it.
    pub mac: String,
    /// Its events, oldest first.
    pub events: Vec<PeerEvent>,
}

/// A member whose events are missing from the answer, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unasked {
    /// The member.
    pub member: String,
    /// Why: `timeout`, `unreachable`, `refused`, `unverified`, `too_large`,
    /// `unreadable`, `no_member_secret`.
    pub why: &'static str,
}

/// The merged timeline of one machine.
#[derive(Debug, Clone, Serialize)]
pub struct Merged {
    /// The machine.
    pub mac: String,
    /// The member that answered the request.
    pub member: String,
    /// Every member's events, in time order.
    pub events: Vec<MemberEvent>,
    /// The members whose events are in it.
    pub answered: Vec<String>,
    /// The members whose events are not, and why.
    pub unasked: Vec<Unasked>,
}

/// Every event of `parts` (each member's, in its own order) in time order.
pub fn merge(parts: Vec<Vec<MemberEvent>>) -> Vec<MemberEvent> {
    let mut all: Vec<MemberEvent> = parts.into_iter().flatten().collect();
    // Stable on (time, member, seq): one member's events never change order between
    // themselves, whatever the other members' clocks say.
    all.sort_by(|a, b| (a.at_ms, &a.member, a.seq).cmp(&(b.at_ms, &b.member, b.seq)));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(member: &str, seq: u64, at_ms: u64) -> MemberEvent {
        MemberEvent {
            member: member.into(),
            seq,
            at_ms,
            source: Source::Dhcp,
            what: "DISCOVER".into(),
            outcome: "offer".into(),
            why: None,
            ip: None,
            detail: None,
        }
    }

    #[test]
    fn events_of_two_members_interleave_by_time_then_member() {
        let a = vec![ev("a", 1, 10), ev("a", 2, 30), ev("a", 3, 30)];
        let b = vec![ev("b", 7, 20), ev("b", 8, 30)];
        let got: Vec<(String, u64)> = merge(vec![b, a])
            .into_iter()
            .map(|e| (e.member, e.seq))
            .collect();
        let want = [("a", 1), ("b", 7), ("a", 2), ("a", 3), ("b", 8)];
        assert_eq!(
            got,
            want.map(|(m, s)| (m.to_string(), s)).to_vec(),
            "time order; at the same time, by member"
        );
    }

    #[test]
    fn a_peers_text_is_escaped_cut_and_named_after_the_member_asked() {
        let e = PeerEvent {
            seq: 1,
            at_ms: 1,
            source: Source::Http,
            what: "<b>\u{1b}".repeat(40),
            outcome: "200".into(),
            why: None,
            ip: None,
            detail: Some("x\ny".into()),
        };
        let m = MemberEvent::from_peer("b", e);
        assert_eq!(m.member, "b");
        assert!(!m.what.contains('\u{1b}') && m.what.len() <= 160);
        assert_eq!(m.detail.as_deref(), Some("x\\ny"));
    }
}
