//! Where a message waits inside the gateway process: with `MEW_HOP_TRACE=<file>` in the
//! environment, every envelope whose id begins with `hop-<n>` is timestamped at each hop
//! of its way (the reader has it, the core applies it, the core's pass hands it to the
//! writers, each writer takes it, each writer has written it), and the stamps are appended
//! to the file as lines `<n> <hop> <conn> <ns>` (`CLOCK_MONOTONIC` nanoseconds, the clock
//! every process of the machine shares, so a client's own stamps line up with them).
//! `benches/external` sends such envelopes and prints the breakdown. Unset, each hop costs
//! one load of a flag.

use std::io::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};

/// A point on a message's way through the gateway process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    /// The connection's reader decoded the frame.
    Read = 0,
    /// The core task applies it.
    Apply = 1,
    /// The core's pass ended: its frames went to the writers' queues.
    Handed = 2,
    /// A writer took it from its queue.
    Taken = 3,
    /// A writer's write of it returned.
    Written = 4,
}

/// 0: not looked at yet, 1: off, 2: on.
static STATE: AtomicU8 = AtomicU8::new(0);
static SINK: OnceLock<Mutex<Sink>> = OnceLock::new();

struct Sink {
    file: Option<std::fs::File>,
    lines: Vec<u8>,
    /// Ids applied in the core's pass in progress.
    pass: Vec<u64>,
}

/// Whether tracing is on (`MEW_HOP_TRACE` set).
#[inline]
pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => init(),
    }
}

#[cold]
fn init() -> bool {
    let file = std::env::var_os("MEW_HOP_TRACE").and_then(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .ok()
    });
    let on = file.is_some();
    let _ = SINK.set(Mutex::new(Sink {
        file,
        lines: Vec::new(),
        pass: Vec::new(),
    }));
    STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
    on
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    #[cfg(unix)]
    {
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
            .map(|ts| ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64)
            .unwrap_or(0)
    }
    #[cfg(not(unix))]
    {
        0
    }
}

/// The traced ids in `bytes` (`"id":"hop-<n>"`), each once.
pub fn traced_ids(bytes: &[u8], out: &mut Vec<u64>) {
    const NEEDLE: &[u8] = b"\"id\":\"hop-";
    let mut at = 0;
    while let Some(i) = find(&bytes[at..], NEEDLE) {
        let start = at + i + NEEDLE.len();
        let digits = bytes[start..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if let Some(n) = std::str::from_utf8(&bytes[start..start + digits])
            .ok()
            .and_then(|s| s.parse().ok())
            && !out.contains(&n)
        {
            out.push(n);
        }
        at = start + digits;
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Records `hop` for each of `ids` on connection `conn` now.
pub fn record(ids: &[u64], hop: Hop, conn: u64) {
    if ids.is_empty() {
        return;
    }
    let now = monotonic_ns();
    with_sink(|s| {
        for id in ids {
            let _ = writeln!(s.lines, "{id} {} {conn} {now}", hop as u8);
        }
        s.flush(false);
    });
}

/// The core applies `frame`: records it, and remembers it for the pass's end.
pub fn applied(frame: &[u8], conn: u64) {
    let mut ids = Vec::new();
    traced_ids(frame, &mut ids);
    if ids.is_empty() {
        return;
    }
    record(&ids, Hop::Apply, conn);
    with_sink(|s| s.pass.extend_from_slice(&ids));
}

/// The core's pass ended: what it applied went to the writers.
pub fn pass_end() {
    let ids = with_sink(|s| std::mem::take(&mut s.pass)).unwrap_or_default();
    record(&ids, Hop::Handed, 0);
}

fn with_sink<T>(f: impl FnOnce(&mut Sink) -> T) -> Option<T> {
    let m = SINK.get()?;
    let mut g = m.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    Some(f(&mut g))
}

impl Sink {
    fn flush(&mut self, all: bool) {
        if (all || self.lines.len() >= 16 * 1024)
            && let Some(f) = &mut self.file
        {
            let _ = f.write_all(&self.lines);
            self.lines.clear();
        }
    }
}

/// Writes out what is buffered (the gateway's shutdown).
pub fn flush() {
    if STATE.load(Ordering::Relaxed) == 2 {
        with_sink(|s| s.flush(true));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traced_ids_are_found_once_each() {
        let mut ids = Vec::new();
        traced_ids(
            br#"{"id":"hop-12","x":1}{"id":"m-3"}{"id":"hop-7"}{"id":"hop-12"}"#,
            &mut ids,
        );
        assert_eq!(ids, vec![12, 7]);
    }
}
