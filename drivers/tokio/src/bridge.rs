//! The bridge runtime: the core [`Bridge`] driven by one task, with the gateway's WebSocket
//! on one side and the MCP server's process ([`McpProcess`]) on the other.
//!
//! The core decides everything (when to connect, spawn, kill, answer, exit); the task opens
//! the socket and the process it is told to, feeds back what they do, and arms the core's
//! timer. It ends when the core emits its exit, after the last frames are flushed and the
//! server's process is gone.

use std::future::Future;
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use mew_core::bridge::{Bridge, BridgeConfig, Exit, Output};
use mew_core::mcp::{self, McpEvent};
use mew_core::participant::{self, Event};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::Tokio;
use crate::clock;
use crate::mcp_process::{McpProcess, ProcessEvent, ServerCommand};
use mew_driver_common::participant::{Incoming, open_within, read_client, write_within};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long the last frames may take to leave when the bridge exits.
const FLUSH_ON_EXIT: Duration = Duration::from_secs(2);

/// What a running bridge looks like from outside (for monitoring and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BridgeSnapshot {
    /// The MCP server's process id, while one runs.
    pub server_pid: Option<u32>,
    /// Requests forwarded to the server and not yet answered.
    pub calls_in_flight: usize,
    /// Restarts of the server so far.
    pub restarts: u32,
}

/// A running bridge started with [`spawn_bridge`].
#[derive(Debug)]
pub struct BridgeHandle {
    shutdown: watch::Sender<bool>,
    snapshot: watch::Receiver<BridgeSnapshot>,
    task: tokio::task::JoinHandle<Exit>,
}

impl BridgeHandle {
    /// Asks the bridge to stop its server and exit (as on SIGTERM).
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// The MCP server's current process id.
    pub fn server_pid(&self) -> Option<u32> {
        self.snapshot.borrow().server_pid
    }

    /// The bridge's current state.
    pub fn snapshot(&self) -> BridgeSnapshot {
        *self.snapshot.borrow()
    }

    /// Waits, at most `timeout`, until the state satisfies `f`; returns it then.
    pub async fn wait_for(
        &mut self,
        timeout: Duration,
        f: impl FnMut(&BridgeSnapshot) -> bool,
    ) -> Option<BridgeSnapshot> {
        match tokio::time::timeout(timeout, self.snapshot.wait_for(f)).await {
            Ok(Ok(s)) => Some(*s),
            _ => None,
        }
    }

    /// Waits until the server runs with a process id other than `not`, at most `timeout`.
    pub async fn wait_server_pid(&mut self, not: Option<u32>, timeout: Duration) -> Option<u32> {
        self.wait_for(timeout, |s| s.server_pid.is_some() && s.server_pid != not)
            .await
            .and_then(|s| s.server_pid)
    }

    /// Waits for the bridge to finish.
    pub async fn join(self) -> Exit {
        match self.task.await {
            Ok(exit) => exit,
            Err(e) => Exit::ServerGaveUp(format!("bridge task failed: {e}")),
        }
    }
}

/// Starts a bridge on the current runtime.
pub fn spawn_bridge(
    config: BridgeConfig,
    command: ServerCommand,
    seed: Option<u64>,
) -> BridgeHandle {
    let (shutdown_tx, mut shutdown_rx) = watch::channel(false);
    let (snap_tx, snap_rx) = watch::channel(BridgeSnapshot::default());
    let task = tokio::spawn(async move {
        let stop = async move {
            let _ = shutdown_rx.wait_for(|s| *s).await;
        };
        run(config, command, seed, stop, Some(snap_tx)).await
    });
    BridgeHandle {
        shutdown: shutdown_tx,
        snapshot: snap_rx,
        task,
    }
}

/// Runs a bridge until it exits; `shutdown` resolving starts a clean stop (SIGTERM).
pub async fn run_bridge(
    config: BridgeConfig,
    command: ServerCommand,
    seed: Option<u64>,
    shutdown: impl Future<Output = ()> + Send,
) -> Exit {
    run(config, command, seed, shutdown, None).await
}

enum Net {
    Connected(u64, Box<Ws>),
    ConnectFailed(u64, String),
    Frame(u64, String),
    Pong(u64),
    Closed(u64, String),
}

struct Driver {
    bridge: Bridge,
    process: McpProcess,
    net_tx: mpsc::Sender<Net>,
    epoch: u64,
    sink: Option<SplitSink<Ws, Message>>,
    max_frame: usize,
    /// Connect and write deadlines of the gateway socket.
    connect_within: std::time::Duration,
    write_within: std::time::Duration,
    snapshot: Option<watch::Sender<BridgeSnapshot>>,
}

async fn run(
    config: BridgeConfig,
    command: ServerCommand,
    seed: Option<u64>,
    shutdown: impl Future<Output = ()> + Send,
    snapshot: Option<watch::Sender<BridgeSnapshot>>,
) -> Exit {
    let (net_tx, mut net_rx) = mpsc::channel::<Net>(1024);
    let max_frame = config.participant.limits.max_frame_bytes;
    let connect_within = config.participant.heartbeat.connect_timeout;
    let write_within = config.participant.heartbeat.write_timeout;
    let mut d = Driver {
        bridge: Bridge::new(config, seed.unwrap_or_else(clock::os_seed)),
        process: McpProcess::new(command),
        net_tx,
        epoch: 0,
        sink: None,
        max_frame,
        connect_within,
        write_within,
        snapshot,
    };
    if let Err(e) = d.bridge.start(clock::now()) {
        return Exit::ServerGaveUp(e.to_string());
    }
    tokio::pin!(shutdown);
    let mut stopping = false;
    loop {
        let exit = d.pump().await;
        d.publish();
        if let Some(exit) = exit {
            d.finish().await;
            return exit;
        }
        let wake = d.bridge.poll_timeout().map(clock::instant_for);
        tokio::select! {
            ev = d.process.next_event() => {
                let now = clock::now();
                match ev {
                    ProcessEvent::Stdout(b) => d.bridge.handle_server_stdout(now, &b),
                    ProcessEvent::Stderr(b) => d.bridge.handle_server_stderr(now, &b),
                    ProcessEvent::Exited(s) => d.bridge.handle_server_exit(now, s),
                }
            }
            Some(msg) = net_rx.recv() => d.net(msg),
            _ = &mut shutdown, if !stopping => {
                stopping = true;
                tracing::info!("stopping the MCP server");
                d.bridge.shutdown(clock::now());
            }
            _ = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => d.bridge.handle_timeout(clock::now()),
        }
    }
}

impl Driver {
    fn publish(&self) {
        if let Some(tx) = &self.snapshot {
            let now = BridgeSnapshot {
                server_pid: self.process.pid(),
                calls_in_flight: self.bridge.calls_in_flight(),
                restarts: self.bridge.restarts(),
            };
            tx.send_if_modified(|s| {
                let changed = *s != now;
                *s = now;
                changed
            });
        }
    }

    fn net(&mut self, msg: Net) {
        let now = clock::now();
        match msg {
            Net::Connected(epoch, ws) if epoch == self.epoch => {
                let (sink, stream) = (*ws).split();
                self.sink = Some(sink);
                let tx = self.net_tx.clone();
                tokio::spawn(read_client(stream, move |event| {
                    let tx = tx.clone();
                    async move {
                        let msg = match event {
                            Incoming::Frame(t) => Net::Frame(epoch, t),
                            Incoming::Pong => Net::Pong(epoch),
                            Incoming::Closed(r) => Net::Closed(epoch, r),
                        };
                        tx.send(msg).await.is_ok()
                    }
                }));
                self.bridge.handle_connected(now);
            }
            Net::ConnectFailed(epoch, reason) if epoch == self.epoch => {
                tracing::warn!("{reason}");
                self.bridge.handle_disconnected(now, &reason);
            }
            Net::Frame(epoch, text) if epoch == self.epoch => self.bridge.handle_frame(now, &text),
            Net::Pong(epoch) if epoch == self.epoch => self.bridge.handle_pong(now),
            Net::Closed(epoch, reason) if epoch == self.epoch => {
                self.sink = None;
                self.bridge.handle_disconnected(now, &reason);
            }
            _ => {}
        }
    }

    /// Carries out the core's outputs; returns the exit once it is emitted.
    async fn pump(&mut self) -> Option<Exit> {
        let mut wrote = false;
        let mut exit = None;
        while let Some(out) = self.bridge.poll_output() {
            match out {
                Output::Gateway(o) => wrote |= self.gateway(o).await,
                Output::Server(mcp::Output::Spawn) => {
                    let now = clock::now();
                    match self.process.spawn() {
                        Ok(pid) => {
                            tracing::debug!(pid, "MCP server started");
                            self.bridge.handle_server_spawned(now);
                        }
                        Err(e) => self.bridge.handle_server_spawn_failed(now, e.to_string()),
                    }
                }
                Output::Server(mcp::Output::Write(line)) => {
                    if !self.process.write(line) {
                        tracing::warn!(
                            "MCP server is not reading its input; a message was dropped"
                        );
                    }
                }
                Output::Server(mcp::Output::Kill { grace }) => self.process.kill(grace),
                Output::Server(mcp::Output::Event(_)) => {}
                Output::Participant(e) => log_participant(&e),
                Output::Mcp(e) => log_mcp(&e),
                Output::Exit(e) => exit = Some(e),
            }
        }
        if wrote
            && let Some(sink) = &mut self.sink
            && let Err(reason) = write_within::<Tokio, _>(self.write_within, sink.flush()).await
        {
            self.write_failed(reason);
        }
        exit
    }

    /// Feeds one message to the gateway socket, giving up at the write deadline; whether a
    /// frame was fed.
    async fn write(&mut self, msg: Message) -> bool {
        let Some(sink) = &mut self.sink else {
            return false;
        };
        match write_within::<Tokio, _>(self.write_within, sink.feed(msg)).await {
            Ok(()) => true,
            Err(reason) => {
                self.write_failed(reason);
                false
            }
        }
    }

    /// Abandons the socket and its reader; the core reconnects.
    fn write_failed(&mut self, reason: &str) {
        self.sink = None;
        self.epoch += 1;
        self.bridge.handle_disconnected(clock::now(), reason);
    }

    /// Returns whether a frame was fed.
    async fn gateway(&mut self, o: participant::Output) -> bool {
        match o {
            participant::Output::Connect { url, headers } => {
                self.epoch += 1;
                self.sink = None;
                let epoch = self.epoch;
                let tx = self.net_tx.clone();
                let (limit, within) = (self.max_frame, self.connect_within);
                tokio::spawn(async move {
                    let opened = open_within::<Tokio>(&url, &headers, limit, within).await;
                    let msg = match opened {
                        Ok(ws) => Net::Connected(epoch, Box::new(ws)),
                        Err(e) => Net::ConnectFailed(epoch, e),
                    };
                    let _ = tx.send(msg).await;
                });
                false
            }
            participant::Output::Transmit(text) => self.write(Message::text(text)).await,
            participant::Output::Ping => self.write(Message::Ping(Default::default())).await,
            participant::Output::Disconnect { reason } => {
                self.epoch += 1;
                if let Some(mut sink) = self.sink.take() {
                    let frame = CloseFrame {
                        code: 1000.into(),
                        reason: reason.into(),
                    };
                    let _ =
                        tokio::time::timeout(FLUSH_ON_EXIT, sink.send(Message::Close(Some(frame))))
                            .await;
                }
                false
            }
            participant::Output::Event(_) => false,
        }
    }

    /// After the exit: the socket closed and the server's process gone.
    async fn finish(&mut self) {
        if let Some(mut sink) = self.sink.take() {
            let _ = tokio::time::timeout(FLUSH_ON_EXIT, sink.close()).await;
        }
        if self.process.is_running() {
            self.process.kill(Duration::ZERO);
            let _ = tokio::time::timeout(Duration::from_secs(5), async {
                while self.process.is_running() {
                    self.process.next_event().await;
                }
            })
            .await;
        }
        self.publish();
    }
}

fn log_participant(e: &Event) {
    match e {
        Event::Ready { id, reconnected } => {
            tracing::info!(id = %id, reconnected, "joined the space")
        }
        Event::Disconnected { reason } => tracing::warn!("gateway connection lost: {reason}"),
        Event::Reconnecting { attempt, .. } => tracing::info!(attempt, "reconnecting"),
        Event::GaveUp { attempts } => tracing::error!(attempts, "gave up reconnecting"),
        Event::Control { control, from, .. } => tracing::info!(?control, %from, "control"),
        other => tracing::trace!(?other, "participant event"),
    }
}

fn log_mcp(e: &McpEvent) {
    match e {
        McpEvent::Ready(d) => tracing::info!(
            server = %d.server_info,
            protocol = d.protocol_version.as_str(),
            "MCP server ready"
        ),
        McpEvent::Stderr(line) => tracing::debug!(target: "mcp_server", "{line}"),
        McpEvent::StdoutIssue(i) => tracing::warn!("MCP server stdout: {i}"),
        McpEvent::Failed(err) => tracing::warn!("MCP server failed: {err}"),
        McpEvent::Restarting { attempt, delay } => {
            tracing::warn!(
                attempt,
                delay_ms = delay.as_millis() as u64,
                "restarting the MCP server"
            )
        }
        McpEvent::GaveUp { reason } => tracing::error!("MCP server gave up: {reason}"),
        McpEvent::ListFailed { kind, error } => {
            tracing::warn!("MCP {} failed: {error}", kind.method())
        }
        McpEvent::Stopped(s) => tracing::info!("MCP server stopped ({s})"),
        other => tracing::trace!(?other, "MCP event"),
    }
}
