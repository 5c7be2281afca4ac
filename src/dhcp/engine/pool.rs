//! One contiguous address range as a bitmap: which addresses are in use, which are never
//! handed out dynamically (exclusions, reservations), and a next-fit cursor so that
//! allocation is O(1) amortised and spreads addresses instead of reusing the newest free.
//!
//! With several members, the range is split into contiguous slices, one per member in
//! sorted-name order (ARCHITECTURE.md, "DHCP decisions" 3); a member hands out fresh
//! addresses only from its own slice, so two members never offer the same address.

use std::net::Ipv4Addr;
use std::ops::Range;

/// A dynamic address range.
#[derive(Debug, Clone)]
pub struct Pool {
    start: u32,
    len: u32,
    /// The part of the range this member may hand out fresh addresses from now: its
    /// slice, narrowed for a while after a membership change.
    slice: Range<u32>,
    /// This member's slice under the current member list.
    full_slice: Range<u32>,
    used: Vec<u64>,
    blocked: Vec<u64>,
    cursor: u32,
    in_use: u32,
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

use crate::owner::slice_of;

impl Pool {
    /// The range `first`..=`last`, all of it this member's.
    pub fn new(first: Ipv4Addr, last: Ipv4Addr) -> Self {
        Self::partitioned(first, last, 0, 1)
    }

    /// The range `first`..=`last`, of which member `index` of `count` allocates from
    /// its slice only.
    pub fn partitioned(first: Ipv4Addr, last: Ipv4Addr, index: usize, count: usize) -> Self {
        let start = u32::from(first);
        let len = u32::from(last) - start + 1;
        let words = len.div_ceil(64) as usize;
        let slice = slice_of(len, index, count);
        Self {
            start,
            len,
            cursor: slice.start,
            full_slice: slice.clone(),
            slice,
            used: vec![0; words],
            blocked: vec![0; words],
            in_use: 0,
        }
    }

    fn index(&self, ip: Ipv4Addr) -> Option<u32> {
        let i = u32::from(ip).checked_sub(self.start)?;
        (i < self.len).then_some(i)
    }

    /// Narrows fresh allocations to the part of this member's slice inside `to` (its
    /// slice under the previous member list, after a membership change).
    pub fn restrict(&mut self, to: Range<u32>) {
        let lo = self.full_slice.start.max(to.start);
        let hi = self.full_slice.end.min(to.end).max(lo);
        self.slice = lo..hi;
    }

    /// Ends `restrict`: the whole slice again.
    pub fn lift_restriction(&mut self) {
        self.slice = self.full_slice.clone();
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
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.index(ip).is_some()
    }

    /// Whether `ip` is in the part of this member's slice it may hand out now.
    pub fn in_slice(&self, ip: Ipv4Addr) -> bool {
        self.index(ip).is_some_and(|i| self.slice.contains(&i))
    }

    /// This member's slice as (first, last) addresses; `None` when it is empty (more
    /// members than addresses).
    pub fn slice_bounds(&self) -> Option<(Ipv4Addr, Ipv4Addr)> {
        (!self.full_slice.is_empty()).then(|| {
            (
                Ipv4Addr::from(self.start + self.full_slice.start),
                Ipv4Addr::from(self.start + self.full_slice.end - 1),
            )
        })
    }

    /// Never hand `ip` out dynamically (exclusion or reservation).
    pub fn block(&mut self, ip: Ipv4Addr) {
        if let Some(i) = self.index(ip) {
            set(&mut self.blocked, i, true);
        }
    }

    /// Lets `ip` be handed out again (a reservation was removed).
    pub fn unblock(&mut self, ip: Ipv4Addr) {
        if let Some(i) = self.index(ip) {
            set(&mut self.blocked, i, false);
        }
    }

    /// Whether `ip` is excluded or reserved.
    pub fn is_blocked(&self, ip: Ipv4Addr) -> bool {
        self.index(ip).is_some_and(|i| bit(&self.blocked, i))
    }

    /// Marks `ip` as held by a lease or offer, or free.
    pub fn set_used(&mut self, ip: Ipv4Addr, used: bool) {
        if let Some(i) = self.index(ip) {
            let was = set(&mut self.used, i, used);
            match (was, used) {
                (false, true) => self.in_use += 1,
                (true, false) => self.in_use -= 1,
                _ => {}
            }
        }
    }

    /// Whether `ip` is held.
    pub fn is_used(&self, ip: Ipv4Addr) -> bool {
        self.index(ip).is_some_and(|i| bit(&self.used, i))
    }

    /// Bits of word `w` that lie in this member's slice.
    fn slice_mask(&self, w: u32) -> u64 {
        let (lo, hi) = (w * 64, w * 64 + 64);
        let from = self.slice.start.clamp(lo, hi) - lo;
        let to = self.slice.end.clamp(lo, hi) - lo;
        let upto = |n: u32| if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
        upto(to) & !upto(from)
    }

    /// Addresses of this member's slice that can still be handed out.
    pub fn free(&self) -> u32 {
        (0..self.used.len() as u32)
            .map(|w| {
                let taken = self.used[w as usize] | self.blocked[w as usize];
                (!taken & self.slice_mask(w)).count_ones()
            })
            .sum()
    }

    /// How many addresses this member's slice holds, free or not.
    pub fn slice_len(&self) -> u32 {
        self.slice.end - self.slice.start
    }

    /// Addresses held by leases or offers (in any slice: a member keeps serving the
    /// leases it holds).
    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    /// The next address of this member's slice that is neither used nor blocked,
    /// searching from the cursor and wrapping once.
    pub fn next_free(&mut self) -> Option<Ipv4Addr> {
        if self.slice.is_empty() {
            return None;
        }
        let first_word = self.slice.start / 64;
        let last_word = (self.slice.end - 1) / 64;
        let words = last_word - first_word + 1;
        let cursor = self.cursor.clamp(self.slice.start, self.slice.end - 1);
        let start_word = cursor / 64;
        for step in 0..=words {
            let w = first_word + (start_word - first_word + step) % words;
            let mut taken = self.used[w as usize] | self.blocked[w as usize] | !self.slice_mask(w);
            if step == 0 {
                taken |= (1u64 << (cursor % 64)) - 1;
            }
            if taken != u64::MAX {
                let i = w * 64 + (!taken).trailing_zeros();
                self.cursor = if i + 1 >= self.slice.end {
                    self.slice.start
                } else {
                    i + 1
                };
                return Some(Ipv4Addr::from(self.start + i));
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
    fn slices_are_disjoint_contiguous_and_cover_the_range() {
        for len in [1u32, 2, 3, 10, 64, 100, 257] {
            for count in 1..=5usize {
                let mut next = 0;
                for i in 0..count {
                    let s = slice_of(len, i, count);
                    assert_eq!(s.start, next, "len {len} count {count}");
                    assert!(s.len() as u32 <= len / count as u32 + 1);
                    next = s.end;
                }
                assert_eq!(next, len);
            }
        }
    }

    #[test]
    fn a_member_allocates_only_from_its_slice() {
        // 100 addresses over three members: 33, 33, 34.
        let mut seen = std::collections::HashSet::new();
        for index in 0..3 {
            let mut p = Pool::partitioned(ip(0), ip(99), index, 3);
            p.block(ip(40));
            let (lo, hi) = p.slice_bounds().unwrap();
            let expected_free = p.free();
            let mut n = 0;
            while let Some(a) = p.next_free() {
                assert!(a >= lo && a <= hi && p.in_slice(a), "{a} outside {lo}-{hi}");
                assert!(seen.insert(a), "{a} handed out by two members");
                p.set_used(a, true);
                n += 1;
            }
            assert_eq!(n, expected_free);
            assert_eq!(p.free(), 0);
        }
        assert_eq!(seen.len(), 99);
        // More members than addresses: some slices are empty.
        let mut tiny = Pool::partitioned(ip(0), ip(1), 0, 3);
        assert_eq!(tiny.slice_bounds(), None);
        assert_eq!(tiny.next_free(), None);
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
}
