//! Process exit codes of the `mew` program, shared so scripts can rely on them.

/// Everything went fine (including a graceful shutdown on a signal).
pub const OK: i32 = 0;
/// A failure at run time (I/O error while serving, lost connection...).
pub const RUNTIME: i32 = 1;
/// Bad command line or invalid configuration.
pub const USAGE: i32 = 2;
/// The address to listen on is taken.
pub const ADDR_IN_USE: i32 = 3;
/// A file named on the command line or in the configuration could not be read.
pub const UNREADABLE: i32 = 4;
/// The gateway could not be reached or refused the client.
pub const CONNECT: i32 = 5;
