//! A single-node gateway whose space survives a crash: the node is a one-node cluster whose
//! log is a local file. Every input becomes a [`Record`] appended to `.mew/state/log` and
//! applied at once, through the same [`Node`] and [`Replica`] a cluster member uses; the
//! replica's snapshot goes to `.mew/state/snapshot` every [`SNAPSHOT_EVERY`] entries (and at
//! once after an invitation, so its token's entropy leaves the log), and a new, empty log
//! replaces the one it holds. Starting restores the snapshot and applies the log after it:
//! the same path as a cluster member joining (`Replica::open`, then `Node::handle_entry`).
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
//! a `kill -9` may take (messages delivered in the last few milliseconds). [`Fsync`]
//! decides what a power loss may take: with `always`, messages of the last
//! [`MESSAGE_FLUSH`], never a change acknowledged; with `every_ms`, up to N ms of
//! anything. A torn last entry is cut with a warning; damage with whole entries after it,
//! a damaged snapshot or a file of another format version is an error (never cut: that
//! could drop an acknowledged revocation).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use mew_core::Time;
use mew_core::cluster::journal::{self, FormatError};
use mew_core::cluster::{Encoder, Node, NodeOptions, NodeOutput, Record, Replica};
use mew_core::gateway::{
    Fsync, Gateway, IdentityVerifier, Input as GwInput, SnapshotError, SpaceConfig,
};
use serde_json::json;
use std::sync::Arc;

use crate::Response;
use crate::clock::{self, Sleep};
use crate::conn::{ConnReply, CoreInput, HttpReply, SocketLink};
use crate::direct::DirectAppend;
use crate::host::{Flow, GatewayHost, INPUT_BATCH, Input, Reply};
use crate::node_inputs::{NodeInputs, Unhandled};
use crate::server::CoreTask;

/// The host of a durable space: its node owns the space's gateway.
type Host = GatewayHost<SocketLink, Node>;

/// The node id a single node writes into its records.
pub const LOCAL_NODE: &str = "local";
/// Entries between two snapshots.
/// (A restart replays at most this many, about half a second's work; a snapshot of a space
/// with a long history takes a few milliseconds of the core's time to write.)
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
/// Emptied buffers kept for the core's next passes.
const SPARES: usize = 4;
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
    /// The log is damaged where whole entries follow: a crash never leaves that, and
    /// cutting the log there would drop changes that were acknowledged (a revocation).
    #[error(
        "{path}: damaged at byte {offset} ({why}) with whole entries after it (entry {seq} at byte {resumes}), which a crash never leaves; the space does not start. Copy {dir} aside if it is wanted, then `mew space reset` starts the space afresh (its runtime grants, invitations and history are lost)",
        path = path.display(), dir = path.parent().unwrap_or(path).display()
    )]
    Damaged {
        /// The log file.
        path: PathBuf,
        /// Where the damage starts (the end of the last whole entry before it).
        offset: u64,
        /// What is wrong there.
        why: String,
        /// Where the first whole entry after it starts.
        resumes: u64,
        /// That entry's sequence number.
        seq: u64,
    },
}

impl StateError {
    /// The state files are there but cannot be read as the space's state (damaged, of
    /// another format or for another `space.yaml`), as against a folder that cannot be
    /// used at all.
    pub fn unreadable(&self) -> bool {
        !matches!(self, StateError::Io { .. })
    }
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
    /// The log, for writes made here (without a log thread) and its flushes.
    log: File,
    /// Bytes in the current log file, its header included (handed to the thread too).
    log_bytes: u64,
    /// Entries encoded and not yet written (or handed to the thread).
    pending: Vec<u8>,
    /// Encodes them (keeping the head frames share).
    encoder: Encoder,
    fsync: Fsync,
    /// Written here but not flushed to the disk since then.
    unsynced: bool,
    last_sync: std::time::Instant,
    /// Bytes written to the log (or handed to its thread) since the files were opened,
    /// across snapshots: the marks of [`LogEvent`].
    written: u64,
    syncer: Option<Syncer>,
}

/// What the log thread reports to the core task.
#[derive(Debug)]
pub enum LogEvent {
    /// Every byte up to this mark ([`StateDir::written`]) is in the file: a killed
    /// process keeps it. Reported when asked for ([`StateDir::want_written`]).
    Written(u64),
    /// Every byte up to this mark is on the disk (flushed, or held by a snapshot in place).
    Synced(u64),
    /// Writing or flushing failed; nothing more follows.
    Failed(io::Error),
}

/// The thread that writes and flushes the log while the core goes on (see
/// [`StateDir::start_syncer`]).
struct Syncer {
    shared: std::sync::Arc<SyncShared>,
    thread: Option<std::thread::JoinHandle<io::Result<()>>>,
}

struct SyncShared {
    state: std::sync::Mutex<SyncState>,
    /// Wakes the thread.
    wake: std::sync::Condvar,
    /// Wakes a core waiting for room in the queue ([`QUEUE_MAX`]).
    done: std::sync::Condvar,
}

impl SyncShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, SyncState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Default)]
struct SyncState {
    /// Entries handed over, in order, not yet taken by the thread.
    queue: Vec<Vec<u8>>,
    /// Bytes in `queue`.
    queued: usize,
    /// Emptied buffers for the core's next passes.
    spares: Vec<Vec<u8>>,
    /// Bytes handed over ([`StateDir::written`]).
    handed: u64,
    /// A mark outputs wait for to be written: written at once, and reported.
    want_written: u64,
    /// A mark outputs wait for to be flushed: written and flushed at once.
    want_synced: u64,
    /// The thread sleeps until woken (handing over must wake it).
    idle: bool,
    stop: bool,
    /// A snapshot replaced the log by a new file (the core's handle of the old one, and
    /// their folder): the thread flushes the folder (the new name) before any flush it
    /// reports covers the new file, writes to the new one from then on, and closes the
    /// old one, whose blocks are freed then, on the thread rather than in the core.
    switch: Option<(File, File)>,
    /// Bytes up to this mark are in the snapshot that replaced the log: never written.
    dropped: u64,
    /// The thread stopped (asked to, or the disk refused a write or a flush).
    gone: bool,
}

/// A space restored from its state folder, ready to serve.
pub struct Restored {
    /// The files.
    pub state: StateDir,
    /// The node, its replica (and the space's gateway) caught up.
    pub node: Node,
    /// What was found.
    pub report: RestoreReport,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Opens (creating it if needed) the state folder `dir` and restores the space from it;
/// `verifier` judges the bearer tokens the configuration does not list (JWTs), if any.
pub fn open(
    dir: &Path,
    config: SpaceConfig,
    fsync: Fsync,
    verifier: Option<Arc<dyn IdentityVerifier>>,
) -> Result<Restored, StateError> {
    match open_once(dir, config.clone(), fsync, verifier.clone()) {
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
            let mut restored = open_once(dir, config, fsync, verifier)?;
            restored.report.set_aside = Some(aside);
            Ok(restored)
        }
        other => other,
    }
}

fn open_once(
    dir: &Path,
    config: SpaceConfig,
    fsync: Fsync,
    verifier: Option<Arc<dyn IdentityVerifier>>,
) -> Result<Restored, StateError> {
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
    let snap = snapshot.as_ref().map(|(_, s)| &s[..]);
    let replica = Replica::open(LOCAL_NODE, config, snap, verifier).map_err(|source| {
        StateError::Snapshot {
            path: snap_path.clone(),
            source,
        }
    })?;
    let log_path = dir.join(LOG);
    // A log being created when the process stopped (the snapshot before it holds
    // everything): never renamed into place, never read.
    let _ = fs::remove_file(dir.join(LOG_NEXT));
    let mut log = open_rw(&log_path, false).map_err(io_err(&log_path))?;
    let mut bytes = Vec::new();
    log.read_to_end(&mut bytes).map_err(io_err(&log_path))?;
    let bytes = Bytes::from(bytes);
    let after = snapshot.as_ref().map_or(0, |(a, _)| *a);
    let scan = journal::scan_log(&bytes, after).map_err(|source| StateError::Format {
        path: log_path.clone(),
        source,
    })?;
    if let Some(next) = scan.damaged {
        return Err(StateError::Damaged {
            path: log_path,
            offset: scan.good_len as u64,
            why: scan.torn.unwrap_or_default(),
            resumes: next.offset as u64,
            seq: next.seq,
        });
    }
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
    } else if log.metadata().map_err(io_err(&log_path))?.len() > good_len {
        // A torn tail, or zeros an earlier version wrote ahead: entries go after the
        // last whole one.
        log.set_len(good_len).map_err(io_err(&log_path))?;
    }
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
        // An entry that passes its checksum and cannot be read was written so by a
        // build that wrote something else: passing over it (as a cluster's replicas do,
        // all alike) could forget a change it made here.
        let rec = Record::decode(rec).map_err(|e| {
            StateError::Broken(
                format!("entry {seq} cannot be read ({e})"),
                log_path.clone(),
            )
        })?;
        node.handle_record(seq, rec);
        report.replayed += 1;
        // What the entries did was carried out in the earlier life.
        while let Some(o) = node.poll_output() {
            if let NodeOutput::Broken(why) = o {
                return Err(StateError::Broken(why, log_path));
            }
        }
        discard_outputs(node.gateway_mut());
    }
    let gateway = node.gateway();
    let h = gateway.health();
    report.members = gateway.participants().len();
    report.grants = gateway.grant_count();
    report.history = h.history_len;
    Ok(Restored {
        state: StateDir {
            dir: dir.to_owned(),
            log,
            log_bytes: good_len,
            pending: Vec::new(),
            encoder: Encoder::new(),
            fsync,
            unsynced: false,
            last_sync: std::time::Instant::now(),
            written: 0,
            syncer: None,
        },
        node,
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
    while g.poll_audit(Vec::new).is_some() {}
}

impl StateDir {
    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Queues entry `seq` for the next [`StateDir::write`].
    pub fn append(&mut self, seq: u64, record: &[u8]) {
        journal::push_framed(&mut self.pending, seq, record);
    }

    /// Queues entry `seq`, encoded in place, for the next write.
    pub fn append_record(&mut self, seq: u64, record: &Record) {
        let encoder = &mut self.encoder;
        let encode = |out: &mut Vec<u8>| encoder.encode_into(record, out);
        match self.syncer {
            // The log thread checksums the entries it writes: the core's time goes to
            // the space.
            Some(_) => journal::push_unsealed(&mut self.pending, seq, encode),
            None => journal::push_with(&mut self.pending, seq, encode),
        }
    }

    /// Whether entries wait to be written.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Bytes written to the log (or handed to its thread) since the files were opened:
    /// the marks of [`LogEvent`].
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The flush policy.
    pub fn fsync(&self) -> Fsync {
        self.fsync
    }

    /// Writes what was appended without flushing it, in one `write`: a process killed
    /// after this loses none of it. With a log thread ([`StateDir::start_syncer`]), hands
    /// it to the thread instead, which writes it within [`MESSAGE_WRITE`] (or at once when
    /// asked to); waits while the thread is [`QUEUE_MAX`] behind.
    pub fn write(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let len = self.pending.len() as u64;
        match &self.syncer {
            Some(s) => {
                let mut st = s.shared.lock();
                while st.queued >= QUEUE_MAX && !st.gone {
                    st = s.shared.done.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                if st.gone {
                    return Err(io::Error::other("the state log's writer stopped"));
                }
                let spare = st.spares.pop().unwrap_or_default();
                let bytes = std::mem::replace(&mut self.pending, spare);
                st.handed += len;
                st.queued += bytes.len();
                st.queue.push(bytes);
                if st.idle {
                    s.shared.wake.notify_one();
                }
            }
            None => {
                std::os::unix::fs::FileExt::write_all_at(&self.log, &self.pending, self.log_bytes)?;
                self.pending.clear();
                self.unsynced = true;
            }
        }
        self.log_bytes += len;
        self.written += len;
        Ok(())
    }

    /// Outputs wait for the log up to `mark` to be written: the log thread writes it at
    /// once and reports it ([`LogEvent::Written`]).
    pub fn want_written(&self, mark: u64) {
        if let Some(s) = &self.syncer {
            let mut st = s.shared.lock();
            if st.want_written < mark {
                st.want_written = mark;
                s.shared.wake.notify_one();
            }
        }
    }

    /// Outputs wait for the flush of the log up to `mark`: the log thread writes and
    /// flushes it at once rather than at its period's end ([`LogEvent::Synced`]).
    pub fn want_flush(&self, mark: u64) {
        if let Some(s) = &self.syncer {
            let mut st = s.shared.lock();
            if st.want_synced < mark {
                st.want_synced = mark;
                s.shared.wake.notify_one();
            }
        }
    }

    /// Starts the log thread: from now on [`StateDir::write`] hands entries to it, and it
    /// writes them every [`MESSAGE_WRITE`] (one request around the page cache where the
    /// file system allows it, the last block padded with zeros, which a reader takes for
    /// the log's end: a fraction of the CPU time per byte of writing through the cache
    /// and flushing that), at once when outputs wait for them
    /// ([`StateDir::want_written`], [`StateDir::want_flush`]). It flushes them with
    /// `fsync: always` at once when outputs wait and else within [`MESSAGE_FLUSH`], with
    /// `{every_ms: N}` at most every N ms. It reports on `tx` ([`LogEvent`]; after
    /// [`LogEvent::Failed`], nothing more), and closes the log a snapshot replaced, so
    /// that the core's time goes to its entries alone.
    pub fn start_syncer(&mut self, tx: async_channel::Sender<LogEvent>) -> io::Result<()> {
        self.write()?;
        let path = self.dir.join(LOG);
        let file = DirectAppend::open(&path)?;
        let shared = std::sync::Arc::new(SyncShared {
            state: std::sync::Mutex::new(SyncState {
                handed: self.written,
                dropped: self.written,
                ..SyncState::default()
            }),
            wake: std::sync::Condvar::new(),
            done: std::sync::Condvar::new(),
        });
        let every_sync = match self.fsync {
            Fsync::Always => MESSAGE_FLUSH,
            Fsync::EveryMs(ms) => Duration::from_millis(ms),
        };
        let from = self.written;
        // Flushed by this process before the thread starts (the files were opened).
        if self.unsynced {
            self.log.sync_data()?;
            self.unsynced = false;
        }
        let thread = std::thread::Builder::new()
            .name("mew-state-sync".into())
            .spawn({
                let shared = shared.clone();
                move || {
                    let done = sync_loop(file, &path, every_sync, &shared, from, &tx);
                    if let Err(e) = &done {
                        let copy = io::Error::new(e.kind(), e.to_string());
                        let _ = tx.try_send(LogEvent::Failed(copy));
                    }
                    shared.lock().gone = true;
                    shared.done.notify_all();
                    done
                }
            })?;
        self.syncer = Some(Syncer {
            shared,
            thread: Some(thread),
        });
        Ok(())
    }

    /// Writes what was appended, and flushes it to the disk as the policy says (without a
    /// log thread).
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

    /// Flushes written entries to the disk. With a log thread, stops it once it wrote and
    /// flushed everything handed to it (see [`StateDir::finish`]).
    pub fn sync(&mut self) -> io::Result<()> {
        if self.syncer.is_some() {
            return self.finish();
        }
        if self.unsynced {
            self.log.sync_data()?;
            self.unsynced = false;
        }
        self.last_sync = std::time::Instant::now();
        Ok(())
    }

    /// Writes and flushes everything appended; a log thread is stopped once it did (later
    /// writes are made here). `Err` when any of it could not be written or flushed.
    pub fn finish(&mut self) -> io::Result<()> {
        let handed = self.write();
        if let Some(mut s) = self.syncer.take() {
            let stopped = s.stop();
            handed?;
            return stopped;
        }
        handed?;
        self.sync()
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
        // the log thread closes it instead.)
        let fresh = self.dir.join(LOG_NEXT);
        let mut new = open_rw(&fresh, true)?;
        new.write_all(journal::LOG_HEADER)?;
        let folder = File::open(&self.dir)?;
        fs::rename(&fresh, self.dir.join(LOG))?;
        // From here on the old file is unlinked: entries go to the new one whatever
        // happens next.
        let old = std::mem::replace(&mut self.log, new);
        self.log_bytes = journal::LOG_HEADER.len() as u64;
        self.unsynced = true;
        match &self.syncer {
            Some(s) => {
                let mut st = s.shared.lock();
                // Entries handed over and not yet written are in the snapshot: they are
                // not written at all (an invitation's entropy among them).
                let dropped: Vec<Vec<u8>> = st.queue.drain(..).collect();
                for mut b in dropped {
                    if st.spares.len() < SPARES {
                        b.clear();
                        st.spares.push(b);
                    }
                }
                st.queued = 0;
                st.dropped = st.handed;
                st.switch = Some((old, folder));
                s.shared.wake.notify_one();
                s.shared.done.notify_all();
            }
            None => {
                // The new name must be on the disk before entries flushed into the file
                // count as kept.
                folder.sync_all()?;
                drop(old);
            }
        }
        Ok(())
    }
}

impl Syncer {
    /// Stops the thread once it wrote and flushed everything handed to it.
    fn stop(&mut self) -> io::Result<()> {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the state log's thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The log thread: writes what was handed over every [`MESSAGE_WRITE`], at once when
/// outputs wait for it or a [`crate::direct::CAPACITY`] of it is queued, and flushes
/// once outputs wait for a flush or the period since the last one passed; reports what
/// was asked for; takes over the log file a snapshot put in place.
fn sync_loop(
    mut file: DirectAppend,
    path: &Path,
    every_sync: Duration,
    shared: &SyncShared,
    from: u64,
    tx: &async_channel::Sender<LogEvent>,
) -> io::Result<()> {
    use std::time::Instant;
    let (mut written, mut synced) = (from, from);
    let (mut last_write, mut last_sync) = (Instant::now(), Instant::now());
    let mut batch: Vec<Vec<u8>> = Vec::new();
    let mut st = shared.lock();
    loop {
        for mut b in batch.drain(..) {
            if st.spares.len() < SPARES {
                b.clear();
                st.spares.push(b);
            }
        }
        if let Some((old_core, folder)) = st.switch.take() {
            drop(st);
            // Entries in the new file are kept only once its name is.
            folder.sync_all()?;
            // The old file's last handles: closing them frees its blocks.
            let old = std::mem::replace(&mut file, DirectAppend::open(path)?);
            drop(old);
            drop(old_core);
            st = shared.lock();
            written = written.max(st.dropped);
            synced = synced.max(st.dropped);
            // (The core counts those entries kept once the snapshot is in place: it
            // releases what waited for them itself.)
            continue;
        }
        let asked = st.want_written.max(st.want_synced);
        if st.queued > 0
            && (st.stop
                || asked > written
                || st.queued >= crate::direct::CAPACITY
                || last_write.elapsed() >= MESSAGE_WRITE)
        {
            std::mem::swap(&mut batch, &mut st.queue);
            st.queued = 0;
            let target = st.handed;
            let report = st.want_written > written;
            shared.done.notify_all();
            drop(st);
            for b in &mut batch {
                journal::seal(b);
                file.append(b)?;
            }
            // Zeros after the entries are the log's clean end.
            file.settle_padded()?;
            last_write = Instant::now();
            written = target;
            if report {
                let _ = tx.try_send(LogEvent::Written(written));
            }
            st = shared.lock();
            continue;
        }
        if written > synced
            && (st.stop || st.want_synced > synced || last_sync.elapsed() >= every_sync)
        {
            drop(st);
            file.sync_data()?;
            last_sync = Instant::now();
            synced = written;
            let _ = tx.try_send(LogEvent::Synced(synced));
            st = shared.lock();
            continue;
        }
        if st.stop {
            return Ok(());
        }
        let next_write =
            (st.queued > 0).then(|| MESSAGE_WRITE.saturating_sub(last_write.elapsed()));
        let next_sync = (written > synced).then(|| every_sync.saturating_sub(last_sync.elapsed()));
        match next_write.into_iter().chain(next_sync).min() {
            Some(left) => {
                st = shared
                    .wake
                    .wait_timeout(st, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            None => {
                st.idle = true;
                st = shared.wake.wait(st).unwrap_or_else(|e| e.into_inner());
                st.idle = false;
            }
        }
    }
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
    inputs: NodeInputs,
    /// What the pass in progress will carry out once its entries are kept.
    pass: Vec<Held>,
    /// Earlier passes' outputs waiting for the report that covers them, in order.
    held: std::collections::VecDeque<(Need, Held)>,
    /// Emptied output lists, for the next passes.
    spare_outputs: Vec<Vec<mew_core::gateway::Output>>,
    /// Every byte of the log up to this mark is written ([`LogEvent::Written`]).
    written: u64,
    /// Every byte of the log up to this mark is on the disk.
    durable: u64,
    /// The pass in progress holds a record that changes the space (not only a message):
    /// with `fsync: always` its outputs wait for the flush.
    pass_changes: bool,
    broken: bool,
    stopping: bool,
}

/// What a pass's outputs wait for: its entries written (to `mark`), and flushed too when
/// `flushed`.
#[derive(Debug, Clone, Copy)]
struct Need {
    mark: u64,
    flushed: bool,
}

impl Need {
    /// A pass of messages only: its outputs go at once (behind what is held).
    const NOTHING: Need = Need {
        mark: 0,
        flushed: false,
    };

    fn written(mark: u64) -> Need {
        Need {
            mark,
            flushed: false,
        }
    }

    fn flushed(mark: u64) -> Need {
        Need {
            mark,
            flushed: true,
        }
    }
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
    fn new(state: StateDir, hold_reads: bool) -> Running {
        let mark = state.written();
        Running {
            written: mark,
            durable: mark,
            state,
            inputs: NodeInputs {
                reads: hold_reads.then(Vec::new),
                ..NodeInputs::default()
            },
            pass: Vec::new(),
            held: std::collections::VecDeque::new(),
            spare_outputs: Vec::new(),
            pass_changes: false,
            broken: false,
            stopping: false,
        }
    }

    fn input(&mut self, host: &mut Host, now: Time, input: CoreInput) {
        if self.stopping {
            // Shutting down: connections end outside the log (the next start's `NodeUp`
            // ends them in the state too).
            host.apply(now, input);
            return;
        }
        match self.inputs.feed(host, now, input) {
            None => {}
            Some(Unhandled::Reconfigure(config)) => {
                // Applied outside the log, so a snapshot follows at once: the state on disk
                // is then the one under the new file, which the next start reads.
                host.reconfigure(now, *config);
                host.core_mut().request_snapshot();
            }
            Some(Unhandled::Shutdown) => {
                // What was held leaves first, written and flushed: the shutdown's closes
                // follow it.
                self.settle(host, now);
                if let Err(e) = self.state.finish() {
                    self.fail(&e);
                    return;
                }
                self.written = self.state.written();
                self.durable = self.written;
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

    /// Carries out the node's outputs: each record is applied at once and encoded for the
    /// log; what answers or sends waits for the pass's end ([`Running::settle`]).
    fn pump(&mut self, host: &mut Host) {
        while let Some(o) = host.core_mut().poll_output() {
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
                            // The snapshot in place holds every entry handed over.
                            self.written = self.state.written();
                            self.durable = self.written;
                        }
                        // The log keeps the entries: a later snapshot may succeed.
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

    fn publish(&mut self, host: &mut Host, record: Record) {
        let node = host.core_mut();
        let seq = node.applied() + 1;
        // Encoded once, into the pass's entries; applied as it is, not read back.
        self.state.append_record(seq, &record);
        if !node.handle_own_record(seq, record) {
            self.pass_changes = true;
        }
        if node.replica().used_entropy() || self.state.log_large() {
            // The entropy is an invitation's token: the snapshot right after this pass
            // keeps only its digest, and the log holding it is cut.
            node.request_snapshot();
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

    /// Whether what waits for `need` may go.
    fn ready(&self, need: Need) -> bool {
        self.written >= need.mark && (!need.flushed || self.durable >= need.mark)
    }

    /// Ends a pass: its entries go to the log's thread. When the pass changed the space,
    /// what it produced is held until the thread reports its entries written, or flushed
    /// under `fsync: always` (the thread goes at once then), and what follows leaves behind
    /// it; a pass of messages only carries out at once when nothing is held. A snapshot
    /// follows when one is due.
    fn settle(&mut self, host: &mut Host, now: Time) {
        loop {
            self.pump(host);
            if let Err(e) = self.state.write() {
                self.fail(&e);
                return;
            }
            // What a killed process may take: messages of the last MESSAGE_WRITE, never a
            // change acknowledged (nor anything before one). What a power loss may take:
            // with `always`, messages of the last MESSAGE_FLUSH, never a change
            // acknowledged; with `every_ms`, up to N ms of anything.
            let changes = std::mem::take(&mut self.pass_changes);
            let mark = self.state.written();
            let need = match (changes, self.state.fsync()) {
                (false, _) => Need::NOTHING,
                (true, Fsync::Always) => {
                    self.state.want_flush(mark);
                    Need::flushed(mark)
                }
                (true, Fsync::EveryMs(_)) => {
                    self.state.want_written(mark);
                    Need::written(mark)
                }
            };
            if self.ready(need) && self.held.is_empty() {
                let pass = std::mem::take(&mut self.pass);
                self.carry_out(host, now, pass);
                host.drain();
            } else {
                let mut outputs = self.spare_outputs.pop().unwrap_or_default();
                host.hold(&mut outputs);
                for h in self.pass.drain(..) {
                    self.held.push_back((need, h));
                }
                if outputs.is_empty() {
                    self.spare_outputs.push(outputs);
                } else {
                    self.held.push_back((need, Held::Outputs(outputs)));
                }
            }
            for conn in host.take_slow() {
                host.core_mut().handle_slow(now, conn);
            }
            host.core_mut().handle_drained();
            host.core_mut().handle_timeout(now);
            let durable = self.durable;
            self.pump(host);
            if self.durable > durable {
                // A snapshot now holds what waited (an invitation's answer, most often):
                // it goes now, with nothing after it needed to carry it.
                self.release(host, now);
            }
            if self.broken || (!self.state.has_pending() && self.pass.is_empty()) {
                return;
            }
        }
    }

    /// A report of the log's threads: what waited for it is carried out.
    fn handle_event(&mut self, host: &mut Host, now: Time, event: LogEvent) {
        match event {
            LogEvent::Written(mark) => self.written = self.written.max(mark),
            LogEvent::Synced(mark) => {
                self.durable = self.durable.max(mark);
                self.written = self.written.max(mark);
            }
            LogEvent::Failed(e) => {
                self.fail(&e);
                return;
            }
        }
        self.release(host, now);
        self.settle(host, now);
    }

    fn release(&mut self, host: &mut Host, now: Time) {
        let mut ready = Vec::new();
        while let Some((need, _)) = self.held.front()
            && self.ready(*need)
        {
            if let Some((_, h)) = self.held.pop_front() {
                ready.push(h);
            }
        }
        if !ready.is_empty() {
            self.carry_out(host, now, ready);
            for conn in host.take_slow() {
                host.core_mut().handle_slow(now, conn);
            }
        }
    }

    fn carry_out(&mut self, host: &mut Host, now: Time, items: Vec<Held>) {
        for h in items {
            match h {
                Held::Conn(reply, conn) => {
                    if reply.reply(conn).is_err() {
                        // Gone while waiting: its close goes into the log.
                        host.unregister(conn);
                        host.core_mut().handle_disconnected(now, conn);
                    }
                }
                Held::Http(reply, resp) => {
                    let _ = reply.reply(resp);
                }
                Held::Outputs(mut outputs) => {
                    host.release(outputs.drain(..));
                    if self.spare_outputs.len() < 4 {
                        self.spare_outputs.push(outputs);
                    }
                }
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
    host: GatewayHost<SocketLink>,
    rx: async_channel::Receiver<CoreInput>,
) {
    use futures_util::future::{Either, select};
    let Restored {
        mut state,
        mut node,
        report,
    } = restored;
    let (tx, events) = async_channel::unbounded();
    match state.start_syncer(tx) {
        Ok(()) => {}
        Err(e) => {
            tracing::error!("cannot start writing the space's state: {e}; the gateway stops");
            let mut host = host;
            host.cut_all();
            return;
        }
    };
    // The node's gateway takes over the address the server gave the one it built.
    let mut host = host.with_core(|built| {
        if let Some(url) = built.connection_url() {
            node.gateway_mut().set_connection_url(url);
        }
        node
    });
    // One node is the only writer of the held participants' logs: a start, restored or not,
    // welcomes them as the plain server does.
    host.gateway_mut()
        .handle_input(clock::now(), GwInput::WelcomeHeld);
    host.track_backlogs();
    host.set_restored(report.to_json());
    let hold_reads = state.fsync() == Fsync::Always;
    let mut run = Running::new(state, hold_reads);
    host.core_mut().start(clock::now());
    run.settle(&mut host, clock::now());
    while !run.broken {
        // Reports that came meanwhile first: inputs never starve what waits for them.
        while let Ok(ev) = events.try_recv() {
            run.handle_event(&mut host, clock::now(), ev);
        }
        if run.broken {
            break;
        }
        let wake = if run.stopping {
            host.next_wake().map(clock::until)
        } else {
            host.core().poll_timeout().map(clock::until)
        };
        let timer = async {
            match wake {
                Some(d) => S::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let reported = async {
            match events.recv().await {
                Ok(ev) => ev,
                // The threads are gone only once the log writer is dropped.
                Err(_) => std::future::pending().await,
            }
        };
        let woke = match select(
            std::pin::pin!(rx.recv()),
            select(std::pin::pin!(reported), std::pin::pin!(timer)),
        )
        .await
        {
            Either::Left((input, _)) => Ok(input),
            Either::Right((Either::Left((ev, _)), _)) => Err(Some(ev)),
            Either::Right((Either::Right(_), _)) => Err(None),
        };
        let input = match woke {
            Ok(input) => input,
            Err(Some(ev)) => {
                run.handle_event(&mut host, clock::now(), ev);
                continue;
            }
            Err(None) => {
                let now = clock::now();
                if run.stopping {
                    if host.handle_wake(now) == Flow::Stop {
                        break;
                    }
                } else {
                    host.core_mut().handle_timeout(now);
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
            // core does, so that a pass (its hand-over, the writers it wakes) carries more
            // entries.
            crate::conn::yield_now().await;
        }
    }
    if let Err(e) = run.state.finish() {
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
    use mew_core::gateway::{Bearer, ConnId};
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
            serde_json::from_slice(&r.node.replica().snapshot_at_rest().unwrap()).unwrap();
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
                r.node.handle_entry(seq, bytes);
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
                let at = r.state.log_bytes;
                std::os::unix::fs::FileExt::write_all_at(&r.state.log, &r.state.pending[..n], at)
                    .unwrap();
                return Err(());
            }
            _ => {}
        }
        r.state.commit().unwrap();
        discard_outputs(r.node.gateway_mut());
        r.node.handle_drained();
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
            let mut r = open(&dir, config.clone(), Fsync::EveryMs(3_600_000), None).unwrap();
            // Few entries between snapshots, so that runs cross several.
            r.node = {
                let mut o = r.node.options().clone();
                o.snapshot_every = 4 + rng.below(30);
                let replica = Replica::open(LOCAL_NODE, config.clone(), None, None).unwrap();
                Node::new(o, replica, 0, Box::new(mew_core::ids::IdGen::new(7)))
            };
            let mut now = Time::from_unix_millis(1_000_000);
            r.node.start(now);
            r.node
                .handle_connected(now, Bearer::Hashed(TokenHash::of("human-token")));
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
                r.node.handle_frame(now, conn, Bytes::from(frame));
                let kill = (i == kill_at).then_some(kill_how);
                let before = acked.clone();
                match pass(&mut r, kill, &mut rng) {
                    Ok(()) => acked = state(&r),
                    Err(()) => {
                        // The change in flight, applied whole.
                        discard_outputs(r.node.gateway_mut());
                        let in_flight = state(&r);
                        drop(r);
                        let restored = open(&dir, config.clone(), Fsync::EveryMs(3_600_000), None)
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
    fn a_change_and_all_after_it_wait_for_its_flush_and_chats_leave_at_once() {
        use futures_channel::oneshot;
        let config = SpaceConfig::from_yaml(SPACE).unwrap();
        let dir = scratch("hold");
        let (mut run, mut host, events) = running(&dir, Fsync::Always);
        let now = Time::from_unix_millis(1_000_000);
        // The thread's reports are taken here, one at a time, as the core task takes them:
        // what waits leaves only once the report that covers it is taken.
        let until = |run: &mut Running, host: &mut Host, done: &dyn Fn(&Running) -> bool| {
            while !done(run) {
                let ev = events.recv_blocking().unwrap();
                run.handle_event(host, now, ev);
            }
        };
        let flushed = |run: &Running| run.durable >= run.state.written();
        let log_has = |id: &str| {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while !has(&fs::read(dir.join(LOG)).unwrap(), id.as_bytes()) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{id} is never written"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        host.core_mut().start(now);
        run.settle(&mut host, now);
        until(&mut run, &mut host, &flushed);
        let join = |run: &mut Running, host: &mut Host, token: &str| {
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
            until(run, host, &flushed);
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
        // A chat leaves at once, and reaches the file within MESSAGE_WRITE.
        run.input(
            &mut host,
            now,
            Input::Frame(human, envelope("first-chat", chat)),
        );
        run.settle(&mut host, now);
        assert!(frames(&agent_rx).iter().any(|f| f.contains("first-chat")));
        log_has("first-chat");
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
        // Written at once (the flush asked for it), and held until the flush is reported.
        log_has("held-grant");
        assert!(
            frames(&agent_rx).is_empty(),
            "nothing leaves before the flush"
        );
        assert_eq!(read.try_recv().map(|r| r.is_some()), Ok(false));
        until(&mut run, &mut host, &flushed);
        let got = frames(&agent_rx);
        let at = |id: &str| got.iter().position(|f| f.contains(id));
        assert!(at("held-grant").is_some(), "{got:?}");
        assert!(at("held-grant") < at("after-grant"), "in order: {got:?}");
        let resp = read
            .try_recv()
            .unwrap()
            .expect("the read is answered once flushed");
        assert!(has(&resp.body, b"held-grant"));
        // An invitation is followed at once by a snapshot, which holds its entry (never
        // written to a log): its answer goes with nothing after it to carry it.
        let (_, human_rx) = (human, &_human_rx);
        frames(human_rx);
        run.input(
            &mut host,
            now,
            Input::Frame(
                human,
                envelope(
                    "inv",
                    r#""kind":"space/invite","payload":{"participant_id":"guest","initial_capabilities":[{"kind":"chat"}]}"#,
                ),
            ),
        );
        run.settle(&mut host, now);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut acked = false;
        while !acked {
            assert!(
                std::time::Instant::now() < deadline,
                "the invitation is never answered"
            );
            match events.try_recv() {
                Ok(ev) => run.handle_event(&mut host, now, ev),
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
            acked = frames(human_rx)
                .iter()
                .any(|f| f.contains("space/invite-ack"));
        }
        // Killed once a change was written, whatever its flush: the restart has it.
        run.input(
            &mut host,
            now,
            Input::Frame(human, envelope("unflushed-grant", grant)),
        );
        run.settle(&mut host, now);
        log_has("unflushed-grant");
        drop(run);
        let r = open(&dir, config, Fsync::Always, None).unwrap();
        let history = r
            .node
            .gateway()
            .http_messages("agent", Some("agent-token"), None)
            .unwrap();
        assert!(history.iter().any(|b| has(b, b"unflushed-grant")));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn with_every_ms_a_change_waits_for_its_write_only() {
        let dir = scratch("every");
        let (mut run, mut host, events) = running(&dir, Fsync::EveryMs(3_600_000));
        let now = Time::from_unix_millis(1_000_000);
        host.core_mut().start(now);
        run.settle(&mut host, now);
        // The node's start is a change: reported written at once, though an hour's flush
        // period has not passed.
        match events.recv_blocking().unwrap() {
            LogEvent::Written(mark) => assert_eq!(mark, run.state.written()),
            other => panic!("{other:?}"),
        }
        assert!(has(&fs::read(dir.join(LOG)).unwrap(), b"node_up"));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_log_thread_writes_behind_the_core_and_a_snapshot_starts_a_new_log_file() {
        use std::os::unix::fs::MetadataExt;
        let config = SpaceConfig::from_yaml(SPACE).unwrap();
        let dir = scratch("thread");
        let mut rng = Rng(7);
        let mut r = open(&dir, config.clone(), Fsync::Always, None).unwrap();
        let now = Time::from_unix_millis(1_000_000);
        let conn = human_joined(&mut r, now, &mut rng);
        let (tx, events) = async_channel::unbounded();
        r.state.start_syncer(tx).unwrap();
        // A pass as the core task makes it with the thread: entries handed over.
        let chat = |r: &mut Restored, id: &str| {
            r.node.handle_frame(now, conn, chat_frame(id));
            while let Some(o) = r.node.poll_output() {
                match o {
                    NodeOutput::Publish { record, .. } => {
                        let seq = r.node.applied() + 1;
                        r.state.append_record(seq, &record);
                        r.node.handle_own_record(seq, record);
                    }
                    NodeOutput::Snapshot { applied, bytes } => {
                        r.state.write_snapshot(applied, &bytes).unwrap();
                    }
                    _ => {}
                }
            }
            r.state.write().unwrap();
            discard_outputs(r.node.gateway_mut());
            r.node.handle_drained();
            while let Some(o) = r.node.poll_output() {
                if let NodeOutput::Snapshot { applied, bytes } = o {
                    r.state.write_snapshot(applied, &bytes).unwrap();
                }
            }
        };
        let flushed = |r: &Restored| {
            let want = r.state.written();
            r.state.want_flush(want);
            loop {
                if let LogEvent::Synced(mark) = events.recv_blocking().unwrap()
                    && mark >= want
                {
                    break;
                }
            }
        };
        let path = dir.join(LOG);
        for i in 0..20 {
            chat(&mut r, &format!("before-{i}"));
        }
        flushed(&r);
        let bytes = fs::read(&path).unwrap();
        // The entries, then at most a block of zeros (the direct write's padding).
        let end = r.state.log_bytes as usize;
        assert!(bytes.len() >= end && bytes.len() - end < 4096);
        assert!(bytes[end..].iter().all(|b| *b == 0));
        assert!(has(&bytes, b"before-0") && has(&bytes, b"before-19"));
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
        // Flushes go to the new file and report its bytes.
        flushed(&r);
        let bytes = fs::read(&path).unwrap();
        assert!(bytes.starts_with(journal::LOG_HEADER));
        assert!(has(&bytes, b"after-4") && !has(&bytes, b"before-19"));
        let kept = state(&r);
        drop(r);
        let restored = open(&dir, config, Fsync::Always, None).unwrap();
        assert_eq!(restored.report.cut, None);
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
        let dir = scratch("entropy");
        let mut rng = Rng(3);
        let mut r = open(&dir, config.clone(), Fsync::EveryMs(3_600_000), None).unwrap();
        let now = Time::from_unix_millis(1_000_000);
        let conn = human_joined(&mut r, now, &mut rng);
        r.node.handle_frame(now, conn, chat_frame("plain-chat"));
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
        r.node.handle_frame(now, conn, Bytes::from(invite));
        while let Some(o) = r.node.poll_output() {
            if let NodeOutput::Publish { record, .. } = o {
                assert!(record.entropy.is_some(), "an invitation carries entropy");
                let seq = r.node.applied() + 1;
                let bytes = Bytes::from(record.encode());
                r.state.append(seq, &bytes);
                r.node.handle_entry(seq, bytes);
            }
        }
        r.state.write().unwrap();
        discard_outputs(r.node.gateway_mut());
        let before_kill = state(&r);
        drop(r);
        let restored = open(&dir, config, Fsync::EveryMs(3_600_000), None).unwrap();
        assert_eq!(
            state(&restored),
            before_kill,
            "the same token digest after replay"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    /// A state folder of this test run, emptied.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mew-durable-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    /// The core task's state over a new space in `dir`, its log thread started: the
    /// thread's reports come on the channel, for the test to hand to [`Running::handle_event`].
    fn running(dir: &Path, fsync: Fsync) -> (Running, Host, async_channel::Receiver<LogEvent>) {
        let config = SpaceConfig::from_yaml(SPACE).unwrap();
        let Restored {
            mut state, node, ..
        } = open(dir, config, fsync, None).unwrap();
        let mut host = GatewayHost::new(node, None, dir.to_owned(), Duration::from_secs(1));
        host.track_backlogs();
        let (tx, events) = async_channel::unbounded();
        state.start_syncer(tx).unwrap();
        (Running::new(state, fsync == Fsync::Always), host, events)
    }

    /// The node started and the human connected, in one pass: its connection.
    fn human_joined(r: &mut Restored, now: Time, rng: &mut Rng) -> ConnId {
        r.node.start(now);
        r.node
            .handle_connected(now, Bearer::Hashed(TokenHash::of("human-token")));
        pass(r, None, rng).unwrap();
        first_conn(r)
    }

    fn chat_frame(id: &str) -> Bytes {
        Bytes::from(format!(
            r#"{{"protocol":"mew/v0.4","id":"{id}","kind":"chat","payload":{{"text":"hi"}}}}"#
        ))
    }

    fn first_conn(r: &Restored) -> ConnId {
        let v: serde_json::Value =
            serde_json::from_slice(&r.node.replica().snapshot().unwrap()).unwrap();
        let c = &v["owners"][0][0];
        serde_json::from_value(c.clone()).unwrap()
    }
}
