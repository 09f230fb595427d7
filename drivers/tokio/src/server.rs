//! The gateway server on tokio: the shared server of `mew-driver-common` with tokio's
//! sockets, tasks and timers.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use mew_driver_common::server::ServerRuntime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use crate::participant::Tokio;

pub use mew_driver_common::server::{ServerOptions, ShutdownHandle};

/// A bound, not yet serving gateway: `bind`, `local_addr`, `shutdown_handle`, `serve` (see
/// [`mew_driver_common::server::GatewayServer`]).
pub type GatewayServer = mew_driver_common::server::GatewayServer<Tokio>;

impl ServerRuntime for Tokio {
    type Listener = TcpListener;
    type Sock = TcpStream;
    type Ws = WebSocketStream<TcpStream>;

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

    async fn accept(l: &TcpListener) -> io::Result<(TcpStream, SocketAddr)> {
        let (sock, peer) = l.accept().await?;
        let _ = sock.set_nodelay(true);
        Ok((sock, peer))
    }

    async fn read<'a>(s: &'a mut TcpStream, buf: &'a mut [u8]) -> io::Result<usize> {
        s.read(buf).await
    }

    async fn write_all<'a>(s: &'a mut TcpStream, buf: &'a [u8]) -> io::Result<()> {
        s.write_all(buf).await
    }

    async fn shutdown(s: &mut TcpStream) -> io::Result<()> {
        s.shutdown().await
    }

    fn websocket(
        s: TcpStream,
        leftover: Vec<u8>,
        config: WebSocketConfig,
    ) -> impl Future<Output = Self::Ws> + Send {
        // With nothing left over, `from_raw_socket` keeps tungstenite's full read buffer;
        // `from_partially_read` would size every later read to the bytes next needed (two
        // small reads per frame), which costs a third of the fan-out throughput.
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
