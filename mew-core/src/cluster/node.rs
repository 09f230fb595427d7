//! One node of a replicated space, without I/O: what to put into the log for each input,
//! what the entries it reads back mean for the sockets this node holds, when to beat, when
//! to push the space's timers along, and whether it is this node's turn to write a snapshot.
//!
//! The node owns its [`Replica`] and so the space's [`Gateway`]: a driver steps the node
//! alone, and drains the gateway's outputs for the sockets it holds from
//! [`Node::gateway_mut`].

use super::record::{Entry, Record};
use super::replica::{Replica, ReplicaEvent};
use crate::Time;
use crate::gateway::{
    Bearer, ConnId, Gateway, HttpAccepted, HttpError, may_need_entropy, node_error, take_join_token,
};
use crate::secret::{TokenHash, TokenSource};
use bytes::Bytes;
use std::collections::VecDeque;
use std::time::Duration;

/// Least spacing of two ticks: a tick comes back through the log, one at a time is enough.
const TICK_SPACING: Duration = Duration::from_millis(200);

/// How one node takes part in its space.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// This node's id, unique in the cluster and stable across its restarts.
    pub node_id: String,
    /// How often the node beats into the log.
    pub heartbeat: Duration,
    /// Silence after which the other nodes declare this one gone.
    pub node_timeout: Duration,
    /// Entries between snapshots (written by the live node with the smallest id).
    pub snapshot_every: u64,
    /// Snapshots leave live tokens out ([`Replica::snapshot_at_rest`]): for a single
    /// node's files, where no other replica must match them.
    pub snapshot_at_rest: bool,
}

impl NodeOptions {
    /// Defaults: 1 s heartbeat, 5 s timeout, a snapshot every 10,000 entries.
    pub fn new(node_id: &str) -> NodeOptions {
        NodeOptions {
            node_id: node_id.to_owned(),
            heartbeat: Duration::from_secs(1),
            node_timeout: Duration::from_secs(5),
            snapshot_every: 10_000,
            snapshot_at_rest: false,
        }
    }
}

/// What an input that the log did not take leaves to undo; handed back with
/// [`NodeInput::Refused`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undo {
    /// A connection waiting for its id.
    Connect(u64),
    /// A frame: its sender is told.
    Frame(ConnId),
    /// An HTTP post waiting for its answer.
    Post(u64),
    /// Nothing waits for this entry.
    Nothing,
}

/// Something the driver must carry out.
#[derive(Debug)]
pub enum NodeOutput {
    /// Put the record into the log; when the log refuses it, hand `undo` back.
    Publish {
        /// The record.
        record: Record,
        /// What to undo when it is refused.
        undo: Undo,
    },
    /// A connection this node published has its id: answer its socket and hold it (when
    /// the socket is gone meanwhile, report it with [`NodeInput::Disconnected`]).
    Connected {
        /// The node's number [`NodeInput::Connected`] answered.
        local: u64,
        /// The space's id for it.
        conn: ConnId,
    },
    /// A connection the log did not take: drop it unanswered, which ends it.
    Abandon {
        /// The node's number [`NodeInput::Connected`] answered.
        local: u64,
    },
    /// A post this node published was applied: answer it.
    Posted {
        /// The node's number [`NodeInput::Post`] answered.
        local: u64,
        /// The gateway's answer.
        result: Result<HttpAccepted, HttpError>,
    },
    /// A post the log did not take: answer 503 with this message.
    PostRefused {
        /// The node's number [`NodeInput::Post`] answered.
        local: u64,
        /// Why.
        message: String,
    },
    /// A frame of the node's own (a `system/error` about its log) for one connection.
    Direct {
        /// The connection.
        conn: ConnId,
        /// The frame.
        frame: Bytes,
    },
    /// Close a socket after what is queued for it.
    Close {
        /// The connection.
        conn: ConnId,
        /// Close code.
        code: u16,
        /// Close reason.
        reason: String,
        /// Whether the space has already let it go (forget it without logging its close).
        forget: bool,
    },
    /// Store this snapshot of the replica after entry `applied`.
    Snapshot {
        /// The last entry it includes.
        applied: u64,
        /// The snapshot ([`Replica::restore`] reads it).
        bytes: Vec<u8>,
    },
    /// A node was declared gone.
    NodeGone {
        /// Which.
        node: String,
        /// How many connections it held.
        connections: usize,
    },
    /// Something to log: an unreadable entry skipped, a snapshot not taken.
    Warning(String),
    /// The replica cannot go on (a gap in the log): the node must restart from a snapshot.
    Broken(String),
}

/// What happened on the driver's side: the inputs [`Node::handle_input`] takes (the table
/// on [`Node`] says what each may queue).
#[derive(Debug)]
pub enum NodeInput<'a> {
    /// The node starts serving: it announces itself (which ends whatever it held in an
    /// earlier life) and starts beating.
    Start,
    /// Whether the log can be reached. While it cannot, no beats or ticks are queued:
    /// stale beats arriving in a burst after an outage would make the others look silent.
    LogState {
        /// Reachable.
        up: bool,
    },
    /// A WebSocket completed its handshake with this bearer token; answered with the
    /// node's number for it ([`NodeAnswer::Local`]), named again by `Connected` or
    /// `Abandon`. A token the space's identity verifier takes (a JWT) is judged here,
    /// where it arrived, and its judgement logged (no replica could check it again, and
    /// the log holds no token); any other goes in by digest.
    Connected {
        /// The `Authorization` header's token.
        bearer: Bearer<'a>,
    },
    /// A frame from a connection this node holds. A join's token never enters the log: it
    /// is judged here when the identity verifier takes it, else sealed (only its digest
    /// is logged).
    Frame {
        /// The connection.
        conn: ConnId,
        /// The frame.
        frame: Bytes,
    },
    /// A frame over the size limit: the space refuses it, then the socket closes (1009).
    Oversize {
        /// The connection.
        conn: ConnId,
        /// The frame's size.
        size: usize,
    },
    /// A pong: the connection is alive.
    Pong {
        /// The connection.
        conn: ConnId,
    },
    /// A connection this node held ended.
    Disconnected {
        /// The connection.
        conn: ConnId,
    },
    /// A connection this node holds fell too far behind
    /// ([`Gateway::backlog_exceeded`]).
    Slow {
        /// The connection.
        conn: ConnId,
    },
    /// `POST /participants/{participant}/messages`; answered with the node's number for it
    /// ([`NodeAnswer::Local`]), named again by `Posted` or `PostRefused`. The log holds the
    /// bearer token's digest (a post is authenticated by the tokens the space keeps, never
    /// a judged one).
    Post {
        /// The participant of the path.
        participant: String,
        /// The `Authorization` header's token.
        bearer: Bearer<'a>,
        /// The body.
        body: Bytes,
    },
    /// The log did not take an entry: whoever waits for it learns so.
    Refused {
        /// What the `Publish` said to undo.
        undo: Undo,
        /// Why (for the message to whoever waits).
        why: &'a str,
    },
    /// Entry `seq` of the log, as stored: applied to the replica (and its gateway, whose
    /// outputs the driver drains afterwards).
    Entry {
        /// Its position in the log.
        seq: u64,
        /// Its bytes.
        bytes: Bytes,
    },
    /// [`NodeInput::Entry`] for a record this node holds whole: a single node whose log is
    /// its own file applies what it publishes without reading its bytes back.
    Record {
        /// Its position in the log.
        seq: u64,
        /// The record.
        record: Record,
    },
    /// [`NodeInput::Record`] for a record this node published; answered with whether it
    /// only carried a message ([`NodeAnswer::MessageOnly`]): a `chat` the space accepted,
    /// a stream's data, a pong, a beat or a tick, which change nothing a space keeps but
    /// its history (or what time redoes). A node whose log is a local file may let such a
    /// record's effects out once the record is written, before it is flushed to the disk;
    /// anything else (a grant, a revocation, an invitation, a join, a post, a refused
    /// frame, ...) is flushed first.
    OwnRecord {
        /// Its position in the log.
        seq: u64,
        /// The record.
        record: Record,
    },
    /// The driver carried out the gateway's outputs after a batch of entries: sockets
    /// whose oversize refusal is out close, and the node elected for it (the live node
    /// with the smallest id) takes a snapshot when one is due.
    Drained,
    /// Time passed: a beat when one is due, a tick when a timer of the space is (one in
    /// flight at a time). Cheap; drivers give it after every pass of their loop.
    Timeout,
}

/// What an input answers at once (most answer nothing: what they cause is queued as
/// [`NodeOutput`]s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeAnswer {
    /// Nothing.
    Nothing,
    /// [`NodeInput::Connected`], [`NodeInput::Post`]: the node's number for the input.
    Local(u64),
    /// [`NodeInput::OwnRecord`]: whether the record only carried a message.
    MessageOnly(bool),
}

impl NodeAnswer {
    /// The number of [`NodeAnswer::Local`].
    pub fn local(self) -> Option<u64> {
        match self {
            NodeAnswer::Local(n) => Some(n),
            _ => None,
        }
    }

    /// The flag of [`NodeAnswer::MessageOnly`].
    pub fn message_only(self) -> Option<bool> {
        match self {
            NodeAnswer::MessageOnly(m) => Some(m),
            _ => None,
        }
    }
}

/// One node's part of a replicated space (see the module's documentation).
///
/// A driver feeds it what happens on its sockets, its HTTP endpoint and its log, one
/// [`NodeInput`] at a time through [`Node::handle_input`], and carries out the
/// [`NodeOutput`]s it queues, draining [`Node::poll_output`] (and the gateway's outputs,
/// from [`Node::gateway_mut`], after entries) after every input:
///
/// | input | answer | what it may queue |
/// |---|---|---|
/// | [`NodeInput::Start`] | | `Publish` (`NodeUp`) |
/// | [`NodeInput::Connected`], [`NodeInput::Post`] | [`NodeAnswer::Local`] | `Publish` |
/// | [`NodeInput::Frame`], [`NodeInput::Oversize`], [`NodeInput::Pong`], [`NodeInput::Disconnected`], [`NodeInput::Slow`] | | `Publish` |
/// | [`NodeInput::Refused`] | | `Abandon`, `Direct`, `PostRefused` |
/// | [`NodeInput::Entry`], [`NodeInput::Record`] | | `Connected`, `Posted`, `Close`, `NodeGone`, `Warning`, `Broken` |
/// | [`NodeInput::OwnRecord`] | [`NodeAnswer::MessageOnly`] | the same |
/// | [`NodeInput::Drained`] | | `Close` (oversize), `Snapshot`, `Warning` |
/// | [`NodeInput::Timeout`] (when [`poll_timeout`](Self::poll_timeout) says) | | `Publish` (`Beat`, `Tick`) |
/// | [`NodeInput::LogState`] | | nothing: beats and ticks wait while the log is down |
///
/// An entry ([`NodeInput::Entry`], [`NodeInput::Record`], [`NodeInput::OwnRecord`])
/// ignores `now`: it takes effect at the time it carries, the same on every node. Commands
/// that are no input ([`Node::request_snapshot`]) and queries stay methods.
pub struct Node {
    opts: NodeOptions,
    replica: Replica,
    /// Where the entropy of the records that may mint a token comes from.
    tokens: Box<dyn TokenSource>,
    /// The log's last entry when the node started: inputs wait until it is applied.
    log_last: u64,
    log_up: bool,
    next_local: u64,
    next_beat: Option<Time>,
    tick_sent: Option<Time>,
    last_snapshot: u64,
    errors: u64,
    /// Connections whose oversize entry this node published and has not seen applied.
    oversize: Vec<ConnId>,
    /// Oversize entries applied: their sockets close once the refusal is out.
    oversize_done: Vec<ConnId>,
    /// A snapshot was asked for before the cadence's next.
    snapshot_asked: bool,
    out: VecDeque<NodeOutput>,
    /// `opts.node_id`, shared by the records this node publishes (not copied for each).
    id: std::sync::Arc<str>,
}

impl Node {
    /// A node over `replica` (new or restored), whose log held `log_last` entries when the
    /// node started. `tokens` gives the randomness a record carries when its input may
    /// mint an invitation token (the operating system's CSPRNG in servers).
    pub fn new(
        opts: NodeOptions,
        replica: Replica,
        log_last: u64,
        tokens: Box<dyn TokenSource>,
    ) -> Node {
        let last_snapshot = replica.applied();
        Node {
            id: std::sync::Arc::from(opts.node_id.as_str()),
            opts,
            replica,
            tokens,
            log_last,
            log_up: true,
            next_local: 0,
            next_beat: None,
            tick_sent: None,
            last_snapshot,
            errors: 0,
            oversize: Vec::new(),
            oversize_done: Vec::new(),
            snapshot_asked: false,
            out: VecDeque::new(),
        }
    }

    /// The replica.
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// The space's gateway (queries).
    pub fn gateway(&self) -> &Gateway {
        self.replica.gateway()
    }

    /// The space's gateway, to drain its outputs after the node's inputs and entries (and
    /// for the inputs a single node applies outside its log: a reload, its shutdown).
    pub fn gateway_mut(&mut self) -> &mut Gateway {
        self.replica.gateway_mut()
    }

    /// The node's options.
    pub fn options(&self) -> &NodeOptions {
        &self.opts
    }

    /// The last entry applied.
    pub fn applied(&self) -> u64 {
        self.replica.applied()
    }

    /// Whether the node takes inputs: its replica has caught up with the log as it was
    /// when the node started, so what it answers is current.
    pub fn ready(&self) -> bool {
        self.replica.applied() >= self.log_last
    }

    /// The next output to carry out, in order.
    pub fn poll_output(&mut self) -> Option<NodeOutput> {
        self.out.pop_front()
    }

    /// When [`NodeInput::Timeout`] is due next.
    pub fn poll_timeout(&self) -> Option<Time> {
        let tick = if self.log_up {
            self.gateway()
                .poll_timeout()
                .map(|due| match self.tick_sent {
                    Some(t) => due.max(t + TICK_SPACING),
                    None => due,
                })
        } else {
            None
        };
        match (self.next_beat, tick) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // ---- the one entry of inputs ----

    /// Applies one input (see the table on [`Node`]); what it answers at once, if anything.
    /// Drain [`Node::poll_output`] afterwards.
    pub fn handle_input(&mut self, now: Time, input: NodeInput<'_>) -> NodeAnswer {
        match input {
            NodeInput::Start => self.on_start(now),
            NodeInput::LogState { up } => self.log_up = up,
            NodeInput::Connected { bearer } => {
                return NodeAnswer::Local(self.on_connected(now, bearer));
            }
            NodeInput::Frame { conn, frame } => self.on_frame(now, conn, frame),
            NodeInput::Oversize { conn, size } => {
                self.oversize.push(conn);
                self.publish(now, Entry::Oversize { conn, size }, Undo::Nothing, false);
            }
            NodeInput::Pong { conn } => {
                self.publish(now, Entry::Pong { conn }, Undo::Nothing, false);
            }
            NodeInput::Disconnected { conn } => {
                self.publish(now, Entry::Closed { conn }, Undo::Nothing, false);
            }
            NodeInput::Slow { conn } => {
                self.publish(now, Entry::Slow { conn }, Undo::Nothing, false);
            }
            NodeInput::Post {
                participant,
                bearer,
                body,
            } => return NodeAnswer::Local(self.on_post(now, participant, bearer, body)),
            NodeInput::Refused { undo, why } => self.on_refused(now, undo, why),
            NodeInput::Entry { seq, bytes } => self.on_entry(seq, bytes),
            NodeInput::Record { seq, record } => self.on_record(seq, record),
            NodeInput::OwnRecord { seq, record } => {
                return NodeAnswer::MessageOnly(self.on_own_record(seq, record));
            }
            NodeInput::Drained => self.on_drained(),
            NodeInput::Timeout => self.on_timeout(now),
        }
        NodeAnswer::Nothing
    }

    fn publish(&mut self, now: Time, entry: Entry, undo: Undo, entropy: bool) {
        let entropy = if entropy { self.tokens.entropy() } else { None };
        let record = Record {
            node: self.id.clone(),
            at: now,
            entropy,
            entry,
        };
        self.out.push_back(NodeOutput::Publish { record, undo });
    }

    /// [`NodeInput::Start`].
    fn on_start(&mut self, now: Time) {
        let timeout = self.opts.node_timeout;
        self.publish(now, Entry::NodeUp { timeout }, Undo::Nothing, false);
        self.next_beat = Some(now + self.opts.heartbeat);
    }

    /// [`NodeInput::Connected`].
    fn on_connected(&mut self, now: Time, bearer: Bearer<'_>) -> u64 {
        let token = match bearer {
            Bearer::None => None,
            Bearer::Token(t) => match self.gateway().judge_token(t) {
                Some(judged) => {
                    return self.connect(now, |local| Entry::ConnectJudged { local, judged });
                }
                None => Some(TokenHash::of(t)),
            },
            Bearer::Hashed(h) => Some(h),
            Bearer::Judged(judged) => {
                return self.connect(now, |local| Entry::ConnectJudged { local, judged });
            }
        };
        self.connect(now, |local| Entry::Connect { local, token })
    }

    /// Publishes a connection's entry under the node's next number for it.
    fn connect(&mut self, now: Time, entry: impl FnOnce(u64) -> Entry) -> u64 {
        self.next_local += 1;
        let local = self.next_local;
        self.publish(now, entry(local), Undo::Connect(local), false);
        local
    }

    /// [`NodeInput::Frame`].
    fn on_frame(&mut self, now: Time, conn: ConnId, frame: Bytes) {
        let joined = self.gateway().conn_joined(conn);
        let entry = match (!joined).then(|| take_join_token(&frame)).flatten() {
            Some((frame, token)) => match self.gateway().judge_token(&token) {
                Some(judged) => Entry::JudgedJoin {
                    conn,
                    frame,
                    judged,
                },
                None => Entry::SealedJoin {
                    conn,
                    frame,
                    token: TokenHash::of(&token),
                },
            },
            None => Entry::Frame { conn, frame },
        };
        // Drawing entropy for every chat costs a share of a system call each, and the
        // bytes in every record: only a frame that may mint a token carries it.
        let entropy = match &entry {
            Entry::SealedJoin { frame, .. }
            | Entry::JudgedJoin { frame, .. }
            | Entry::Frame { frame, .. } => may_need_entropy(frame),
            _ => true,
        };
        self.publish(now, entry, Undo::Frame(conn), entropy);
    }

    /// [`NodeInput::Post`].
    fn on_post(&mut self, now: Time, participant: String, bearer: Bearer<'_>, body: Bytes) -> u64 {
        let token = match bearer {
            Bearer::None => None,
            Bearer::Token(t) => Some(TokenHash::of(t)),
            Bearer::Hashed(h) => Some(h),
            // No member holds it: the digest of nothing a space lists, refused alike.
            Bearer::Judged(_) => Some(TokenHash::of("")),
        };
        self.next_local += 1;
        let local = self.next_local;
        let entry = Entry::Post {
            local,
            participant,
            token,
            body,
        };
        self.publish(now, entry, Undo::Post(local), true);
        local
    }

    /// [`NodeInput::Refused`].
    fn on_refused(&mut self, now: Time, undo: Undo, why: &str) {
        self.errors += 1;
        let message =
            format!("the space's log did not take this input ({why}); it was not accepted");
        match undo {
            Undo::Connect(local) => self.out.push_back(NodeOutput::Abandon { local }),
            Undo::Frame(conn) => {
                let id = format!("{}-err-{}", self.opts.node_id, self.errors);
                let frame = node_error(&id, now, "log_unavailable", &message);
                self.out.push_back(NodeOutput::Direct { conn, frame });
            }
            Undo::Post(local) => self
                .out
                .push_back(NodeOutput::PostRefused { local, message }),
            Undo::Nothing => {}
        }
    }

    /// [`NodeInput::Entry`].
    fn on_entry(&mut self, seq: u64, bytes: Bytes) {
        match Record::decode(bytes) {
            Ok(rec) => self.on_record(seq, rec),
            Err(e) => {
                self.out.push_back(NodeOutput::Warning(format!(
                    "unreadable log entry {seq} skipped: {e}"
                )));
                self.replica.handle_unreadable(seq);
                self.replica_events();
            }
        }
    }

    /// [`NodeInput::Record`].
    fn on_record(&mut self, seq: u64, rec: Record) {
        if let Entry::Oversize { conn, .. } = rec.entry
            && *rec.node == *self.opts.node_id
            && let Some(i) = self.oversize.iter().position(|c| *c == conn)
        {
            self.oversize.swap_remove(i);
            self.oversize_done.push(conn);
        }
        if let Err(e) = self.replica.handle_record(seq, rec) {
            self.out.push_back(NodeOutput::Broken(format!(
                "{e}; this node must restart from the latest snapshot"
            )));
            return;
        }
        self.replica_events();
    }

    /// [`NodeInput::OwnRecord`].
    fn on_own_record(&mut self, seq: u64, rec: Record) -> bool {
        let message = match &rec.entry {
            // A tick's effects (timers: pings, expiries) follow from the time alone: a
            // restart that lost it does the same at its first tick.
            Entry::Beat | Entry::Pong { .. } | Entry::Tick => Some(true),
            Entry::Frame { frame, .. } if frame.first() == Some(&b'#') => Some(true),
            Entry::Frame { .. } => None,
            _ => Some(false),
        };
        let chats = self.gateway().stats().chats_received();
        self.on_record(seq, rec);
        message.unwrap_or_else(|| self.gateway().stats().chats_received() == chats + 1)
    }

    fn replica_events(&mut self) {
        while let Some(ev) = self.replica.poll_output() {
            let o = match ev {
                ReplicaEvent::Connected { local, conn } => NodeOutput::Connected { local, conn },
                ReplicaEvent::Posted { local, result } => NodeOutput::Posted { local, result },
                ReplicaEvent::NodeGone { node, connections } => {
                    NodeOutput::NodeGone { node, connections }
                }
                ReplicaEvent::Evicted { conns } => {
                    for conn in conns {
                        self.out.push_back(NodeOutput::Close {
                            conn,
                            code: 1001,
                            reason: "this gateway node lost the space's log".into(),
                            forget: true,
                        });
                    }
                    continue;
                }
            };
            self.out.push_back(o);
        }
    }

    /// [`NodeInput::Drained`].
    fn on_drained(&mut self) {
        for conn in std::mem::take(&mut self.oversize_done) {
            self.out.push_back(NodeOutput::Close {
                conn,
                code: 1009,
                reason: "frame too large".into(),
                forget: false,
            });
        }
        let applied = self.replica.applied();
        let elected = self.replica.live_nodes().next() == Some(self.opts.node_id.as_str());
        // One asked for is made even with nothing applied since the last: a reload changes
        // the space outside the log.
        let due = applied >= self.last_snapshot + self.opts.snapshot_every || self.snapshot_asked;
        if elected && due {
            self.last_snapshot = applied;
            self.snapshot_asked = false;
            let snap = if self.opts.snapshot_at_rest {
                self.replica.snapshot_at_rest()
            } else {
                self.replica.snapshot()
            };
            match snap {
                Ok(bytes) => self.out.push_back(NodeOutput::Snapshot { applied, bytes }),
                Err(e) => self
                    .out
                    .push_back(NodeOutput::Warning(format!("no snapshot: {e}"))),
            }
        }
    }

    /// Asks for a snapshot at the next [`NodeInput::Drained`], before the cadence's
    /// next (a driver whose log files grew large, or that must not keep an entry's
    /// entropy).
    pub fn request_snapshot(&mut self) {
        self.snapshot_asked = true;
    }

    /// [`NodeInput::Timeout`].
    fn on_timeout(&mut self, now: Time) {
        if let Some(at) = self.next_beat
            && now >= at
        {
            self.next_beat = Some(now + self.opts.heartbeat);
            if self.log_up {
                self.publish(now, Entry::Beat, Undo::Nothing, false);
            }
        }
        let due = self.gateway().poll_timeout().is_some_and(|t| t <= now);
        let spaced = self
            .tick_sent
            .is_none_or(|t| now.saturating_since(t) >= TICK_SPACING);
        if due && spaced && self.log_up {
            self.tick_sent = Some(now);
            self.publish(now, Entry::Tick, Undo::Nothing, false);
        }
    }
}
