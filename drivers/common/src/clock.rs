//! The wall clock and entropy the core is handed (it reads neither itself).

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

use mew_core::Time;

/// The current time as the core counts it.
pub fn now() -> Time {
    Time::from_system_time(SystemTime::now())
}

/// How long from now until the core's `at` falls due (zero when it already has).
pub fn until(at: Time) -> Duration {
    at.saturating_since(now())
}

/// An async runtime's timer.
pub trait Sleep: 'static {
    /// Resolves after `d`.
    fn sleep(d: Duration) -> impl Future<Output = ()> + Send;

    /// Gives the executor's other tasks a turn: the task runs again behind those already
    /// queued. The default wakes the task and returns pending once; a runtime whose
    /// scheduler runs a task that woke itself again at once (tokio's next-task slot) has
    /// its own.
    fn yield_now() -> impl Future<Output = ()> + Send {
        self_wake()
    }
}

/// Wakes the task and returns pending once: [`Sleep::yield_now`]'s default.
async fn self_wake() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

/// `fut`'s output, or `None` when `d` passed first.
pub async fn timeout<S: Sleep, F: Future>(d: Duration, fut: F) -> Option<F::Output> {
    use futures_util::future::{Either, select};
    match select(std::pin::pin!(fut), std::pin::pin!(S::sleep(d))).await {
        Either::Left((v, _)) => Some(v),
        Either::Right(_) => None,
    }
}

/// A seed from the OS (std's hash keys are drawn from OS randomness), mixed with the time
/// and process id so two processes started together differ.
pub fn os_seed() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(now().as_unix_millis());
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_deadlines_are_due_now_and_seeds_differ() {
        assert_eq!(until(Time::from_unix_millis(0)), Duration::ZERO);
        let later = until(now() + Duration::from_secs(60));
        assert!(later > Duration::from_secs(50), "{later:?}");
        assert_ne!(os_seed(), os_seed());
    }
}
