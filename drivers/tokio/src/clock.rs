//! The wall clock and entropy the core is handed (it reads neither itself).

pub use mew_driver_common::clock::{now, os_seed, until};

use mew_core::Time;

/// The tokio instant at which the core's `at` falls due.
pub fn instant_for(at: Time) -> tokio::time::Instant {
    tokio::time::Instant::now() + until(at)
}
