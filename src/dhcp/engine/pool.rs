//! One contiguous address range as a bitmap: which addresses are in use, which are never
//! handed out dynamically (exclusions, reservations), and a next-fit cursor so that
//! allocation is O(1) amortised and spreads addresses instead of reusing the newest free.
//!
//! With several members, the range is shared among them in blocks (`owner::shares`;
//! docs/design.md, "DHCP decisions" 3); a member hands out fresh addresses only from
//! its own share, so two members never offer the same address.

use std::net::{Ipv4Addr, Ipv6Addr};

/// An address a [`Pool`] hands out: v4 for DHCP, v6 for DHCPv6. A range is at most
/// `u32::MAX` addresses, counted as offsets from its first.
pub trait PoolAddr: Copy + std::fmt::Debug {
    /// How far `self` lies past `start`, if it is not before it and fits 32 bits.
    fn offset_from(self, start: Self) -> Option<u32>;
    /// The address `offset` past `start`.
    fn at_offset(start: Self, offset: u32) -> Self;
}

impl PoolAddr for Ipv4Addr {
    fn offset_from(self, start: Self) -> Option<u32> {
        u32::from(self).checked_sub(u32::from(start))
    }
    fn at_offset(start: Self, offset: u32) -> Self {
        Ipv4Addr::from(u32::from(start) + offset)
    }
}

impl PoolAddr for Ipv6Addr {
    fn offset_from(self, start: Self) -> Option<u32> {
        u128::from(self)
            .checked_sub(u128::from(start))
            .and_then(|d| u32::try_from(d).ok())
    }
    fn at_offset(start: Self, offset: u32) -> Self {
        Ipv6Addr::from(u128::from(start) + u128::from(offset))
    }
}

/// A dynamic address range.
#[derive(Debug, Clone)]
pub struct Pool<A: PoolAddr = Ipv4Addr> {
    start: A,
    len: u32,
    /// The part of the range this member may hand out fresh addresses from now: its
    /// share, narrowed for a while after a membership change (bitmap over offsets).
    allowed: Vec<u64>,
    /// How many offsets `allowed` holds.
    allowed_len: u32,
    /// This member's share under the current member list (bitmap over offsets).
    share: Vec<u64>,
    used: Vec<u64>,
    blocked: Vec<u64>,
    cursor: u32,
    in_use: u32,
    /// Of `in_use`, those inside `allowed` (other members' leases lie outside it).
    in_use_allowed: u32,
    /// Addresses this member gained at a membership change and has not yet found clear
    /// by a probe (bitmap over offsets; `engine::probe`), probed until `probe_until`.
    probe: Vec<u64>,
    probe_until: u64,
    /// Addresses no stored lease has named and no probe has found clear (bitmap over
    /// offsets; empty: none are tracked): probed before their first offer, with no
    /// window, as dnsmasq pings every address it holds no lease for.
    fresh: Vec<u64>,
}

fn bit(words: &[u64], i: u32) -> bool {
    words[(i / 64) as usize] & (1 << (i % 64)) != 0
}

fn set(words: &mut [u64], i: u32, on: bool) -> bool {
    let w = &mut words[(i / 64) as usize];
    let mask = 1u64 << (i % 64);
    let was = *w & mask != 0;
    if on {
        *w |= mask;
    } else {
        *w &= !mask;
    }
    was
}

fn ones(words: &[u64]) -> u32 {
    words.iter().map(|w| w.count_ones()).sum()
}

impl<A: PoolAddr> Pool<A> {
    /// The range `first`..=`last`, all of it this member's.
    pub fn new(first: A, last: A) -> Self {
        let len = Self::range_len(first, last);
        let share = (0..len.div_ceil(64))
            .map(|w| match len - w * 64 {
                n if n >= 64 => u64::MAX,
                n => (1u64 << n) - 1,
            })
            .collect();
        Self::shared(first, last, share)
    }

    /// The range `first`..=`last`, of which this member allocates only from `share`
    /// (a bitmap over the range's offsets, `owner::MemberList::share_of`).
    pub fn shared(first: A, last: A, share: Vec<u64>) -> Self {
        let start = first;
        let len = Self::range_len(first, last);
        let words = len.div_ceil(64) as usize;
        assert_eq!(share.len(), words, "a share covers its range");
        Self {
            start,
            len,
            cursor: 0,
            allowed_len: ones(&share),
            allowed: share.clone(),
            share,
            used: vec![0; words],
            blocked: vec![0; words],
            in_use: 0,
            in_use_allowed: 0,
            probe: Vec::new(),
            probe_until: 0,
            fresh: Vec::new(),
        }
    }

    fn range_len(first: A, last: A) -> u32 {
        let span = last
            .offset_from(first)
            .expect("a range's last address is after its first");
        span.checked_add(1)
            .expect("a range holds at most u32::MAX addresses")
    }

    fn index(&self, ip: A) -> Option<u32> {
        let i = ip.offset_from(self.start)?;
        (i < self.len).then_some(i)
    }

    /// Narrows fresh allocations further, to the part inside `to` (this member's share
    /// under a previous member list, after a membership change). Narrowings stack until
    /// [`Self::lift_restriction`].
    pub fn restrict(&mut self, to: &[u64]) {
        for (w, a) in self.allowed.iter_mut().enumerate() {
            *a &= to.get(w).copied().unwrap_or(0);
        }
        self.recount_allowed();
    }

    fn recount_allowed(&mut self) {
        self.allowed_len = ones(&self.allowed);
        self.in_use_allowed = self
            .allowed
            .iter()
            .zip(&self.used)
            .map(|(a, u)| (a & u).count_ones())
            .sum();
    }

    /// Replaces this member's share (the member list changed) and lifts any
    /// restriction; the caller restricts again if a transition is running.
    pub fn reshare(&mut self, share: Vec<u64>) {
        assert_eq!(share.len(), self.share.len(), "a share covers its range");
        self.share = share;
        self.lift_restriction();
    }

    /// This member's share under the current member list (bitmap over offsets).
    pub fn share(&self) -> &[u64] {
        &self.share
    }

    /// Probes the addresses of `gained` (a bitmap over offsets) before their first
    /// offer until `until`. Stacks with an earlier window: the later end holds for all.
    pub fn inherit(&mut self, gained: &[u64], until: u64) {
        if gained.iter().all(|w| *w == 0) {
            return;
        }
        self.probe.resize(self.share.len(), 0);
        for (p, g) in self.probe.iter_mut().zip(gained) {
            *p |= g;
        }
        self.probe_until = self.probe_until.max(until);
    }

    /// Tracks every address of the range as never seen; [`Self::seen`] then takes out
    /// those a stored lease names.
    pub fn track_fresh(&mut self) {
        self.fresh = (0..self.len.div_ceil(64))
            .map(|w| match self.len - w * 64 {
                n if n >= 64 => u64::MAX,
                n => (1u64 << n) - 1,
            })
            .collect();
    }

    /// A lease names `ip` (stored, or bound now): it is no longer fresh.
    pub fn seen(&mut self, ip: A) {
        if let Some(i) = self.index(ip).filter(|_| !self.fresh.is_empty()) {
            set(&mut self.fresh, i, false);
        }
    }

    /// Whether `ip` must be probed before it is offered at `now`: never seen by the
    /// store ([`Self::track_fresh`]), or gained at a membership change while its window
    /// still runs; and no probe has found it clear yet. Excluded and reserved addresses
    /// never are.
    pub fn needs_probe(&self, ip: A, now: u64) -> bool {
        self.index(ip).is_some_and(|i| {
            let gained = now < self.probe_until && !self.probe.is_empty() && bit(&self.probe, i);
            let fresh = !self.fresh.is_empty() && bit(&self.fresh, i);
            (gained || fresh) && !bit(&self.blocked, i)
        })
    }

    /// A probe found `ip` clear: not probed again in this window, nor as fresh.
    pub fn probed_clear(&mut self, ip: A) {
        if let Some(i) = self.index(ip).filter(|_| !self.probe.is_empty()) {
            set(&mut self.probe, i, false);
        }
        self.seen(ip);
    }

    /// Forgets the probe window once it has ended at `now`.
    pub fn end_probes(&mut self, now: u64) {
        if !self.probe.is_empty() && now >= self.probe_until {
            self.probe = Vec::new();
        }
    }

    /// Ends `restrict`: the whole share again.
    pub fn lift_restriction(&mut self) {
        self.allowed.clone_from(&self.share);
        self.recount_allowed();
    }

    /// The range's first and last address.
    pub fn bounds(&self) -> (A, A) {
        (self.start, A::at_offset(self.start, self.len - 1))
    }

    /// The range's length.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the range is empty (never: a range has a first and a last address).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `ip` is in the range (any member's slice).
    pub fn contains(&self, ip: A) -> bool {
        self.index(ip).is_some()
    }

    /// Whether `ip` is in the part of this member's share it may hand out now.
    pub fn in_share(&self, ip: A) -> bool {
        self.index(ip).is_some_and(|i| bit(&self.allowed, i))
    }

    /// Never hand `ip` out dynamically (exclusion or reservation).
    pub fn block(&mut self, ip: A) {
        if let Some(i) = self.index(ip) {
            set(&mut self.blocked, i, true);
        }
    }

    /// Lets `ip` be handed out again (a reservation was removed).
    pub fn unblock(&mut self, ip: A) {
        if let Some(i) = self.index(ip) {
            set(&mut self.blocked, i, false);
        }
    }

    /// Whether `ip` is excluded or reserved.
    pub fn is_blocked(&self, ip: A) -> bool {
        self.index(ip).is_some_and(|i| bit(&self.blocked, i))
    }

    /// Marks `ip` as held by a lease or offer, or free.
    pub fn set_used(&mut self, ip: A, used: bool) {
        if let Some(i) = self.index(ip) {
            let was = set(&mut self.used, i, used);
            let allowed = u32::from(bit(&self.allowed, i));
            match (was, used) {
                (false, true) => {
                    self.in_use += 1;
                    self.in_use_allowed += allowed;
                }
                (true, false) => {
                    self.in_use -= 1;
                    self.in_use_allowed -= allowed;
                }
                _ => {}
            }
        }
    }

    /// Addresses held inside the part of the share this member may hand out now.
    pub fn in_use_in_share(&self) -> u32 {
        self.in_use_allowed
    }

    /// Whether `ip` is held.
    pub fn is_used(&self, ip: A) -> bool {
        self.index(ip).is_some_and(|i| bit(&self.used, i))
    }

    /// Addresses of this member's share that can still be handed out.
    pub fn free(&self) -> u32 {
        (0..self.used.len())
            .map(|w| (!(self.used[w] | self.blocked[w]) & self.allowed[w]).count_ones())
            .sum()
    }

    /// How many addresses this member may hand out fresh now, free or not.
    pub fn share_len(&self) -> u32 {
        self.allowed_len
    }

    /// Addresses held by leases or offers (in any slice: a member keeps serving the
    /// leases it holds).
    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    /// The next address of this member's share that is neither used nor blocked,
    /// searching from the cursor and wrapping once.
    pub fn next_free(&mut self) -> Option<A> {
        if self.allowed_len == 0 {
            return None;
        }
        let words = self.used.len() as u32;
        let cursor = self.cursor.min(self.len - 1);
        let start_word = cursor / 64;
        for step in 0..=words {
            let w = ((start_word + step) % words) as usize;
            let mut taken = self.used[w] | self.blocked[w] | !self.allowed[w];
            if step == 0 {
                taken |= (1u64 << (cursor % 64)) - 1;
            }
            if taken != u64::MAX {
                let i = w as u32 * 64 + (!taken).trailing_zeros();
                self.cursor = if i + 1 >= self.len { 0 } else { i + 1 };
                return Some(A::at_offset(self.start, i));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 0)) + n)
    }

    #[test]
    fn allocates_every_address_once_then_none() {
        let mut p = Pool::new(ip(1), ip(130));
        p.block(ip(5));
        let mut got = std::collections::HashSet::new();
        while let Some(a) = p.next_free() {
            assert!(got.insert(a), "{a} twice");
            p.set_used(a, true);
            assert!(got.len() <= 129);
        }
        assert_eq!(got.len(), 129);
        assert!(!got.contains(&ip(5)));
        assert_eq!(p.free(), 0);
    }

    #[test]
    fn freed_addresses_come_back_after_wrap() {
        let mut p = Pool::new(ip(1), ip(70));
        let all: Vec<_> = std::iter::from_fn(|| {
            let a = p.next_free()?;
            p.set_used(a, true);
            Some(a)
        })
        .collect();
        assert_eq!(all.len(), 70);
        p.set_used(ip(3), false);
        p.set_used(ip(66), false);
        let a = p.next_free().unwrap();
        p.set_used(a, true);
        let b = p.next_free().unwrap();
        p.set_used(b, true);
        let mut both = [a, b];
        both.sort();
        assert_eq!(both, [ip(3), ip(66)]);
        assert_eq!(p.next_free(), None);
    }

    #[test]
    fn a_member_allocates_only_from_its_share() {
        use crate::owner::shares::Split;
        let list = crate::owner::MemberList::new(["a", "b", "c"]);
        let mut seen = std::collections::HashSet::new();
        for me in ["a", "b", "c"] {
            let share = list.share_of(Split::CURRENT, ip(0), ip(99), Some(me));
            let mut p = Pool::shared(ip(0), ip(99), share);
            p.block(ip(40));
            let expected_free = p.free();
            let mut n = 0;
            while let Some(a) = p.next_free() {
                assert!(p.in_share(a), "{a} outside {me}'s share");
                assert!(seen.insert(a), "{a} handed out by two members");
                p.set_used(a, true);
                n += 1;
            }
            assert_eq!(n, expected_free);
            assert_eq!(p.free(), 0);
        }
        assert_eq!(seen.len(), 99);
        // A restriction to nothing (a new member during a transition) hands out none.
        let mut none = Pool::new(ip(0), ip(99));
        none.restrict(&[]);
        assert_eq!(none.next_free(), None);
        assert_eq!(none.share_len(), 0);
        none.lift_restriction();
        assert_eq!(none.share_len(), 100);
    }

    #[test]
    fn gained_addresses_are_probed_until_clear_or_the_window_ends() {
        let mut p = Pool::new(ip(0), ip(99));
        assert!(!p.needs_probe(ip(3), 0), "nothing gained: no probe");
        p.block(ip(5));
        p.inherit(&[0b111000, 0], 100);
        assert!(p.needs_probe(ip(3), 10) && p.needs_probe(ip(4), 99));
        assert!(!p.needs_probe(ip(2), 10), "not gained");
        assert!(!p.needs_probe(ip(5), 10), "excluded or reserved");
        assert!(!p.needs_probe(ip(3), 100), "window over");
        p.probed_clear(ip(3));
        assert!(!p.needs_probe(ip(3), 10) && p.needs_probe(ip(4), 10));
        p.end_probes(99);
        assert!(p.needs_probe(ip(4), 99));
        p.end_probes(100);
        assert!(!p.needs_probe(ip(4), 50));
    }

    #[test]
    fn counts_free_with_blocked_and_used_overlap() {
        let mut p = Pool::new(ip(0), ip(9));
        p.block(ip(2));
        p.set_used(ip(2), true);
        p.set_used(ip(3), true);
        assert_eq!(p.free(), 8);
        assert!(p.contains(ip(9)) && !p.contains(ip(10)));
    }

    #[test]
    fn a_v6_range_allocates_every_address_once_then_none() {
        let first: Ipv6Addr = "fd00:1::fffe".parse().unwrap();
        let last: Ipv6Addr = "fd00:1::1:3".parse().unwrap();
        let mut pool = Pool::new(first, last);
        assert_eq!(pool.len(), 6);
        assert_eq!(pool.bounds(), (first, last));
        let mut got = Vec::new();
        while let Some(ip) = pool.next_free() {
            pool.set_used(ip, true);
            got.push(ip.to_string());
        }
        assert_eq!(
            got,
            [
                "fd00:1::fffe",
                "fd00:1::ffff",
                "fd00:1::1:0",
                "fd00:1::1:1",
                "fd00:1::1:2",
                "fd00:1::1:3"
            ]
        );
        assert!(!pool.contains("fd00:1::1:4".parse().unwrap()));
        assert!(!pool.contains("fd00:1::fffd".parse().unwrap()));
    }
}
