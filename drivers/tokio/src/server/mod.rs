//! The gateway server: one port for the WebSocket endpoint and the HTTP API, one task that
//! owns the space's [`Gateway`] core.

mod conn;
mod core_task;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mew_core::gateway::{Gateway, SpaceConfig};
use mew_driver_common::files::LogWriter;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::clock;
use core_task::Input;

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
    shutdown_tx: watch::Sender<bool>,
}

/// Asks a running [`GatewayServer`] to shut down gracefully. Clonable.
#[derive(Clone)]
pub struct ShutdownHandle(Arc<watch::Sender<bool>>);

impl ShutdownHandle {
    /// Starts the graceful shutdown: no new connections, a close frame (1001) to every
    /// client, logs flushed; `serve` returns when done.
    pub fn shutdown(&self) {
        self.0.send_replace(true);
    }
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
        let (shutdown_tx, _) = watch::channel(false);
        Ok(GatewayServer {
            listener,
            config,
            options,
            shutdown_tx,
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
        ShutdownHandle(Arc::new(self.shutdown_tx.clone()))
    }

    /// Serves until shut down; returns after every connection got its close frame (or the
    /// grace period ran out) and the logs are flushed. The error, if any, is a log write
    /// failure or a failure of the core task.
    pub async fn serve(self) -> io::Result<()> {
        let GatewayServer {
            listener,
            config,
            options,
            shutdown_tx,
        } = self;
        let seed = options.seed.unwrap_or_else(clock::os_seed);
        let limits = config.gateway.limits;
        let space = config.id.clone();
        let report_every = (
            (config.gateway.max_queue_frames / 16).clamp(1, 64),
            (config.gateway.max_queue_bytes / 16).clamp(1, 256 * 1024),
        );
        let logs = LogWriter::start()?;
        let gateway = Gateway::new(config, seed, clock::now());
        // Bounded: readers wait (back-pressure on their sockets) when the core is busy.
        let (tx, rx) = mpsc::channel::<Input>(4096);
        let core = tokio::spawn(core_task::run(
            gateway,
            rx,
            logs.handle(),
            options.base_dir.clone(),
            options.shutdown_grace,
        ));
        let mut shutdown_rx = shutdown_tx.subscribe();
        let shared = Arc::new(conn::Shared {
            core: tx.clone(),
            space,
            limits,
            head_timeout: options.head_timeout,
            report_every,
        });
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((sock, peer)) => {
                        let _ = sock.set_nodelay(true);
                        tokio::spawn(conn::handle(shared.clone(), sock, peer));
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                _ = async { let _ = shutdown_rx.wait_for(|s| *s).await; } => break,
            }
        }
        drop(listener);
        let _ = tx.send(Input::Shutdown).await;
        drop(tx);
        drop(shared);
        // A panic in the core is a broken invariant: still flush what was logged, then report.
        let core_result = core.await;
        tracing::debug!("every connection closed; flushing logs");
        let r = tokio::task::spawn_blocking(move || logs.finish())
            .await
            .unwrap_or_else(|e| Err(io::Error::other(e)));
        tracing::debug!("logs flushed");
        match core_result {
            Ok(()) => r,
            Err(e) => Err(io::Error::other(format!("gateway core failed: {e}"))),
        }
    }
}
