//! [`McpClient`]: the sans-IO state machine that drives one MCP server, over stdio or
//! Streamable HTTP, in any revision from 2024-11-05 to 2026-07-28.
//!
//! Over stdio the driver owns the process. It turns [`Output::Spawn`], [`Output::Write`] and
//! [`Output::Kill`] into process operations, and feeds back what happened: bytes on stdout and
//! stderr, spawn success or failure, exit, and the passage of time. Over HTTP it carries out
//! each [`Output::Http`] exchange and feeds back the answer's head, body chunks and end.
//!
//! Which revision: with [`McpConfig::protocol_version`] at 2026-07-28 the client first asks
//! `server/discover` and, on any error or no answer within [`McpConfig::discover_timeout`],
//! falls back to `initialize`; with a session revision it goes straight to `initialize`, as
//! clients of those revisions do. The revision in use is in [`ServerDescription`].

use super::asks::{Ask, AskId};
use super::error::McpError;
use super::exit::ExitStatus;
use super::framing::{Line, LineBuffer};
use super::http::{self, ExchangeId, HttpMethod, HttpRequest};
use super::jsonrpc::{self, Decoded, RpcDecodeError, RpcError, RpcId, RpcMessage};
use super::listing::{Catalog, ListKind, PageOutcome, Pager, Prompt, Resource, Tool};
use super::restart::RestartBackoff;
use super::server_requests::{self, Root};
use super::sse::SseParser;
use super::stateless::{self, CacheHint};
use super::version::ProtocolVersion;
use crate::Time;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// How the client reaches its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// A child process, one JSON-RPC message per line on stdin and stdout.
    #[default]
    Stdio,
    /// Streamable HTTP to one endpoint; every exchange is an [`Output::Http`].
    Http,
}

/// Which of the server's questions the owner answers (see [`McpEvent::Asked`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskPolicy {
    /// Declare elicitation (form and URL mode) and hand elicitations to the owner. Off: an
    /// elicitation is refused at once.
    pub elicitation: bool,
    /// Declare sampling and hand sampling requests to the owner. Off: declined at once with
    /// a reason.
    pub sampling: bool,
    /// Hand `roots/list` to the owner (it is the caller's to answer). A refusal, or no
    /// answer in time, is answered with [`McpConfig::roots`]; off: answered with those at
    /// once.
    pub roots: bool,
    /// How long a question may stay unanswered; then an elicitation is cancelled and
    /// sampling refused.
    pub timeout: Duration,
    /// Questions open at once; more are refused.
    pub max_open: usize,
}

impl Default for AskPolicy {
    fn default() -> Self {
        AskPolicy {
            elicitation: false,
            sampling: false,
            roots: false,
            timeout: Duration::from_secs(600),
            max_open: 64,
        }
    }
}

/// Settings of an [`McpClient`].
#[derive(Debug, Clone)]
pub struct McpConfig {
    /// `clientInfo.name` sent in `initialize` (and in `_meta` of 2026-07-28 requests).
    pub client_name: String,
    /// `clientInfo.version` sent likewise.
    pub client_version: String,
    /// The newest revision offered. 2026-07-28 tries `server/discover` first; a session
    /// revision is offered in `initialize`, and the server may answer with an older one.
    pub protocol_version: ProtocolVersion,
    /// stdio or Streamable HTTP.
    pub transport: Transport,
    /// How long `server/discover` may take before `initialize` is tried instead.
    pub discover_timeout: Duration,
    /// Time from spawn to the `initialize` reply (`bridge_config.init_timeout`).
    pub init_timeout: Duration,
    /// Timeout of each `*/list` request.
    pub list_timeout: Duration,
    /// Restarts after crashes and failed starts.
    pub restart: RestartBackoff,
    /// Grace between terminating the server and killing it.
    pub kill_grace: Duration,
    /// Longest stdout line accepted, in bytes.
    pub max_line_len: usize,
    /// Longest stderr line reported whole; longer ones are reported as dropped.
    pub max_stderr_line_len: usize,
    /// Calls in flight at once.
    pub max_in_flight: usize,
    /// Items accepted per list.
    pub max_list_items: usize,
    /// Pages followed per list.
    pub max_list_pages: usize,
    /// Roots answered to `roots/list`.
    pub roots: Vec<Root>,
    /// Which questions the owner answers.
    pub asks: AskPolicy,
    /// `input_required` rounds one call may take.
    pub max_input_rounds: u32,
    /// Largest JSON body of an HTTP answer, in bytes.
    pub max_http_body: usize,
    /// Longest line of an event stream, in bytes.
    pub max_sse_line: usize,
    /// Largest event of an event stream, in bytes of data.
    pub max_sse_event: usize,
    /// Times a broken response stream is resumed (session revisions over HTTP).
    pub max_resumes: u32,
    /// Open the server's GET stream after a session starts (session revisions over HTTP).
    pub listen: bool,
    /// The log level asked of a 2026-07-28 server per request (`_meta`); none: no logs.
    pub log_level: Option<String>,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            client_name: "mew-bridge".into(),
            client_version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: ProtocolVersion::LATEST,
            transport: Transport::Stdio,
            discover_timeout: Duration::from_secs(10),
            init_timeout: Duration::from_secs(30),
            list_timeout: Duration::from_secs(30),
            restart: RestartBackoff::default(),
            kill_grace: Duration::from_secs(2),
            max_line_len: 16 * 1024 * 1024,
            max_stderr_line_len: 64 * 1024,
            max_in_flight: 1024,
            max_list_items: 10_000,
            max_list_pages: 1_000,
            roots: Vec::new(),
            asks: AskPolicy::default(),
            max_input_rounds: 8,
            max_http_body: 16 * 1024 * 1024,
            max_sse_line: 16 * 1024 * 1024,
            max_sse_event: 16 * 1024 * 1024,
            max_resumes: 3,
            listen: true,
            log_level: None,
        }
    }
}

impl McpConfig {
    /// Settings for a server over Streamable HTTP, offering every revision up to
    /// 2026-07-28.
    pub fn http() -> Self {
        McpConfig {
            transport: Transport::Http,
            protocol_version: ProtocolVersion::NEWEST,
            ..McpConfig::default()
        }
    }

    /// The capabilities declared to the server.
    pub fn client_capabilities(&self) -> Value {
        let mut caps = Map::new();
        caps.insert("roots".into(), json!({ "listChanged": true }));
        if self.asks.elicitation {
            caps.insert("elicitation".into(), json!({ "form": {}, "url": {} }));
        }
        if self.asks.sampling {
            caps.insert("sampling".into(), json!({}));
        }
        Value::Object(caps)
    }

    fn client_info(&self) -> Value {
        json!({ "name": self.client_name, "version": self.client_version })
    }
}

/// Identifies a call made with [`McpClient::call`]; it is also the JSON-RPC id on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct McpCallId(pub u64);

/// What the server reported about itself in the handshake.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerDescription {
    /// `serverInfo` (`name`, `version`, ...).
    pub server_info: Value,
    /// The server's `capabilities`.
    pub capabilities: Map<String, Value>,
    /// The negotiated revision.
    pub protocol_version: ProtocolVersion,
    /// `instructions`, if given.
    pub instructions: Option<String>,
}

/// Something on stdout that is not a usable message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StdoutIssue {
    /// A line over the length limit was dropped.
    #[error("dropped a stdout line longer than {limit} bytes")]
    Overlong {
        /// The limit.
        limit: usize,
    },
    /// A line that is not UTF-8.
    #[error("dropped a stdout line that is not UTF-8")]
    NotUtf8,
    /// A line that is not a JSON-RPC message (typically a log line on the wrong stream).
    #[error("dropped a stdout line: {error} ({snippet:?})")]
    Undecodable {
        /// Why.
        error: RpcDecodeError,
        /// The line's first characters.
        snippet: String,
    },
    /// A response to no request in flight (e.g. one that arrived after its timeout).
    #[error("response to unknown request id {0}")]
    UnknownResponse(String),
    /// An HTTP answer or event stream that could not be used.
    #[error("{0}")]
    Http(String),
}

/// Events for the owner of the client.
#[derive(Debug, Clone, PartialEq)]
pub enum McpEvent {
    /// The handshake and the initial lists are done; calls may be made. Emitted again after
    /// every successful restart.
    Ready(ServerDescription),
    /// The tools were (re)listed.
    ToolsChanged(Vec<Tool>),
    /// The resources were (re)listed.
    ResourcesChanged(Vec<Resource>),
    /// The prompts were (re)listed.
    PromptsChanged(Vec<Prompt>),
    /// A list request failed; the previous list stays in place.
    ListFailed {
        /// Which list.
        kind: ListKind,
        /// Why.
        error: McpError,
    },
    /// A call finished: the server's `result`, its error, or a local failure.
    CallCompleted {
        /// The call.
        call_id: McpCallId,
        /// The outcome.
        result: Result<Value, McpError>,
    },
    /// A server notification other than list changes (`notifications/message`,
    /// `notifications/progress`, `notifications/resources/updated`, ...).
    Notification {
        /// The method.
        method: String,
        /// Its params.
        params: Option<Value>,
    },
    /// `notifications/progress`.
    Progress {
        /// The call it is about, when its progress token is one a call carried.
        call_id: Option<McpCallId>,
        /// The token.
        token: Value,
        /// Progress so far.
        progress: f64,
        /// The total, if known.
        total: Option<f64>,
        /// A message, if given.
        message: Option<String>,
    },
    /// `notifications/message`: a log line of the server.
    Log {
        /// The call it came with, when known (a message on a call's response stream); the
        /// stdio transport carries logs apart from any call.
        call_id: Option<McpCallId>,
        /// `debug` ... `emergency`.
        level: String,
        /// The logger's name, if given.
        logger: Option<String>,
        /// The payload.
        data: Value,
    },
    /// The server asks the owner something; answer with [`McpClient::answer`]. Unanswered
    /// questions close after [`AskPolicy::timeout`].
    Asked {
        /// The question.
        ask_id: AskId,
        /// The call it belongs to, when known (a question on a call's response stream, or an
        /// `input_required` round).
        call_id: Option<McpCallId>,
        /// The `input_required` round (1-based) it came in; none for a server request.
        round: Option<u32>,
        /// What is asked.
        ask: Ask,
    },
    /// A question closed without the owner's answer (withdrawn by the server, its call
    /// ended, or nobody answered in time).
    AskClosed {
        /// The question.
        ask_id: AskId,
        /// Why.
        reason: String,
    },
    /// A question refused at once because the owner does not answer its kind.
    Declined {
        /// The method asked (`sampling/createMessage`, ...).
        method: String,
        /// The reason given to the server.
        reason: String,
    },
    /// A listed tool left out because it cannot be called correctly (invalid `x-mcp-header`
    /// annotations over HTTP).
    ToolRefused {
        /// The tool.
        name: String,
        /// Why.
        reason: String,
    },
    /// A line the server wrote to stderr (lossily decoded).
    Stderr(String),
    /// Something unusable on stdout; it was dropped and reading went on.
    StdoutIssue(StdoutIssue),
    /// The server failed to start or stopped running; a restart or [`McpEvent::GaveUp`]
    /// follows.
    Failed(McpError),
    /// A restart is scheduled.
    Restarting {
        /// 1-based attempt number.
        attempt: u32,
        /// Delay before it.
        delay: Duration,
    },
    /// No more restarts; the client is finished.
    GaveUp {
        /// The last failure.
        reason: McpError,
    },
    /// The server exited after [`McpClient::close`].
    Stopped(ExitStatus),
}

/// Instructions to the driver.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Start the server process; answer with [`McpClient::handle_spawned`] or
    /// [`McpClient::handle_spawn_failed`].
    Spawn,
    /// Write this line (newline included) to the server's stdin.
    Write(String),
    /// Terminate the server (close stdin, SIGTERM), then kill it if it is still running after
    /// `grace`; report the exit with [`McpClient::handle_exited`].
    Kill {
        /// Time to wait before killing.
        grace: Duration,
    },
    /// Carry out this HTTP exchange; answer with [`McpClient::handle_http_response`], then
    /// [`McpClient::handle_http_body`] and [`McpClient::handle_http_end`], or
    /// [`McpClient::handle_http_failed`].
    Http(HttpRequest),
    /// Abandon this exchange (close its stream); report nothing more about it.
    HttpAbort(ExchangeId),
    /// An event.
    Event(McpEvent),
}

/// Where the client is in the server's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Not started.
    Idle,
    /// Spawn requested, waiting for the driver's answer.
    Spawning,
    /// `initialize` sent, waiting for its reply.
    Initializing,
    /// Handshake done, initial lists in flight; calls are accepted.
    Listing,
    /// Running; calls are accepted.
    Ready,
    /// Termination requested, waiting for the exit.
    Stopping,
    /// Waiting to restart.
    Backoff,
    /// Out of restarts.
    GaveUp,
    /// Shut down on request.
    Stopped,
}

/// What to do once a process we asked to stop has exited.
#[derive(Debug, Clone, PartialEq)]
enum AfterExit {
    Restart(McpError),
    GiveUp(McpError),
    Shutdown,
}

#[derive(Debug)]
enum State {
    Idle,
    Spawning {
        deadline: Time,
    },
    Initializing {
        request: u64,
        deadline: Time,
    },
    Listing,
    Ready,
    /// Kill sent; past `deadline` without an exit report the process is taken for gone.
    Stopping {
        after: AfterExit,
        deadline: Time,
    },
    Backoff {
        until: Time,
    },
    GaveUp,
    Stopped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Discover,
    Initialize,
    List(ListKind),
    Call(McpCallId),
}

#[derive(Debug)]
struct Pending {
    deadline: Time,
    timeout: Duration,
    purpose: Purpose,
    /// The HTTP exchange carrying it.
    exchange: Option<ExchangeId>,
    /// Times its response stream was resumed.
    resumes: u32,
}

/// A call the owner made, across its `input_required` rounds.
#[derive(Debug)]
struct CallState {
    method: String,
    /// Kept for the retries of `input_required` rounds (stateless revision only).
    params: Option<Value>,
    timeout: Duration,
    /// The JSON-RPC id of the request in flight; none while waiting for answers.
    wire: Option<u64>,
    round: u32,
    progress_token: Option<Value>,
    waiting: Option<Waiting>,
}

/// The answers an `input_required` round still waits for.
#[derive(Debug, Default)]
struct Waiting {
    open: Vec<AskId>,
    responses: Map<String, Value>,
    request_state: Option<String>,
}

/// Where a question came from, so its answer goes back the same way.
#[derive(Debug, Clone)]
enum AskOrigin {
    Request(RpcId),
    Input { call: McpCallId, key: String },
}

#[derive(Debug)]
struct OpenAsk {
    ask: Ask,
    origin: AskOrigin,
    deadline: Time,
}

/// What an HTTP exchange carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExchangeKind {
    /// A POST; `request` is the id of the request it carries, if any.
    Post { request: Option<u64> },
    /// The session's GET stream.
    Listen,
    /// A GET resuming the response stream of `request`.
    Resume { request: u64 },
    /// The session's DELETE.
    Delete,
}

/// What is being done with an HTTP answer's body.
#[derive(Debug)]
enum Body {
    /// No head yet.
    Awaiting,
    /// A JSON body being gathered.
    Json {
        buf: Vec<u8>,
        status: u16,
        overflow: bool,
    },
    /// An event stream.
    Sse(Box<SseParser>),
    /// A body of no use; `snippet` keeps its start for the error message.
    Error {
        status: u16,
        snippet: Vec<u8>,
        what: String,
    },
    /// Nothing to read (202, or an answer already acted upon).
    Ignore,
}

#[derive(Debug)]
struct Exchange {
    kind: ExchangeKind,
    body: Body,
}

/// The session's GET stream.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Listen {
    Off,
    Open(ExchangeId),
    Due(Time),
}

/// A resumption of a broken response stream, waiting for its delay.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ResumeDue {
    due: Time,
    request: u64,
    last_event_id: String,
}

/// One list kind's fetch state.
#[derive(Debug, Default)]
struct ListSlot {
    pager: Option<Pager>,
    /// A change was announced while a pass was running; run another pass after it.
    again: bool,
}

/// The sans-IO MCP client. See the module documentation.
///
/// | input | what it may queue |
/// |---|---|
/// | [`start`](Self::start) | `Spawn` (stdio), `Http` (the handshake) |
/// | [`handle_spawned`](Self::handle_spawned) | `Write` (`server/discover` or `initialize`) |
/// | [`handle_spawn_failed`](Self::handle_spawn_failed), [`handle_exited`](Self::handle_exited) | `Event` (`Failed`, then `Restarting` or `GaveUp`; `Stopped` after [`close`](Self::close)); calls in flight fail: `Event` (`CallCompleted`) |
/// | [`handle_stdout`](Self::handle_stdout), [`handle_http_body`](Self::handle_http_body), [`handle_http_end`](Self::handle_http_end) | `Write`/`Http` (`notifications/initialized`, listings, answers to the server's requests, retries of `input_required` calls); `Event` (`Ready`, `ToolsChanged`, `ResourcesChanged`, `PromptsChanged`, `ListFailed`, `CallCompleted`, `Asked`, `Progress`, `Log`, `Notification`, `StdoutIssue`) |
/// | [`handle_http_response`](Self::handle_http_response), [`handle_http_failed`](Self::handle_http_failed) | as above, and `Event` (`Failed`, ...) when the handshake or the session fails |
/// | [`handle_stderr`](Self::handle_stderr) | `Event` (`Stderr`, a line at a time) |
/// | [`handle_timeout`](Self::handle_timeout) | `Spawn` (a restart due), `Kill` (no `initialize` answer in time), `Http` (`initialize` after a silent `server/discover`, stream resumptions), `Event` (`CallCompleted` for calls past their deadline, `AskClosed`) |
/// | [`call`](Self::call), [`cancel`](Self::cancel), [`notify`](Self::notify), [`set_roots`](Self::set_roots), [`answer`](Self::answer) | `Write` or `Http` |
/// | [`close`](Self::close) | `Kill` (stdio), `Http` (DELETE) and `HttpAbort`; calls in flight fail: `Event` (`CallCompleted`) |
#[derive(Debug)]
pub struct McpClient {
    config: McpConfig,
    state: State,
    /// Ids are never reused, even across restarts, so a late reply from an old process
    /// cannot be mistaken for a new request's.
    next_id: u64,
    pending: BTreeMap<u64, Pending>,
    calls: BTreeMap<McpCallId, CallState>,
    asks: BTreeMap<AskId, OpenAsk>,
    next_ask: u64,
    out: VecDeque<Output>,
    stdout: LineBuffer,
    stderr: LineBuffer,
    server: Option<ServerDescription>,
    /// The revision requests are sent in: the one being tried during the handshake, then
    /// the negotiated one. None while `initialize` is in flight.
    speaking: Option<ProtocolVersion>,
    catalog: Catalog,
    cache_hints: [Option<CacheHint>; 3],
    discover_cache: Option<CacheHint>,
    lists: [ListSlot; 3],
    /// Kinds still to be listed before `Ready` is announced.
    initial_lists: [bool; 3],
    /// Consecutive restarts since the server was last ready.
    attempts: u32,
    // ---- Streamable HTTP ----
    next_exchange: u64,
    exchanges: BTreeMap<ExchangeId, Exchange>,
    session_id: Option<String>,
    listen: Listen,
    /// Where a reopened GET stream picks up.
    listen_last_id: Option<String>,
    /// Until when the session's first GET stream may take to answer before the client is
    /// ready without it: the server's messages outside calls then have their channel before
    /// the first call, and a GET that arrives after a call is never mistaken for one that
    /// resumes the call's stream.
    listen_wait: Option<Time>,
    resumes: Vec<ResumeDue>,
    /// `server/discover` requests sent in this handshake.
    discover_tries: u32,
    /// The call whose response stream is being read, while it is (questions on it are
    /// that call's).
    inbound_call: Option<McpCallId>,
}

fn slot(kind: ListKind) -> usize {
    match kind {
        ListKind::Tools => 0,
        ListKind::Resources => 1,
        ListKind::Prompts => 2,
    }
}

const SNIPPET_CHARS: usize = 120;

/// How long past the kill grace a process may take to be reported gone.
const EXIT_REPORT_SLACK: Duration = Duration::from_secs(5);

impl McpClient {
    /// A client that will start its server on [`McpClient::start`].
    pub fn new(config: McpConfig) -> Self {
        McpClient {
            stdout: LineBuffer::new(config.max_line_len),
            stderr: LineBuffer::new(config.max_stderr_line_len),
            config,
            state: State::Idle,
            next_id: 1,
            pending: BTreeMap::new(),
            calls: BTreeMap::new(),
            asks: BTreeMap::new(),
            next_ask: 1,
            out: VecDeque::new(),
            server: None,
            speaking: None,
            catalog: Catalog::default(),
            cache_hints: [None; 3],
            discover_cache: None,
            lists: Default::default(),
            initial_lists: [false; 3],
            attempts: 0,
            next_exchange: 1,
            exchanges: BTreeMap::new(),
            session_id: None,
            listen: Listen::Off,
            listen_last_id: None,
            listen_wait: None,
            resumes: Vec::new(),
            discover_tries: 0,
            inbound_call: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &McpConfig {
        &self.config
    }

    /// The current phase (`server/discover` counts as part of the handshake).
    pub fn phase(&self) -> Phase {
        match self.state {
            State::Idle => Phase::Idle,
            State::Spawning { .. } => Phase::Spawning,
            State::Initializing { .. } => Phase::Initializing,
            State::Listing => Phase::Listing,
            State::Ready => Phase::Ready,
            State::Stopping { .. } => Phase::Stopping,
            State::Backoff { .. } => Phase::Backoff,
            State::GaveUp => Phase::GaveUp,
            State::Stopped => Phase::Stopped,
        }
    }

    /// Whether calls are accepted now.
    pub fn is_operational(&self) -> bool {
        matches!(self.state, State::Listing | State::Ready)
    }

    /// What the server said about itself in the last successful handshake.
    pub fn server(&self) -> Option<&ServerDescription> {
        self.server.as_ref()
    }

    /// The revision in use with the current server, once the handshake is done (for status
    /// displays).
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.server.as_ref().map(|d| d.protocol_version)
    }

    /// The tools, resources and prompts last listed.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The caching hint of the last listing of `kind` (2026-07-28 servers send one).
    pub fn cache_hint(&self, kind: ListKind) -> Option<CacheHint> {
        self.cache_hints[slot(kind)]
    }

    /// The caching hint of the `server/discover` answer.
    pub fn discover_cache_hint(&self) -> Option<CacheHint> {
        self.discover_cache
    }

    /// The session a 2025 server over HTTP assigned, if any.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// Calls in flight (including those waiting for answers to the server's questions).
    pub fn calls_in_flight(&self) -> usize {
        self.calls.len()
    }

    /// Questions of the server waiting for the owner's answer.
    pub fn open_asks(&self) -> usize {
        self.asks.len()
    }

    /// The `inputRequests` key of an open question that came in an `input_required` round.
    pub fn input_key(&self, ask: AskId) -> Option<&str> {
        match &self.asks.get(&ask)?.origin {
            AskOrigin::Input { key, .. } => Some(key),
            AskOrigin::Request(_) => None,
        }
    }

    /// Requests in flight of any purpose, each with its deadline.
    pub fn request_deadlines(&self) -> impl Iterator<Item = Time> + '_ {
        self.pending.values().map(|p| p.deadline)
    }

    /// Starts the server. Errors if already started.
    pub fn start(&mut self, now: Time) -> Result<(), McpError> {
        if !matches!(self.state, State::Idle) {
            return Err(McpError::AlreadyStarted);
        }
        self.spawn(now);
        Ok(())
    }

    /// Sends a request (`tools/call`, `resources/read`, `prompts/get`, ...). Its outcome comes
    /// back as [`McpEvent::CallCompleted`], at the latest when `timeout` has passed without an
    /// answer (time spent waiting for the owner's answers to `input_required` questions does
    /// not count; their own bound is [`AskPolicy::timeout`]).
    pub fn call(
        &mut self,
        now: Time,
        method: &str,
        params: Option<Value>,
        timeout: Duration,
    ) -> Result<McpCallId, McpError> {
        if matches!(method, "initialize" | "server/discover")
            || method.starts_with("notifications/")
        {
            return Err(McpError::ReservedMethod(method.into()));
        }
        if !self.is_operational() {
            return Err(McpError::NotReady);
        }
        if self.calls.len() >= self.config.max_in_flight {
            return Err(McpError::TooManyCalls(self.config.max_in_flight));
        }
        let call = McpCallId(self.next_id);
        let progress_token = params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .cloned();
        let wire = self.send_request(now, method, params.as_ref(), timeout, Purpose::Call(call));
        debug_assert_eq!(wire, call.0);
        let stateless = self.speaking.is_some_and(ProtocolVersion::is_stateless);
        self.calls.insert(
            call,
            CallState {
                method: method.to_owned(),
                params: if stateless { params } else { None },
                timeout,
                wire: Some(wire),
                round: 0,
                progress_token,
                waiting: None,
            },
        );
        Ok(call)
    }

    /// Abandons a call: the server is told (`notifications/cancelled`, or the stream is
    /// closed) and no [`McpEvent::CallCompleted`] follows. Returns whether the call was in
    /// flight.
    pub fn cancel(&mut self, call_id: McpCallId, reason: Option<&str>) -> bool {
        let Some(call) = self.calls.remove(&call_id) else {
            return false;
        };
        self.close_call_asks(call_id, "the call was cancelled");
        if let Some(wire) = call.wire
            && let Some(p) = self.pending.remove(&wire)
        {
            self.abandon_request(wire, p.exchange, reason);
        }
        true
    }

    /// Sends a notification to the server (e.g. `notifications/roots/list_changed`).
    pub fn notify(&mut self, method: &str, params: Option<Value>) -> Result<(), McpError> {
        if method == "notifications/initialized" {
            return Err(McpError::ReservedMethod(method.into()));
        }
        if !self.is_operational() {
            return Err(McpError::NotReady);
        }
        self.transmit(Msg::Notification {
            method,
            params: params.as_ref(),
        });
        Ok(())
    }

    /// Replaces the roots and tells a running server of a session revision they changed.
    pub fn set_roots(&mut self, roots: Vec<Root>) {
        self.config.roots = roots;
        if self.is_operational() && !self.speaking.is_some_and(ProtocolVersion::is_stateless) {
            self.transmit(Msg::Notification {
                method: "notifications/roots/list_changed",
                params: None,
            });
        }
    }

    /// Stops the server for good: calls in flight fail with [`McpError::Shutdown`], the server
    /// is terminated (a session ended) and [`McpEvent::Stopped`] follows.
    pub fn close(&mut self, now: Time) {
        match self.state {
            State::Spawning { .. } | State::Initializing { .. } | State::Listing | State::Ready => {
                self.fail_all(McpError::Shutdown);
                self.stop(now, AfterExit::Shutdown);
            }
            State::Stopping { ref mut after, .. } => *after = AfterExit::Shutdown,
            State::Idle | State::Backoff { .. } | State::GaveUp | State::Stopped => {
                self.state = State::Stopped;
            }
        }
    }

    /// The next output for the driver.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// When [`McpClient::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Time> {
        let state = match self.state {
            State::Spawning { deadline } | State::Initializing { deadline, .. } => Some(deadline),
            State::Backoff { until } => Some(until),
            State::Stopping { deadline, .. } => Some(deadline),
            _ => None,
        };
        let listen = match self.listen {
            Listen::Due(t) => Some(t),
            _ => self.listen_wait,
        };
        [
            state,
            self.pending.values().map(|p| p.deadline).min(),
            self.asks.values().map(|a| a.deadline).min(),
            self.resumes.iter().map(|r| r.due).min(),
            listen,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The driver started the process.
    pub fn handle_spawned(&mut self, now: Time) {
        let State::Spawning { deadline } = self.state else {
            return;
        };
        self.stdout.reset();
        self.stderr.reset();
        self.begin_handshake(now, deadline);
    }

    /// The driver could not start the process.
    pub fn handle_spawn_failed(&mut self, now: Time, error: impl Into<String>) {
        if !matches!(self.state, State::Spawning { .. }) {
            return;
        }
        let err = McpError::SpawnFailed(error.into());
        self.emit(McpEvent::Failed(err.clone()));
        self.after_exit(now, AfterExit::Restart(err));
    }

    /// Bytes from the server's stdout, split anywhere.
    pub fn handle_stdout(&mut self, now: Time, bytes: &[u8]) {
        let mut buf = std::mem::replace(&mut self.stdout, LineBuffer::new(0));
        buf.feed(bytes, |line| self.on_line(now, line));
        self.stdout = buf;
    }

    /// Bytes from the server's stderr; reported line by line as [`McpEvent::Stderr`].
    pub fn handle_stderr(&mut self, _now: Time, bytes: &[u8]) {
        let mut buf = std::mem::replace(&mut self.stderr, LineBuffer::new(0));
        buf.feed(bytes, |line| {
            let text = match line {
                Line::Text(t) if t.iter().all(u8::is_ascii_whitespace) => return,
                Line::Text(t) => String::from_utf8_lossy(t).into_owned(),
                Line::Overlong { limit } => {
                    format!("<stderr line longer than {limit} bytes dropped>")
                }
            };
            self.emit(McpEvent::Stderr(text));
        });
        self.stderr = buf;
    }

    /// The server process exited (after its stdout was read to the end).
    pub fn handle_exited(&mut self, now: Time, status: ExitStatus) {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Stopping { after, .. } => self.exited_after_stop(now, after, status),
            State::Spawning { .. } | State::Initializing { .. } => {
                self.fail_all(McpError::InitExited(status));
                let err = McpError::InitExited(status);
                self.emit(McpEvent::Failed(err.clone()));
                self.after_exit(now, AfterExit::Restart(err));
            }
            State::Listing | State::Ready => {
                let err = McpError::ServerExited(status);
                self.fail_all(err.clone());
                self.emit(McpEvent::Failed(err.clone()));
                self.after_exit(now, AfterExit::Restart(err));
            }
            // No process of ours is running; a stray report changes nothing.
            other => self.state = other,
        }
    }

    /// Time passed; fires every deadline at or before `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in expired {
            let Some(p) = self.pending.remove(&id) else {
                continue;
            };
            match p.purpose {
                Purpose::Call(call) => {
                    self.abandon_request(id, p.exchange, Some("timed out"));
                    if self.calls.remove(&call).is_some() {
                        self.close_call_asks(call, "the call timed out");
                        self.emit(McpEvent::CallCompleted {
                            call_id: call,
                            result: Err(McpError::Timeout(p.timeout)),
                        });
                    }
                }
                Purpose::List(kind) => {
                    self.abandon_request(id, p.exchange, Some("timed out"));
                    self.list_failed(now, kind, McpError::Timeout(p.timeout));
                }
                Purpose::Discover => {
                    self.drop_exchange(p.exchange);
                    self.discover_failed(now);
                }
                // The state deadline below covers the handshake.
                Purpose::Initialize => {}
            }
        }
        self.expire_asks(now);
        if self.listen_wait.is_some_and(|t| t <= now) {
            self.listen_settled();
        }
        if matches!(self.listen, Listen::Due(t) if t <= now) {
            self.listen = Listen::Off;
            self.open_listen();
        }
        let (due, later): (Vec<ResumeDue>, Vec<ResumeDue>) = std::mem::take(&mut self.resumes)
            .into_iter()
            .partition(|r| r.due <= now);
        self.resumes = later;
        for r in due {
            self.resume(r);
        }
        match self.state {
            State::Spawning { deadline } | State::Initializing { deadline, .. }
                if deadline <= now =>
            {
                if let State::Initializing { request, .. } = self.state
                    && let Some(p) = self.pending.remove(&request)
                {
                    self.drop_exchange(p.exchange);
                }
                let err = McpError::InitTimeout(self.config.init_timeout);
                self.abort_server(now, err, false);
            }
            State::Stopping { deadline, .. } if deadline <= now => {
                // The driver never reported the exit; carry on rather than wait forever.
                let State::Stopping { after, .. } = std::mem::replace(&mut self.state, State::Idle)
                else {
                    unreachable!("matched above")
                };
                self.exited_after_stop(now, after, ExitStatus::default());
            }
            State::Backoff { until } if until <= now => self.spawn(now),
            _ => {}
        }
    }

    // ---- internals ----

    fn emit(&mut self, e: McpEvent) {
        self.out.push_back(Output::Event(e));
    }

    fn spawn(&mut self, now: Time) {
        let deadline = now + self.config.init_timeout;
        match self.config.transport {
            Transport::Stdio => {
                self.state = State::Spawning { deadline };
                self.out.push_back(Output::Spawn);
            }
            Transport::Http => self.begin_handshake(now, deadline),
        }
    }

    /// `server/discover` when the newest revision offered is stateless, else `initialize`.
    fn begin_handshake(&mut self, now: Time, deadline: Time) {
        self.session_id = None;
        self.discover_tries = 0;
        let newest = self.config.protocol_version;
        if newest.is_stateless() {
            self.speaking = Some(newest);
            self.send_discover(now, deadline);
        } else {
            self.send_initialize(now, newest, deadline);
        }
    }

    fn send_discover(&mut self, now: Time, deadline: Time) {
        let timeout = self
            .config
            .discover_timeout
            .min(deadline.saturating_since(now));
        self.discover_tries += 1;
        let request = self.send_request(now, "server/discover", None, timeout, Purpose::Discover);
        self.state = State::Initializing { request, deadline };
    }

    fn send_initialize(&mut self, now: Time, version: ProtocolVersion, deadline: Time) {
        self.speaking = None;
        let params = json!({
            "protocolVersion": version.as_str(),
            "capabilities": self.config.client_capabilities(),
            "clientInfo": self.config.client_info(),
        });
        let timeout = deadline.saturating_since(now);
        let request = self.send_request(
            now,
            "initialize",
            Some(&params),
            timeout,
            Purpose::Initialize,
        );
        self.state = State::Initializing { request, deadline };
    }

    /// `server/discover` failed or went unanswered: try `initialize` with the newest session
    /// revision offered.
    pub(super) fn discover_failed(&mut self, now: Time) {
        let State::Initializing { deadline, .. } = self.state else {
            return;
        };
        let version = self.config.protocol_version.min(ProtocolVersion::LATEST);
        self.send_initialize(now, version, deadline);
    }

    fn send_request(
        &mut self,
        now: Time,
        method: &str,
        params: Option<&Value>,
        timeout: Duration,
        purpose: Purpose,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let with_meta;
        let params = match self.speaking {
            Some(v) if v.is_stateless() => {
                let mut p = stateless::with_request_meta(
                    params,
                    v,
                    &self.config.client_capabilities(),
                    &self.config.client_info(),
                );
                if let (Some(level), true) =
                    (&self.config.log_level, matches!(purpose, Purpose::Call(_)))
                {
                    p["_meta"][stateless::META_LOG_LEVEL] = Value::String(level.clone());
                }
                with_meta = p;
                Some(&with_meta)
            }
            _ => params,
        };
        let exchange = self.transmit(Msg::Request { id, method, params });
        self.pending.insert(
            id,
            Pending {
                deadline: now + timeout,
                timeout,
                purpose,
                exchange,
                resumes: 0,
            },
        );
        id
    }

    /// Sends one message the way the transport wants it; returns the HTTP exchange carrying
    /// it.
    pub(super) fn transmit(&mut self, msg: Msg<'_>) -> Option<ExchangeId> {
        let line = match msg {
            Msg::Request { id, method, params } => jsonrpc::request_line(id, method, params),
            Msg::Notification { method, params } => jsonrpc::notification_line(method, params),
            Msg::Response { id, outcome } => jsonrpc::response_line(id, outcome),
        };
        if self.config.transport == Transport::Stdio {
            self.out.push_back(Output::Write(line));
            return None;
        }
        let mut body = line;
        body.pop();
        let mut headers = vec![
            ("Content-Type".to_owned(), "application/json".to_owned()),
            (
                "Accept".to_owned(),
                "application/json, text/event-stream".to_owned(),
            ),
        ];
        self.session_headers(&mut headers);
        let (method, params, request) = match msg {
            Msg::Request { id, method, params } => (Some(method), params, Some(id)),
            Msg::Notification { method, params } => (Some(method), params, None),
            Msg::Response { .. } => (None, None, None),
        };
        if let Some(m) = method {
            headers.extend(http::standard_headers(m, params));
            if m == "tools/call"
                && let Some(tool) = http::mcp_name(m, params).and_then(|n| self.catalog.tool(n))
                && let Some(schema) = tool.definition.get("inputSchema")
            {
                headers.extend(http::param_headers(
                    schema,
                    params.and_then(|p| p.get("arguments")),
                ));
            }
        }
        Some(self.open_exchange(
            HttpMethod::Post,
            headers,
            Some(body),
            ExchangeKind::Post { request },
        ))
    }

    /// `MCP-Protocol-Version` once a revision is in use, and the session id.
    pub(super) fn session_headers(&self, headers: &mut Vec<(String, String)>) {
        if let Some(v) = self.speaking {
            headers.push((
                http::HEADER_PROTOCOL_VERSION.to_owned(),
                v.as_str().to_owned(),
            ));
        }
        if let Some(s) = &self.session_id {
            headers.push((http::HEADER_SESSION_ID.to_owned(), s.clone()));
        }
    }

    fn open_exchange(
        &mut self,
        method: HttpMethod,
        headers: Vec<(String, String)>,
        body: Option<String>,
        kind: ExchangeKind,
    ) -> ExchangeId {
        let exchange = ExchangeId(self.next_exchange);
        self.next_exchange += 1;
        self.exchanges.insert(
            exchange,
            Exchange {
                kind,
                body: Body::Awaiting,
            },
        );
        self.out.push_back(Output::Http(HttpRequest {
            exchange,
            method,
            headers,
            body,
        }));
        exchange
    }

    /// Forgets an exchange and tells the driver to close it.
    pub(super) fn drop_exchange(&mut self, exchange: Option<ExchangeId>) {
        if let Some(x) = exchange
            && self.exchanges.remove(&x).is_some()
        {
            self.out.push_back(Output::HttpAbort(x));
        }
    }

    /// Gives up on a request in flight: the server is told (a stateless HTTP server by the
    /// closed stream alone).
    fn abandon_request(&mut self, id: u64, exchange: Option<ExchangeId>, reason: Option<&str>) {
        self.resumes.retain(|r| r.request != id);
        let stateless_http = self.config.transport == Transport::Http
            && self.speaking.is_some_and(ProtocolVersion::is_stateless);
        if !stateless_http {
            self.send_cancelled(id, reason);
        }
        self.drop_exchange(exchange);
    }

    fn send_cancelled(&mut self, id: u64, reason: Option<&str>) {
        let mut params = json!({ "requestId": id });
        if let Some(r) = reason {
            params["reason"] = Value::String(r.into());
        }
        self.transmit(Msg::Notification {
            method: "notifications/cancelled",
            params: Some(&params),
        });
    }

    /// Completes every call with `err`, closes every question and forgets list passes.
    fn fail_all(&mut self, err: McpError) {
        self.pending.clear();
        self.resumes.clear();
        let calls = std::mem::take(&mut self.calls);
        for call_id in calls.into_keys() {
            self.emit(McpEvent::CallCompleted {
                call_id,
                result: Err(err.clone()),
            });
        }
        let asks = std::mem::take(&mut self.asks);
        for ask_id in asks.into_keys() {
            self.emit(McpEvent::AskClosed {
                ask_id,
                reason: err.to_string(),
            });
        }
        self.lists = Default::default();
        self.initial_lists = [false; 3];
    }

    fn after_exit(&mut self, now: Time, after: AfterExit) {
        match after {
            AfterExit::Shutdown => self.state = State::Stopped,
            AfterExit::GiveUp(reason) => {
                self.state = State::GaveUp;
                self.emit(McpEvent::GaveUp { reason });
            }
            AfterExit::Restart(reason) => {
                let attempt = self.attempts.saturating_add(1);
                match self.config.restart.delay(attempt) {
                    Some(delay) => {
                        self.attempts = attempt;
                        self.state = State::Backoff { until: now + delay };
                        self.emit(McpEvent::Restarting { attempt, delay });
                    }
                    None => {
                        self.state = State::GaveUp;
                        self.emit(McpEvent::GaveUp { reason });
                    }
                }
            }
        }
    }

    /// Stops the running server because it misbehaved in a way a restart may cure (or, with
    /// `fatal`, will not).
    pub(super) fn abort_server(&mut self, now: Time, err: McpError, fatal: bool) {
        self.emit(McpEvent::Failed(err.clone()));
        self.fail_all(err.clone());
        self.stop(
            now,
            if fatal {
                AfterExit::GiveUp(err)
            } else {
                AfterExit::Restart(err)
            },
        );
    }

    /// Ends the server: over stdio, asks the driver to end the process and waits for its
    /// exit, at most the grace period plus [`EXIT_REPORT_SLACK`]; over HTTP, closes every
    /// exchange and ends the session at once.
    fn stop(&mut self, now: Time, after: AfterExit) {
        match self.config.transport {
            Transport::Stdio => {
                let grace = self.config.kill_grace;
                self.state = State::Stopping {
                    after,
                    deadline: now + grace + EXIT_REPORT_SLACK,
                };
                self.out.push_back(Output::Kill { grace });
            }
            Transport::Http => {
                let end_session = !matches!(after, AfterExit::Restart(McpError::SessionExpired));
                self.reset_http(end_session);
                self.exited_after_stop(now, after, ExitStatus::default());
            }
        }
    }

    /// Closes every exchange; with `end_session`, a session in place is ended by DELETE.
    fn reset_http(&mut self, end_session: bool) {
        let exchanges = std::mem::take(&mut self.exchanges);
        for x in exchanges.into_keys() {
            self.out.push_back(Output::HttpAbort(x));
        }
        self.listen = Listen::Off;
        self.listen_last_id = None;
        self.listen_wait = None;
        self.resumes.clear();
        if let (true, Some(_)) = (end_session, &self.session_id) {
            let mut headers = Vec::new();
            self.session_headers(&mut headers);
            self.open_exchange(HttpMethod::Delete, headers, None, ExchangeKind::Delete);
        }
        self.session_id = None;
    }

    fn exited_after_stop(&mut self, now: Time, after: AfterExit, status: ExitStatus) {
        if after == AfterExit::Shutdown {
            self.state = State::Stopped;
            self.emit(McpEvent::Stopped(status));
        } else {
            self.after_exit(now, after);
        }
    }
}

/// One message to send.
#[derive(Debug, Clone, Copy)]
pub(super) enum Msg<'a> {
    Request {
        id: u64,
        method: &'a str,
        params: Option<&'a Value>,
    },
    Notification {
        method: &'a str,
        params: Option<&'a Value>,
    },
    Response {
        id: &'a RpcId,
        outcome: Result<&'a Value, &'a RpcError>,
    },
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;

#[path = "client_inbound.rs"]
mod inbound;

#[path = "client_http.rs"]
mod http_io;

#[path = "client_asks.rs"]
mod asks_io;

#[cfg(test)]
#[path = "client_revision_tests.rs"]
mod revision_tests;
