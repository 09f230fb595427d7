//! The agent (SDK layer 3), sans-IO: a [`Participant`] plus a ReAct loop whose model calls
//! are outputs ([`Output::Model`]) and whose replies are inputs ([`Agent::handle_model`]).
//!
//! A chat the agent decides to answer (by its chat strategy) becomes a task: `chat/acknowledge`,
//! `reasoning/start` correlated to the chat, a wait (bounded) for tool discoveries in
//! progress, then steps: a model call offered every discovered tool (as `participant/tool`,
//! encoded by [`toolname`]); each tool call the model asks for goes out as a smart request
//! (ADR-WCM: an `mcp/request`, or an `mcp/proposal` when only that is allowed) and its
//! outcome, whatever it is (result, tool error, rejection, withdrawal, timeout), comes back
//! to the model as an observation; one `reasoning/thought` per step. The task ends with
//! `reasoning/conclusion` and a chat to the asker correlated to its message. One task runs
//! at a time; chats arriving meanwhile (or while paused) wait in a bounded queue.
//!
//! `reasoning/cancel` of the task's context stops it at once: no further thoughts or tool
//! calls, its pending proposals are withdrawn, late results are ignored. Model calls that
//! fail with 429, 5xx or no connection are retried with backoff (honouring `Retry-After`);
//! other failures end the task with a chat saying what went wrong.
//!
//! Also: `auto_fulfil` rules ([`config::FulfilRule`]) fulfil others' proposals; forget, clear, compact
//! and restart controls act on the agent's conversation history; the history is compacted
//! through the model before the context window fills (30% kept free).

pub mod config;
mod fulfil;
pub mod model;
pub mod prompt;
mod strategy;
pub mod toolname;

pub use config::{
    AgentConfig, AgentConfigError, AgentFile, AgentSettings, ChatStrategy, ReasoningFormat,
};
pub use model::{
    FunctionDef, Message, ModelError, ModelOutcome, ModelReply, ModelRequest, Role, ToolCall, Usage,
};

use crate::envelope::{Envelope, Kind};
use crate::ids::IdGen;
use crate::participant::{
    self, ClientState, CompactOutcome, Control, Draft, ForgetDirection, Participant, RequestError,
    RequestId, RequestOptions, Status,
};
use crate::time::Time;
use model::Verdict;
use prompt::{SCRATCHPAD_FORMAT, Scratch, Template};
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;
use toolname::ToolNames;

/// Handle of one model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModelCallId(pub u64);

/// Handle of one headless run ([`Agent::run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunId(pub u64);

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "run-{}", self.0)
    }
}

/// Why [`Agent::run`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// `max_runs` runs are already going.
    #[error("{0} runs are already going; try again when one ends")]
    Busy(usize),
    /// The agent has exited.
    #[error("the agent has stopped")]
    Stopped,
}

/// Which task: the one chat task, or a headless run (any number at once, each with its own
/// conversation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    Chat,
    Run(RunId),
}

/// One thing for the driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A gateway-side action: `Connect`, `Transmit`, `Ping` or `Disconnect`.
    Gateway(participant::Output),
    /// Make this model call (POST `<base>/chat/completions` with `request.to_json()`), give
    /// up after `timeout`, and report with [`Agent::handle_model`].
    Model {
        /// Handle for the answer.
        call: ModelCallId,
        /// What to send.
        request: ModelRequest,
        /// Deadline of the HTTP exchange.
        timeout: Duration,
    },
    /// Something happened (for logs and the application).
    Event(AgentEvent),
    /// Write this line (newline included) to stdout, for the MCP host (tools mode only:
    /// [`crate::tools::ToolsAgent`]).
    Mcp(String),
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskOutcome {
    /// The model's answer was sent.
    Answered(String),
    /// Stopped by `reasoning/cancel` (or a restart or shutdown).
    Cancelled(String),
    /// The model could not be used; the chat sent says why.
    Failed(String),
}

/// What the agent reports.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// Something the participant reported (inbound envelopes excepted).
    Participant(participant::Event),
    /// A chat was taken up.
    TaskStarted {
        /// The chat's id.
        trigger: String,
        /// Its sender.
        from: String,
    },
    /// A task ended.
    TaskFinished {
        /// The chat's id.
        trigger: String,
        /// How.
        outcome: TaskOutcome,
    },
    /// A chat was not answered, and why.
    ChatIgnored {
        /// The chat's id.
        id: String,
        /// Why.
        reason: String,
    },
    /// A model call failed and will be made again.
    ModelRetry {
        /// Retry number (1-based).
        attempt: u32,
        /// After how long.
        after: Duration,
        /// What went wrong.
        reason: String,
    },
    /// A model call failed for good.
    ModelFailed(ModelError),
    /// A proposal of another participant was fulfilled by an `auto_fulfil` rule.
    AutoFulfilled {
        /// The proposal.
        proposal: String,
        /// The rule's index.
        rule: usize,
    },
    /// A run made a step: a model call's thought, before its tool calls go out.
    RunProgress {
        /// The run.
        run: RunId,
        /// Step number (1-based).
        step: u32,
        /// The thought, or the tools called.
        message: String,
    },
    /// A run ended; its answer (or why there is none) is in `outcome`.
    RunFinished {
        /// The run.
        run: RunId,
        /// How.
        outcome: TaskOutcome,
    },
    /// Something the MCP server side reported (tools mode): the host's `initialize`, or a
    /// line it could not serve.
    Mcp(crate::mcp::ServerEvent),
    /// `participant/shutdown` was obeyed, or the gateway gave up: the program should exit
    /// once the outputs before this one are carried out.
    Exit,
}

/// A chat the agent has decided to consider.
#[derive(Debug, Clone, PartialEq)]
struct Trigger {
    id: String,
    from: String,
    text: String,
    /// Ask the model first whether to answer.
    classify: bool,
}

/// What a model call is for.
#[derive(Debug, Clone, PartialEq)]
enum Purpose {
    Step(Slot),
    Classify(Trigger),
    /// Compaction; the control to complete, if another participant asked.
    Compact(Option<String>),
}

#[derive(Debug, Clone)]
struct Call {
    id: ModelCallId,
    purpose: Purpose,
    request: ModelRequest,
    /// Retries made so far.
    retries: u32,
    /// Set while waiting to retry.
    retry_at: Option<Time>,
}

#[derive(Debug, Clone)]
struct PendingTool {
    request: Option<RequestId>,
    /// The model's tool-call id (native) or a generated one.
    call_id: String,
    /// `participant/tool` as shown in thoughts and the scratchpad.
    label: String,
    observation: Option<String>,
}

#[derive(Debug, Clone)]
struct Step {
    thought: String,
    action: String,
    observation: String,
}

#[derive(Debug, Clone)]
enum Phase {
    Discovering {
        until: Time,
    },
    Thinking,
    Acting(Vec<PendingTool>),
    /// A reply that arrived while paused.
    Held(ModelReply),
}

#[derive(Debug, Clone)]
struct Task {
    trigger: Trigger,
    context: Option<String>,
    iteration: u32,
    messages: Vec<Message>,
    steps: Vec<Step>,
    names: ToolNames,
    tools: Vec<FunctionDef>,
    phase: Phase,
    final_call: bool,
}

/// Largest observation passed back to the model, in bytes.
const MAX_OBSERVATION: usize = 16 * 1024;
/// Share of the context window kept free; compaction starts beyond the rest.
const HEADROOM: f64 = 0.3;

/// The agent state machine. See the module documentation.
#[derive(Debug)]
pub struct Agent {
    p: Participant,
    s: AgentSettings,
    rng: IdGen,
    out: VecDeque<Output>,
    tasks: BTreeMap<Slot, Task>,
    queue: VecDeque<Trigger>,
    /// Earlier turns (user and assistant messages), oldest first.
    history: VecDeque<Message>,
    /// Model calls under way or waiting to be retried: at most one per task, plus one
    /// classification or compaction.
    calls: Vec<Call>,
    next_call: u64,
    next_run: u64,
    /// Answer times per participant in the last minute.
    replies: BTreeMap<String, VecDeque<Time>>,
    /// Compactions asked for by others while busy.
    compact_requests: VecDeque<String>,
    /// The last prompt size the model reported (or estimated).
    context_tokens: u64,
    /// Our reasoning stream: request id, then the stream id once open.
    stream: Option<(String, Option<String>)>,
    exited: bool,
}

impl Agent {
    /// An agent that has not started; its participant's tool discovery follows
    /// `settings.discovery` (on by default).
    pub fn new(mut config: AgentConfig, seed: u64) -> Agent {
        let mut rng = IdGen::new(seed);
        config.participant.discovery.auto = config.settings.discovery;
        let p = Participant::new(config.participant, rng.next_u64());
        Agent {
            p,
            s: config.settings,
            rng,
            out: VecDeque::new(),
            tasks: BTreeMap::new(),
            queue: VecDeque::new(),
            history: VecDeque::new(),
            calls: Vec::new(),
            next_call: 0,
            next_run: 0,
            replies: BTreeMap::new(),
            compact_requests: VecDeque::new(),
            context_tokens: 0,
            stream: None,
            exited: false,
        }
    }

    /// The participant.
    pub fn participant(&self) -> &Participant {
        &self.p
    }

    /// The participant, for commands the agent does not wrap (register a tool, chat...).
    /// Outputs they queue are collected at the next input or [`Agent::poll_output`].
    pub fn participant_mut(&mut self) -> &mut Participant {
        &mut self.p
    }

    /// The settings.
    pub fn settings(&self) -> &AgentSettings {
        &self.s
    }

    /// Whether a chat task is running.
    pub fn is_busy(&self) -> bool {
        self.tasks.contains_key(&Slot::Chat)
    }

    /// Runs going.
    pub fn runs(&self) -> usize {
        self.tasks.len() - usize::from(self.is_busy())
    }

    /// Starts a headless run: `prompt` is worked on like a chat task's message, with no
    /// earlier conversation and in a conversation of its own (so runs may go at once), with
    /// only the tools that need no approval, and without chat or reasoning envelopes. Its
    /// steps are reported as [`AgentEvent::RunProgress`] and its end as
    /// [`AgentEvent::RunFinished`]. It does not wait for the space: with no gateway it runs
    /// with no tools.
    pub fn run(&mut self, now: Time, prompt: String, caller: &str) -> Result<RunId, RunError> {
        if self.exited {
            return Err(RunError::Stopped);
        }
        if self.runs() >= self.s.max_runs {
            return Err(RunError::Busy(self.s.max_runs));
        }
        self.next_run += 1;
        let run = RunId(self.next_run);
        let trigger = Trigger {
            id: run.to_string(),
            from: caller.to_owned(),
            text: prompt,
            classify: false,
        };
        self.begin(now, Slot::Run(run), trigger, None);
        self.pump(now);
        Ok(run)
    }

    /// Stops a run; `false` if it had already ended. Its [`AgentEvent::RunFinished`] says
    /// `Cancelled(reason)`.
    pub fn cancel_run(&mut self, now: Time, run: RunId, reason: &str) -> bool {
        let slot = Slot::Run(run);
        if !self.tasks.contains_key(&slot) {
            return false;
        }
        self.end_task(now, slot, TaskOutcome::Cancelled(reason.to_owned()), false);
        self.pump(now);
        true
    }

    /// Chats waiting.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Earlier turns kept.
    pub fn history_len(&self) -> usize {
        self.history.len()
    }

    /// Connects.
    pub fn start(&mut self, now: Time) {
        self.p.start(now);
        self.pump(now);
    }

    /// Leaves the space for good.
    pub fn close(&mut self, now: Time, reason: &str) {
        self.end_all(now, reason);
        self.p.close(now, reason);
        self.pump(now);
    }

    /// The WebSocket opened.
    pub fn handle_connected(&mut self, now: Time) {
        self.p.handle_connected(now);
        self.pump(now);
    }

    /// A pong arrived.
    pub fn handle_pong(&mut self, now: Time) {
        self.p.handle_pong(now);
        self.pump(now);
    }

    /// One inbound text frame.
    pub fn handle_frame(&mut self, now: Time, frame: &str) {
        self.p.handle_frame(now, frame);
        self.pump(now);
    }

    /// The WebSocket closed or could not open.
    pub fn handle_disconnected(&mut self, now: Time, reason: &str) {
        self.p.handle_disconnected(now, reason);
        self.pump(now);
    }

    /// The outcome of a model call. Answers to calls no longer wanted (a cancelled task)
    /// are ignored.
    pub fn handle_model(&mut self, now: Time, call: ModelCallId, outcome: ModelOutcome) {
        let Some(i) = self
            .calls
            .iter()
            .position(|c| c.id == call && c.retry_at.is_none())
        else {
            return;
        };
        let c = self.calls.remove(i);
        match model::judge(outcome) {
            Verdict::Reply(r) => self.on_reply(now, c.purpose, r),
            Verdict::Retry(after, reason) if c.retries < self.s.model_retries => {
                let backoff = self.s.retry_base.saturating_mul(1 << c.retries.min(16));
                let mut delay = after.unwrap_or(backoff).min(self.s.retry_cap);
                // Up to 20% jitter so that agents do not retry in step.
                delay += delay.mul_f64(self.rng.below(200) as f64 / 1000.0);
                self.emit(AgentEvent::ModelRetry {
                    attempt: c.retries + 1,
                    after: delay,
                    reason,
                });
                self.calls.push(Call {
                    retries: c.retries + 1,
                    retry_at: Some(now + delay),
                    ..c
                });
            }
            Verdict::Retry(_, reason) | Verdict::Fail(reason) => {
                let attempts = c.retries + 1;
                let message = if attempts > 1 {
                    format!("{reason} (after {attempts} attempts)")
                } else {
                    reason
                };
                self.on_model_failed(now, c.purpose, ModelError { message, attempts });
            }
        }
        self.pump(now);
    }

    /// Fires what is due: the participant's timers, retries, the end of a discovery wait.
    pub fn handle_timeout(&mut self, now: Time) {
        self.p.handle_timeout(now);
        for c in &mut self.calls {
            if c.retry_at.is_some_and(|at| at <= now) {
                c.retry_at = None;
                self.next_call += 1;
                c.id = ModelCallId(self.next_call);
                self.out.push_back(Output::Model {
                    call: c.id,
                    request: c.request.clone(),
                    timeout: self.s.model_timeout,
                });
            }
        }
        let due: Vec<Slot> = self
            .tasks
            .iter()
            .filter(|(_, t)| matches!(t.phase, Phase::Discovering { until } if until <= now))
            .map(|(s, _)| *s)
            .collect();
        for slot in due {
            self.first_step(now, slot);
        }
        self.pump(now);
    }

    /// When [`Agent::handle_timeout`] must run next.
    pub fn poll_timeout(&self) -> Option<Time> {
        let discovering = self.tasks.values().filter_map(|t| match t.phase {
            Phase::Discovering { until } => Some(until),
            _ => None,
        });
        let retries = self.calls.iter().filter_map(|c| c.retry_at);
        self.p
            .poll_timeout()
            .into_iter()
            .chain(retries)
            .chain(discovering)
            .min()
    }

    /// The next output.
    pub fn poll_output(&mut self) -> Option<Output> {
        if self.out.is_empty() {
            self.drain_participant();
        }
        self.out.pop_front()
    }

    // ---- internals ----

    fn emit(&mut self, e: AgentEvent) {
        self.out.push_back(Output::Event(e));
    }

    fn me(&self) -> String {
        self.p.id().unwrap_or_default().to_owned()
    }

    fn name(&self) -> String {
        self.s.name.clone().unwrap_or_else(|| self.me())
    }

    fn drain_participant(&mut self) -> Vec<participant::Event> {
        let mut events = Vec::new();
        while let Some(o) = self.p.poll_output() {
            match o {
                participant::Output::Event(e) => events.push(e),
                other => self.out.push_back(Output::Gateway(other)),
            }
        }
        events
    }

    /// Acts on the participant's events until it is quiet, then starts queued work.
    fn pump(&mut self, now: Time) {
        loop {
            let events = self.drain_participant();
            if events.is_empty() {
                break;
            }
            for e in events {
                self.on_event(now, e);
            }
        }
        self.try_start_next(now);
        // Starting work may have queued envelopes; their events (if any) wait for the
        // next input, which keeps this loop bounded.
        let events = self.drain_participant();
        for e in events {
            self.on_event(now, e);
        }
    }

    fn on_event(&mut self, now: Time, e: participant::Event) {
        use participant::Event as E;
        match e {
            E::Message(env) => {
                if env.kind == Kind::Chat {
                    self.consider_chat(now, &env);
                }
                return;
            }
            E::RequestCompleted { ref id, ref result } => self.on_completed(now, id, result),
            E::DiscoverySettled => {
                for slot in self.waiting() {
                    self.first_step(now, slot);
                }
            }
            E::Ready { .. } => {
                let waiting = self.waiting();
                if !waiting.is_empty() {
                    self.hurry_discoveries(now);
                    if self.p.discoveries_pending() == 0 {
                        for slot in waiting {
                            self.first_step(now, slot);
                        }
                    }
                }
            }
            E::ReasoningCancelled {
                ref context,
                ref by,
                ..
            } if self
                .tasks
                .values()
                .any(|t| t.context.as_deref() == Some(context)) =>
            {
                let slot = self
                    .tasks
                    .iter()
                    .find(|(_, t)| t.context.as_deref() == Some(context))
                    .map(|(s, _)| *s)
                    .expect("checked above");
                self.end_task(
                    now,
                    slot,
                    TaskOutcome::Cancelled(format!("reasoning cancelled by {by}")),
                    true,
                );
            }
            E::Control {
                ref id,
                ref control,
                ..
            } => self.on_control(now, id, control),
            E::ProposalSeen {
                ref id,
                ref from,
                ref to,
                ref payload,
            } => self.consider_fulfil(now, id, from, to, payload),
            E::Resumed { .. } => self.resume_held(now),
            E::StreamOpened {
                ref request_id,
                ref stream_id,
            } => {
                if let Some((req, open)) = &mut self.stream
                    && req == request_id
                {
                    *open = Some(stream_id.clone());
                }
            }
            E::GaveUp { .. } => {
                self.end_all(now, "gateway unreachable");
                if !self.exited {
                    self.exited = true;
                    self.out
                        .push_back(Output::Event(AgentEvent::Participant(e)));
                    self.emit(AgentEvent::Exit);
                    return;
                }
            }
            _ => {}
        }
        self.emit(AgentEvent::Participant(e));
    }

    fn consider_chat(&mut self, now: Time, env: &Envelope) {
        let me = self.me();
        match strategy::decide(&self.s, &me, &self.name(), env) {
            strategy::Decision::Ignore(None) => {}
            strategy::Decision::Ignore(Some(reason)) => self.emit(AgentEvent::ChatIgnored {
                id: env.id.clone(),
                reason,
            }),
            strategy::Decision::Respond { text, classify } => {
                let recent = self.replies.entry(env.from.clone()).or_default();
                while recent
                    .front()
                    .is_some_and(|t| now.saturating_since(*t) >= Duration::from_secs(60))
                {
                    recent.pop_front();
                }
                if recent.len() >= self.s.chat.max_replies_per_minute as usize {
                    self.emit(AgentEvent::ChatIgnored {
                        id: env.id.clone(),
                        reason: format!("reply limit reached for {}", env.from),
                    });
                    return;
                }
                if self.queue.len() >= self.s.chat.max_queue
                    && let Some(dropped) = self.queue.pop_front()
                {
                    self.emit(AgentEvent::ChatIgnored {
                        id: dropped.id,
                        reason: "queue full; dropped the oldest".into(),
                    });
                }
                self.queue.push_back(Trigger {
                    id: env.id.clone(),
                    from: env.from.clone(),
                    text,
                    classify,
                });
            }
        }
    }

    fn paused(&self) -> bool {
        self.p.pause_state().is_some()
    }

    /// Whether the chat side (a chat task, a classification or a compaction) is at work.
    fn chat_side_busy(&self) -> bool {
        self.tasks.contains_key(&Slot::Chat)
            || self
                .calls
                .iter()
                .any(|c| !matches!(c.purpose, Purpose::Step(Slot::Run(_))))
    }

    fn try_start_next(&mut self, now: Time) {
        if self.exited || self.chat_side_busy() || self.paused() {
            return;
        }
        if !self.p.client().is_ready() {
            return;
        }
        if let Some(control) = self.compact_requests.pop_front() {
            self.start_compaction(now, Some(control));
            return;
        }
        if self.needs_compaction() {
            self.start_compaction(now, None);
            return;
        }
        let Some(t) = self.queue.pop_front() else {
            return;
        };
        if t.classify {
            let request = self.classify_request(&t);
            self.issue(Purpose::Classify(t), request);
        } else {
            self.start_task(now, t);
        }
    }

    fn issue(&mut self, purpose: Purpose, request: ModelRequest) {
        self.next_call += 1;
        let id = ModelCallId(self.next_call);
        self.out.push_back(Output::Model {
            call: id,
            request: request.clone(),
            timeout: self.s.model_timeout,
        });
        self.calls.push(Call {
            id,
            purpose,
            request,
            retries: 0,
            retry_at: None,
        });
    }

    fn request(&self, messages: Vec<Message>, tools: Vec<FunctionDef>) -> ModelRequest {
        ModelRequest {
            model: self.s.model.clone(),
            messages,
            tools,
            temperature: self.s.temperature,
            max_tokens: self.s.max_tokens,
        }
    }

    fn start_task(&mut self, now: Time, t: Trigger) {
        if self.p.pending_chats().any(|c| c.id == t.id) {
            let _ = self.p.acknowledge_chat(now, &t.id, "received");
        }
        let context = if self.s.reasoning_enabled {
            let first_line: String = t
                .text
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(80)
                .collect();
            self.p
                .reasoning_start(now, &format!("Working on: {first_line}"), Some(&t.id))
                .ok()
        } else {
            None
        };
        if self.s.stream_reasoning && context.is_some() {
            self.stream = self
                .p
                .request_stream(
                    now,
                    json!({"direction": "upload", "description": "reasoning", "encoding": "text"}),
                    Vec::new(),
                )
                .ok()
                .map(|id| (id, None));
        }
        self.emit(AgentEvent::TaskStarted {
            trigger: t.id.clone(),
            from: t.from.clone(),
        });
        self.begin(now, Slot::Chat, t, context);
    }

    /// Sets a task up in `slot` and, unless it must wait for discoveries, asks the model.
    fn begin(&mut self, now: Time, slot: Slot, t: Trigger, context: Option<String>) {
        self.hurry_discoveries(now);
        // A run may come (from an MCP host) while the agent is still joining its space:
        // it waits for the welcome and the discoveries it starts, within `discovery_wait`.
        let joining = matches!(
            self.p.state(),
            ClientState::Connecting | ClientState::Connected | ClientState::Joined
        );
        let wait =
            (self.p.discoveries_pending() > 0 || joining) && !self.s.discovery_wait.is_zero();
        self.tasks.insert(
            slot,
            Task {
                trigger: t,
                context,
                iteration: 0,
                messages: Vec::new(),
                steps: Vec::new(),
                names: ToolNames::default(),
                tools: Vec::new(),
                phase: Phase::Discovering {
                    until: now + self.s.discovery_wait,
                },
                final_call: false,
            },
        );
        if !wait {
            self.first_step(now, slot);
        }
    }

    /// Discoveries still waiting for their staggered slot are wanted now.
    fn hurry_discoveries(&mut self, now: Time) {
        let scheduled: Vec<String> = self
            .p
            .discovery_statuses()
            .filter(|(_, st)| st.state == participant::DiscoveryState::NotStarted)
            .map(|(id, _)| id.to_owned())
            .collect();
        for id in scheduled {
            let _ = self.p.discover_tools(now, &id);
        }
    }

    /// Tasks waiting in [`Phase::Discovering`].
    fn waiting(&self) -> Vec<Slot> {
        self.tasks
            .iter()
            .filter(|(_, t)| matches!(t.phase, Phase::Discovering { .. }))
            .map(|(s, _)| *s)
            .collect()
    }

    /// The tools, the first messages, and the first model call.
    fn first_step(&mut self, now: Time, slot: Slot) {
        let mut names = ToolNames::default();
        let mut tools = Vec::new();
        let mut listing = Vec::new();
        let headless = self.headless(slot);
        for t in self.p.available_tools() {
            if headless && !self.may_call_directly(&t.participant, &t.tool.name) {
                // Offered, it could only fail: nobody is there to approve a proposal.
                continue;
            }
            let name = names.insert(&t.participant, &t.tool.name);
            let label = format!("{}/{}", t.participant, t.tool.name);
            let what = t.tool.description.clone().unwrap_or_default();
            let parameters = t
                .tool
                .input_schema
                .clone()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
            listing.push(match self.s.format {
                ReasoningFormat::Native => format!("- {label}: {what}"),
                ReasoningFormat::Scratchpad => {
                    format!("- {label}: {what}; arguments: {parameters}")
                }
            });
            tools.push(FunctionDef {
                name,
                description: format!(
                    "{what} (tool `{}` of participant `{}`)",
                    t.tool.name, t.participant
                ),
                parameters,
            });
        }
        let tool_list = if listing.is_empty() {
            "(none)".to_owned()
        } else {
            listing.join("\n")
        };
        let (me, name) = (self.me(), self.name());
        let Some(task) = self.tasks.get_mut(&slot) else {
            return;
        };
        let mut system = self.s.system.fill(|v| match v {
            "name" => Some(name.clone()),
            "tools" => Some(tool_list.clone()),
            _ => None,
        });
        if self.s.format == ReasoningFormat::Scratchpad {
            let fmt = Template::parse(SCRATCHPAD_FORMAT, &["tools"]).expect("built-in template");
            system.push_str("\n\n");
            system.push_str(&fmt.fill(|_| Some(tool_list.clone())));
        }
        let mut messages = vec![Message::text(Role::System, system)];
        if slot == Slot::Chat {
            messages.extend(self.history.iter().cloned());
        }
        let user = self.s.reason.fill(|v| match v {
            "input" => Some(task.trigger.text.clone()),
            "tools" => Some(tool_list.clone()),
            "name" => Some(me.clone()),
            "from" => Some(task.trigger.from.clone()),
            _ => None,
        });
        messages.push(Message::text(Role::User, user));
        task.messages = messages;
        task.names = names;
        task.tools = tools;
        task.phase = Phase::Thinking;
        self.next_step(now, slot);
    }

    fn headless(&self, slot: Slot) -> bool {
        self.s.headless || matches!(slot, Slot::Run(_))
    }

    /// Whether a `tools/call` of `tool` at `participant` may go as a request (not only as a
    /// proposal).
    fn may_call_directly(&self, _participant: &str, tool: &str) -> bool {
        let payload = json!({"method": "tools/call", "params": {"name": tool}});
        self.p.can_send(&Kind::McpRequest, Some(&payload))
    }

    fn next_step(&mut self, _now: Time, slot: Slot) {
        let Some(task) = self.tasks.get_mut(&slot) else {
            return;
        };
        task.iteration += 1;
        task.phase = Phase::Thinking;
        let (messages, tools) = if task.iteration > self.s.max_iterations {
            task.final_call = true;
            let steps = steps_text(&task.steps);
            let last = task
                .steps
                .last()
                .map(|s| s.observation.clone())
                .unwrap_or_default();
            let input = task.trigger.text.clone();
            let text = self.s.respond.fill(|v| match v {
                "observation" => Some(last.clone()),
                "input" => Some(input.clone()),
                "steps" => Some(steps.clone()),
                _ => None,
            });
            let mut m = task.messages.clone();
            m.push(Message::text(Role::User, text));
            (m, Vec::new())
        } else {
            let tools = match self.s.format {
                ReasoningFormat::Native => task.tools.clone(),
                ReasoningFormat::Scratchpad => Vec::new(),
            };
            (task.messages.clone(), tools)
        };
        let request = self.request(messages, tools);
        self.issue(Purpose::Step(slot), request);
    }

    fn on_reply(&mut self, now: Time, purpose: Purpose, reply: ModelReply) {
        let tokens = reply
            .usage
            .map_or(0, |u| u.prompt_tokens + u.completion_tokens);
        match purpose {
            Purpose::Step(slot) => {
                if slot == Slot::Chat {
                    self.account(now, tokens);
                }
                if self.paused() {
                    if let Some(t) = self.tasks.get_mut(&slot) {
                        t.phase = Phase::Held(reply);
                    }
                    return;
                }
                self.on_step_reply(now, slot, reply);
            }
            Purpose::Classify(t) => {
                let verdict = reply
                    .content
                    .as_deref()
                    .and_then(strategy::read_classification);
                match verdict {
                    Some((true, c)) if c >= self.s.chat.confidence_threshold => {
                        self.start_task(now, t)
                    }
                    other => self.emit(AgentEvent::ChatIgnored {
                        id: t.id,
                        reason: match other {
                            Some((yes, c)) => {
                                format!(
                                    "the model judged it not for this agent ({yes}, confidence {c})"
                                )
                            }
                            None => "the model's classification could not be read".into(),
                        },
                    }),
                }
            }
            Purpose::Compact(control) => {
                let summary = reply.content.unwrap_or_default();
                self.finish_compaction(now, control, Some(summary));
            }
        }
    }

    fn account(&mut self, now: Time, tokens: u64) {
        let tokens = if tokens > 0 {
            tokens
        } else {
            self.call_estimate()
        };
        self.context_tokens = tokens;
        self.p
            .set_context_usage(now, tokens, self.history.len() as u64 + 1);
    }

    fn call_estimate(&self) -> u64 {
        self.tasks
            .get(&Slot::Chat)
            .map_or(0, |t| t.messages.iter().map(Message::estimate_tokens).sum())
    }

    fn resume_held(&mut self, now: Time) {
        let held: Vec<Slot> = self
            .tasks
            .iter()
            .filter(|(_, t)| matches!(t.phase, Phase::Held(_)))
            .map(|(s, _)| *s)
            .collect();
        for slot in held {
            let Some(task) = self.tasks.get_mut(&slot) else {
                continue;
            };
            let Phase::Held(reply) = std::mem::replace(&mut task.phase, Phase::Thinking) else {
                unreachable!("filtered above")
            };
            self.on_step_reply(now, slot, reply);
        }
    }

    fn on_step_reply(&mut self, now: Time, slot: Slot, reply: ModelReply) {
        let Some(task) = self.tasks.get_mut(&slot) else {
            return;
        };
        if task.final_call {
            let text = reply.content.unwrap_or_else(|| "(no answer)".into());
            self.finish_answer(now, slot, text);
            return;
        }
        match self.s.format {
            ReasoningFormat::Native => {
                if reply.tool_calls.is_empty() {
                    let text = reply.content.unwrap_or_default();
                    self.finish_answer(now, slot, text);
                    return;
                }
                let labels: Vec<String> = reply
                    .tool_calls
                    .iter()
                    .map(|c| match task.names.resolve(&c.name) {
                        Some((p, t)) => format!("{p}/{t}"),
                        None => c.name.clone(),
                    })
                    .collect();
                let thought = reply
                    .content
                    .clone()
                    .unwrap_or_else(|| format!("Calling {}", labels.join(", ")));
                task.messages.push(Message {
                    role: Role::Assistant,
                    content: reply.content.clone(),
                    tool_calls: reply.tool_calls.clone(),
                    tool_call_id: None,
                });
                self.thought(now, slot, &thought);
                let mut pending = Vec::new();
                for (c, label) in reply.tool_calls.iter().zip(labels) {
                    let args = serde_json::from_str::<Value>(&c.arguments);
                    pending.push(self.dispatch(now, slot, &c.name, label, &c.id, args));
                }
                self.after_dispatch(now, slot, pending);
            }
            ReasoningFormat::Scratchpad => {
                let text = reply.content.unwrap_or_default();
                task.messages
                    .push(Message::text(Role::Assistant, text.clone()));
                match prompt::parse_scratchpad(&text) {
                    Ok(Scratch::Respond { thought, message }) => {
                        if !thought.is_empty() {
                            self.thought(now, slot, &thought);
                        }
                        self.finish_answer(now, slot, message);
                    }
                    Ok(Scratch::Continue { thought }) => {
                        self.thought(now, slot, &thought);
                        self.observe_text(now, slot, thought, "continue".into(), String::new());
                    }
                    Ok(Scratch::Tool {
                        thought,
                        tool,
                        arguments,
                    }) => {
                        let shown = if thought.is_empty() {
                            format!("Calling {tool}")
                        } else {
                            thought.clone()
                        };
                        self.thought(now, slot, &shown);
                        let n = self.tasks.get(&slot).map_or(0, |t| t.iteration);
                        let p = self.dispatch(
                            now,
                            slot,
                            &tool,
                            tool.clone(),
                            &format!("step-{n}"),
                            Ok(arguments),
                        );
                        self.after_dispatch(now, slot, vec![p]);
                    }
                    Err(reason) => {
                        let obs = format!(
                            "Your reply could not be read: {reason}. Reply with one JSON object as instructed."
                        );
                        self.observe_text(
                            now,
                            slot,
                            String::new(),
                            "(unreadable reply)".into(),
                            obs,
                        );
                    }
                }
            }
        }
    }

    /// Records a step with no tool call (scratchpad) and asks again.
    fn observe_text(
        &mut self,
        now: Time,
        slot: Slot,
        thought: String,
        action: String,
        observation: String,
    ) {
        let Some(task) = self.tasks.get_mut(&slot) else {
            return;
        };
        task.steps.push(Step {
            thought,
            action,
            observation: observation.clone(),
        });
        let act = self.act_turn(slot);
        if let Some(task) = self.tasks.get_mut(&slot) {
            task.messages.push(Message::text(Role::User, act));
        }
        self.next_step(now, slot);
    }

    /// The scratchpad turn after the latest step.
    fn act_turn(&self, slot: Slot) -> String {
        let Some(task) = self.tasks.get(&slot) else {
            return String::new();
        };
        let steps = steps_text(&task.steps);
        let last = task
            .steps
            .last()
            .map(|s| s.observation.clone())
            .unwrap_or_default();
        let tools: Vec<String> = task.tools.iter().map(|t| t.name.clone()).collect();
        self.s.act.fill(|v| match v {
            "objective" => Some(task.trigger.text.clone()),
            "tools" => Some(tools.join(", ")),
            "observation" => Some(last.clone()),
            "steps" => Some(steps.clone()),
            _ => None,
        })
    }

    fn thought(&mut self, now: Time, slot: Slot, text: &str) {
        if let Slot::Run(run) = slot {
            let step = self.tasks.get(&slot).map_or(0, |t| t.iteration);
            self.emit(AgentEvent::RunProgress {
                run,
                step,
                message: text.to_owned(),
            });
            return;
        }
        let Some(ctx) = self.tasks.get(&slot).and_then(|t| t.context.clone()) else {
            return;
        };
        if self.p.reasoning_thought(now, &ctx, text).is_ok()
            && let Some((_, Some(stream))) = &self.stream
        {
            let line = format!("{}\n", text.replace('\n', " "));
            let stream = stream.clone();
            let _ = self.p.send_stream_data(&stream, &line);
        }
    }

    /// Sends one tool call; an immediate failure becomes its observation.
    fn dispatch(
        &mut self,
        now: Time,
        slot: Slot,
        name: &str,
        label: String,
        call_id: &str,
        args: Result<Value, serde_json::Error>,
    ) -> PendingTool {
        let mut pending = PendingTool {
            request: None,
            call_id: call_id.to_owned(),
            label,
            observation: None,
        };
        let Some(task) = self.tasks.get(&slot) else {
            return pending;
        };
        let resolved = task
            .names
            .resolve(name)
            .map(|(p, t)| (p.to_owned(), t.to_owned()));
        let Some((participant, tool)) = resolved else {
            // A tool left out of a headless offer because it needs approval: say so.
            if let Some((p, t)) = toolname::decode_full(name)
                && self.headless(slot)
                && self
                    .p
                    .available_tools()
                    .iter()
                    .any(|a| a.participant == p && a.tool.name == t)
            {
                pending.observation = Some(format!(
                    "Error: calling {p}/{t} needs a person's approval, and none is available here"
                ));
                return pending;
            }
            let known: Vec<String> = task.tools.iter().map(|t| t.name.clone()).collect();
            pending.observation = Some(format!(
                "Error: there is no tool named `{name}`. Available: {}",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ));
            return pending;
        };
        pending.label = format!("{participant}/{tool}");
        let arguments = match args {
            Ok(v @ Value::Object(_)) => v,
            Ok(other) => {
                pending.observation = Some(format!(
                    "Error: the arguments must be a JSON object, not {other}"
                ));
                return pending;
            }
            Err(e) => {
                pending.observation =
                    Some(format!("Error: the arguments are not valid JSON ({e})"));
                return pending;
            }
        };
        let payload =
            json!({"method": "tools/call", "params": {"name": tool, "arguments": arguments}});
        if self.headless(slot) && !self.p.can_send(&Kind::McpRequest, Some(&payload)) {
            pending.observation = Some(format!(
                "Error: calling {participant}/{tool} needs a person's approval, and none is available here"
            ));
            return pending;
        }
        match self
            .p
            .mcp_request(now, vec![participant], payload, RequestOptions::default())
        {
            Ok(id) => pending.request = Some(id),
            Err(e) => pending.observation = Some(format!("Error: {e}")),
        }
        pending
    }

    fn after_dispatch(&mut self, now: Time, slot: Slot, pending: Vec<PendingTool>) {
        let Some(task) = self.tasks.get_mut(&slot) else {
            return;
        };
        task.phase = Phase::Acting(pending);
        self.maybe_observe(now, slot);
    }

    fn on_completed(&mut self, now: Time, id: &RequestId, result: &Result<Value, RequestError>) {
        let found = self
            .tasks
            .iter_mut()
            .find_map(|(slot, t)| match &mut t.phase {
                Phase::Acting(pending) => pending
                    .iter_mut()
                    .find(|p| p.request.as_ref() == Some(id) && p.observation.is_none())
                    .map(|p| (*slot, p)),
                _ => None,
            });
        let Some((slot, pending)) = found else {
            return;
        };
        pending.observation = Some(match result {
            Ok(v) => observation_of(v),
            Err(e) => format!("Error: {e}"),
        });
        self.maybe_observe(now, slot);
    }

    /// Once every tool call of the step has its observation, records them and asks again.
    fn maybe_observe(&mut self, now: Time, slot: Slot) {
        let Some(task) = self.tasks.get_mut(&slot) else {
            return;
        };
        let Phase::Acting(pending) = &task.phase else {
            return;
        };
        if pending.iter().any(|p| p.observation.is_none()) {
            return;
        }
        let Phase::Acting(pending) = std::mem::replace(&mut task.phase, Phase::Thinking) else {
            unreachable!("checked above")
        };
        let thought = task
            .messages
            .last()
            .and_then(|m| m.content.clone())
            .unwrap_or_default();
        for p in pending {
            let mut obs = p.observation.unwrap_or_default();
            truncate(&mut obs, MAX_OBSERVATION);
            task.steps.push(Step {
                thought: thought.clone(),
                action: p.label.clone(),
                observation: obs.clone(),
            });
            if self.s.format == ReasoningFormat::Native {
                task.messages.push(Message::tool_result(&p.call_id, obs));
            }
        }
        if self.s.format == ReasoningFormat::Scratchpad {
            let act = self.act_turn(slot);
            if let Some(task) = self.tasks.get_mut(&slot) {
                task.messages.push(Message::text(Role::User, act));
            }
        }
        self.next_step(now, slot);
    }

    fn finish_answer(&mut self, now: Time, slot: Slot, text: String) {
        let text = if text.trim().is_empty() {
            "(the model gave no answer)".to_owned()
        } else {
            text
        };
        self.end_task(now, slot, TaskOutcome::Answered(text), true);
    }

    fn on_model_failed(&mut self, now: Time, purpose: Purpose, err: ModelError) {
        self.emit(AgentEvent::ModelFailed(err.clone()));
        match purpose {
            Purpose::Step(slot) => {
                self.end_task(now, slot, TaskOutcome::Failed(err.message), true);
            }
            Purpose::Classify(t) => self.emit(AgentEvent::ChatIgnored {
                id: t.id,
                reason: format!("could not classify: {err}"),
            }),
            Purpose::Compact(control) => self.finish_compaction(now, control, None),
        }
    }

    /// Ends the current task: withdraws its pending proposals, concludes its reasoning, and
    /// (when `tell`) answers the asker.
    /// Cancels every task (shutdown, restart, the gateway gone).
    fn end_all(&mut self, now: Time, reason: &str) {
        let slots: Vec<Slot> = self.tasks.keys().copied().collect();
        for slot in slots {
            self.end_task(now, slot, TaskOutcome::Cancelled(reason.to_owned()), false);
        }
    }

    fn end_task(&mut self, now: Time, slot: Slot, outcome: TaskOutcome, tell: bool) {
        let Some(task) = self.tasks.remove(&slot) else {
            return;
        };
        self.calls.retain(|c| c.purpose != Purpose::Step(slot));
        if let Phase::Acting(pending) = &task.phase {
            for p in pending {
                if let Some(id) = &p.request
                    && self.p.is_pending(id)
                {
                    // Only proposals can be withdrawn; a direct request's late answer is
                    // simply not waited for.
                    let _ = self.p.withdraw(now, id, "cancelled");
                }
            }
        }
        let cancelled = matches!(outcome, TaskOutcome::Cancelled(_));
        if let Some(ctx) = &task.context
            && !cancelled
        {
            let message = match &outcome {
                TaskOutcome::Answered(_) => format!("Answered after {} step(s)", task.steps.len()),
                TaskOutcome::Failed(e) => format!("Stopped: {e}"),
                TaskOutcome::Cancelled(r) => format!("Stopped: {r}"),
            };
            let _ = self.p.reasoning_conclusion(now, ctx, &message);
        }
        if let Slot::Run(run) = slot {
            self.emit(AgentEvent::RunFinished { run, outcome });
            return;
        }
        if let Some((_, Some(stream))) = self.stream.take() {
            let _ = self.p.close_stream(now, &stream, "done");
        }
        if tell {
            let text = match &outcome {
                TaskOutcome::Answered(t) => t.clone(),
                TaskOutcome::Failed(e) => format!("I could not complete this: {e}"),
                TaskOutcome::Cancelled(r) => format!("Stopped: {r}."),
            };
            let _ = self.p.send(
                now,
                Draft::new(Kind::Chat)
                    .to([task.trigger.from.clone()])
                    .correlation([task.trigger.id.clone()])
                    .payload(json!({"text": text, "format": "plain"})),
            );
            self.replies
                .entry(task.trigger.from.clone())
                .or_default()
                .push_back(now);
            if let TaskOutcome::Answered(answer) = &outcome
                && self.s.history_length > 0
            {
                self.history
                    .push_back(Message::text(Role::User, task.trigger.text.clone()));
                self.history
                    .push_back(Message::text(Role::Assistant, answer.clone()));
                while self.history.len() > self.s.history_length {
                    self.history.pop_front();
                }
            }
        }
        self.emit(AgentEvent::TaskFinished {
            trigger: task.trigger.id,
            outcome,
        });
    }

    // ---- proposals of others ----

    fn consider_fulfil(&mut self, now: Time, id: &str, from: &str, to: &[String], payload: &Value) {
        let me = self.me();
        if from == me {
            return;
        }
        let read_only = |target: &str, tool: &str| {
            self.p.discovery_status(target).is_some_and(|s| {
                s.tools.iter().any(|t| {
                    t.name == tool
                        && t.annotations
                            .as_ref()
                            .and_then(|a| a.get("readOnlyHint"))
                            .and_then(Value::as_bool)
                            == Some(true)
                })
            })
        };
        let Some(rule) = fulfil::matching(&self.s.auto_fulfil, from, to, payload, read_only) else {
            return;
        };
        if self.p.fulfil(now, id).is_ok() {
            self.emit(AgentEvent::AutoFulfilled {
                proposal: id.to_owned(),
                rule,
            });
        }
    }

    // ---- controls and context ----

    fn on_control(&mut self, now: Time, id: &str, control: &Control) {
        match control {
            Control::Forget { direction, entries } => {
                let n = entries
                    .map_or(self.history.len(), |e| e as usize)
                    .min(self.history.len());
                let mut freed = 0;
                for _ in 0..n {
                    let m = match direction {
                        ForgetDirection::Oldest => self.history.pop_front(),
                        ForgetDirection::Newest => self.history.pop_back(),
                    };
                    freed += m.map_or(0, |m| m.estimate_tokens());
                }
                let _ = self.p.complete_forget(now, id, freed, n as u64);
            }
            Control::Clear => {
                self.history.clear();
                self.context_tokens = 0;
                let _ = self.p.complete_clear(now, id);
            }
            Control::Compact { .. } => {
                if !self.chat_side_busy() {
                    self.start_compaction(now, Some(id.to_owned()));
                } else if self.compact_requests.len() < 16 {
                    self.compact_requests.push_back(id.to_owned());
                } else {
                    let _ = self.p.complete_compact(
                        now,
                        id,
                        CompactOutcome::Skipped {
                            reason: Some("too many compactions waiting".into()),
                        },
                    );
                }
            }
            Control::Restart => {
                self.end_all(now, "restart");
                self.calls.clear();
                self.queue.clear();
                self.history.clear();
                self.compact_requests.clear();
                let _ = self.p.complete_restart(now, id);
            }
            Control::Shutdown => {
                self.end_all(now, "shutdown");
                self.queue.clear();
                let _ = self.p.complete_shutdown(now, id);
                if !self.exited {
                    self.exited = true;
                    self.emit(AgentEvent::Exit);
                }
            }
            Control::Pause { .. } | Control::Resume | Control::RequestStatus { .. } => {}
        }
    }

    fn needs_compaction(&self) -> bool {
        self.s.context_window > 0
            && !self.history.is_empty()
            && self.context_tokens as f64 >= (1.0 - HEADROOM) * self.s.context_window as f64
    }

    fn start_compaction(&mut self, now: Time, control: Option<String>) {
        if self.history.is_empty() {
            if let Some(id) = control {
                let _ = self.p.complete_compact(
                    now,
                    &id,
                    CompactOutcome::Skipped {
                        reason: Some("no conversation history".into()),
                    },
                );
            }
            return;
        }
        let _ = self.p.report_status(now, Some(Status::Compacting));
        let transcript: Vec<String> = self
            .history
            .iter()
            .map(|m| {
                format!(
                    "{}: {}",
                    match m.role {
                        Role::User => "user",
                        _ => "assistant",
                    },
                    m.content.as_deref().unwrap_or("")
                )
            })
            .collect();
        let request = self.request(
            vec![
                Message::text(
                    Role::System,
                    "Summarise the conversation below in a few sentences, keeping names, facts and open questions.",
                ),
                Message::text(Role::User, transcript.join("\n")),
            ],
            Vec::new(),
        );
        self.issue(Purpose::Compact(control), request);
    }

    fn finish_compaction(&mut self, now: Time, control: Option<String>, summary: Option<String>) {
        let before: u64 = self.history.iter().map(Message::estimate_tokens).sum();
        let messages = self.history.len() as u64;
        let outcome = match summary.filter(|s| !s.trim().is_empty()) {
            Some(s) => {
                self.history.clear();
                let m = Message::text(
                    Role::System,
                    format!("Summary of the earlier conversation: {s}"),
                );
                let after = m.estimate_tokens();
                self.history.push_back(m);
                self.context_tokens = self
                    .context_tokens
                    .saturating_sub(before.saturating_sub(after));
                CompactOutcome::Done {
                    freed_tokens: before.saturating_sub(after),
                    freed_messages: messages.saturating_sub(1),
                }
            }
            None => {
                // Without a summary, the oldest half goes: headroom matters more than recall.
                let n = self.history.len() / 2;
                self.history.drain(..n);
                self.context_tokens /= 2;
                CompactOutcome::Done {
                    freed_tokens: before / 2,
                    freed_messages: n as u64,
                }
            }
        };
        match control {
            Some(id) => {
                let _ = self.p.complete_compact(now, &id, outcome);
            }
            None => {
                self.p
                    .set_context_usage(now, self.context_tokens, self.history.len() as u64);
                let _ = self.p.report_status(now, Some(Status::Compacted));
            }
        }
    }

    fn classify_request(&self, t: &Trigger) -> ModelRequest {
        let tools: Vec<String> = self
            .p
            .available_tools()
            .into_iter()
            .map(|t| t.name)
            .collect();
        let prompt = format!(
            "You are {}, an AI agent with these tools: {}.\nA message was sent in the conversation by {}: {:?}\n\nShould you respond to this message? Consider whether it is a question you can answer, whether it relates to your tools, and whether you can add unique value.\nReturn only a JSON object: {{\"shouldRespond\": boolean, \"confidence\": number between 0 and 1, \"reason\": string}}",
            self.name(),
            if tools.is_empty() {
                "none".into()
            } else {
                tools.join(", ")
            },
            t.from,
            t.text
        );
        self.request(vec![Message::text(Role::User, prompt)], Vec::new())
    }
}

/// The observation text of a tool result: its text content, or the result as JSON.
fn observation_of(v: &Value) -> String {
    let error = v.get("isError").and_then(Value::as_bool) == Some(true);
    let text = match v.get("content").and_then(Value::as_array) {
        Some(items) => {
            let parts: Vec<String> = items
                .iter()
                .map(|i| match i.get("text").and_then(Value::as_str) {
                    Some(t) => t.to_owned(),
                    None => i.to_string(),
                })
                .collect();
            parts.join("\n")
        }
        None => v.to_string(),
    };
    if error {
        format!("Error: {text}")
    } else {
        text
    }
}

fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str(" [truncated]");
    }
}

fn steps_text(steps: &[Step]) -> String {
    if steps.is_empty() {
        return "(none yet)".into();
    }
    steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "{}. Reasoning: {}\n   Action: {}\n   Observation: {}",
                i + 1,
                s.thought,
                s.action,
                s.observation
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
