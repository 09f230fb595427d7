//! A single-node gateway whose space survives a crash: the node is a one-node cluster whose
//! log is a local file. Every input becomes a [`Record`] appended to `.mew/state/log` and
//! applied at once, through the same [`Node`] and [`Replica`] a cluster member uses; the
//! replica's snapshot goes to `.mew/state/snapshot` every [`SNAPSHOT_EVERY`] entries (and at
//! once after an invitation, so its token's entropy leaves the log), and a new, empty log
//! replaces the one it holds. Starting restores the snapshot and applies the log after it:
//! the same path as a cluster member joining (`Replica::open`, then `Node::handle_entry`).
//!
//! Crash consistency: each pass of the core task writes its entries to the file before any
//! of its outputs (acknowledgements included) leave, so a killed process loses nothing it
//! acknowledged. Flushing to the disk is done by a thread of its own while the core goes
//! on. [`Fsync`] decides what a power loss may take: with `always`, a pass that changes the
//! space (anything but chats, stream data, pongs, beats and ticks) and every output after it wait
//! for the flush that covers it, and chats are flushed within [`MESSAGE_FLUSH`]; with
//! `every_ms`, the file is flushed at most that often. A torn last entry is cut with a
//! warning; a file of another format version is an error.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use mew_core::Time;
use mew_core::cluster::journal::{self, FormatError};
use mew_core::cluster::{Encoder, Node, NodeOptions, NodeOutput, Record, Replica};
use mew_core::gateway::{AuditFile, Fsync, Gateway, SnapshotError, SpaceConfig};
use serde_json::json;

use crate::Response;
use crate::clock::{self, Sleep};
use crate::conn::{ConnReply, CoreInput, HttpReply, SocketLink};
use crate::host::{Flow, GatewayHost, INPUT_BATCH, Input, Reply};
use crate::node_inputs::{NodeInputs, Unhandled};
use crate::server::CoreTask;

/// The node id a single node writes into its records.
pub const LOCAL_NODE: &str = "local";
/// Entries between two snapshots.
/// (A restart replays at most this many, about half a second's work; a snapshot of a space
/// with a long history takes a few milliseconds of the core's time to write.)
pub const SNAPSHOT_EVERY: u64 = 100_000;
/// Bytes of log after which a snapshot is taken before the cadence's next.
pub const LOG_MAX_BYTES: u64 = 64 << 20;
/// Zeroed bytes the log is extended by ahead of its entries: a flush of blocks the file
/// already has writes them, while a flush that grows the file also waits for the file
/// system's journal (on ext4 under load, about 0.1 ms against several ms). The flushing
/// thread writes them, topping them up when half are used.
pub const LOG_AHEAD: u64 = 2 << 20;
/// With `fsync: always`, how long written entries that no output waits for (chats) may
/// stay unflushed: what a power loss may take of them. Changes of the space are flushed
/// before anything after them leaves.
pub const MESSAGE_FLUSH: Duration = Duration::from_millis(10);

const LOG: &str = "log";
/// A new log being created to replace the log after a snapshot (renamed into place).
const LOG_NEXT: &str = "log.next";
/// Zeros the flushing thread writes ahead at a time.
const ZERO_CHUNK: u64 = 256 << 10;
const SNAPSHOT: &str = "snapshot";
/// Where the state of an earlier `space.yaml` is moved (beside `state/`).
const SET_ASIDE: &str = "state.previous";

/// Why a space's state could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The folder or a file in it cannot be read or written.
    #[error("cannot use the space's state in {path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A state file of another format.
    #[error("{path}: {source}; run `mew space reset` to start the space afresh")]
    Format {
        /// Which file.
        path: PathBuf,
        /// Why.
        source: FormatError,
    },
    /// The snapshot does not fit this space.
    #[error(
        "{path}: {source} (was space.yaml changed? restore it, or run `mew space reset` to start afresh)"
    )]
    Snapshot {
        /// Which file.
        path: PathBuf,
        /// Why.
        source: SnapshotError,
    },
    /// The log does not follow its snapshot.
    #[error("{path}: {0}; run `mew space reset` to start afresh", path = .1.display())]
    Broken(String, PathBuf),
}

/// What was restored when the space started (for logs and `GET /health`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// The state folder.
    pub dir: PathBuf,
    /// The entry the snapshot ended at (`None`: there was none).
    pub snapshot_entry: Option<u64>,
    /// Entries of the log applied after the snapshot.
    pub replayed: u64,
    /// Bytes cut from the log's torn tail, and why they were unreadable.
    pub cut: Option<(u64, String)>,
    /// Members of the space after the restore (configured, invited, anonymous).
    pub members: usize,
    /// Runtime grants held.
    pub grants: usize,
    /// Envelopes in the polling history.
    pub history: usize,
    /// Where the state saved under an earlier `space.yaml` was moved (it could not be read
    /// under the current one).
    pub set_aside: Option<PathBuf>,
}

impl RestoreReport {
    /// Whether any state was found.
    pub fn restored(&self) -> bool {
        self.snapshot_entry.is_some() || self.replayed > 0
    }

    /// The report as JSON (the `restored` field of `GET /health`).
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "dir": self.dir.display().to_string(),
            "snapshot_entry": self.snapshot_entry,
            "entries_replayed": self.replayed,
            "bytes_cut": self.cut.as_ref().map(|c| c.0),
            "members": self.members,
            "grants": self.grants,
            "history": self.history,
            "set_aside": self.set_aside.as_ref().map(|p| p.display().to_string()),
        })
    }
}

/// The open state files of one space.
pub struct StateDir {
    dir: PathBuf,
    log: File,
    log_bytes: u64,
    /// The log file's length: its entries, then zeros allocated ahead ([`LOG_AHEAD`]).
    allocated: u64,
    /// Entries encoded and not yet written.
    pending: Vec<u8>,
    /// Encodes them (keeping the head frames share).
    encoder: Encoder,
    fsync: Fsync,
    /// Written but not flushed to the disk since then.
    unsynced: bool,
    last_sync: std::time::Instant,
    /// Bytes written to the log since the files were opened, across snapshots: the mark a
    /// flush reports covering.
    written: u64,
    syncer: Option<Syncer>,
}

/// The thread that flushes the log to the disk while the core goes on (see
/// [`StateDir::start_syncer`]).
struct Syncer {
    shared: std::sync::Arc<SyncShared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct SyncShared {
    state: std::sync::Mutex<SyncState>,
    /// Wakes the thread.
    wake: std::sync::Condvar,
    /// Wakes a core waiting for zeros in progress ([`SyncState::zeroing`]).
    zeroed: std::sync::Condvar,
}

impl SyncShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, SyncState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Default)]
struct SyncState {
    /// Bytes written ([`StateDir::written`]).
    written: u64,
    /// A mark that outputs wait for: flushed at once, not at the period's end.
    urgent: u64,
    /// The thread waits for bytes to flush (a write must wake it).
    idle: bool,
    stop: bool,
    /// The current log file's length as far as zeros were written ahead (offset in it).
    allocated: u64,
    /// Where the core's entries end, its write in progress included: zeros go after it.
    data_end: u64,
    /// Zeros are being written from this offset on (the core's write must not reach it).
    zeroing: Option<u64>,
    /// Less than half of [`LOG_AHEAD`] is left: the thread tops the zeros up.
    zeros_wanted: bool,
    /// Writing zeros failed (a full disk): the log grows by its entries alone.
    zeros_failed: bool,
    /// A snapshot replaced the log by a new file (new, old, their folder): the thread
    /// flushes the folder (the new name) before any flush it reports covers the new file,
    /// flushes and extends the new one from then on, and closes the old one (the core's
    /// handle of it included), whose blocks are freed then, on the thread rather than in
    /// the core.
    switch: Option<(File, File, File)>,
    /// The thread has not flushed a new log's folder yet (see [`StateDir::sync`]).
    folder_pending: bool,
    /// The thread stopped (asked to, or the disk refused a flush).
    gone: bool,
}

/// What the flushing thread reports: every byte up to this mark is on the disk.
pub type Synced = io::Result<u64>;

/// A space restored from its state folder, ready to serve.
pub struct Restored {
    /// The files.
    pub state: StateDir,
    /// The node, its replica caught up.
    pub node: Node,
    /// The space's core.
    pub gateway: Gateway,
    /// What was found.
    pub report: RestoreReport,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Opens (creating it if needed) the state folder `dir` and restores the space from it.
pub fn open(dir: &Path, config: SpaceConfig, fsync: Fsync) -> Result<Restored, StateError> {
    match open_once(dir, config.clone(), fsync) {
        Err(StateError::Snapshot {
            source: SnapshotError::OtherConfig,
            ..
        }) => {
            // space.yaml was edited while the gateway was down: the snapshot's members and
            // grants are laid out for the old file and cannot be read under the new one.
            // Starting is worth more than the run-time state, which is kept aside (not
            // deleted) for whoever wants to go back to the old file.
            let aside = dir.with_file_name(SET_ASIDE);
            if aside.exists() {
                fs::remove_dir_all(&aside).map_err(io_err(&aside))?;
            }
            fs::rename(dir, &aside).map_err(io_err(dir))?;
            tracing::warn!(
                "space.yaml changed since the space's state was saved: that state was moved to {} and the space starts afresh",
                aside.display()
            );
            let mut restored = open_once(dir, config, fsync)?;
            restored.report.set_aside = Some(aside);
            Ok(restored)
        }
        other => other,
    }
}

fn open_once(dir: &Path, config: SpaceConfig, fsync: Fsync) -> Result<Restored, StateError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(io_err(dir))?;
    let snap_path = dir.join(SNAPSHOT);
    let snapshot = match fs::read(&snap_path) {
        Ok(b) => Some(journal::decode_snapshot(&Bytes::from(b)).map_err(|source| {
            StateError::Format {
                path: snap_path.clone(),
                source,
            }
        })?),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(&snap_path)(e)),
    };
    let (replica, mut gateway) =
        Replica::open(LOCAL_NODE, config, snapshot.as_ref().map(|(_, s)| &s[..])).map_err(
            |source| StateError::Snapshot {
                path: snap_path.clone(),
                source,
            },
        )?;
    let log_path = dir.join(LOG);
    // A log being created when the process stopped (the snapshot before it holds
    // everything): never renamed into place, never read.
    let _ = fs::remove_file(dir.join(LOG_NEXT));
    let mut log = open_rw(&log_path, false).map_err(io_err(&log_path))?;
    let mut bytes = Vec::new();
    log.read_to_end(&mut bytes).map_err(io_err(&log_path))?;
    let bytes = Bytes::from(bytes);
    let scan = journal::scan_log(&bytes).map_err(|source| StateError::Format {
        path: log_path.clone(),
        source,
    })?;
    let mut report = RestoreReport {
        dir: dir.to_owned(),
        snapshot_entry: snapshot.as_ref().map(|(a, _)| *a),
        ..RestoreReport::default()
    };
    if let Some(why) = &scan.torn {
        let cut = bytes.len() - scan.good_len;
        tracing::warn!(
            file = %log_path.display(), bytes = cut,
            "the state log ends in a torn or damaged entry ({why}); cutting it"
        );
        report.cut = Some((cut as u64, why.clone()));
    }
    let mut good_len = scan.good_len as u64;
    if good_len == 0 {
        log.set_len(0).map_err(io_err(&log_path))?;
        log.seek(SeekFrom::Start(0)).map_err(io_err(&log_path))?;
        log.write_all(journal::LOG_HEADER)
            .map_err(io_err(&log_path))?;
        good_len = journal::LOG_HEADER.len() as u64;
    } else if scan.torn.is_some() {
        log.set_len(good_len).map_err(io_err(&log_path))?;
    }
    // Whatever follows the entries is zeros allocated ahead (a torn tail was cut).
    let allocated = log.metadata().map_err(io_err(&log_path))?.len();
    log.sync_all().map_err(io_err(&log_path))?;
    log.seek(SeekFrom::Start(good_len))
        .map_err(io_err(&log_path))?;
    let mut options = NodeOptions::new(LOCAL_NODE);
    // One node beats for nobody; its log's time moves with its own entries.
    options.heartbeat = Duration::from_secs(3600);
    options.snapshot_every = SNAPSHOT_EVERY;
    options.snapshot_at_rest = true;
    let mut node = Node::new(options, replica, 0, crate::secret::EntropyPool::source());
    for (seq, rec) in scan.entries {
        if seq <= node.applied() {
            continue;
        }
        node.handle_entry(&mut gateway, seq, rec);
        report.replayed += 1;
        // What the entries did was carried out in the earlier life.
        while let Some(o) = node.poll_output() {
            if let NodeOutput::Broken(why) = o {
                return Err(StateError::Broken(why, log_path));
            }
        }
        discard_outputs(&mut gateway);
    }
    let h = gateway.health();
    report.members = gateway.participants().len();
    report.grants = gateway.grant_count();
    report.history = h.history_len;
    Ok(Restored {
        state: StateDir {
            dir: dir.to_owned(),
            log,
            log_bytes: good_len,
            allocated,
            pending: Vec::new(),
            encoder: Encoder::new(),
            fsync,
            unsynced: false,
            last_sync: std::time::Instant::now(),
            written: 0,
            syncer: None,
        },
        node,
        gateway,
        report,
    })
}

/// Opens a state file for reading and writing, created `0600` if missing (emptied with
/// `truncate`).
fn open_rw(path: &Path, truncate: bool) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(truncate);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    opts.open(path)
}

fn discard_outputs(g: &mut Gateway) {
    while g.poll_output().is_some() {}
    for f in AuditFile::ALL {
        while g.take_audit(f, Vec::new).is_some() {}
    }
}

impl StateDir {
    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Queues entry `seq` for the next [`StateDir::commit`].
    pub fn append(&mut self, seq: u64, record: &[u8]) {
        journal::push_framed(&mut self.pending, seq, record);
    }

    /// Queues entry `seq`, encoded in place, for the next write.
    pub fn append_record(&mut self, seq: u64, record: &Record) {
        let encoder = &mut self.encoder;
        journal::push_with(&mut self.pending, seq, |out| {
            encoder.encode_into(record, out)
        });
    }

    /// Whether entries wait to be written.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Bytes written to the log since the files were opened (see [`Synced`]).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The flush policy.
    pub fn fsync(&self) -> Fsync {
        self.fsync
    }

    /// Writes what was appended, in one `write`, without flushing it: a process killed
    /// after this loses none of it (the kernel has it).
    pub fn write(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let end = self.log_bytes + self.pending.len() as u64;
        match &self.syncer {
            // The flushing thread writes the zeros ahead (see `sync_loop`): the core's
            // write only copies its entries. The thread writes zeros past `data_end` only,
            // so a write reaching zeros in progress waits for them (the thread fell half
            // of LOG_AHEAD behind: rare).
            Some(s) => {
                let mut st = s.shared.lock();
                while st.zeroing.is_some_and(|from| end > from) {
                    st = s.shared.zeroed.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                st.data_end = end;
            }
            None => {
                if end > self.allocated {
                    self.allocate(end + LOG_AHEAD)?;
                }
            }
        }
        self.log.write_all(&self.pending)?;
        self.log_bytes = end;
        self.written += self.pending.len() as u64;
        self.pending.clear();
        self.unsynced = true;
        if let Some(s) = &self.syncer {
            let mut st = s.shared.lock();
            st.written = self.written;
            let low = !st.zeros_failed && st.allocated < end + LOG_AHEAD / 2;
            let wake = st.idle || (low && !st.zeros_wanted);
            st.zeros_wanted |= low;
            if wake {
                s.shared.wake.notify_one();
            }
        }
        Ok(())
    }

    /// Extends the log with zeros up to `to` bytes (written, not a sparse hole: the blocks
    /// must exist for later flushes to skip the file system's journal). The next flush
    /// carries the new length to the disk.
    fn allocate(&mut self, to: u64) -> io::Result<()> {
        write_zeros(&self.log, self.allocated.max(self.log_bytes), to)?;
        self.allocated = to;
        Ok(())
    }

    /// Outputs wait for the flush of the log up to `mark`: the flushing thread does it at
    /// once rather than at its period's end.
    pub fn want_flush(&self, mark: u64) {
        if let Some(s) = &self.syncer {
            let mut st = s.shared.lock();
            if st.urgent < mark {
                st.urgent = mark;
                s.shared.wake.notify_one();
            }
        }
    }

    /// Starts flushing the log on a thread of its own: with `fsync: always`, at once when
    /// outputs wait for it ([`StateDir::want_flush`]) and else at most every
    /// [`MESSAGE_FLUSH`]; with `{every_ms: N}`, at most every N ms. Each flush is reported
    /// on the channel returned with the mark it covers (`Err`, then nothing more, when the
    /// disk refused it). Flushes group what was written while the previous one ran, so the
    /// core writes pass N+1 while pass N is flushed. The thread also writes the zeros the
    /// log is extended by ([`LOG_AHEAD`]) and closes the log a snapshot replaced, so that
    /// the core's time goes to its entries alone.
    pub fn start_syncer(&mut self) -> io::Result<async_channel::Receiver<Synced>> {
        let file = self.log.try_clone()?;
        let shared = std::sync::Arc::new(SyncShared {
            state: std::sync::Mutex::new(SyncState {
                written: self.written,
                allocated: self.allocated,
                data_end: self.log_bytes,
                zeros_wanted: self.allocated < self.log_bytes + LOG_AHEAD / 2,
                ..SyncState::default()
            }),
            wake: std::sync::Condvar::new(),
            zeroed: std::sync::Condvar::new(),
        });
        let (tx, rx) = async_channel::unbounded();
        let every = match self.fsync {
            Fsync::Always => MESSAGE_FLUSH,
            Fsync::EveryMs(ms) => Duration::from_millis(ms),
        };
        let from = self.written;
        let thread = std::thread::Builder::new()
            .name("mew-state-sync".into())
            .spawn({
                let shared = shared.clone();
                move || {
                    sync_loop(file, every, &shared, from, &tx);
                    shared.lock().gone = true;
                    shared.zeroed.notify_all();
                }
            })?;
        self.syncer = Some(Syncer {
            shared,
            thread: Some(thread),
        });
        Ok(rx)
    }

    /// Writes what was appended, and flushes it to the disk as the policy says. Outputs of
    /// the entries may leave once this returns.
    pub fn commit(&mut self) -> io::Result<()> {
        self.write()?;
        match self.fsync {
            Fsync::Always => self.sync(),
            Fsync::EveryMs(ms) => {
                if self.last_sync.elapsed() >= Duration::from_millis(ms) {
                    self.sync()
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Flushes written entries to the disk.
    pub fn sync(&mut self) -> io::Result<()> {
        if let Some(s) = &self.syncer {
            // After a snapshot the thread flushes the new log's name: entries flushed here
            // are kept only once it did.
            let mut st = s.shared.lock();
            while st.folder_pending && !st.gone {
                st = s.shared.zeroed.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.folder_pending {
                return Err(io::Error::other("the state folder could not be flushed"));
            }
        }
        if self.unsynced {
            self.log.sync_data()?;
            self.unsynced = false;
        }
        self.last_sync = std::time::Instant::now();
        Ok(())
    }

    /// Whether the log has grown past [`LOG_MAX_BYTES`].
    pub fn log_large(&self) -> bool {
        self.log_bytes > LOG_MAX_BYTES
    }

    /// Stores a snapshot ending at entry `applied` (written whole, flushed, renamed into
    /// place), then puts a new, empty log in the place of the one whose entries it holds.
    pub fn write_snapshot(&mut self, applied: u64, snapshot: &[u8]) -> io::Result<()> {
        // Not flushed: the snapshot holds these entries once it is in place, and until
        // then the entries acknowledged before it were flushed already.
        self.write()?;
        let tmp = self.dir.join("snapshot.tmp");
        {
            let mut o = OpenOptions::new();
            o.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
            let mut f = o.open(&tmp)?;
            f.write_all(&journal::encode_snapshot(applied, snapshot))?;
            f.sync_all()?;
        }
        fs::rename(&tmp, self.dir.join(SNAPSHOT))?;
        File::open(&self.dir)?.sync_all()?;
        // The log's entries are all in the snapshot now: a new, empty log replaces it. A
        // crash before the rename leaves the old log, whose entries the snapshot holds
        // (passed over); after it, the new one. (Emptying the old file in place would free
        // its blocks here, tens of milliseconds for a large log while the space waits;
        // the flushing thread closes it instead.)
        let fresh = self.dir.join(LOG_NEXT);
        let mut new = open_rw(&fresh, true)?;
        new.write_all(journal::LOG_HEADER)?;
        let for_syncer = match &self.syncer {
            Some(_) => Some(new.try_clone()?),
            None => None,
        };
        let folder = File::open(&self.dir)?;
        fs::rename(&fresh, self.dir.join(LOG))?;
        // From here on the old file is unlinked: entries go to the new one whatever
        // happens next.
        let old = std::mem::replace(&mut self.log, new);
        let header = journal::LOG_HEADER.len() as u64;
        self.log_bytes = header;
        self.allocated = header;
        self.unsynced = true;
        if let (Some(s), Some(new)) = (&self.syncer, for_syncer) {
            let mut st = s.shared.lock();
            while st.zeroing.is_some() {
                st = s.shared.zeroed.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.switch = Some((new, old, folder));
            st.folder_pending = true;
            st.allocated = header;
            st.data_end = header;
            st.zeros_wanted = true;
            st.zeros_failed = false;
            s.shared.wake.notify_one();
        } else {
            // The new name must be on the disk before entries flushed into the file count
            // as kept (with a flushing thread, it flushes the folder first).
            folder.sync_all()?;
        }
        Ok(())
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The flushing thread: flushes the bytes written since its last flush once outputs wait
/// for them or the period since that flush passed, reports each flush; in between, keeps
/// [`LOG_AHEAD`] of zeros written past the core's entries (in [`ZERO_CHUNK`]s, so that a
/// flush outputs wait for is never behind more than one), and takes over the log file a
/// snapshot replaced.
fn sync_loop(
    mut file: File,
    every: Duration,
    shared: &SyncShared,
    mut synced: u64,
    tx: &async_channel::Sender<Synced>,
) {
    let mut last = std::time::Instant::now();
    let mut st = shared.lock();
    loop {
        if let Some((new, old_core, folder)) = st.switch.take() {
            drop(st);
            // Entries in the new file are kept only once its name is.
            if let Err(e) = folder.sync_all() {
                let _ = tx.try_send(Err(e));
                return;
            }
            let old = std::mem::replace(&mut file, new);
            // The last handles of an unlinked file: closing them frees its blocks.
            drop(old);
            drop(old_core);
            st = shared.lock();
            st.folder_pending = false;
            shared.zeroed.notify_all();
            continue;
        }
        let unflushed = st.written != synced;
        if unflushed && (st.stop || st.urgent > synced || last.elapsed() >= every) {
            let target = st.written;
            drop(st);
            if let Err(e) = file.sync_data() {
                let _ = tx.try_send(Err(e));
                return;
            }
            last = std::time::Instant::now();
            synced = target;
            let _ = tx.try_send(Ok(target));
            st = shared.lock();
            continue;
        }
        if st.stop {
            return;
        }
        if st.zeros_wanted && !st.zeros_failed {
            let from = st.allocated.max(st.data_end);
            let to = (from + ZERO_CHUNK).min(st.data_end + LOG_AHEAD);
            if from >= to {
                st.zeros_wanted = false;
                continue;
            }
            st.zeroing = Some(from);
            drop(st);
            let done = write_zeros(&file, from, to);
            st = shared.lock();
            st.zeroing = None;
            match done {
                Ok(()) => st.allocated = to,
                Err(e) => {
                    // Entries still go in, growing the file; flushes take longer.
                    tracing::warn!("extending the space's state log failed: {e}");
                    st.zeros_failed = true;
                }
            }
            shared.zeroed.notify_all();
            continue;
        }
        if unflushed {
            let left = every.saturating_sub(last.elapsed());
            st = shared
                .wake
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        } else {
            st.idle = true;
            st = shared.wake.wait(st).unwrap_or_else(|e| e.into_inner());
            st.idle = false;
        }
    }
}

/// Writes zeros to `file` from offset `from` up to `to` (written, not a sparse hole: the
/// blocks must exist for later flushes to skip the file system's journal), leaving its
/// position where it was.
fn write_zeros(file: &File, from: u64, to: u64) -> io::Result<()> {
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZEROS.len() as u64) as usize;
        #[cfg(unix)]
        std::os::unix::fs::FileExt::write_all_at(file, &ZEROS[..n], at)?;
        // Elsewhere the zeros are left out (a positioned write there moves the file's
        // position, which the core's writes use): the log grows by its entries.
        #[cfg(not(unix))]
        let _ = (file, &ZEROS);
        at += n as u64;
    }
    Ok(())
}

/// Removes a space's state folder (for `mew space reset`); whether there was one.
pub fn reset(dir: &Path) -> io::Result<bool> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// The task that serves a restored space (for
/// [`crate::server::GatewayServer::serve_with`]) on runtime `S`.
pub fn core_task<S: Sleep + Send>(restored: Restored) -> CoreTask {
    Box::new(move |host, rx| Box::pin(run::<S>(restored, host, rx)))
}

struct Running {
    state: StateDir,
    node: Node,
    inputs: NodeInputs,
    /// What the pass in progress will carry out once its entries are kept.
    pass: Vec<Held>,
    /// Earlier passes' outputs waiting for the flush that covers them, with its mark
    /// ([`StateDir::written`]), in order.
    held: std::collections::VecDeque<(u64, Held)>,
    /// Every byte of the log up to this mark is on the disk.
    durable: u64,
    /// The pass in progress holds a record that changes the space (not only a message):
    /// with `fsync: always` its outputs wait for the flush.
    pass_changes: bool,
    broken: bool,
    stopping: bool,
}

/// Something a pass of the core carries out once its entries are kept.
enum Held {
    Conn(ConnReply, mew_core::gateway::ConnId),
    Http(HttpReply, Response),
    /// The core's outputs, taken with [`GatewayHost::hold`].
    Outputs(Vec<mew_core::gateway::Output>),
    /// A frame of the node's own and/or a close; `true`: the space has let it go.
    Direct(
        mew_core::gateway::ConnId,
        Option<Bytes>,
        Option<(u16, String)>,
        bool,
    ),
}

impl Running {
    /// A durable node over `state`, nothing held yet; with `hold_reads`, answers to reads
    /// wait for the flush like everything else (see [`NodeInputs::reads`]).
    fn new(state: StateDir, node: Node, hold_reads: bool) -> Running {
        Running {
            durable: state.written(),
            state,
            node,
            inputs: NodeInputs {
                reads: hold_reads.then(Vec::new),
                ..NodeInputs::default()
            },
            pass: Vec::new(),
            held: std::collections::VecDeque::new(),
            pass_changes: false,
            broken: false,
            stopping: false,
        }
    }

    fn input(&mut self, host: &mut GatewayHost<SocketLink>, now: Time, input: CoreInput) {
        if self.stopping {
            // Shutting down: connections end outside the log (the next start's `NodeUp`
            // ends them in the state too).
            host.apply(now, input);
            return;
        }
        match self.inputs.feed(&mut self.node, host, now, input) {
            None => {}
            Some(Unhandled::Reconfigure(config)) => {
                // Applied outside the log, so a snapshot follows at once: the state on disk
                // is then the one under the new file, which the next start reads.
                host.reconfigure(now, *config);
                self.node.request_snapshot();
            }
            Some(Unhandled::Shutdown) => {
                // What was held leaves first, flushed: the shutdown's closes follow it.
                self.settle(host, now);
                if let Err(e) = self.state.commit().and_then(|()| self.state.sync()) {
                    self.fail(&e);
                    return;
                }
                self.durable = self.state.written();
                self.release(host, now);
                self.stopping = true;
                host.apply::<ConnReply, HttpReply>(now, Input::Shutdown);
            }
        }
        if let Some(reads) = &mut self.inputs.reads {
            self.pass
                .extend(reads.drain(..).map(|(reply, resp)| Held::Http(reply, resp)));
        }
    }

    /// Carries out the node's outputs: each record is applied at once and queued for the
    /// file; what answers or sends waits for the pass's end ([`Running::settle`]).
    fn pump(&mut self, host: &mut GatewayHost<SocketLink>) {
        while let Some(o) = self.node.poll_output() {
            match o {
                NodeOutput::Publish { record, .. } => self.publish(host, record),
                NodeOutput::Connected { local, conn } => {
                    if let Some((link, reply)) = self.inputs.conns.remove(&local) {
                        host.register(conn, link);
                        self.pass.push(Held::Conn(reply, conn));
                    }
                }
                NodeOutput::Abandon { local } => {
                    self.inputs.conns.remove(&local);
                }
                NodeOutput::Posted { local, result } => {
                    if let Some(reply) = self.inputs.posts.remove(&local) {
                        self.pass.push(Held::Http(reply, Response::posted(result)));
                    }
                }
                NodeOutput::PostRefused { local, message } => {
                    if let Some(reply) = self.inputs.posts.remove(&local) {
                        let resp = Response::error(503, "state_unavailable", &message);
                        self.pass.push(Held::Http(reply, resp));
                    }
                }
                NodeOutput::Direct { conn, frame } => {
                    self.pass.push(Held::Direct(conn, Some(frame), None, false));
                }
                NodeOutput::Close {
                    conn,
                    code,
                    reason,
                    forget,
                } => self
                    .pass
                    .push(Held::Direct(conn, None, Some((code, reason)), forget)),
                NodeOutput::Snapshot { applied, bytes } => {
                    let t = std::time::Instant::now();
                    match self.state.write_snapshot(applied, &bytes) {
                        Ok(()) => {
                            tracing::debug!(
                                entry = applied,
                                bytes = bytes.len(),
                                ms = t.elapsed().as_secs_f64() * 1e3,
                                "state snapshot written"
                            );
                            // The snapshot and the emptied log are flushed.
                            self.durable = self.state.written();
                        }
                        Err(e) => tracing::warn!(
                            "writing the space's snapshot in {} failed: {e}",
                            self.state.dir().display()
                        ),
                    }
                }
                NodeOutput::NodeGone { .. } => {}
                NodeOutput::Warning(w) => tracing::warn!("{w}"),
                NodeOutput::Broken(why) => {
                    tracing::error!("{why}");
                    self.broken = true;
                }
            }
        }
    }

    fn publish(&mut self, host: &mut GatewayHost<SocketLink>, record: Record) {
        let seq = self.node.applied() + 1;
        // Encoded once, into the pass's write; applied as it is, not read back.
        self.state.append_record(seq, &record);
        if !self.node.handle_own_record(host.gateway_mut(), seq, record) {
            self.pass_changes = true;
        }
        if self.node.replica().used_entropy() || self.state.log_large() {
            // The entropy is an invitation's token: the snapshot right after this pass
            // keeps only its digest, and the log holding it is cut.
            self.node.request_snapshot();
        }
    }

    fn fail(&mut self, e: &io::Error) {
        // Nothing of this pass may be acknowledged as kept: stop serving.
        tracing::error!(
            "cannot write the space's state in {}: {e}; the gateway stops",
            self.state.dir().display()
        );
        self.broken = true;
    }

    /// Ends a pass: its entries are written (one `write`), then what it produced is
    /// carried out at once when nothing needs flushing first, else held for the flush that
    /// covers them (`fsync: always`), which the syncing thread does while the core goes on
    /// with the next pass. A snapshot follows when one is due.
    fn settle(&mut self, host: &mut GatewayHost<SocketLink>, now: Time) {
        loop {
            self.pump(host);
            if let Err(e) = self.state.write() {
                self.fail(&e);
                return;
            }
            // A killed process loses nothing written. What a power loss may take: with
            // `always`, messages (chats) of the flush in progress, never a change of the
            // space acknowledged (nor anything after one, which leaves behind it); with
            // `every_ms`, up to N ms of anything.
            let changes = std::mem::take(&mut self.pass_changes);
            let need = match self.state.fsync() {
                Fsync::Always if changes => self.state.written(),
                _ => 0,
            };
            if need <= self.durable && self.held.is_empty() {
                let pass = std::mem::take(&mut self.pass);
                self.carry_out(host, now, pass);
                host.drain();
            } else {
                let mut outputs = Vec::new();
                host.hold(&mut outputs);
                if need > self.durable {
                    self.state.want_flush(need);
                }
                for h in self.pass.drain(..) {
                    self.held.push_back((need, h));
                }
                if !outputs.is_empty() {
                    self.held.push_back((need, Held::Outputs(outputs)));
                }
            }
            for conn in host.take_slow() {
                self.node.handle_slow(now, conn);
            }
            self.node.handle_drained(host.gateway());
            self.node.handle_timeout(now, host.gateway());
            self.pump(host);
            if self.broken || (!self.state.has_pending() && self.pass.is_empty()) {
                return;
            }
        }
    }

    /// A flush covers the log up to `mark`: what waited for it is carried out.
    fn synced(&mut self, host: &mut GatewayHost<SocketLink>, now: Time, mark: u64) {
        self.durable = self.durable.max(mark);
        self.release(host, now);
        self.settle(host, now);
    }

    fn release(&mut self, host: &mut GatewayHost<SocketLink>, now: Time) {
        let mut ready = Vec::new();
        while let Some((need, _)) = self.held.front()
            && *need <= self.durable
        {
            if let Some((_, h)) = self.held.pop_front() {
                ready.push(h);
            }
        }
        if !ready.is_empty() {
            self.carry_out(host, now, ready);
            for conn in host.take_slow() {
                self.node.handle_slow(now, conn);
            }
        }
    }

    fn carry_out(&mut self, host: &mut GatewayHost<SocketLink>, now: Time, items: Vec<Held>) {
        for h in items {
            match h {
                Held::Conn(reply, conn) => {
                    if reply.reply(conn).is_err() {
                        // Gone while waiting: its close goes into the log.
                        host.unregister(conn);
                        self.node.handle_disconnected(now, conn);
                    }
                }
                Held::Http(reply, resp) => {
                    let _ = reply.reply(resp);
                }
                Held::Outputs(outputs) => host.release(outputs),
                Held::Direct(conn, frame, close, forget) => {
                    host.send_direct(conn, frame, close);
                    if forget {
                        host.unregister(conn);
                    }
                }
            }
        }
    }
}

async fn run<S: Sleep + Send>(
    restored: Restored,
    mut host: GatewayHost<SocketLink>,
    rx: async_channel::Receiver<CoreInput>,
) {
    use futures_util::future::{Either, select};
    let Restored {
        mut state,
        node,
        gateway,
        report,
    } = restored;
    let synced = match state.start_syncer() {
        Ok(rx) => rx,
        Err(e) => {
            tracing::error!("cannot start flushing the space's state: {e}; the gateway stops");
            host.cut_all();
            return;
        }
    };
    let built = host.replace_gateway(gateway);
    host.gateway_mut().adopt_host_settings(&built);
    // One node is the only writer of the held participants' logs: a start, restored or not,
    // welcomes them as the plain server does.
    host.gateway_mut().welcome_held(clock::now());
    host.track_backlogs();
    host.set_restored(report.to_json());
    let hold_reads = state.fsync() == Fsync::Always;
    let mut run = Running::new(state, node, hold_reads);
    run.node.start(clock::now());
    run.settle(&mut host, clock::now());
    while !run.broken {
        // Flushes done meanwhile first: inputs never starve what waits for them.
        while let Ok(r) = synced.try_recv() {
            match r {
                Ok(mark) => run.synced(&mut host, clock::now(), mark),
                Err(e) => run.fail(&e),
            }
        }
        if run.broken {
            break;
        }
        let wake = if run.stopping {
            host.next_wake().map(clock::until)
        } else {
            run.node.poll_timeout(host.gateway()).map(clock::until)
        };
        let timer = async {
            match wake {
                Some(d) => S::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let flushed = async {
            match synced.recv().await {
                Ok(r) => r,
                // The thread is gone only once the state is dropped.
                Err(_) => std::future::pending().await,
            }
        };
        let woke = match select(
            std::pin::pin!(rx.recv()),
            select(std::pin::pin!(flushed), std::pin::pin!(timer)),
        )
        .await
        {
            Either::Left((input, _)) => Ok(input),
            Either::Right((Either::Left((flush, _)), _)) => Err(Some(flush)),
            Either::Right((Either::Right(_), _)) => Err(None),
        };
        let input = match woke {
            Ok(input) => input,
            Err(Some(flush)) => {
                match flush {
                    Ok(mark) => run.synced(&mut host, clock::now(), mark),
                    Err(e) => run.fail(&e),
                }
                continue;
            }
            Err(None) => {
                let now = clock::now();
                if run.stopping {
                    if host.handle_wake(now) == Flow::Stop {
                        break;
                    }
                } else {
                    run.node.handle_timeout(now, host.gateway());
                    run.settle(&mut host, now);
                }
                continue;
            }
        };
        let Ok(input) = input else { break };
        let now = clock::now();
        run.input(&mut host, now, input);
        let mut n = 1;
        while n < INPUT_BATCH {
            match rx.try_recv() {
                Ok(input) => run.input(&mut host, now, input),
                Err(_) => break,
            }
            n += 1;
        }
        if run.stopping {
            host.drain();
            if host.finished() {
                break;
            }
        } else {
            run.settle(&mut host, now);
        }
        if n > 1 {
            // Busy: let readers queue more before the next pass, as the plain gateway's
            // core does, so that a pass (its write, the writers it wakes) carries more
            // entries.
            crate::conn::yield_now().await;
        }
    }
    if let Err(e) = run.state.commit().and_then(|()| run.state.sync()) {
        tracing::warn!("flushing the space's state: {e}");
    }
    host.cut_all();
}

#[cfg(test)]
mod tests {
    //! A simulation of crashes: 200 seeded runs of grants, revocations, invitations and
    //! chats through the node and its files, each killed at a random point (before a pass
    //! is written, halfway through writing it, after it, halfway through a snapshot). The
    //! space always starts again, every acknowledged change is there, and the state is
    //! exactly that after the last acknowledged change or after the one that was in
    //! flight: never half of one.

    use super::*;
    use mew_core::gateway::ConnId;
    use mew_core::secret::TokenHash;

    const SPACE: &str = r#"
space: {id: durable-sim}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  agent: {tokens: [agent-token], capabilities: [{kind: chat}]}
"#;

    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// The replicated state, as a snapshot at rest would keep it.
    fn state(r: &Restored) -> serde_json::Value {
        let mut v: serde_json::Value =
            serde_json::from_slice(&r.node.replica().snapshot_at_rest(&r.gateway).unwrap())
                .unwrap();
        // The log's clock and node bookkeeping move with entries that change nothing.
        v["now"] = serde_json::Value::Null;
        v["nodes"] = serde_json::Value::Null;
        v["applied"] = serde_json::Value::Null;
        v
    }

    /// One pass as the core task makes it; `Err` when the run is killed in it.
    fn pass(r: &mut Restored, kill: Option<u8>, rng: &mut Rng) -> Result<(), ()> {
        while let Some(o) = r.node.poll_output() {
            if let NodeOutput::Publish { record, .. } = o {
                let seq = r.node.applied() + 1;
                let bytes = Bytes::from(record.encode());
                r.state.append(seq, &bytes);
                r.node.handle_entry(&mut r.gateway, seq, bytes);
                if r.node.replica().used_entropy() {
                    r.node.request_snapshot();
                }
            }
        }
        match kill {
            Some(0) => return Err(()),
            Some(1) => {
                // Part of the pass reached the file.
                let n = rng.below(r.state.pending.len() as u64 + 1) as usize;
                r.state.log.write_all(&r.state.pending[..n]).unwrap();
                return Err(());
            }
            _ => {}
        }
        r.state.commit().unwrap();
        discard_outputs(&mut r.gateway);
        r.node.handle_drained(&r.gateway);
        while let Some(o) = r.node.poll_output() {
            if let NodeOutput::Snapshot { applied, bytes } = o {
                if kill == Some(2) {
                    // Killed while writing the snapshot: a partial temporary file.
                    let enc = journal::encode_snapshot(applied, &bytes);
                    let n = rng.below(enc.len() as u64) as usize;
                    fs::write(r.state.dir.join("snapshot.tmp"), &enc[..n]).unwrap();
                    return Err(());
                }
                r.state.write_snapshot(applied, &bytes).unwrap();
            }
        }
        Ok(())
    }

    #[test]
    fn two_hundred_crashes_lose_nothing_acknowledged_and_apply_nothing_by_half() {
        let config = SpaceConfig::from_yaml(SPACE).unwrap();
        // In memory where there is such a folder: the runs test the logic, not the disk.
        let shm = Path::new("/dev/shm");
        let tmp = if shm.is_dir() {
            shm.to_owned()
        } else {
            std::env::temp_dir()
        };
        let base = tmp.join(format!("mew-durable-sim-{}", std::process::id()));
        for seed in 0..200u64 {
            let dir = base.join(seed.to_string());
            let _ = fs::remove_dir_all(&dir);
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            // Some runs restart more than once before the kill, so that they start from a
            // snapshot and a log.
            let ops = 5 + rng.below(40);
            let kill_at = rng.below(ops);
            let kill_how = rng.below(4) as u8;
            // A killed process loses what was not written, never what was: flushing to the
            // disk (a power loss's concern) is left out to keep 200 runs quick.
            let mut r = open(&dir, config.clone(), Fsync::EveryMs(3_600_000)).unwrap();
            // Few entries between snapshots, so that runs cross several.
            r.node = {
                let mut o = r.node.options().clone();
                o.snapshot_every = 4 + rng.below(30);
                let (replica, g) = Replica::open(LOCAL_NODE, config.clone(), None).unwrap();
                r.gateway = g;
                Node::new(o, replica, 0, Box::new(|| [7; 16]))
            };
            let mut now = Time::from_unix_millis(1_000_000);
            r.node.start(now);
            r.node
                .handle_connected(now, Some(TokenHash::of("human-token")));
            pass(&mut r, None, &mut rng).unwrap();
            // The human's connection is the replica's first.
            let conn = first_conn(&r);
            let mut acked = state(&r);
            let mut grants = Vec::new();
            for i in 0..ops {
                now = now + Duration::from_millis(1 + rng.below(500));
                let body = match rng.below(5) {
                    0 | 1 => {
                        grants.push(format!("g{i}"));
                        format!(
                            r#""kind":"capability/grant","to":["agent"],"payload":{{"recipient":"agent","capabilities":[{{"kind":"x-{i}"}}]}}"#
                        )
                    }
                    2 if !grants.is_empty() => {
                        let g = grants.remove(rng.below(grants.len() as u64) as usize);
                        format!(
                            r#""kind":"capability/revoke","to":["agent"],"payload":{{"recipient":"agent","grant_id":"{g}"}}"#
                        )
                    }
                    3 => format!(
                        r#""kind":"space/invite","payload":{{"participant_id":"guest-{i}","initial_capabilities":[{{"kind":"chat"}}]}}"#
                    ),
                    _ => format!(r#""kind":"chat","payload":{{"text":"chat {i}"}}"#),
                };
                let frame = format!(r#"{{"protocol":"mew/v0.4","id":"g{i}",{body}}}"#);
                r.node
                    .handle_frame(now, &mut r.gateway, conn, Bytes::from(frame));
                let kill = (i == kill_at).then_some(kill_how);
                let before = acked.clone();
                match pass(&mut r, kill, &mut rng) {
                    Ok(()) => acked = state(&r),
                    Err(()) => {
                        // The change in flight, applied whole.
                        discard_outputs(&mut r.gateway);
                        let in_flight = state(&r);
                        drop(r);
                        let restored = open(&dir, config.clone(), Fsync::EveryMs(3_600_000))
                            .unwrap_or_else(|e| panic!("seed {seed}: did not start: {e}"));
                        let got = state(&restored);
                        assert!(
                            got == before || got == in_flight,
                            "seed {seed} (kill {kill_how} at op {i}): the restored state is neither the acknowledged one nor the one in flight"
                        );
                        if kill_how >= 2 {
                            assert_eq!(got, in_flight, "seed {seed}: a written pass is kept");
                        }
                        break;
                    }
                }
            }
            let _ = fs::remove_dir_all(&dir);
        }
        let _ = fs::remove_dir_all(&base);
    }

    fn has(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    /// Frames queued for a connection's writer so far.
    fn frames(h: &crate::conn::Halves) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(cmd) = h.try_next() {
            if let crate::host::WriterCmd::Frames(f) = cmd {
                out.extend(
                    f.texts()
                        .iter()
                        .map(|t| String::from_utf8_lossy(t).into_owned()),
                );
            }
        }
        out
    }

    #[test]
    fn with_fsync_always_a_change_and_all_after_it_wait_for_its_flush_and_chats_do_not() {
        use futures_channel::oneshot;
        let config = SpaceConfig::from_yaml(SPACE).unwrap();
        let dir = std::env::temp_dir().join(format!("mew-durable-hold-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let Restored {
            state,
            node,
            gateway,
            ..
        } = open(&dir, config.clone(), Fsync::Always).unwrap();
        let mut host = GatewayHost::new(gateway, None, dir.clone(), Duration::from_secs(1));
        host.track_backlogs();
        // No flushing thread: the test flushes, and reports the flush, itself.
        let mut run = Running::new(state, node, true);
        let now = Time::from_unix_millis(1_000_000);
        let flush = |run: &mut Running, host: &mut GatewayHost<SocketLink>| {
            run.state.sync().unwrap();
            let mark = run.state.written();
            run.synced(host, now, mark);
        };
        run.node.start(now);
        run.settle(&mut host, now);
        flush(&mut run, &mut host);
        let join = |run: &mut Running, host: &mut GatewayHost<SocketLink>, token: &str| {
            let (link, halves) = crate::conn::link();
            let (tx, mut rx) = oneshot::channel();
            let input = Input::Connect {
                bearer: Some(token.into()),
                link,
                reply: tx,
            };
            run.input(host, now, input);
            run.settle(host, now);
            assert_eq!(rx.try_recv(), Ok(None), "the id waits for the flush");
            assert!(
                frames(&halves).is_empty(),
                "the welcome waits for the flush"
            );
            flush(run, host);
            let conn = rx.try_recv().unwrap().expect("answered once flushed");
            assert!(frames(&halves)[0].contains("system/welcome"));
            (conn, halves)
        };
        let (human, _human_rx) = join(&mut run, &mut host, "human-token");
        let (_, agent_rx) = join(&mut run, &mut host, "agent-token");
        frames(&agent_rx);
        let envelope = |id: &str, body: &str| {
            Bytes::from(format!(r#"{{"protocol":"mew/v0.4","id":"{id}",{body}}}"#))
        };
        let chat = r#""kind":"chat","payload":{"text":"hi"}"#;
        let grant = r#""kind":"capability/grant","to":["agent"],"payload":{"recipient":"agent","capabilities":[{"kind":"x-1"}]}"#;
        // A chat leaves once written: a killed process keeps it.
        run.input(
            &mut host,
            now,
            Input::Frame(human, envelope("first-chat", chat)),
        );
        run.settle(&mut host, now);
        assert!(has(&fs::read(dir.join(LOG)).unwrap(), b"first-chat"));
        assert!(frames(&agent_rx).iter().any(|f| f.contains("first-chat")));
        // A grant waits for the flush, and what follows it waits behind it: a chat, a read.
        run.input(
            &mut host,
            now,
            Input::Frame(human, envelope("held-grant", grant)),
        );
        run.settle(&mut host, now);
        run.input(
            &mut host,
            now,
            Input::Frame(human, envelope("after-grant", chat)),
        );
        run.settle(&mut host, now);
        let log = fs::read(dir.join(LOG)).unwrap();
        assert!(has(&log, b"held-grant") && has(&log, b"after-grant"));
        assert!(
            frames(&agent_rx).is_empty(),
            "nothing leaves before the flush"
        );
        let (tx, mut read) = oneshot::channel();
        let req = crate::host::HttpRequest {
            route: crate::route::Route::GetMessages {
                participant: "agent".into(),
                since: None,
            },
            bearer: Some("agent-token".into()),
            body: Bytes::new(),
        };
        run.input(&mut host, now, Input::Http(req, tx));
        run.settle(&mut host, now);
        assert_eq!(read.try_recv().map(|r| r.is_some()), Ok(false));
        flush(&mut run, &mut host);
        let got = frames(&agent_rx);
        let at = |id: &str| got.iter().position(|f| f.contains(id));
        assert!(at("held-grant").is_some(), "{got:?}");
        assert!(at("held-grant") < at("after-grant"), "in order: {got:?}");
        let resp = read
            .try_recv()
            .unwrap()
            .expect("the read is answered once flushed");
        assert!(has(&resp.body, b"held-grant"));
        // Killed after writing a pass and before its flush: the restart has the pass.
        run.input(
            &mut host,
            now,
            Input::Frame(human, envelope("unflushed-grant", grant)),
        );
        run.settle(&mut host, now);
        drop(run);
        let r = open(&dir, config, Fsync::Always).unwrap();
        let history = r
            .gateway
            .http_messages("agent", Some("agent-token"), None)
            .unwrap();
        assert!(history.iter().any(|b| has(b, b"unflushed-grant")));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    #[cfg(unix)]
    fn the_flushing_thread_keeps_zeros_ahead_and_a_snapshot_starts_a_new_log_file() {
        use std::os::unix::fs::MetadataExt;
        let config = SpaceConfig::from_yaml(SPACE).unwrap();
        let dir = std::env::temp_dir().join(format!("mew-durable-ahead-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut rng = Rng(7);
        let mut r = open(&dir, config.clone(), Fsync::Always).unwrap();
        let synced = r.state.start_syncer().unwrap();
        let now = Time::from_unix_millis(1_000_000);
        r.node.start(now);
        r.node
            .handle_connected(now, Some(TokenHash::of("human-token")));
        pass(&mut r, None, &mut rng).unwrap();
        let conn = first_conn(&r);
        let mut chat = |r: &mut Restored, id: &str| {
            let frame = format!(
                r#"{{"protocol":"mew/v0.4","id":"{id}","kind":"chat","payload":{{"text":"hi"}}}}"#
            );
            r.node
                .handle_frame(now, &mut r.gateway, conn, Bytes::from(frame));
            pass(r, None, &mut rng).unwrap();
        };
        for i in 0..20 {
            chat(&mut r, &format!("before-{i}"));
        }
        let path = dir.join(LOG);
        // The thread, not the core, extends the log with zeros past the entries.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while fs::metadata(&path).unwrap().len() < r.state.log_bytes + LOG_AHEAD / 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "no zeros written ahead"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let bytes = fs::read(&path).unwrap();
        let entries_end = r.state.log_bytes as usize;
        assert!(has(&bytes[..entries_end], b"before-19"));
        assert!(bytes[entries_end..].iter().all(|b| *b == 0));
        // A snapshot puts a new file in the old one's place, which holds only its header.
        let before = fs::metadata(&path).unwrap().ino();
        r.node.request_snapshot();
        chat(&mut r, "in-snapshot");
        assert_ne!(fs::metadata(&path).unwrap().ino(), before, "a new log file");
        assert!(!dir.join(LOG_NEXT).exists());
        assert_eq!(r.state.log_bytes, journal::LOG_HEADER.len() as u64);
        for i in 0..5 {
            chat(&mut r, &format!("after-{i}"));
        }
        let bytes = fs::read(&path).unwrap();
        assert!(bytes.starts_with(journal::LOG_HEADER));
        assert!(has(&bytes, b"after-4") && !has(&bytes, b"before-19"));
        // Flushes go to the new file and report its bytes.
        let want = r.state.written();
        r.state.want_flush(want);
        loop {
            let mark = synced.recv_blocking().unwrap().unwrap();
            if mark >= want {
                break;
            }
        }
        discard_outputs(&mut r.gateway);
        let kept = state(&r);
        drop(r);
        let restored = open(&dir, config, Fsync::Always).unwrap();
        assert_eq!(
            restored.report.cut, None,
            "zeros ahead are the log's clean end"
        );
        assert_eq!(
            restored.report.replayed, 5,
            "the entries after the snapshot"
        );
        assert_eq!(state(&restored), kept);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_an_input_that_may_mint_a_token_carries_entropy_in_the_log() {
        let config = SpaceConfig::from_yaml(SPACE).unwrap();
        let dir = std::env::temp_dir().join(format!("mew-durable-entropy-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut rng = Rng(3);
        let mut r = open(&dir, config.clone(), Fsync::EveryMs(3_600_000)).unwrap();
        let now = Time::from_unix_millis(1_000_000);
        r.node.start(now);
        r.node
            .handle_connected(now, Some(TokenHash::of("human-token")));
        pass(&mut r, None, &mut rng).unwrap();
        let conn = first_conn(&r);
        let frame =
            r#"{"protocol":"mew/v0.4","id":"plain-chat","kind":"chat","payload":{"text":"hi"}}"#;
        r.node
            .handle_frame(now, &mut r.gateway, conn, Bytes::from(frame));
        pass(&mut r, None, &mut rng).unwrap();
        let log = fs::read(dir.join(LOG)).unwrap();
        let at = log.windows(10).position(|w| w == b"plain-chat").unwrap();
        let head_start = log[..at].iter().rposition(|b| *b == b'{').unwrap();
        let line_start = log[..head_start].iter().rposition(|b| *b == b'\n').unwrap();
        assert!(
            !has(&log[line_start..at], b"\"e\":"),
            "a chat's record has no entropy"
        );
        // An invitation's does, and the token it minted holds after a restart from the
        // log alone (killed before the snapshot that follows an invitation).
        let invite = r#"{"protocol":"mew/v0.4","id":"inv","kind":"space/invite","payload":{"participant_id":"guest","initial_capabilities":[{"kind":"chat"}]}}"#;
        r.node
            .handle_frame(now, &mut r.gateway, conn, Bytes::from(invite));
        while let Some(o) = r.node.poll_output() {
            if let NodeOutput::Publish { record, .. } = o {
                assert!(record.entropy.is_some(), "an invitation carries entropy");
                let seq = r.node.applied() + 1;
                let bytes = Bytes::from(record.encode());
                r.state.append(seq, &bytes);
                r.node.handle_entry(&mut r.gateway, seq, bytes);
            }
        }
        r.state.write().unwrap();
        discard_outputs(&mut r.gateway);
        let before_kill = state(&r);
        drop(r);
        let restored = open(&dir, config, Fsync::EveryMs(3_600_000)).unwrap();
        assert_eq!(
            state(&restored),
            before_kill,
            "the same token digest after replay"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    fn first_conn(r: &Restored) -> ConnId {
        let v: serde_json::Value =
            serde_json::from_slice(&r.node.replica().snapshot(&r.gateway).unwrap()).unwrap();
        let c = &v["owners"][0][0];
        serde_json::from_value(c.clone()).unwrap()
    }
}
