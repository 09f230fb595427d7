//! The gateway server: one port for the WebSocket endpoint and the HTTP API, one task that
//! owns the space's [`Gateway`] core (through the shared [`GatewayHost`]).

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_net::{TcpListener, TcpStream};
use async_tungstenite::WebSocketStream;
use async_tungstenite::tungstenite::protocol::Role;
use bytes::Bytes;
use futures_channel::oneshot;
use futures_util::future::{Either, select};
use futures_util::{AsyncReadExt, AsyncWriteExt};
use mew_core::Limits;
use mew_core::gateway::{Gateway, SpaceConfig};
use mew_driver_common::clock::{self, Sleep};
use mew_driver_common::conn::{self, CoreInput};
use mew_driver_common::files::LogWriter;
use mew_driver_common::host::{GatewayHost, HttpRequest, Input, report_every};
use mew_driver_common::http::{self, HeadError, RequestHead};
use mew_driver_common::participant::ws_config;
use mew_driver_common::route::{Route, route};
use mew_driver_common::{Response, ws};

use crate::runtime::{AsyncStd, spawn};

/// Transport settings that are not protocol rules.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Folder that holds `.mew/` (audit logs); the folder of `space.yaml`.
    pub base_dir: PathBuf,
    /// Seed for the core's ids and tokens; `None` draws one from the OS.
    pub seed: Option<u64>,
    /// How long a client may take to send its HTTP request head.
    pub head_timeout: Duration,
    /// How long shutdown waits for clients to acknowledge their close frames.
    pub shutdown_grace: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            base_dir: PathBuf::from("."),
            seed: None,
            head_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(2),
        }
    }
}

/// A bound, not yet serving gateway.
pub struct GatewayServer {
    listener: TcpListener,
    config: SpaceConfig,
    options: ServerOptions,
    shutdown: async_channel::Sender<()>,
    shutdown_rx: async_channel::Receiver<()>,
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
    limits: Limits,
    head_timeout: Duration,
    report_every: (usize, usize),
}

impl GatewayServer {
    /// Binds `addr` for a space with default [`ServerOptions`].
    pub async fn bind(addr: SocketAddr, config: SpaceConfig) -> io::Result<GatewayServer> {
        Self::bind_with(addr, config, ServerOptions::default()).await
    }

    /// Binds `addr` for a space.
    pub async fn bind_with(
        addr: SocketAddr,
        config: SpaceConfig,
        options: ServerOptions,
    ) -> io::Result<GatewayServer> {
        let listener = TcpListener::bind(addr).await?;
        let (shutdown, shutdown_rx) = async_channel::bounded(1);
        Ok(GatewayServer {
            listener,
            config,
            options,
            shutdown,
            shutdown_rx,
        })
    }

    /// The bound address (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// A handle that stops [`GatewayServer::serve`].
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.shutdown.clone())
    }

    /// Serves until shut down; returns after every connection got its close frame (or the
    /// grace period ran out) and the logs are flushed. The error, if any, is a log write
    /// failure.
    pub async fn serve(self) -> io::Result<()> {
        let GatewayServer {
            listener,
            config,
            options,
            // Held so the channel stays open while no handle exists.
            shutdown: _keep_open,
            shutdown_rx,
        } = self;
        let seed = options.seed.unwrap_or_else(clock::os_seed);
        let limits = config.gateway.limits;
        let report_every = report_every(&config);
        let logs = LogWriter::start()?;
        let gateway = Gateway::new(config, seed, clock::now());
        let host = GatewayHost::new(
            gateway,
            logs.handle(),
            options.base_dir.clone(),
            options.shutdown_grace,
        );
        // Bounded: readers wait (back-pressure on their sockets) when the core is busy.
        let (tx, rx) = async_channel::bounded::<CoreInput>(4096);
        let (core_done_tx, core_done) = oneshot::channel::<()>();
        spawn(async move {
            conn::run_core::<AsyncStd>(host, rx).await;
            drop(core_done_tx);
        });
        let shared = Arc::new(Shared {
            core: tx.clone(),
            limits,
            head_timeout: options.head_timeout,
            report_every,
        });
        loop {
            let stop = shutdown_rx.recv();
            match select(std::pin::pin!(listener.accept()), std::pin::pin!(stop)).await {
                Either::Left((Ok((sock, peer)), _)) => {
                    let _ = sock.set_nodelay(true);
                    spawn(handle(shared.clone(), sock, peer));
                }
                Either::Left((Err(e), _)) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    AsyncStd::sleep(Duration::from_millis(50)).await;
                }
                Either::Right(_) => break,
            }
        }
        drop(listener);
        let _ = tx.send(Input::Shutdown).await;
        drop(tx);
        drop(shared);
        let _ = core_done.await;
        tracing::debug!("every connection closed; flushing logs");
        let r = async_global_executor::spawn_blocking(move || logs.finish()).await;
        tracing::debug!("logs flushed");
        r
    }
}

async fn handle(shared: Arc<Shared>, mut sock: TcpStream, peer: SocketAddr) {
    let head = clock::timeout::<AsyncStd, _>(shared.head_timeout, read_head(&mut sock)).await;
    let (head, leftover) = match head {
        Some(Ok(Some(h))) => h,
        Some(Ok(None)) => return,
        Some(Err(e)) => {
            tracing::debug!(%peer, "bad request head: {e}");
            let r = Response::error(e.status(), "bad_request", &e.to_string());
            let _ = sock.write_all(&r.to_bytes()).await;
            return;
        }
        None => {
            let r = Response::error(408, "timeout", "request head not received in time");
            let _ = sock.write_all(&r.to_bytes()).await;
            return;
        }
    };
    match route(&head) {
        Route::WebSocket { .. } => websocket(shared, sock, head, leftover).await,
        r => http_exchange(shared, sock, head, leftover, r).await,
    }
}

/// Reads until a complete head; `None` when the peer closed first.
async fn read_head(sock: &mut TcpStream) -> Result<Option<(RequestHead, Vec<u8>)>, HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => n,
        };
        // The buffer stays under MAX_HEAD plus one chunk: parse_head refuses a partial
        // head once it reaches MAX_HEAD.
        buf.extend_from_slice(&chunk[..n]);
        if let Some((head, len)) = http::parse_head(&buf)? {
            return Ok(Some((head, buf.split_off(len))));
        }
    }
}

async fn http_exchange(
    shared: Arc<Shared>,
    mut sock: TcpStream,
    head: RequestHead,
    body: Vec<u8>,
    route: Route,
) {
    let resp = http_response(&shared, &mut sock, &head, body, route).await;
    let _ = sock.write_all(&resp.to_bytes()).await;
    let _ = sock.close().await;
}

async fn http_response(
    shared: &Shared,
    sock: &mut TcpStream,
    head: &RequestHead,
    mut body: Vec<u8>,
    route: Route,
) -> Response {
    let len = match head.content_length(shared.limits.max_frame_bytes) {
        Ok(l) => l,
        Err(e) => return Response::error(e.status(), "bad_request", &e.to_string()),
    };
    if body.len() < len {
        let start = body.len();
        body.resize(len, 0);
        let read =
            clock::timeout::<AsyncStd, _>(shared.head_timeout, sock.read_exact(&mut body[start..]))
                .await;
        if !matches!(read, Some(Ok(()))) {
            return Response::error(400, "bad_request", "incomplete request body");
        }
    }
    body.truncate(len);
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

async fn websocket(shared: Arc<Shared>, mut sock: TcpStream, head: RequestHead, leftover: Vec<u8>) {
    let accept = match ws::accept_key(&head) {
        Ok(a) => a,
        Err(e) => {
            let r = Response::error(e.status(), "bad_upgrade", &e.to_string());
            let _ = sock.write_all(&r.to_bytes()).await;
            return;
        }
    };
    if sock
        .write_all(&ws::switching_protocols(&accept))
        .await
        .is_err()
    {
        return;
    }
    let config = ws_config(shared.limits.max_frame_bytes);
    let ws = WebSocketStream::from_partially_read(sock, leftover, Role::Server, Some(config)).await;
    conn::serve_websocket::<AsyncStd, _>(
        ws,
        head.bearer().map(str::to_owned),
        shared.core.clone(),
        shared.report_every,
        spawn,
    )
    .await;
}
