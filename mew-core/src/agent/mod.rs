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
//! An MCP server's question (`elicitation/create`) put to the agent is passed on to the
//! space's people and their answer relayed back; the model never answers it.
//!
//! Also: `auto_fulfil` rules ([`config::FulfilRule`]) fulfil others' proposals; forget, clear, compact
//! and restart controls act on the agent's conversation history; the history is compacted
//! through the model before the context window fills (30% kept free).

mod chat;
pub mod config;
mod context;
mod elicit;
mod fulfil;
pub mod model;
pub mod prompt;
pub mod reply;
mod step;
mod strategy;
mod streaming;
mod task;
pub mod toolname;

pub use config::{
    AgentConfig, AgentConfigError, AgentFile, AgentSettings, ChatStrategy, ModelReasoning,
    ReasoningFormat,
};
pub use elicit::{MAX_RELAYED, WAIT as ELICITATION_WAIT};
pub use model::{
    FunctionDef, Message, ModelError, ModelOutcome, ModelReply, ModelRequest, Role, ToolCall, Usage,
};

use crate::envelope::{Envelope, Kind};
use crate::ids::IdGen;
use crate::participant::{
    self, AroundParticipant, ClientState, CompactOutcome, Control, Draft, ForgetDirection,
    Participant, RequestError, RequestId, RequestOptions, Status,
};
use crate::time::Time;
use model::{TextCalls, Verdict};
use prompt::{SCRATCHPAD_FORMAT, Scratch, Template};
use reply::StreamAssembler;
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;
use streaming::refuses_streaming;
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
    /// The stream read so far, for showing reasoning as it comes.
    live: Option<StreamAssembler>,
}

#[derive(Debug, Clone)]
struct PendingTool {
    request: Option<RequestId>,
    /// The model's tool-call id (native) or a generated one.
    call_id: String,
    /// `participant/tool` as shown in thoughts and the scratchpad.
    label: String,
    /// The name as the model wrote it.
    name: String,
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
    /// The current step's tool calls were written in text, in this form.
    text_calls: Option<TextCalls>,
    /// Streamed reasoning not yet shown as a thought.
    thinking: String,
    /// Some of this step's reasoning was shown as it streamed.
    thinking_live: bool,
}

/// Largest observation passed back to the model, in bytes.
const MAX_OBSERVATION: usize = 16 * 1024;
/// Share of the context window kept free; compaction starts beyond the rest.
const HEADROOM: f64 = 0.3;

/// The agent state machine. See the module documentation.
///
/// The driver carries out its [`Output`]s (its participant's gateway actions, model calls),
/// draining [`Agent::poll_output`] after every input and command, and wakes it at
/// [`Agent::poll_timeout`]. Its connection's inputs and time come through the one entry of
/// the machines around a participant, [`GatewayInputs::handle_input`](participant::GatewayInputs::handle_input) with a
/// [`participant::Input`]; the model's replies through their own methods (they come from
/// another conversation than the gateway's, keyed by [`ModelCallId`]); commands (`run`,
/// `cancel_run`, `close`) are the application's API and stay methods:
///
/// | input | what it may queue |
/// |---|---|
/// | [`start`](Self::start) | `Gateway` (`Connect`) |
/// | `Input::Connected`, `Input::Pong`, `Input::Disconnected`, `Input::Refused` | what its [`Participant`] queues for them, as `Gateway` and `Event` (`Participant`) |
/// | `Input::Frame` | as the participant's; a chat it answers starts a task: `Gateway` (`Transmit`: acknowledgement, `reasoning/start`), `Model`, `Event` (`TaskStarted`); a tool result comes back to the model: `Model` |
/// | [`handle_model`](Self::handle_model) | the next step: `Model`, `Gateway` (`Transmit`: tool requests or proposals, `reasoning/thought`, the answer and `reasoning/conclusion`), `Event` (`TaskFinished`, `RunProgress`, `RunFinished`) |
/// | [`handle_model_data`](Self::handle_model_data) | `Gateway` (`Transmit`: `reasoning/thought`, a paragraph at a time) |
/// | `Input::Timeout` | `Model` (a retry due; a task's wait for tool discoveries over), `Gateway` (the participant's timers) |
/// | [`run`](Self::run), [`cancel_run`](Self::cancel_run) | `Model`; `Event` (`RunProgress`, `RunFinished`) |
/// | [`close`](Self::close) | `Event` (`TaskFinished` cancelled), `Gateway` (`Disconnect`) |
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
    /// Ask for streamed replies (off once the server refused one).
    model_stream: bool,
    /// Servers' questions passed on to the space's people: our request, the asker's call.
    relayed: BTreeMap<RequestId, participant::CallId>,
    exited: bool,
}

impl Agent {
    /// An agent that has not started; its participant's tool discovery follows
    /// `settings.discovery` (on by default).
    pub fn new(mut config: AgentConfig, seed: u64) -> Agent {
        let mut rng = IdGen::new(seed);
        config.participant.discovery.auto = config.settings.discovery;
        let stream = config.settings.stream;
        let mut p = Participant::new(config.participant, rng.next_u64());
        p.forward_method(elicit::METHOD);
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
            model_stream: stream,
            relayed: BTreeMap::new(),
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

    /// A piece of a streamed reply's body (`stream: true` requests answered 200), as it
    /// arrives; the whole body still comes with [`Agent::handle_model`]. The reasoning in
    /// it is shown as `reasoning/thought` envelopes, a paragraph at a time.
    pub fn handle_model_data(&mut self, now: Time, call: ModelCallId, piece: &str) {
        self.on_model_data(now, call, piece);
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
        let mut c = self.calls.remove(i);
        if c.request.stream && refuses_streaming(&outcome) {
            // The server does not stream (or not with these options): plain requests from
            // now on, and this one again at once.
            self.model_stream = false;
            c.request.stream = false;
            c.live = None;
            self.next_call += 1;
            c.id = ModelCallId(self.next_call);
            self.out.push_back(Output::Model {
                call: c.id,
                request: c.request.clone(),
                timeout: self.s.model_timeout,
            });
            self.calls.push(c);
            self.pump(now);
            return;
        }
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
                    live: None,
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

    /// [`Input::Timeout`](participant::Input::Timeout): the participant's timers, retries,
    /// the end of a discovery wait.
    fn fire_timers(&mut self, now: Time) {
        self.p.handle_input(now, participant::Input::Timeout);
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

    /// When `Input::Timeout` is due next.
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
            E::Forwarded {
                call_id,
                ref method,
                ref params,
                explicit,
                ..
            } => {
                if method == elicit::METHOD {
                    self.relay_elicitation(now, call_id, params.clone(), explicit);
                } else {
                    let _ = self.p.decline_call(call_id);
                }
            }
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
            live: None,
        });
    }

    fn request(&self, messages: Vec<Message>, tools: Vec<FunctionDef>) -> ModelRequest {
        ModelRequest {
            model: self.s.model.clone(),
            messages,
            tools,
            temperature: self.s.temperature,
            max_tokens: self.s.max_tokens,
            stream: false,
        }
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
                    .and_then(strategy::read_classification)
                    .ok_or_else(|| "the model's classification could not be read".to_owned());
                self.on_classified(now, t, verdict);
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
}

/// The connection's inputs go to the agent's participant (see [`AroundParticipant`]).
impl AroundParticipant for Agent {
    type Inner = Participant;
    fn inner(&mut self) -> &mut Participant {
        &mut self.p
    }
    fn after_input(&mut self, now: Time) {
        self.pump(now);
    }
    fn on_timeout(&mut self, now: Time) {
        self.fire_timers(now);
    }
}
