//! The participant runtime, written once for every async runtime.
//!
//! The participant core is driven by one task; every command runs inside that task against
//! the core, so ordering is exactly the order of calls. Completions (`mcp_request`,
//! `fulfil`, `call_tool`) resolve from the core's `RequestCompleted` events; tool calls run
//! the registered async handler and feed its result back. The core decides when to connect
//! and reconnect; the task only opens the sockets it is told to.
//!
//! A driver supplies a [`Runtime`]: how to spawn a task, sleep, open a client WebSocket and
//! hand events to the application. Channels here are runtime-neutral (`async-channel`,
//! `futures-channel`), so one implementation serves tokio, async-std and smol.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_channel::oneshot;
use futures_util::FutureExt;
use mew_core::Time;
use mew_core::participant::{
    AvailableTool, CallId, CommandError, Draft, Event, Input, Participant, ParticipantConfig,
    RequestError, RequestId, RequestOptions, ReviewedProposal, SendError, ToolError, ToolSpec,
};
use serde_json::Value;

use crate::client::link::Link;
use crate::client::socket::Runtime;
use crate::clock;

/// How many events may wait for the application before the oldest are dropped.
pub const EVENT_QUEUE: usize = 4096;

/// The runtime is gone (closed, or its task ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the participant runtime has stopped")]
pub struct Stopped;

/// A failed awaited operation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The core refused or settled the request with an error.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The runtime stopped first.
    #[error(transparent)]
    Stopped(#[from] Stopped),
}

/// Why [`ParticipantRuntime::send_json`] sent nothing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SendJsonError {
    /// Not a JSON object with a string `kind`.
    #[error("invalid envelope: {0}")]
    Invalid(String),
    /// The core refused to send it.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The runtime stopped.
    #[error(transparent)]
    Stopped(#[from] Stopped),
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
/// An async tool handler: arguments in, result out.
pub type ToolHandler = Arc<dyn Fn(Value) -> BoxFuture<Result<Value, ToolError>> + Send + Sync>;
type Job<R> = Box<dyn FnOnce(&mut Inner<R>, Time) + Send>;

/// A tool handler finished.
struct ToolDone(CallId, Result<Value, ToolError>);

struct Inner<R: Runtime> {
    p: Participant,
    waiters: HashMap<RequestId, oneshot::Sender<Result<Value, RequestError>>>,
    tools: HashMap<String, ToolHandler>,
    internal: async_channel::Sender<ToolDone>,
    link: Link<R>,
    events: R::EventSender,
    dropped_events: u64,
    stopped: bool,
    /// Dropped when the task ends: [`ParticipantRuntime::close`] waits on them.
    on_stop: Vec<oneshot::Sender<()>>,
    /// Read before every connection when `MEW_TOKEN_FILE` is set.
    token_file: Option<crate::client::token_file::TokenFile>,
}

/// The async handle on a participant. Clonable; the task stops when every handle is dropped
/// or [`ParticipantRuntime::close`] is called.
pub struct ParticipantRuntime<R: Runtime> {
    jobs: async_channel::Sender<Job<R>>,
}

impl<R: Runtime> Clone for ParticipantRuntime<R> {
    fn clone(&self) -> Self {
        ParticipantRuntime {
            jobs: self.jobs.clone(),
        }
    }
}

impl<R: Runtime> ParticipantRuntime<R> {
    /// Starts a participant: it connects (and reconnects) as the core directs. Returns the
    /// handle and the stream of every event the core emits (bounded: when the application
    /// does not keep up, events are dropped and counted rather than buffered without limit).
    ///
    /// When `MEW_TOKEN_FILE` is set, the token is read from that file before every
    /// connection (see [`ParticipantRuntime::start_with_token_file`]).
    pub fn start(config: ParticipantConfig, seed: Option<u64>) -> (Self, R::Events) {
        Self::start_with_token_file(
            config,
            seed,
            crate::client::token_file::TokenFile::from_env(),
        )
    }

    /// [`ParticipantRuntime::start`] with the token read from `token_file` (when given)
    /// before every connection: a token that expires is replaced by whatever renews the
    /// file, and the next reconnection presents the fresh one.
    pub fn start_with_token_file(
        config: ParticipantConfig,
        seed: Option<u64>,
        token_file: Option<crate::client::token_file::TokenFile>,
    ) -> (Self, R::Events) {
        let (jobs_tx, jobs_rx) = async_channel::bounded::<Job<R>>(256);
        let (internal_tx, internal_rx) = async_channel::bounded(1024);
        let (events_tx, events_rx) = R::event_queue(EVENT_QUEUE);
        let link = Link::new(&config);
        let p = Participant::new(config, seed.unwrap_or_else(clock::os_seed));
        let inner = Inner {
            p,
            waiters: HashMap::new(),
            tools: HashMap::new(),
            internal: internal_tx,
            link,
            events: events_tx,
            dropped_events: 0,
            stopped: false,
            on_stop: Vec::new(),
            token_file,
        };
        R::spawn(drive(inner, jobs_rx, internal_rx));
        (ParticipantRuntime { jobs: jobs_tx }, events_rx)
    }

    /// Starts a participant and waits for its first welcome. Fails with the reason of the
    /// first disconnection or refusal before that.
    pub async fn connect(
        config: ParticipantConfig,
        seed: Option<u64>,
    ) -> Result<(Self, R::Events, String), String> {
        let (rt, mut events) = Self::start(config, seed);
        loop {
            match R::recv_event(&mut events).await {
                Some(Event::Ready { id, .. }) => return Ok((rt, events, id)),
                Some(Event::Disconnected { reason }) => {
                    rt.close().await;
                    return Err(reason);
                }
                Some(Event::GaveUp { attempts }) => {
                    return Err(format!("gave up after {attempts} attempts"));
                }
                Some(Event::GatewayError { payload }) => {
                    rt.close().await;
                    return Err(payload.to_string());
                }
                Some(_) => continue,
                None => return Err("the runtime stopped".into()),
            }
        }
    }

    async fn job(&self, job: Job<R>) -> Result<(), Stopped> {
        self.jobs.send(job).await.map_err(|_| Stopped)
    }

    /// Runs `f` against the core inside the driving task (for any command without a
    /// dedicated method: controls, reasoning, acknowledgements, streams...).
    pub async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Participant, Time) -> T + Send + 'static,
    ) -> Result<T, Stopped> {
        let (tx, rx) = oneshot::channel();
        self.job(Box::new(move |inner, now| {
            let _ = tx.send(f(&mut inner.p, now));
        }))
        .await?;
        rx.await.map_err(|_| Stopped)
    }

    /// Sends an application envelope; returns its id.
    pub async fn send(&self, draft: Draft) -> Result<Result<String, SendError>, Stopped> {
        self.with(move |p, now| p.send(now, draft)).await
    }

    /// Sends a chat message; returns its id.
    pub async fn chat(
        &self,
        text: impl Into<String>,
        to: Vec<String>,
    ) -> Result<Result<String, SendError>, Stopped> {
        let text = text.into();
        self.with(move |p, now| p.chat(now, &text, to)).await
    }

    /// Grants `recipient` `capabilities` (capability patterns); returns the grant's id.
    pub async fn grant(
        &self,
        recipient: impl Into<String>,
        capabilities: Vec<Value>,
        reason: impl Into<String>,
    ) -> Result<Result<String, SendError>, Stopped> {
        let (recipient, reason) = (recipient.into(), reason.into());
        self.with(move |p, now| p.grant(now, &recipient, capabilities, &reason))
            .await
    }

    /// Sends an envelope given as JSON text (`kind`, `to`, `payload`, ... ; `id`, `from`,
    /// `ts` and `protocol` are filled in).
    pub async fn send_json(&self, json: &str) -> Result<String, SendJsonError> {
        let draft = draft_from_json(json)?;
        Ok(self.send(draft).await??)
    }

    async fn awaited(
        &self,
        start: impl FnOnce(&mut Participant, Time) -> Result<RequestId, RequestError> + Send + 'static,
    ) -> Result<Value, CallError> {
        let (tx, rx) = oneshot::channel();
        let (started_tx, started_rx) = oneshot::channel();
        self.job(Box::new(move |inner, now| match start(&mut inner.p, now) {
            Ok(id) => {
                inner.waiters.insert(id, tx);
                let _ = started_tx.send(Ok(()));
            }
            Err(e) => {
                let _ = started_tx.send(Err(e));
            }
        }))
        .await?;
        started_rx.await.map_err(|_| Stopped)??;
        Ok(rx.await.map_err(|_| Stopped)??)
    }

    /// A smart MCP request (ADR-WCM: direct when allowed, else a proposal); resolves with
    /// the response's `result` or the error that settled it.
    pub async fn mcp_request(
        &self,
        to: Vec<String>,
        payload: Value,
        opts: RequestOptions,
    ) -> Result<Value, CallError> {
        self.awaited(move |p, now| p.mcp_request(now, to, payload, opts))
            .await
    }

    /// Fulfils someone's proposal; resolves with the target's response.
    pub async fn fulfil(&self, proposal: impl Into<String>) -> Result<Value, CallError> {
        let proposal = proposal.into();
        self.awaited(move |p, now| p.fulfil(now, &proposal)).await
    }

    /// Rejects someone's proposal.
    pub async fn reject(
        &self,
        proposal: impl Into<String>,
        reason: impl Into<String>,
    ) -> Result<Result<(), RequestError>, Stopped> {
        let (proposal, reason) = (proposal.into(), reason.into());
        self.with(move |p, now| p.reject(now, &proposal, &reason))
            .await
    }

    /// Proposals seen in the space, with their review state.
    pub async fn proposals(&self) -> Result<Vec<ReviewedProposal>, Stopped> {
        self.with(|p, _| p.proposals().cloned().collect()).await
    }

    /// Tools discovered on other participants.
    pub async fn available_tools(&self) -> Result<Vec<AvailableTool>, Stopped> {
        self.with(|p, _| p.available_tools()).await
    }

    /// Calls a discovered tool by its `participant/tool` name.
    pub async fn call_tool(
        &self,
        name: impl Into<String>,
        arguments: Value,
    ) -> Result<Value, CallError> {
        let name = name.into();
        self.awaited(move |p, now| p.call_tool(now, &name, arguments, RequestOptions::default()))
            .await
    }

    /// Offers a tool; `handler` runs for every valid call and its result is the response.
    pub async fn register_tool<F, Fut>(
        &self,
        spec: ToolSpec,
        handler: F,
    ) -> Result<Result<(), CommandError>, Stopped>
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        let handler: ToolHandler = Arc::new(move |args| Box::pin(handler(args)));
        let (tx, rx) = oneshot::channel();
        self.job(Box::new(move |inner, _| {
            let name = spec.name.clone();
            let r = inner.p.register_tool(spec);
            if r.is_ok() {
                inner.tools.insert(name, handler);
            }
            let _ = tx.send(r);
        }))
        .await?;
        rx.await.map_err(|_| Stopped)
    }

    /// Sends data on a stream this participant owns.
    pub async fn send_stream_data(
        &self,
        stream_id: impl Into<String>,
        data: impl Into<String>,
    ) -> Result<Result<(), CommandError>, Stopped> {
        let (s, d) = (stream_id.into(), data.into());
        self.with(move |p, _| p.send_stream_data(&s, &d)).await
    }

    /// Closes the connection for good and stops the task; returns once it has ended.
    pub async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        let sent = self
            .job(Box::new(|inner, now| {
                inner.p.close(now, "closed by the application");
                inner.stopped = true;
                inner.on_stop.push(tx);
            }))
            .await;
        if sent.is_ok() {
            let _ = rx.await;
        }
    }
}

/// Parses an envelope given as JSON text into a [`Draft`] (`kind`, `to`, `correlation_id`,
/// `context`, `payload`; the rest is the core's to fill in).
pub fn draft_from_json(json: &str) -> Result<Draft, SendJsonError> {
    let v: Value =
        serde_json::from_str(json).map_err(|e| SendJsonError::Invalid(format!("not JSON: {e}")))?;
    Draft::from_value(&v).map_err(SendJsonError::Invalid)
}

async fn drive<R: Runtime>(
    mut inner: Inner<R>,
    jobs: async_channel::Receiver<Job<R>>,
    internal: async_channel::Receiver<ToolDone>,
) {
    inner.p.start(clock::now());
    loop {
        inner.pump().await;
        if inner.stopped {
            break;
        }
        let wake = inner.p.poll_timeout();
        let timer = async {
            match wake {
                Some(at) => R::sleep(clock::until(at)).await,
                None => std::future::pending().await,
            }
        };
        futures_util::select_biased! {
            job = jobs.recv().fuse() => match job {
                Ok(job) => job(&mut inner, clock::now()),
                Err(_) => break,
            },
            // The link and the task hold senders themselves, so these never end.
            ev = inner.link.next().fuse() => if let Some(ev) = ev {
                inner.link.handle(ev, &mut inner.p);
            },
            done = internal.recv().fuse() => if let Ok(ToolDone(call, result)) = done {
                let _ = inner.p.complete_call(clock::now(), call, result);
            },
            _ = timer.fuse() => inner.p.handle_input(clock::now(), Input::Timeout),
        }
    }
    inner.link.close().await;
}

impl<R: Runtime> Inner<R> {
    /// Carries out every queued output of the core.
    async fn pump(&mut self) {
        loop {
            while let Some(mut out) = self.p.poll_output() {
                if let (Some(f), mew_core::participant::Output::Connect { headers, .. }) =
                    (&self.token_file, &mut out)
                {
                    f.refresh(&mut self.p, headers);
                }
                if let Some(e) = self.link.carry(out, &mut self.p).await {
                    self.event(e);
                }
            }
            // A failed flush gave the socket up: the core has outputs again.
            if self.link.flush(&mut self.p).await {
                break;
            }
        }
    }

    fn event(&mut self, e: Event) {
        match &e {
            Event::RequestCompleted { id, result } => {
                if let Some(w) = self.waiters.remove(id) {
                    let _ = w.send(result.clone());
                }
            }
            Event::ToolCall {
                call_id,
                tool,
                arguments,
                ..
            } => {
                let call = *call_id;
                match self.tools.get(tool) {
                    Some(h) => {
                        let fut = h(arguments.clone());
                        let tx = self.internal.clone();
                        R::spawn(async move {
                            let r = fut.await;
                            let _ = tx.send(ToolDone(call, r)).await;
                        });
                    }
                    None => {
                        let _ = self.p.complete_call(
                            clock::now(),
                            call,
                            Err(ToolError::internal(format!("no handler for tool {tool}"))),
                        );
                    }
                }
            }
            // Said in the log too: an application may not show its events.
            Event::Replaced { reason } => {
                tracing::warn!(
                    "{reason}: another connection joined as this participant; not reconnecting"
                )
            }
            Event::Invalid { id, reason } => tracing::warn!(envelope = %id, "{reason}"),
            _ => {}
        }
        if !R::try_send_event(&self.events, e) {
            self.dropped_events += 1;
            if self.dropped_events.is_power_of_two() {
                tracing::warn!(
                    dropped = self.dropped_events,
                    "participant events dropped: the application is not reading them"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_from_json() {
        let d = draft_from_json(r#"{"kind":"chat","to":"b","payload":{"text":"hi"}}"#);
        assert!(d.is_ok());
        assert_eq!(
            draft_from_json("[1]").unwrap_err(),
            SendJsonError::Invalid("no string `kind`".into())
        );
        assert!(matches!(
            draft_from_json("{"),
            Err(SendJsonError::Invalid(m)) if m.starts_with("not JSON")
        ));
    }
}
