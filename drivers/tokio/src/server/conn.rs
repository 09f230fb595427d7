//! One accepted TCP connection: request head, then either an HTTP exchange or a WebSocket
//! with a reader (this task) and a writer task.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use mew_core::Limits;
use mew_core::gateway::ConnId;
use mew_driver_common::http::{self, HeadError, RequestHead};
use mew_driver_common::route::{Route, route};
use mew_driver_common::{Response, ws};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::CapacityError;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::core_task::{ConnHandle, HttpRequest, Input, WriterCmd};

pub(crate) struct Shared {
    pub core: mpsc::Sender<Input>,
    /// The id of the space this server serves (requests naming another get 404).
    pub space: String,
    pub limits: Limits,
    pub head_timeout: Duration,
    /// Written frames and bytes a writer may hold back before reporting them to the core
    /// (a small fraction of the queue limits, so the core's view of a queue is never off
    /// by more than that, and a busy connection costs the core one report per batch).
    pub report_every: (usize, usize),
}

/// How long a closing connection may take to finish its close handshake.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Bytes read from a socket at a time.
const READ_BUFFER: usize = 16 * 1024;
/// Most frames written before one flush.
const WRITE_BATCH: usize = 256;

type Ws = WebSocketStream<TcpStream>;

pub(crate) async fn handle(shared: Arc<Shared>, mut sock: TcpStream, peer: SocketAddr) {
    let (head, leftover) =
        match tokio::time::timeout(shared.head_timeout, read_head(&mut sock)).await {
            Ok(Ok(Some(h))) => h,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                tracing::debug!(%peer, "bad request head: {e}");
                let r = Response::error(e.status(), "bad_request", &e.to_string());
                let _ = sock.write_all(&r.to_bytes()).await;
                return;
            }
            Err(_) => {
                let r = Response::error(408, "timeout", "request head not received in time");
                let _ = sock.write_all(&r.to_bytes()).await;
                return;
            }
        };
    match route(&head) {
        Route::WebSocket { space: Some(s) } if s != shared.space => {
            let r = Response::error(404, "unknown_space", &format!("no space {s:?} here"));
            let _ = sock.write_all(&r.to_bytes()).await;
        }
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
    mut body: Vec<u8>,
    route: Route,
) {
    let resp = async {
        let len = match head.content_length(shared.limits.max_frame_bytes) {
            Ok(l) => l,
            Err(e) => return Response::error(e.status(), "bad_request", &e.to_string()),
        };
        if body.len() < len {
            // curl and others wait for this before sending a larger body.
            if head
                .header("expect")
                .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
            {
                let _ = sock.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
            }
            let need = len - body.len();
            let start = body.len();
            body.resize(len, 0);
            let read = tokio::time::timeout(
                shared.head_timeout,
                sock.read_exact(&mut body[start..start + need]),
            )
            .await;
            if !matches!(read, Ok(Ok(_))) {
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
        if shared.core.send(Input::Http(req, tx)).await.is_err() {
            return Response::error(503, "unavailable", "the gateway is shutting down");
        }
        rx.await
            .unwrap_or_else(|_| Response::error(503, "unavailable", "the gateway is shutting down"))
    }
    .await;
    let _ = sock.write_all(&resp.to_bytes()).await;
    let _ = sock.shutdown().await;
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
    let max = shared.limits.max_frame_bytes;
    // tungstenite zero-fills a read buffer of this size before every socket read: the
    // 128 KiB default costs a large memset per read and per idle connection's memory.
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .max_frame_size(Some(max))
        .max_message_size(Some(max));
    let ws = WebSocketStream::from_partially_read(sock, leftover, Role::Server, Some(config)).await;
    let (sink, stream) = ws.split();
    let (wtx, wrx) = mpsc::unbounded_channel();
    let (closing_tx, closing_rx) = watch::channel(false);
    let closing_tx = Arc::new(closing_tx);
    let (reply_tx, reply_rx) = oneshot::channel();
    let handle = ConnHandle {
        writer: wtx,
        closing: closing_tx.clone(),
        pending: Vec::new(),
    };
    let connect = Input::Connect {
        bearer: head.bearer().map(str::to_owned),
        handle,
        reply: reply_tx,
    };
    if shared.core.send(connect).await.is_err() {
        return;
    }
    let Ok(id) = reply_rx.await else { return };
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let ctx = WriterCtx {
        core: shared.core.clone(),
        report_every: shared.report_every,
        id,
        closing_tx,
        closing: closing_rx.clone(),
        _done: done_tx,
    };
    tokio::spawn(writer(sink, wrx, ctx));
    reader(stream, shared.core.clone(), id, closing_rx, done_rx).await;
    let _ = shared.core.send(Input::Closed(id)).await;
}

/// Resolves once a close was requested and the grace period after it has passed.
async fn close_deadline(closing: &mut watch::Receiver<bool>) {
    if closing.wait_for(|c| *c).await.is_err() {
        // The core is gone: treat as closing.
    }
    tokio::time::sleep(CLOSE_GRACE).await;
}

async fn reader(
    mut stream: SplitStream<Ws>,
    core: mpsc::Sender<Input>,
    id: ConnId,
    mut closing: watch::Receiver<bool>,
    writer_done: oneshot::Receiver<()>,
) {
    let deadline = close_deadline(&mut closing);
    tokio::pin!(deadline);
    loop {
        let msg = tokio::select! {
            m = stream.next() => m,
            _ = &mut deadline => return,
        };
        let input = match msg {
            Some(Ok(Message::Text(t))) => Input::Frame(id, Bytes::from(t)),
            Some(Ok(Message::Binary(b))) => Input::Frame(id, b),
            // A client's ping is activity too; tungstenite answers it.
            Some(Ok(Message::Pong(_) | Message::Ping(_))) => Input::Pong(id),
            Some(Ok(Message::Frame(_))) => continue,
            Some(Ok(Message::Close(_))) | None => return,
            Some(Err(WsError::Capacity(CapacityError::MessageTooLong { size, .. }))) => {
                let _ = core.send(Input::Oversize(id, size)).await;
                // Let the writer deliver the error and the close frame first.
                let _ = tokio::time::timeout(CLOSE_GRACE, writer_done).await;
                return;
            }
            Some(Err(e)) => {
                tracing::debug!(%id, "websocket read error: {e}");
                return;
            }
        };
        if core.send(input).await.is_err() {
            return;
        }
    }
}

struct WriterCtx {
    core: mpsc::Sender<Input>,
    report_every: (usize, usize),
    id: ConnId,
    closing_tx: Arc<watch::Sender<bool>>,
    closing: watch::Receiver<bool>,
    /// Dropped when the writer ends (the reader waits on it after an oversize frame).
    _done: oneshot::Sender<()>,
}

async fn writer(
    mut sink: SplitSink<Ws, Message>,
    mut rx: mpsc::UnboundedReceiver<WriterCmd>,
    ctx: WriterCtx,
) {
    let WriterCtx {
        core,
        report_every,
        id,
        closing_tx,
        mut closing,
        _done,
    } = ctx;
    let deadline = close_deadline(&mut closing);
    tokio::pin!(deadline);
    // Every socket operation races the close deadline, so a peer that stopped reading
    // cannot keep this task (and its socket) alive after the core closed it.
    macro_rules! guarded {
        ($op:expr) => {
            tokio::select! {
                r = $op => r.is_ok(),
                _ = &mut deadline => false,
            }
        };
    }
    let (mut frames, mut bytes) = (0usize, 0usize);
    'run: while let Some(cmd) = rx.recv().await {
        let mut next = Some(cmd);
        let mut n = 0;
        while let Some(cmd) = next.take() {
            match cmd {
                WriterCmd::Frames(list) => {
                    for t in list {
                        frames += 1;
                        bytes += t.len();
                        if !guarded!(sink.feed(Message::Text(t))) {
                            break 'run;
                        }
                    }
                }
                WriterCmd::Ping => {
                    if !guarded!(sink.feed(Message::Ping(Bytes::new()))) {
                        break 'run;
                    }
                }
                WriterCmd::Close(code, reason) => {
                    let frame = CloseFrame {
                        code: CloseCode::from(code),
                        reason: reason.into(),
                    };
                    let _ = guarded!(sink.send(Message::Close(Some(frame))));
                    if frames > 0 {
                        let _ = core.send(Input::Sent(id, frames, bytes)).await;
                    }
                    break 'run;
                }
            }
            n += 1;
            if n < WRITE_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !guarded!(sink.flush()) {
            break;
        }
        if frames >= report_every.0 || bytes >= report_every.1 {
            if core.send(Input::Sent(id, frames, bytes)).await.is_err() {
                break;
            }
            (frames, bytes) = (0, 0);
        }
    }
    closing_tx.send_replace(true);
    let _ = tokio::time::timeout(Duration::from_millis(200), sink.close()).await;
}
