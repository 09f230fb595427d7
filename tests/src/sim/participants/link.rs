//! A simulated WebSocket between one participant and the gateway: two FIFO directions,
//! each message arriving after a seeded latency but never before the one sent before it.

use bytes::Bytes;
use mew_core::Time;
use std::collections::VecDeque;

/// What travels on a link.
#[derive(Debug, Clone)]
pub enum Msg {
    /// A text frame.
    Frame(Bytes),
    /// A WebSocket ping (answered by the receiving driver with a pong).
    Ping,
    /// A WebSocket pong.
    Pong,
    /// A close frame; nothing after it is delivered.
    Close {
        /// Close code.
        code: u16,
        /// Reason.
        reason: String,
    },
}

/// One direction of a link.
#[derive(Debug, Default)]
pub struct Lane {
    queue: VecDeque<(Time, Msg)>,
    last: Option<Time>,
}

impl Lane {
    /// Queues `msg` to arrive at `at`, or with the previous message if that is later.
    pub fn push(&mut self, at: Time, msg: Msg) {
        let at = self.last.map_or(at, |l| l.max(at));
        self.last = Some(at);
        self.queue.push_back((at, msg));
    }

    /// When the head arrives.
    pub fn head(&self) -> Option<Time> {
        self.queue.front().map(|(t, _)| *t)
    }

    /// Takes the head.
    pub fn pop(&mut self) -> Option<Msg> {
        self.queue.pop_front().map(|(_, m)| m)
    }

    /// Messages in flight.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

/// Which way a message travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dir {
    /// Participant to gateway.
    Up,
    /// Gateway to participant.
    Down,
}

/// Both directions of one connection.
#[derive(Debug)]
pub struct Link {
    /// The node at the far end.
    pub node: usize,
    /// Participant to gateway.
    pub up: Lane,
    /// Gateway to participant.
    pub down: Lane,
    /// The gateway has closed (or been told of the close of) this connection.
    pub gateway_closed: bool,
}

impl Link {
    /// A fresh link to `node`.
    pub fn new(node: usize) -> Link {
        Link {
            node,
            up: Lane::default(),
            down: Lane::default(),
            gateway_closed: false,
        }
    }

    /// The lane going `dir`.
    pub fn lane(&mut self, dir: Dir) -> &mut Lane {
        match dir {
            Dir::Up => &mut self.up,
            Dir::Down => &mut self.down,
        }
    }
}
