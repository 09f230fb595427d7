//! The runtime hooks on tokio: the shared participant, agent and bridge runtimes of
//! `mew-driver-common` with tokio's tasks, timers, sockets, processes and event queue.

use std::future::Future;
use std::time::Duration;

use mew_core::participant::Event;
use mew_driver_common::client::process::{ProcessRuntime, Spawned};
use mew_driver_common::client::socket::Runtime;
use mew_driver_common::client::socket::url_target;
use mew_driver_common::client::tls as client_tls;
use mew_driver_common::clock::Sleep;
use std::io;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_util::either::Either;

/// A client connection to a gateway: plain TCP (`ws://`) or TLS over it (`wss://`).
pub type ClientStream = Either<TcpStream, Box<tokio_rustls::client::TlsStream<TcpStream>>>;
use tokio_util::compat::{Compat, TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

pub use mew_driver_common::client::participant::{
    CallError, EVENT_QUEUE, SendJsonError, Stopped, ToolHandler,
};

/// The async handle on a participant, driven on tokio. Clonable; the task stops when every
/// handle is dropped or `close` is called.
pub type ParticipantRuntime = mew_driver_common::client::participant::ParticipantRuntime<Tokio>;

/// The tokio runtime hooks for the shared participant runtime.
#[derive(Debug, Clone, Copy)]
pub struct Tokio;

impl Sleep for Tokio {
    fn sleep(d: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(d)
    }

    fn yield_now() -> impl Future<Output = ()> + Send {
        // Behind the worker's queued tasks, not into its next-task slot, where a task that
        // woke itself would run again at once.
        tokio::task::yield_now()
    }
}

impl ProcessRuntime for Tokio {
    type Child = tokio::process::Child;
    type Stdin = Compat<tokio::process::ChildStdin>;
    type Stdout = Compat<tokio::process::ChildStdout>;
    type Stderr = Compat<tokio::process::ChildStderr>;

    fn spawn_child(cmd: std::process::Command) -> io::Result<Spawned<Self>> {
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()?;
        let piped = || io::Error::other("stdio is not piped");
        let stdin = child.stdin.take().ok_or_else(piped)?.compat_write();
        let stdout = child.stdout.take().ok_or_else(piped)?.compat();
        let stderr = child.stderr.take().ok_or_else(piped)?.compat();
        Ok(Spawned {
            pid: child.id(),
            child,
            stdin,
            stdout,
            stderr,
        })
    }

    fn wait(
        child: &mut Self::Child,
    ) -> impl Future<Output = io::Result<std::process::ExitStatus>> + Send + '_ {
        child.wait()
    }

    fn start_kill(child: &mut Self::Child) -> io::Result<()> {
        child.start_kill()
    }
}

impl Runtime for Tokio {
    type Ws = WebSocketStream<ClientStream>;
    type Events = mpsc::Receiver<Event>;
    type EventSender = mpsc::Sender<Event>;

    fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
        tokio::spawn(fut);
    }

    async fn open(req: Request, config: WebSocketConfig) -> Result<Self::Ws, WsError> {
        let (host, port, tls) = url_target(&req)?;
        let sock = TcpStream::connect((host.as_str(), port)).await?;
        sock.set_nodelay(true)?;
        let stream = if tls {
            let config = client_tls::current().map_err(|e| WsError::Io(io::Error::other(e)))?;
            let name =
                client_tls::server_name(&host).map_err(|e| WsError::Io(io::Error::other(e)))?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, sock)
                .await?;
            Either::Right(Box::new(tls))
        } else {
            Either::Left(sock)
        };
        let (ws, _) =
            tokio_tungstenite::client_async_with_config(req, stream, Some(config)).await?;
        Ok(ws)
    }

    fn event_queue(capacity: usize) -> (Self::EventSender, Self::Events) {
        mpsc::channel(capacity)
    }

    fn try_send_event(tx: &Self::EventSender, e: Event) -> bool {
        tx.try_send(e).is_ok()
    }

    fn recv_event(rx: &mut Self::Events) -> impl Future<Output = Option<Event>> + Send {
        rx.recv()
    }
}
