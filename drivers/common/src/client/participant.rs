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
use futures_util::{FutureExt, Sink, Stream, StreamExt};
use mew_core::Time;
use mew_core::participant::{
    AvailableTool, CallId, CommandError, Draft, Event, Participant, ParticipantConfig,
    RequestError, RequestId, RequestOptions, ReviewedProposal, SendError, ToolError, ToolSpec,
};
use serde_json::Value;
use tungstenite::client::IntoClientRequest;
use tungstenite::handshake::client::Request;
use tungstenite::http::{HeaderName, HeaderValue};
use tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tungstenite::{Error as WsError, Message};

use crate::clock::{self, Sleep};
use crate::client::link::Link;

/// How many events may wait for the application before the oldest are dropped.
pub const EVENT_QUEUE: usize = 4096;

/// What a participant runtime needs from an async runtime.
pub trait Runtime: Sleep + Send + Sync + Sized + 'static {
    /// A client WebSocket.
    type Ws: Stream<Item = Result<Message, WsError>>
        + Sink<Message, Error = WsError>
        + Send
        + Unpin
        + 'static;
    /// The application's end of the event queue.
    type Events: Send + 'static;
    /// The runtime's end of the event queue.
    type EventSender: Send + 'static;

    /// Runs `fut` in the background.
    fn spawn(fut: impl Future<Output = ()> + Send + 'static);
    /// Opens a client WebSocket (TCP, then the handshake for `req`).
    fn open(
        req: Request,
        config: WebSocketConfig,
    ) -> impl Future<Output = Result<Self::Ws, WsError>> + Send;
    /// A bounded event queue of `capacity`.
    fn event_queue(capacity: usize) -> (Self::EventSender, Self::Events);
    /// Queues an event without waiting; false when the queue is full or closed.
    fn try_send_event(tx: &Self::EventSender, e: Event) -> bool;
    /// The next event; `None` once the runtime stopped and the queue is empty.
    fn recv_event(rx: &mut Self::Events) -> impl Future<Output = Option<Event>> + Send;
}

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
        Self::start_with_token_file(config, seed, crate::client::token_file::TokenFile::from_env())
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
    let Some(kind) = v.get("kind").and_then(Value::as_str) else {
        return Err(SendJsonError::Invalid("no string `kind`".into()));
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
    let mut draft = Draft::new(mew_core::Kind::parse(kind))
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

/// The client handshake request for `url` with extra headers (e.g. `Authorization`).
pub fn client_request(url: &str, headers: &[(String, String)]) -> Result<Request, String> {
    let mut req = url
        .into_client_request()
        .map_err(|e| format!("bad gateway url {url}: {e}"))?;
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| e.to_string())?;
        let value = HeaderValue::from_str(v).map_err(|e| e.to_string())?;
        req.headers_mut().insert(name, value);
    }
    Ok(req)
}

/// Bytes read from a socket at a time.
pub const READ_BUFFER: usize = 16 * 1024;
/// Bytes of frames gathered before they are written to the socket.
pub const WRITE_BUFFER: usize = 16 * 1024;

/// WebSocket settings that refuse frames and messages over `max` bytes.
pub fn ws_config(max: usize) -> WebSocketConfig {
    // tungstenite zero-fills a read buffer of this size before every socket read: the
    // 128 KiB default costs a large memset per read and per idle connection's memory.
    // Its write buffer keeps the largest size it ever reached (up to 128 KiB by default):
    // after one burst, every idle connection would hold that much.
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        .max_frame_size(Some(max))
        .max_message_size(Some(max))
}

/// The disconnect reason reported for a close frame from the gateway.
pub fn close_reason(frame: Option<&CloseFrame>) -> String {
    match frame {
        Some(f) => format!("closed by gateway ({}): {}", f.code, f.reason),
        None => "closed by gateway".into(),
    }
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
            _ = timer.fuse() => inner.p.handle_timeout(clock::now()),
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

/// What a client connection's reader reports to the task driving the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A text frame (envelope or `#stream#data`).
    Frame(String),
    /// A pong answering our ping.
    Pong,
    /// The connection ended, and why.
    Closed(String),
}

/// Reads one client WebSocket until it ends, handing each event to `deliver`; stops early
/// when `deliver` answers `false` (the driving task is gone). Shared by every client-side
/// runtime (participant, bridge) so they read sockets the same way.
pub async fn read_client<S, F, Fut>(mut stream: S, mut deliver: F)
where
    S: Stream<Item = Result<Message, WsError>> + Unpin,
    F: FnMut(Incoming) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let reason = loop {
        let event = match stream.next().await {
            Some(Ok(Message::Text(t))) => Incoming::Frame(t.as_str().to_owned()),
            Some(Ok(Message::Pong(_))) => Incoming::Pong,
            Some(Ok(Message::Close(f))) => break close_reason(f.as_ref()),
            Some(Ok(_)) => continue,
            Some(Err(e)) => break format!("connection error: {e}"),
            None => break "connection closed".into(),
        };
        if !deliver(event).await {
            return;
        }
    };
    deliver(Incoming::Closed(reason)).await;
}

/// One write on a gateway socket, bounded by `within`: the reason to give the socket up,
/// when it must be (the participant, agent and bridge runtimes all write through this).
pub async fn write_within<S: crate::clock::Sleep, E>(
    within: std::time::Duration,
    write: impl Future<Output = Result<(), E>>,
) -> Result<(), &'static str> {
    match crate::clock::timeout::<S, _>(within, write).await {
        Some(Ok(())) => Ok(()),
        Some(Err(_)) => Err("the connection failed while writing"),
        None => Err("write timeout: the gateway is not reading"),
    }
}

/// Why a client WebSocket did not open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenFailure {
    /// One line for the logs and the core.
    pub reason: String,
    /// Trying again cannot help (the gateway's certificate does not verify).
    pub fatal: bool,
}

/// Opens the WebSocket of a participant, giving up after `within` (the core gives up on the
/// attempt at the same deadline; this frees the socket of a gateway that never answers).
pub async fn open_within<R: Runtime>(
    url: &str,
    headers: &[(String, String)],
    max_frame: usize,
    within: std::time::Duration,
) -> Result<R::Ws, OpenFailure> {
    let retry = |reason: String| OpenFailure {
        reason,
        fatal: false,
    };
    let req = client_request(url, headers).map_err(|e| OpenFailure {
        reason: e,
        fatal: true,
    })?;
    match crate::clock::timeout::<R, _>(within, R::open(req, ws_config(max_frame))).await {
        Some(Ok(ws)) => Ok(ws),
        Some(Err(WsError::Io(e))) => match crate::client::tls::certificate_failure(&e) {
            Some(why) => Err(OpenFailure {
                reason: format!("cannot connect to {url}: {why}"),
                fatal: true,
            }),
            None => Err(retry(format!("cannot connect to {url}: {e}"))),
        },
        Some(Err(WsError::Url(tungstenite::error::UrlError::UnsupportedUrlScheme))) => {
            Err(OpenFailure {
                reason: format!("cannot connect to {url}: {}", scheme_advice(url)),
                fatal: true,
            })
        }
        Some(Err(WsError::Http(resp))) if resp.status() == 404 => Err(OpenFailure {
            reason: format!(
                "cannot connect to {url}: {}",
                not_found_advice(url, resp.body().as_deref())
            ),
            fatal: true,
        }),
        Some(Err(e)) => Err(retry(format!("cannot connect to {url}: {e}"))),
        None => Err(retry(format!(
            "cannot connect to {url}: no answer within {within:?}"
        ))),
    }
}

/// What to write instead of a gateway address with a scheme a WebSocket cannot use.
fn scheme_advice(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let suggested = match scheme.to_ascii_lowercase().as_str() {
        "https" => Some(format!("wss://{rest}")),
        "http" => Some(format!("ws://{rest}")),
        _ => None,
    };
    match suggested {
        Some(s) => {
            format!("a gateway is joined over WebSocket: use ws:// (or wss:// with TLS), e.g. {s}")
        }
        None => {
            "a gateway is joined over WebSocket: its address begins with ws:// (or wss:// with TLS)"
                .into()
        }
    }
}

/// Why a WebSocket upgrade was answered 404: the gateway's own answer names the space it
/// does not serve; any other 404 comes from something that is not a gateway's WebSocket.
fn not_found_advice(url: &str, body: Option<&[u8]>) -> String {
    let answer: Option<Value> = body.and_then(|b| serde_json::from_slice(b).ok());
    let space = url
        .split_once("space=")
        .map(|(_, s)| s.split('&').next().unwrap_or(s))
        .unwrap_or_default();
    if answer
        .as_ref()
        .is_some_and(|a| a["error"] == "unknown_space")
    {
        format!("the gateway there serves no space {space:?} (HTTP 404): check the space id")
    } else {
        "nothing there accepts a MEW WebSocket (HTTP 404): check the host and port of the gateway"
            .into()
    }
}

/// Where a client WebSocket URL points: host, port (80 for `ws://`, 443 for `wss://`), and
/// whether it wants TLS; an `Err` for any other scheme.
pub fn url_target(req: &Request) -> Result<(String, u16, bool), WsError> {
    use tungstenite::error::UrlError;
    let uri = req.uri();
    let tls = match uri.scheme_str() {
        Some("ws") => false,
        Some("wss") => true,
        _ => return Err(WsError::Url(UrlError::UnsupportedUrlScheme)),
    };
    let host = uri.host().ok_or(WsError::Url(UrlError::NoHostName))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    Ok((host, port, tls))
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

    #[test]
    fn client_requests_carry_headers_and_refuse_bad_urls() {
        let req = client_request(
            "ws://127.0.0.1:1/ws?space=s",
            &[("Authorization".into(), "Bearer t".into())],
        )
        .unwrap();
        assert_eq!(req.headers()["authorization"], "Bearer t");
        assert!(client_request("not a url", &[]).is_err());
        assert!(client_request("ws://h/", &[("bad header".into(), "v".into())]).is_err());
        let f = CloseFrame {
            code: 1001.into(),
            reason: "bye".into(),
        };
        assert_eq!(close_reason(Some(&f)), "closed by gateway (1001): bye");
    }

    #[test]
    fn wrong_schemes_and_404s_say_what_to_change() {
        assert!(scheme_advice("http://h:1/ws?space=s").contains("e.g. ws://h:1/ws?space=s"));
        assert!(scheme_advice("https://h/ws").contains("e.g. wss://h/ws"));
        assert!(scheme_advice("ftp://h").contains("begins with ws://"));
        let gw = br#"{"error":"unknown_space","message":"no space \"x\" here"}"#;
        let m = not_found_advice("ws://h:1/ws?space=x&a=b", Some(gw));
        assert!(
            m.contains(r#"no space "x""#) && m.contains("space id"),
            "{m}"
        );
        let m = not_found_advice("ws://h:1/ws?space=x", Some(b"<html>"));
        assert!(m.contains("host and port"), "{m}");
        assert!(not_found_advice("ws://h:1/", None).contains("host and port"));
    }
}
