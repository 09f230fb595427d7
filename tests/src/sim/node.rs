//! The cluster simulation's one door into a [`Node`]: every input goes through [`input`],
//! so a change to the node's entry points is a change to this file only.

use bytes::Bytes;
use mew_core::Time;
use mew_core::cluster::{Node, Undo};
use mew_core::gateway::{Bearer, ConnId};

/// Something a driver tells a node.
#[derive(Debug)]
pub enum Input<'a> {
    /// The node starts serving (or starts again after it died).
    Start,
    /// Whether the log can be reached.
    LogState {
        /// Reachable.
        up: bool,
    },
    /// A WebSocket completed its handshake.
    Connected {
        /// Its bearer token.
        bearer: Bearer<'a>,
    },
    /// A frame from a connection the node holds.
    Frame {
        /// Where.
        conn: ConnId,
        /// The frame.
        frame: Bytes,
    },
    /// A pong.
    Pong {
        /// Where.
        conn: ConnId,
    },
    /// A connection the node held ended.
    Disconnected {
        /// Which.
        conn: ConnId,
    },
    /// A connection the node holds fell too far behind.
    Slow {
        /// Which.
        conn: ConnId,
    },
    /// `POST /participants/{participant}/messages`.
    Post {
        /// The participant of the path.
        participant: String,
        /// Its bearer token.
        bearer: Bearer<'a>,
        /// The body.
        body: Bytes,
    },
    /// The log did not take a record the node published.
    Refused {
        /// What to undo.
        undo: Undo,
        /// Why.
        why: &'a str,
    },
    /// Entry `seq` of the log, as stored (it takes effect at the time it carries).
    Entry {
        /// Its position.
        seq: u64,
        /// Its bytes.
        bytes: Bytes,
    },
    /// The gateway's outputs after a batch of entries were carried out.
    Drained,
    /// Time passed.
    Timeout,
}

/// Hands one input to the node; the node's number for a new connection or post.
pub fn input(node: &mut Node, now: Time, input: Input<'_>) -> Option<u64> {
    match input {
        Input::Start => node.start(now),
        Input::LogState { up } => node.handle_log_state(now, up),
        Input::Connected { bearer } => return Some(node.handle_connected(now, bearer)),
        Input::Frame { conn, frame } => node.handle_frame(now, conn, frame),
        Input::Pong { conn } => node.handle_pong(now, conn),
        Input::Disconnected { conn } => node.handle_disconnected(now, conn),
        Input::Slow { conn } => node.handle_slow(now, conn),
        Input::Post {
            participant,
            bearer,
            body,
        } => return Some(node.handle_post(now, participant, bearer, body)),
        Input::Refused { undo, why } => node.handle_refused(now, undo, why),
        Input::Entry { seq, bytes } => node.handle_entry(seq, bytes),
        Input::Drained => node.handle_drained(),
        Input::Timeout => node.handle_timeout(now),
    }
    None
}
