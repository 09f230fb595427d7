//! The virtual clock: time moves only when the simulation says so.

use mew_core::Time;
use std::time::Duration;

/// A clock the simulation advances by hand.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    now: Time,
}

impl Clock {
    /// A clock reading `start`.
    pub fn new(start: Time) -> Clock {
        Clock { now: start }
    }

    /// The current reading.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Moves forward by `d`.
    pub fn advance(&mut self, d: Duration) {
        self.now = self.now + d;
    }

    /// Moves forward to `t` (never backwards).
    pub fn advance_to(&mut self, t: Time) {
        if t > self.now {
            self.now = t;
        }
    }
}
