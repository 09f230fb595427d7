//! Waiting in tests, written once: poll a condition until it holds or a deadline passes, and
//! read a WebSocket until an envelope matches. A test that times out panics naming what never
//! happened, so a failure says what was awaited rather than hanging.

use serde_json::Value;
use std::fmt::Display;
use std::io::{Read, Write};
use std::time::{Duration, Instant};
use tungstenite::{Message, WebSocket};

/// How often a condition is polled.
pub const POLL: Duration = Duration::from_millis(50);

/// Polls `f` every [`POLL`] until it returns `Some`, and returns that; panics naming `what`
/// when `within` passes first.
pub fn until<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    until_ok(what, within, || f().ok_or(""))
}

/// [`until`] for a condition that says what it saw while it does not hold (`Err`): the last
/// of these is in the panic message.
pub fn until_ok<T, E: Display>(
    what: &str,
    within: Duration,
    mut f: impl FnMut() -> Result<T, E>,
) -> T {
    let end = Instant::now() + within;
    loop {
        match f() {
            Ok(t) => return t,
            Err(last) if Instant::now() >= end => {
                let last = last.to_string();
                let seen = if last.is_empty() {
                    String::new()
                } else {
                    format!("; last seen:\n{last}")
                };
                panic!("timed out after {within:?} waiting for {what}{seen}");
            }
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// [`until`] for a condition that is a plain `bool`.
pub fn until_true(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    until(what, within, || f().then_some(()))
}

/// [`until`] inside a tokio runtime: sleeps without blocking the runtime's thread.
pub async fn until_async<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + within;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(
            Instant::now() < end,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Reads envelopes from `ws` until one satisfies `f`, and returns it; earlier envelopes are
/// consumed, and frames that are not JSON (`#stream#data` frames, pings) skipped. The
/// socket's read timeout bounds the wait: a read that fails, or a close, panics with it.
pub fn read_until<S: Read + Write>(ws: &mut WebSocket<S>, f: impl Fn(&Value) -> bool) -> Value {
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => {
                if let Ok(v) = serde_json::from_str::<Value>(&t)
                    && f(&v)
                {
                    return v;
                }
            }
            Ok(Message::Close(frame)) => panic!("closed while waiting for an envelope: {frame:?}"),
            Ok(_) => {}
            Err(e) => panic!("no matching envelope: {e}"),
        }
    }
}

/// [`read_until`] an envelope of kind `kind`.
pub fn read_kind<S: Read + Write>(ws: &mut WebSocket<S>, kind: &str) -> Value {
    read_until(ws, |v| v["kind"] == kind)
}
