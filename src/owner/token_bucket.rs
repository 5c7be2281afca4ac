//! A token bucket: at most `rate` events a second on average, `burst` at once. Pure:
//! the caller passes `now`.

use std::time::{Duration, Instant};

/// The bucket.
#[derive(Debug)]
pub struct TokenBucket {
    rate: u32,
    burst: u32,
    /// Tokens at `at`, in millionths (integer arithmetic: no drift over a long run).
    micro: u64,
    at: Option<Instant>,
}

const MICRO: u64 = 1_000_000;

impl TokenBucket {
    /// A full bucket refilled at `rate` tokens a second, holding at most `burst`
    /// (at least 1).
    pub fn new(rate: u32, burst: u32) -> Self {
        let burst = burst.max(1);
        Self {
            rate,
            burst,
            micro: u64::from(burst) * MICRO,
            at: None,
        }
    }

    /// Takes a token at `now`, if there is one.
    pub fn take(&mut self, now: Instant) -> bool {
        let elapsed = self
            .at
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        // Time only moves forward here: an earlier `now` (callers on other threads)
        // refills nothing and does not move the mark back.
        if self.at.is_none_or(|at| now > at) {
            self.at = Some(now);
        }
        let refill = u64::try_from(elapsed.as_micros())
            .unwrap_or(u64::MAX)
            .saturating_mul(u64::from(self.rate));
        self.micro = self
            .micro
            .saturating_add(refill)
            .min(u64::from(self.burst) * MICRO);
        if self.micro >= MICRO {
            self.micro -= MICRO;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10, 5);
        assert_eq!((0..20).filter(|_| b.take(t0)).count(), 5, "the burst");
        // 10 a second: one token every 100 ms.
        assert!(!b.take(t0 + Duration::from_millis(50)));
        assert!(b.take(t0 + Duration::from_millis(100)));
        assert!(!b.take(t0 + Duration::from_millis(100)));
        // Over 10 s of constant demand, about 100 tokens, never more.
        let granted = (1..=10_000u64)
            .filter(|ms| b.take(t0 + Duration::from_millis(100 + ms)))
            .count();
        assert!((99..=101).contains(&granted), "{granted}");
        // A long pause refills no more than the burst.
        let later = t0 + Duration::from_secs(3600);
        assert_eq!((0..20).filter(|_| b.take(later)).count(), 5);
        // A time from before the last one refills nothing.
        assert!(!b.take(t0));
    }

    #[test]
    fn rate_zero_gives_the_burst_once() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(0, 1);
        assert!(b.take(t0));
        assert!(!b.take(t0 + Duration::from_secs(86_400)));
    }
}
