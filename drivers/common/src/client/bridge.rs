//! The MCP bridge runtime, written once for every async runtime: one task drives the bridge
//! core ([`mew_core::bridge::Bridge`]), which decides everything (when to connect, spawn,
//! kill, answer, exit); the task carries out its gateway outputs through the client
//! [`Link`], its server outputs through an [`McpProcess`] (stdio) or an [`McpHttp`]
//! (Streamable HTTP), feeds back what they do, and
//! arms the core's timer. It ends when the core emits its exit, after the last frames are
//! flushed and the server's process is gone.
//!
//! A driver supplies a [`ProcessRuntime`] (sockets, tasks, timers, child processes).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_channel::oneshot;
use futures_util::FutureExt;
use mew_core::bridge::{AuthEvent, Bridge, BridgeConfig, Exit, Output};
use mew_core::mcp::oauth::{FetchId, FetchResponse, OAuth};
use mew_core::mcp::{self, McpEvent};
use mew_core::participant::{Event, GatewayInputs, Input};

use crate::client::link::{Link, LinkEvent};
use crate::client::mcp_http::{HttpEndpoint, HttpEvent, HttpLimits, McpHttp};
use crate::client::oauth::{self as oauth_io, Fetcher};
use crate::client::process::{McpProcess, ProcessEvent, ProcessRuntime, ServerCommand};
use crate::clock;

/// The log message (at `info`) saying the MCP server completed initialize and its lists:
/// `mew space up` counts a bridge as started once its log says this, and `mew space status`
/// reads the revision and transport (`protocol=`, `transport=`) from its last such line.
pub const SERVER_READY_LOG: &str = "MCP server ready";

/// How long the server's process may take to go once the bridge has exited.
const REAP_WITHIN: Duration = Duration::from_secs(5);

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

/// Where the MCP server is: a command to run (stdio) or an endpoint (Streamable HTTP; the
/// bridge's `McpConfig` should then say [`mcp::Transport::Http`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerTarget {
    /// A child process.
    Command(ServerCommand),
    /// A Streamable HTTP endpoint, with the driver's bounds.
    Http(HttpEndpoint, HttpLimits),
}

impl From<ServerCommand> for ServerTarget {
    fn from(c: ServerCommand) -> Self {
        ServerTarget::Command(c)
    }
}

impl From<HttpEndpoint> for ServerTarget {
    fn from(e: HttpEndpoint) -> Self {
        ServerTarget::Http(e, HttpLimits::default())
    }
}

type Sleeper = fn(Duration) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// The state a running bridge publishes, and a wake-up for whoever waits on it.
struct Published {
    state: Mutex<BridgeSnapshot>,
    changed_tx: async_channel::Sender<()>,
}

/// A running bridge started with [`spawn_bridge`] (the same type on every runtime).
pub struct BridgeHandle {
    shutdown: async_channel::Sender<()>,
    published: Arc<Published>,
    changed: async_channel::Receiver<()>,
    done: oneshot::Receiver<Exit>,
    sleep: Sleeper,
}

impl std::fmt::Debug for BridgeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeHandle")
            .field("snapshot", &self.snapshot())
            .finish()
    }
}

impl BridgeHandle {
    /// Asks the bridge to stop its server and exit (as on SIGTERM).
    pub fn shutdown(&self) {
        let _ = self.shutdown.try_send(());
    }

    /// The MCP server's current process id.
    pub fn server_pid(&self) -> Option<u32> {
        self.snapshot().server_pid
    }

    /// The bridge's current state.
    pub fn snapshot(&self) -> BridgeSnapshot {
        self.published.state.lock().map(|s| *s).unwrap_or_default()
    }

    /// Waits, at most `timeout`, until the state satisfies `f`; returns it then.
    pub async fn wait_for(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&BridgeSnapshot) -> bool,
    ) -> Option<BridgeSnapshot> {
        let deadline = Instant::now() + timeout;
        loop {
            let now = self.snapshot();
            if f(&now) {
                return Some(now);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let changed = self.changed.recv();
            let timer = (self.sleep)(left);
            futures_util::select_biased! {
                _ = changed.fuse() => {}
                _ = timer.fuse() => {}
            }
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
        match self.done.await {
            Ok(exit) => exit,
            Err(_) => Exit::ServerGaveUp("the bridge task ended without an exit".into()),
        }
    }
}

/// Starts a bridge in the background on runtime `R`.
pub fn spawn_bridge<R: ProcessRuntime>(
    config: BridgeConfig,
    command: impl Into<ServerTarget>,
    seed: Option<u64>,
) -> BridgeHandle {
    let command = command.into();
    let (shutdown_tx, shutdown_rx) = async_channel::bounded::<()>(1);
    let (changed_tx, changed) = async_channel::bounded(1);
    let published = Arc::new(Published {
        state: Mutex::new(BridgeSnapshot::default()),
        changed_tx,
    });
    let (done_tx, done) = oneshot::channel();
    let publish = published.clone();
    R::spawn(async move {
        // A dropped handle stops the bridge too.
        let stop = async move {
            let _ = shutdown_rx.recv().await;
        };
        let exit = run::<R>(config, command, seed, stop, Some(publish)).await;
        let _ = done_tx.send(exit);
    });
    BridgeHandle {
        shutdown: shutdown_tx,
        published,
        changed,
        done,
        sleep: |d| Box::pin(R::sleep(d)),
    }
}

/// Runs a bridge until it exits; `shutdown` resolving starts a clean stop (SIGTERM).
pub async fn run_bridge<R: ProcessRuntime>(
    config: BridgeConfig,
    command: impl Into<ServerTarget>,
    seed: Option<u64>,
    shutdown: impl Future<Output = ()> + Send,
) -> Exit {
    run::<R>(config, command.into(), seed, shutdown, None).await
}

struct Driver<R: ProcessRuntime> {
    bridge: Bridge,
    /// The OAuth flow's fetches, and where its tokens are kept.
    fetcher: Option<(Fetcher, std::path::PathBuf)>,
    process: McpProcess<R>,
    /// The HTTP endpoint's driver, for a server over Streamable HTTP.
    http: Option<McpHttp>,
    link: Link<R>,
    published: Option<Arc<Published>>,
}

enum Step<W> {
    Process(ProcessEvent),
    Fetched(FetchId, Result<FetchResponse, String>),
    Http(HttpEvent),
    Link(LinkEvent<W>),
    Shutdown,
    Timeout,
}

async fn run<R: ProcessRuntime>(
    config: BridgeConfig,
    target: ServerTarget,
    seed: Option<u64>,
    shutdown: impl Future<Output = ()> + Send,
    published: Option<Arc<Published>>,
) -> Exit {
    let link = Link::new(&config.participant);
    let mut oauth = None;
    let (command, http) = match target {
        ServerTarget::Command(c) => (c, None),
        ServerTarget::Http(mut endpoint, limits) => {
            if let Err(e) = endpoint.check() {
                return Exit::ServerNeverReady(e);
            }
            oauth = endpoint.oauth.take();
            (
                ServerCommand::default(),
                Some(McpHttp::new(endpoint, limits)),
            )
        }
    };
    let mut bridge = Bridge::new(config, seed.unwrap_or_else(clock::os_seed));
    let fetcher = oauth.map(|setup| {
        let setup = *setup;
        let kept = oauth_io::load(&setup.store);
        if kept.is_some() {
            tracing::info!("using the sign-in kept in {}", setup.store.display());
        }
        // `state` and the PKCE verifier come from the OS CSPRNG.
        bridge.enable_oauth(OAuth::new(
            setup.config,
            kept,
            Box::new(crate::secret::OsTokens),
        ));
        (Fetcher::new(), setup.store)
    });
    let mut d = Driver::<R> {
        fetcher,
        bridge,
        process: McpProcess::new(command),
        http,
        link,
        published,
    };
    if let Err(e) = d.bridge.start(clock::now()) {
        return Exit::ServerGaveUp(e.to_string());
    }
    let mut shutdown = std::pin::pin!(shutdown.fuse());
    let mut stopping = false;
    loop {
        let exit = d.pump().await;
        d.publish();
        if let Some(exit) = exit {
            d.finish().await;
            return exit;
        }
        let wake = d.bridge.poll_timeout();
        let step = {
            let timer = async {
                match wake {
                    Some(at) => R::sleep(clock::until(at)).await,
                    None => std::future::pending().await,
                }
            };
            let stop = async {
                if stopping {
                    std::future::pending().await
                } else {
                    shutdown.as_mut().await
                }
            };
            let http = async {
                match d.http.as_mut() {
                    Some(h) => h.next_event::<R>().await,
                    None => std::future::pending().await,
                }
            };
            let fetched = async {
                match d.fetcher.as_ref() {
                    Some((f, _)) => f.next().await,
                    None => std::future::pending().await,
                }
            };
            futures_util::select_biased! {
                ev = d.process.next_event().fuse() => Step::Process(ev),
                (id, r) = fetched.fuse() => Step::Fetched(id, r),
                ev = http.fuse() => Step::Http(ev),
                ev = d.link.next().fuse() => match ev {
                    Some(ev) => Step::Link(ev),
                    None => Step::Timeout,
                },
                _ = stop.fuse() => Step::Shutdown,
                _ = timer.fuse() => Step::Timeout,
            }
        };
        let now = clock::now();
        match step {
            Step::Process(ProcessEvent::Stdout(b)) => d.bridge.handle_server_stdout(now, &b),
            Step::Process(ProcessEvent::Stderr(b)) => d.bridge.handle_server_stderr(now, &b),
            Step::Process(ProcessEvent::Exited(s)) => d.bridge.handle_server_exited(now, s),
            Step::Fetched(id, r) => d.bridge.handle_oauth_fetch(now, id, r),
            Step::Http(HttpEvent::Head(x, head)) => {
                d.bridge.handle_server_http_response(now, x, head)
            }
            Step::Http(HttpEvent::Body(x, b)) => d.bridge.handle_server_http_body(now, x, &b),
            Step::Http(HttpEvent::End(x)) => d.bridge.handle_server_http_end(now, x),
            Step::Http(HttpEvent::Failed(x, why)) => {
                d.bridge.handle_server_http_failed(now, x, &why)
            }
            Step::Link(ev) => {
                if let Some(reason) = d.link.handle(ev, &mut d.bridge) {
                    tracing::warn!("{reason}");
                }
            }
            Step::Shutdown => {
                stopping = true;
                tracing::info!("stopping the MCP server");
                d.bridge.close(now);
            }
            Step::Timeout => d.bridge.handle_input(now, Input::Timeout),
        }
    }
}

impl<R: ProcessRuntime> Driver<R> {
    fn publish(&self) {
        let Some(p) = &self.published else { return };
        let now = BridgeSnapshot {
            server_pid: self.process.pid(),
            calls_in_flight: self.bridge.calls_in_flight(),
            restarts: self.bridge.restarts(),
        };
        let changed = match p.state.lock() {
            Ok(mut s) => {
                let changed = *s != now;
                *s = now;
                changed
            }
            Err(_) => false,
        };
        if changed {
            // One pending wake-up is enough: the waiter reads the latest state.
            let _ = p.changed_tx.try_send(());
        }
    }

    /// Carries out the core's outputs; returns the exit once it is emitted.
    async fn pump(&mut self) -> Option<Exit> {
        let mut exit = None;
        loop {
            while let Some(out) = self.bridge.poll_output() {
                match out {
                    Output::Gateway(o) => {
                        self.link.carry(o, &mut self.bridge).await;
                    }
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
                    Output::Server(mcp::Output::Http(req)) => match self.http.as_mut() {
                        Some(h) => h.start(req),
                        None => self.bridge.handle_server_http_failed(
                            clock::now(),
                            req.exchange,
                            "this bridge runs its server over stdio",
                        ),
                    },
                    Output::Server(mcp::Output::HttpAbort(x)) => {
                        if let Some(h) = self.http.as_mut() {
                            h.abort(x);
                        }
                    }
                    Output::Participant(e) => log_participant(&e),
                    Output::Mcp(e) => log_mcp(&e, self.http.is_some()),
                    Output::OAuthFetch(f) => match self.fetcher.as_ref() {
                        Some((fetcher, _)) => fetcher.start(f),
                        None => self.bridge.handle_oauth_fetch(
                            clock::now(),
                            f.id,
                            Err("OAuth is not enabled".into()),
                        ),
                    },
                    Output::OAuthSave(s) => {
                        if let Some((_, path)) = self.fetcher.as_ref()
                            && let Err(e) = oauth_io::save(path, &s)
                        {
                            tracing::warn!("cannot keep the sign-in in {}: {e}", path.display());
                        }
                    }
                    Output::Auth(e) => log_auth(&e),
                    Output::Exit(e) => exit = Some(e),
                }
            }
            // A failed flush gave the socket up: the core has outputs again.
            if self.link.flush(&mut self.bridge).await {
                return exit;
            }
        }
    }

    /// After the exit: the socket closed and the server's process gone.
    async fn finish(&mut self) {
        self.link.close().await;
        if let Some(h) = self.http.as_mut() {
            h.abort_all();
        }
        if self.process.is_running() {
            self.process.kill(Duration::ZERO);
            let process = &mut self.process;
            let _ = clock::timeout::<R, _>(REAP_WITHIN, async {
                while process.is_running() {
                    process.next_event().await;
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

fn log_auth(e: &AuthEvent) {
    match e {
        AuthEvent::SignInNeeded { resource, url } => {
            tracing::warn!("sign-in needed for {resource}: open {url}")
        }
        AuthEvent::Authorized => tracing::info!("signed in to the MCP server"),
        AuthEvent::Failed(why) => tracing::warn!("MCP server sign-in failed: {why}"),
    }
}

fn log_mcp(e: &McpEvent, http: bool) {
    match e {
        McpEvent::Ready(d) => tracing::info!(
            server = %d.server_info,
            protocol = d.protocol_version.as_str(),
            transport = if http { "http" } else { "stdio" },
            "{SERVER_READY_LOG}"
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
