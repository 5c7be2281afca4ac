//! What a chain check found, kept for a few seconds (`http::chain_check`): a booting
//! machine's retries, its HEAD from another member and its GET that follows share one
//! check, and a conductor that does not answer is asked once for all its machines.
//!
//! Pure: the time comes in as an argument. Bounded: the boot routes are
//! unauthenticated, and with the hash resolver any MAC makes a new URL, so at most
//! `capacity` entries are kept; the oldest go first. Every entry lives equally long, so
//! the insertion order is also the expiry order, and one queue serves both eviction
//! and expiry.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// A map whose entries expire `ttl` after they were put in, holding at most `capacity`.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    ttl: Duration,
    capacity: usize,
    /// Each key's value, when it expires, and the generation of its queue record.
    entries: HashMap<K, (V, Instant, u64)>,
    /// Keys in insertion order with their generation; a record whose generation no
    /// longer matches its entry's was superseded by a later insert.
    order: VecDeque<(K, u64)>,
    generation: u64,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    /// An empty cache (a `capacity` of 0 keeps nothing).
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            ttl,
            capacity,
            entries: HashMap::new(),
            order: VecDeque::new(),
            generation: 0,
        }
    }

    /// The value for `key`, unless it expired by `now`.
    pub fn get<Q>(&self, key: &Q, now: Instant) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.entries
            .get(key)
            .filter(|(_, until, _)| now < *until)
            .map(|(v, _, _)| v.clone())
    }

    /// Keeps `value` for `key` until `now + ttl`, dropping expired entries and, when
    /// full, the oldest ones.
    pub fn insert(&mut self, key: K, value: V, now: Instant) {
        if self.capacity == 0 {
            return;
        }
        self.expire(now);
        // The queue holds a record for every entry (and superseded ones), so a full
        // queue bounds both.
        while self.order.len() >= self.capacity {
            self.pop_oldest();
        }
        self.generation += 1;
        let g = self.generation;
        self.entries.insert(key.clone(), (value, now + self.ttl, g));
        self.order.push_back((key, g));
    }

    /// Entries kept (some may have expired and not been dropped yet).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn expire(&mut self, now: Instant) {
        while let Some((key, g)) = self.order.front() {
            match self.entries.get(key) {
                Some((_, until, eg)) if eg == g && now < *until => break,
                _ => self.pop_oldest(),
            }
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((key, g)) = self.order.pop_front() {
            if self.entries.get(&key).is_some_and(|(_, _, eg)| *eg == g) {
                self.entries.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(3);

    #[test]
    fn an_entry_lives_for_its_ttl_and_not_a_moment_longer() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(TTL, 8);
        c.insert("u", 1, t0);
        assert_eq!(c.get("u", t0), Some(1));
        assert_eq!(c.get("u", t0 + TTL - Duration::from_millis(1)), Some(1));
        assert_eq!(c.get("u", t0 + TTL), None);
        assert_eq!(c.get("other", t0), None);
    }

    #[test]
    fn a_new_value_replaces_the_old_and_restarts_its_time() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(TTL, 8);
        c.insert("u", 1, t0);
        c.insert("u", 2, t0 + Duration::from_secs(2));
        assert_eq!(c.get("u", t0 + Duration::from_secs(4)), Some(2));
        // The superseded record, expiring first, must not take the new entry with it.
        c.insert("v", 3, t0 + Duration::from_secs(4));
        assert_eq!(c.get("u", t0 + Duration::from_secs(4)), Some(2));
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn a_flood_of_keys_never_holds_more_than_the_capacity_and_drops_the_oldest() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(TTL, 100);
        for i in 0..10_000u32 {
            c.insert(i, i, t0);
            assert!(c.len() <= 100 && c.order.len() <= 100);
        }
        assert_eq!(c.get(&9_999, t0), Some(9_999));
        assert_eq!(c.get(&9_900, t0), Some(9_900));
        assert_eq!(c.get(&9_899, t0), None);
        // The same key again and again: superseded records do not grow the queue.
        for i in 0..1_000u32 {
            c.insert(7, i, t0);
            assert!(c.len() <= 100 && c.order.len() <= 100);
        }
        assert_eq!(c.get(&7, t0), Some(999));
    }

    #[test]
    fn expired_entries_are_dropped_before_live_ones() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(TTL, 3);
        c.insert("old", 0, t0);
        c.insert("a", 1, t0 + Duration::from_secs(2));
        c.insert("b", 2, t0 + Duration::from_secs(2));
        // "old" expired: it makes room, not "a".
        c.insert("c", 3, t0 + Duration::from_secs(4));
        assert_eq!(c.len(), 3);
        for (k, v) in [("a", 1), ("b", 2), ("c", 3)] {
            assert_eq!(c.get(k, t0 + Duration::from_secs(4)), Some(v), "{k}");
        }
    }

    #[test]
    fn capacity_zero_keeps_nothing() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(TTL, 0);
        c.insert("u", 1, t0);
        assert!(c.is_empty());
        assert_eq!(c.get("u", t0), None);
    }
}
