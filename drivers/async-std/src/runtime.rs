//! The runtime hooks: `async-global-executor` tasks, `async-io` timers, `async-net` sockets.

use std::future::Future;
use std::time::Duration;

use async_net::TcpStream;
use async_tungstenite::WebSocketStream;
use async_tungstenite::tungstenite::handshake::client::Request;
use async_tungstenite::tungstenite::protocol::WebSocketConfig;
use async_tungstenite::tungstenite::{Error as WsError, error::UrlError};
use mew_core::participant::Event;
use mew_driver_common::clock::Sleep;
use mew_driver_common::participant::Runtime;

/// The async-std / smol runtime hooks for the shared participant runtime.
#[derive(Debug, Clone, Copy)]
pub struct AsyncStd;

impl Sleep for AsyncStd {
    fn sleep(d: Duration) -> impl Future<Output = ()> + Send {
        async move {
            async_io::Timer::after(d).await;
        }
    }
}

/// Runs `fut` on the global executor (async-std's own), whatever runtime the caller is on.
pub(crate) fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
    async_global_executor::spawn(fut).detach();
}

impl Runtime for AsyncStd {
    type Ws = WebSocketStream<TcpStream>;
    type Events = async_channel::Receiver<Event>;
    type EventSender = async_channel::Sender<Event>;

    fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
        spawn(fut);
    }

    fn open(
        req: Request,
        config: WebSocketConfig,
    ) -> impl Future<Output = Result<Self::Ws, WsError>> + Send {
        async move {
            let uri = req.uri();
            if uri.scheme_str() != Some("ws") {
                return Err(WsError::Url(UrlError::UnsupportedUrlScheme));
            }
            let host = uri.host().ok_or(WsError::Url(UrlError::NoHostName))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let port = uri.port_u16().unwrap_or(80);
            let sock = TcpStream::connect((host, port)).await?;
            sock.set_nodelay(true)?;
            let (ws, _) =
                async_tungstenite::client_async_with_config(req, sock, Some(config)).await?;
            Ok(ws)
        }
    }

    fn event_queue(capacity: usize) -> (Self::EventSender, Self::Events) {
        async_channel::bounded(capacity)
    }

    fn try_send_event(tx: &Self::EventSender, e: Event) -> bool {
        tx.try_send(e).is_ok()
    }

    fn recv_event(rx: &mut Self::Events) -> impl Future<Output = Option<Event>> + Send {
        async move { rx.recv().await.ok() }
    }
}
