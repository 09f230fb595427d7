//! Exponential backoff, the one schedule behind every retry: the participant's reconnects,
//! the MCP server's restarts and the supervision of a space's processes.

use std::time::Duration;

/// `base`, doubled per attempt, capped at `max` (never below `base`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub base: Duration,
    /// The largest delay.
    pub max: Duration,
}

impl Backoff {
    /// `base` doubled per attempt up to `max`.
    pub const fn new(base: Duration, max: Duration) -> Self {
        Backoff { base, max }
    }

    /// The delay before retry `n`, counted from 0: `base * 2^n`, at most `max`.
    pub fn delay(&self, n: u32) -> Duration {
        let cap = self.max.max(self.base);
        let factor = 1u32.checked_shl(n).unwrap_or(u32::MAX);
        self.base.checked_mul(factor).unwrap_or(cap).min(cap)
    }

    /// [`Backoff::delay`] plus up to `jitter` (a fraction, clamped to 0..=1) of it, drawn by
    /// `below` (a uniform draw from `0..bound`, from the caller's seeded generator).
    pub fn delay_with_jitter(
        &self,
        n: u32,
        jitter: f64,
        below: impl FnOnce(u64) -> u64,
    ) -> Duration {
        let d = self.delay(n);
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let span = (ms as f64 * jitter.clamp(0.0, 1.0)) as u64;
        let extra = if span > 0 { below(span + 1) } else { 0 };
        d + Duration::from_millis(extra)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_then_caps_without_overflow() {
        let b = Backoff::new(Duration::from_millis(500), Duration::from_secs(3));
        let ms: Vec<_> = (0..6).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(ms, vec![500, 1000, 2000, 3000, 3000, 3000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(3));
        // A cap below the base never shortens the first delay.
        let odd = Backoff::new(Duration::from_secs(2), Duration::from_secs(1));
        assert_eq!(odd.delay(0), Duration::from_secs(2));
        assert_eq!(odd.delay(9), Duration::from_secs(2));
    }

    #[test]
    fn jitter_adds_at_most_its_fraction() {
        let b = Backoff::new(Duration::from_millis(1000), Duration::from_secs(30));
        let most = b.delay_with_jitter(1, 0.5, |bound| bound - 1);
        assert_eq!(most, Duration::from_millis(3000));
        let none = b.delay_with_jitter(1, 0.0, |_| panic!("no draw without jitter"));
        assert_eq!(none, Duration::from_millis(2000));
    }
}
