//! The gateway server, written once for every async runtime: one port for the WebSocket
//! endpoint and the HTTP API, one task that owns the space's [`Gateway`] core (through the
//! [`GatewayHost`]), a reader and a writer per WebSocket connection.
//!
//! A driver supplies a [`ServerRuntime`]: how to bind, accept, read and write a socket,
//! upgrade it to a WebSocket, spawn tasks and sleep.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_channel::oneshot;
use futures_util::future::{Either, select};
use futures_util::{Sink, Stream};
use mew_core::Limits;
use mew_core::gateway::{Gateway, SpaceConfig, check_space};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Error as WsError, Message};

use crate::Response;
use crate::clock::{self, Sleep};
use crate::server::conn::{self, CoreInput, CoreTask};
use crate::server::host::{GatewayHost, HttpRequest, Input, report_every};
use crate::server::http::{self, HeadError, RequestHead};
use crate::server::route::{Route, route};
use crate::server::ws;
use crate::state::logs::{LogWriter, Rotation};
use crate::websocket::ws_config;

/// What a gateway server needs from an async runtime.
pub trait ServerRuntime: Sleep + Send + Sync + Sized {
    /// A listening socket.
    type Listener: Send + Sync + 'static;
    /// An accepted connection.
    type Sock: Send + 'static;
    /// A server-side WebSocket over [`ServerRuntime::Raw`].
    type Ws: Stream<Item = Result<Message, WsError>>
        + Sink<Message, Error = WsError>
        + Send
        + Unpin
        + 'static;
    /// The socket under [`ServerRuntime::Ws`]: reads from [`ServerRuntime::Sock`], and keeps
    /// what the WebSocket layer writes in a [`crate::server::frames::ControlFrames`] for the connection's
    /// writer, which writes its frames straight to the socket (see [`crate::server::frames`]).
    type Raw: crate::server::frames::RawSocket + 'static;

    /// Runs `fut` in the background.
    fn spawn(fut: impl Future<Output = ()> + Send + 'static);
    /// Runs `f` where blocking is allowed; resolves with its result.
    fn spawn_blocking<T: Send + 'static>(
        f: impl FnOnce() -> T + Send + 'static,
    ) -> impl Future<Output = T> + Send;
    /// Binds a listener.
    fn bind(addr: SocketAddr) -> impl Future<Output = io::Result<Self::Listener>> + Send;
    /// The listener's address.
    fn local_addr(l: &Self::Listener) -> io::Result<SocketAddr>;
    /// Accepts one connection (with `TCP_NODELAY` set).
    fn accept(
        l: &Self::Listener,
    ) -> impl Future<Output = io::Result<(Self::Sock, SocketAddr)>> + Send;
    /// Reads some bytes; 0 at the end of the stream.
    fn read<'a>(
        s: &'a mut Self::Sock,
        buf: &'a mut [u8],
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a;
    /// Writes all of `buf`.
    fn write_all<'a>(
        s: &'a mut Self::Sock,
        buf: &'a [u8],
    ) -> impl Future<Output = io::Result<()>> + Send + 'a;
    /// Flushes and shuts down the write side.
    fn shutdown(s: &mut Self::Sock) -> impl Future<Output = io::Result<()>> + Send + '_;
    /// Copies the first bytes waiting on a freshly accepted socket without consuming them;
    /// 0 at the end of the stream.
    fn peek<'a>(
        s: &'a mut Self::Sock,
        buf: &'a mut [u8],
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a;
    /// Runs the server side of a TLS handshake on an accepted socket; the socket returned
    /// carries the plain text (`read`, `write_all` and `websocket` work on it as on any).
    fn tls_accept(
        config: Arc<rustls::ServerConfig>,
        s: Self::Sock,
    ) -> impl Future<Output = io::Result<Self::Sock>> + Send;
    /// The socket under a WebSocket made by [`ServerRuntime::websocket`].
    fn raw(ws: &mut Self::Ws) -> &mut Self::Raw;
    /// Wraps a socket whose handshake is done; `leftover` are bytes already read past the
    /// request head.
    fn websocket(
        s: Self::Sock,
        leftover: Vec<u8>,
        config: WebSocketConfig,
    ) -> impl Future<Output = Self::Ws> + Send;
}

/// Transport settings that are not protocol rules.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Folder of the audit logs (`envelope-history.jsonl`, `capability-decisions.jsonl`);
    /// see [`crate::state::files::SpaceLayout`] for where a `space.yaml` puts them.
    pub log_dir: PathBuf,
    /// Seed for the core's ids and tokens; `None` draws one from the OS.
    pub seed: Option<u64>,
    /// How long a client may take from its connection to a whole request: the TLS
    /// handshake, the request head and a request's body share this one deadline (a slow
    /// client holds its slot, and an unidentified one its `max_unauthenticated` place, no
    /// longer than this in all).
    pub head_timeout: Duration,
    /// How long shutdown waits for clients to acknowledge their close frames.
    pub shutdown_grace: Duration,
    /// Open connections at most (WebSocket and HTTP together); more are answered 503.
    pub max_connections: usize,
    /// Open connections from one remote address at most.
    pub max_connections_per_address: usize,
    /// Connections that have not yet sent a complete request head, at most: the rest of a
    /// slow or silent crowd is answered 503 at once.
    pub max_unauthenticated: usize,
    /// Batches of audit lines (and virtual participants' lines) that may wait for the log
    /// writer; past it they are dropped and counted (`audit_dropped`), never waited for.
    pub log_queue: usize,
    /// Serve TLS (`https://`, `wss://`) with this certificate; `None` serves plain text.
    pub tls: Option<Arc<crate::server::tls::ServerTls>>,
    /// Peers whose `X-Forwarded-For` / `Forwarded` header names the client (counted per
    /// address and logged as that client); everyone else is the address it connects from.
    pub trusted_proxies: crate::server::proxy::TrustedProxies,
    /// Checks bearer tokens the space does not list (JWTs; see [`crate::server::jwt`]).
    pub identity: Option<Arc<dyn mew_core::gateway::IdentityVerifier>>,
    /// The web page's files, served under `/ui/` ([`crate::server::ui`]); `None`: no page (`/ui/`
    /// answers 404).
    pub ui: Option<&'static [crate::server::ui::Asset]>,
    /// Bounds of the page's sessions (`/ui/session`, served only with a page).
    pub ui_session: crate::server::ui_session::SessionLimits,
}

impl ServerOptions {
    /// Takes the connection limits and trusted proxies of a space's `gateway:` section.
    pub fn with_gateway_options(
        mut self,
        g: &mew_core::gateway::GatewayOptions,
    ) -> Result<Self, String> {
        self.max_connections = g.connections.max_connections;
        self.max_connections_per_address = g.connections.max_connections_per_address;
        self.max_unauthenticated = g.connections.max_unauthenticated;
        self.trusted_proxies = crate::server::proxy::TrustedProxies::parse(&g.trusted_proxies)?;
        Ok(self)
    }
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            log_dir: PathBuf::from(".mew/logs"),
            seed: None,
            head_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(2),
            max_connections: 10_000,
            max_connections_per_address: 1_000,
            max_unauthenticated: 1_024,
            log_queue: crate::state::logs::LOG_QUEUE,
            tls: None,
            trusted_proxies: crate::server::proxy::TrustedProxies::default(),
            identity: None,
            ui: None,
            ui_session: crate::server::ui_session::SessionLimits::default(),
        }
    }
}

/// A bound, not yet serving gateway.
pub struct GatewayServer<R: ServerRuntime> {
    listener: R::Listener,
    config: SpaceConfig,
    options: ServerOptions,
    shutdown: async_channel::Sender<()>,
    shutdown_rx: async_channel::Receiver<()>,
    core_tx: async_channel::Sender<CoreInput>,
    core_rx: async_channel::Receiver<CoreInput>,
}

/// Hands a running [`GatewayServer`] a re-read configuration. Clonable.
#[derive(Clone)]
pub struct ReloadHandle(async_channel::Sender<CoreInput>);

impl ReloadHandle {
    /// Applies `config` (tokens resolved) to the running space; the changes are logged.
    /// `false` when the server has stopped.
    pub async fn reconfigure(&self, config: SpaceConfig) -> bool {
        self.0
            .send(Input::Reconfigure(Box::new(config)))
            .await
            .is_ok()
    }

    /// Answers an HTTP API request inside the process, as the port would (the supervisor of
    /// a space asks who is online this way, whether or not the port speaks TLS); `None`
    /// when the server has stopped.
    pub async fn http(&self, route: Route, bearer: Option<String>) -> Option<Response> {
        let (tx, rx) = oneshot::channel();
        let req = HttpRequest {
            route,
            bearer,
            body: Bytes::new(),
        };
        self.0.send(Input::Http(req, tx)).await.ok()?;
        rx.await.ok()
    }
}

/// Asks a running [`GatewayServer`] to shut down gracefully. Clonable.
#[derive(Clone)]
pub struct ShutdownHandle(async_channel::Sender<()>);

impl ShutdownHandle {
    /// Starts the graceful shutdown: no new connections, a close frame (1001) to every
    /// client, logs flushed; `serve` returns when done.
    pub fn shutdown(&self) {
        // Nothing is sent: closing the channel wakes the accept loop, however often asked.
        self.0.close();
    }
}

struct Shared {
    core: async_channel::Sender<CoreInput>,
    /// The id of the space this server serves (upgrades naming another get 404).
    space: String,
    limits: Limits,
    head_timeout: Duration,
    report_every: (usize, usize),
    slots: Slots,
    tls: Option<Arc<rustls::ServerConfig>>,
    proxies: crate::server::proxy::TrustedProxies,
    ui: Option<&'static [crate::server::ui::Asset]>,
    sessions: crate::server::ui_session::Sessions,
    /// `/mcp`.
    mcp: Arc<crate::server::mcp_front::McpFront>,
    /// The issuer of the JWTs the space takes, for `/mcp`'s metadata.
    issuer: Option<String>,
}

/// Counts of open connections, in total, per remote address and before their head.
struct Slots {
    max_total: usize,
    max_per_address: usize,
    max_unauthenticated: usize,
    counts: std::sync::Mutex<SlotCounts>,
}

#[derive(Default)]
struct SlotCounts {
    total: usize,
    unauthenticated: usize,
    /// Only addresses with open connections: bounded by `max_total`.
    per_address: std::collections::HashMap<std::net::IpAddr, usize>,
}

/// A connection's place in the counts, given back when dropped.
struct Slot<'a> {
    slots: &'a Slots,
    /// The address it is counted under; `None` until a trusted proxy's request head says.
    addr: Option<std::net::IpAddr>,
    unauthenticated: bool,
}

impl Slots {
    /// A slot for a new connection, counted under `addr` (`None`: from a trusted proxy,
    /// counted once its head names the client), or why there is none.
    fn take(&self, addr: Option<std::net::IpAddr>) -> Result<Slot<'_>, &'static str> {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if c.total >= self.max_total {
            return Err("too many connections");
        }
        if c.unauthenticated >= self.max_unauthenticated {
            return Err("too many connections waiting to be identified");
        }
        if let Some(addr) = addr {
            Self::count(&mut c, self.max_per_address, addr)?;
        }
        c.total += 1;
        c.unauthenticated += 1;
        Ok(Slot {
            slots: self,
            addr,
            unauthenticated: true,
        })
    }

    fn count(c: &mut SlotCounts, max: usize, addr: std::net::IpAddr) -> Result<(), &'static str> {
        let n = c.per_address.get(&addr).copied().unwrap_or(0);
        if n >= max {
            return Err("too many connections from this address");
        }
        c.per_address.insert(addr, n + 1);
        Ok(())
    }
}

impl Slot<'_> {
    /// Counts a proxied connection under the client its proxy named.
    fn attribute(&mut self, addr: std::net::IpAddr) -> Result<(), &'static str> {
        if self.addr.is_some() {
            return Ok(());
        }
        let mut c = self.slots.counts.lock().unwrap_or_else(|e| e.into_inner());
        Slots::count(&mut c, self.slots.max_per_address, addr)?;
        self.addr = Some(addr);
        Ok(())
    }

    /// The request head arrived: the connection no longer counts as unidentified.
    fn identified(&mut self) {
        if std::mem::take(&mut self.unauthenticated) {
            let mut c = self.slots.counts.lock().unwrap_or_else(|e| e.into_inner());
            c.unauthenticated -= 1;
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut c = self.slots.counts.lock().unwrap_or_else(|e| e.into_inner());
        c.total -= 1;
        if self.unauthenticated {
            c.unauthenticated -= 1;
        }
        if let Some(addr) = self.addr
            && let Some(n) = c.per_address.get_mut(&addr)
        {
            *n -= 1;
            if *n == 0 {
                c.per_address.remove(&addr);
            }
        }
    }
}

impl<R: ServerRuntime> GatewayServer<R> {
    /// Binds `addr` for a space with default [`ServerOptions`].
    pub async fn bind(addr: SocketAddr, config: SpaceConfig) -> io::Result<Self> {
        Self::bind_with(addr, config, ServerOptions::default()).await
    }

    /// Binds `addr` for a space.
    pub async fn bind_with(
        addr: SocketAddr,
        config: SpaceConfig,
        options: ServerOptions,
    ) -> io::Result<Self> {
        let listener = R::bind(addr).await?;
        let (shutdown, shutdown_rx) = async_channel::bounded(1);
        // Bounded: readers wait (back-pressure on their sockets) when the core is busy.
        let (core_tx, core_rx) = async_channel::bounded::<CoreInput>(4096);
        Ok(GatewayServer {
            listener,
            config,
            options,
            shutdown,
            shutdown_rx,
            core_tx,
            core_rx,
        })
    }

    /// The bound address (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        R::local_addr(&self.listener).expect("a bound listener has an address")
    }

    /// A handle that applies re-read configurations to the served space.
    pub fn reload_handle(&self) -> ReloadHandle {
        ReloadHandle(self.core_tx.clone())
    }

    /// A handle that stops [`GatewayServer::serve`].
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.shutdown.clone())
    }

    /// Serves until shut down; returns after every connection got its close frame (or the
    /// grace period ran out) and the logs are flushed. The error, if any, is a log write
    /// failure or a failure of the core task.
    pub async fn serve(self) -> io::Result<()> {
        self.serve_with(None).await
    }

    /// [`GatewayServer::serve`] for a space restored from its state folder
    /// ([`crate::state::durable::open`]): the core keeps the space on disk as it serves it.
    pub async fn serve_durable(self, restored: crate::state::durable::Restored) -> io::Result<()> {
        self.serve_with(Some(crate::state::durable::core_task::<R>(restored)))
            .await
    }

    /// [`GatewayServer::serve`] with another task owning the core (see [`CoreTask`]).
    pub async fn serve_with(self, core: Option<CoreTask>) -> io::Result<()> {
        let GatewayServer {
            listener,
            config,
            options,
            // Held so the channel stays open while no handle exists.
            shutdown: _keep_open,
            shutdown_rx,
            core_tx: tx,
            core_rx: rx,
        } = self;
        let seed = options.seed.unwrap_or_else(clock::os_seed);
        let limits = config.gateway.limits;
        let space = config.id.clone();
        let report_every = report_every(&config);
        let mcp_options = config.gateway.mcp.clone();
        let loopback_token = mcp_options.loopback_as.as_ref().and_then(|id| {
            let entry = config.participants.iter().find(|p| &p.id == id);
            if entry.is_none_or(|e| e.tokens.is_empty()) {
                tracing::warn!(participant = %id, "gateway.mcp.loopback_as names no participant with a token: hosts on this machine need one");
            }
            entry.and_then(|e| e.tokens.first().cloned())
        });
        let issuer = config.gateway.jwt.as_ref().map(|j| j.issuer.clone());
        let logs = LogWriter::with_capacity(
            Rotation {
                max_bytes: config.logging.max_file_bytes,
                keep: config.logging.keep_files,
            },
            options.log_queue.max(1),
        )?;
        // Invite tokens from the OS, never from the seeded generator of ids.
        let mut gateway = Gateway::new(
            config,
            seed,
            Box::new(crate::secret::OsTokens),
            options.identity.clone(),
        );
        if let Ok(addr) = R::local_addr(&listener) {
            gateway.set_connection_url(format!("ws://{addr}/"));
        }
        if core.is_none() {
            // A replicated space's nodes share the participants' logs: they do not each
            // write a welcome into them.
            gateway.handle_input(clock::now(), mew_core::gateway::Input::WelcomeHeld);
        }
        let mut host = GatewayHost::new(
            gateway,
            logs.handle(),
            options.log_dir.clone(),
            options.shutdown_grace,
        );
        // The welcomes of the participants the gateway holds, written before any input.
        host.drain();
        let (core_done_tx, core_done) = oneshot::channel::<()>();
        R::spawn(async move {
            match core {
                Some(task) => task(host, rx).await,
                None => conn::run_core::<R>(host, rx).await,
            }
            let _ = core_done_tx.send(());
        });
        let shared = Arc::new(Shared {
            core: tx.clone(),
            space,
            limits,
            head_timeout: options.head_timeout,
            report_every,
            slots: Slots {
                max_total: options.max_connections,
                max_per_address: options.max_connections_per_address,
                max_unauthenticated: options.max_unauthenticated,
                counts: std::sync::Mutex::new(SlotCounts::default()),
            },
            tls: options.tls.as_ref().map(|t| t.config()),
            proxies: options.trusted_proxies.clone(),
            ui: options.ui,
            sessions: crate::server::ui_session::Sessions::new(options.ui_session.clone()),
            mcp: Arc::new(crate::server::mcp_front::McpFront::new(
                mcp_options,
                loopback_token,
            )),
            issuer,
        });
        let mut core_done = core_done;
        // Set when the core task ended by itself (a durable space's disk failed, a panic):
        // the server stops then, rather than accept connections nothing would serve.
        let mut ended_alone = None;
        loop {
            let stop = std::pin::pin!(shutdown_rx.recv());
            let stop_or_core = select(stop, &mut core_done);
            match select(std::pin::pin!(R::accept(&listener)), stop_or_core).await {
                Either::Left((Ok((sock, peer)), _)) => {
                    // Everything logged about this connection carries its peer.
                    let span = tracing::debug_span!("connection", %peer);
                    R::spawn(tracing::Instrument::instrument(
                        handle::<R>(shared.clone(), sock, peer),
                        span,
                    ));
                }
                Either::Left((Err(e), _)) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    R::sleep(Duration::from_millis(50)).await;
                }
                Either::Right((Either::Left(_), _)) => break,
                Either::Right((Either::Right((done, _)), _)) => {
                    tracing::error!("the space's core stopped; the gateway stops");
                    ended_alone = Some(done);
                    break;
                }
            }
        }
        drop(listener);
        let _ = tx.send(Input::Shutdown).await;
        drop(tx);
        drop(shared);
        // A panic in the core is a broken invariant: still flush what was logged, then report.
        let alone = ended_alone.is_some();
        let core_result = match ended_alone {
            Some(done) => done,
            None => core_done.await,
        };
        tracing::debug!("every connection closed; flushing logs");
        let r = R::spawn_blocking(move || logs.finish())
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("log write failed: {e}")));
        crate::server::hops::flush();
        tracing::debug!("logs flushed");
        match core_result {
            Err(_) => Err(io::Error::other("the space's core failed (a panic)")),
            Ok(()) if alone => Err(io::Error::other(
                "the space's core stopped (its reason is logged above)",
            )),
            Ok(()) => r,
        }
    }
}

async fn handle<R: ServerRuntime>(shared: Arc<Shared>, mut sock: R::Sock, peer: SocketAddr) {
    let shared2 = shared.clone();
    let proxied = shared.proxies.trusts(peer.ip());
    let slot = shared2.slots.take((!proxied).then_some(peer.ip()));
    let mut slot = match slot {
        Ok(s) => s,
        Err(why) => {
            tracing::debug!(%peer, "refused: {why}");
            // On a TLS port the refusal cannot be read in plain text: just close.
            if shared.tls.is_none() {
                let r = Response::error(503, "unavailable", why);
                let _ = R::write_all(&mut sock, &r.to_bytes()).await;
            }
            let _ = R::shutdown(&mut sock).await;
            return;
        }
    };
    // One deadline from here: the handshake, the head and a body each take from it.
    let deadline = Deadline::after(shared.head_timeout);
    if let Some(config) = &shared.tls {
        let handshake = tls_handshake::<R>(config.clone(), sock);
        match clock::timeout::<R, _>(deadline.left(), handshake).await {
            Some(Some(s)) => sock = s,
            _ => return,
        }
    }
    let head = clock::timeout::<R, _>(deadline.left(), read_head::<R>(&mut sock, Vec::new())).await;
    if let Some(Ok(Some((h, _)))) = &head {
        if proxied {
            let client = shared.proxies.client_address(peer.ip(), h);
            tracing::debug!(%peer, %client, "forwarded by a trusted proxy");
            if let Err(why) = slot.attribute(client) {
                tracing::debug!(%peer, %client, "refused: {why}");
                let r = Response::error(503, "unavailable", why);
                let _ = R::write_all(&mut sock, &r.to_bytes()).await;
                let _ = R::shutdown(&mut sock).await;
                return;
            }
        }
        slot.identified();
    }
    let (mut head, mut leftover) = match head {
        Some(Ok(Some(h))) => h,
        Some(Ok(None)) => return,
        Some(Err(e)) => {
            tracing::debug!(%peer, "bad request head: {e}");
            let r = Response::error(e.status(), "bad_request", &e.to_string());
            let _ = R::write_all(&mut sock, &r.to_bytes()).await;
            return;
        }
        None => {
            let r = Response::error(408, "timeout", "request head not received in time");
            let _ = R::write_all(&mut sock, &r.to_bytes()).await;
            return;
        }
    };
    // `/mcp` keeps a connection for the host's next request; every other answer ends it.
    let mut served = 0;
    loop {
        match route(&head) {
            Route::WebSocket { space } => match check_space(&shared.space, space.as_deref()) {
                Ok(()) => websocket::<R>(shared, sock, head, leftover).await,
                Err(e) => {
                    let r = Response::json_bytes(e.status, e.body_json.into_bytes());
                    let _ = R::write_all(&mut sock, &r.to_bytes()).await;
                }
            },
            Route::UiSession if shared.ui.is_some() => {
                let ep = crate::server::ui_session::Endpoint {
                    sessions: &shared.sessions,
                    core: shared.core.clone(),
                    space: &shared.space,
                    limits: shared.limits,
                    report_every: shared.report_every,
                };
                crate::server::ui_session::serve::<R>(ep, sock, head, leftover).await;
            }
            Route::Mcp => {
                let ep = crate::server::mcp_front::Endpoint {
                    front: shared.mcp.clone(),
                    core: shared.core.clone(),
                    space: shared.space.clone(),
                    limits: shared.limits,
                    report_every: shared.report_every,
                    local: peer.ip().is_loopback() && !proxied,
                    issuer: shared.issuer.clone(),
                    tls: shared.tls.is_some(),
                };
                served += 1;
                let keep = head.keeps_alive() && served < http::KEEP_ALIVE_REQUESTS;
                let rest = Box::pin(crate::server::mcp_front::serve::<R>(
                    &ep, &mut sock, head, leftover, keep,
                ))
                .await;
                let Some(rest) = rest else { return };
                // The next request's head, whole, within the idle time; else the connection ends.
                let next =
                    clock::timeout::<R, _>(http::KEEP_ALIVE_IDLE, read_head::<R>(&mut sock, rest))
                        .await;
                match next {
                    Some(Ok(Some(next))) => {
                        (head, leftover) = next;
                        continue;
                    }
                    Some(Err(e)) => {
                        tracing::debug!(%peer, "bad request head: {e}");
                        let r = Response::error(e.status(), "bad_request", &e.to_string());
                        let _ = R::write_all(&mut sock, &r.to_bytes()).await;
                    }
                    _ => {}
                }
            }
            Route::UiSession => {
                let r = Response::error(404, "not_found", "this gateway serves no page");
                let _ = R::write_all(&mut sock, &r.to_bytes()).await;
            }
            r => {
                // Boxed: its body buffer would otherwise be part of every WebSocket's task too.
                let resp = Box::pin(http_response::<R>(
                    &shared, &mut sock, &head, leftover, r, deadline,
                ))
                .await;
                let _ = R::write_all(&mut sock, &resp.to_bytes()).await;
                let _ = R::shutdown(&mut sock).await;
            }
        }
        return;
    }
}

/// The moment by which a connection's request must have arrived whole.
#[derive(Debug, Clone, Copy)]
struct Deadline(std::time::Instant);

impl Deadline {
    fn after(d: Duration) -> Deadline {
        Deadline(std::time::Instant::now() + d)
    }

    /// What is left of it (zero once it passed).
    fn left(self) -> Duration {
        self.0.saturating_duration_since(std::time::Instant::now())
    }
}

/// Runs the TLS handshake; a client that speaks plain text is told in plain text to use
/// TLS, and `None` is returned for it as for a failed handshake.
async fn tls_handshake<R: ServerRuntime>(
    config: Arc<rustls::ServerConfig>,
    mut sock: R::Sock,
) -> Option<R::Sock> {
    let mut first = [0u8; 1];
    match R::peek(&mut sock, &mut first).await {
        Ok(1..) => {}
        _ => return None,
    }
    if first[0] != crate::server::tls::HANDSHAKE_RECORD {
        tracing::debug!("plain-text request on the TLS port");
        let _ = R::write_all(&mut sock, &crate::server::tls::plain_text_refusal()).await;
        let _ = R::shutdown(&mut sock).await;
        return None;
    }
    match R::tls_accept(config, sock).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::debug!("TLS handshake failed: {e}");
            None
        }
    }
}

/// The gateway's WebSocket settings: frames and messages over `max` bytes refused, and a
/// small read buffer, since an idle connection holds it for its lifetime (tungstenite
/// allocates it up front). tungstenite writes only its pongs and close replies (the
/// connection's writer writes the frames, see [`crate::server::frames`]): its write buffer stays
/// as small as they are.
fn server_ws_config(max: usize) -> WebSocketConfig {
    ws_config(max)
        .read_buffer_size(SERVER_READ_BUFFER)
        // Its own frames go on to the control bytes at once.
        .write_buffer_size(0)
}

/// Bytes read from a client's socket at a time.
const SERVER_READ_BUFFER: usize = 4 * 1024;

/// Bytes asked of the socket per read of a request head.
const HEAD_READ: usize = 2048;

/// Reads until a complete head, after the bytes already in `buf` (read past a previous
/// request on the connection); `None` when the peer closed first.
async fn read_head<R: ServerRuntime>(
    sock: &mut R::Sock,
    mut buf: Vec<u8>,
) -> Result<Option<(RequestHead, Vec<u8>)>, HeadError> {
    if !buf.is_empty()
        && let Some((head, len)) = http::parse_head(&buf)?
    {
        return Ok(Some((head, buf.split_off(len))));
    }
    // Read into the buffer itself: a chunk array here would be part of every
    // connection's task for as long as the connection lives.
    loop {
        let start = buf.len();
        // The buffer stays under MAX_HEAD plus one read: parse_head refuses a partial
        // head once it reaches MAX_HEAD.
        buf.resize(start + HEAD_READ, 0);
        let n = match R::read(sock, &mut buf[start..]).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => n,
        };
        buf.truncate(start + n);
        if let Some((head, len)) = http::parse_head(&buf)? {
            return Ok(Some((head, buf.split_off(len))));
        }
    }
}

/// Reads until `body` holds `len` bytes, growing it only by what arrives.
async fn read_body<R: ServerRuntime>(
    sock: &mut R::Sock,
    body: &mut Vec<u8>,
    len: usize,
) -> io::Result<()> {
    let mut chunk = [0u8; 16 * 1024];
    while body.len() < len {
        let want = (len - body.len()).min(chunk.len());
        match R::read(sock, &mut chunk[..want]).await? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => body.extend_from_slice(&chunk[..n]),
        }
    }
    Ok(())
}

async fn http_response<R: ServerRuntime>(
    shared: &Shared,
    sock: &mut R::Sock,
    head: &RequestHead,
    mut body: Vec<u8>,
    route: Route,
    deadline: Deadline,
) -> Response {
    let len = match head.content_length(shared.limits.max_frame_bytes) {
        Ok(l) => l,
        Err(e) => return Response::error(e.status(), "bad_request", &e.to_string()),
    };
    if matches!(route, Route::PostMessages { .. }) && head.bearer().is_none() {
        // No body is read for a request that cannot be authenticated.
        return Response::error(
            401,
            "unauthorized",
            "an Authorization: Bearer token is required",
        );
    }
    if body.len() < len {
        // curl and others wait for this before sending a larger body.
        if head
            .header("expect")
            .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
        {
            let _ = R::write_all(sock, b"HTTP/1.1 100 Continue\r\n\r\n").await;
        }
        // Grown as bytes arrive, never sized up front from the client's Content-Length.
        let read =
            clock::timeout::<R, _>(deadline.left(), read_body::<R>(sock, &mut body, len)).await;
        if !matches!(read, Some(Ok(()))) {
            return Response::error(400, "bad_request", "incomplete request body");
        }
    }
    body.truncate(len);
    if let Route::Ui { path } = &route {
        // Static files: the core task is not involved.
        return crate::server::ui::respond(shared.ui, head, path);
    }
    let (tx, rx) = oneshot::channel();
    let req = HttpRequest {
        route,
        bearer: head.bearer().map(str::to_owned),
        body: Bytes::from(body),
    };
    let unavailable = || Response::error(503, "unavailable", "the gateway is shutting down");
    if shared.core.send(Input::Http(req, tx)).await.is_err() {
        return unavailable();
    }
    rx.await.unwrap_or_else(|_| unavailable())
}

async fn websocket<R: ServerRuntime>(
    shared: Arc<Shared>,
    mut sock: R::Sock,
    head: RequestHead,
    leftover: Vec<u8>,
) {
    let accept = match ws::accept_key(&head) {
        Ok(a) => a,
        Err(e) => {
            let r = Response::error(e.status(), "bad_upgrade", &e.to_string());
            let _ = R::write_all(&mut sock, &r.to_bytes()).await;
            return;
        }
    };
    if R::write_all(&mut sock, &ws::switching_protocols(&accept))
        .await
        .is_err()
    {
        return;
    }
    let config = server_ws_config(shared.limits.max_frame_bytes);
    let ws = R::websocket(sock, leftover, config).await;
    conn::serve_websocket::<R, _, _>(
        ws,
        R::raw,
        head.bearer().map(str::to_owned),
        shared.core.clone(),
        shared.report_every,
        |writer| R::spawn(writer),
    )
    .await;
}
