//! The engine's limits on unknown machines (a provisioning network carries machines
//! nobody vetted): DISCOVERs answered per second per interface or relay, and DECLINEs
//! overall; and on every machine, DECLINEs per MAC. Pure: time comes in as `now`; every
//! table is bounded.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;

use crate::mac::MacAddr;

/// Entries a per-source or per-MAC table holds before stale ones are dropped.
const PRUNE_AT: usize = 4096;

/// The share of a subnet that only known machines may take fresh when
/// `reserve_for_known` is not set: a quarter of this member's share, wherever a machine
/// can be known (`may_know`: a `[[host]]`, a hosts directory, an Ironic or inventory
/// resolver, the operator API). A flood of random MACs, DISCOVERs alone or whole
/// exchanges, then leaves enrolled machines room on their first try; machines nobody
/// enrolled yet (inspection, discovery) still get three quarters. Where no machine can
/// be known, a reserve would only go unused.
pub(super) fn reserve_for_known(configured: Option<u32>, share: u64, may_know: bool) -> u64 {
    match configured {
        Some(n) => u64::from(n),
        None if may_know => share / 4,
        None => 0,
    }
}

/// Counters behind the limits.
#[derive(Debug, Default)]
pub(super) struct Limits {
    /// (interface address, giaddr) → (second, DISCOVERs answered in it).
    rates: HashMap<(Ipv4Addr, Ipv4Addr), (u64, u32)>,
    /// When each quarantine still in force ends, oldest first.
    declines: VecDeque<u64>,
    /// MAC → (start of its window, DECLINEs in it).
    per_mac: HashMap<MacAddr, (u64, u32)>,
}

impl Limits {
    /// Whether one more DISCOVER from an unknown machine via (`iface`, `giaddr`) may be
    /// answered in second `now`, at most `per_sec` (0: no limit).
    pub(super) fn admit(
        &mut self,
        iface: Ipv4Addr,
        giaddr: Ipv4Addr,
        per_sec: u32,
        now: u64,
    ) -> bool {
        if per_sec == 0 {
            return true;
        }
        let key = (iface, giaddr);
        if self.rates.len() >= PRUNE_AT && !self.rates.contains_key(&key) {
            // giaddr is the sender's word: keys it invents must not grow the table. A
            // new source in a second that already saw this many is over the limit.
            self.rates.retain(|_, (sec, _)| *sec == now);
            if self.rates.len() >= PRUNE_AT {
                return false;
            }
        }
        let (sec, n) = self.rates.entry(key).or_insert((now, 0));
        if *sec != now {
            (*sec, *n) = (now, 0);
        }
        if *n >= per_sec {
            return false;
        }
        *n += 1;
        true
    }

    /// Whether `mac` may quarantine one more address at `now`: fewer than `cap` are
    /// quarantined overall (`None`: no overall cap for this MAC) and the MAC made fewer
    /// than `per_mac` in its last `hold` seconds.
    pub(super) fn may_decline(
        &mut self,
        mac: &MacAddr,
        cap: Option<u32>,
        per_mac: u32,
        hold: u32,
        now: u64,
    ) -> bool {
        while self.declines.front().is_some_and(|end| *end <= now) {
            self.declines.pop_front();
        }
        if cap.is_some_and(|cap| self.declines.len() >= cap as usize) {
            return false;
        }
        if self.per_mac.len() >= PRUNE_AT {
            self.per_mac
                .retain(|_, (start, _)| *start + u64::from(hold) > now);
        }
        let (start, n) = self.per_mac.entry(*mac).or_insert((now, 0));
        if *start + u64::from(hold) <= now {
            (*start, *n) = (now, 0);
        }
        if *n >= per_mac {
            return false;
        }
        *n += 1;
        true
    }

    /// Records a quarantine in force until `until`.
    pub(super) fn declined(&mut self, until: u64) {
        // Holds are one length, so ends arrive in order; a stored one loaded at start
        // may be earlier, and is placed where it belongs.
        let at = self.declines.partition_point(|end| *end <= until);
        self.declines.insert(at, until);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_reserve_is_a_quarter_of_the_share_where_machines_can_be_known() {
        assert_eq!(reserve_for_known(None, 2048, true), 512);
        assert_eq!(reserve_for_known(None, 3, true), 0, "rounded down");
        assert_eq!(
            reserve_for_known(None, 2048, false),
            0,
            "nothing to keep it for"
        );
        assert_eq!(reserve_for_known(Some(0), 2048, true), 0, "the knob wins");
        assert_eq!(reserve_for_known(Some(7), 2048, false), 7);
    }

    #[test]
    fn the_rate_is_per_second_and_per_source() {
        let mut l = Limits::default();
        let (a, r1, r2) = (
            Ipv4Addr::new(192, 0, 2, 1),
            Ipv4Addr::new(198, 18, 0, 2),
            Ipv4Addr::new(198, 18, 0, 3),
        );
        assert!((0..3).all(|_| l.admit(a, r1, 3, 100)));
        assert!(!l.admit(a, r1, 3, 100));
        assert!(l.admit(a, r2, 3, 100), "another relay has its own budget");
        assert!(l.admit(a, r1, 3, 101), "a new second");
        assert!((0..1000).all(|_| l.admit(a, r1, 0, 101)), "0: no limit");
        // Invented giaddrs do not grow the table without bound.
        for n in 0..20_000u32 {
            l.admit(a, Ipv4Addr::from(n), 3, 200 + u64::from(n / 5000));
        }
        assert!(l.rates.len() <= PRUNE_AT);
    }

    #[test]
    fn declines_are_capped_overall_and_per_mac_within_the_hold() {
        let mut l = Limits::default();
        let m = |n: u8| MacAddr([2, 0, 0, 0, 0, n]);
        let cap = Some(3);
        assert!(l.may_decline(&m(1), cap, 2, 600, 0));
        l.declined(600);
        assert!(l.may_decline(&m(1), cap, 2, 600, 1));
        l.declined(601);
        assert!(!l.may_decline(&m(1), cap, 2, 600, 2), "per MAC");
        assert!(
            !l.may_decline(&m(1), None, 2, 600, 2),
            "per MAC, no overall cap"
        );
        assert!(l.may_decline(&m(2), cap, 2, 600, 2));
        l.declined(602);
        assert!(!l.may_decline(&m(3), cap, 2, 600, 3), "overall");
        assert!(l.may_decline(&m(3), None, 2, 600, 3), "no overall cap");
        l.declined(603);
        // The quarantines end, and with them the limits.
        assert!(l.may_decline(&m(1), cap, 2, 600, 700));
    }
}
