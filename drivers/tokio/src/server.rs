//! The gateway server on tokio: the shared server of `mew-driver-common` with tokio's
//! sockets, tasks and timers.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use mew_driver_common::server::ServerRuntime;
use mew_driver_common::server::frames::{ControlFrames, RawSocket};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use crate::participant::Tokio;

pub use mew_driver_common::server::{ReloadHandle, ServerOptions, ShutdownHandle};

/// A bound, not yet serving gateway: `bind`, `local_addr`, `shutdown_handle`, `serve` (see
/// [`mew_driver_common::server::GatewayServer`]).
pub type GatewayServer = mew_driver_common::server::GatewayServer<Tokio>;

/// An accepted connection: plain TCP, or TLS over it (`--tls-cert`).
pub enum ServerSock {
    /// Plain text.
    Plain(TcpStream),
    /// After a TLS handshake.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for ServerSock {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
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

    fn is_write_vectored(&self) -> bool {
        match self {
            ServerSock::Plain(s) => s.is_write_vectored(),
            ServerSock::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerSock::Plain(s) => Pin::new(s).poll_flush(cx),
            ServerSock::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerSock::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ServerSock::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
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
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
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

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
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

impl ServerRuntime for Tokio {
    type Listener = TcpListener;
    type Sock = ServerSock;
    type Ws = WebSocketStream<WsSock>;
    type Raw = WsSock;

    fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
        tokio::spawn(fut);
    }

    async fn spawn_blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        match tokio::task::spawn_blocking(f).await {
            Ok(v) => v,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
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

    async fn read<'a>(s: &'a mut ServerSock, buf: &'a mut [u8]) -> io::Result<usize> {
        s.read(buf).await
    }

    async fn write_all<'a>(s: &'a mut ServerSock, buf: &'a [u8]) -> io::Result<()> {
        s.write_all(buf).await
    }

    async fn shutdown(s: &mut ServerSock) -> io::Result<()> {
        s.shutdown().await
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
                let tls = tokio_rustls::TlsAcceptor::from(config).accept(t).await?;
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
