//! Pool fill over the last hour, for the board's picture: one sample a minute of this
//! member's DHCPv4 pools (addresses in use, addresses it can still hand out), the
//! newest [`SAMPLES`] kept in memory. Pure: the sampler (`run`) passes the time and
//! the pools in.
//!
//! In memory only: after a restart the picture starts again, which an operator reads
//! as the restart it was. Each member keeps its own; the merged board carries them all.

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Samples kept: an hour at one a minute.
pub const SAMPLES: usize = 60;
/// How often a sample is taken.
pub const EVERY: Duration = Duration::from_secs(60);

/// The pools at one time, summed over every subnet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Unix time, milliseconds.
    pub at_ms: u64,
    /// Addresses held by leases or offers.
    pub in_use: u64,
    /// Addresses this member can still hand out.
    pub free: u64,
}

impl Sample {
    /// `pools` (each subnet's in-use and free counts) summed, at `at_ms`.
    pub fn of(at_ms: u64, pools: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let (in_use, free) = pools.into_iter().fold((0u64, 0u64), |(u, f), (pu, pf)| {
            (u.saturating_add(pu), f.saturating_add(pf))
        });
        Self {
            at_ms,
            in_use,
            free,
        }
    }
}

/// The newest [`SAMPLES`] samples, oldest first.
#[derive(Debug, Default)]
pub struct Ring {
    samples: VecDeque<Sample>,
}

impl Ring {
    /// Adds `s`; the oldest goes once [`SAMPLES`] are kept.
    pub fn push(&mut self, s: Sample) {
        if self.samples.len() == SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hour_of_samples_is_kept_oldest_first() {
        let mut r = Ring::default();
        for minute in 0..(SAMPLES as u64 + 15) {
            r.push(Sample::of(minute * 60_000, [(minute, 100), (1, 0)]));
        }
        let s = r.samples();
        assert_eq!(s.len(), SAMPLES);
        assert_eq!(s[0].at_ms, 15 * 60_000, "the oldest went first");
        assert_eq!(s.last().map(|x| (x.in_use, x.free)), Some((75, 100)));
        assert!(s.windows(2).all(|w| w[0].at_ms < w[1].at_ms));
    }
}
