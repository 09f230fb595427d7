//! Tools mode: an agent whose tools are prompt templates, served to MCP hosts over stdio and
//! offered in its space like any participant's tools (`../spec/tools-mode-agent.md`).
//!
//! [`ToolsAgent`] wraps an [`Agent`]. A call of one of its tools (an MCP `tools/call`, or an
//! `mcp/request` of another participant) has its arguments checked against the tool's schema
//! ([`crate::schema`]), its prompt filled ([`ToolDef::fill`]) and becomes a headless run of
//! the agent ([`Agent::run`]): its own conversation, only tools that need no approval, so a
//! call never waits for a person who is not there. The run's answer is the tool's result; a
//! run that fails gives a tool error result. Runs report their steps as MCP progress
//! notifications when the host asked for them; `notifications/cancelled` stops the run.
//! Everything else (chats, controls, auto-fulfil) is the wrapped agent's.
//!
//! With no space to join, the agent runs with no tools of its own to call; a space adds the
//! tools of its participants that the agent may call directly.

mod definition;

pub use definition::{ToolDef, ToolSet};

use crate::agent::{
    Agent, AgentConfig, AgentEvent, ModelCallId, ModelOutcome, Output, RunId, TaskOutcome,
};
use crate::mcp::{McpServer, ServerCallId, ServerConfig, ServerEvent, ServerOutput};
use crate::participant::{self, AroundParticipant, CallId, GatewayInputs, Input, ToolSpec};
use crate::time::Time;
use std::collections::{BTreeMap, VecDeque};

/// Who asked for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Mcp(ServerCallId),
    Space(CallId),
}

/// An agent in tools mode. See the module documentation.
///
/// Its inputs are its [`Agent`]'s (the connection's and time through
/// [`GatewayInputs::handle_input`]), plus the MCP host's stdin (its own methods: another
/// conversation than the gateway's); its outputs the agent's, with what goes to the host as
/// [`Output::Mcp`]:
///
/// | input | what it may queue |
/// |---|---|
/// | [`start`](Self::start), [`close`](Self::close), `Input::Connected`, `Input::Pong`, `Input::Disconnected`, `Input::Refused`, [`handle_model_data`](Self::handle_model_data) | the agent's |
/// | `Input::Frame` | the agent's; an `mcp/request` for one of its tools starts a run: `Model` |
/// | [`handle_stdin`](Self::handle_stdin) | `Mcp` (answers: `initialize`, `tools/list`, errors); a `tools/call` starts a run: `Model` |
/// | [`handle_model`](Self::handle_model), `Input::Timeout` | the agent's; a run that ends answers its caller: `Mcp` (result, progress notifications) or `Gateway` (`Transmit`: the `mcp/response`) |
/// | [`handle_stdin_closed`](Self::handle_stdin_closed) | runs for the host stop; the agent goes on if it has a space |
#[derive(Debug)]
pub struct ToolsAgent {
    agent: Agent,
    tools: Option<ToolSet>,
    server: Option<McpServer>,
    runs: BTreeMap<RunId, Origin>,
    join: bool,
    out: VecDeque<Output>,
    exited: bool,
}

impl ToolsAgent {
    /// An agent that has not started. Its tools (`config.tools`) are registered with its
    /// participant; `config.mcp_stdio` adds the MCP server.
    pub fn new(mut config: AgentConfig, seed: u64) -> ToolsAgent {
        let tools = config.tools.take();
        let server = match (&tools, config.mcp_stdio) {
            (Some(set), true) => Some(McpServer::new(
                ServerConfig::new(set.info.clone()),
                set.served(),
            )),
            _ => None,
        };
        let join = config.join_space;
        let mut agent = Agent::new(config, seed);
        if let Some(set) = &tools {
            for t in &set.tools {
                agent
                    .participant_mut()
                    .register_tool(ToolSpec {
                        name: t.name.clone(),
                        description: Some(t.description.clone()),
                        input_schema: Some(t.input_schema.clone()),
                    })
                    .expect("a loaded tool definition registers");
            }
        }
        ToolsAgent {
            agent,
            tools,
            server,
            runs: BTreeMap::new(),
            join,
            out: VecDeque::new(),
            exited: false,
        }
    }

    /// The wrapped agent.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// The wrapped agent, for commands this type does not wrap.
    pub fn agent_mut(&mut self) -> &mut Agent {
        &mut self.agent
    }

    /// The MCP server, when serving stdio.
    pub fn server(&self) -> Option<&McpServer> {
        self.server.as_ref()
    }

    /// Calls running.
    pub fn running(&self) -> usize {
        self.runs.len()
    }

    /// Starts: joins the space when there is one.
    pub fn start(&mut self, now: Time) {
        if self.join {
            self.agent.start(now);
        }
        self.pump(now);
    }

    /// Leaves for good.
    pub fn close(&mut self, now: Time, reason: &str) {
        self.agent.close(now, reason);
        self.pump(now);
    }

    /// The outcome of a model call.
    pub fn handle_model(&mut self, now: Time, call: ModelCallId, outcome: ModelOutcome) {
        self.agent.handle_model(now, call, outcome);
        self.pump(now);
    }

    /// A piece of a streamed model reply ([`Agent::handle_model_data`]).
    pub fn handle_model_data(&mut self, now: Time, call: ModelCallId, piece: &str) {
        self.agent.handle_model_data(now, call, piece);
        self.pump(now);
    }

    /// Bytes from stdin (the MCP host); ignored when not serving stdio.
    pub fn handle_stdin(&mut self, now: Time, bytes: &[u8]) {
        if let Some(s) = &mut self.server {
            s.handle_stdin(bytes);
        }
        self.pump(now);
    }

    /// Stdin ended: the host is gone. Its calls are cancelled and the agent exits, as an
    /// MCP stdio server does.
    pub fn handle_stdin_closed(&mut self, now: Time) {
        if self.server.is_none() {
            return;
        }
        let mcp: Vec<RunId> = self
            .runs
            .iter()
            .filter(|(_, o)| matches!(o, Origin::Mcp(_)))
            .map(|(r, _)| *r)
            .collect();
        for run in mcp {
            self.agent.cancel_run(now, run, "the MCP host closed stdin");
        }
        if self.join {
            self.agent.close(now, "the MCP host closed stdin");
        }
        self.pump(now);
        if !self.exited {
            self.exited = true;
            self.out.push_back(Output::Event(AgentEvent::Exit));
        }
    }

    /// When `Input::Timeout` is due next.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.agent.poll_timeout()
    }

    /// The next output.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    // ---- internals ----

    /// Carries the agent's and the server's outputs over, acting on what concerns tools,
    /// until both are quiet.
    fn pump(&mut self, now: Time) {
        loop {
            let mut moved = false;
            while let Some(o) = self.agent.poll_output() {
                moved = true;
                self.on_agent_output(now, o);
            }
            while let Some(o) = self.server.as_mut().and_then(McpServer::poll_output) {
                moved = true;
                match o {
                    ServerOutput::Write(line) => self.out.push_back(Output::Mcp(line)),
                    ServerOutput::Event(e) => self.on_server_event(now, e),
                }
            }
            if !moved {
                break;
            }
        }
    }

    fn on_agent_output(&mut self, now: Time, o: Output) {
        match o {
            Output::Event(AgentEvent::Participant(participant::Event::ToolCall {
                call_id,
                from,
                tool,
                arguments,
            })) if self.tools.as_ref().is_some_and(|s| s.get(&tool).is_some()) => {
                let args = arguments.as_object().cloned().unwrap_or_default();
                self.start_run(now, Origin::Space(call_id), &tool, &args, &from);
            }
            Output::Event(AgentEvent::Exit) if self.exited => {}
            Output::Event(AgentEvent::Exit) => {
                self.exited = true;
                self.out.push_back(Output::Event(AgentEvent::Exit));
            }
            Output::Event(AgentEvent::RunProgress { run, step, message }) => {
                if let (Some(Origin::Mcp(call)), Some(s)) = (self.runs.get(&run), &mut self.server)
                {
                    s.progress(*call, u64::from(step), &message);
                }
                self.out.push_back(Output::Event(AgentEvent::RunProgress {
                    run,
                    step,
                    message,
                }));
            }
            Output::Event(AgentEvent::RunFinished { run, outcome }) => {
                self.finish_run(now, run, &outcome);
                self.out
                    .push_back(Output::Event(AgentEvent::RunFinished { run, outcome }));
            }
            other => self.out.push_back(other),
        }
    }

    fn on_server_event(&mut self, now: Time, e: ServerEvent) {
        match e {
            ServerEvent::Call {
                call,
                tool,
                arguments,
            } => self.start_run(now, Origin::Mcp(call), &tool, &arguments, "mcp-host"),
            ServerEvent::Cancelled { call, reason } => {
                let run = self
                    .runs
                    .iter()
                    .find(|(_, o)| **o == Origin::Mcp(call))
                    .map(|(r, _)| *r);
                if let Some(run) = run {
                    let why = reason.unwrap_or_else(|| "cancelled by the MCP host".into());
                    self.agent.cancel_run(now, run, &why);
                }
            }
            other => self.out.push_back(Output::Event(AgentEvent::Mcp(other))),
        }
    }

    fn start_run(
        &mut self,
        now: Time,
        origin: Origin,
        tool: &str,
        args: &serde_json::Map<String, serde_json::Value>,
        caller: &str,
    ) {
        let Some(def) = self.tools.as_ref().and_then(|s| s.get(tool)) else {
            // The server lists only these tools and the participant registers only these.
            self.answer(now, origin, &format!("unknown tool: {tool}"), true);
            return;
        };
        let prompt = def.fill(args);
        match self.agent.run(now, prompt, caller) {
            Ok(run) => {
                self.runs.insert(run, origin);
            }
            Err(e) => self.answer(now, origin, &e.to_string(), true),
        }
    }

    fn finish_run(&mut self, now: Time, run: RunId, outcome: &TaskOutcome) {
        let Some(origin) = self.runs.remove(&run) else {
            return;
        };
        match outcome {
            TaskOutcome::Answered(text) => self.answer(now, origin, text, false),
            TaskOutcome::Failed(why) => self.answer(
                now,
                origin,
                &format!("The agent could not complete this: {why}"),
                true,
            ),
            TaskOutcome::Cancelled(why) => {
                self.answer(now, origin, &format!("Cancelled: {why}"), true)
            }
        }
    }

    fn answer(&mut self, now: Time, origin: Origin, text: &str, is_error: bool) {
        match origin {
            Origin::Mcp(call) => {
                if let Some(s) = &mut self.server {
                    // A cancelled call is no longer open: MCP wants no answer to it.
                    s.complete(call, text, is_error);
                }
            }
            Origin::Space(call) => {
                let result = crate::mcp::server::tool_result(text, is_error);
                let _ = self
                    .agent
                    .participant_mut()
                    .complete_call(now, call, Ok(result));
            }
        }
    }
}

/// The connection's inputs go to the tools agent's agent (see [`AroundParticipant`]).
impl AroundParticipant for ToolsAgent {
    type Inner = Agent;
    fn inner(&mut self) -> &mut Agent {
        &mut self.agent
    }
    fn after_input(&mut self, now: Time) {
        self.pump(now);
    }
    fn on_timeout(&mut self, now: Time) {
        self.agent.handle_input(now, Input::Timeout);
        self.pump(now);
    }
}

#[cfg(test)]
mod tests;
