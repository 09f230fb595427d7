//! When and how often a crashed or failed MCP server is started again.

use std::time::Duration;

use crate::backoff::Backoff;

/// Restart with exponential backoff: `initial_delay`, doubled per attempt, capped at
/// `max_delay`, at most `max_reconnects` times in a row. A server that reaches the ready state
/// earns a fresh budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartBackoff {
    /// Whether to restart at all (`bridge_config.reconnect`).
    pub enabled: bool,
    /// Restarts allowed after consecutive failures (`bridge_config.max_reconnects`).
    pub max_reconnects: u32,
    /// Delay before the first restart.
    pub initial_delay: Duration,
    /// Upper bound of the delay.
    pub max_delay: Duration,
}

impl Default for RestartBackoff {
    fn default() -> Self {
        RestartBackoff {
            enabled: true,
            max_reconnects: 3,
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RestartBackoff {
    /// No restarts: the first failure is final.
    pub fn never() -> Self {
        RestartBackoff {
            enabled: false,
            ..RestartBackoff::default()
        }
    }

    /// The delay before restart number `attempt` (1-based), or `None` when the budget is spent.
    pub fn delay(&self, attempt: u32) -> Option<Duration> {
        if !self.enabled || attempt == 0 || attempt > self.max_reconnects {
            return None;
        }
        Some(Backoff::new(self.initial_delay, self.max_delay).delay(attempt - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_caps_and_stops() {
        let p = RestartBackoff {
            max_reconnects: 6,
            max_delay: Duration::from_secs(10),
            ..RestartBackoff::default()
        };
        let delays: Vec<_> = (1..=7).map(|a| p.delay(a).map(|d| d.as_secs())).collect();
        assert_eq!(
            delays,
            vec![Some(1), Some(2), Some(4), Some(8), Some(10), Some(10), None]
        );
        assert_eq!(p.delay(0), None);
        assert_eq!(RestartBackoff::never().delay(1), None);
    }

    #[test]
    fn huge_attempt_counts_do_not_overflow() {
        let p = RestartBackoff {
            max_reconnects: u32::MAX,
            ..RestartBackoff::default()
        };
        assert_eq!(p.delay(40), Some(p.max_delay));
        assert_eq!(p.delay(u32::MAX), Some(p.max_delay));
    }
}
