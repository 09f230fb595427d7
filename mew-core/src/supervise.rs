//! Supervision of the processes a space starts: whether, and when, a process that exited is
//! started again. Sans-IO: the driver starts processes and reports their exits with the time;
//! this decides.
//!
//! A process is restarted by its [`RestartPolicy`], after a delay that doubles per restart
//! in a row ([`Backoff`]: 500 ms up to 30 s); after [`Supervision::MAX_IN_A_ROW`] restarts in
//! a row it is given up on. A process that ran for [`Supervision::STABLE_AFTER`] before
//! exiting starts a fresh run.

use std::time::Duration;

use crate::Time;
use crate::backoff::Backoff;
use crate::gateway::RestartPolicy;

/// What to do about a process that exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartVerdict {
    /// Start it again at `at`; this is restart `in_a_row` of a run.
    Restart {
        /// When to start it.
        at: Time,
        /// The delay until then.
        delay: Duration,
        /// Restarts in a row so far, this one included.
        in_a_row: u32,
    },
    /// Its policy does not restart it.
    Done,
    /// It exited [`Supervision::MAX_IN_A_ROW`] times in a row: not restarted again.
    GaveUp,
}

/// One supervised process. See the module documentation.
#[derive(Debug, Clone)]
pub struct Supervision {
    policy: RestartPolicy,
    backoff: Backoff,
    started_at: Option<Time>,
    in_a_row: u32,
    total: u32,
}

impl Supervision {
    /// Restarts in a row before a process is given up on.
    pub const MAX_IN_A_ROW: u32 = 5;
    /// A process that ran this long before exiting starts a fresh run of restarts.
    pub const STABLE_AFTER: Duration = Duration::from_secs(60);
    /// The restart delays.
    pub const BACKOFF: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

    /// A process supervised by `policy`, not started yet.
    pub fn new(policy: RestartPolicy) -> Self {
        Supervision {
            policy,
            backoff: Self::BACKOFF,
            started_at: None,
            in_a_row: 0,
            total: 0,
        }
    }

    /// The process was started at `now`.
    pub fn handle_started(&mut self, now: Time) {
        self.started_at = Some(now);
    }

    /// The process exited at `now` (`success`: exit code 0); what to do about it.
    pub fn handle_exited(&mut self, now: Time, success: bool) -> RestartVerdict {
        let ran = self.started_at.take().map(|t| now.saturating_since(t));
        let again = match self.policy {
            RestartPolicy::Never => false,
            RestartPolicy::OnFailure => !success,
            RestartPolicy::Always => true,
        };
        if !again {
            return RestartVerdict::Done;
        }
        if ran.is_some_and(|d| d >= Self::STABLE_AFTER) {
            self.in_a_row = 0;
        }
        if self.in_a_row >= Self::MAX_IN_A_ROW {
            return RestartVerdict::GaveUp;
        }
        let delay = self.backoff.delay(self.in_a_row);
        self.in_a_row += 1;
        self.total += 1;
        RestartVerdict::Restart {
            at: now + delay,
            delay,
            in_a_row: self.in_a_row,
        }
    }

    /// Restarts so far.
    pub fn restarts(&self) -> u32 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Time {
        Time::from_unix_millis(ms)
    }

    #[test]
    fn policies_decide_whether_to_restart() {
        let mut never = Supervision::new(RestartPolicy::Never);
        never.handle_started(t(0));
        assert_eq!(never.handle_exited(t(10), false), RestartVerdict::Done);
        let mut on_failure = Supervision::new(RestartPolicy::OnFailure);
        on_failure.handle_started(t(0));
        assert_eq!(on_failure.handle_exited(t(10), true), RestartVerdict::Done);
        on_failure.handle_started(t(20));
        assert!(matches!(
            on_failure.handle_exited(t(30), false),
            RestartVerdict::Restart { in_a_row: 1, .. }
        ));
    }

    #[test]
    fn crash_loops_back_off_then_give_up_and_stable_runs_start_afresh() {
        let mut s = Supervision::new(RestartPolicy::Always);
        let mut now = t(1_000);
        let mut delays = Vec::new();
        loop {
            s.handle_started(now);
            now = now + Duration::from_millis(100);
            match s.handle_exited(now, false) {
                RestartVerdict::Restart { at, delay, .. } => {
                    assert_eq!(at, now + delay);
                    delays.push(delay.as_millis());
                    now = at;
                }
                RestartVerdict::GaveUp => break,
                RestartVerdict::Done => panic!("always restarts"),
            }
        }
        assert_eq!(delays, vec![500, 1000, 2000, 4000, 8000]);
        assert_eq!(s.restarts(), 5);

        let mut s = Supervision::new(RestartPolicy::Always);
        for _ in 0..4 {
            s.handle_started(now);
            now = now + Duration::from_millis(100);
            assert!(matches!(
                s.handle_exited(now, false),
                RestartVerdict::Restart { .. }
            ));
        }
        // A minute of running: the next crash is the first of a new run.
        s.handle_started(now);
        now = now + Supervision::STABLE_AFTER;
        assert!(matches!(
            s.handle_exited(now, false),
            RestartVerdict::Restart { in_a_row: 1, delay, .. } if delay == Duration::from_millis(500)
        ));
    }
}
