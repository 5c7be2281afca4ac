//! The member list as every member must see it: names sorted, each member's index in
//! that order, and the share of each address range that index gives it. Every place
//! that needs "which member is number k of n" reads it from here, so they cannot
//! disagree.

use std::net::Ipv4Addr;
use std::ops::Range;

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

    /// (index, count) that member `me`'s slices come from. A single instance, or a
    /// member that does not know its name, has the whole range: (0, 1).
    pub fn partition(&self, me: Option<&str>) -> (usize, usize) {
        match me {
            Some(me) if !self.is_empty() => (self.index_of(me).unwrap_or(0), self.len()),
            _ => (0, 1),
        }
    }

    /// The first and last address of member `index`'s slice of the range
    /// `first..=last`, or `None` when the slice is empty (more members than addresses).
    pub fn slice_bounds(
        &self,
        first: Ipv4Addr,
        last: Ipv4Addr,
        index: usize,
    ) -> Option<(Ipv4Addr, Ipv4Addr)> {
        let start = u32::from(first);
        let len = u32::from(last) - start + 1;
        let slice = slice_of(len, index, self.len());
        (!slice.is_empty()).then(|| {
            (
                Ipv4Addr::from(start + slice.start),
                Ipv4Addr::from(start + slice.end - 1),
            )
        })
    }

    /// A fingerprint of the names (FNV-1a over the sorted names): members whose lists
    /// differ would compute different slices and could hand out the same address, so
    /// they compare fingerprints before serving DHCP.
    pub fn fingerprint(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for n in &self.names {
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
    fn order_index_and_slices_agree_whatever_the_input_order() {
        let a = MemberList::new(["c", "a", "b", "a"]);
        let b = MemberList::new(["b", "c", "a"]);
        assert_eq!(a, b);
        assert_eq!(a.names(), ["a", "b", "c"]);
        assert_eq!(a.partition(Some("c")), (2, 3));
        assert_eq!(a.partition(None), (0, 1));
        assert_eq!(MemberList::default().partition(Some("x")), (0, 1));
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), MemberList::new(["a", "b"]).fingerprint());
        let ip = |n| Ipv4Addr::new(192, 0, 2, n);
        assert_eq!(a.slice_bounds(ip(10), ip(18), 0), Some((ip(10), ip(12))));
        assert_eq!(a.slice_bounds(ip(10), ip(18), 2), Some((ip(16), ip(18))));
        assert_eq!(a.slice_bounds(ip(10), ip(11), 0), None);
    }
}
