//! "Should I answer?" (docs/design.md, "DHCP decisions" 2), pure: from the owner the
//! resolver named, the live members and the client's `secs`, whether this member answers.
//!
//! Each MAC has one responsible member: the member beside the conductor that owns it,
//! else the RFC 3074 hash bucket of the MAC over the live members. If that member is
//! known dead, the bucket over the live members picks exactly one replacement. Other
//! members stay silent until the client has been trying for `takeover_secs` (RFC 2131
//! §2: `secs` counts seconds since the client began acquiring), when any member answers
//! from its own share; the client takes the first offer.

use std::sync::Arc;

use dhcproto::v4::{Message, MessageType};

use super::engine::Responsibility;
use super::metrics::DhcpMetrics;
use crate::mac::MacAddr;
pub use crate::owner::responsible;
use crate::owner::Resolver;

/// Why this member answers or not, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// This member is the owner's (or the live bucket's) choice.
    Responsible,
    /// Another member is responsible but the client has waited `takeover_secs`.
    Takeover,
    /// Another live member is responsible.
    Other,
}

impl Why {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Responsible => "responsible",
            Self::Takeover => "takeover",
            Self::Other => "other_member",
        }
    }
}

/// The `secs` field as the client meant it. Some PXE ROMs write it little-endian; like
/// ISC dhcpd, a value above 255 whose low byte is zero is taken as byte-swapped, or a
/// single DISCOVER saying "1 second" would read as 256 and make every member take over.
pub fn effective_secs(raw: u16) -> u16 {
    if raw > 255 && raw & 0xff == 0 {
        raw.swap_bytes()
    } else {
        raw
    }
}

/// Whether `me` answers a client whose responsible member is `responsible`.
pub fn decide(
    me: &str,
    responsible: Option<&str>,
    secs: u16,
    takeover_secs: u16,
) -> (Responsibility, Why) {
    if responsible.is_none_or(|r| r == me) {
        (Responsibility::Mine, Why::Responsible)
    } else if effective_secs(secs) >= takeover_secs {
        (Responsibility::Mine, Why::Takeover)
    } else {
        (Responsibility::NotMine, Why::Other)
    }
}

/// Who answers each client when several members share a segment: the resolver's owner
/// from cache (the DHCP thread never waits on Ironic), else the RFC 3074 bucket over the
/// live members; others take over when the client's `secs` reaches `takeover_secs`.
pub struct Responder {
    me: String,
    takeover_secs: u16,
    resolver: Arc<Resolver>,
    metrics: Arc<DhcpMetrics>,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("me", &self.me)
            .field("takeover_secs", &self.takeover_secs)
            .finish_non_exhaustive()
    }
}

impl Responder {
    /// The responder of member `me`, or `None` for a single instance (which answers
    /// everything) or a member that does not know its own name.
    pub fn new(
        config: &crate::config::Config,
        resolver: Arc<Resolver>,
        metrics: Arc<DhcpMetrics>,
    ) -> Option<Self> {
        if config.members.len() < 2 && !config.owner.members.follows() {
            return None;
        }
        Some(Self {
            me: config.owner.self_name.clone()?,
            takeover_secs: config.dhcp.takeover_secs,
            resolver,
            metrics,
        })
    }

    /// Whether this member answers `msg`. Only DISCOVERs and REQUESTs are weighed; every
    /// other message is this member's to handle.
    pub fn decide(&self, msg: &Message) -> Responsibility {
        let asks = matches!(
            msg.opts().msg_type(),
            Some(MessageType::Discover | MessageType::Request)
        );
        let Some(mac) = MacAddr::from_chaddr(msg.chaddr()).filter(|_| asks) else {
            return Responsibility::Mine;
        };
        self.decide_for(&mac, msg.secs())
    }

    /// Whether this member answers a DISCOVER or REQUEST from `mac` whose `secs` field
    /// reads `secs` (as sent); counted like [`Self::decide`].
    pub fn decide_for(&self, mac: &MacAddr, secs: u16) -> Responsibility {
        let mac = *mac;
        let owner = self.resolver.resolve_cached(&mac);
        let live = self.resolver.live();
        live.with_responsible(owner.member.as_deref(), &mac, |r| {
            let (decision, why) = decide(&self.me, r, secs, self.takeover_secs);
            self.metrics.responsibility.inc(why.as_str());
            tracing::debug!(%mac, responsible = ?r, source = owner.source, secs, why = why.as_str(), "DHCP responsibility");
            decision
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    const MAC: MacAddr = MacAddr([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);

    #[test]
    fn byte_swapped_secs_are_read_as_dhcpd_does() {
        assert_eq!(effective_secs(0), 0);
        assert_eq!(effective_secs(4), 4);
        assert_eq!(effective_secs(255), 255);
        assert_eq!(effective_secs(0x0100), 1);
        assert_eq!(effective_secs(0x0400), 4);
        assert_eq!(effective_secs(0x0101), 0x0101);
        assert_eq!(effective_secs(300), 300);
    }

    #[test]
    fn the_owner_answers_the_others_wait_for_takeover() {
        assert_eq!(
            decide("a", Some("a"), 0, 5),
            (Responsibility::Mine, Why::Responsible)
        );
        assert_eq!(
            decide("b", Some("a"), 0, 5),
            (Responsibility::NotMine, Why::Other)
        );
        assert_eq!(
            decide("b", Some("a"), 4, 5),
            (Responsibility::NotMine, Why::Other)
        );
        assert_eq!(
            decide("b", Some("a"), 5, 5),
            (Responsibility::Mine, Why::Takeover)
        );
        // "5 seconds" written little-endian is 0x0500: still 5, not 1280.
        assert_eq!(
            decide("b", Some("a"), 0x0500, 5),
            (Responsibility::Mine, Why::Takeover)
        );
        assert_eq!(
            decide("b", Some("a"), 0x0100, 5),
            (Responsibility::NotMine, Why::Other)
        );
        // A single instance (nobody responsible) always answers.
        assert_eq!(
            decide("a", None, 0, 5),
            (Responsibility::Mine, Why::Responsible)
        );
    }

    #[test]
    fn a_dead_owner_is_replaced_by_exactly_one_live_member() {
        let all = live(&["a", "b", "c"]);
        assert_eq!(responsible(Some("b"), &all, &MAC), Some("b"));
        let without_b = live(&["a", "c"]);
        let r = responsible(Some("b"), &without_b, &MAC).unwrap();
        assert!(r == "a" || r == "c");
        let answering: Vec<_> = ["a", "c"]
            .into_iter()
            .filter(|me| decide(me, Some(r), 0, 5).0 == Responsibility::Mine)
            .collect();
        assert_eq!(answering.len(), 1);
        // RFC 3074 §6 known answer: 52:54:00:12:34:56 hashes to 156; 156 % 3 = 0 → "a".
        assert_eq!(responsible(None, &all, &MAC), Some("a"));
    }
}
