//! The state files of a running space and the thread that writes and flushes its log while
//! the core goes on ([`StateDir::start_syncer`]); snapshots put in place of the log.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use mew_core::cluster::journal;
use mew_core::cluster::{Encoder, Record};
use mew_core::gateway::Fsync;

use super::{
    LOG, LOG_MAX_BYTES, LOG_NEXT, MESSAGE_FLUSH, MESSAGE_WRITE, QUEUE_MAX, SNAPSHOT, open_rw,
};
use crate::state::direct::DirectAppend;

/// Emptied buffers kept for the core's next passes.
const SPARES: usize = 4;

/// The open state files of one space.
pub struct StateDir {
    pub(super) dir: PathBuf,
    /// The log, for writes made here (without a log thread) and its flushes; `None` while
    /// the thread owns it (it may put a new file in its place).
    pub(super) log: Option<File>,
    /// Bytes in the current log file, its header included (handed to the thread too; from
    /// a snapshot handed to the thread on, the new file's).
    pub(super) log_bytes: u64,
    /// Entries encoded and not yet written (or handed to the thread).
    pub(super) pending: Vec<u8>,
    /// Encodes them (keeping the head frames share).
    encoder: Encoder,
    fsync: Fsync,
    /// Written here but not flushed to the disk since then.
    unsynced: bool,
    last_sync: std::time::Instant,
    /// Bytes written to the log (or handed to its thread) since the files were opened,
    /// across snapshots: the marks of [`LogEvent`].
    written: u64,
    /// Snapshots handed to the log thread (or written here) since the files were opened.
    snapshots: u64,
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
    /// Every snapshot handed over up to this one ([`StateDir::snapshots_handed`]) was
    /// written and put in place of the log ([`LogEvent::Synced`] came first), or could not
    /// be (and the entries before it were written to the log instead).
    Snapshot(u64),
    /// Writing or flushing failed; nothing more follows.
    Failed(io::Error),
}

/// The thread that writes and flushes the log while the core goes on (see
/// [`StateDir::start_syncer`]).
struct Syncer {
    shared: std::sync::Arc<SyncShared>,
    thread: Option<std::thread::JoinHandle<io::Result<u64>>>,
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

/// What the core hands the log thread, in the order it must be done.
enum Handed {
    /// Encoded entries.
    Entries(Vec<u8>),
    /// A snapshot of the space at entry `applied`, holding every entry handed before it
    /// (up to the mark `mark`): written, then put in the place of the log. `number`
    /// counts the snapshots handed over.
    Snapshot {
        applied: u64,
        bytes: Vec<u8>,
        mark: u64,
        number: u64,
    },
}

#[derive(Default)]
struct SyncState {
    /// Entries (and snapshots) handed over, in order, not yet taken by the thread.
    queue: Vec<Handed>,
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
    /// The thread stopped (asked to, or the disk refused a write or a flush).
    gone: bool,
}

impl StateDir {
    /// The files of a restored space: its log open at `log_bytes`, nothing pending.
    pub(super) fn new(dir: PathBuf, log: File, log_bytes: u64, fsync: Fsync) -> StateDir {
        StateDir {
            dir,
            log: Some(log),
            log_bytes,
            pending: Vec::new(),
            encoder: Encoder::new(),
            fsync,
            unsynced: false,
            last_sync: std::time::Instant::now(),
            written: 0,
            snapshots: 0,
            syncer: None,
        }
    }

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

    /// Snapshots handed to the log thread (or written without one) so far: the numbers
    /// [`LogEvent::Snapshot`] reports.
    pub fn snapshots_handed(&self) -> u64 {
        self.snapshots
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
                // Room for the next entries, about as many as these, and half as much again
                // so that a slightly larger pass does not grow it: see the audit batches'.
                let room = self.pending.len() + self.pending.len() / 2;
                let spare = st
                    .spares
                    .pop()
                    .filter(|b| b.capacity() >= room)
                    .unwrap_or_else(|| Vec::with_capacity(room));
                let bytes = std::mem::replace(&mut self.pending, spare);
                st.handed += len;
                st.queued += bytes.len();
                st.queue.push(Handed::Entries(bytes));
                if st.idle {
                    s.shared.wake.notify_one();
                }
            }
            None => {
                std::os::unix::fs::FileExt::write_all_at(
                    self.plain_log()?,
                    &self.pending,
                    self.log_bytes,
                )?;
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
            self.plain_log()?.sync_data()?;
            self.unsynced = false;
        }
        let thread = std::thread::Builder::new()
            .name("mew-state-sync".into())
            .spawn({
                let shared = shared.clone();
                let dir = self.dir.clone();
                move || {
                    let done = sync_loop(file, &dir, every_sync, &shared, from, &tx);
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
        // The thread's file from now on: a snapshot may put another in its place.
        self.log = None;
        Ok(())
    }

    /// The log file, for writes made here.
    fn plain_log(&self) -> io::Result<&File> {
        self.log
            .as_ref()
            .ok_or_else(|| io::Error::other("the state log is not open"))
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
            self.plain_log()?.sync_data()?;
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
            // Written and flushed whole, to the file the thread ended with.
            let log_bytes = stopped?;
            self.log = Some(super::open_rw(&self.dir.join(LOG), false)?);
            self.log_bytes = log_bytes;
            return Ok(());
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
    ///
    /// With a log thread the files are its work (the space goes on meanwhile): it writes
    /// the snapshot in order after the entries handed before it, which it then never
    /// writes, and reports [`LogEvent::Synced`] up to them once the snapshot is in place.
    /// If the snapshot cannot be written it writes them to the old log after all, and the
    /// space goes on with that one. Whether the snapshot is in place already (without a
    /// thread), holding every entry written.
    pub fn write_snapshot(&mut self, applied: u64, snapshot: Vec<u8>) -> io::Result<bool> {
        self.write()?;
        self.snapshots += 1;
        if let Some(s) = &self.syncer {
            let mut st = s.shared.lock();
            if st.gone {
                return Err(io::Error::other("the state log's writer stopped"));
            }
            let mark = st.handed;
            // One not yet taken is superseded: this one holds all it would. (Invitations in
            // a burst queue one snapshot, not one each.)
            st.queue.retain(|h| !matches!(h, Handed::Snapshot { .. }));
            st.queue.push(Handed::Snapshot {
                applied,
                bytes: snapshot,
                mark,
                number: self.snapshots,
            });
            // At once: what waits for these entries is released by the snapshot.
            s.shared.wake.notify_one();
            drop(st);
            // The new log's size from here (the thread reports the truth at its end).
            self.log_bytes = journal::LOG_HEADER.len() as u64;
            return Ok(false);
        }
        // Not flushed: the snapshot holds these entries once it is in place, and until
        // then the entries acknowledged before it were flushed already.
        put_snapshot(&self.dir, applied, &snapshot)?;
        self.log = Some(super::open_rw(&self.dir.join(LOG), false)?);
        self.log_bytes = journal::LOG_HEADER.len() as u64;
        self.unsynced = false;
        Ok(true)
    }
}

/// Writes a snapshot ending at entry `applied` (whole, flushed, renamed into place), then
/// puts a new log, holding only its header, in the place of the one whose entries the
/// snapshot holds, and flushes the folder: entries flushed into the new file are kept.
fn put_snapshot(dir: &Path, applied: u64, snapshot: &[u8]) -> io::Result<()> {
    let tmp = dir.join("snapshot.tmp");
    {
        let mut o = OpenOptions::new();
        o.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        let mut f = o.open(&tmp)?;
        f.write_all(&journal::encode_snapshot(applied, snapshot))?;
        f.sync_all()?;
    }
    let folder = File::open(dir)?;
    fs::rename(&tmp, dir.join(SNAPSHOT))?;
    folder.sync_all()?;
    // The log's entries are all in the snapshot now: a new log replaces it. A crash before
    // the rename leaves the old log, whose entries the snapshot holds (passed over); after
    // it, the new one. (Emptying the old file in place would free its blocks at once; the
    // last handle closed frees them instead.)
    let fresh = dir.join(LOG_NEXT);
    // Its header reaches the disk with the first flush of its entries, which counts only
    // after the folder's flush below.
    let mut new = open_rw(&fresh, true)?;
    new.write_all(journal::LOG_HEADER)?;
    fs::rename(&fresh, dir.join(LOG))?;
    folder.sync_all()
}

impl Syncer {
    /// Stops the thread once it wrote and flushed everything handed to it; the bytes in
    /// the log file it ended with.
    fn stop(&mut self) -> io::Result<u64> {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the state log's thread panicked"))),
            None => Err(io::Error::other(
                "the state log's thread was stopped before",
            )),
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The log thread: writes what was handed over every [`MESSAGE_WRITE`], at once when
/// outputs wait for it or a [`crate::state::direct::CAPACITY`] of it is queued, and flushes
/// once outputs wait for a flush or the period since the last one passed; reports what
/// was asked for; writes the snapshots handed over and puts each in the place of the log.
/// Ends with the bytes of the log file it ended with.
fn sync_loop(
    mut file: DirectAppend,
    dir: &Path,
    every_sync: Duration,
    shared: &SyncShared,
    from: u64,
    tx: &async_channel::Sender<LogEvent>,
) -> io::Result<u64> {
    use std::time::Instant;
    let (mut written, mut synced) = (from, from);
    let (mut last_write, mut last_sync) = (Instant::now(), Instant::now());
    let mut batch: Vec<Handed> = Vec::new();
    let mut st = shared.lock();
    loop {
        for h in batch.drain(..) {
            if let Handed::Entries(mut b) = h
                && st.spares.len() < SPARES
            {
                b.clear();
                st.spares.push(b);
            }
        }
        let asked = st.want_written.max(st.want_synced);
        let snapshot = st
            .queue
            .iter()
            .any(|h| matches!(h, Handed::Snapshot { .. }));
        if !st.queue.is_empty()
            && (st.stop
                || snapshot
                || asked > written
                || st.queued >= crate::state::direct::CAPACITY
                || last_write.elapsed() >= MESSAGE_WRITE)
        {
            std::mem::swap(&mut batch, &mut st.queue);
            st.queued = 0;
            let target = st.handed;
            let report = st.want_written > written;
            shared.done.notify_all();
            drop(st);
            // Entries before the last snapshot are in it: never written (an invitation's
            // entropy among them), unless the snapshot cannot be.
            let mut from = 0;
            let mut retired = None;
            if let Some(i) = batch
                .iter()
                .rposition(|h| matches!(h, Handed::Snapshot { .. }))
                && let Handed::Snapshot {
                    applied,
                    bytes,
                    mark,
                    number,
                } = &batch[i]
            {
                let t = Instant::now();
                match put_snapshot(dir, *applied, bytes) {
                    Ok(()) => {
                        // The old file's last handle: closing it frees its blocks (tens of
                        // milliseconds for a large log), after the entries below.
                        retired = Some(std::mem::replace(
                            &mut file,
                            DirectAppend::open(&dir.join(LOG))?,
                        ));
                        tracing::debug!(
                            entry = applied,
                            bytes = bytes.len(),
                            ms = t.elapsed().as_secs_f64() * 1e3,
                            "state snapshot written"
                        );
                        from = i + 1;
                        synced = synced.max(*mark);
                        let _ = tx.try_send(LogEvent::Synced(synced));
                    }
                    // The log keeps the entries: a later snapshot may succeed.
                    Err(e) => tracing::warn!(
                        "writing the space's snapshot in {} failed: {e}",
                        dir.display()
                    ),
                }
                let _ = tx.try_send(LogEvent::Snapshot(*number));
            }
            for h in &mut batch[from..] {
                if let Handed::Entries(b) = h {
                    journal::seal(b);
                    file.append(b)?;
                }
            }
            // Zeros after the entries are the log's clean end.
            file.settle_padded()?;
            drop(retired);
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
            return Ok(file.size());
        }
        let next_write =
            (!st.queue.is_empty()).then(|| MESSAGE_WRITE.saturating_sub(last_write.elapsed()));
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
