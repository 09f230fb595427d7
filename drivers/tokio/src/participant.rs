//! The participant runtime on tokio: the shared runtime of `mew-driver-common` with tokio's
//! tasks, timers, sockets and event queue.

use std::future::Future;
use std::time::Duration;

use mew_core::participant::Event;
use mew_driver_common::clock::Sleep;
use mew_driver_common::participant::Runtime;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub use mew_driver_common::participant::{
    CallError, EVENT_QUEUE, SendJsonError, Stopped, ToolHandler,
};

/// The async handle on a participant, driven on tokio. Clonable; the task stops when every
/// handle is dropped or `close` is called.
pub type ParticipantRuntime = mew_driver_common::participant::ParticipantRuntime<Tokio>;

/// The tokio runtime hooks for the shared participant runtime.
#[derive(Debug, Clone, Copy)]
pub struct Tokio;

impl Sleep for Tokio {
    fn sleep(d: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(d)
    }
}

impl Runtime for Tokio {
    type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;
    type Events = mpsc::Receiver<Event>;
    type EventSender = mpsc::Sender<Event>;

    fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
        tokio::spawn(fut);
    }

    async fn open(req: Request, config: WebSocketConfig) -> Result<Self::Ws, WsError> {
        let (ws, _) = tokio_tungstenite::connect_async_with_config(req, Some(config), true).await?;
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
