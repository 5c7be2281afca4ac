//! Whether to answer a Router Solicitation. Pure: the message, its source and hop
//! limit, and the time come in; a verdict goes out.
//!
//! The responder only ever says "no router here", and only to the host that asked
//! (a unicast answer, RFC 4861 §6.2.6), so nobody else on the segment hears it. It
//! stays silent while the segment has real IPv6 service: once any advertisement with a
//! router lifetime, a prefix or the M/O flags is seen, it stands down for
//! `stand_down_secs` after the last one, leaving router discovery to that router.
//! iPXE takes the first advertisement it gets, so answering while a real router exists
//! would cost that host its IPv6 (and DHCPv6): the responder therefore starts silent,
//! solicits once itself, and answers only after `LEARNING_SECS` without a router.
//! Time is monotonic seconds, never the wall clock.

use std::net::Ipv6Addr;

use super::wire::NdMessage;

/// What to do with one received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Unicast a "no router here" advertisement to the soliciting host.
    Answer,
    /// A solicitation, but a real router was seen recently: it answers.
    StandingDown,
    /// An advertisement from a real router: stand down from now.
    RouterSeen,
    /// Nothing to do (another responder's "no router" advertisement, a solicitation
    /// from the unspecified address).
    Ignore,
    /// Discarded per RFC 4861 §6.1 (hop limit not 255, bad source).
    Invalid(&'static str),
}

/// The responder's memory: until when it stays silent.
#[derive(Debug, Clone)]
pub struct Responder {
    stand_down_secs: u64,
    quiet_until: u64,
}

/// How long a new responder listens (after soliciting itself) before it answers.
/// Routers answer a solicitation within MAX_RA_DELAY_TIME (0.5 s, RFC 4861 §10).
pub const LEARNING_SECS: u64 = 3;

/// The hop limit every Neighbor Discovery message must arrive with: proof it was not
/// forwarded from another link (RFC 4861 §6.1.1, §6.1.2).
const ON_LINK_HOP_LIMIT: u8 = 255;

impl Responder {
    /// A responder started at `now`: silent for [`LEARNING_SECS`], and for
    /// `stand_down_secs` after a real router speaks.
    pub fn new(stand_down_secs: u64, now: u64) -> Self {
        Self {
            stand_down_secs,
            quiet_until: now.saturating_add(LEARNING_SECS),
        }
    }

    /// Whether an answer due now may still go out (a router may have spoken while it
    /// waited out its random delay).
    pub fn answering(&self, now: u64) -> bool {
        now >= self.quiet_until
    }

    /// Decides about `message` from `source`, received with `hop_limit`, at `now`
    /// (seconds).
    pub fn decide(
        &mut self,
        message: &NdMessage,
        source: Ipv6Addr,
        hop_limit: Option<u8>,
        now: u64,
    ) -> Verdict {
        if hop_limit != Some(ON_LINK_HOP_LIMIT) {
            return Verdict::Invalid("hop limit is not 255");
        }
        match *message {
            NdMessage::Solicitation {
                has_source_link_layer,
            } => {
                if source.is_unspecified() && has_source_link_layer {
                    // §6.1.1: no link-layer option from the unspecified address.
                    return Verdict::Invalid("link-layer option from the unspecified address");
                }
                if !source.is_unicast_link_local() {
                    // From the unspecified address an answer would have to be multicast
                    // (§6.2.6), which everyone would hear; to any other address it would
                    // leave from a non-link-local source, which hosts drop (§6.1.2).
                    // The host solicits again from its link-local address.
                    return Verdict::Ignore;
                }
                if self.answering(now) {
                    Verdict::Answer
                } else {
                    Verdict::StandingDown
                }
            }
            NdMessage::Advertisement(advertised) => {
                // §6.1.2: advertisements come from link-local addresses.
                if !source.is_unicast_link_local() {
                    return Verdict::Invalid("advertisement from a non-link-local address");
                }
                if advertised.offers_ipv6_service() {
                    self.quiet_until = self
                        .quiet_until
                        .max(now.saturating_add(self.stand_down_secs));
                    Verdict::RouterSeen
                } else {
                    Verdict::Ignore
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ra::wire::Advertised;

    const HOST: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x5054, 0xff, 0xfede, 1);
    const ROUTER: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
    const SOLICIT: NdMessage = NdMessage::Solicitation {
        has_source_link_layer: true,
    };

    fn advert(router_lifetime: u16, prefixes: usize) -> NdMessage {
        NdMessage::Advertisement(Advertised {
            router_lifetime,
            managed: false,
            other: false,
            prefixes,
        })
    }

    #[test]
    fn answers_solicitations_on_a_segment_without_routers() {
        let mut r = Responder::new(1800, 97);
        // Listening first: a router would have answered its own solicitation by now.
        assert_eq!(
            r.decide(&SOLICIT, HOST, Some(255), 99),
            Verdict::StandingDown
        );
        assert_eq!(r.decide(&SOLICIT, HOST, Some(255), 100), Verdict::Answer);
        // Another member's "no router" advertisement changes nothing.
        assert_eq!(
            r.decide(&advert(0, 0), ROUTER, Some(255), 101),
            Verdict::Ignore
        );
        assert_eq!(r.decide(&SOLICIT, HOST, Some(255), 102), Verdict::Answer);
    }

    #[test]
    fn stands_down_while_a_real_router_speaks() {
        let mut r = Responder::new(1800, 0);
        assert_eq!(
            r.decide(&advert(1800, 1), ROUTER, Some(255), 1000),
            Verdict::RouterSeen
        );
        assert_eq!(
            r.decide(&SOLICIT, HOST, Some(255), 1001),
            Verdict::StandingDown
        );
        assert_eq!(
            r.decide(&SOLICIT, HOST, Some(255), 2799),
            Verdict::StandingDown
        );
        // Its periodic advertisement keeps the responder quiet.
        assert_eq!(
            r.decide(&advert(0, 1), ROUTER, Some(255), 2000),
            Verdict::RouterSeen
        );
        assert_eq!(
            r.decide(&SOLICIT, HOST, Some(255), 3799),
            Verdict::StandingDown
        );
        // Silent for stand_down_secs: the router is gone.
        assert_eq!(r.decide(&SOLICIT, HOST, Some(255), 3800), Verdict::Answer);
    }

    #[test]
    fn discards_what_rfc_4861_section_6_1_discards() {
        let mut r = Responder::new(1800, 0);
        for hop_limit in [None, Some(64), Some(254)] {
            assert!(matches!(
                r.decide(&SOLICIT, HOST, hop_limit, 1),
                Verdict::Invalid(_)
            ));
        }
        assert!(matches!(
            r.decide(&SOLICIT, Ipv6Addr::UNSPECIFIED, Some(255), 1),
            Verdict::Invalid(_)
        ));
        let bare = NdMessage::Solicitation {
            has_source_link_layer: false,
        };
        assert_eq!(
            r.decide(&bare, Ipv6Addr::UNSPECIFIED, Some(255), 1),
            Verdict::Ignore
        );
        // A solicitation from a global address is not answered (the answer's source
        // would not be link-local).
        let global_host = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
        assert_eq!(
            r.decide(&SOLICIT, global_host, Some(255), 5),
            Verdict::Ignore
        );
        // A router advertisement from a global address does not silence the responder.
        let global = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
        assert!(matches!(
            r.decide(&advert(1800, 1), global, Some(255), 1),
            Verdict::Invalid(_)
        ));
        assert_eq!(r.decide(&SOLICIT, HOST, Some(255), 5), Verdict::Answer);
    }
}
