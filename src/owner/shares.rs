//! Which member hands out which addresses of a range: the range is cut into fixed-size
//! blocks and each block goes to one member by rendezvous (highest random weight)
//! hashing, with a load bound so no member gets much more than its share.
//!
//! Why not contiguous slices in sorted-name order (the scheme before): a member joining
//! or leaving shifts every boundary, so most addresses change hands; a name that sorts
//! first moves all of them. With rendezvous blocks, a block changes hands only when the
//! member that wins it changes: a joining member takes about 1/(n+1) of the blocks, a
//! leaving one gives up only its own (the figures are in `tests` below and docs/members.md).
//!
//! Every member must compute the same assignment from the same names, so everything here
//! is a pure function of (names, range), and changing it is a protocol change: it is
//! versioned by [`Split`], which the store's membership record and the member-list
//! fingerprint carry.

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// At most this many blocks per range; the block length follows from the range length.
pub const MAX_BLOCKS: u32 = 256;
/// A member may hold up to 5/4 of an even share of the blocks (bounded-load rendezvous):
/// enough slack that a change moves few blocks beyond the ones it must.
const LOAD_SLACK: (u64, u64) = (5, 4);

/// How ranges are shared among members. The store records the split a member served
/// with, so a change of split is a membership change (with its transition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Split {
    /// Contiguous slices in sorted-name order (before rendezvous blocks). Records
    /// written before the split was recorded are this.
    #[default]
    Contiguous,
    /// Rendezvous blocks, this module.
    BlocksV1,
}

impl Split {
    /// The split this version of shardboot serves with.
    pub const CURRENT: Split = Split::BlocksV1;

    /// The split a membership record names; no name (a record from before splits were
    /// recorded) or an unknown one is contiguous, the only split before.
    pub fn recorded(name: Option<&str>) -> Self {
        match name {
            Some("blocks-v1") => Split::BlocksV1,
            _ => Split::Contiguous,
        }
    }

    /// Its name, as the fingerprint and the API show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Contiguous => "contiguous",
            Split::BlocksV1 => "blocks-v1",
        }
    }
}

/// The owner of every address of one range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shares {
    len: u32,
    block_len: u32,
    /// Member index (into the sorted names) per block.
    owner: Vec<u16>,
    members: usize,
}

impl Shares {
    /// The shares of a range of `len` addresses starting at `first` (the range's key:
    /// two ranges are assigned independently) among the sorted `names`, by `split`.
    /// No names: a single instance owns everything.
    pub fn assign(split: Split, first: u32, len: u32, names: &[String]) -> Self {
        if names.len() <= 1 || len == 0 {
            return Self::whole(len);
        }
        match split {
            Split::Contiguous => Self::contiguous(len, names.len()),
            Split::BlocksV1 => Self::blocks(first, len, names),
        }
    }

    fn whole(len: u32) -> Self {
        Self {
            len,
            block_len: len.max(1),
            owner: vec![0],
            members: 1,
        }
    }

    /// Contiguous slices, sizes differing by at most one (the earlier scheme, kept to
    /// compute the old shares during a transition away from it).
    fn contiguous(len: u32, count: usize) -> Self {
        let mut owner = vec![0u16; len as usize];
        for k in 0..count {
            for i in super::slice_of(len, k, count) {
                owner[i as usize] = k as u16;
            }
        }
        Self {
            len,
            block_len: 1,
            owner,
            members: count,
        }
    }

    fn blocks(first: u32, len: u32, names: &[String]) -> Self {
        let block_len = len.div_ceil(MAX_BLOCKS);
        let blocks = len.div_ceil(block_len);
        let n = names.len() as u64;
        let cap = (u64::from(blocks) * LOAD_SLACK.0).div_ceil(n * LOAD_SLACK.1) as u32;
        let name_hashes: Vec<u64> = names.iter().map(|n| fnv1a(n.as_bytes())).collect();
        let mut load = vec![0u32; names.len()];
        let mut owner = Vec::with_capacity(blocks as usize);
        let mut ranked: Vec<(u64, usize)> = Vec::with_capacity(names.len());
        for b in 0..blocks {
            let block_key = mix((u64::from(first) << 32) | u64::from(b));
            ranked.clear();
            ranked.extend(
                name_hashes
                    .iter()
                    .enumerate()
                    .map(|(k, h)| (mix(h ^ block_key), k)),
            );
            // Highest weight first; the index breaks (astronomically unlikely) ties the
            // same way everywhere.
            ranked.sort_unstable_by(|a, b| b.cmp(a));
            let k = ranked
                .iter()
                .map(|&(_, k)| k)
                .find(|&k| load[k] < cap)
                .unwrap_or(ranked[0].1);
            load[k] += 1;
            owner.push(k as u16);
        }
        Self {
            len,
            block_len,
            owner,
            members: names.len(),
        }
    }

    /// The member index owning offset `i` of the range.
    pub fn owner_of(&self, i: u32) -> Option<usize> {
        (i < self.len).then(|| usize::from(self.owner[(i / self.block_len) as usize]))
    }

    /// Member `k`'s addresses as a bitmap over the range's offsets (64 per word).
    pub fn bitmap_of(&self, k: usize) -> Vec<u64> {
        let mut words = vec![0u64; self.len.div_ceil(64) as usize];
        for run in self.runs_of(k) {
            for i in run {
                words[(i / 64) as usize] |= 1 << (i % 64);
            }
        }
        words
    }

    /// Member `k`'s addresses as maximal runs of offsets, in order.
    pub fn runs_of(&self, k: usize) -> Vec<Range<u32>> {
        let mut runs: Vec<Range<u32>> = Vec::new();
        for (b, &o) in self.owner.iter().enumerate() {
            if usize::from(o) != k {
                continue;
            }
            let lo = b as u32 * self.block_len;
            let hi = (lo + self.block_len).min(self.len);
            match runs.last_mut() {
                Some(r) if r.end == lo => r.end = hi,
                _ => runs.push(lo..hi),
            }
        }
        runs
    }

    /// How many addresses member `k` owns.
    pub fn count_of(&self, k: usize) -> u32 {
        self.runs_of(k).iter().map(|r| r.end - r.start).sum()
    }

    /// Number of members the range is shared among.
    pub fn members(&self) -> usize {
        self.members
    }
}

/// FNV-1a, 64 bits: a fixed, documented hash (the assignment must not depend on a
/// library's choice of hasher).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The splitmix64 finaliser: spreads FNV's weak low bits over the whole word.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    /// Addresses whose owner (by name) differs between two assignments of one range.
    fn moved(before: &Shares, bn: &[String], after: &Shares, an: &[String]) -> u32 {
        (0..before.len)
            .filter(|&i| bn[before.owner_of(i).unwrap()] != an[after.owner_of(i).unwrap()])
            .count() as u32
    }

    #[test]
    fn every_address_has_one_owner_and_shares_stay_within_the_bound() {
        for len in [1u32, 2, 3, 10, 100, 255, 256, 257, 1024, 65_534] {
            for n in 1..=9 {
                let ns: Vec<String> = (0..n).map(|k| format!("member-{k}")).collect();
                let s = Shares::assign(Split::CURRENT, 0x0a00_0000, len, &ns);
                let total: u32 = (0..n).map(|k| s.count_of(k)).sum();
                assert_eq!(total, len, "len {len} n {n}");
                for k in 0..n {
                    let bits: u32 = s.bitmap_of(k).iter().map(|w| w.count_ones()).sum();
                    assert_eq!(bits, s.count_of(k));
                    if n > 1 {
                        // At most 5/4 of an even share of the blocks (plus one block).
                        let blocks = len.div_ceil(len.div_ceil(MAX_BLOCKS));
                        let cap = (u64::from(blocks) * 5).div_ceil(n as u64 * 4) as u32;
                        assert!(s.count_of(k) <= cap * s.block_len, "len {len} n {n} k {k}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_same_names_give_the_same_shares_and_ranges_differ() {
        let ns = names(&["a", "b", "c"]);
        let one = Shares::assign(Split::CURRENT, 1000, 1024, &ns);
        assert_eq!(one, Shares::assign(Split::CURRENT, 1000, 1024, &ns));
        assert_ne!(one, Shares::assign(Split::CURRENT, 5000, 1024, &ns));
    }

    /// The figures docs/members.md gives: addresses moved when a member joins or leaves,
    /// rendezvous blocks against contiguous slices, over a 1,024-address range.
    #[test]
    fn a_join_or_leave_moves_few_addresses_where_contiguous_slices_move_most() {
        let len = 1024;
        let mut report = Vec::new();
        for n in [2usize, 3, 5, 9] {
            let before: Vec<String> = (1..=n).map(|k| format!("conductor-{k}")).collect();
            let mut after = before.clone();
            // A joining name that sorts first: the contiguous split's worst case.
            after.insert(0, "conductor-0".to_string());
            let ideal = len / (n as u32 + 1);
            let (b, a) = (
                Shares::assign(Split::CURRENT, 7, len, &before),
                Shares::assign(Split::CURRENT, 7, len, &after),
            );
            let join = moved(&b, &before, &a, &after);
            let leave = moved(&a, &after, &b, &before);
            let (cb, ca) = (
                Shares::assign(Split::Contiguous, 7, len, &before),
                Shares::assign(Split::Contiguous, 7, len, &after),
            );
            let contiguous = moved(&cb, &before, &ca, &after);
            report.push(format!(
                "{n}→{}: blocks move {join} on join, {leave} on leave (ideal {ideal}); contiguous {contiguous}",
                n + 1
            ));
            // Within 5/4 of the unavoidable share, and below the contiguous split.
            assert!(
                4 * join <= 5 * ideal && 4 * leave <= 5 * ideal,
                "{report:?}"
            );
            assert!(join < contiguous, "{report:?}");
        }
        eprintln!("{}", report.join("\n"));
    }

    #[test]
    fn a_single_instance_owns_everything() {
        let s = Shares::assign(Split::CURRENT, 0, 100, &[]);
        assert_eq!(s.runs_of(0), vec![0..100]);
        assert_eq!(s.owner_of(99), Some(0));
        assert_eq!(s.owner_of(100), None);
        let one = Shares::assign(Split::CURRENT, 0, 100, &names(&["a"]));
        assert_eq!(one.count_of(0), 100);
    }

    #[test]
    fn contiguous_is_the_old_split() {
        let s = Shares::assign(Split::Contiguous, 0, 100, &names(&["a", "b", "c"]));
        assert_eq!(s.runs_of(0), vec![0..33]);
        assert_eq!(s.runs_of(1), vec![33..66]);
        assert_eq!(s.runs_of(2), vec![66..100]);
    }

    #[test]
    fn the_split_is_recorded_by_name_and_absent_means_contiguous() {
        assert_eq!(
            serde_json::to_string(&Split::BlocksV1).unwrap(),
            "\"blocks-v1\""
        );
        assert_eq!(Split::default(), Split::Contiguous);
    }
}
