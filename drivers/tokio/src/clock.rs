//! The wall clock and entropy the core is handed (it reads neither itself).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

use mew_core::Time;

/// The current time as the core counts it.
pub fn now() -> Time {
    Time::from_system_time(SystemTime::now())
}

/// The tokio instant at which the core's `at` falls due.
pub fn instant_for(at: Time) -> tokio::time::Instant {
    let wait: Duration = at.saturating_since(now());
    tokio::time::Instant::now() + wait
}

/// A seed from the OS (std's hash keys are drawn from OS randomness), mixed with the time
/// and process id so two processes started together differ.
pub fn os_seed() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(now().as_unix_millis());
    h.write_u32(std::process::id());
    h.finish()
}
