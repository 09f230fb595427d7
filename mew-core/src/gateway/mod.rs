//! The gateway's space state machine (connections, enforcement, delivery, space operations).
//!
//! One [`Gateway`] is one space. Drivers feed it [`Input`]s (connections, text frames,
//! acknowledgements of written bytes, timer ticks) and drain [`Output`]s (frames to
//! transmit, pings, closes, log lines) and audit batches. Every protocol rule lives here; a
//! driver only moves bytes.
//!
//! Where the protocol is silent, this module decides (and the rest of the crate follows):
//! - Delivery ([`DeliveryMode`]): `all` (default) hands every accepted envelope to every
//!   member, the sender included; `addressed` sends a broadcast to everyone but the sender
//!   and a directed envelope only to the members its `to` names. Gateway messages addressed
//!   to one participant (welcome, error, invite token) go to that participant only in both.
//! - Revocation by pattern removes matching *runtime* grants only; capabilities from the
//!   space configuration change only by editing the configuration (see `grants.rs`).
//! - A paused participant may still send acknowledgements, cancellations, status, responses
//!   to work already requested and stream closes (see `pause.rs`).
//! - Pause, resume and shutdown apply to the participants the envelope's `to` names; a
//!   broadcast control envelope is delivered but changes no participant's state.
//! - Identity (3.6.4): the token decides who a connection is, so a participant's runtime id
//!   is always its logical name from the configuration (or its invited / anonymous id);
//!   `recipient` and `participant_id` fields resolve by that id.
//! - Participant envelopes missing `protocol`, `id`, `ts` or `from`, or with a bare-string
//!   `correlation_id`, are completed and re-serialised; every other envelope is forwarded as
//!   the exact bytes received, one shared buffer for all recipients.
//! - A connection is closed as a slow consumer (1013) when the frames or bytes handed to it
//!   and not yet reported written ([`Input::Sent`]) pass the configured limits; a
//!   single frame alone never counts as a backlog. Idle connections close with 1001, refused
//!   joins and kicks with 1008, replaced connections with 1000.
//! - A participant holds one connection (a new one replaces the old) unless configured as a
//!   person or with `connections: N` (see `member::Conns`): then each of its connections
//!   gets what it receives, the others see one presence, and under `addressed` delivery an
//!   envelope sent on one is delivered to its other connections.

mod audit;
mod config;
mod conn;
mod crowd;
mod deliver;
mod enforce;
mod grants;
mod heartbeat;
mod history;
mod http;
mod identity;
mod join;
mod member;
mod membership;
mod op;
mod outq;
mod pause;
pub mod rate;
mod refusal;
mod reload;
mod snapshot;
pub mod stats;
mod streams;
mod system;
mod workflow;

pub use audit::{
    AUDIT_BATCH_MAX, AuditBatch, AuditFile, AuditPieces, Direction, REFUSAL_WINDOW,
    REFUSALS_PER_WINDOW, Transport, audit_dropped_line,
};
pub use config::{
    BridgeSettings, ConfigError, ConfigErrors, ConfigWarning, ConnectionLimits, Crowd,
    DeliveryMode, Fsync, GatewayOptions, GeneratedToken, HeaderSource, JwtConfig, LoggingConfig,
    McpEndpoint, McpServerConfig, ParticipantEntry, ParticipantType, RestartPolicy, SpaceConfig,
    TOKEN_LEN, TlsConfig, substitute, token_env_var,
};
pub use http::{HttpAccepted, HttpError, check_space};
pub use identity::{CLOCK_LEEWAY, Identity, IdentityVerifier, Judgement, Verdict};
pub use join::{may_need_entropy, seal_join, take_join_token};
pub use outq::Polled;
pub use reload::ConfigChange;
pub use snapshot::SnapshotError;
pub use system::node_error;

use crate::Time;
use crate::ids::IdGen;
use crate::secret::{Entropy, TokenHash, TokenSource};
use bytes::Bytes;
use conn::Slab;
use deliver::Recipient;
use history::History;
use member::Members;
use std::fmt;
use std::sync::Arc;

/// Identifies one transport connection of a [`Gateway`]. Ids are never reused.
#[derive(
    Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct ConnId(u64);

impl ConnId {
    fn new(slot: u32, generation: u32) -> ConnId {
        ConnId(u64::from(generation) << 32 | u64::from(slot))
    }

    fn slot(self) -> usize {
        (self.0 & 0xFFFF_FFFF) as usize
    }

    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The id as a number (for logs and maps in drivers).
    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// The id [`ConnId::as_u64`] gave (a replicated space's log names connections so).
    pub fn from_u64(n: u64) -> ConnId {
        ConnId(n)
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn-{}.{}", self.slot(), self.generation())
    }
}

/// Something the driver must do or may log.
#[derive(Debug, Clone)]
pub enum Output {
    /// Send this text frame on the connection.
    Transmit {
        /// Where.
        conn: ConnId,
        /// The frame (shared between recipients; never copied per recipient).
        frame: Bytes,
    },
    /// Send a WebSocket ping on the connection.
    Ping {
        /// Where.
        conn: ConnId,
    },
    /// Close the connection (after the Transmits queued before this) with this code.
    Close {
        /// Which.
        conn: ConnId,
        /// WebSocket close code.
        code: u16,
        /// Human-readable reason.
        reason: String,
    },
    /// Append `line` (one JSON envelope and a newline) to a virtual participant's log.
    AppendLog {
        /// The participant's `output_log`, relative to the gateway's working directory.
        path: String,
        /// The line, newline included.
        line: Bytes,
    },
    /// Something happened (for logs and metrics). Boxed: events are rare and large, and
    /// every `Transmit` of a fan-out would otherwise be as wide as the widest event.
    Event(Box<GatewayEvent>),
}

/// Notable happenings, for logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayEvent {
    /// A participant joined on a connection.
    Joined {
        /// The connection.
        conn: ConnId,
        /// Who.
        participant: String,
    },
    /// A participant's new connection replaced its previous one.
    Replaced {
        /// The closed connection.
        old: ConnId,
        /// The new connection.
        new: ConnId,
        /// Who.
        participant: String,
    },
    /// A participant left (closed, idle, slow, kicked, shut down by the gateway).
    Left {
        /// The connection.
        conn: ConnId,
        /// Who.
        participant: String,
        /// Why.
        reason: String,
    },
    /// A connection was refused at join.
    JoinRefused {
        /// The connection.
        conn: ConnId,
        /// Machine-readable code.
        code: &'static str,
    },
    /// An envelope or frame was refused.
    Refused {
        /// The sender.
        participant: String,
        /// Machine-readable code.
        code: &'static str,
    },
    /// A grant took effect.
    Granted {
        /// The granter.
        by: String,
        /// The recipient.
        participant: String,
        /// The grant envelope's id.
        grant_id: String,
    },
    /// Runtime capabilities were revoked.
    Revoked {
        /// Who revoked.
        by: String,
        /// Whose.
        participant: String,
        /// How many capabilities were removed.
        removed: usize,
    },
    /// A participant was invited.
    Invited {
        /// The inviter.
        by: String,
        /// The invited id.
        participant: String,
    },
    /// A participant was kicked.
    Kicked {
        /// Who kicked.
        by: String,
        /// Who was removed.
        participant: String,
    },
    /// A participant was paused.
    Paused {
        /// Who.
        participant: String,
        /// Until when, if bounded.
        until: Option<Time>,
    },
    /// A pause ended (resume or timeout).
    Resumed {
        /// Who.
        participant: String,
    },
    /// A participant was told to shut down.
    ShutDown {
        /// Who.
        participant: String,
    },
    /// A stream was opened.
    StreamOpened {
        /// Its id.
        stream_id: String,
        /// Its owner.
        owner: String,
    },
    /// A stream was closed.
    StreamClosed {
        /// Its id.
        stream_id: String,
    },
}

/// One member of the space, for `GET /participants`.
#[derive(Debug, Clone, PartialEq)]
pub struct ParticipantInfo {
    /// Participant id.
    pub id: String,
    /// Current capabilities (static and granted).
    pub capabilities: serde_json::Value,
    /// Whether a connection (or, for virtual participants, the gateway) holds it online.
    pub online: bool,
    /// Whether the gateway holds its membership itself (`output_log` + `auto_connect`).
    pub is_virtual: bool,
}

/// Figures for `GET /health`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthInfo {
    /// The space id.
    pub space: String,
    /// Open transport connections (joined or not).
    pub connections: usize,
    /// Members online.
    pub participants_online: usize,
    /// Open streams.
    pub active_streams: usize,
    /// Envelopes in the polling history.
    pub history_len: usize,
    /// Their bytes.
    pub history_bytes: usize,
}

/// What happened on the driver's side: the inputs [`Gateway::handle_input`] takes (the
/// table on [`Gateway`] says what each may queue).
#[derive(Debug)]
pub enum Input<'a> {
    /// A new transport connection, with the bearer token of its upgrade request;
    /// answered with its id ([`Answer::Connected`]).
    Connected {
        /// The `Authorization` header's token, in the form it reaches the core.
        bearer: Bearer<'a>,
    },
    /// One complete text frame from a connection (envelope JSON, join message, or
    /// `#id#data`).
    Frame {
        /// The connection.
        conn: ConnId,
        /// The frame.
        frame: Bytes,
    },
    /// A join message whose token was taken out before it reached the core
    /// ([`take_join_token`], [`seal_join`]): `frame` without its token, `bearer` what the
    /// token became. On a joined connection it is an ordinary frame.
    Join {
        /// The connection.
        conn: ConnId,
        /// The join message without its token.
        frame: Bytes,
        /// The token.
        bearer: Bearer<'a>,
    },
    /// `POST /participants/{participant}/messages` with a (possibly partial) envelope body;
    /// answered with [`Answer::Posted`]. Only a token the configuration lists (or an
    /// invitation's) authenticates a post: a judged one is refused (403).
    Post {
        /// The participant of the path.
        participant: &'a str,
        /// The `Authorization` header's token.
        bearer: Bearer<'a>,
        /// The body.
        body: &'a [u8],
    },
    /// The driver saw a frame larger than the limit and did not buffer it.
    Oversize {
        /// The connection.
        conn: ConnId,
        /// The frame's size.
        size: usize,
    },
    /// A pong (or any sign of life below the message layer) from a connection.
    Pong {
        /// The connection.
        conn: ConnId,
    },
    /// The driver wrote `frames`/`bytes` of this connection's `Transmit`s to the socket
    /// (a sign of life too: a dead peer's socket stops taking them).
    Sent {
        /// The connection.
        conn: ConnId,
        /// Frames written since the last report.
        frames: usize,
        /// Their bytes.
        bytes: usize,
    },
    /// Close a connection as a slow consumer (1013): what a replicated space's node asks
    /// for when [`Gateway::backlog_exceeded`] says so of one of its sockets.
    Slow {
        /// The connection.
        conn: ConnId,
    },
    /// The transport closed (peer close, error, or after an `Output::Close`).
    Disconnected {
        /// The connection.
        conn: ConnId,
    },
    /// Runs every timer due at `now`.
    Timeout,
    /// Randomness for the next input only, which draws an invitation's token from it
    /// instead of the token source: a replicated space's log carries it with the entry,
    /// so every replica mints the same token. The next input drops it unused
    /// ([`Gateway::drew_entropy`] tells whether it was used).
    Entropy(Entropy),
    /// A re-read configuration (tokens already resolved, as at start); answered with the
    /// changes made, in file order ([`Answer::Reconfigured`]), or why nothing changed
    /// (the new configuration names another space).
    Reconfigure(Box<SpaceConfig>),
    /// Welcomes the participants the gateway holds from the start (`output_log` with
    /// `auto_connect`) into their logs, as the reference does when it starts a space. A
    /// server gives it once when it starts a space, not when it restores one.
    WelcomeHeld,
    /// Graceful shutdown: close every connection with code 1001.
    Close,
}

/// A bearer token in the form it reaches the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bearer<'a> {
    /// No token.
    None,
    /// The token as presented: judged by the identity verifier when it takes it, else
    /// looked up by its digest.
    Token(&'a str),
    /// The token's SHA-256 digest (a space kept in a log logs nothing else of it).
    Hashed(TokenHash),
    /// The identity verifier's judgement of the token, made where it arrived
    /// ([`Gateway::judge_token`]).
    Judged(Judgement),
}

impl<'a> From<Option<&'a str>> for Bearer<'a> {
    fn from(token: Option<&'a str>) -> Bearer<'a> {
        token.map_or(Bearer::None, Bearer::Token)
    }
}

impl From<Option<TokenHash>> for Bearer<'_> {
    fn from(token: Option<TokenHash>) -> Self {
        token.map_or(Bearer::None, Bearer::Hashed)
    }
}

/// What an input answers at once (most answer nothing: what they cause is queued as
/// [`Output`]s).
#[derive(Debug)]
pub enum Answer {
    /// Nothing.
    Nothing,
    /// [`Input::Connected`]: the new connection's id.
    Connected(ConnId),
    /// [`Input::Post`]: the HTTP answer.
    Posted(Result<HttpAccepted, HttpError>),
    /// [`Input::Reconfigure`]: the changes made, in file order, or why none was.
    Reconfigured(Result<Vec<ConfigChange>, String>),
}

impl Answer {
    /// The connection of [`Answer::Connected`].
    pub fn conn(self) -> Option<ConnId> {
        match self {
            Answer::Connected(c) => Some(c),
            _ => None,
        }
    }

    /// The answer of [`Answer::Posted`].
    pub fn posted(self) -> Option<Result<HttpAccepted, HttpError>> {
        match self {
            Answer::Posted(r) => Some(r),
            _ => None,
        }
    }

    /// The answer of [`Answer::Reconfigured`].
    pub fn reconfigured(self) -> Option<Result<Vec<ConfigChange>, String>> {
        match self {
            Answer::Reconfigured(r) => Some(r),
            _ => None,
        }
    }
}

/// The state machine of one space.
///
/// A driver feeds it what happens on its sockets and HTTP endpoints, one [`Input`] at a
/// time through [`Gateway::handle_input`], and carries out the [`Output`]s it queues,
/// draining [`Gateway::poll_output`] after every input, or [`Gateway::poll_fanout`], which
/// gives a fan-out whole (and the audit lines with [`Gateway::poll_audit`], see there why
/// they are a queue of their own):
///
/// | input | answer | what it may queue |
/// |---|---|---|
/// | [`Input::Connected`] | [`Answer::Connected`] | with a bearer token: the join at once, as a join message below; without ([`Bearer::None`]): nothing until the join message or the join deadline |
/// | [`Input::Frame`], [`Input::Join`] | | a join: `Transmit` (welcome, presence), `Close` 1000 (a replaced connection), `AppendLog`, `Event` (`Joined`, `Replaced`); refused: `Transmit` (`system/error`), `Close` 1008, `Event` (`JoinRefused`). An envelope: `Transmit` to its recipients, `AppendLog` (held participants), `Close` (kick, slow consumer 1013), `Event` (`Granted`, `Revoked`, `Invited`, `Kicked`, `Paused`, `Resumed`, `ShutDown`, `StreamOpened`, `StreamClosed`, `Refused`); refused: `Transmit` (`system/error`). Stream data (`#id#...`): `Transmit` to the stream's readers |
/// | [`Input::Post`] | [`Answer::Posted`] | as an envelope from that participant |
/// | [`Input::Oversize`] | | `Transmit` (`system/error` `frame_too_large`); the driver closes with 1009 |
/// | [`Input::Pong`], [`Input::Sent`] | | nothing (liveness; the connection's backlog shrinks) |
/// | [`Input::Slow`] | | `Close` 1013, then as `Disconnected` |
/// | [`Input::Disconnected`] | | `Transmit` (presence leave, streams it owned closed), `Event` (`Left`) |
/// | [`Input::Timeout`] (when [`poll_timeout`](Self::poll_timeout) says) | | `Ping`; `Transmit` + `Close` 1008 (join timeout, expired token); `Close` 1001 (idle); `Event` (`JoinRefused`, `Resumed` when a pause ends) |
/// | [`Input::Entropy`] | | nothing: randomness for the next input's invitation token |
/// | [`Input::Reconfigure`] | [`Answer::Reconfigured`] | `Transmit` (welcomes with changed capabilities, presence leave of removed participants), `Close` 1008 (removed participants, revoked tokens, ended invitations) |
/// | [`Input::WelcomeHeld`] | | `AppendLog` (welcomes of the participants the gateway holds) |
/// | [`Input::Close`] | | `Close` 1001 for every connection |
///
/// A bearer token reaches the gateway in one of the forms of [`Bearer`]: as presented, as
/// its digest, or as the identity verifier's judgement of it (a space kept in a log never
/// logs a token). The gateway reads no clock and draws no randomness: every input takes
/// `now`, and invitation tokens come from the [`TokenSource`] it is built with (or the
/// entropy given with an input). Queries (the `http_*` bodies,
/// [`snapshot`](Self::snapshot), [`participants`](Self::participants), ...) change
/// nothing.
pub struct Gateway {
    config: SpaceConfig,
    space_id: Arc<str>,
    ids: IdGen,
    /// Where invite tokens come from; never the generator of ids.
    tokens: Box<dyn TokenSource>,
    next_envelope: u64,
    stats: stats::Stats,
    conns: Slab,
    members: Members,
    /// Everyone online, in member order: the broadcast fan-out list.
    audience: Vec<Recipient>,
    streams: streams::Streams,
    history: History,
    out: outq::OutQueue,
    /// Whether a member may be paused until a time (never false when one is).
    timed_pauses: bool,
    /// Joins and leaves of a crowd waiting for their batch.
    gathered: crowd::Gathered,
    /// No connection has a timer due before this (a lower bound: activity only moves
    /// timers later); `Input::Timeout` recomputes it. Keeps `poll_timeout` from walking
    /// every connection after every input.
    conn_timer: Option<Time>,
    /// Connections closed mid fan-out whose leave is still to be announced.
    pending_leaves: Vec<(ConnId, usize, String)>,
    /// Proposal routing under `addressed` delivery.
    workflow: workflow::Workflow,
    audit_envelopes: bool,
    /// Refusal windows per sender (aggregated `rejected` records).
    refusals: std::collections::BTreeMap<Arc<str>, audit::RefusalWindow>,
    /// Audit lines not yet taken (see [`Gateway::poll_audit`]).
    audit: audit::AuditLines,
    audit_capabilities: bool,
    /// Replicated over a log: backlogs are watched by the nodes (see `deliver.rs`).
    replicated: bool,
    /// Randomness given for the next input ([`Input::Entropy`]).
    entropy: Option<Entropy>,
    /// Whether the last input minted a token from it.
    drew_entropy: bool,
    /// Checks bearer tokens issued elsewhere (JWTs), when configured.
    verifier: Option<Arc<dyn identity::IdentityVerifier>>,
    /// The gateway broadcast being fanned out, for its first `delivered` record.
    audit_body: Option<Bytes>,
    /// What an accepted HTTP `POST` is answered instead of `{id, status: "accepted"}` (an
    /// invite's token, an opened stream's id), set while the envelope is carried out.
    http_answer: Option<serde_json::Value>,
    /// `connection_url` of invite acknowledgements, when the driver knows its address.
    connection_url: Option<String>,
    /// The connection whose envelope is being carried out: under `addressed` delivery the
    /// sender's other connections (a person's other screens) see what it sent.
    from_conn: Option<ConnId>,
}

impl Gateway {
    /// A gateway for this space. `seed` fixes every id it generates; invitation tokens come
    /// from `tokens` (servers: the operating system's CSPRNG; simulations: a seeded
    /// [`IdGen`]; a replica: [`crate::secret::LogEntropy`], the entropy its log carries),
    /// and bearer tokens the configuration does not list are judged by `verifier` (JWTs
    /// from an identity provider), when there is one.
    pub fn new(
        config: SpaceConfig,
        seed: u64,
        tokens: Box<dyn TokenSource>,
        verifier: Option<Arc<dyn IdentityVerifier>>,
    ) -> Gateway {
        let space_id: Arc<str> = Arc::from(config.id.as_str());
        let members = Members::from_config(&config);
        let logging = config.logging;
        let mut g = Gateway {
            space_id,
            ids: IdGen::new(seed),
            tokens,
            next_envelope: 0,
            stats: stats::Stats::default(),
            conns: Slab::default(),
            members,
            audience: Vec::new(),
            streams: streams::Streams::default(),
            history: History::new(config.gateway.history_size, config.gateway.history_bytes),
            out: outq::OutQueue::default(),
            timed_pauses: false,
            gathered: Default::default(),
            conn_timer: None,
            pending_leaves: Vec::new(),
            workflow: workflow::Workflow::default(),
            audit_envelopes: logging.enabled && logging.envelope_history,
            refusals: std::collections::BTreeMap::new(),
            audit: Default::default(),
            audit_capabilities: logging.enabled && logging.capability_decisions,
            replicated: false,
            entropy: None,
            drew_entropy: false,
            verifier,
            audit_body: None,
            http_answer: None,
            connection_url: None,
            from_conn: None,
            config,
        };
        g.rebuild_audience();
        g
    }

    // ---- the one entry of inputs ----

    /// Applies one input (see the table on [`Gateway`]); what it answers at once, if
    /// anything. Drain [`Gateway::poll_output`] and [`Gateway::poll_audit`] afterwards.
    pub fn handle_input(&mut self, now: Time, input: Input<'_>) -> Answer {
        // Entropy is for the input right after it only.
        let entropy = match input {
            Input::Entropy(e) => {
                self.entropy = Some(e);
                return Answer::Nothing;
            }
            _ => self.entropy.is_some(),
        };
        self.drew_entropy = false;
        let answer = match input {
            Input::Entropy(_) => unreachable!("handled above"),
            Input::Connected { bearer } => Answer::Connected(self.on_connected(now, bearer)),
            Input::Frame { conn, frame } => {
                self.on_frame(now, conn, frame);
                Answer::Nothing
            }
            Input::Join {
                conn,
                frame,
                bearer,
            } => {
                self.on_token_join(now, conn, frame, bearer);
                Answer::Nothing
            }
            Input::Post {
                participant,
                bearer,
                body,
            } => Answer::Posted(self.on_post(now, participant, bearer, body)),
            Input::Oversize { conn, size } => {
                self.on_oversize(now, conn, size);
                Answer::Nothing
            }
            Input::Pong { conn } => {
                if let Some(c) = self.conns.get_mut(conn) {
                    c.last_activity = now;
                }
                Answer::Nothing
            }
            Input::Sent {
                conn,
                frames,
                bytes,
            } => {
                // Written frames count as a sign of life, as a pong does: the peer's TCP
                // stack took them (a dead peer's socket buffer fills and the writes stop),
                // and a ping queued behind a long backlog cannot be answered before the
                // backlog is written, so a peer reading a burst should not be closed as
                // idle while the burst is still going out.
                if let Some(c) = self.conns.get_mut(conn) {
                    c.queued_frames = c.queued_frames.saturating_sub(frames);
                    c.queued_bytes = c.queued_bytes.saturating_sub(bytes);
                    if frames > 0 {
                        c.last_activity = c.last_activity.max(now);
                    }
                }
                Answer::Nothing
            }
            Input::Slow { conn } => {
                self.on_slow(now, conn);
                Answer::Nothing
            }
            Input::Disconnected { conn } => {
                self.on_disconnected(now, conn);
                Answer::Nothing
            }
            Input::Timeout => {
                self.on_timeout(now);
                Answer::Nothing
            }
            Input::Reconfigure(new) => Answer::Reconfigured(self.apply_config(now, *new)),
            Input::WelcomeHeld => {
                self.on_welcome_held(now);
                Answer::Nothing
            }
            Input::Close => {
                self.on_close();
                Answer::Nothing
            }
        };
        if entropy {
            self.drew_entropy = self.entropy.take().is_none();
        }
        answer
    }

    fn on_welcome_held(&mut self, now: Time) {
        for i in self.members.indices() {
            let m = self.members.get(i);
            if m.virtual_log.is_some() && m.conns.is_empty() && !m.removed {
                self.send_welcome(now, i);
            }
        }
    }

    fn on_close(&mut self) {
        for id in self.conns.ids() {
            self.out.push_back(Output::Close {
                conn: id,
                code: 1001,
                reason: "gateway shutting down".into(),
            });
            self.conns.get_mut(id).expect("listed").phase = conn::Phase::Closed;
        }
        for i in self.members.indices() {
            self.members.get_mut(i).conns.clear();
        }
        self.rebuild_audience();
    }

    // ---- settings ----

    /// What the identity verifier makes of `token`: `None` when there is no verifier or the
    /// token is not of its kind (it is then an ordinary token, looked up by digest). A
    /// space kept in a log judges a token where it arrives and logs the judgement
    /// ([`Bearer::Judged`]).
    pub fn judge_token(&self, token: &str) -> Option<Judgement> {
        self.on_judge_token(token)
    }

    /// The WebSocket address invite acknowledgements tell an invited participant to use.
    pub fn set_connection_url(&mut self, url: impl Into<String>) {
        self.connection_url = Some(url.into());
    }

    /// The address [`Gateway::set_connection_url`] set, if any.
    pub fn connection_url(&self) -> Option<&str> {
        self.connection_url.as_deref()
    }

    /// Makes this gateway a replica of a space kept in a log: its connections' backlogs are
    /// no longer counted here (the node holding each socket reports a slow one with
    /// [`Input::Slow`]), since written-byte reports are local to a node.
    pub fn set_replicated(&mut self) {
        self.replicated = true;
    }

    /// Whether the last input drew the token it minted from the entropy given just before
    /// it ([`Input::Entropy`]): a node keeping its log in files then snapshots at once
    /// rather than keep that entropy, which is the token itself, on disk.
    pub fn drew_entropy(&self) -> bool {
        self.drew_entropy
    }

    /// A fresh token: from the entropy given with the input when there is some, else from
    /// the token source; `None` when neither has any (a replica's input that carried
    /// none).
    fn fresh_token(&mut self) -> Option<String> {
        let e = match self.entropy.take() {
            Some(e) => e,
            None => self.tokens.entropy()?,
        };
        Some(crate::secret::token_of(&e))
    }

    /// The configuration the gateway runs.
    pub fn config(&self) -> &SpaceConfig {
        &self.config
    }

    // ---- outputs and timers ----

    /// The next output to act on, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop()
    }

    /// The next batch of audit lines (one file's lines written since it was last taken),
    /// until `None`; `spare(file)` gives the buffer that file's next lines are written into
    /// (a writer hands back the ones it wrote, so a busy space allocates none; the files'
    /// batches differ in size, so a writer keeps them apart).
    ///
    /// Audit records are not [`Output`]s: a fan-out to a thousand members writes a
    /// thousand `delivered` lines, which go into one buffer per file (no allocation per
    /// record) and out as one batch per pass, where an output per record would make every
    /// output as wide as a record and the queue a thousand entries longer. Take them after
    /// draining the outputs of a pass (or of each input).
    pub fn poll_audit(
        &mut self,
        mut spare: impl FnMut(AuditFile) -> Vec<u8>,
    ) -> Option<AuditBatch> {
        AuditFile::ALL
            .into_iter()
            .find_map(|file| self.drain_audit(file, || spare(file)))
    }

    /// When [`Input::Timeout`] next has work, if ever.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.next_timeout()
    }

    // ---- queries ----

    /// `GET /participants`: who is in the space, for a participant of it. The rule is the
    /// welcome's: any participant (any of its tokens) sees every member's id, capabilities
    /// and presence, exactly what its `system/welcome` and presence envelopes show it; a
    /// request without a token is 401, with a token of no participant 403.
    pub fn http_participants(
        &self,
        bearer: Option<&str>,
    ) -> Result<Vec<ParticipantInfo>, HttpError> {
        self.participants_visible_to(bearer)
    }

    /// The body of `GET /participants` (with the space the request names, if any): the
    /// space's id and each member's id, capabilities, presence and whether it is virtual.
    pub fn http_participants_json(
        &self,
        space: Option<&str>,
        bearer: Option<&str>,
    ) -> Result<String, HttpError> {
        self.participants_json(space, bearer)
    }

    /// `GET /participants/{participant}/messages?since=`: envelopes the participant could
    /// see, oldest first, from the bounded history. `since` is an envelope id, an RFC 3339
    /// time or milliseconds since the epoch.
    pub fn http_messages(
        &self,
        participant: &str,
        bearer: Option<&str>,
        since: Option<&str>,
    ) -> Result<Vec<Bytes>, HttpError> {
        self.messages_visible_to(participant, bearer, since)
    }

    /// The body of `GET /health`; `audit_dropped` counts the audit records the driver's
    /// writer could not keep up with.
    /// `restored` is what a durable space restored when it started (`null` otherwise).
    pub fn http_health_json(
        &self,
        audit_dropped: u64,
        restored: Option<&serde_json::Value>,
    ) -> String {
        self.health_json(audit_dropped, restored)
    }

    /// The space's state as bytes (JSON). Fails when outputs are still queued.
    pub fn snapshot(&self) -> Result<Vec<u8>, SnapshotError> {
        self.snapshot_with(false)
    }

    /// [`Gateway::snapshot`] for a file on disk: without the `system/invite` envelopes of
    /// the polling history, the one place a live token is kept (the member keeps only its
    /// digest). An inviter who has not yet polled for such a token after a restart asks
    /// again.
    pub fn snapshot_at_rest(&self) -> Result<Vec<u8>, SnapshotError> {
        self.snapshot_with(true)
    }

    /// A gateway in the state `snapshot` describes, running `config` (the configuration the
    /// snapshot was taken under) with the dependencies [`Gateway::new`] takes: ids continue
    /// from the snapshot.
    pub fn restore(
        config: SpaceConfig,
        snapshot: &[u8],
        tokens: Box<dyn TokenSource>,
        verifier: Option<Arc<dyn IdentityVerifier>>,
    ) -> Result<Gateway, SnapshotError> {
        Gateway::from_snapshot(config, snapshot, tokens, verifier)
    }

    /// Audit lines dropped because nobody took them ([`AUDIT_BATCH_MAX`]).
    pub fn audit_dropped(&self) -> u64 {
        self.dropped_audit_lines()
    }

    /// Whether a connection with this many frames and bytes handed to it and not yet
    /// written is a slow consumer. One frame alone never is, however large.
    pub fn backlog_exceeded(&self, frames: usize, bytes: usize) -> bool {
        let g = &self.config.gateway;
        frames > g.max_queue_frames || (bytes > g.max_queue_bytes && frames > 1)
    }

    /// Members of the space (kicked ones excluded), in configuration order then join order.
    pub fn participants(&self) -> Vec<ParticipantInfo> {
        self.members
            .iter()
            .filter(|(_, m)| !m.removed)
            .map(|(_, m)| ParticipantInfo {
                id: m.id.to_string(),
                capabilities: m.caps.to_json(),
                online: m.is_online(),
                is_virtual: m.virtual_log.is_some(),
            })
            .collect()
    }

    /// Runtime grants held by members of the space.
    pub fn grant_count(&self) -> usize {
        self.members.iter().map(|(_, m)| m.grants.len()).sum()
    }

    /// Figures for a health endpoint.
    pub fn health(&self) -> HealthInfo {
        HealthInfo {
            space: self.space_id.to_string(),
            connections: self.conns.len(),
            participants_online: self.members.iter().filter(|(_, m)| m.is_online()).count(),
            active_streams: self.streams.len(),
            history_len: self.history.len(),
            history_bytes: self.history.bytes(),
        }
    }

    /// Whether the connection has joined as a participant (and is not closing).
    pub fn conn_joined(&self, conn: ConnId) -> bool {
        self.conns
            .get(conn)
            .is_some_and(|c| matches!(c.phase, conn::Phase::Joined { .. }))
    }

    /// Counters since the gateway started (for `GET /metrics`).
    pub fn stats(&self) -> &stats::Stats {
        &self.stats
    }

    /// Frames and bytes handed to connections and not yet reported written, in all.
    pub fn outbound_queued(&self) -> (u64, u64) {
        self.conns.iter().fold((0, 0), |(f, b), (_, c)| {
            (f + c.queued_frames as u64, b + c.queued_bytes as u64)
        })
    }

    /// The current capabilities of a member, as JSON (what its welcome shows).
    pub fn capabilities_of(&self, participant: &str) -> Option<serde_json::Value> {
        self.members
            .find(participant)
            .map(|i| self.members.get(i).caps.to_json())
    }

    /// The grant chain: every runtime grant in force, as (granter, recipient, grant id).
    pub fn grant_chain(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for (_, m) in self.members.iter() {
            for g in &m.grants {
                out.push((g.granter.to_string(), m.id.to_string(), g.grant_id.clone()));
            }
        }
        out
    }

    fn push_event(&mut self, e: GatewayEvent) {
        self.out.push_back(Output::Event(Box::new(e)));
    }

    /// A fresh id for an envelope the gateway writes.
    fn envelope_id(&mut self) -> String {
        self.next_envelope += 1;
        format!(
            "gw-{}-{}",
            self.ids.next_u64() & 0xFFFF_FFFF,
            self.next_envelope
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_moves_between_threads() {
        // Drivers run the state machine on a runtime's worker threads.
        fn is_send<T: Send + 'static>() {}
        is_send::<Gateway>();
        is_send::<Output>();
    }

    #[test]
    fn outputs_stay_narrow() {
        // A fan-out pushes one Output per recipient: keep it a frame handle and a little more.
        assert!(
            std::mem::size_of::<Output>() <= 56,
            "{}",
            std::mem::size_of::<Output>()
        );
    }

    #[test]
    fn conn_ids_carry_slot_and_generation() {
        let id = ConnId::new(7, 3);
        assert_eq!((id.slot(), id.generation()), (7, 3));
        assert_eq!(id.to_string(), "conn-7.3");
    }
}
