//! Where a machine is in its boot, read from its timeline events: the boot board's
//! column. Pure: each event advances a [`Progress`] kept beside the machine's events,
//! so the board reads one small record per machine instead of walking every event.
//!
//! The stages follow a PXE/iPXE boot as shardboot sees it: DHCP offered, bound, the
//! boot file fetched (TFTP or `/ipxe/…`), the first-stage script (`/boot.ipxe`), the
//! per-node config chained (`/v1/boot/{mac}/{name}`), or the fallback after every NIC
//! missed. A machine that was only ever met with silence is `silent`, with the reason.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{Event, Source};

/// A boot stage, in the order a healthy boot passes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Every DHCP answer so far was a silence.
    Silent,
    /// Offered an address (DHCP OFFER, DHCPv6 ADVERTISE).
    Offered,
    /// Bound (DHCP ACK, DHCPv6 REPLY).
    Bound,
    /// Fetched a boot file (TFTP, or `/ipxe/…` over HTTP).
    BootFile,
    /// Fetched the first-stage script (`/boot.ipxe`).
    FirstStage,
    /// Got its per-node config chained (`/v1/boot/{mac}/{name}` answered 200).
    Chained,
    /// Got the fallback after every NIC missed.
    Fallback,
}

impl Stage {
    /// Every stage, in boot order (the board's columns).
    pub const ALL: [Stage; 7] = [
        Stage::Silent,
        Stage::Offered,
        Stage::Bound,
        Stage::BootFile,
        Stage::FirstStage,
        Stage::Chained,
        Stage::Fallback,
    ];

    /// The name the API and the board use.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Silent => "silent",
            Stage::Offered => "offered",
            Stage::Bound => "bound",
            Stage::BootFile => "boot_file",
            Stage::FirstStage => "first_stage",
            Stage::Chained => "chained",
            Stage::Fallback => "fallback",
        }
    }

    /// The stage named `s` (the board's filter).
    pub fn parse(s: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether a machine may rest here: shardboot's part of the boot is over (the
    /// conductor's config or the fallback took over), so time here is no sign of
    /// trouble.
    pub fn is_end(self) -> bool {
        matches!(self, Stage::Chained | Stage::Fallback)
    }
}

/// One machine's stage, since when, and the last thing seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The stage.
    pub stage: Stage,
    /// When it entered the stage (Unix ms).
    pub since_ms: u64,
    /// Its newest event (Unix ms).
    pub last_ms: u64,
    /// The reason of the newest silence or failure, if the newest event was one.
    pub why: Option<&'static str>,
    /// The address it was given (DHCP, DHCPv6).
    pub ip: Option<IpAddr>,
}

impl Progress {
    /// A machine's progress before its first event.
    pub fn new(at_ms: u64) -> Self {
        Self {
            stage: Stage::Silent,
            since_ms: at_ms,
            last_ms: at_ms,
            why: None,
            ip: None,
        }
    }

    /// Takes `e` into account. A stage is entered again (its clock restarts) when the
    /// machine repeats it, as a reboot does: a new OFFER after a boot is a new boot.
    pub fn advance(&mut self, e: &Event) {
        self.last_ms = self.last_ms.max(e.at_ms);
        let next = match (e.source, e.what, e.outcome) {
            (Source::Dhcp, _, "offer") | (Source::Dhcp6, _, "advertise") => Some(Stage::Offered),
            (Source::Dhcp, _, "ack") | (Source::Dhcp6, _, "reply") => Some(Stage::Bound),
            (Source::Tftp, _, "complete") | (Source::Http, "GET /ipxe/{*file}", "200") => {
                Some(Stage::BootFile)
            }
            (Source::Http, "GET /boot.ipxe", "200") => Some(Stage::FirstStage),
            (Source::Http, "GET /v1/boot/{mac}/{name}", "200") => Some(Stage::Chained),
            (Source::Http, "GET /v1/boot/fallback.ipxe", "200") => Some(Stage::Fallback),
            _ => None,
        };
        match next {
            Some(stage) => {
                // DHCPv4 after a bound DHCPv6 (or the other way round) is the same
                // boot seen twice: only a step back to `offered` restarts the clock
                // when the machine was further along.
                if stage != self.stage || stage == Stage::Offered {
                    self.since_ms = e.at_ms;
                }
                self.stage = stage;
                self.why = None;
                if matches!(e.source, Source::Dhcp | Source::Dhcp6) && e.ip.is_some() {
                    self.ip = e.ip;
                }
            }
            None => {
                // A silence, a NAK, a failed transfer, a 404: the reason is shown; the
                // stage stays (on several members, the others stay silent for every
                // machine one of them answers).
                self.why = e.why.or(Some(e.outcome));
            }
        }
    }

    /// Whether the machine has been in a stage it should have left by now.
    pub fn is_stuck(&self, now_ms: u64, stuck_after_ms: u64) -> bool {
        !self.stage.is_end() && now_ms.saturating_sub(self.since_ms) >= stuck_after_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(source: Source, what: &'static str, outcome: &'static str, at_ms: u64) -> Event {
        Event {
            seq: at_ms,
            at_ms,
            source,
            what,
            outcome,
            why: (outcome == "silent").then_some("not_responsible"),
            ip: None,
            detail: None,
        }
    }

    #[test]
    fn a_pxe_boot_passes_every_stage_in_order() {
        let mut p = Progress::new(0);
        let steps = [
            (ev(Source::Dhcp, "DISCOVER", "silent", 1), Stage::Silent),
            (ev(Source::Dhcp, "DISCOVER", "offer", 2), Stage::Offered),
            (ev(Source::Dhcp, "REQUEST", "ack", 3), Stage::Bound),
            (ev(Source::Tftp, "RRQ", "complete", 4), Stage::BootFile),
            (
                ev(Source::Http, "GET /boot.ipxe", "200", 5),
                Stage::FirstStage,
            ),
            (
                ev(Source::Http, "GET /v1/boot/{mac}/{name}", "404", 6),
                Stage::FirstStage,
            ),
            (
                ev(Source::Http, "GET /v1/boot/fallback.ipxe", "200", 7),
                Stage::Fallback,
            ),
        ];
        for (e, want) in steps {
            p.advance(&e);
            assert_eq!(p.stage, want, "after {} {}", e.what, e.outcome);
        }
        assert_eq!(p.since_ms, 7);
        assert!(!p.is_stuck(1_000_000, 1), "the fallback is an end");
    }

    #[test]
    fn a_silence_after_an_answer_keeps_the_stage_and_shows_why() {
        let mut p = Progress::new(0);
        p.advance(&ev(Source::Dhcp, "REQUEST", "ack", 10));
        p.advance(&ev(Source::Dhcp, "REQUEST", "silent", 20));
        assert_eq!((p.stage, p.since_ms, p.last_ms), (Stage::Bound, 10, 20));
        assert_eq!(p.why, Some("not_responsible"));
        assert!(p.is_stuck(130, 120) && !p.is_stuck(129, 120));
        // A reboot: a new OFFER restarts the clock.
        p.advance(&ev(Source::Dhcp, "DISCOVER", "offer", 200));
        assert_eq!((p.stage, p.since_ms, p.why), (Stage::Offered, 200, None));
    }

    #[test]
    fn names_round_trip() {
        for s in Stage::ALL {
            assert_eq!(Stage::parse(s.as_str()), Some(s));
        }
        assert_eq!(Stage::parse("nope"), None);
    }
}
