//! [`McpClient`]: the sans-IO state machine that drives one MCP server over stdio.
//!
//! The driver owns the process. It turns [`Output::Spawn`], [`Output::Write`] and
//! [`Output::Kill`] into process operations, and feeds back what happened: bytes on stdout and
//! stderr, spawn success or failure, exit, and the passage of time.

use super::error::McpError;
use super::exit::ExitStatus;
use super::framing::{Line, LineBuffer};
use super::jsonrpc::{self, Decoded, RpcDecodeError, RpcError, RpcMessage};
use super::listing::{Catalog, ListKind, PageOutcome, Pager, Prompt, Resource, Tool};
use super::restart::RestartBackoff;
use super::server_requests::{self, Root};
use super::version::ProtocolVersion;
use crate::Time;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Settings of an [`McpClient`].
#[derive(Debug, Clone)]
pub struct McpConfig {
    /// `clientInfo.name` sent in `initialize`.
    pub client_name: String,
    /// `clientInfo.version` sent in `initialize`.
    pub client_version: String,
    /// The revision offered in `initialize`; the server may answer with an older one.
    pub protocol_version: ProtocolVersion,
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
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            client_name: "mew-bridge".into(),
            client_version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: ProtocolVersion::LATEST,
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
        }
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
    Initialize,
    List(ListKind),
    Call,
}

#[derive(Debug)]
struct Pending {
    deadline: Time,
    timeout: Duration,
    purpose: Purpose,
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
/// | [`start`](Self::start) | `Spawn` |
/// | [`handle_spawned`](Self::handle_spawned) | `Write` (`initialize`) |
/// | [`handle_spawn_failed`](Self::handle_spawn_failed), [`handle_exited`](Self::handle_exited) | `Event` (`Failed`, then `Restarting` or `GaveUp`; `Stopped` after [`close`](Self::close)); calls in flight fail: `Event` (`CallCompleted`) |
/// | [`handle_stdout`](Self::handle_stdout) | `Write` (`notifications/initialized`, listings, answers to the server's requests); `Event` (`Ready`, `ToolsChanged`, `ResourcesChanged`, `PromptsChanged`, `ListFailed`, `CallCompleted`, `Notification`, `StdoutIssue`, `UnknownResponse`) |
/// | [`handle_stderr`](Self::handle_stderr) | `Event` (`Stderr`, a line at a time) |
/// | [`handle_timeout`](Self::handle_timeout) | `Spawn` (a restart due), `Kill` (no `initialize` answer in time), `Event` (`CallCompleted` for calls past their deadline) |
/// | [`call`](Self::call), [`cancel`](Self::cancel), [`notify`](Self::notify), [`set_roots`](Self::set_roots) | `Write` |
/// | [`close`](Self::close) | `Kill`; calls in flight fail: `Event` (`CallCompleted`) |
#[derive(Debug)]
pub struct McpClient {
    config: McpConfig,
    state: State,
    /// Ids are never reused, even across restarts, so a late reply from an old process
    /// cannot be mistaken for a new request's.
    next_id: u64,
    pending: BTreeMap<u64, Pending>,
    calls_in_flight: usize,
    out: VecDeque<Output>,
    stdout: LineBuffer,
    stderr: LineBuffer,
    server: Option<ServerDescription>,
    catalog: Catalog,
    lists: [ListSlot; 3],
    /// Kinds still to be listed before `Ready` is announced.
    initial_lists: [bool; 3],
    /// Consecutive restarts since the server was last ready.
    attempts: u32,
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
            calls_in_flight: 0,
            out: VecDeque::new(),
            server: None,
            catalog: Catalog::default(),
            lists: Default::default(),
            initial_lists: [false; 3],
            attempts: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &McpConfig {
        &self.config
    }

    /// The current phase.
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

    /// The tools, resources and prompts last listed.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Calls in flight.
    pub fn calls_in_flight(&self) -> usize {
        self.calls_in_flight
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
    /// back as [`McpEvent::CallCompleted`], at the latest when `timeout` has passed.
    pub fn call(
        &mut self,
        now: Time,
        method: &str,
        params: Option<Value>,
        timeout: Duration,
    ) -> Result<McpCallId, McpError> {
        if method == "initialize" || method.starts_with("notifications/") {
            return Err(McpError::ReservedMethod(method.into()));
        }
        if !self.is_operational() {
            return Err(McpError::NotReady);
        }
        if self.calls_in_flight >= self.config.max_in_flight {
            return Err(McpError::TooManyCalls(self.config.max_in_flight));
        }
        let id = self.send_request(now, method, params.as_ref(), timeout, Purpose::Call);
        self.calls_in_flight += 1;
        Ok(McpCallId(id))
    }

    /// Abandons a call: the server is told (`notifications/cancelled`) and no
    /// [`McpEvent::CallCompleted`] follows. Returns whether the call was in flight.
    pub fn cancel(&mut self, call_id: McpCallId, reason: Option<&str>) -> bool {
        match self.pending.get(&call_id.0) {
            Some(p) if p.purpose == Purpose::Call => {}
            _ => return false,
        }
        self.pending.remove(&call_id.0);
        self.calls_in_flight -= 1;
        self.send_cancelled(call_id.0, reason);
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
        self.out.push_back(Output::Write(jsonrpc::notification_line(
            method,
            params.as_ref(),
        )));
        Ok(())
    }

    /// Replaces the roots and tells a running server they changed.
    pub fn set_roots(&mut self, roots: Vec<Root>) {
        self.config.roots = roots;
        if self.is_operational() {
            self.out.push_back(Output::Write(jsonrpc::notification_line(
                "notifications/roots/list_changed",
                None,
            )));
        }
    }

    /// Stops the server for good: calls in flight fail with [`McpError::Shutdown`], the server
    /// is terminated and [`McpEvent::Stopped`] follows its exit.
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
        let requests = self.pending.values().map(|p| p.deadline).min();
        match (state, requests) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The driver started the process.
    pub fn handle_spawned(&mut self, now: Time) {
        let State::Spawning { deadline } = self.state else {
            return;
        };
        self.stdout.reset();
        self.stderr.reset();
        let params = json!({
            "protocolVersion": self.config.protocol_version.as_str(),
            "capabilities": { "roots": { "listChanged": true } },
            "clientInfo": {
                "name": self.config.client_name,
                "version": self.config.client_version,
            },
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
                Purpose::Call => {
                    self.calls_in_flight -= 1;
                    self.send_cancelled(id, Some("timed out"));
                    self.emit(McpEvent::CallCompleted {
                        call_id: McpCallId(id),
                        result: Err(McpError::Timeout(p.timeout)),
                    });
                }
                Purpose::List(kind) => {
                    self.send_cancelled(id, Some("timed out"));
                    self.list_failed(now, kind, McpError::Timeout(p.timeout));
                }
                // The state deadline below covers the handshake.
                Purpose::Initialize => {}
            }
        }
        match self.state {
            State::Spawning { deadline } | State::Initializing { deadline, .. }
                if deadline <= now =>
            {
                if let State::Initializing { request, .. } = self.state {
                    self.pending.remove(&request);
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
        self.state = State::Spawning {
            deadline: now + self.config.init_timeout,
        };
        self.out.push_back(Output::Spawn);
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
        self.out
            .push_back(Output::Write(jsonrpc::request_line(id, method, params)));
        self.pending.insert(
            id,
            Pending {
                deadline: now + timeout,
                timeout,
                purpose,
            },
        );
        id
    }

    fn send_cancelled(&mut self, id: u64, reason: Option<&str>) {
        let mut params = json!({ "requestId": id });
        if let Some(r) = reason {
            params["reason"] = Value::String(r.into());
        }
        self.out.push_back(Output::Write(jsonrpc::notification_line(
            "notifications/cancelled",
            Some(&params),
        )));
    }

    /// Completes every request in flight with `err` and forgets list passes.
    fn fail_all(&mut self, err: McpError) {
        let pending = std::mem::take(&mut self.pending);
        for (id, p) in pending {
            if p.purpose == Purpose::Call {
                self.emit(McpEvent::CallCompleted {
                    call_id: McpCallId(id),
                    result: Err(err.clone()),
                });
            }
        }
        self.calls_in_flight = 0;
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
    fn abort_server(&mut self, now: Time, err: McpError, fatal: bool) {
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

    /// Asks the driver to end the process and waits for its exit, at most the grace period
    /// plus [`EXIT_REPORT_SLACK`].
    fn stop(&mut self, now: Time, after: AfterExit) {
        let grace = self.config.kill_grace;
        self.state = State::Stopping {
            after,
            deadline: now + grace + EXIT_REPORT_SLACK,
        };
        self.out.push_back(Output::Kill { grace });
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

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;

#[path = "client_inbound.rs"]
mod inbound;
