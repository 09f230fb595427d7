//! Per-participant rate limits: a token bucket of envelopes and one of bytes, refilled with
//! time. An envelope beyond either is refused with `rate_limited` (and counted, not logged
//! one by one, by the audit trail) before it is parsed.

use crate::Time;

/// `gateway.rate_limit` of `space.yaml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Envelopes per second, sustained.
    pub per_second: u64,
    /// Envelopes at once after a quiet period.
    pub burst: u64,
    /// Bytes per second, sustained.
    pub bytes_per_second: u64,
    /// Bytes at once after a quiet period.
    pub burst_bytes: u64,
}

impl Default for RateLimit {
    /// Far above what a person or an agent sends; a flood is cut to this.
    fn default() -> Self {
        RateLimit {
            per_second: 1000,
            burst: 2000,
            bytes_per_second: 8 * 1024 * 1024,
            burst_bytes: 16 * 1024 * 1024,
        }
    }
}

/// One participant's buckets.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Bucket {
    envelopes: f64,
    bytes: f64,
    /// Last refill; `None` before the first envelope (the buckets start full).
    at: Option<Time>,
}

impl Bucket {
    /// Takes one envelope of `len` bytes; false when either bucket is short.
    pub(super) fn take(&mut self, now: Time, len: usize, r: &RateLimit) -> bool {
        let (burst, burst_bytes) = (r.burst as f64, r.burst_bytes as f64);
        match self.at {
            None => {
                self.envelopes = burst;
                self.bytes = burst_bytes;
            }
            Some(t) => {
                let dt = now.saturating_since(t).as_secs_f64();
                self.envelopes = (self.envelopes + dt * r.per_second as f64).min(burst);
                self.bytes = (self.bytes + dt * r.bytes_per_second as f64).min(burst_bytes);
            }
        }
        self.at = Some(now);
        let len = len as f64;
        if self.envelopes < 1.0 || self.bytes < len {
            return false;
        }
        self.envelopes -= 1.0;
        self.bytes -= len;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bursts_then_the_sustained_rate() {
        let r = RateLimit {
            per_second: 10,
            burst: 5,
            bytes_per_second: 1000,
            burst_bytes: 1000,
        };
        let mut b = Bucket::default();
        let t0 = Time::from_unix_millis(1_000);
        let taken = (0..20).filter(|_| b.take(t0, 10, &r)).count();
        assert_eq!(taken, 5, "the burst");
        assert!(!b.take(t0 + Duration::from_millis(50), 10, &r));
        assert!(
            b.take(t0 + Duration::from_millis(100), 10, &r),
            "one per 100 ms"
        );
        // Bytes bound too: a large envelope waits for the byte bucket.
        let mut b = Bucket::default();
        assert!(b.take(t0, 900, &r));
        assert!(!b.take(t0, 200, &r));
        assert!(b.take(t0 + Duration::from_millis(100), 200, &r));
    }
}
