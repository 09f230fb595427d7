//! The agent runtime, written once for every async runtime: one task drives the agent core,
//! opens the sockets it asks for, and makes its model calls through a [`ModelTransport`].
//!
//! The transport is the one hook beyond the participant runtime's: [`HttpTransport`] (the
//! default) posts with `ureq`, a maintained blocking HTTP client, on a thread of its own per
//! call, so the same code serves tokio, async-std and smol, and a slow model never blocks the
//! task that answers the gateway.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_channel::oneshot;
use futures_util::future::Either;
use mew_core::agent::{AgentConfig, AgentEvent, ModelCallId, ModelOutcome, Output};
use mew_core::participant::{self, GatewayInputs, Input};
use mew_core::tools::ToolsAgent;

use crate::client::link::Link;
use crate::client::socket::Runtime;
use crate::clock::{self, timeout};

/// Where the model is: an OpenAI-compatible chat-completions API.
#[derive(Clone)]
pub struct ModelEndpoint {
    /// Base URL, e.g. `https://api.openai.com/v1` or `http://localhost:11434/v1`;
    /// `/chat/completions` is appended.
    pub base_url: String,
    /// Bearer key; `None` for local servers that want none.
    pub api_key: Option<String>,
}

impl std::fmt::Debug for ModelEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret: never in logs.
        f.debug_struct("ModelEndpoint")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl ModelEndpoint {
    /// The chat-completions URL.
    pub fn url(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }
}

/// A boxed future of a model call's outcome.
pub type ModelFuture = Pin<Box<dyn Future<Output = ModelOutcome> + Send>>;

/// Where the pieces of a streamed reply go as they arrive.
pub type DataSink = Box<dyn FnMut(&str) + Send>;

/// How model calls are made.
pub trait ModelTransport: Send + Sync + 'static {
    /// POSTs `body` (JSON) to `endpoint`, giving up after `timeout`. A 200 reply that is an
    /// event stream is also handed to `on_data` piece by piece as it arrives; the outcome
    /// holds the whole body either way.
    fn post(
        &self,
        endpoint: &ModelEndpoint,
        body: Vec<u8>,
        timeout: Duration,
        on_data: DataSink,
    ) -> ModelFuture;
}

/// The default transport: `ureq` on a thread per call.
#[derive(Debug, Default, Clone, Copy)]
pub struct HttpTransport;

/// Largest reply body read, in bytes.
const MAX_REPLY: u64 = 16 * 1024 * 1024;

/// Reads an event-stream body as it comes, handing whole UTF-8 text to `on_data`.
fn read_stream(reader: &mut impl std::io::Read, on_data: &mut DataSink) -> Result<String, String> {
    let mut body = String::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 8192];
    loop {
        let n = reader
            .read(&mut buf)
            .map_err(|e| format!("reading the reply: {e}"))?;
        if n == 0 {
            break;
        }
        pending.extend_from_slice(&buf[..n]);
        // A character may straddle two reads: keep its first bytes for the next.
        let valid = match std::str::from_utf8(&pending) {
            Ok(_) => pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(e) => return Err(format!("the reply is not UTF-8: {e}")),
        };
        let text = std::str::from_utf8(&pending[..valid])
            .unwrap_or_default()
            .to_owned();
        pending.drain(..valid);
        if body.len() + text.len() > MAX_REPLY as usize {
            return Err("the reply is too long".into());
        }
        on_data(&text);
        body.push_str(&text);
    }
    Ok(body)
}

fn post_blocking(
    endpoint: &ModelEndpoint,
    body: &[u8],
    timeout: Duration,
    mut on_data: DataSink,
) -> ModelOutcome {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent
        .post(endpoint.url())
        .header("Content-Type", "application/json");
    if let Some(key) = &endpoint.api_key {
        req = req.header("Authorization", format!("Bearer {key}"));
    }
    match req.send(body) {
        Ok(mut resp) => {
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64);
            let streamed = status == 200
                && resp
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with("text/event-stream"));
            let read = if streamed {
                let mut reader = resp.body_mut().with_config().limit(MAX_REPLY).reader();
                read_stream(&mut reader, &mut on_data)
            } else {
                resp.body_mut()
                    .with_config()
                    .limit(MAX_REPLY)
                    .read_to_string()
                    .map_err(|e| format!("reading the reply: {e}"))
            };
            match read {
                Ok(body) => ModelOutcome::Http {
                    status,
                    retry_after,
                    body,
                },
                Err(e) => ModelOutcome::Transport(e),
            }
        }
        Err(e) => ModelOutcome::Transport(e.to_string()),
    }
}

impl ModelTransport for HttpTransport {
    fn post(
        &self,
        endpoint: &ModelEndpoint,
        body: Vec<u8>,
        timeout: Duration,
        on_data: DataSink,
    ) -> ModelFuture {
        let (tx, rx) = oneshot::channel();
        let endpoint = endpoint.clone();
        let spawned = std::thread::Builder::new()
            .name("mew-model-call".into())
            .spawn(move || {
                let _ = tx.send(post_blocking(&endpoint, &body, timeout, on_data));
            });
        Box::pin(async move {
            if let Err(e) = spawned {
                return ModelOutcome::Transport(format!("cannot start the call: {e}"));
            }
            rx.await
                .unwrap_or_else(|_| ModelOutcome::Transport("the call thread ended".into()))
        })
    }
}

/// Why the agent stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentExit {
    /// `participant/shutdown`, or the shutdown future resolved.
    Shutdown,
    /// The gateway could not be reached again.
    GatewayGaveUp,
}

enum Internal {
    Model(ModelCallId, ModelOutcome),
    ModelData(ModelCallId, String),
    Stdin(Vec<u8>),
    StdinClosed,
    Shutdown,
}

/// Reads the process's stdin on a thread of its own (stdin has no portable async form) and
/// hands chunks to the agent's task.
fn read_stdin(tx: async_channel::Sender<Internal>) {
    let spawned = std::thread::Builder::new()
        .name("mew-mcp-stdin".into())
        .spawn(move || {
            use std::io::Read;
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx
                            .send_blocking(Internal::Stdin(buf[..n].to_vec()))
                            .is_err()
                        {
                            return;
                        }
                    }
                }
            }
            let _ = tx.send_blocking(Internal::StdinClosed);
        });
    if let Err(e) = spawned {
        tracing::error!("cannot read stdin: {e}");
    }
}

/// The stdout writer: lines go in through `tx`; dropping it lets queued lines out (for up
/// to two seconds, so that a host that stopped reading cannot hold the exit).
struct StdoutWriter {
    tx: Option<async_channel::Sender<String>>,
    done: std::sync::mpsc::Receiver<()>,
}

impl Drop for StdoutWriter {
    fn drop(&mut self) {
        self.tx = None;
        let _ = self.done.recv_timeout(Duration::from_secs(2));
    }
}

/// Writes MCP lines to stdout on a thread of its own; the bounded queue makes a host that
/// stops reading slow the agent down rather than grow memory.
fn write_stdout() -> StdoutWriter {
    let (tx, rx) = async_channel::bounded::<String>(256);
    let (done_tx, done) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("mew-mcp-stdout".into())
        .spawn(move || {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            while let Ok(line) = rx.recv_blocking() {
                if out.write_all(line.as_bytes()).is_err() {
                    break;
                }
                // Flush when the queue is drained, so that a burst goes out in one write.
                if rx.is_empty() && out.flush().is_err() {
                    break;
                }
            }
            let _ = out.flush();
            let _ = done_tx.send(());
        });
    if let Err(e) = spawned {
        tracing::error!("cannot write stdout: {e}");
    }
    StdoutWriter { tx: Some(tx), done }
}

/// Runs an agent until it is told to stop; `on_event` sees every event (for logs and tests).
pub async fn run_agent<R: Runtime>(
    config: AgentConfig,
    endpoint: ModelEndpoint,
    transport: Arc<dyn ModelTransport>,
    seed: Option<u64>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    mut on_event: impl FnMut(&AgentEvent) + Send,
) -> AgentExit {
    let participant_config = config.participant.clone();
    let mcp = config.mcp_stdio;
    let mut agent = ToolsAgent::new(config, seed.unwrap_or_else(clock::os_seed));
    let (tx, rx) = async_channel::bounded::<Internal>(1024);
    let stdout = if mcp {
        read_stdin(tx.clone());
        Some(write_stdout())
    } else {
        None
    };
    {
        let tx = tx.clone();
        R::spawn(async move {
            shutdown.await;
            let _ = tx.send(Internal::Shutdown).await;
        });
    }
    let mut link = Link::<R>::new(&participant_config);
    let mut exit: Option<AgentExit> = None;
    let mut closing = false;
    let mut gave_up = false;
    agent.start(clock::now());
    loop {
        while let Some(out) = agent.poll_output() {
            match out {
                Output::Gateway(o) => {
                    link.carry(o, &mut agent).await;
                }
                Output::Model {
                    call,
                    request,
                    timeout: limit,
                } => {
                    let body = request.to_json().to_string().into_bytes();
                    let data_tx = tx.clone();
                    let on_data: DataSink = Box::new(move |piece: &str| {
                        let _ = data_tx.send_blocking(Internal::ModelData(call, piece.to_owned()));
                    });
                    let fut = transport.post(&endpoint, body, limit, on_data);
                    let tx = tx.clone();
                    R::spawn(async move {
                        let outcome = fut.await;
                        let _ = tx.send(Internal::Model(call, outcome)).await;
                    });
                }
                Output::Mcp(line) => {
                    if let Some(out) = stdout.as_ref().and_then(|w| w.tx.as_ref())
                        && out.send(line).await.is_err()
                    {
                        exit = exit.or(Some(AgentExit::Shutdown));
                    }
                }
                Output::Event(e) => {
                    if let AgentEvent::Participant(participant::Event::GaveUp { .. }) = &e {
                        gave_up = true;
                    }
                    if e == AgentEvent::Exit && exit.is_none() {
                        exit = Some(if gave_up {
                            AgentExit::GatewayGaveUp
                        } else {
                            AgentExit::Shutdown
                        });
                    }
                    on_event(&e);
                }
            }
        }
        if !link.flush(&mut agent).await {
            // The socket was given up: the core has outputs again.
            continue;
        }
        if let Some(e) = exit.take() {
            link.close().await;
            return e;
        }
        if closing {
            link.close().await;
            return AgentExit::Shutdown;
        }
        let wait = agent
            .poll_timeout()
            .map(clock::until)
            .unwrap_or(Duration::from_secs(3600));
        let (recv, linked) = (std::pin::pin!(rx.recv()), std::pin::pin!(link.next()));
        let next = futures_util::future::select(recv, linked);
        let msg = match timeout::<R, _>(wait, next).await {
            None => {
                agent.handle_input(clock::now(), Input::Timeout);
                continue;
            }
            Some(Either::Right((Some(ev), _))) => {
                if let Some(reason) = link.handle(ev, &mut agent) {
                    tracing::warn!("cannot connect: {reason}");
                }
                continue;
            }
            Some(Either::Right((None, _))) => continue,
            Some(Either::Left((Ok(m), _))) => m,
            Some(Either::Left((Err(_), _))) => return AgentExit::Shutdown,
        };
        let now = clock::now();
        match msg {
            Internal::Model(call, outcome) => agent.handle_model(now, call, outcome),
            Internal::ModelData(call, piece) => agent.handle_model_data(now, call, &piece),
            Internal::Stdin(bytes) => agent.handle_stdin(now, &bytes),
            Internal::StdinClosed => agent.handle_stdin_closed(now),
            Internal::Shutdown => {
                agent.close(now, "shutdown");
                closing = true;
            }
        }
    }
}
