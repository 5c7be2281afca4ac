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
//!   that it is stale;
//! - positive and negative answers live in separate bounded tables, each dropping its
//!   oldest entry when full: random MACs fill the negative one only, and can never push
//!   out the answer for a machine enrolled since the last snapshot;
//! - the DHCP path asks Ironic about a MAC only when it sees it again within
//!   `SIGHTING_WINDOW` ([`IronicCache::seen_again`]): firmware sends its DISCOVER again
//!   within seconds, a flood of random MACs does not.

use std::collections::{HashMap, VecDeque};
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

/// A map of MACs bounded to `cap` entries, the oldest insertion dropped first.
#[derive(Debug)]
pub(crate) struct Fifo<V> {
    map: HashMap<MacAddr, (V, Instant)>,
    /// Insertion order; an entry whose time no longer matches the map's is stale.
    order: VecDeque<(MacAddr, Instant)>,
    cap: usize,
}

impl<V> Fifo<V> {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    pub(crate) fn get(&self, mac: &MacAddr) -> Option<&(V, Instant)> {
        self.map.get(mac)
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn insert(&mut self, mac: MacAddr, v: V, at: Instant) {
        self.map.insert(mac, (v, at));
        self.order.push_back((mac, at));
        while self.map.len() > self.cap {
            let Some((m, t)) = self.order.pop_front() else {
                break;
            };
            if self.map.get(&m).is_some_and(|(_, at)| *at == t) {
                self.map.remove(&m);
            }
        }
        if self.order.len() > 2 * self.cap {
            self.compact();
        }
    }

    pub(crate) fn remove(&mut self, mac: &MacAddr) {
        self.map.remove(mac);
    }

    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&V, Instant) -> bool) {
        self.map.retain(|_, (v, at)| keep(v, *at));
        self.compact();
    }

    fn compact(&mut self) {
        let map = &self.map;
        self.order
            .retain(|(m, t)| map.get(m).is_some_and(|(_, at)| at == t));
    }
}

/// The cache.
#[derive(Debug)]
pub struct IronicCache {
    snapshot: HashMap<MacAddr, Option<String>>,
    snapshot_at: Option<Instant>,
    /// Lookups Ironic answered with a node, and with "no such port".
    positives: Fifo<Option<String>>,
    negatives: Fifo<()>,
    /// MACs the DHCP path missed once, and when.
    sightings: Fifo<()>,
    negative_ttl: Duration,
    last_failure: Option<Instant>,
    last_success: Option<Instant>,
}

/// Positive answers kept between snapshots: machines enrolled since the last one.
pub const MAX_POSITIVES: usize = 65_536;
/// Negative answers kept (each for `negative_ttl`): what random MACs can fill.
pub const MAX_NEGATIVES: usize = 16_384;
/// MACs seen once by the DHCP path and not yet asked about.
pub const MAX_SIGHTINGS: usize = 65_536;
/// How long a first sighting waits for the MAC to come again (firmware repeats its
/// DISCOVER within seconds, RFC 2131 §4.1; iPXE asks again as it starts).
pub const SIGHTING_WINDOW: Duration = Duration::from_secs(300);

impl IronicCache {
    /// An empty cache.
    pub fn new(negative_ttl: Duration) -> Self {
        Self {
            snapshot: HashMap::new(),
            snapshot_at: None,
            positives: Fifo::new(MAX_POSITIVES),
            negatives: Fifo::new(MAX_NEGATIVES),
            sightings: Fifo::new(MAX_SIGHTINGS),
            negative_ttl,
            last_failure: None,
            last_success: None,
        }
    }

    /// Looks `mac` up.
    pub fn get(&self, mac: &MacAddr, now: Instant) -> Cached {
        // Inserting one removes the other: at most one of them holds the MAC.
        let single = match (self.positives.get(mac), self.negatives.get(mac)) {
            (Some((c, at)), _) => Some((Known::Node(c.clone()), *at)),
            (None, Some(((), at))) => Some((Known::NoPort, *at)),
            (None, None) => None,
        };
        let snapshot_newer = |at: Instant| self.snapshot_at.is_some_and(|s| s >= at);
        match single {
            Some((known, at)) if !snapshot_newer(at) => match known {
                Known::NoPort if now.saturating_duration_since(at) >= self.negative_ttl => {
                    Cached::Miss
                }
                k => Cached::Hit(k),
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
        self.positives.retain(|_, t| t > at);
        self.negatives.retain(|_, t| t > at);
        self.last_success = Some(at);
        old
    }

    /// Every MAC Ironic has a port for: the snapshot's and those looked up since
    /// (the timeline keeps their history apart from strangers').
    pub fn enrolled(&self) -> Vec<MacAddr> {
        self.snapshot
            .keys()
            .chain(self.positives.map.keys())
            .copied()
            .collect()
    }

    /// Records a single lookup's answer.
    pub fn insert(&mut self, mac: MacAddr, known: Known, at: Instant) {
        match known {
            Known::Node(c) => {
                self.negatives.remove(&mac);
                self.positives.insert(mac, c, at);
            }
            Known::NoPort => {
                self.positives.remove(&mac);
                self.negatives.insert(mac, (), at);
            }
        }
        self.last_success = Some(self.last_success.map_or(at, |s| s.max(at)));
    }

    /// Records that the DHCP path missed `mac` at `now`; whether it had missed it before
    /// within [`SIGHTING_WINDOW`] (then it is worth asking Ironic about).
    pub fn seen_again(&mut self, mac: MacAddr, now: Instant) -> bool {
        let before = self
            .sightings
            .get(&mac)
            .is_some_and(|((), at)| now.saturating_duration_since(*at) < SIGHTING_WINDOW);
        if before {
            self.sightings.remove(&mac);
        } else {
            self.sightings.insert(mac, (), now);
        }
        before
    }

    /// Answers kept from single lookups: (positive, negative).
    pub fn singles(&self) -> (usize, usize) {
        (self.positives.len(), self.negatives.len())
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
    fn enrolled_is_the_snapshot_and_the_lookups_since() {
        let mut c = IronicCache::new(Duration::from_secs(60));
        let (a, b, n) = (
            MacAddr([2, 0, 0, 0, 0, 1]),
            MacAddr([2, 0, 0, 0, 0, 2]),
            MacAddr([2, 0, 0, 0, 0, 3]),
        );
        let t0 = Instant::now();
        c.replace_snapshot([(a, Some("c1".to_string()))].into_iter().collect(), t0);
        c.insert(b, Known::Node(None), t0 + Duration::from_secs(1));
        c.insert(n, Known::NoPort, t0 + Duration::from_secs(1));
        let mut got = c.enrolled();
        got.sort();
        assert_eq!(got, [a, b], "a port in Ironic, never a \"no such port\"");
    }

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

    fn random(n: u32) -> MacAddr {
        let b = n.to_be_bytes();
        MacAddr([0x06, 0x17, b[0], b[1], b[2], b[3]])
    }

    #[test]
    fn random_macs_fill_the_negative_table_only_and_never_push_out_a_positive() {
        let t0 = Instant::now();
        let mut c = IronicCache::new(Duration::from_secs(3600));
        c.insert(mac(1), Known::Node(Some("c1".into())), t0);
        for n in 0..(MAX_NEGATIVES as u32 * 4) {
            c.insert(random(n), Known::NoPort, t0);
        }
        assert_eq!(c.singles(), (1, MAX_NEGATIVES), "both bounded");
        assert_eq!(
            c.get(&mac(1), t0),
            Cached::Hit(Known::Node(Some("c1".into())))
        );
        // A machine enrolled during the flood is remembered too.
        c.insert(mac(2), Known::Node(Some("c2".into())), t0);
        assert_eq!(
            c.get(&mac(2), t0),
            Cached::Hit(Known::Node(Some("c2".into())))
        );
        // The oldest negatives went first; the newest are still there.
        assert_eq!(c.get(&random(0), t0), Cached::Miss);
        let last = random(MAX_NEGATIVES as u32 * 4 - 1);
        assert_eq!(c.get(&last, t0), Cached::Hit(Known::NoPort));
        // A MAC enrolled after its negative answer: the positive replaces it.
        c.insert(last, Known::Node(None), t0);
        assert_eq!(c.get(&last, t0), Cached::Hit(Known::Node(None)));
        assert_eq!(c.singles(), (3, MAX_NEGATIVES - 1));
        // Positives are bounded as well, oldest first.
        for n in 0..(MAX_POSITIVES as u32 + 10) {
            c.insert(random(n), Known::Node(None), t0);
        }
        assert_eq!(c.singles().0, MAX_POSITIVES);
    }

    #[test]
    fn a_mac_is_worth_a_lookup_when_seen_again_within_the_window() {
        let t0 = Instant::now();
        let mut c = IronicCache::new(TTL);
        assert!(!c.seen_again(mac(1), t0), "first sighting");
        assert!(
            c.seen_again(mac(1), t0 + Duration::from_secs(4)),
            "firmware's retry"
        );
        // Counted afresh after a lookup...
        assert!(!c.seen_again(mac(1), t0 + Duration::from_secs(5)));
        // ...and a sighting older than the window is a first one again.
        assert!(!c.seen_again(mac(1), t0 + SIGHTING_WINDOW + Duration::from_secs(6)));
        // A flood of random MACs, each seen once, is never worth a lookup, and the
        // table stays bounded.
        let looked = (0..(MAX_SIGHTINGS as u32 * 2))
            .filter(|n| c.seen_again(random(*n), t0))
            .count();
        assert_eq!(looked, 0);
        assert_eq!(c.sightings.len(), MAX_SIGHTINGS);
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
