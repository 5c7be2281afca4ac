//! One contiguous address range as a bitmap: which addresses are in use, which are never
//! handed out dynamically (exclusions, reservations), and a next-fit cursor so that
//! allocation is O(1) amortised and spreads addresses instead of reusing the newest free.

use std::net::Ipv4Addr;

/// A dynamic address range.
#[derive(Debug, Clone)]
pub struct Pool {
    start: u32,
    len: u32,
    used: Vec<u64>,
    blocked: Vec<u64>,
    cursor: u32,
    in_use: u32,
    blocked_count: u32,
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

impl Pool {
    /// A pool of `first..=last`.
    pub fn new(first: Ipv4Addr, last: Ipv4Addr) -> Self {
        let start = u32::from(first);
        let len = u32::from(last) - start + 1;
        let words = len.div_ceil(64) as usize;
        Self {
            start,
            len,
            used: vec![0; words],
            blocked: vec![0; words],
            cursor: 0,
            in_use: 0,
            blocked_count: 0,
        }
    }

    fn index(&self, ip: Ipv4Addr) -> Option<u32> {
        let i = u32::from(ip).checked_sub(self.start)?;
        (i < self.len).then_some(i)
    }

    /// Whether `ip` belongs to this pool.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.index(ip).is_some()
    }

    /// Never hand `ip` out dynamically (exclusion or reservation).
    pub fn block(&mut self, ip: Ipv4Addr) {
        if let Some(i) = self.index(ip) {
            if !set(&mut self.blocked, i, true) {
                self.blocked_count += 1;
            }
        }
    }

    /// Whether `ip` is blocked from dynamic allocation.
    pub fn is_blocked(&self, ip: Ipv4Addr) -> bool {
        self.index(ip).is_some_and(|i| bit(&self.blocked, i))
    }

    /// Marks `ip` as held (or no longer held) by an active lease or offer.
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

    /// Addresses that could still be handed out.
    pub fn free(&self) -> u32 {
        self.len - self.blocked_count - self.in_use_unblocked()
    }

    fn in_use_unblocked(&self) -> u32 {
        // Blocked addresses can be in use too (a reservation's lease): count them once.
        self.used
            .iter()
            .zip(&self.blocked)
            .map(|(u, b)| (u & !b).count_ones())
            .sum()
    }

    /// Addresses held by a lease or offer.
    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    /// The next address that is neither used nor blocked, searching from the cursor and
    /// wrapping once (the last step revisits the cursor's word without the mask, which
    /// covers its low bits); skips whole words at a time.
    pub fn next_free(&mut self) -> Option<Ipv4Addr> {
        let words = self.used.len() as u32;
        let start_word = self.cursor / 64;
        for step in 0..=words {
            let w = (start_word + step) % words;
            let mut taken = self.used[w as usize] | self.blocked[w as usize];
            if step == 0 {
                // On the first word, ignore bits below the cursor.
                taken |= (1u64 << (self.cursor % 64)) - 1;
            }
            if w == words - 1 && !self.len.is_multiple_of(64) {
                taken |= !((1u64 << (self.len % 64)) - 1);
            }
            if taken != u64::MAX {
                let i = w * 64 + (!taken).trailing_zeros();
                self.cursor = (i + 1) % self.len;
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
    fn counts_free_with_blocked_and_used_overlap() {
        let mut p = Pool::new(ip(0), ip(9));
        p.block(ip(2));
        p.set_used(ip(2), true);
        p.set_used(ip(3), true);
        assert_eq!(p.free(), 8);
        assert!(p.contains(ip(9)) && !p.contains(ip(10)));
    }
}
