//! Plain `std::fs` helpers: configuration text, token files, and the appending log writer.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use bytes::Bytes;
use thiserror::Error;

/// A file that could not be read, with its path for a one-line message.
#[derive(Debug, Error)]
#[error("cannot read {path}: {source}")]
pub struct ReadError {
    /// The file.
    pub path: PathBuf,
    /// The cause.
    #[source]
    pub source: io::Error,
}

/// Reads a configuration file; returns its text and the folder it sits in (where `.mew/` lives).
pub fn read_config(path: &Path) -> Result<(String, PathBuf), ReadError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReadError {
        path: path.to_owned(),
        source,
    })?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_owned)
        .unwrap_or_else(|| PathBuf::from("."));
    Ok((text, dir))
}

/// Where a space's files live, from the path of its `space.yaml`, by the reference's rules
/// (both layouts it uses: `<space>/.mew/space.yaml`, written by its `mew init`, and
/// `<space>/space.yaml`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceLayout {
    /// The space folder: token files are in `<root>/.mew/tokens/`.
    pub root: PathBuf,
    /// The folder of `space.yaml`: relative `cwd`s of started processes resolve here.
    pub config_dir: PathBuf,
    /// Where the audit logs go: `<config folder>/.mew/logs` when that `.mew/` exists, else
    /// `<config folder>/logs` (so `<space>/.mew/space.yaml` logs to `<space>/.mew/logs`).
    pub log_dir: PathBuf,
}

impl SpaceLayout {
    /// The layout of the space whose configuration is at `config` (a file path). The log
    /// folder depends on whether `<config folder>/.mew/` exists when this is called.
    pub fn for_config(config: &Path) -> SpaceLayout {
        let config_dir = config
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_owned)
            .unwrap_or_else(|| PathBuf::from("."));
        let inside_mew = config_dir.file_name().is_some_and(|n| n == ".mew");
        let root = if inside_mew {
            config_dir
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map(Path::to_owned)
                .unwrap_or_else(|| PathBuf::from("."))
        } else {
            config_dir.clone()
        };
        let nested = config_dir.join(".mew");
        let log_dir = if nested.is_dir() {
            nested.join("logs")
        } else {
            config_dir.join("logs")
        };
        SpaceLayout {
            root,
            config_dir,
            log_dir,
        }
    }
}

/// `<base>/.mew/tokens/<id>.token`, the reference's token file location (`base` is the space
/// folder, [`SpaceLayout::root`]).
pub fn token_path(base: &Path, participant: &str) -> PathBuf {
    base.join(".mew")
        .join("tokens")
        .join(format!("{participant}.token"))
}

/// The token stored for `participant`, trimmed; `None` when absent, unreadable or empty.
pub fn read_token_file(base: &Path, participant: &str) -> Option<String> {
    // Ids come from the config; refuse any that would escape the tokens folder.
    if participant.contains(['/', '\\']) || participant.starts_with('.') {
        return None;
    }
    let t = std::fs::read_to_string(token_path(base, participant)).ok()?;
    let t = t.trim();
    (!t.is_empty()).then(|| t.to_owned())
}

/// Writes a generated token (mode 0600 on Unix), creating the folder.
pub fn write_token_file(base: &Path, participant: &str, token: &str) -> io::Result<PathBuf> {
    if participant.contains(['/', '\\']) || participant.starts_with('.') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("participant id {participant:?} is not a file name"),
        ));
    }
    let path = token_path(base, participant);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut opts = OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&path)?;
    f.write_all(token.as_bytes())?;
    f.write_all(b"\n")?;
    Ok(path)
}

/// The environment variable the reference reads a participant's token from:
/// `MEW_TOKEN_<ID>`, upper case, `-` as `_`.
pub fn token_env_name(participant: &str) -> String {
    let mut s = String::from("MEW_TOKEN_");
    s.extend(participant.chars().map(|c| {
        if c == '-' {
            '_'
        } else {
            c.to_ascii_uppercase()
        }
    }));
    s
}

enum Cmd {
    Line(PathBuf, Bytes),
    Flush(SyncSender<()>),
    Stop,
}

/// Appends JSON lines to files from a dedicated thread behind a bounded channel.
///
/// Writers are buffered and flushed whenever the channel runs empty, so a burst costs one
/// write per buffer rather than per line, and a quiet log is on disk within moments.
/// [`LogWriter::append`] blocks when the channel is full: back-pressure rather than lost
/// audit lines or unbounded memory.
pub struct LogWriter {
    tx: Option<SyncSender<Cmd>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

/// How many lines may wait for the writer thread.
pub const LOG_QUEUE: usize = 8192;
/// How many files the writer keeps open at once.
const MAX_OPEN: usize = 64;

impl LogWriter {
    /// Starts the writer thread.
    pub fn start() -> io::Result<LogWriter> {
        let (tx, rx) = sync_channel(LOG_QUEUE);
        let thread = std::thread::Builder::new()
            .name("mew-log-writer".into())
            .spawn(move || run_writer(rx))?;
        Ok(LogWriter {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues `line` (without its newline) for `path`. Returns false after the writer stopped.
    pub fn append(&self, path: impl Into<PathBuf>, line: Bytes) -> bool {
        match &self.tx {
            Some(tx) => tx.send(Cmd::Line(path.into(), line)).is_ok(),
            None => false,
        }
    }

    /// A cheap handle for other threads or tasks.
    pub fn handle(&self) -> Option<LogHandle> {
        self.tx.clone().map(LogHandle)
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

/// A clonable sender into a [`LogWriter`].
#[derive(Clone)]
pub struct LogHandle(SyncSender<Cmd>);

impl LogHandle {
    /// Queues `line` for `path`; blocks while the queue is full. False after the writer stopped.
    pub fn append(&self, path: impl Into<PathBuf>, line: Bytes) -> bool {
        self.0.send(Cmd::Line(path.into(), line)).is_ok()
    }
}

fn open_append(path: &Path) -> io::Result<BufWriter<File>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let f = OpenOptions::new().create(true).append(true).open(path)?;
    Ok(BufWriter::with_capacity(64 * 1024, f))
}

fn run_writer(rx: Receiver<Cmd>) -> io::Result<()> {
    let mut files: BTreeMap<PathBuf, BufWriter<File>> = BTreeMap::new();
    let mut first_err: Option<io::Error> = None;
    let note = |e: io::Error, first_err: &mut Option<io::Error>| {
        if first_err.is_none() {
            *first_err = Some(e);
        }
    };
    let flush_all = |files: &mut BTreeMap<PathBuf, BufWriter<File>>,
                     first_err: &mut Option<io::Error>| {
        for w in files.values_mut() {
            if let Err(e) = w.flush() {
                first_err.get_or_insert(e);
            }
        }
    };
    'outer: while let Ok(cmd) = rx.recv() {
        let mut next = Some(cmd);
        while let Some(cmd) = next.take() {
            match cmd {
                Cmd::Line(path, line) => {
                    if !files.contains_key(&path) {
                        if files.len() >= MAX_OPEN {
                            flush_all(&mut files, &mut first_err);
                            files.clear();
                        }
                        match open_append(&path) {
                            Ok(w) => {
                                files.insert(path.clone(), w);
                            }
                            Err(e) => {
                                note(e, &mut first_err);
                                next = rx.try_recv().ok();
                                continue;
                            }
                        }
                    }
                    if let Some(w) = files.get_mut(&path) {
                        let r = w.write_all(&line).and_then(|_| w.write_all(b"\n"));
                        if let Err(e) = r {
                            note(e, &mut first_err);
                        }
                    }
                }
                Cmd::Flush(ack) => {
                    flush_all(&mut files, &mut first_err);
                    let _ = ack.send(());
                }
                Cmd::Stop => break 'outer,
            }
            next = rx.try_recv().ok();
        }
        flush_all(&mut files, &mut first_err);
    }
    flush_all(&mut files, &mut first_err);
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("mew-common-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn writes_lines_in_order_and_flushes_on_finish() {
        let d = tempdir("log");
        let w = LogWriter::start().unwrap();
        let a = d.join("logs/a.jsonl");
        let h = w.handle().unwrap();
        for i in 0..1000 {
            assert!(h.append(&a, Bytes::from(format!("{{\"n\":{i}}}"))));
        }
        w.flush();
        let text = std::fs::read_to_string(&a).unwrap();
        assert_eq!(text.lines().count(), 1000);
        assert!(w.append(d.join("b.jsonl"), Bytes::from_static(b"x")));
        w.finish().unwrap();
        assert_eq!(std::fs::read_to_string(d.join("b.jsonl")).unwrap(), "x\n");
        // The writer is gone: a handle that outlived it reports so instead of blocking.
        assert!(!h.append(&a, Bytes::from_static(b"late")));
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines[999], "{\"n\":999}");
    }

    #[test]
    fn reports_an_unwritable_path() {
        let d = tempdir("bad");
        std::fs::write(d.join("file"), "x").unwrap();
        let w = LogWriter::start().unwrap();
        w.append(d.join("file/inside.jsonl"), Bytes::from_static(b"x"));
        assert!(w.finish().is_err());
    }

    #[test]
    fn token_files_round_trip_with_private_mode() {
        let d = tempdir("tok");
        assert_eq!(read_token_file(&d, "agent"), None);
        let p = write_token_file(&d, "agent", "t0k").unwrap();
        assert_eq!(read_token_file(&d, "agent").as_deref(), Some("t0k"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(write_token_file(&d, "../evil", "x").is_err());
        assert_eq!(read_token_file(&d, "../evil"), None);
        assert_eq!(token_env_name("my-agent"), "MEW_TOKEN_MY_AGENT");
    }

    #[test]
    fn layouts_of_the_reference() {
        let d = tempdir("layout");
        // <space>/.mew/space.yaml: logs in <space>/.mew/logs, tokens in <space>/.mew/tokens.
        std::fs::create_dir_all(d.join("a/.mew")).unwrap();
        let l = SpaceLayout::for_config(&d.join("a/.mew/space.yaml"));
        assert_eq!(l.root, d.join("a"));
        assert_eq!(l.log_dir, d.join("a/.mew/logs"));
        assert_eq!(token_path(&l.root, "x"), d.join("a/.mew/tokens/x.token"));
        // <space>/space.yaml beside an existing .mew/: logs in <space>/.mew/logs.
        std::fs::create_dir_all(d.join("b/.mew")).unwrap();
        let l = SpaceLayout::for_config(&d.join("b/space.yaml"));
        assert_eq!(
            (l.root.clone(), l.log_dir),
            (d.join("b"), d.join("b/.mew/logs"))
        );
        assert_eq!(l.config_dir, d.join("b"));
        // <space>/space.yaml with no .mew/: the folder itself.
        std::fs::create_dir_all(d.join("c")).unwrap();
        let l = SpaceLayout::for_config(&d.join("c/space.yaml"));
        assert_eq!(l.log_dir, d.join("c/logs"));
        // A bare file name in the working directory.
        let l = SpaceLayout::for_config(Path::new("space.yaml"));
        assert_eq!(l.root, PathBuf::from("."));
    }

    #[test]
    fn config_read_reports_the_path() {
        let e = read_config(Path::new("/nonexistent/space.yaml")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot read /nonexistent/space.yaml:")
        );
        let d = tempdir("cfg");
        std::fs::write(d.join("space.yaml"), "a: 1").unwrap();
        let (text, base) = read_config(&d.join("space.yaml")).unwrap();
        assert_eq!(text, "a: 1");
        assert_eq!(base, d);
        let (_, base) = read_config(Path::new("Cargo.toml")).unwrap();
        assert_eq!(base, PathBuf::from("."));
    }
}
