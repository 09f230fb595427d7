//! The runtime hooks: `async-global-executor` tasks, `async-io` timers, `async-net` sockets,
//! `async-process` child processes.

use std::future::Future;
use std::time::Duration;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_net::{TcpListener, TcpStream};
use async_tungstenite::WebSocketStream;
use async_tungstenite::tungstenite::Error as WsError;
use async_tungstenite::tungstenite::handshake::client::Request;
use async_tungstenite::tungstenite::protocol::Role;
use async_tungstenite::tungstenite::protocol::WebSocketConfig;
use futures_io::{AsyncRead, AsyncWrite};
use futures_util::future::Either;
use futures_util::{AsyncReadExt, AsyncWriteExt};
use mew_core::participant::Event;
use mew_driver_common::client::process::{ProcessRuntime, Spawned};
use mew_driver_common::client::socket::{Runtime, url_target};
use mew_driver_common::client::tls as client_tls;
use mew_driver_common::clock::Sleep;
use mew_driver_common::server::ServerRuntime;
use mew_driver_common::server::frames::{ControlFrames, RawSocket};

/// The async-std / smol runtime hooks for the shared participant runtime.
#[derive(Debug, Clone, Copy)]
pub struct AsyncStd;

impl Sleep for AsyncStd {
    async fn sleep(d: Duration) {
        async_io::Timer::after(d).await;
    }
}

/// Runs `fut` on the global executor (async-std's own), whatever runtime the caller is on.
fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
    async_global_executor::spawn(fut).detach();
}

/// An accepted connection: plain TCP, or TLS over it (`--tls-cert`).
pub enum ServerSock {
    /// Plain text.
    Plain(TcpStream),
    /// After a TLS handshake.
    Tls(Box<futures_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for ServerSock {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerSock::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ServerSock::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ServerSock {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerSock::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ServerSock::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerSock::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ServerSock::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerSock::Plain(s) => Pin::new(s).poll_flush(cx),
            ServerSock::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerSock::Plain(s) => Pin::new(s).poll_close(cx),
            ServerSock::Tls(s) => Pin::new(s.as_mut()).poll_close(cx),
        }
    }
}

/// The socket under a server WebSocket: tungstenite reads from the connection, and what it
/// writes by itself (pongs, close replies) waits in the control bytes for the connection's
/// writer, which writes every frame straight to the connection
/// ([`mew_driver_common::server::frames`]).
pub struct WsSock {
    sock: ServerSock,
    control: ControlFrames,
}

impl AsyncRead for WsSock {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().sock).poll_read(cx, buf)
    }
}

impl AsyncWrite for WsSock {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(self.get_mut().control.accept(buf)))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl RawSocket for WsSock {
    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.sock).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.sock).poll_flush(cx)
    }

    fn control(&mut self) -> &mut ControlFrames {
        &mut self.control
    }
}

impl ServerRuntime for AsyncStd {
    type Listener = TcpListener;
    type Sock = ServerSock;
    type Ws = WebSocketStream<WsSock>;
    type Raw = WsSock;

    fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
        spawn(fut);
    }

    fn spawn_blocking<T: Send + 'static>(
        f: impl FnOnce() -> T + Send + 'static,
    ) -> impl Future<Output = T> + Send {
        async_global_executor::spawn_blocking(f)
    }

    fn bind(addr: SocketAddr) -> impl Future<Output = io::Result<TcpListener>> + Send {
        TcpListener::bind(addr)
    }

    fn local_addr(l: &TcpListener) -> io::Result<SocketAddr> {
        l.local_addr()
    }

    async fn accept(l: &TcpListener) -> io::Result<(ServerSock, SocketAddr)> {
        let (sock, peer) = l.accept().await?;
        let _ = sock.set_nodelay(true);
        Ok((ServerSock::Plain(sock), peer))
    }

    fn read<'a>(
        s: &'a mut ServerSock,
        buf: &'a mut [u8],
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a {
        s.read(buf)
    }

    fn write_all<'a>(
        s: &'a mut ServerSock,
        buf: &'a [u8],
    ) -> impl Future<Output = io::Result<()>> + Send + 'a {
        s.write_all(buf)
    }

    fn shutdown(s: &mut ServerSock) -> impl Future<Output = io::Result<()>> + Send + '_ {
        s.close()
    }

    async fn peek<'a>(s: &'a mut ServerSock, buf: &'a mut [u8]) -> io::Result<usize> {
        match s {
            ServerSock::Plain(t) => t.peek(buf).await,
            ServerSock::Tls(_) => Err(io::Error::other("peek after the TLS handshake")),
        }
    }

    async fn tls_accept(
        config: Arc<mew_driver_common::rustls::ServerConfig>,
        s: ServerSock,
    ) -> io::Result<ServerSock> {
        match s {
            ServerSock::Plain(t) => {
                let tls = futures_rustls::TlsAcceptor::from(config).accept(t).await?;
                Ok(ServerSock::Tls(Box::new(tls)))
            }
            tls @ ServerSock::Tls(_) => Ok(tls),
        }
    }

    fn raw(ws: &mut Self::Ws) -> &mut WsSock {
        ws.get_mut()
    }

    fn websocket(
        s: ServerSock,
        leftover: Vec<u8>,
        config: WebSocketConfig,
    ) -> impl Future<Output = Self::Ws> + Send {
        // With nothing left over, `from_raw_socket` keeps tungstenite's full read buffer;
        // `from_partially_read` would size every later read to the bytes next needed (two
        // small reads per frame), which costs a third of the fan-out throughput.
        let s = WsSock {
            sock: s,
            control: ControlFrames::default(),
        };
        if leftover.is_empty() {
            futures_util::future::Either::Left(WebSocketStream::from_raw_socket(
                s,
                Role::Server,
                Some(config),
            ))
        } else {
            futures_util::future::Either::Right(WebSocketStream::from_partially_read(
                s,
                leftover,
                Role::Server,
                Some(config),
            ))
        }
    }
}

impl ProcessRuntime for AsyncStd {
    type Child = async_process::Child;
    type Stdin = async_process::ChildStdin;
    type Stdout = async_process::ChildStdout;
    type Stderr = async_process::ChildStderr;

    fn spawn_child(cmd: std::process::Command) -> io::Result<Spawned<Self>> {
        use std::process::Stdio;
        // The conversion keeps program, arguments, environment, directory and process
        // group, but not the stdio settings.
        let mut child = async_process::Command::from(cmd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let piped = || io::Error::other("stdio is not piped");
        let stdin = child.stdin.take().ok_or_else(piped)?;
        let stdout = child.stdout.take().ok_or_else(piped)?;
        let stderr = child.stderr.take().ok_or_else(piped)?;
        Ok(Spawned {
            pid: Some(child.id()),
            child,
            stdin,
            stdout,
            stderr,
        })
    }

    fn wait(
        child: &mut Self::Child,
    ) -> impl Future<Output = io::Result<std::process::ExitStatus>> + Send + '_ {
        child.status()
    }

    fn start_kill(child: &mut Self::Child) -> io::Result<()> {
        child.kill()
    }
}

/// A client connection to a gateway: plain TCP (`ws://`) or TLS over it (`wss://`).
pub type ClientStream = Either<TcpStream, Box<futures_rustls::client::TlsStream<TcpStream>>>;

impl Runtime for AsyncStd {
    type Ws = WebSocketStream<ClientStream>;
    type Events = async_channel::Receiver<Event>;
    type EventSender = async_channel::Sender<Event>;

    fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
        spawn(fut);
    }

    async fn open(req: Request, config: WebSocketConfig) -> Result<Self::Ws, WsError> {
        let (host, port, tls) = url_target(&req)?;
        let sock = TcpStream::connect((host.as_str(), port)).await?;
        sock.set_nodelay(true)?;
        let stream = if tls {
            let config = client_tls::current().map_err(|e| WsError::Io(io::Error::other(e)))?;
            let name =
                client_tls::server_name(&host).map_err(|e| WsError::Io(io::Error::other(e)))?;
            let tls = futures_rustls::TlsConnector::from(config)
                .connect(name, sock)
                .await?;
            Either::Right(Box::new(tls))
        } else {
            Either::Left(sock)
        };
        let (ws, _) =
            async_tungstenite::client_async_with_config(req, stream, Some(config)).await?;
        Ok(ws)
    }

    fn event_queue(capacity: usize) -> (Self::EventSender, Self::Events) {
        async_channel::bounded(capacity)
    }

    fn try_send_event(tx: &Self::EventSender, e: Event) -> bool {
        tx.try_send(e).is_ok()
    }

    async fn recv_event(rx: &mut Self::Events) -> Option<Event> {
        rx.recv().await.ok()
    }
}
