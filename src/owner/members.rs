//! The member list as every member must see it: names sorted, each member's index in
//! that order, and the share of each address range that index gives it. Every place
//! that needs "which member is number k of n" reads it from here, so they cannot
//! disagree.

use std::net::Ipv4Addr;
use std::ops::Range;

/// Word `w` of an all-set bitmap over `len` offsets.
fn full_word(len: u32, w: usize) -> u64 {
    let lo = w as u32 * 64;
    match len.saturating_sub(lo) {
        n if n >= 64 => u64::MAX,
        n => (1u64 << n) - 1,
    }
}

use super::shares::{Shares, Split};
use crate::config::Member;

/// Member names in the one order every member uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberList {
    names: Vec<String>,
}

impl MemberList {
    /// The list of `names`, sorted, duplicates dropped.
    pub fn new<S: Into<String>>(names: impl IntoIterator<Item = S>) -> Self {
        let mut names: Vec<String> = names.into_iter().map(Into::into).collect();
        names.sort_unstable();
        names.dedup();
        Self { names }
    }

    /// The list of the configured members.
    pub fn of(members: &[Member]) -> Self {
        Self::new(members.iter().map(|m| m.name.clone()))
    }

    /// The names, sorted.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are no members (a single instance).
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// `name`'s position in the sorted list.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// How the range `first..=last` is shared among the members, by `split`.
    pub fn shares(&self, split: Split, first: Ipv4Addr, last: Ipv4Addr) -> Shares {
        let start = u32::from(first);
        Shares::assign(split, start, u32::from(last) - start + 1, &self.names)
    }

    /// Member `me`'s share of the range `first..=last` as a bitmap over the range's
    /// offsets. A single instance (no list, or no name) has all of it; a member not in
    /// a list of others (members from Ironic, its conductor not alive) has none, since
    /// the others share it all.
    pub fn share_of(
        &self,
        split: Split,
        first: Ipv4Addr,
        last: Ipv4Addr,
        me: Option<&str>,
    ) -> Vec<u64> {
        let len = u32::from(last) - u32::from(first) + 1;
        self.share_of_offsets(split, u32::from(first), len, me)
    }

    /// Member `me`'s share of a range of `len` addresses whose key (what makes two
    /// ranges' shares independent) is `key`, as [`Self::share_of`] computes it; for
    /// ranges that are not IPv4 (DHCPv6).
    pub fn share_of_offsets(&self, split: Split, key: u32, len: u32, me: Option<&str>) -> Vec<u64> {
        let words = len.div_ceil(64) as usize;
        match me {
            Some(me) if !self.is_empty() => match self.index_of(me) {
                Some(_) if self.len() == 1 => (0..words).map(|w| full_word(len, w)).collect(),
                Some(k) => Shares::assign(split, key, len, &self.names).bitmap_of(k),
                None => vec![0; words],
            },
            _ => (0..words).map(|w| full_word(len, w)).collect(),
        }
    }

    /// Member `name`'s share of `first..=last` under the current split: how many
    /// addresses, and their runs as "a - b" (or "a" for one address), in order. A single
    /// instance has the whole range.
    pub fn share_runs(&self, first: Ipv4Addr, last: Ipv4Addr, name: &str) -> (u32, Vec<String>) {
        let shares = self.shares(Split::CURRENT, first, last);
        let k = self.index_of(name).unwrap_or(0);
        let start = u32::from(first);
        let runs = shares
            .runs_of(k)
            .into_iter()
            .map(|r| {
                match (
                    Ipv4Addr::from(start + r.start),
                    Ipv4Addr::from(start + r.end - 1),
                ) {
                    (a, b) if a == b => a.to_string(),
                    (a, b) => format!("{a} - {b}"),
                }
            })
            .collect();
        (shares.count_of(k), runs)
    }

    /// A fingerprint of the names and the split (FNV-1a over the split's name and the
    /// sorted names): members whose lists or splits differ would compute different
    /// shares and could hand out the same address, so they compare fingerprints before
    /// serving DHCP.
    pub fn fingerprint(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for n in
            std::iter::once(Split::CURRENT.as_str()).chain(self.names.iter().map(String::as_str))
        {
            for b in n.bytes().chain([0]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        format!("{h:016x}")
    }
}

/// Offsets of slice `index` of `count` in a range of `len` addresses: contiguous,
/// disjoint, covering the range, sizes differing by at most one.
pub fn slice_of(len: u32, index: usize, count: usize) -> Range<u32> {
    let count = count.max(1) as u64;
    let index = (index as u64).min(count - 1);
    let lo = u64::from(len) * index / count;
    let hi = u64::from(len) * (index + 1) / count;
    lo as u32..hi as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_index_and_shares_agree_whatever_the_input_order() {
        let a = MemberList::new(["c", "a", "b", "a"]);
        let b = MemberList::new(["b", "c", "a"]);
        assert_eq!(a, b);
        assert_eq!(a.names(), ["a", "b", "c"]);
        assert_eq!(a.index_of("c"), Some(2));
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), MemberList::new(["a", "b"]).fingerprint());
        let ip = |n| Ipv4Addr::new(192, 0, 2, n);
        let split = Split::CURRENT;
        assert_eq!(
            a.shares(split, ip(10), ip(18)),
            b.shares(split, ip(10), ip(18))
        );
        // The three shares tile the range.
        let shares: Vec<Vec<u64>> = ["a", "b", "c"]
            .iter()
            .map(|m| a.share_of(split, ip(10), ip(18), Some(m)))
            .collect();
        assert_eq!(shares[0][0] & shares[1][0], 0);
        assert_eq!(shares[0][0] | shares[1][0] | shares[2][0], 0x1ff);
        // A single instance has it all; a name not in a list of others has none.
        assert_eq!(
            MemberList::default().share_of(split, ip(10), ip(18), Some("x")),
            [0x1ff]
        );
        assert_eq!(a.share_of(split, ip(10), ip(18), None), [0x1ff]);
        assert_eq!(a.share_of(split, ip(10), ip(18), Some("zz")), [0]);
        assert_eq!(
            MemberList::new(["a"]).share_of(split, ip(10), ip(18), Some("a")),
            [0x1ff]
        );
        assert_eq!(
            MemberList::default().share_of(split, ip(0), ip(127), None),
            [u64::MAX, u64::MAX]
        );
    }
}
