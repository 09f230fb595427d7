//! How a server process ended, as the driver observed it.

use std::fmt;

/// A child process's exit status, without tying the core to `std::process`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExitStatus {
    /// The exit code, when the process exited normally.
    pub code: Option<i32>,
    /// The signal that ended it, on Unix.
    pub signal: Option<i32>,
}

impl ExitStatus {
    /// A normal exit with `code`.
    pub const fn code(code: i32) -> Self {
        ExitStatus {
            code: Some(code),
            signal: None,
        }
    }

    /// Termination by `signal`.
    pub const fn signal(signal: i32) -> Self {
        ExitStatus {
            code: None,
            signal: Some(signal),
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exit code {c}"),
            (None, Some(s)) => write!(f, "killed by signal {s}"),
            (None, None) => f.write_str("unknown exit status"),
        }
    }
}
