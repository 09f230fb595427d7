//! A single-node gateway whose space survives a crash: the node is a one-node cluster whose
//! log is a local file. Every input becomes a [`Record`](mew_core::cluster::Record) appended to `.mew/state/log` and
//! applied at once, through the same [`Node`](mew_core::cluster::Node) and
//! [`Replica`](mew_core::cluster::Replica) a cluster member uses; the
//! replica's snapshot goes to `.mew/state/snapshot` every [`SNAPSHOT_EVERY`] entries (and at
//! once after an invitation, so its token's entropy leaves the log), and a new, empty log
//! replaces the one it holds. The core makes the snapshot; the log thread writes it in order
//! with the entries while the space goes on. Starting restores the snapshot and applies the
//! log after it: the same path as a cluster member joining (`Replica::open`, then
//! `NodeInput::Entry`).
//!
//! Crash consistency: the core task encodes each pass's entries and hands them to the log
//! thread ([`StateDir::start_syncer`]), which writes them in large requests around the page
//! cache (a fraction of the machine's time per byte of writing through the cache and
//! flushing that) and flushes them. A pass that changes the space (anything but chats,
//! stream data, pongs, beats and ticks: joins, grants, invitations, pauses...) holds its
//! outputs, acknowledgements included, and every output after it, until the thread
//! reports its entries written (`every_ms`) or flushed (`always`): a killed process never
//! loses an acknowledged change, nor anything before one. A pass of messages only lets its
//! outputs go at once; its entries are written within [`MESSAGE_WRITE`], and that is what
//! a `kill -9` may take (messages delivered in the last few milliseconds). [`Fsync`](mew_core::gateway::Fsync)
//! decides what a power loss may take: with `always`, messages of the last
//! [`MESSAGE_FLUSH`], never a change acknowledged; with `every_ms`, up to N ms of
//! anything. A torn last entry is cut with a warning; damage with whole entries after it,
//! a damaged snapshot or a file of another format version is an error (never cut: that
//! could drop an acknowledged revocation).
//!
//! In three parts: `recovery` opens the folder and restores the space, `log` holds the
//! open files and the thread that writes and flushes the log, `task` is the core task
//! that holds each pass's outputs until the thread reports its entries kept.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::time::Duration;

mod log;
mod recovery;
mod task;
#[cfg(test)]
mod tests;

pub use log::{LogEvent, StateDir};
pub use recovery::{RestoreReport, Restored, StateError, open, reset};
pub use task::core_task;

/// The node id a single node writes into its records.
pub const LOCAL_NODE: &str = "local";
/// Entries between two snapshots.
/// (A restart replays at most this many, about half a second's work; a snapshot of a space
/// with a long history takes a few milliseconds of the core's time to encode, and the log
/// thread's to write.)
pub const SNAPSHOT_EVERY: u64 = 100_000;
/// Bytes of log after which a snapshot is taken before the cadence's next.
pub const LOG_MAX_BYTES: u64 = 64 << 20;
/// How long entries of messages (chats, stream data) that no output waits for may stay
/// unwritten, handed to the log thread: what a `kill -9` may take of them (they may have
/// been delivered). The thread writes about this much at a time, in large requests.
pub const MESSAGE_WRITE: Duration = Duration::from_millis(10);
/// Bytes handed to the log thread and not yet taken by it after which the core waits for
/// it (a disk that stalls then slows the space rather than filling the memory).
pub const QUEUE_MAX: usize = 16 << 20;
/// With `fsync: always`, how long written entries that no output waits for (chats) may
/// stay unflushed: what a power loss may take of them. Changes of the space are flushed
/// before anything after them leaves.
pub const MESSAGE_FLUSH: Duration = Duration::from_millis(10);

const LOG: &str = "log";
/// A new log being created to replace the log after a snapshot (renamed into place).
const LOG_NEXT: &str = "log.next";
const SNAPSHOT: &str = "snapshot";
/// Where the state of an earlier `space.yaml` is moved (beside `state/`).
const SET_ASIDE: &str = "state.previous";

/// Opens a state file for reading and writing, created `0600` if missing (emptied with
/// `truncate`).
fn open_rw(path: &Path, truncate: bool) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(truncate);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    opts.open(path)
}
