//! What shardboot remembers of Ironic's answers: the last full snapshot (bulk warm and
//! periodic refresh) plus single-MAC lookups made since. Pure: the caller passes `now`.
//!
//! Rules:
//! - the newer of the snapshot and a single lookup wins, so a port enrolled after the
//!   last refresh is found at once, and a port deleted since a lookup disappears with
//!   the next refresh;
//! - a MAC missing from the snapshot is a miss (it may have been enrolled since), and
//!   "Ironic has no such port" from a lookup is remembered for `negative_ttl` only, so
//!   an unknown machine that gets enrolled is found soon while the same unknown MAC
//!   repeated on the unauthenticated boot route costs Ironic one request per TTL;
//! - while Ironic is unreachable every answer is still served; the cache only reports
//!   that it is stale.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::mac::MacAddr;

/// What Ironic said about a MAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// A port with this address belongs to a node; `None`: the node has no conductor.
    Node(Option<String>),
    /// No port has this address.
    NoPort,
}

/// A cache lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cached {
    /// Known, from a snapshot or lookup still in force.
    Hit(Known),
    /// Not known (or a negative answer that has expired): ask Ironic.
    Miss,
}

/// The cache.
#[derive(Debug)]
pub struct IronicCache {
    snapshot: HashMap<MacAddr, Option<String>>,
    snapshot_at: Option<Instant>,
    singles: HashMap<MacAddr, (Known, Instant)>,
    negative_ttl: Duration,
    last_failure: Option<Instant>,
    last_success: Option<Instant>,
}

/// Singles beyond this many are dropped oldest-first at the next snapshot, so random
/// MACs cannot grow memory without bound between refreshes.
const MAX_SINGLES: usize = 65_536;

impl IronicCache {
    /// An empty cache.
    pub fn new(negative_ttl: Duration) -> Self {
        Self {
            snapshot: HashMap::new(),
            snapshot_at: None,
            singles: HashMap::new(),
            negative_ttl,
            last_failure: None,
            last_success: None,
        }
    }

    /// Looks `mac` up.
    pub fn get(&self, mac: &MacAddr, now: Instant) -> Cached {
        let single = self.singles.get(mac);
        let snapshot_newer = |at: Instant| self.snapshot_at.is_some_and(|s| s >= at);
        match single {
            Some((known, at)) if !snapshot_newer(*at) => match known {
                Known::NoPort if now.saturating_duration_since(*at) >= self.negative_ttl => {
                    Cached::Miss
                }
                k => Cached::Hit(k.clone()),
            },
            _ => match self.snapshot.get(mac) {
                Some(c) => Cached::Hit(Known::Node(c.clone())),
                // Not in the snapshot: perhaps enrolled since. Ask, so a machine that
                // powers on right after enrollment is not sent to the fallback.
                None => Cached::Miss,
            },
        }
    }

    /// Replaces the snapshot with a complete listing taken at `at` (when its first
    /// request was sent, so a lookup answered during the listing is not overruled).
    /// Returns the previous snapshot, for the caller to free outside its lock.
    pub fn replace_snapshot(
        &mut self,
        owners: HashMap<MacAddr, Option<String>>,
        at: Instant,
    ) -> HashMap<MacAddr, Option<String>> {
        let old = std::mem::replace(&mut self.snapshot, owners);
        self.snapshot_at = Some(at);
        self.singles.retain(|_, (_, t)| *t > at);
        if self.singles.len() > MAX_SINGLES {
            self.singles.clear();
        }
        self.last_success = Some(at);
        old
    }

    /// Records a single lookup's answer.
    pub fn insert(&mut self, mac: MacAddr, known: Known, at: Instant) {
        if self.singles.len() >= MAX_SINGLES && !self.singles.contains_key(&mac) {
            return;
        }
        self.singles.insert(mac, (known, at));
        self.last_success = Some(self.last_success.map_or(at, |s| s.max(at)));
    }

    /// Records that Ironic could not be reached (or answered garbage) at `at`.
    pub fn failed(&mut self, at: Instant) {
        self.last_failure = Some(at);
    }

    /// Whether the last exchange with Ironic failed: answers are served from memory.
    pub fn is_stale(&self) -> bool {
        match (self.last_failure, self.last_success) {
            (Some(f), Some(s)) => f > s,
            (Some(_), None) => true,
            _ => false,
        }
    }

    /// Whether Ironic failed less than `backoff` ago and has not answered since: a miss
    /// then skips Ironic instead of waiting for another timeout.
    pub fn in_backoff(&self, now: Instant, backoff: Duration) -> bool {
        self.is_stale()
            && self
                .last_failure
                .is_some_and(|f| now.saturating_duration_since(f) < backoff)
    }

    /// Seconds since Ironic last answered, if ever.
    pub fn age(&self, now: Instant) -> Option<Duration> {
        self.last_success.map(|s| now.saturating_duration_since(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(n: u8) -> MacAddr {
        MacAddr([0x52, 0x54, 0, 0, 0, n])
    }

    fn snap(entries: &[(u8, Option<&str>)]) -> HashMap<MacAddr, Option<String>> {
        entries
            .iter()
            .map(|(n, c)| (mac(*n), c.map(str::to_string)))
            .collect()
    }

    const TTL: Duration = Duration::from_secs(10);

    #[test]
    fn snapshot_answers_and_a_later_lookup_overrides_it() {
        let t0 = Instant::now();
        let mut c = IronicCache::new(TTL);
        assert_eq!(c.get(&mac(1), t0), Cached::Miss);
        c.replace_snapshot(snap(&[(1, Some("c1")), (2, None)]), t0);
        assert_eq!(
            c.get(&mac(1), t0),
            Cached::Hit(Known::Node(Some("c1".into())))
        );
        assert_eq!(c.get(&mac(2), t0), Cached::Hit(Known::Node(None)));
        // The node moved; a single lookup after the snapshot wins.
        c.insert(mac(1), Known::Node(Some("c2".into())), t0 + TTL);
        assert_eq!(
            c.get(&mac(1), t0 + TTL),
            Cached::Hit(Known::Node(Some("c2".into())))
        );
        // A newer snapshot wins over the older lookup (the port was deleted): the MAC
        // is asked about again.
        c.replace_snapshot(snap(&[]), t0 + 2 * TTL);
        assert_eq!(c.get(&mac(1), t0 + 2 * TTL), Cached::Miss);
    }

    #[test]
    fn negative_answers_expire() {
        let t0 = Instant::now();
        let mut c = IronicCache::new(TTL);
        c.insert(mac(9), Known::NoPort, t0);
        assert_eq!(c.get(&mac(9), t0 + TTL / 2), Cached::Hit(Known::NoPort));
        assert_eq!(c.get(&mac(9), t0 + TTL), Cached::Miss);
        // A positive single does not expire between snapshots.
        c.insert(mac(8), Known::Node(Some("c1".into())), t0);
        assert_eq!(
            c.get(&mac(8), t0 + 100 * TTL),
            Cached::Hit(Known::Node(Some("c1".into())))
        );
    }

    #[test]
    fn failures_make_it_stale_until_ironic_answers_again() {
        let t0 = Instant::now();
        let mut c = IronicCache::new(TTL);
        assert!(!c.is_stale());
        c.replace_snapshot(snap(&[(1, Some("c1"))]), t0);
        c.failed(t0 + Duration::from_secs(1));
        assert!(c.is_stale());
        assert!(c.in_backoff(t0 + Duration::from_secs(2), Duration::from_secs(5)));
        assert!(!c.in_backoff(t0 + Duration::from_secs(7), Duration::from_secs(5)));
        // Stale answers are still answers.
        assert_eq!(
            c.get(&mac(1), t0 + Duration::from_secs(3600)),
            Cached::Hit(Known::Node(Some("c1".into())))
        );
        c.insert(mac(2), Known::NoPort, t0 + Duration::from_secs(8));
        assert!(!c.is_stale());
        assert_eq!(
            c.age(t0 + Duration::from_secs(9)),
            Some(Duration::from_secs(1))
        );
    }
}
