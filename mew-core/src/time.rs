//! Time as the core sees it: a millisecond count handed in by the caller.
//!
//! The core never reads a clock. Drivers pass the current [`Time`] into every call; the
//! simulation harness passes a virtual one. One type serves both timers and the RFC 3339
//! `ts` field, so a seeded simulation is reproducible to the byte.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (UTC).
#[derive(
    Copy,
    Clone,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct Time(u64);

impl Time {
    /// The epoch itself; handy as the start of a simulated clock.
    pub const ZERO: Time = Time(0);

    /// A time from milliseconds since the Unix epoch.
    pub const fn from_unix_millis(ms: u64) -> Self {
        Time(ms)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_unix_millis(self) -> u64 {
        self.0
    }

    /// Converts a wall-clock reading taken by a driver. Times before the epoch clamp to it.
    pub fn from_system_time(t: SystemTime) -> Self {
        let ms = t
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64)
            .unwrap_or(0);
        Time(ms)
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at the far future instead of overflowing.
    pub fn saturating_add(self, d: Duration) -> Time {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Time(self.0.saturating_add(ms))
    }

    /// RFC 3339 text in UTC with millisecond precision, e.g. `2025-01-09T10:00:00.000Z`.
    pub fn rfc3339(self) -> String {
        self.to_string()
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        self.saturating_add(d)
    }
}

impl Sub<Time> for Time {
    type Output = Duration;
    fn sub(self, earlier: Time) -> Duration {
        self.saturating_since(earlier)
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day); Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0 % 1000;
        let secs = self.0 / 1000;
        let days = (secs / 86_400) as i64;
        let rem = secs % 86_400;
        let (y, mo, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
            rem / 3600,
            (rem / 60) % 60,
            rem % 60
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(Time::ZERO.rfc3339(), "1970-01-01T00:00:00.000Z");
        // 2025-01-09T10:00:00Z, the welcome example's ts.
        assert_eq!(
            Time::from_unix_millis(1_736_416_800_123).rfc3339(),
            "2025-01-09T10:00:00.123Z"
        );
        // A leap day.
        assert_eq!(
            Time::from_unix_millis(951_782_400_000).rfc3339(),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn arithmetic_saturates() {
        let t = Time::from_unix_millis(5);
        assert_eq!(t + Duration::from_millis(7), Time::from_unix_millis(12));
        assert_eq!(t - Time::from_unix_millis(9), Duration::ZERO);
        assert_eq!(
            Time::from_unix_millis(u64::MAX) + Duration::from_secs(1),
            Time::from_unix_millis(u64::MAX)
        );
    }
}
