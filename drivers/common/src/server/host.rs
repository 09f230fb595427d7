//! The runtime-neutral half of a gateway server's core task.
//!
//! A driver runs one task that owns the space's [`Gateway`]; connections send it
//! [`Input`]s over a channel. Everything that task does besides waiting (applying inputs,
//! answering HTTP requests, carrying out the core's outputs, tracking the shutdown grace
//! period) lives in [`GatewayHost`], so each driver only supplies its channels, its timer
//! and its sockets:
//!
//! ```text
//! loop {
//!     wait for an input or until host.next_wake()
//!     on input:   host.apply(now, input) (a batch of them), then host.drain()
//!     on wake:    if host.handle_wake(now) is Stop { break }
//!     if host.finished() { break }
//! }
//! host.cut_all()
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use mew_core::Time;
use mew_core::cluster::Node;
use mew_core::gateway::{
    Answer, Bearer, ConnId, Gateway, GatewayEvent, Input as GwInput, Output, Polled,
};

use crate::Response;
use crate::server::frames::{Frames, PassFrames, Pending};
use crate::server::route::Route;
use crate::state::logs::LogHandle;

/// What a connection's writer is asked to do.
#[derive(Debug)]
pub enum WriterCmd {
    /// Send text frames in order: everything one pass over the core's outputs had for this
    /// connection, so a busy connection's writer is woken once per pass, not once per frame
    /// (framed once per pass for all recipients, see [`crate::server::frames`]).
    Frames(Frames),
    /// Send a ping.
    Ping,
    /// Send a close frame with this code and reason, then stop.
    Close(u16, String),
}

/// The host's end of one WebSocket connection, over the driver's channels.
pub trait ConnLink {
    /// Queues a command for the connection's writer; dropped when the writer is gone.
    fn send(&self, cmd: WriterCmd);
    /// Hands the connection a pass's frames: queued for its writer, or written at once
    /// when nothing is ahead of them; then the frames and bytes written.
    fn send_frames(&self, frames: Frames) -> Option<(usize, usize)> {
        self.send(WriterCmd::Frames(frames));
        None
    }
    /// Marks the connection as closing: its reader and writer then give up within a grace
    /// period even if the peer never answers (a slow consumer cannot block its close).
    fn closing(&self);
}

/// A one-shot answer channel of the driver's runtime.
pub trait Reply<T> {
    /// Delivers the answer; gives it back when the asker is gone.
    fn reply(self, value: T) -> Result<(), T>;
}

/// An HTTP request for the core.
#[derive(Debug)]
pub struct HttpRequest {
    /// The endpoint.
    pub route: Route,
    /// The bearer token, if any.
    pub bearer: Option<String>,
    /// The complete body.
    pub body: Bytes,
}

/// Everything connections tell the core task. `L` is the driver's connection link, `C` and
/// `H` its answer channels for connection ids and HTTP responses.
pub enum Input<L, C, H> {
    /// A WebSocket completed its handshake.
    Connect {
        /// The `Authorization: Bearer` token of the upgrade request.
        bearer: Option<String>,
        /// The way to the connection's writer.
        link: L,
        /// Where its id goes.
        reply: C,
    },
    /// A text or binary frame.
    Frame(ConnId, Bytes),
    /// A frame over the size limit was refused by the WebSocket layer.
    Oversize(ConnId, usize),
    /// A pong (or a client's ping): the connection is alive.
    Pong(ConnId),
    /// The writer wrote this many frames and bytes since its last report.
    Sent(ConnId, usize, usize),
    /// The connection ended.
    Closed(ConnId),
    /// An HTTP API request.
    Http(HttpRequest, H),
    /// Start the graceful shutdown.
    Shutdown,
    /// Apply a re-read configuration (SIGHUP, `mew space reload`).
    Reconfigure(Box<mew_core::gateway::SpaceConfig>),
}

/// Whether the core task goes on after a wake-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep serving.
    Continue,
    /// The shutdown grace period is over.
    Stop,
}

/// How many queued inputs a core task applies before carrying out outputs. More than a
/// window of 100 messages in flight from one sender: such a burst is one pass, written
/// with one write per recipient, where 64 split it in two (K = 10, defaults: 5.2-5.3
/// against 5.7-6.1 us of the process's CPU per message).
pub const INPUT_BATCH: usize = 128;

/// Busy passes (each with more than one input) a core task runs back to back before it gives
/// the executor's other tasks a turn ([`crate::clock::Sleep::yield_now`]): going straight
/// on keeps a message's wait short, and the turn bounds how long a task woken on the core's
/// worker (put where other workers cannot take it) waits behind a queue that never runs
/// empty. The turn must be a real one: on tokio, a task that wakes itself runs again at
/// once from the worker's next-task slot, and with such a turn one of 200 MCP hosts
/// bursting at `/mcp` went unanswered for 20 s in about one run in five. 8 passes of
/// [`INPUT_BATCH`] inputs: a turn every 1,024 inputs.
pub const BUSY_PASSES_PER_TURN: u32 = 8;

/// A core task's count of busy passes in a row: when to give the executor's other tasks a
/// turn ([`BUSY_PASSES_PER_TURN`]).
#[derive(Debug, Default)]
pub struct Turns {
    busy: u32,
}

impl Turns {
    /// After a pass that applied `inputs` inputs: whether to yield before the next one.
    pub fn after_pass(&mut self, inputs: usize) -> bool {
        self.busy = if inputs > 1 { self.busy + 1 } else { 0 };
        if self.busy >= BUSY_PASSES_PER_TURN {
            self.busy = 0;
            return true;
        }
        false
    }
}
/// How long a closing connection may take to finish its close handshake.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Most frames a connection writer writes before one flush.
pub const WRITE_BATCH: usize = 256;

/// Connection ids are small unique numbers: a multiplicative hash is enough and far cheaper
/// than SipHash on the per-recipient path.
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

struct Conn<L> {
    link: L,
    /// Frames collected during one pass over the core's outputs.
    pending: Pending,
    /// Frames and bytes handed to the writer and not yet reported written (counted here
    /// only for a replicated space, whose core leaves backlogs to the node).
    queued: (usize, usize),
}

/// The machine a host serves: a space's [`Gateway`], or a node of a replicated space
/// ([`Node`]), which owns its gateway and takes the inputs that change the space into its
/// log. The host drains the gateway's outputs either way.
pub trait Core {
    /// The space's gateway.
    fn gateway(&self) -> &Gateway;
    /// The space's gateway, to drain its outputs.
    fn gateway_mut(&mut self) -> &mut Gateway;
}

impl Core for Gateway {
    fn gateway(&self) -> &Gateway {
        self
    }
    fn gateway_mut(&mut self) -> &mut Gateway {
        self
    }
}

impl Core for Node {
    fn gateway(&self) -> &Gateway {
        Node::gateway(self)
    }
    fn gateway_mut(&mut self) -> &mut Gateway {
        Node::gateway_mut(self)
    }
}

/// The space's core with the connections it talks to.
pub struct GatewayHost<L, M = Gateway> {
    core: M,
    conns: HashMap<ConnId, Conn<L>, std::hash::BuildHasherDefault<IdHasher>>,
    /// Connections with pending frames, in the order they got their first one.
    dirty: Vec<ConnId>,
    logs: Option<LogHandle>,
    log_dir: std::sync::Arc<std::path::Path>,
    grace: Duration,
    shutdown_deadline: Option<Time>,
    /// The frames of the current pass, framed once for all their recipients.
    pass: PassFrames,
    /// Sampled time of the core per inbound frame, for `GET /metrics`.
    timing: crate::server::metrics::CoreTiming,
    /// Whether backlogs are counted here (see [`GatewayHost::track_backlogs`]).
    track_backlog: bool,
    /// Connections found over their backlog limit since the last `take_slow`.
    slow: Vec<ConnId>,
    /// What a durable space restored when it started (shown by `GET /health`).
    restored: Option<serde_json::Value>,
    /// The recipients of the fan-out being carried out (kept for the next one).
    fanout: Vec<ConnId>,
}

impl<L: ConnLink, M: Core> GatewayHost<L, M> {
    /// A host for `core` (a gateway, or a node owning one); audit records go into
    /// `log_dir` through `logs`; shutdown waits at most `grace` for clients to close.
    pub fn new(core: M, logs: Option<LogHandle>, log_dir: PathBuf, grace: Duration) -> Self {
        GatewayHost {
            core,
            conns: HashMap::default(),
            dirty: Vec::new(),
            logs,
            log_dir: std::sync::Arc::from(log_dir.as_path()),
            grace,
            shutdown_deadline: None,
            pass: PassFrames::default(),
            timing: crate::server::metrics::CoreTiming::default(),
            track_backlog: false,
            slow: Vec::new(),
            restored: None,
            fanout: Vec::new(),
        }
    }

    /// The same host serving another machine, which `f` makes of this one (a replicated
    /// space's node, taking over what the server set on the gateway it built).
    pub fn with_core<N: Core>(self, f: impl FnOnce(M) -> N) -> GatewayHost<L, N> {
        let GatewayHost {
            core,
            conns,
            dirty,
            logs,
            log_dir,
            grace,
            shutdown_deadline,
            pass,
            timing,
            track_backlog,
            slow,
            restored,
            fanout,
        } = self;
        GatewayHost {
            core: f(core),
            conns,
            dirty,
            logs,
            log_dir,
            grace,
            shutdown_deadline,
            pass,
            timing,
            track_backlog,
            slow,
            restored,
            fanout,
        }
    }

    /// The machine the host serves (a replicated space's node takes its inputs).
    pub fn core_mut(&mut self) -> &mut M {
        &mut self.core
    }

    /// The machine the host serves.
    pub fn core(&self) -> &M {
        &self.core
    }

    /// For a replicated space: backlogs are counted here, and connections over the core's
    /// limit are collected for [`GatewayHost::take_slow`] instead of closed by the core.
    pub fn track_backlogs(&mut self) {
        self.track_backlog = true;
    }

    /// What a durable space restored, for `GET /health` (`restored`).
    pub fn set_restored(&mut self, report: serde_json::Value) {
        self.restored = Some(report);
    }

    /// Connections whose backlog passed the limit since the last call.
    pub fn take_slow(&mut self) -> Vec<ConnId> {
        std::mem::take(&mut self.slow)
    }

    /// Adds a connection whose id the core gave elsewhere (a replicated space's log).
    pub fn register(&mut self, conn: ConnId, link: L) {
        self.conns.insert(
            conn,
            Conn {
                link,
                pending: Pending::default(),
                queued: (0, 0),
            },
        );
    }

    /// Forgets a connection (it ended); whether it was known.
    pub fn unregister(&mut self, conn: ConnId) -> bool {
        self.conns.remove(&conn).is_some()
    }

    /// The connections the host holds.
    pub fn conn_ids(&self) -> Vec<ConnId> {
        self.conns.keys().copied().collect()
    }

    /// The writer wrote this many frames and bytes of the connection's backlog.
    pub fn sent(&mut self, now: Time, conn: ConnId, frames: usize, bytes: usize) {
        if self.track_backlog {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.queued.0 = c.queued.0.saturating_sub(frames);
                c.queued.1 = c.queued.1.saturating_sub(bytes);
            }
        } else {
            let sent = GwInput::Sent {
                conn,
                frames,
                bytes,
            };
            self.core.gateway_mut().handle_input(now, sent);
        }
    }

    /// Closes a connection whose frame was over the size limit, once the core's refusal
    /// is out: the rest of the frame is still in the socket and the stream cannot be
    /// resynchronised (1009, message too big).
    pub fn close_oversize(&mut self, conn: ConnId) {
        self.send_direct(conn, None, Some((1009, "frame too large".into())));
    }

    /// Sends frames the core did not make (a node's own error about its log) and, with
    /// `close`, closes the connection after them.
    pub fn send_direct(
        &mut self,
        conn: ConnId,
        frame: Option<Bytes>,
        close: Option<(u16, String)>,
    ) {
        self.flush_pending(conn);
        if let Some(f) = frame
            && let Some(c) = self.conns.get_mut(&conn)
            && self.pass.push(&mut c.pending, &f)
        {
            self.flush_pending(conn);
        }
        if let Some(c) = self.conns.get(&conn)
            && let Some((code, reason)) = close
        {
            c.link.send(WriterCmd::Close(code, reason));
            c.link.closing();
        }
    }

    /// The space's gateway.
    pub fn gateway(&self) -> &Gateway {
        self.core.gateway()
    }

    /// The space's gateway, for inputs that do not go through a node's log (a durable
    /// space's reload and shutdown).
    pub fn gateway_mut(&mut self) -> &mut Gateway {
        self.core.gateway_mut()
    }

    /// When the task must wake without input: the core's timer or the end of the shutdown
    /// grace period, whichever is first.
    pub fn next_wake(&self) -> Option<Time> {
        match (self.gateway().poll_timeout(), self.shutdown_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Handles a wake-up at `now` (timers), carrying out what follows.
    pub fn handle_wake(&mut self, now: Time) -> Flow {
        if self.shutdown_deadline.is_some_and(|d| now >= d) {
            return Flow::Stop;
        }
        self.gateway_mut().handle_input(now, GwInput::Timeout);
        self.drain();
        Flow::Continue
    }

    /// Whether shutdown has begun and every connection is gone.
    pub fn finished(&self) -> bool {
        self.shutdown_deadline.is_some() && self.conns.is_empty()
    }

    /// Applies one input; call [`GatewayHost::drain`] after a batch.
    pub fn apply<C: Reply<ConnId>, H: Reply<Response>>(
        &mut self,
        now: Time,
        input: Input<L, C, H>,
    ) {
        match input {
            Input::Connect {
                bearer,
                link,
                reply,
            } => {
                let bearer = Bearer::from(bearer.as_deref());
                let connected = GwInput::Connected { bearer };
                let Answer::Connected(id) = self.gateway_mut().handle_input(now, connected) else {
                    unreachable!("a connection is answered with its id")
                };
                self.register(id, link);
                if reply.reply(id).is_err() {
                    // The connection died while waiting: tell the core at once.
                    self.conns.remove(&id);
                    let gone = GwInput::Disconnected { conn: id };
                    self.gateway_mut().handle_input(now, gone);
                }
            }
            Input::Frame(id, frame) => {
                // Trace level: free unless asked for (`--log-level mew_driver_common=trace`).
                let _span =
                    tracing::trace_span!("envelope", conn = %id, bytes = frame.len()).entered();
                if crate::server::hops::enabled() {
                    crate::server::hops::applied(&frame, id.as_u64());
                }
                let input = GwInput::Frame { conn: id, frame };
                if self.timing.sample() {
                    let t = std::time::Instant::now();
                    self.gateway_mut().handle_input(now, input);
                    self.timing.observe(t.elapsed().as_secs_f64());
                } else {
                    self.gateway_mut().handle_input(now, input);
                }
            }
            Input::Oversize(id, size) => {
                let oversize = GwInput::Oversize { conn: id, size };
                self.gateway_mut().handle_input(now, oversize);
                self.drain();
                self.close_oversize(id);
            }
            Input::Pong(id) => {
                self.gateway_mut()
                    .handle_input(now, GwInput::Pong { conn: id });
            }
            Input::Sent(id, frames, bytes) => self.sent(now, id, frames, bytes),
            Input::Closed(id) => {
                self.conns.remove(&id);
                let gone = GwInput::Disconnected { conn: id };
                self.gateway_mut().handle_input(now, gone);
            }
            Input::Http(req, reply) => {
                let resp = self.http(now, req);
                let _ = reply.reply(resp);
            }
            Input::Shutdown => {
                if self.shutdown_deadline.is_none() {
                    self.shutdown_deadline = Some(now + self.grace);
                    self.gateway_mut().handle_input(now, GwInput::Close);
                }
            }
            Input::Reconfigure(config) => self.reconfigure(now, *config),
        }
    }

    /// Applies a re-read configuration, logging one line per change.
    pub fn reconfigure(&mut self, now: Time, config: mew_core::gateway::SpaceConfig) {
        let Answer::Reconfigured(answer) = self
            .gateway_mut()
            .handle_input(now, GwInput::Reconfigure(Box::new(config)))
        else {
            unreachable!("a reload is answered with its changes")
        };
        match answer {
            Ok(changes) if changes.is_empty() => {
                tracing::info!("configuration reloaded: nothing changed");
            }
            Ok(changes) => {
                for c in changes {
                    tracing::info!("configuration reloaded: {c}");
                }
            }
            Err(e) => tracing::error!("configuration not reloaded (the running one stays): {e}"),
        }
    }

    /// Tells every connection still open to give up (after the grace period).
    pub fn cut_all(&mut self) {
        for (_, c) in self.conns.drain() {
            c.link.closing();
        }
    }

    /// The redirect back from an authorization server: handed to the bridge named by its
    /// `state`, which checks it.
    fn oauth_callback(&mut self, now: Time, query: &str) -> Response {
        let cb = mew_core::mcp::oauth::Callback::from_query(query);
        let Some(participant) = cb
            .state
            .as_deref()
            .and_then(|s| s.rsplit_once('.'))
            .map(|(p, _)| p.to_owned())
            .filter(|p| !p.is_empty())
        else {
            return crate::server::oauth::page(
                400,
                "This sign-in answer names no sign-in in progress.",
            );
        };
        let delivered = self.gateway_mut().deliver_oauth_callback(
            now,
            &participant,
            crate::server::oauth::callback_payload(&cb),
        );
        self.drain();
        if delivered {
            crate::server::oauth::page(
                200,
                &format!("Sign-in handed to {participant}. You can close this page."),
            )
        } else {
            crate::server::oauth::page(404, &format!("{participant} is not in the space."))
        }
    }

    /// Answers an HTTP API request from the core.
    pub fn http(&mut self, now: Time, req: HttpRequest) -> Response {
        match req.route {
            Route::PostMessages { participant } => {
                let post = GwInput::Post {
                    participant: &participant,
                    bearer: Bearer::from(req.bearer.as_deref()),
                    body: &req.body,
                };
                let Answer::Posted(answer) = self.gateway_mut().handle_input(now, post) else {
                    unreachable!("a post is answered")
                };
                Response::posted(answer)
            }
            Route::GetMessages { participant, since } => {
                match self.gateway().http_messages(
                    &participant,
                    req.bearer.as_deref(),
                    since.as_deref(),
                ) {
                    Ok(list) => Response::json_array(200, list.iter().map(|b| &b[..])),
                    Err(e) => Response::json_bytes(e.status, e.body_json.into_bytes()),
                }
            }
            Route::Participants { space } => match self
                .gateway()
                .http_participants_json(space.as_deref(), req.bearer.as_deref())
            {
                Ok(body) => Response::json_bytes(200, body.into_bytes()),
                Err(e) => Response::json_bytes(e.status, e.body_json.into_bytes()),
            },
            Route::Health => Response::json_bytes(
                200,
                self.gateway()
                    .http_health_json(self.audit_dropped(), self.restored.as_ref())
                    .into_bytes(),
            ),
            Route::Metrics => Response {
                status: 200,
                content_type: crate::server::metrics::CONTENT_TYPE,
                body: crate::server::metrics::render(
                    self.gateway(),
                    self.audit_dropped(),
                    &self.timing,
                )
                .into_bytes(),
                headers: Vec::new(),
            },
            Route::OAuthCallback { query } => self.oauth_callback(now, &query),
            Route::OAuthClient { participant, host } => {
                crate::server::oauth::client_document(self.gateway(), &participant, host.as_deref())
            }
            Route::NotFound
            | Route::WebSocket { .. }
            | Route::UiSession
            | Route::Ui { .. }
            | Route::Mcp => Response::error(404, "not_found", "no such endpoint"),
            Route::MethodNotAllowed => {
                Response::error(405, "method_not_allowed", "method not allowed here")
            }
        }
    }

    /// Carries out every queued output of the core: a fan-out whole, its frame framed once
    /// and never cloned per recipient.
    pub fn drain(&mut self) {
        let mut conns = std::mem::take(&mut self.fanout);
        while let Some(polled) = self.gateway_mut().poll_fanout(&mut conns) {
            match polled {
                Polled::Output(out) => self.carry(out),
                Polled::Fanout(frame) => {
                    for &conn in &conns {
                        self.transmit(conn, &frame);
                    }
                }
            }
        }
        self.fanout = conns;
        self.end_pass();
    }

    /// Takes the core's queued outputs without carrying them out, for
    /// [`GatewayHost::release`] later: a durable space holds what a pass of its core
    /// produced until the pass's entries are on the disk.
    pub fn hold(&mut self, held: &mut Vec<Output>) {
        while let Some(out) = self.gateway_mut().poll_output() {
            held.push(out);
        }
    }

    /// Carries out outputs taken with [`GatewayHost::hold`], as [`GatewayHost::drain`]
    /// would have.
    pub fn release(&mut self, held: impl IntoIterator<Item = Output>) {
        for out in held {
            self.carry(out);
        }
        self.end_pass();
    }

    /// Adds `frame` to the pass's frames for `conn`.
    fn transmit(&mut self, conn: ConnId, frame: &Bytes) {
        let len = frame.len();
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let first = c.pending.is_empty();
        // A frame that is not text is never written: release what the core counted for
        // it, or the connection's backlog would only grow.
        if !self.pass.push(&mut c.pending, frame) {
            tracing::error!("the core produced a frame that is not UTF-8; dropped");
            let sent = GwInput::Sent {
                conn,
                frames: 1,
                bytes: len,
            };
            self.core
                .gateway_mut()
                .handle_input(crate::clock::now(), sent);
            return;
        }
        if first {
            self.dirty.push(conn);
        }
        if self.track_backlog {
            c.queued.0 += 1;
            c.queued.1 += len;
            if self.core.gateway().backlog_exceeded(c.queued.0, c.queued.1)
                && !self.slow.contains(&conn)
            {
                self.slow.push(conn);
            }
        }
    }

    fn carry(&mut self, out: Output) {
        {
            match out {
                Output::Transmit { conn, frame } => self.transmit(conn, &frame),
                Output::Ping { conn } => {
                    self.flush_pending(conn);
                    if let Some(c) = self.conns.get(&conn) {
                        c.link.send(WriterCmd::Ping);
                    }
                }
                Output::Close { conn, code, reason } => {
                    self.flush_pending(conn);
                    if let Some(c) = self.conns.get(&conn) {
                        c.link.send(WriterCmd::Close(code, reason));
                        c.link.closing();
                    }
                }
                Output::AppendLog { path, line } => {
                    // The core's lines end with their newline; the writer adds one only
                    // where it is missing.
                    if let Some(l) = &self.logs {
                        l.append(path, line);
                    }
                }
                Output::Event(e) => log_event(&e),
            }
        }
    }

    /// The end of a pass over the core's outputs: audit batches and collected frames go to
    /// their writers.
    fn end_pass(&mut self) {
        // One queue entry per file and pass: the writer's channel is not touched per record.
        // Without a writer the batches are taken all the same, so that they never grow.
        let logs = &self.logs;
        let spare = |file| logs.as_ref().map_or_else(Vec::new, |l| l.spare(file));
        while let Some(batch) = self.core.gateway_mut().poll_audit(spare) {
            if let Some(l) = logs {
                l.append_audit(&self.log_dir, batch);
            }
        }
        if crate::server::hops::enabled() {
            crate::server::hops::pass_end();
        }
        self.flush_dirty();
    }

    /// Audit lines lost, by the writer's full queue or the core's untaken batch.
    fn audit_dropped(&self) -> u64 {
        self.logs.as_ref().map_or(0, LogHandle::dropped) + self.gateway().audit_dropped()
    }

    /// Hands one connection its frames of the pass so far (before a ping or a close, which
    /// must follow them), the pass going on for the others.
    fn flush_pending(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn)
            && !c.pending.is_empty()
        {
            c.link
                .send(WriterCmd::Frames(self.pass.take_now(&mut c.pending)));
        }
    }

    /// Hands every connection its frames of the pass (at its end).
    fn flush_dirty(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        let arena = self.pass.seal();
        let mut dirty = std::mem::take(&mut self.dirty);
        let mut now = None;
        for conn in dirty.drain(..) {
            if let Some(c) = self.conns.get_mut(&conn)
                && !c.pending.is_empty()
                && let Some((frames, bytes)) =
                    c.link.send_frames(PassFrames::take(&arena, &mut c.pending))
            {
                let now = *now.get_or_insert_with(crate::clock::now);
                self.sent(now, conn, frames, bytes);
            }
        }
        self.dirty = dirty;
    }
}

fn log_event(e: &GatewayEvent) {
    match e {
        GatewayEvent::Refused { .. } => tracing::debug!("{e:?}"),
        _ => tracing::info!("{e:?}"),
    }
}

/// The queue-report thresholds for a space: written frames and bytes a writer may hold
/// back before reporting them to the core (a small fraction of the queue limits, so the
/// core's view of a queue is never off by more than that, and a busy connection costs the
/// core one report per batch).
pub fn report_every(config: &mew_core::gateway::SpaceConfig) -> (usize, usize) {
    (
        (config.gateway.max_queue_frames / 16).clamp(1, 64),
        (config.gateway.max_queue_bytes / 16).clamp(1, 256 * 1024),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[derive(Clone, Default)]
    struct Link(Rc<RefCell<(Vec<String>, bool)>>);

    impl ConnLink for Link {
        fn send(&self, cmd: WriterCmd) {
            let s = match cmd {
                WriterCmd::Frames(f) => f
                    .texts()
                    .iter()
                    .map(|t| std::str::from_utf8(t).unwrap().to_owned())
                    .collect::<Vec<_>>()
                    .join("\n"),
                WriterCmd::Ping => "<ping>".into(),
                WriterCmd::Close(c, r) => format!("<close {c} {r}>"),
            };
            self.0.borrow_mut().0.push(s);
        }
        fn closing(&self) {
            self.0.borrow_mut().1 = true;
        }
    }

    struct Slot<T>(Rc<RefCell<Option<T>>>);
    impl<T> Reply<T> for Slot<T> {
        fn reply(self, value: T) -> Result<(), T> {
            *self.0.borrow_mut() = Some(value);
            Ok(())
        }
    }
    struct Gone;
    impl<T> Reply<T> for Gone {
        fn reply(self, value: T) -> Result<(), T> {
            Err(value)
        }
    }

    type In = Input<Link, Slot<ConnId>, Slot<Response>>;

    fn host() -> GatewayHost<Link> {
        let config = mew_core::gateway::SpaceConfig::from_yaml(
            "space: {id: s, name: s}\nparticipants:\n  a: {tokens: [ta], capabilities: [{kind: '*'}]}\n",
        )
        .unwrap();
        let gw = Gateway::new(config, 1, Box::new(mew_core::ids::IdGen::new(2)), None);
        GatewayHost::new(gw, None, PathBuf::from("."), Duration::from_secs(2))
    }

    fn connect(h: &mut GatewayHost<Link>, now: Time, token: &str) -> (ConnId, Link) {
        let link = Link::default();
        let slot = Slot(Rc::default());
        let input: In = Input::Connect {
            bearer: Some(token.into()),
            link: link.clone(),
            reply: Slot(slot.0.clone()),
        };
        h.apply(now, input);
        h.drain();
        let id = slot.0.borrow_mut().take().unwrap();
        (id, link)
    }

    #[test]
    fn welcome_goes_to_the_link_and_http_is_answered() {
        let mut h = host();
        let now = Time::from_unix_millis(2_000);
        let (_, link) = connect(&mut h, now, "ta");
        let sent = link.0.borrow().0.clone();
        assert!(sent[0].contains("system/welcome"), "{sent:?}");
        let slot = Slot(Rc::default());
        let req = HttpRequest {
            route: Route::Health,
            bearer: None,
            body: Bytes::new(),
        };
        h.apply::<Slot<ConnId>, _>(now, Input::Http(req, Slot(slot.0.clone())));
        let resp = slot.0.borrow_mut().take().unwrap();
        assert_eq!(resp.status, 200);
        let body: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
        assert_eq!(body["connections"], 1);
    }

    #[test]
    fn a_connection_gone_before_its_id_is_closed_at_once() {
        let mut h = host();
        let now = Time::from_unix_millis(2_000);
        let input: Input<Link, Gone, Gone> = Input::Connect {
            bearer: Some("ta".into()),
            link: Link::default(),
            reply: Gone,
        };
        h.apply(now, input);
        h.drain();
        assert_eq!(h.gateway().health().connections, 0);
    }

    #[test]
    fn shutdown_closes_then_stops_after_the_grace_period() {
        let mut h = host();
        let now = Time::from_unix_millis(2_000);
        let (id, link) = connect(&mut h, now, "ta");
        h.apply::<Gone, Gone>(now, Input::Shutdown);
        h.drain();
        assert!(
            link.0
                .borrow()
                .0
                .iter()
                .any(|s| s.starts_with("<close 1001"))
        );
        assert!(link.0.borrow().1, "marked closing");
        assert!(!h.finished());
        assert!(h.next_wake().unwrap() <= now + Duration::from_secs(2));
        assert_eq!(h.handle_wake(now + Duration::from_secs(3)), Flow::Stop);
        h.apply::<Gone, Gone>(now, Input::Closed(id));
        assert!(h.finished());
    }

    #[test]
    fn binary_stream_frames_do_not_grow_a_receivers_backlog() {
        let config = mew_core::gateway::SpaceConfig::from_yaml(
            "space: {id: s, name: s}\ngateway: {max_queue_frames: 64}\nparticipants:\n  a: {tokens: [ta], capabilities: [{kind: '*'}]}\n  b: {tokens: [tb], capabilities: [{kind: '*'}]}\n",
        )
        .unwrap();
        let gw = Gateway::new(config, 1, Box::new(mew_core::ids::IdGen::new(2)), None);
        let mut h = GatewayHost::new(gw, None, PathBuf::from("."), Duration::from_secs(2));
        let now = Time::from_unix_millis(2_000);
        let (a, a_link) = connect(&mut h, now, "ta");
        let (_, b_link) = connect(&mut h, now, "tb");
        let req = serde_json::json!({"protocol": "mew/v0.4", "id": "sr", "kind": "stream/request",
            "to": ["gateway"], "payload": {"direction": "upload"}});
        h.apply::<Gone, Gone>(now, Input::Frame(a, Bytes::from(req.to_string())));
        h.drain();
        let open = a_link
            .0
            .borrow()
            .0
            .iter()
            .flat_map(|f| f.lines().map(str::to_owned).collect::<Vec<_>>())
            .find(|f| f.contains("stream/open"))
            .expect("the stream opens");
        let open: serde_json::Value = serde_json::from_str(&open).unwrap();
        let sid = open["payload"]["stream_id"].as_str().unwrap().to_owned();
        // Far more binary (not UTF-8) data frames than b's backlog allows.
        for _ in 0..1000 {
            let mut f = format!("#{sid}#").into_bytes();
            f.extend_from_slice(&[0xff, 0xfe, 0x00, 0x80]);
            h.apply::<Gone, Gone>(now, Input::Frame(a, Bytes::from(f)));
            h.drain();
        }
        assert!(
            !b_link.0.borrow().0.iter().any(|s| s.starts_with("<close")),
            "{:?}",
            b_link.0.borrow().0
        );
        assert_eq!(h.gateway().health().connections, 2);
    }

    #[test]
    fn oversize_frames_close_with_1009() {
        let mut h = host();
        let now = Time::from_unix_millis(2_000);
        let (id, link) = connect(&mut h, now, "ta");
        h.apply::<Gone, Gone>(now, Input::Oversize(id, 10_000_000));
        assert!(
            link.0
                .borrow()
                .0
                .iter()
                .any(|s| s.starts_with("<close 1009")),
            "{:?}",
            link.0.borrow().0
        );
    }
}
