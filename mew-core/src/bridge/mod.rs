//! The MCP bridge, sans-IO: one [`Participant`] that joins a space and one [`McpClient`] that
//! drives an MCP server over stdio, composed so that the server's tools, resources and
//! prompts are served in the space.
//!
//! Requests addressed to the bridge (`tools/*`, `resources/*`, `prompts/*`,
//! `completion/complete`) reach it as forwarded calls. Lists the server offers are answered
//! from the catalog discovered at startup (and re-listed on `list_changed`), with the
//! server's full definitions; everything else is sent to the server and its answer (or its
//! JSON-RPC error, code and message unchanged) goes back to the requester. Requests arriving
//! while the server is starting or restarting wait, bounded, until it is ready.
//!
//! Lifecycle: a server that fails its very first start (a command that does not exist, a
//! program that is not an MCP server, no `initialize` answer within the init timeout) is a
//! configuration error, not a crash, and ends the bridge at once with
//! [`Exit::ServerNeverReady`]. A crashed server is restarted per the [`RestartBackoff`](crate::mcp::RestartBackoff);
//! callers in flight get an error. When no restart is left the bridge broadcasts a
//! `participant/status` with `status: "error"` and a chat line, and finishes with
//! [`Exit::ServerGaveUp`]. A `participant/shutdown` (or [`Bridge::close`]) stops the
//! server and finishes with [`Exit::Shutdown`]. A lost gateway connection is the
//! participant's business (it reconnects); the server keeps running meanwhile.
//!
//! The driver feeds gateway events and ticks to the one entry of the machines around a
//! participant ([`GatewayInputs::handle_input`](crate::participant::GatewayInputs::handle_input)
//! with a [`participant::Input`]), server events to the
//! `handle_server_*` methods (the server process is another conversation, with its own
//! inputs), and carries out [`Bridge::poll_output`].

mod asks;
mod auth;
mod config;
mod output;
mod serve;
mod status;

/// The connection's inputs go to the bridge's participant (see [`AroundParticipant`]); a
/// refusal's reason is kept for the bridge's exit.
impl AroundParticipant for Bridge {
    type Inner = Participant;
    fn inner(&mut self) -> &mut Participant {
        &mut self.participant
    }
    fn after_input(&mut self, now: Time) {
        self.pump(now);
    }
    fn on_timeout(&mut self, now: Time) {
        self.fire_timers(now);
    }
    fn before_refused(&mut self, reason: &str) {
        self.refused = Some(reason.to_owned());
    }
}

#[cfg(test)]
mod tests;

pub use asks::META_INPUT_KEY;
pub use auth::{AuthEvent, CALLBACK_KIND};
pub use config::BridgeConfig;
pub use output::{Exit, Output};
pub use status::ServerState;

use crate::mcp::{self, ExitStatus, McpClient, McpEvent, Phase};
use crate::participant::{self, AroundParticipant, CompactOutcome, Control, Participant};
use crate::time::Time;
use std::collections::{BTreeMap, VecDeque};

/// The methods the bridge takes over from the participant's own registry.
pub const FORWARDED_METHODS: [&str; 10] = [
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "resources/templates/list",
    "prompts/list",
    "prompts/get",
    "completion/complete",
];

#[derive(Debug, Clone, PartialEq)]
enum Lifecycle {
    Running,
    /// Stopping the server before exiting; `control` is the `participant/shutdown` to
    /// acknowledge.
    Stopping {
        exit: Exit,
        control: Option<String>,
    },
    /// The server is gone and the participant closed; [`Output::Exit`] follows their last
    /// outputs.
    Exiting,
    /// [`Output::Exit`] was emitted.
    Done,
}

/// The bridge state machine. See the module documentation.
///
/// It drives a [`Participant`] (the gateway side) and an [`McpClient`] (the server side);
/// the driver carries out both sides' actions from [`Bridge::poll_output`]. Commands
/// (`close`, ...) are the application's API and stay methods:
///
/// | input | what it may queue |
/// |---|---|
/// | [`start`](Self::start) | `Gateway` (`Connect`), `Server` (`Spawn`) |
/// | `Input::Connected`, `Input::Pong`, `Input::Disconnected`, `Input::Refused` | `Gateway`, `Participant`; the gateway given up: `Exit` |
/// | `Input::Frame` | an `mcp/request` forwarded: `Server` (`Write`), or held while the server starts, or answered with an error: `Gateway` (`Transmit`); `Participant` |
/// | [`handle_server_spawned`](Self::handle_server_spawned), [`handle_server_stdout`](Self::handle_server_stdout), [`handle_server_stderr`](Self::handle_server_stderr) | `Server` (`Write`); answers: `Gateway` (`Transmit`: `mcp/response`, the tools' status); `Mcp` |
/// | [`handle_server_spawn_failed`](Self::handle_server_spawn_failed), [`handle_server_exited`](Self::handle_server_exited) | `Mcp` (restarting or given up); held requests failed: `Gateway` (`Transmit`); given up: `Exit` |
/// | `Input::Timeout` | both sides' timers; requests past their deadline answered with an error: `Gateway` (`Transmit`) |
/// | [`close`](Self::close) | `Server` (`Kill`), `Gateway` (`Disconnect`), then `Exit` (`Shutdown`) |
#[derive(Debug)]
pub struct Bridge {
    participant: Participant,
    /// Why the gateway connection cannot succeed, when that is known (a certificate that
    /// does not verify): the exit says so rather than counting attempts.
    refused: Option<String>,
    mcp: McpClient,
    config: BridgeConfig,
    /// MCP call -> the participant call it answers.
    calls: BTreeMap<mcp::McpCallId, participant::CallId>,
    /// Requests waiting for the server to become ready, oldest (earliest deadline) first.
    waiting: VecDeque<serve::Waiting>,
    /// The server's questions put to participants, by our request's id.
    asking: BTreeMap<participant::RequestId, asks::Asking>,
    out: VecDeque<Output>,
    lifecycle: Lifecycle,
    exit_due: Option<Exit>,
    status: status::Tracker,
    /// Whether the server ever became ready.
    was_ready: bool,
    /// The last lines the current server process wrote to stderr, for the exit's reason.
    stderr_tail: VecDeque<String>,
    /// OAuth for the server's endpoint, when enabled.
    auth: Option<auth::AuthLayer>,
}

/// Lines of the server's stderr an exit's reason quotes at most (npm's errors, such as
/// `E404` for a package name with a typo, take about eight).
pub const STDERR_TAIL_LINES: usize = 8;
/// Characters of one quoted stderr line at most.
const STDERR_LINE_MAX: usize = 200;

impl Bridge {
    /// A bridge that has not started; `seed` fixes every id and jitter its participant draws.
    ///
    /// The participant's automatic tool discovery is turned off: a bridge serves tools and
    /// never calls anyone else's, and its `tools/list` requests would only be refused.
    pub fn new(mut config: BridgeConfig, seed: u64) -> Bridge {
        config.participant.discovery.auto = false;
        // Every elicitation has someone to go to (the caller) or is refused with a reason;
        // sampling is offered only when someone may answer it.
        config.mcp.asks.elicitation = true;
        config.mcp.asks.sampling = config.sampling_answered_by.is_some();
        // Roots are the caller's; one that cannot say gets the bridge's own.
        config.mcp.asks.roots = true;
        let mut participant = Participant::new(config.participant.clone(), seed);
        for m in FORWARDED_METHODS {
            participant.forward_method(m);
        }
        Bridge {
            refused: None,
            participant,
            mcp: McpClient::new(config.mcp.clone()),
            config,
            calls: BTreeMap::new(),
            waiting: VecDeque::new(),
            asking: BTreeMap::new(),
            out: VecDeque::new(),
            lifecycle: Lifecycle::Running,
            exit_due: None,
            status: status::Tracker::default(),
            was_ready: false,
            stderr_tail: VecDeque::new(),
            auth: None,
        }
    }

    /// Remembers one line of the server's stderr (the last few are kept, each cut short).
    fn keep_stderr(&mut self, line: &str) {
        if self.stderr_tail.len() == STDERR_TAIL_LINES {
            self.stderr_tail.pop_front();
        }
        let line = line.trim_end();
        let kept = match line.char_indices().nth(STDERR_LINE_MAX) {
            Some((at, _)) => format!("{}…", &line[..at]),
            None => line.to_owned(),
        };
        self.stderr_tail.push_back(kept);
    }

    /// Why the bridge gives up, with what the server last wrote to stderr: the operator's
    /// clue (npm's `E404` for a mistyped package). Only the exit says it: the space's
    /// status and chat carry the failure without the server's own output, which may hold
    /// what not every participant should read.
    fn gave_up_reason(&self, reason: &str) -> String {
        if self.stderr_tail.is_empty() {
            return reason.to_owned();
        }
        let lines: Vec<&str> = self.stderr_tail.iter().map(String::as_str).collect();
        format!("{reason}; its last stderr lines: {}", lines.join(" | "))
    }

    /// The participant (MEW side).
    pub fn participant(&self) -> &Participant {
        &self.participant
    }

    /// The MCP client (server side).
    pub fn mcp(&self) -> &McpClient {
        &self.mcp
    }

    /// The configuration.
    pub fn config(&self) -> &BridgeConfig {
        &self.config
    }

    /// Requests forwarded to the server and not yet answered.
    pub fn calls_in_flight(&self) -> usize {
        self.calls.len()
    }

    /// Requests waiting for the server to become ready.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The server's state as reported in `participant/status`.
    pub fn server_state(&self) -> ServerState {
        ServerState::of(self.mcp.phase())
    }

    /// Restarts of the server so far.
    pub fn restarts(&self) -> u32 {
        self.status.restarts
    }

    /// Whether [`Output::Exit`] has been emitted.
    pub fn is_done(&self) -> bool {
        self.lifecycle == Lifecycle::Done
    }

    /// Connects to the gateway and starts the server, both at once (the server's slow start
    /// overlaps the join). Errors if already started.
    pub fn start(&mut self, now: Time) -> Result<(), mcp::McpError> {
        self.mcp.start(now)?;
        self.participant.start(now);
        self.pump(now);
        Ok(())
    }

    /// Stops the server (terminate, then kill after the grace) and finishes with
    /// [`Exit::Shutdown`] once it exited; for SIGTERM and the like.
    pub fn close(&mut self, now: Time) {
        self.begin_exit(now, Exit::Shutdown, None);
        self.pump(now);
    }

    // ---- gateway side ----

    // ---- server side ----

    /// The server process started.
    pub fn handle_server_spawned(&mut self, now: Time) {
        self.mcp.handle_spawned(now);
        self.pump(now);
    }

    /// The server process could not be started.
    pub fn handle_server_spawn_failed(&mut self, now: Time, error: impl Into<String>) {
        self.mcp.handle_spawn_failed(now, error);
        self.pump(now);
    }

    /// Bytes from the server's stdout.
    pub fn handle_server_stdout(&mut self, now: Time, bytes: &[u8]) {
        self.mcp.handle_stdout(now, bytes);
        self.pump(now);
    }

    /// Bytes from the server's stderr.
    pub fn handle_server_stderr(&mut self, now: Time, bytes: &[u8]) {
        self.mcp.handle_stderr(now, bytes);
        self.pump(now);
    }

    /// The server process exited (after its stdout was read to the end).
    pub fn handle_server_exited(&mut self, now: Time, status: ExitStatus) {
        self.mcp.handle_exited(now, status);
        self.pump(now);
    }

    /// The head of the answer to an HTTP exchange (Streamable HTTP servers).
    pub fn handle_server_http_response(
        &mut self,
        now: Time,
        exchange: mcp::http::ExchangeId,
        head: mcp::http::HttpResponseHead,
    ) {
        self.on_http_head(now, exchange, head);
        self.pump(now);
    }

    /// Body bytes of the answer to an HTTP exchange.
    pub fn handle_server_http_body(
        &mut self,
        now: Time,
        exchange: mcp::http::ExchangeId,
        bytes: &[u8],
    ) {
        self.on_http_body(now, exchange, bytes);
        self.pump(now);
    }

    /// The answer to an HTTP exchange ended.
    pub fn handle_server_http_end(&mut self, now: Time, exchange: mcp::http::ExchangeId) {
        self.on_http_end(now, exchange);
        self.pump(now);
    }

    /// An HTTP exchange failed (no connection, reset, a bound exceeded, ...).
    pub fn handle_server_http_failed(
        &mut self,
        now: Time,
        exchange: mcp::http::ExchangeId,
        error: &str,
    ) {
        self.on_http_failed(now, exchange, error);
        self.pump(now);
    }

    // ---- time ----

    /// [`Input::Timeout`](participant::Input::Timeout): every due timer of both sides and of
    /// the waiting requests.
    fn fire_timers(&mut self, now: Time) {
        self.participant
            .handle_input(now, participant::Input::Timeout);
        self.mcp.handle_timeout(now);
        if let Some(a) = self.auth.as_mut() {
            a.oauth.handle_timeout(now);
        }
        self.expire_waiting(now);
        self.pump(now);
    }

    /// The earliest time [`Input::Timeout`](participant::Input::Timeout) is due.
    pub fn poll_timeout(&self) -> Option<Time> {
        [
            self.participant.poll_timeout(),
            self.mcp.poll_timeout(),
            self.waiting.front().map(|w| w.deadline),
            self.auth.as_ref().and_then(|a| a.oauth.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The next output for the driver.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    // ---- internals ----

    /// Moves the inner machines' outputs to ours, acting on their events, until both are
    /// quiet.
    fn pump(&mut self, now: Time) {
        loop {
            let mut progressed = false;
            while let Some(o) = self.participant.poll_output() {
                progressed = true;
                match o {
                    participant::Output::Event(e) => self.on_participant_event(now, e),
                    other => self.out.push_back(Output::Gateway(other)),
                }
            }
            while let Some(o) = self.mcp.poll_output() {
                progressed = true;
                match o {
                    mcp::Output::Event(e) => self.on_mcp_event(now, e),
                    mcp::Output::Http(req) => self.send_http(now, req),
                    mcp::Output::HttpAbort(x) => self.abort_http(x),
                    other => self.out.push_back(Output::Server(other)),
                }
            }
            progressed |= self.pump_oauth(now);
            if !progressed {
                break;
            }
        }
        self.status.refresh(&mut self.participant, &self.mcp);
        if let Some(exit) = self.exit_due.take() {
            self.lifecycle = Lifecycle::Done;
            self.out.push_back(Output::Exit(exit));
        }
    }

    fn on_participant_event(&mut self, now: Time, e: participant::Event) {
        match e {
            participant::Event::Forwarded {
                call_id,
                method,
                params,
                explicit,
                ..
            } => self.on_request(now, call_id, &method, params, explicit),
            // Inbound envelopes are the participant's business; repeating each one to the
            // driver would cost a move per message for nothing.
            participant::Event::Message(env) => {
                if env.kind.as_str() == CALLBACK_KIND && env.from == crate::GATEWAY_ID {
                    self.on_oauth_callback(
                        now,
                        env.payload.as_ref().unwrap_or(&serde_json::Value::Null),
                    );
                }
            }
            participant::Event::Control { id, control, from } => {
                self.on_control(now, &id, &control);
                self.out
                    .push_back(Output::Participant(participant::Event::Control {
                        id,
                        from,
                        control,
                    }));
            }
            participant::Event::RequestCompleted { id, result } => {
                if !self.on_answered(now, &id, &result) {
                    self.out
                        .push_back(Output::Participant(participant::Event::RequestCompleted {
                            id,
                            result,
                        }));
                }
            }
            participant::Event::GaveUp { attempts } => {
                let why = self
                    .refused
                    .take()
                    .unwrap_or_else(|| format!("{attempts} reconnect attempts failed"));
                self.begin_exit(now, Exit::GatewayGaveUp(why), None);
                self.out
                    .push_back(Output::Participant(participant::Event::GaveUp { attempts }));
            }
            other => self.out.push_back(Output::Participant(other)),
        }
    }

    fn on_control(&mut self, now: Time, id: &str, control: &Control) {
        // Controls about a conversation context have nothing to act on here; they are
        // completed at once so the requester is not left waiting.
        let done = match control {
            Control::Shutdown => {
                self.begin_exit(now, Exit::Shutdown, Some(id.to_owned()));
                Ok(())
            }
            Control::Forget { .. } => self.participant.complete_forget(now, id, 0, 0),
            Control::Compact { .. } => self.participant.complete_compact(
                now,
                id,
                CompactOutcome::Skipped {
                    reason: Some("a bridge keeps no context".into()),
                },
            ),
            Control::Clear => self.participant.complete_clear(now, id),
            Control::Restart => {
                // The participant fails our pending calls; stop their MCP counterparts too.
                let calls = std::mem::take(&mut self.calls);
                for mcp_call in calls.into_keys() {
                    self.mcp.cancel(mcp_call, Some("restart"));
                }
                self.waiting.clear();
                self.participant.complete_restart(now, id)
            }
            Control::Pause { .. } | Control::Resume | Control::RequestStatus { .. } => Ok(()),
        };
        // Only a control the participant no longer holds can fail here; nothing to undo.
        let _ = done;
    }

    fn on_mcp_event(&mut self, now: Time, e: McpEvent) {
        // Completions are per message: moved, not cloned, and not repeated to the driver.
        let e = match e {
            McpEvent::CallCompleted { call_id, result } => {
                if let Some(call) = self.calls.remove(&call_id) {
                    self.answer(now, call, result.map_err(|e| e.to_rpc_error()));
                }
                return;
            }
            McpEvent::Asked {
                ask_id,
                call_id,
                ask,
                round,
            } => {
                self.out.push_back(Output::Mcp(McpEvent::Asked {
                    ask_id,
                    call_id,
                    round,
                    ask: ask.clone(),
                }));
                return self.on_asked(now, ask_id, call_id, ask);
            }
            other => other,
        };
        if matches!(e, McpEvent::Restarting { .. }) {
            // What the next process writes is what a later failure quotes.
            self.stderr_tail.clear();
        }
        match &e {
            McpEvent::Ready(_) => {
                self.was_ready = true;
                self.sync_tools();
                self.release_waiting(now);
            }
            McpEvent::ToolsChanged(_) => {
                self.sync_tools();
                self.announce(now, "notifications/tools/list_changed");
            }
            McpEvent::ResourcesChanged(_) => {
                self.announce(now, "notifications/resources/list_changed");
            }
            McpEvent::PromptsChanged(_) => self.announce(now, "notifications/prompts/list_changed"),
            McpEvent::Stderr(line) => self.keep_stderr(&line.clone()),
            McpEvent::Restarting { .. } if self.lifecycle == Lifecycle::Running => {
                self.status.restarts += 1
            }
            // The client scheduled a restart the bridge will not wait for.
            McpEvent::Restarting { .. } => return,
            McpEvent::Failed(err) => {
                self.status.last_error = Some(err.to_string());
                // A sign-in that failed is tried again with the server's restart: the
                // person gets a new link, and the restart limit still ends it.
                let auth_failure = matches!(
                    err,
                    mcp::McpError::Auth(_) | mcp::McpError::SignInNeeded { .. }
                );
                if !self.was_ready && self.lifecycle == Lifecycle::Running && !auth_failure {
                    // Retrying a command that never worked only delays the diagnosis.
                    self.fail_waiting(now, err);
                    self.report_gave_up(now, &err.to_string());
                    let reason = self.gave_up_reason(&err.to_string());
                    self.begin_exit(now, Exit::ServerNeverReady(reason), None);
                }
            }
            McpEvent::GaveUp { reason } if self.lifecycle != Lifecycle::Running => {
                self.status.last_error = Some(reason.to_string());
            }
            McpEvent::GaveUp { reason } => {
                self.status.last_error = Some(reason.to_string());
                self.fail_waiting(now, reason);
                self.report_gave_up(now, &reason.to_string());
                let reason = self.gave_up_reason(&reason.to_string());
                self.begin_exit(now, Exit::ServerGaveUp(reason), None);
            }
            McpEvent::Stopped(_) => self.finish_exit(now),
            McpEvent::AskClosed { ask_id, .. } => self.on_ask_closed(*ask_id),
            McpEvent::Progress { .. } | McpEvent::Log { .. } => self.notify_caller(now, &e),
            _ => {}
        }
        self.out.push_back(Output::Mcp(e));
    }

    /// Registers the server's tools with the participant, so that its registry (and what it
    /// reports about us) matches the server. Requests are still forwarded: the server
    /// validates its own arguments and its definitions are served unabridged.
    /// Tells the space a list changed (a broadcast `mcp/request` notification), once the
    /// server has been ready: the first listing is no change to anyone.
    fn announce(&mut self, now: Time, method: &str) {
        if !self.was_ready {
            return;
        }
        let draft = participant::Draft::new(crate::envelope::Kind::McpRequest)
            .payload(serde_json::json!({"jsonrpc": "2.0", "method": method}));
        // A space that does not let the bridge broadcast simply does not hear it.
        let _ = self.participant.send(now, draft);
    }

    fn sync_tools(&mut self) {
        let current: Vec<String> = self.participant.tools().map(|t| t.name.clone()).collect();
        for name in current {
            if self.mcp.catalog().tool(&name).is_none() {
                self.participant.unregister_tool(&name);
            }
        }
        for tool in &self.mcp.catalog().tools {
            let description = tool
                .definition
                .get("description")
                .and_then(|d| d.as_str())
                .map(str::to_owned);
            let schema = tool.definition.get("inputSchema").cloned();
            let spec = participant::ToolSpec {
                name: tool.name.clone(),
                description,
                input_schema: schema,
            };
            if let Err(participant::CommandError::InvalidTool { .. }) =
                self.participant.register_tool(spec.clone())
            {
                // A schema beyond the participant's subset: keep the tool, unchecked.
                let _ = self.participant.register_tool(participant::ToolSpec {
                    input_schema: None,
                    ..spec
                });
            }
        }
    }

    /// Stops the server, then emits [`Output::Exit`].
    fn begin_exit(&mut self, now: Time, exit: Exit, control: Option<String>) {
        match &mut self.lifecycle {
            Lifecycle::Running => {}
            Lifecycle::Stopping { control: c, .. } => {
                if c.is_none() {
                    *c = control;
                }
                return;
            }
            Lifecycle::Exiting | Lifecycle::Done => return,
        }
        self.lifecycle = Lifecycle::Stopping { exit, control };
        self.fail_waiting(now, &mcp::McpError::Shutdown);
        self.mcp.close(now);
        if matches!(self.mcp.phase(), Phase::Stopped | Phase::GaveUp) {
            self.finish_exit(now);
        }
    }

    fn finish_exit(&mut self, now: Time) {
        if !matches!(self.lifecycle, Lifecycle::Stopping { .. }) {
            return;
        }
        let Lifecycle::Stopping { exit, control } =
            std::mem::replace(&mut self.lifecycle, Lifecycle::Exiting)
        else {
            unreachable!("checked above")
        };
        let closed = control
            .as_deref()
            .is_some_and(|id| self.participant.complete_shutdown(now, id).is_ok());
        if !closed {
            self.participant.close(
                now,
                match exit {
                    Exit::Shutdown => "shutdown",
                    _ => "bridge failed",
                },
            );
        }
        self.lifecycle = Lifecycle::Exiting;
        self.exit_due = Some(exit);
    }
}
