//! The gateway's space state machine (connections, enforcement, delivery, space operations).
//!
//! One [`Gateway`] is one space. Drivers feed it connections, text frames, acknowledgements
//! of written bytes and timer ticks, and drain [`Output`]s: frames to transmit, pings, closes,
//! log lines and audit records. Every protocol rule lives here; a driver only moves bytes.
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
//!   and not yet reported written ([`Gateway::handle_sent`]) pass the configured limits; a
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
    AUDIT_BATCH_MAX, AuditBatch, AuditFile, Direction, REFUSAL_WINDOW, REFUSALS_PER_WINDOW,
    Transport, audit_dropped_line,
};
pub use config::{
    BridgeSettings, ConfigError, ConfigErrors, ConfigWarning, ConnectionLimits, Crowd,
    DeliveryMode, Fsync, GatewayOptions, GeneratedToken, JwtConfig, LoggingConfig, McpServerConfig,
    ParticipantEntry, ParticipantType, RestartPolicy, SpaceConfig, TOKEN_LEN, TlsConfig,
    substitute, token_env_var,
};
pub use http::{HttpAccepted, HttpError, check_space};
pub use identity::{CLOCK_LEEWAY, Identity, IdentityVerifier, Judgement, Verdict};
pub use join::{may_need_entropy, seal_join, take_join_token};
pub use reload::ConfigChange;
pub use snapshot::SnapshotError;
pub use system::node_error;

use crate::Time;
use crate::ids::IdGen;
use crate::secret::TokenHash;
use bytes::Bytes;
use conn::Slab;
use deliver::Recipient;
use history::History;
use member::Members;
use std::collections::VecDeque;
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

/// The state machine of one space.
///
/// A driver feeds it what happens on its sockets and HTTP endpoints and carries out the
/// [`Output`]s it queues, draining [`Gateway::poll_output`] after every input, and the audit
/// lines with [`Gateway::take_audit`]:
///
/// | input | what it may queue |
/// |---|---|
/// | [`handle_connected`](Self::handle_connected) (`_hashed`, `_judged`) | with a bearer token: the join at once, as a join message below; without: nothing until the join message or the join deadline |
/// | [`handle_frame`](Self::handle_frame), [`handle_sealed_join`](Self::handle_sealed_join), [`handle_judged_join`](Self::handle_judged_join) | a join: `Transmit` (welcome, presence), `Close` 1000 (a replaced connection), `AppendLog`, `Event` (`Joined`, `Replaced`); refused: `Transmit` (`system/error`), `Close` 1008, `Event` (`JoinRefused`). An envelope: `Transmit` to its recipients, `AppendLog` (held participants), `Close` (kick, slow consumer 1013), `Event` (`Granted`, `Revoked`, `Invited`, `Kicked`, `Paused`, `Resumed`, `ShutDown`, `StreamOpened`, `StreamClosed`, `Refused`); refused: `Transmit` (`system/error`). Stream data (`#id#...`): `Transmit` to the stream's readers |
/// | [`handle_post`](Self::handle_post) (`_hashed`) | as an envelope from that participant, plus the answer it returns |
/// | [`handle_oversize`](Self::handle_oversize) | `Transmit` (`system/error` `frame_too_large`); the driver closes with 1009 |
/// | [`handle_pong`](Self::handle_pong), [`handle_sent`](Self::handle_sent) | nothing (liveness; the connection's backlog shrinks) |
/// | [`handle_slow`](Self::handle_slow) | `Close` 1013, then as `handle_disconnected` |
/// | [`handle_disconnected`](Self::handle_disconnected) | `Transmit` (presence leave, streams it owned closed), `Event` (`Left`) |
/// | [`handle_timeout`](Self::handle_timeout) (when [`poll_timeout`](Self::poll_timeout) says) | `Ping`; `Transmit` + `Close` 1008 (join timeout, expired token); `Close` 1001 (idle); `Event` (`JoinRefused`, `Resumed` when a pause ends) |
/// | [`reconfigure`](Self::reconfigure) | `Transmit` (welcomes with changed capabilities, presence leave of removed participants), `Close` 1008 (removed participants, revoked tokens, ended invitations) |
/// | [`welcome_held`](Self::welcome_held) | `AppendLog` (welcomes of the participants the gateway holds) |
/// | [`close`](Self::close) | `Close` 1001 for every connection |
///
/// Every input takes `now` first; the gateway reads no clock. Queries (the `http_*`
/// bodies, [`snapshot`](Self::snapshot), [`participants`](Self::participants), ...) change
/// nothing.
pub struct Gateway {
    config: SpaceConfig,
    space_id: Arc<str>,
    ids: IdGen,
    /// Where invite tokens come from; never the generator of ids.
    tokens: Box<dyn crate::secret::TokenSource>,
    next_envelope: u64,
    stats: stats::Stats,
    conns: Slab,
    members: Members,
    /// Everyone online, in member order: the broadcast fan-out list.
    audience: Vec<Recipient>,
    streams: streams::Streams,
    history: History,
    out: VecDeque<Output>,
    /// Whether a member may be paused until a time (never false when one is).
    timed_pauses: bool,
    /// Joins and leaves of a crowd waiting for their batch.
    gathered: crowd::Gathered,
    /// No connection has a timer due before this (a lower bound: activity only moves
    /// timers later); `handle_timeout` recomputes it. Keeps `poll_timeout` from walking
    /// every connection after every input.
    conn_timer: Option<Time>,
    /// Connections closed mid fan-out whose leave is still to be announced.
    pending_leaves: Vec<(ConnId, usize, String)>,
    /// Proposal routing under `addressed` delivery.
    workflow: workflow::Workflow,
    audit_envelopes: bool,
    /// Refusal windows per sender (aggregated `rejected` records).
    refusals: std::collections::BTreeMap<Arc<str>, audit::RefusalWindow>,
    /// Audit lines not yet taken (see [`Gateway::take_audit`]).
    audit: audit::AuditLines,
    audit_capabilities: bool,
    /// Replicated over a log: backlogs are watched by the nodes (see `deliver.rs`).
    replicated: bool,
    /// Randomness the log supplied for the input being applied (see `provide_entropy`).
    entropy: Option<[u8; 16]>,
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
    /// A gateway for this space. `seed` fixes every id and token it generates.
    pub fn new(config: SpaceConfig, seed: u64) -> Gateway {
        let space_id: Arc<str> = Arc::from(config.id.as_str());
        let members = Members::from_config(&config);
        let logging = config.logging;
        let mut g = Gateway {
            space_id,
            ids: IdGen::new(seed),
            // Deterministic, for simulations; servers install the OS source with
            // `set_token_source`. A separate generator: ids never reveal its state.
            tokens: Box::new(IdGen::new(seed.rotate_left(29) ^ 0x5EC2_E770_C0FF_EE00)),
            next_envelope: 0,
            stats: stats::Stats::default(),
            conns: Slab::default(),
            members,
            audience: Vec::new(),
            streams: streams::Streams::default(),
            history: History::new(config.gateway.history_size, config.gateway.history_bytes),
            out: VecDeque::new(),
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
            verifier: None,
            audit_body: None,
            http_answer: None,
            connection_url: None,
            from_conn: None,
            config,
        };
        g.rebuild_audience();
        g
    }

    // ---- inputs: what happened on the driver's side ----

    /// A new transport connection; `bearer` from the Authorization header if any.
    pub fn handle_connected(&mut self, now: Time, bearer: Option<&str>) -> ConnId {
        self.on_connected(now, bearer)
    }

    /// [`Gateway::handle_connected`] with a bearer token the identity verifier judged where
    /// the connection arrived ([`Gateway::judge_token`]): how a space kept in a log takes
    /// tokens issued elsewhere, whose judgement it logs in place of the token.
    pub fn handle_connected_judged(&mut self, now: Time, judged: Judgement) -> ConnId {
        self.on_connected_judged(now, judged)
    }

    /// [`Gateway::handle_connected`] with the bearer token's digest instead of the token.
    pub fn handle_connected_hashed(&mut self, now: Time, bearer: Option<TokenHash>) -> ConnId {
        self.on_connected_hashed(now, bearer)
    }

    /// One complete text frame from a connection (envelope JSON, join message, or
    /// `#id#data`).
    pub fn handle_frame(&mut self, now: Time, conn: ConnId, frame: Bytes) {
        self.on_frame(now, conn, frame);
    }

    /// A join message taken apart by [`seal_join`]: `frame` without its
    /// token, `token` the token's digest. On a joined connection it is an ordinary frame.
    pub fn handle_sealed_join(&mut self, now: Time, conn: ConnId, frame: Bytes, token: TokenHash) {
        self.on_token_join(now, conn, frame, join::JoinToken::Sealed(token));
    }

    /// A join message taken apart by [`take_join_token`] whose token the identity verifier
    /// judged where the connection arrived ([`Gateway::judge_token`]): `frame` without its
    /// token. On a joined connection it is an ordinary frame.
    pub fn handle_judged_join(&mut self, now: Time, conn: ConnId, frame: Bytes, judged: Judgement) {
        self.on_token_join(now, conn, frame, join::JoinToken::Judged(judged));
    }

    /// `POST /participants/{participant}/messages` with a (possibly partial) envelope body.
    pub fn handle_post(
        &mut self,
        now: Time,
        participant: &str,
        bearer: Option<&str>,
        body: &[u8],
    ) -> Result<HttpAccepted, HttpError> {
        self.on_post(now, participant, bearer, body)
    }

    /// [`Gateway::handle_post`] with the bearer token's digest instead of the token.
    pub fn handle_post_hashed(
        &mut self,
        now: Time,
        participant: &str,
        bearer: Option<TokenHash>,
        body: &[u8],
    ) -> Result<HttpAccepted, HttpError> {
        self.on_post_hashed(now, participant, bearer, body)
    }

    /// The driver saw a frame larger than the limit and did not buffer it.
    pub fn handle_oversize(&mut self, now: Time, conn: ConnId, size: usize) {
        self.on_oversize(now, conn, size);
    }

    /// A pong (or any sign of life below the message layer) from a connection.
    pub fn handle_pong(&mut self, now: Time, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.last_activity = now;
        }
    }

    /// The driver wrote `frames`/`bytes` of this connection's Transmits to the socket.
    ///
    /// Written frames count as a sign of life, as a pong does: the peer's TCP stack took
    /// them (a dead peer's socket buffer fills and the writes stop), and a ping queued
    /// behind a long backlog cannot be answered before the backlog is written, so a peer
    /// reading a burst should not be closed as idle while the burst is still going out.
    pub fn handle_sent(&mut self, now: Time, conn: ConnId, frames: usize, bytes: usize) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.queued_frames = c.queued_frames.saturating_sub(frames);
            c.queued_bytes = c.queued_bytes.saturating_sub(bytes);
            if frames > 0 {
                c.last_activity = c.last_activity.max(now);
            }
        }
    }

    /// Closes a connection as a slow consumer (1013): what a replicated space's node asks
    /// for when [`Gateway::backlog_exceeded`] says so of one of its sockets.
    pub fn handle_slow(&mut self, now: Time, conn: ConnId) {
        self.on_slow(now, conn);
    }

    /// The transport closed (peer close, error, or after an `Output::Close`).
    pub fn handle_disconnected(&mut self, now: Time, conn: ConnId) {
        self.on_disconnected(now, conn);
    }

    /// Runs every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        self.on_timeout(now);
    }

    // ---- commands ----

    /// Applies a re-read configuration (tokens already resolved, as at start); the changes
    /// made, in file order. `Err` (nothing changed) when the new configuration names
    /// another space.
    pub fn reconfigure(
        &mut self,
        now: Time,
        new: SpaceConfig,
    ) -> Result<Vec<ConfigChange>, String> {
        self.apply_config(now, new)
    }

    /// Welcomes the participants the gateway holds from the start (`output_log` with
    /// `auto_connect`) into their logs, as the reference does when it starts a space. A
    /// server calls this once when it starts a space, not when it restores one.
    pub fn welcome_held(&mut self, now: Time) {
        for i in self.members.indices() {
            let m = self.members.get(i);
            if m.virtual_log.is_some() && m.conns.is_empty() && !m.removed {
                self.send_welcome(now, i);
            }
        }
    }

    /// Graceful shutdown: close every connection with code 1001.
    pub fn close(&mut self, _now: Time) {
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
    /// token is not of its kind (it is then an ordinary token, looked up by digest).
    pub fn judge_token(&self, token: &str) -> Option<Judgement> {
        self.on_judge_token(token)
    }

    /// Installs the verifier of bearer tokens that are not listed in the configuration.
    pub fn set_identity_verifier(&mut self, verifier: Arc<dyn IdentityVerifier>) {
        self.verifier = Some(verifier);
    }

    /// Replaces the source of invite tokens (servers: the operating system's CSPRNG).
    pub fn set_token_source(&mut self, source: Box<dyn crate::secret::TokenSource>) {
        self.tokens = source;
    }

    /// The WebSocket address invite acknowledgements tell an invited participant to use.
    pub fn set_connection_url(&mut self, url: impl Into<String>) {
        self.connection_url = Some(url.into());
    }

    /// Takes over what the driver set on `other` (the identity verifier, the connection
    /// URL of invitations): a gateway restored from its state replaces the one the server
    /// built and configured.
    pub fn adopt_host_settings(&mut self, other: &Gateway) {
        if let Some(v) = &other.verifier {
            self.verifier = Some(v.clone());
        }
        if self.connection_url.is_none() {
            self.connection_url.clone_from(&other.connection_url);
        }
    }

    /// Makes this gateway a replica of a space kept in a log: its connections' backlogs are
    /// no longer counted here (the node holding each socket reports a slow one with
    /// [`Gateway::handle_slow`]), since written-byte reports are local to a node.
    pub fn set_replicated(&mut self) {
        self.replicated = true;
    }

    /// Randomness for the next input only: a replicated space draws tokens from the entropy
    /// its log carries, so every replica draws the same. Unused entropy is discarded by
    /// [`Gateway::take_entropy`].
    pub fn provide_entropy(&mut self, entropy: [u8; 16]) {
        self.entropy = Some(entropy);
    }

    /// Discards entropy the last input did not use.
    pub fn take_entropy(&mut self) -> Option<[u8; 16]> {
        self.entropy.take()
    }

    /// A fresh token: from the log's entropy when a replica has some, else the token source.
    fn fresh_token(&mut self) -> String {
        match self.entropy.take() {
            // 128 bits, as hex: the log's entropy is already uniformly random.
            Some(e) => crate::secret::hex(&e),
            None => self.tokens.token(),
        }
    }

    /// The configuration the gateway runs.
    pub fn config(&self) -> &SpaceConfig {
        &self.config
    }

    // ---- outputs and timers ----

    /// The next output to act on, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// The audit lines of `file` written since the last call, if any; `spare` gives the
    /// buffer the next ones are written into (a writer hands back the ones it wrote, so a
    /// busy space allocates none).
    pub fn take_audit(
        &mut self,
        file: AuditFile,
        spare: impl FnOnce() -> Vec<u8>,
    ) -> Option<AuditBatch> {
        self.drain_audit(file, spare)
    }

    /// When `handle_timeout` next has work, if ever.
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
    /// snapshot was taken under) with `seed` for nothing: ids continue from the snapshot.
    pub fn restore(config: SpaceConfig, snapshot: &[u8]) -> Result<Gateway, SnapshotError> {
        Gateway::from_snapshot(config, snapshot)
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
    pub fn conn_joined(&mut self, conn: ConnId) -> bool {
        self.conns
            .get_mut(conn)
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
