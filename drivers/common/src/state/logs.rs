//! The log writer: audit records and virtual participants' lines go to files from a thread
//! of their own, so the task that owns a space never formats a record or waits on a disk.
//!
//! - The queue is bounded and never blocks a sender: when it is full, the line is dropped
//!   and counted ([`LogHandle::dropped`], `/health`), and the writer says so in the envelope
//!   history (an `audit_dropped` record with the count) once it catches up.
//! - Audit records come formatted by the core, a batch of lines per file and per pass of
//!   the space's task ([`mew_core::gateway::Gateway::poll_audit`]), so a record is never
//!   allocated, sent or freed on its own; the writer expands each batch's `delivered`
//!   lines as it copies them ([`mew_core::gateway::AuditBatch::pieces`]) and hands the
//!   buffer back ([`LogHandle::spare`]) so that a busy space allocates none. Writes are
//!   buffered.
//! - Every file rotates by size: `name` becomes `name.1` (and `name.1` becomes `name.2`, up
//!   to the retention count; the oldest is deleted).
//! - Files are flushed at most every 2 ms while lines keep coming, and 2 ms after the last.
//!   Audit files are written around the page cache ([`crate::state::direct`]): each flush sends
//!   the whole blocks written since the last one around it and the last few kilobytes
//!   through it, so a record is in its file within those 2 ms.
//! - Files are created 0600 in folders created 0700: the logs say who did what.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::thread::JoinHandle;

use bytes::Bytes;
use mew_core::gateway::{AuditBatch, AuditFile};

use crate::state::direct::DirectAppend;

/// When files rotate and how many old ones are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// A file is rotated once it grows past this many bytes.
    pub max_bytes: u64,
    /// Rotated files kept (`name.1` … `name.N`).
    pub keep: u32,
}

impl Default for Rotation {
    fn default() -> Self {
        Rotation {
            max_bytes: 32 * 1024 * 1024,
            keep: 4,
        }
    }
}

enum Cmd {
    Line(PathBuf, Bytes),
    /// A batch of audit lines for one file of a folder.
    Audit(Arc<Path>, AuditBatch),
    Flush(SyncSender<()>),
    Stop,
    /// Says it holds, then holds the writer until the sender is dropped (tests of a full
    /// queue).
    #[cfg(test)]
    Hold(SyncSender<()>, Receiver<()>),
}

/// Appends lines and audit records to files from a dedicated thread behind a bounded queue.
pub struct LogWriter {
    tx: Option<SyncSender<Cmd>>,
    dropped: Arc<AtomicU64>,
    spares: Spares,
    thread: Option<JoinHandle<io::Result<()>>>,
}

/// How many lines or records may wait for the writer thread.
pub const LOG_QUEUE: usize = 65_536;
/// How long a busy writer waits before it looks for more lines.
const LINGER: std::time::Duration = std::time::Duration::from_millis(2);
/// How long without lines before the writer sleeps until the next one.
const IDLE: std::time::Duration = std::time::Duration::from_millis(20);
/// How many files the writer keeps open at once.
const MAX_OPEN: usize = 64;

impl LogWriter {
    /// Starts the writer thread.
    pub fn start(rotation: Rotation) -> io::Result<LogWriter> {
        Self::with_capacity(rotation, LOG_QUEUE)
    }

    /// Starts the writer thread with a queue of `capacity` entries.
    pub fn with_capacity(rotation: Rotation, capacity: usize) -> io::Result<LogWriter> {
        let (tx, rx) = sync_channel(capacity);
        let dropped = Arc::new(AtomicU64::new(0));
        let spares = Spares::default();
        let (d, sp) = (dropped.clone(), spares.clone());
        let thread = std::thread::Builder::new()
            .name("mew-log-writer".into())
            .spawn(move || Writer::new(rotation, d, sp).run(rx))?;
        Ok(LogWriter {
            tx: Some(tx),
            dropped,
            spares,
            thread: Some(thread),
        })
    }

    /// A cheap handle for other threads or tasks.
    pub fn handle(&self) -> Option<LogHandle> {
        self.tx.clone().map(|tx| LogHandle {
            tx,
            dropped: self.dropped.clone(),
            spares: self.spares.clone(),
        })
    }

    /// Waits until every line queued so far is written and flushed.
    pub fn flush(&self) {
        if let Some(tx) = &self.tx {
            let (ack_tx, ack_rx) = sync_channel(1);
            if tx.send(Cmd::Flush(ack_tx)).is_ok() {
                let _ = ack_rx.recv();
            }
        }
    }

    /// Writes everything queued, flushes, and stops the thread; the first write error, if any.
    pub fn finish(mut self) -> io::Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> io::Result<()> {
        // Handles may outlive the writer: tell the thread to stop rather than waiting for
        // every sender to go away.
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Cmd::Stop);
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("log writer panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// A clonable sender into a [`LogWriter`]; never blocks.
#[derive(Clone)]
pub struct LogHandle {
    tx: SyncSender<Cmd>,
    dropped: Arc<AtomicU64>,
    spares: Spares,
}

/// Buffers of written batches, handed back for the next ones of the same file (the files'
/// batches differ in size: a buffer grown for one file's stays with that file).
#[derive(Clone, Default)]
struct Spares(Arc<std::sync::Mutex<[Vec<Vec<u8>>; 2]>>);

/// How many spare buffers are kept per file, and the largest kept.
const SPARES: usize = 4;
const SPARE_MAX: usize = 4 * 1024 * 1024;

impl Spares {
    fn get(&self, file: AuditFile) -> Vec<u8> {
        self.0
            .lock()
            .ok()
            .and_then(|mut v| v[file as usize].pop())
            .unwrap_or_default()
    }

    fn put(&self, file: AuditFile, mut buf: Vec<u8>) {
        if buf.capacity() > SPARE_MAX {
            return;
        }
        buf.clear();
        if let Ok(mut v) = self.0.lock()
            && v[file as usize].len() < SPARES
        {
            v[file as usize].push(buf);
        }
    }
}

impl LogHandle {
    fn offer(&self, cmd: Cmd) -> bool {
        match self.tx.try_send(cmd) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }

    /// Queues `line` for `path` (a newline is added when it has none). False after the writer stopped; a
    /// line that finds the queue full is dropped and counted.
    pub fn append(&self, path: impl Into<PathBuf>, line: Bytes) -> bool {
        self.offer(Cmd::Line(path.into(), line))
    }

    /// An empty buffer for the next batch of audit lines of `file`: one the writer is done
    /// with, when there is one.
    pub fn spare(&self, file: AuditFile) -> Vec<u8> {
        self.spares.get(file)
    }

    /// Queues a batch of audit lines (each ending with its newline) for its file in `dir`,
    /// like [`LogHandle::append`] (a batch that finds the queue full is dropped and counted
    /// line by line).
    pub fn append_audit(&self, dir: &Arc<Path>, batch: AuditBatch) -> bool {
        let lines = batch.lines;
        match self.tx.try_send(Cmd::Audit(dir.clone(), batch)) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(lines, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }

    /// Lines and records dropped because the queue was full, since the start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// An open file: audit files, large and busy, bypass the page cache ([`DirectAppend`]);
/// virtual participants' logs, which scripts read as they grow, are written through it.
enum Open {
    Lines { w: BufWriter<File>, size: u64 },
    Audit(DirectAppend),
}

impl Open {
    fn size(&self) -> u64 {
        match self {
            Open::Lines { size, .. } => *size,
            Open::Audit(f) => f.size(),
        }
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Open::Lines { w, size } => {
                w.write_all(bytes)?;
                *size += bytes.len() as u64;
                Ok(())
            }
            Open::Audit(f) => f.append(bytes),
        }
    }

    /// Writes what is buffered.
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Open::Lines { w, .. } => w.flush(),
            Open::Audit(f) => f.settle(),
        }
    }
}

struct Writer {
    rotation: Rotation,
    /// Open files (few): found by comparing path bytes, cheaper than ordering paths.
    files: Vec<(PathBuf, Open)>,
    /// The path of each (folder, audit file) seen, so a record costs no `join`.
    audit_paths: Vec<(Arc<Path>, AuditFile, Arc<Path>)>,
    dropped: Arc<AtomicU64>,
    spares: Spares,
    /// Drops already reported.
    reported: u64,
    /// Where the last audit record went: drops are reported in its envelope history.
    audit_dir: Option<Arc<Path>>,
    first_err: Option<io::Error>,
}

impl Writer {
    fn new(rotation: Rotation, dropped: Arc<AtomicU64>, spares: Spares) -> Writer {
        Writer {
            rotation,
            files: Vec::new(),
            audit_paths: Vec::new(),
            dropped,
            spares,
            reported: 0,
            audit_dir: None,
            first_err: None,
        }
    }

    fn note(&mut self, e: io::Error) {
        self.first_err.get_or_insert(e);
    }

    fn flush_all(&mut self) {
        let mut err = None;
        for (_, f) in &mut self.files {
            if let Err(e) = f.flush() {
                err.get_or_insert(e);
            }
        }
        if let Some(e) = err {
            self.note(e);
        }
    }

    fn run(mut self, rx: Receiver<Cmd>) -> io::Result<()> {
        // While records keep coming the writer looks for more every `LINGER` instead of
        // sleeping in `recv`: a sender then never has to wake it (a futex call and a
        // context switch per pass of a space's task, which cost more than the records).
        // After `IDLE` without any, it blocks until the next one. What it wrote reaches
        // the files at most every `LINGER` while records keep coming, and `LINGER` after the
        // last: each flush of an audit file is a write of its own (see `crate::state::direct`).
        let mut last_work = std::time::Instant::now();
        let mut last_flush = last_work;
        let mut unflushed = false;
        'outer: loop {
            let first = match rx.try_recv() {
                Ok(cmd) => cmd,
                Err(TryRecvError::Disconnected) => break,
                Err(TryRecvError::Empty) if unflushed => {
                    let since = last_flush.elapsed();
                    if since < LINGER {
                        std::thread::sleep(LINGER - since);
                    } else {
                        self.flush_all();
                        unflushed = false;
                        last_flush = std::time::Instant::now();
                    }
                    continue;
                }
                Err(TryRecvError::Empty) if last_work.elapsed() < IDLE => {
                    std::thread::sleep(LINGER);
                    continue;
                }
                Err(TryRecvError::Empty) => match rx.recv() {
                    Ok(cmd) => cmd,
                    Err(_) => break,
                },
            };
            let mut next = Some(first);
            while let Some(cmd) = next.take() {
                match cmd {
                    Cmd::Line(path, mut line) => {
                        if line.last() != Some(&b'\n') {
                            let mut v = Vec::with_capacity(line.len() + 1);
                            v.extend_from_slice(&line);
                            v.push(b'\n');
                            line = Bytes::from(v);
                        }
                        self.write(&path, line.len() as u64, [&line[..]], false);
                    }
                    Cmd::Audit(dir, batch) => {
                        // Expanded as it is copied to the file: a `delivered` line is
                        // copied once, here.
                        let path = self.audit_path(&dir, batch.file);
                        self.write(&path, batch.text_len(), batch.pieces(), true);
                        let file = batch.file;
                        self.spares.put(file, batch.into_buffer());
                        self.audit_dir = Some(dir);
                    }
                    Cmd::Flush(ack) => {
                        self.report_drops();
                        self.flush_all();
                        let _ = ack.send(());
                    }
                    Cmd::Stop => break 'outer,
                    #[cfg(test)]
                    Cmd::Hold(holding, release) => {
                        let _ = holding.send(());
                        let _ = release.recv();
                    }
                }
                next = rx.try_recv().ok();
            }
            self.report_drops();
            last_work = std::time::Instant::now();
            unflushed = true;
            if last_work.duration_since(last_flush) >= LINGER {
                self.flush_all();
                unflushed = false;
                last_flush = last_work;
            }
        }
        self.report_drops();
        self.flush_all();
        match self.first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes an `audit_dropped` record for drops not yet reported.
    fn report_drops(&mut self) {
        let total = self.dropped.load(Ordering::Relaxed);
        if total == self.reported {
            return;
        }
        let count = total - self.reported;
        self.reported = total;
        tracing::warn!(count, total, "log queue full: lines dropped");
        let Some(dir) = self.audit_dir.clone() else {
            return;
        };
        let line = mew_core::gateway::audit_dropped_line(crate::clock::now(), count, total);
        let path = dir.join(AuditFile::EnvelopeHistory.file_name());
        self.write(&path, line.len() as u64, [&line[..]], true);
    }

    fn audit_path(&mut self, dir: &Arc<Path>, file: AuditFile) -> Arc<Path> {
        if let Some((_, _, p)) = self
            .audit_paths
            .iter()
            .find(|(d, f, _)| Arc::ptr_eq(d, dir) && *f == file)
        {
            return p.clone();
        }
        let p: Arc<Path> = Arc::from(dir.join(file.file_name()).as_path());
        if self.audit_paths.len() >= MAX_OPEN {
            self.audit_paths.clear();
        }
        self.audit_paths.push((dir.clone(), file, p.clone()));
        p
    }

    fn slot(&self, path: &Path) -> Option<usize> {
        let want = path.as_os_str().as_encoded_bytes();
        self.files
            .iter()
            .position(|(p, _)| p.as_os_str().as_encoded_bytes() == want)
    }

    /// Appends `len` bytes, in `pieces`, to `path`, an audit file (written around the page
    /// cache) or not.
    fn write<'a>(
        &mut self,
        path: &Path,
        len: u64,
        pieces: impl IntoIterator<Item = &'a [u8]>,
        audit: bool,
    ) {
        // Rotating before the write that would overflow keeps the newest line in `path`.
        let mut slot = self.slot(path);
        if let Some(i) = slot {
            let size = self.files[i].1.size();
            if size > 0 && size + len > self.rotation.max_bytes {
                self.rotate(path);
                slot = None;
            }
        }
        let i = match slot {
            Some(i) => i,
            None => {
                if self.files.len() >= MAX_OPEN {
                    self.flush_all();
                    self.files.clear();
                }
                match open_append(path, audit) {
                    Ok(f) => {
                        self.files.push((path.to_owned(), f));
                        self.files.len() - 1
                    }
                    Err(e) => return self.note(e),
                }
            }
        };
        for bytes in pieces {
            if let Err(e) = self.files[i].1.write(bytes) {
                return self.note(e);
            }
        }
    }

    fn rotate(&mut self, path: &Path) {
        if let Some(i) = self.slot(path) {
            let (_, mut f) = self.files.swap_remove(i);
            if let Err(e) = f.flush() {
                self.note(e);
            }
        }
        let numbered = |n: u32| {
            let mut p = path.as_os_str().to_owned();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        };
        let keep = self.rotation.keep;
        let r = if keep == 0 {
            std::fs::remove_file(path)
        } else {
            let _ = std::fs::remove_file(numbered(keep));
            for n in (1..keep).rev() {
                let _ = std::fs::rename(numbered(n), numbered(n + 1));
            }
            std::fs::rename(path, numbered(1))
        };
        if let Err(e) = r {
            self.note(e);
        }
    }
}

/// Creates `dir` and its missing parents, private to the user (0700 on Unix).
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
}

fn open_append(path: &Path, audit: bool) -> io::Result<Open> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir)?;
    }
    // Not around the page cache: something other than a file (a FIFO, a terminal), which
    // takes plain appends only.
    let special = std::fs::metadata(path).is_ok_and(|m| !m.is_file());
    if audit && !special {
        return DirectAppend::open(path).map(Open::Audit);
    }
    let mut o = OpenOptions::new();
    o.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let f = o.open(path)?;
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    Ok(Open::Lines {
        w: BufWriter::with_capacity(64 * 1024, f),
        size,
    })
}

/// The files of one log, oldest first: `name.N` … `name.1`, then `name`.
pub fn rotated_files(path: &Path) -> Vec<PathBuf> {
    let mut numbered: Vec<(u32, PathBuf)> = Vec::new();
    if let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
        && let Ok(entries) = std::fs::read_dir(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })
    {
        for e in entries.flatten() {
            let file = e.file_name();
            let Some(f) = file.to_str() else { continue };
            if let Some(n) = f
                .strip_prefix(name)
                .and_then(|r| r.strip_prefix('.'))
                .and_then(|n| n.parse::<u32>().ok())
            {
                numbered.push((n, e.path()));
            }
        }
    }
    numbered.sort_by_key(|n| std::cmp::Reverse(n.0));
    let mut out: Vec<PathBuf> = numbered.into_iter().map(|(_, p)| p).collect();
    if path.exists() {
        out.push(path.to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(name: &str) -> mew_tests::scratch::Scratch {
        mew_tests::scratch::Scratch::new("logs", name)
    }

    #[test]
    fn writes_lines_in_order_and_flushes_on_finish() {
        let d = tempdir("log");
        let w = LogWriter::start(Rotation::default()).unwrap();
        let a = d.join("logs/a.jsonl");
        let h = w.handle().unwrap();
        for i in 0..1000 {
            assert!(h.append(&a, Bytes::from(format!("{{\"n\":{i}}}"))));
        }
        w.flush();
        let text = std::fs::read_to_string(&a).unwrap();
        assert_eq!(text.lines().count(), 1000);
        assert_eq!(text.lines().nth(999), Some("{\"n\":999}"));
        assert!(h.append(d.join("b.jsonl"), Bytes::from_static(b"x")));
        w.finish().unwrap();
        assert_eq!(std::fs::read_to_string(d.join("b.jsonl")).unwrap(), "x\n");
        // The writer is gone: a handle that outlived it reports so.
        assert!(!h.append(&a, Bytes::from_static(b"late")));
        assert_eq!(h.dropped(), 0);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&a), 0o600);
            assert_eq!(mode(&d.join("logs")), 0o700);
        }
    }

    #[test]
    fn reports_an_unwritable_path() {
        let d = tempdir("bad");
        std::fs::write(d.join("file"), "x").unwrap();
        let w = LogWriter::start(Rotation::default()).unwrap();
        w.handle()
            .unwrap()
            .append(d.join("file/inside.jsonl"), Bytes::from_static(b"x"));
        assert!(w.finish().is_err());
    }

    #[test]
    fn files_rotate_by_size_and_keep_the_retention_count() {
        let d = tempdir("rotate");
        let rotation = Rotation {
            max_bytes: 1000,
            keep: 2,
        };
        let w = LogWriter::start(rotation).unwrap();
        let h = w.handle().unwrap();
        let a = d.join("a.jsonl");
        for i in 0..100 {
            h.append(
                &a,
                Bytes::from(format!("{{\"n\":{i:04},\"pad\":\"{}\"}}", "x".repeat(80))),
            );
        }
        w.finish().unwrap();
        let files = rotated_files(&a);
        assert_eq!(
            files,
            vec![d.join("a.jsonl.2"), d.join("a.jsonl.1"), a.clone()]
        );
        let mut last = -1i64;
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            assert!(
                text.len() <= 1000,
                "{} is {} bytes",
                f.display(),
                text.len()
            );
            for l in text.lines() {
                let n: i64 = l[5..9].parse().unwrap();
                assert!(n > last, "oldest first, in order");
                last = n;
            }
        }
        assert_eq!(last, 99, "the newest line is in the current file");
    }

    fn audit_batch(from: usize, n: usize) -> AuditBatch {
        let mut bytes = Vec::new();
        for i in from..from + n {
            bytes.extend_from_slice(
                format!("{{\"n\":{i:05},\"pad\":\"{}\"}}\n", "x".repeat(90)).as_bytes(),
            );
        }
        AuditBatch::from_lines(AuditFile::EnvelopeHistory, n as u64, &bytes)
    }

    #[test]
    fn audit_lines_reach_their_file_whenever_the_queue_runs_empty() {
        let d = tempdir("audit-idle");
        let w = LogWriter::start(Rotation::default()).unwrap();
        let h = w.handle().unwrap();
        let dir: Arc<Path> = Arc::from(&*d);
        // More than one direct write's worth, then a partial block.
        for b in 0..100 {
            assert!(h.append_audit(&dir, audit_batch(b * 100, 100)));
        }
        let path = d.join("envelope-history.jsonl");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let read_all = |n: usize| loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.lines().count() == n || std::time::Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        let text = read_all(10_000);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 10_000, "every line, without a flush");
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(&l[5..10], format!("{i:05}"), "in order, none torn");
        }
        assert!(text.ends_with('\n'));
        // One more line, a few bytes into a block: there as soon as the writer sees its
        // queue empty (scripts read the history right after acting, as the reference's
        // do), not when a block fills or the writer falls idle.
        let started = std::time::Instant::now();
        assert!(h.append_audit(&dir, audit_batch(10_000, 1)));
        let text = read_all(10_001);
        assert_eq!(text.lines().count(), 10_001);
        assert!(
            started.elapsed() < std::time::Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        w.finish().unwrap();
    }

    #[test]
    fn audit_files_rotate_by_size_and_resume_after_a_restart() {
        let d = tempdir("audit-rotate");
        let rotation = Rotation {
            max_bytes: 50_000,
            keep: 3,
        };
        let dir: Arc<Path> = Arc::from(&*d);
        for (from, to) in [(0, 1500), (1500, 2000)] {
            // The second writer appends to the file the first left mid-block.
            let w = LogWriter::start(rotation).unwrap();
            let h = w.handle().unwrap();
            for b in (from..to).step_by(10) {
                h.append_audit(&dir, audit_batch(b, 10));
            }
            w.finish().unwrap();
        }
        let path = d.join("envelope-history.jsonl");
        let files = rotated_files(&path);
        assert_eq!(files.len(), 4, "three rotated and the current: {files:?}");
        let mut next = None;
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            assert!(
                text.len() <= 50_000,
                "{} is {} bytes",
                f.display(),
                text.len()
            );
            for l in text.lines() {
                let n: usize = l[5..10].parse().unwrap();
                if let Some(want) = next {
                    assert_eq!(n, want, "oldest first, none lost between files");
                }
                next = Some(n + 1);
            }
        }
        assert_eq!(next, Some(2000), "the newest line is in the current file");
    }

    #[test]
    fn a_full_queue_drops_counts_and_reports_instead_of_blocking() {
        let d = tempdir("full");
        let w = LogWriter::with_capacity(Rotation::default(), 4).unwrap();
        let h = w.handle().unwrap();
        let dir: Arc<Path> = Arc::from(&*d);
        // Something the writer has logged, so it knows where to report.
        let batch =
            || AuditBatch::from_lines(AuditFile::EnvelopeHistory, 1, b"{\"event\":\"received\"}\n");
        assert!(h.append_audit(&dir, batch()));
        w.flush();
        let (hold_tx, hold_rx) = sync_channel(0);
        let (holding_tx, holding_rx) = sync_channel(1);
        h.tx.send(Cmd::Hold(holding_tx, hold_rx)).unwrap();
        holding_rx.recv().unwrap();
        let started = std::time::Instant::now();
        for _ in 0..100 {
            assert!(h.append_audit(&dir, batch()));
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "never blocks"
        );
        assert_eq!(h.dropped(), 96);
        drop(hold_tx);
        w.flush();
        let text = std::fs::read_to_string(d.join("envelope-history.jsonl")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + 4 + 1);
        let last: serde_json::Value = serde_json::from_str(lines[5]).unwrap();
        assert_eq!(last["event"], "audit_dropped");
        assert_eq!(last["count"], 96);
        w.finish().unwrap();
    }
}
