//! Participant state machines: the client connection (SDK layer 1, [`Client`]) and the
//! participant (SDK layer 2, [`Participant`]), which owns a client by composition.
//!
//! Both are sans-IO: the driver feeds transport events, frames, ticks (`now`) and
//! application commands in, and drains [`Output`]s: frames to send, connection requests,
//! pings and [`Event`]s. Commands return ids synchronously; their completions arrive later
//! as events carrying those ids, which maps directly onto futures in an async driver.
//!
//! A driver's loop, in short:
//!
//! ```
//! use mew_core::Time;
//! use mew_core::participant::{Event, Input, Output, Participant, ParticipantConfig};
//!
//! let config = ParticipantConfig { token: "secret".into(), ..Default::default() };
//! let mut p = Participant::new(config, 7);
//! let now = Time::from_unix_millis(1_000);
//! p.start(now); // queues Output::Connect
//! p.handle_input(now, Input::Connected); // the socket opened: the join goes out
//! p.handle_input(now, Input::Frame(r#"{"protocol":"mew/v0.4","id":"w","from":"system:gateway",
//!     "kind":"system/welcome","payload":{"you":{"id":"me","capabilities":[{"kind":"chat"}]},
//!     "participants":[]}}"#));
//! p.chat(now, "hello", vec![]).unwrap();
//! let mut frames = Vec::new();
//! while let Some(out) = p.poll_output() {
//!     match out {
//!         Output::Connect { url: _, headers } => assert_eq!(headers[0].1, "Bearer secret"),
//!         Output::Transmit(text) => frames.push(text), // write a text frame
//!         Output::Ping => {}                           // send a WebSocket ping
//!         Output::Disconnect { reason: _ } => {}       // close the socket
//!         Output::Event(Event::Ready { id, .. }) => assert_eq!(id, "me"),
//!         Output::Event(_) => {}                       // hand to the application
//!     }
//! }
//! assert_eq!(frames.len(), 2); // the join, then the chat
//! // Then sleep until `p.poll_timeout()` and give `Input::Timeout`.
//! ```
//!
//! Choices where the spec is silent:
//! - Liveness: the core asks the driver for WebSocket pings ([`Output::Ping`]) and closes
//!   after `idle_timeout` of silence; no protocol-level heartbeat envelope exists.
//! - A connection loss fails every in-flight direct request with
//!   [`RequestError::Disconnected`] (re-sending could run a tool twice); proposals stay
//!   pending with their deadline, since their fulfilment happens elsewhere.
//! - Before the first welcome the capabilities are unknown: `mcp_request` routes directly
//!   and lets the gateway decide; capability checks apply once a welcome arrived.
//! - Requests made while not ready wait in the bounded not-ready queue with their deadline;
//!   if they settle (timeout, withdraw) before the queue is flushed they are never sent.
//! - Reconnects follow the policy also when the first connection fails (the reference only
//!   reconnects after having been ready); attempts reset once ready again.
//! - Tool discovery candidates are participants whose capabilities can allow
//!   `mcp/response`; a `-32601` answer to `tools/list` means "no tools", not a failure.
//! - Requests addressed explicitly to us get `-32601` for unknown methods and tools; a
//!   broadcast request we cannot serve is left to whoever can (no error flood).
//! - Proposals under review expire after `proposal_timeout` without an outcome.
//! - While paused, only the kinds the gateway also lets through go out
//!   ([`default_pause_exempt`]); an automatic resume at the pause's timeout sends
//!   `participant/resume` only when the capabilities allow it, and always an `active`
//!   status.
//! - Everyone observes every envelope (unified delivery), so a response settles a request
//!   only when it comes from one of the request's targets, and `system/*` envelopes are
//!   obeyed only from `system:gateway`.

mod chat;
mod client;
mod config;
mod context;
mod controls;
mod discovery;
mod error;
mod event;
mod grants;
mod link;
mod members;
mod proposals;
mod reasoning;
mod requests;
mod streams;
mod tools;

pub use chat::PendingChat;
pub use client::{Client, ClientConfig, ClientState, Inbound, authorization};
pub use config::{
    Bounds, ContextConfig, DiscoveryConfig, HeartbeatPolicy, NotReadyPolicy, ParticipantConfig,
    ReconnectPolicy, default_pause_exempt,
};
pub use context::{ContextUsage, Status};
pub use controls::{CompactOutcome, PauseState};
pub use discovery::{AvailableTool, DiscoveryStatus, ToolInfo};
pub use error::{
    CommandError, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, RequestError,
    SendError, ToolError,
};
pub use event::{
    CallId, Control, DiscoveryState, Event, ForgetDirection, Output, RequestId, RequestRoute,
    ReviewState, RouteReason,
};
pub use grants::{grant_envelope, grant_payload, revoke_envelope};
pub use link::{AroundParticipant, GatewayInputs, Input};
pub use members::{MemberChange, Members};
pub use proposals::ReviewedProposal;
pub use requests::RequestOptions;
pub use streams::{StreamInfo, StreamRole};
pub use tools::{ResourceSpec, ToolSpec};

use crate::capability::CapabilitySet;
use crate::envelope::{Envelope, Kind};
use crate::ids::IdGen;
use crate::time::Time;
use serde_json::Value;

/// An envelope the application wants to send; the participant fills in `protocol`, `id`,
/// `ts` and `from`.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    /// Kind.
    pub kind: Kind,
    /// Addressees (empty: broadcast).
    pub to: Vec<String>,
    /// Related envelope ids.
    pub correlation_id: Vec<String>,
    /// Sub-context.
    pub context: Option<String>,
    /// Payload.
    pub payload: Option<Value>,
}

impl Draft {
    /// A broadcast draft of this kind without payload.
    pub fn new(kind: Kind) -> Draft {
        Draft {
            kind,
            to: Vec::new(),
            correlation_id: Vec::new(),
            context: None,
            payload: None,
        }
    }

    /// Addresses it.
    pub fn to<S: Into<String>>(mut self, to: impl IntoIterator<Item = S>) -> Draft {
        self.to = to.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the correlation ids.
    pub fn correlation<S: Into<String>>(mut self, ids: impl IntoIterator<Item = S>) -> Draft {
        self.correlation_id = ids.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the context.
    pub fn context(mut self, context: impl Into<String>) -> Draft {
        self.context = Some(context.into());
        self
    }

    /// Sets the payload.
    pub fn payload(mut self, payload: Value) -> Draft {
        self.payload = Some(payload);
        self
    }

    /// A draft from an envelope given as JSON (`kind`, `to`, `correlation_id`, `context`,
    /// `payload`; the rest is the participant's to fill in). `Err` says what is missing.
    pub fn from_value(v: &Value) -> Result<Draft, String> {
        let Some(kind) = v.get("kind").and_then(Value::as_str) else {
            return Err("no string `kind`".into());
        };
        let strings = |key: &str| -> Vec<String> {
            match v.get(key) {
                Some(Value::String(s)) => vec![s.clone()],
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect(),
                _ => Vec::new(),
            }
        };
        let mut draft = Draft::new(Kind::parse(kind))
            .to(strings("to"))
            .correlation(strings("correlation_id"));
        if let Some(c) = v.get("context").and_then(Value::as_str) {
            draft = draft.context(c);
        }
        if let Some(p) = v.get("payload") {
            draft = draft.payload(p.clone());
        }
        Ok(draft)
    }
}

/// Layer 2: a protocol-aware participant.
///
/// The driver gives it what its connection does and the passing of time, one [`Input`] at a
/// time through [`Participant::handle_input`] (the same entry, [`GatewayInputs`], as the
/// machines built around a participant), carries out the [`Output`]s it queues, draining
/// [`Participant::poll_output`] after every input and command, and gives it
/// [`Input::Timeout`] at [`Participant::poll_timeout`]:
///
/// | input or command | what it may queue |
/// |---|---|
/// | [`start`](Self::start) | `Connect` |
/// | [`Input::Connected`] | `Transmit` (the join), `Event` (`Connected`) |
/// | [`Input::Frame`] | `Event` (`Ready`, `Message`, `CapabilitiesChanged`, `ParticipantJoined`, `ParticipantLeft`, `RequestCompleted`, `McpRequest`, `ToolCall`, `ChatReceived`, `Control`, `StreamData`, `Granted`, `GatewayError`, ...); `Transmit` (what it answers by itself: registered tools' results, acknowledgements, discovery, envelopes queued until the welcome) |
/// | [`Input::Pong`] | nothing (liveness) |
/// | [`Input::Disconnected`] | `Event` (`Disconnected`, then `Reconnecting`, or `Replaced` or `GaveUp`; direct requests in flight fail as `RequestCompleted`) |
/// | [`Input::Refused`] | `Event` (`Disconnected`, `GaveUp`) |
/// | [`Input::Timeout`] | `Connect` (a reconnection due), `Ping`, `Disconnect` (no welcome or no pong in time), `Event` (`RequestCompleted` for requests past their deadline) |
/// | [`close`](Self::close) | `Disconnect`, `Event` (`RequestCompleted` for direct requests in flight) |
/// | commands ([`send`](Self::send), [`chat`](Self::chat), [`mcp_request`](Self::mcp_request), [`call_tool`](Self::call_tool), [`fulfil`](Self::fulfil), [`request_stream`](Self::request_stream), [`reasoning_start`](Self::reasoning_start), [`report_status`](Self::report_status), [`send_control`](Self::send_control), ...) | `Transmit` (queued until the welcome, per the not-ready policy); `Err` when capabilities or state forbid it |
///
/// Commands are the application's API, not inputs (nothing happened outside; the
/// application asks for something): they stay methods, each returning whether it could be
/// done. They are declared with the feature they belong to (`chat.rs`, `requests.rs`,
/// `proposals.rs`, `tools.rs`, `discovery.rs`, `streams.rs`, `reasoning.rs`, `context.rs`,
/// `controls.rs`); the inputs, outputs and timers here.
#[derive(Debug)]
pub struct Participant {
    config: ParticipantConfig,
    client: Client,
    ids: IdGen,
    caps: CapabilitySet,
    caps_known: bool,
    others: Members,
    requests: requests::Requests,
    review: proposals::Review,
    tools: tools::Tools,
    discovery: discovery::Discovery,
    controls: controls::Controls,
    context: context::Context,
    chats: chat::Chats,
    reasoning: reasoning::Reasoning,
    streams: streams::Streams,
}

impl Participant {
    /// A participant that has not connected yet; `seed` fixes every id and jitter it draws.
    pub fn new(config: ParticipantConfig, seed: u64) -> Participant {
        let client = Client::new(
            ClientConfig {
                gateway_url: config.gateway_url.clone(),
                space: config.space.clone(),
                token: config.token.clone(),
                participant_id: config.participant_id.clone(),
                reconnect: config.reconnect.clone(),
                heartbeat: config.heartbeat.clone(),
                not_ready: config.not_ready,
                limits: config.limits,
            },
            seed ^ 0x5DEE_CE66_D1CE_5EED,
        );
        let others = Members::new(config.bounds.max_participants);
        Participant {
            context: context::Context::new(&config.context),
            config,
            client,
            ids: IdGen::new(seed),
            caps: CapabilitySet::default(),
            caps_known: false,
            others,
            requests: Default::default(),
            review: Default::default(),
            tools: Default::default(),
            discovery: Default::default(),
            controls: Default::default(),
            chats: Default::default(),
            reasoning: Default::default(),
            streams: Default::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ParticipantConfig {
        &self.config
    }

    /// Replaces the token for the next connection (see [`Client::set_token`]).
    pub fn set_token(&mut self, token: String) {
        self.client.set_token(token);
    }

    /// The connection machine.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Connection state.
    pub fn state(&self) -> ClientState {
        self.client.state()
    }

    /// Our participant id (the welcome's once it arrived).
    pub fn id(&self) -> Option<&str> {
        self.client.participant_id()
    }

    /// Our capabilities as of the latest welcome.
    pub fn capabilities(&self) -> &CapabilitySet {
        &self.caps
    }

    /// Other participants in the space and their capabilities.
    pub fn participants(&self) -> impl Iterator<Item = (&str, &CapabilitySet)> {
        self.others.iter()
    }

    /// The other participants as the SDK keeps them (leavers dropped, bounded).
    pub fn members(&self) -> &Members {
        &self.others
    }

    /// Whether the gateway marks this participant as a person (`"person": true` in its
    /// welcome or presence: `person: true` in the space's configuration).
    pub fn is_person(&self, id: &str) -> bool {
        self.others.is_person(id)
    }

    /// Emits [`Output::Connect`].
    pub fn start(&mut self, now: Time) {
        self.client.start(now);
    }

    // ---- the one entry of inputs ----

    /// Applies one input (see the table on [`Participant`]). Drain
    /// [`Participant::poll_output`] afterwards.
    pub fn handle_input(&mut self, now: Time, input: Input<'_>) {
        match input {
            Input::Connected => self.client.handle_connected(now),
            Input::Frame(frame) => self.on_frame(now, frame),
            Input::Pong => self.client.handle_pong(now),
            Input::Disconnected { reason } => self.on_disconnected(now, reason),
            Input::Refused { reason } => self.on_refused(now, reason),
            Input::Timeout => self.on_timeout(now),
        }
    }

    /// [`Input::Disconnected`]: schedules a reconnect per policy.
    fn on_disconnected(&mut self, now: Time, reason: &str) {
        let was_up = !matches!(
            self.client.state(),
            ClientState::Disconnected | ClientState::Closed
        );
        self.client.handle_disconnected(now, reason);
        if was_up {
            self.on_connection_lost(now);
        }
    }

    /// [`Input::Refused`]: given up at once ([`Event::GaveUp`]).
    fn on_refused(&mut self, now: Time, reason: &str) {
        let was_up = !matches!(
            self.client.state(),
            ClientState::Disconnected | ClientState::Closed
        );
        self.client.handle_refused(now, reason);
        if was_up {
            self.on_connection_lost(now);
        }
    }

    /// Leaves for good: a close frame with `reason` when connected ([`Output::Disconnect`]),
    /// no reconnection, and direct requests still waiting fail as disconnected. Sending
    /// afterwards fails with [`SendError::ShutDown`].
    pub fn close(&mut self, now: Time, reason: &str) {
        let was_up = !matches!(
            self.client.state(),
            ClientState::Disconnected | ClientState::Closed
        );
        self.client.close(now, reason);
        if was_up {
            self.on_connection_lost(now);
        }
    }

    fn on_connection_lost(&mut self, now: Time) {
        self.fail_direct_requests(now, RequestError::Disconnected);
        self.discovery_connection_lost(now);
    }

    /// [`Input::Frame`].
    fn on_frame(&mut self, now: Time, frame: &str) {
        if let Inbound::Envelope(env) = self.client.handle_frame(now, frame) {
            self.on_envelope(now, env);
        }
    }

    /// [`Input::Timeout`]: every due timer.
    fn on_timeout(&mut self, now: Time) {
        let before = self.client.state();
        self.client.handle_timeout(now);
        if before == ClientState::Ready && self.client.state() == ClientState::Disconnected {
            self.on_connection_lost(now);
        }
        self.requests_timeout(now);
        self.discovery_timeout(now);
        self.controls_timeout(now);
        self.review_timeout(now);
    }

    /// The earliest time [`Input::Timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Time> {
        [
            self.client.poll_timeout(),
            self.requests.next_deadline(),
            self.discovery.next_action(),
            self.controls.next_deadline(),
            self.review.next_expiry(self.config.proposal_timeout),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Next output for the driver.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.client.poll_output()
    }

    /// Whether the capabilities allow sending this (before any welcome: unknown, `true`).
    pub fn can_send(&self, kind: &Kind, payload: Option<&Value>) -> bool {
        !self.caps_known || self.caps.allows(kind.as_str(), payload)
    }

    /// Sends an application envelope, checking reservation, pause and capabilities.
    pub fn send(&mut self, now: Time, draft: Draft) -> Result<String, SendError> {
        let env = self.build(
            now,
            draft.kind,
            draft.to,
            draft.correlation_id,
            draft.context,
            draft.payload,
        );
        let id = env.id.clone();
        self.send_checked(env)?;
        Ok(id)
    }

    fn check_send(&self, kind: &Kind, payload: Option<&Value>) -> Result<(), SendError> {
        if kind.is_reserved() {
            return Err(SendError::Reserved(kind.clone()));
        }
        if self.client.state() == ClientState::Closed {
            return Err(SendError::ShutDown);
        }
        if let Some(p) = &self.controls.pause
            && !self.config.pause_exempt_kinds.contains(kind)
        {
            return Err(SendError::Paused {
                kind: kind.clone(),
                reason: p.reason.clone(),
            });
        }
        if !self.can_send(kind, payload) {
            return Err(SendError::NotAllowed {
                kind: kind.clone(),
                held: self.caps.to_json(),
            });
        }
        Ok(())
    }

    fn send_checked(&mut self, env: Envelope) -> Result<(), SendError> {
        self.check_send(&env.kind, env.payload.as_ref())?;
        self.client.send(env)
    }

    /// Protocol replies (responses, acks, status) the participant owes; the gateway
    /// enforces capabilities on them, and a refusal to queue is reported, not returned.
    fn send_internal(&mut self, env: Envelope) {
        if let Err(e) = self.client.send(env) {
            self.client.emit(Event::Invalid {
                id: String::new(),
                reason: format!("could not send a protocol reply: {e}"),
            });
        }
    }

    fn build(
        &mut self,
        now: Time,
        kind: Kind,
        to: Vec<String>,
        correlation: Vec<String>,
        context: Option<String>,
        payload: Option<Value>,
    ) -> Envelope {
        Envelope {
            protocol: crate::PROTOCOL.to_owned(),
            id: self.ids.uuid_v4(),
            ts: Some(now.rfc3339()),
            from: self.client.participant_id().unwrap_or_default().to_owned(),
            to: (!to.is_empty()).then_some(to),
            kind,
            correlation_id: (!correlation.is_empty()).then_some(correlation),
            context,
            payload,
        }
    }

    fn me(&self) -> &str {
        self.client.participant_id().unwrap_or_default()
    }

    /// Whether `env` names us in `to` explicitly.
    fn addressed_to_me(&self, env: &Envelope) -> bool {
        let me = self.me();
        !me.is_empty() && env.to.as_ref().is_some_and(|t| t.iter().any(|p| p == me))
    }

    fn on_envelope(&mut self, now: Time, env: Box<Envelope>) {
        if env.kind.is_reserved() && env.from != crate::GATEWAY_ID {
            // Only the gateway speaks `system/*`; a forged one is reported, not obeyed.
            self.invalid(&env, "system kind from a participant");
            self.client.emit(Event::Message(env));
            return;
        }
        match env.kind {
            Kind::SystemWelcome => self.on_welcome(now, &env),
            Kind::SystemPresence => self.on_presence(now, &env),
            Kind::SystemError => self.on_system_error(now, &env),
            Kind::McpRequest => {
                self.on_request_seen(now, &env);
                self.discovery_overhear_request(&env);
                self.serve(now, &env);
            }
            Kind::McpResponse => self.on_response(now, &env),
            Kind::McpProposal => self.on_proposal(now, &env),
            Kind::McpReject => self.on_reject(now, &env),
            Kind::McpWithdraw => self.on_withdraw(now, &env),
            Kind::Chat => self.on_chat(now, &env),
            Kind::ChatCancel => self.on_chat_cancel(&env),
            Kind::ReasoningCancel => self.on_reasoning_cancel(&env),
            Kind::CapabilityGrant => self.on_grant(now, &env),
            Kind::StreamOpen => self.on_stream_open(&env),
            Kind::StreamClose => self.on_stream_close(&env),
            Kind::Other(ref k)
                if matches!(
                    k.as_str(),
                    "stream/write-granted"
                        | "stream/write-revoked"
                        | "stream/ownership-transferred"
                ) =>
            {
                self.on_stream_writers(&env)
            }
            Kind::ParticipantPause
            | Kind::ParticipantResume
            | Kind::ParticipantRequestStatus
            | Kind::ParticipantForget
            | Kind::ParticipantCompact
            | Kind::ParticipantClear
            | Kind::ParticipantRestart
            | Kind::ParticipantShutdown => self.on_control(now, &env),
            _ => {}
        }
        self.client.emit(Event::Message(env));
    }

    fn on_welcome(&mut self, now: Time, env: &Envelope) {
        if self.client.is_ready() {
            self.requests.all_in_flight();
        }
        let Some(payload) = env.payload.as_ref() else {
            return self.invalid(env, "welcome without payload");
        };
        let you = payload.get("you");
        let you_id = you.and_then(|y| y.get("id")).and_then(Value::as_str);
        if you_id.is_some_and(|y| y != self.me()) {
            return; // someone else's welcome
        }
        match you
            .and_then(|y| y.get("capabilities"))
            .and_then(Value::as_array)
            .map(|a| CapabilitySet::compile(a))
        {
            Some(Ok(caps)) => {
                if !self.caps_known || caps != self.caps {
                    self.caps = caps;
                    self.caps_known = true;
                    self.client.emit(Event::CapabilitiesChanged {
                        capabilities: self.caps.to_json(),
                    });
                }
            }
            Some(Err(e)) => self.invalid(env, &format!("welcome capabilities: {e}")),
            None => self.invalid(env, "welcome without you.capabilities"),
        }
        if let Some(list) = payload.get("participants").and_then(Value::as_array) {
            let me = self.me().to_owned();
            for change in self.others.welcome(&me, list) {
                self.member_changed(now, change, false);
            }
        }
        if let Some(streams) = payload.get("active_streams").and_then(Value::as_array) {
            self.streams_from_welcome(streams, self.config.bounds.max_streams);
        }
        self.discovery_schedule_all(now);
    }

    fn on_presence(&mut self, now: Time, env: &Envelope) {
        let Some(p) = env.payload.as_ref() else {
            return self.invalid(env, "presence without payload");
        };
        // A crowded space (more online than the gateway's crowd size) announces joins and
        // leaves in batches, each change shaped as a single announcement's payload.
        let me = self.me().to_owned();
        for change in self.others.presence(&me, p) {
            match change {
                Ok(Some(change)) => self.member_changed(now, change, true),
                Ok(None) => {}
                Err(why) => self.invalid(env, why),
            }
        }
    }

    /// Tells a join or a leave; a join announced after the welcome is discovered at once.
    fn member_changed(&mut self, now: Time, change: MemberChange, discover: bool) {
        match change {
            MemberChange::Joined(id) => {
                self.client
                    .emit(Event::ParticipantJoined { id: id.clone() });
                if discover {
                    self.discovery_schedule(now, &id);
                }
            }
            MemberChange::Left(id) => {
                self.discovery_forget(&id);
                self.client.emit(Event::ParticipantLeft { id });
            }
        }
    }

    fn on_system_error(&mut self, now: Time, env: &Envelope) {
        let payload = env.payload.clone().unwrap_or(Value::Null);
        if let Some(c) = env.first_correlation()
            && self.requests.contains(c)
        {
            let error = payload
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("error")
                .to_owned();
            let id = c.to_owned();
            self.settle(
                now,
                &id,
                Err(RequestError::Gateway {
                    error,
                    detail: payload,
                }),
            );
            return;
        }
        self.client.emit(Event::GatewayError { payload });
    }

    fn invalid(&mut self, env: &Envelope, reason: &str) {
        self.client.emit(Event::Invalid {
            id: env.id.clone(),
            reason: reason.to_owned(),
        });
    }
}
