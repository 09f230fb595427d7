//! The one task that owns the space's core: it applies inputs from connections, arms the
//! core's timer, and carries out its outputs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use mew_core::gateway::{ConnId, Gateway, GatewayEvent, Output};
use mew_driver_common::Response;
use mew_driver_common::files::LogHandle;
use mew_driver_common::route::Route;
use serde_json::json;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use crate::clock;

/// What a connection's writer task is asked to do.
#[derive(Debug)]
pub(crate) enum WriterCmd {
    /// Frames in order: everything one pass over the core's outputs had for this connection,
    /// so a busy connection's writer is woken once per pass, not once per frame.
    Frames(Vec<Utf8Bytes>),
    Ping,
    Close(u16, String),
}

/// The core's end of one WebSocket connection.
pub(crate) struct ConnHandle {
    pub writer: mpsc::UnboundedSender<WriterCmd>,
    /// Set once a close was requested: the reader and writer then give up within a grace
    /// period even if the peer never answers (a slow consumer cannot block its close).
    pub closing: std::sync::Arc<watch::Sender<bool>>,
    /// Frames collected for this connection during one pass over the core's outputs, so a
    /// busy connection's writer is woken once per pass, not once per frame.
    pub pending: Vec<Utf8Bytes>,
}

/// Connection ids are small unique numbers: a multiplicative hash is enough and far cheaper
/// than SipHash on the per-recipient path.
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type ConnMap = HashMap<ConnId, ConnHandle, std::hash::BuildHasherDefault<IdHasher>>;

/// An HTTP request for the core.
pub(crate) struct HttpRequest {
    pub route: Route,
    pub bearer: Option<String>,
    pub body: Bytes,
}

/// Everything the connections tell the core.
pub(crate) enum Input {
    Connect {
        bearer: Option<String>,
        handle: ConnHandle,
        reply: oneshot::Sender<ConnId>,
    },
    Frame(ConnId, Bytes),
    Oversize(ConnId, usize),
    Pong(ConnId),
    Sent(ConnId, usize, usize),
    Closed(ConnId),
    Http(HttpRequest, oneshot::Sender<Response>),
    Shutdown,
}

/// How many queued inputs are applied before outputs are carried out.
const BATCH: usize = 64;

struct Core {
    gateway: Gateway,
    conns: ConnMap,
    logs: Option<LogHandle>,
    base_dir: PathBuf,
    /// The last frame converted for the socket layer: a broadcast hands the same `Bytes` to
    /// every recipient, so it is checked as UTF-8 once, not once per recipient.
    last_frame: Option<(Bytes, Utf8Bytes)>,
    /// Connections with frames in `pending`, in the order they got their first one.
    dirty: Vec<ConnId>,
}

pub(crate) async fn run(
    gateway: Gateway,
    mut rx: mpsc::Receiver<Input>,
    logs: Option<LogHandle>,
    base_dir: PathBuf,
    grace: Duration,
) {
    let mut core = Core {
        gateway,
        conns: ConnMap::default(),
        logs,
        base_dir,
        last_frame: None,
        dirty: Vec::new(),
    };
    let mut shutdown_deadline: Option<Instant> = None;
    loop {
        let timer = core.gateway.poll_timeout().map(clock::instant_for);
        let wake = match (timer, shutdown_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let input = tokio::select! {
            biased;
            input = rx.recv() => input,
            _ = sleep_until(wake) => {
                if shutdown_deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                core.gateway.handle_timeout(clock::now());
                core.drain();
                continue;
            }
        };
        let Some(input) = input else { break };
        let mut next = Some(input);
        let mut n = 0;
        while let Some(input) = next.take() {
            if matches!(input, Input::Shutdown) {
                if shutdown_deadline.is_none() {
                    shutdown_deadline = Some(Instant::now() + grace);
                    core.gateway.shutdown(clock::now());
                }
            } else {
                core.apply(input);
            }
            n += 1;
            if n < BATCH {
                next = rx.try_recv().ok();
            }
        }
        core.drain();
        if shutdown_deadline.is_some() && core.conns.is_empty() {
            break;
        }
        if n > 1 {
            // Busy: let readers queue more before the next pass, so passes (and the writer
            // wake-ups they cause) carry more frames each.
            tokio::task::yield_now().await;
        }
    }
    // Whatever is still connected after the grace period is cut off.
    for (_, h) in core.conns.drain() {
        h.closing.send_replace(true);
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Core {
    fn apply(&mut self, input: Input) {
        let now = clock::now();
        match input {
            Input::Connect {
                bearer,
                handle,
                reply,
            } => {
                let id = self.gateway.connect(now, bearer.as_deref());
                self.conns.insert(id, handle);
                if reply.send(id).is_err() {
                    // The connection died while waiting: tell the core at once.
                    self.conns.remove(&id);
                    self.gateway.handle_closed(now, id);
                }
            }
            Input::Frame(id, frame) => self.gateway.handle_frame(now, id, frame),
            Input::Oversize(id, size) => {
                self.gateway.handle_oversize(now, id, size);
                self.drain();
                // The rest of the oversize frame is still in the socket: the stream cannot
                // be resynchronised, so it is closed (1009, message too big).
                if let Some(h) = self.conns.get(&id) {
                    let _ = h
                        .writer
                        .send(WriterCmd::Close(1009, "frame too large".into()));
                    h.closing.send_replace(true);
                }
            }
            Input::Pong(id) => self.gateway.handle_pong(now, id),
            Input::Sent(id, frames, bytes) => self.gateway.handle_sent(id, frames, bytes),
            Input::Closed(id) => {
                self.conns.remove(&id);
                self.gateway.handle_closed(now, id);
            }
            Input::Http(req, reply) => {
                let resp = self.http(now, req);
                let _ = reply.send(resp);
            }
            Input::Shutdown => {}
        }
    }

    fn http(&mut self, now: mew_core::Time, req: HttpRequest) -> Response {
        match req.route {
            Route::PostMessages { participant } => {
                match self
                    .gateway
                    .http_post(now, &participant, req.bearer.as_deref(), &req.body)
                {
                    Ok(ok) => Response::json_bytes(200, ok.body_json().into_bytes()),
                    Err(e) => Response::json_bytes(e.status, e.body_json.into_bytes()),
                }
            }
            Route::GetMessages { participant, since } => {
                match self.gateway.http_messages(
                    &participant,
                    req.bearer.as_deref(),
                    since.as_deref(),
                ) {
                    Ok(list) => Response::json_array(200, list.iter().map(|b| &b[..])),
                    Err(e) => Response::json_bytes(e.status, e.body_json.into_bytes()),
                }
            }
            Route::Participants { space } => {
                let id = &self.gateway.config().id;
                if space.as_deref().is_some_and(|s| s != id) {
                    return Response::error(404, "unknown_space", "no such space here");
                }
                let list: Vec<_> = self
                    .gateway
                    .participants()
                    .into_iter()
                    .map(|p| {
                        json!({"id": p.id, "capabilities": p.capabilities,
                               "online": p.online, "virtual": p.is_virtual})
                    })
                    .collect();
                Response::json(200, &json!({"space": id, "participants": list}))
            }
            Route::Health => {
                let h = self.gateway.health();
                Response::json(
                    200,
                    &json!({"status": "ok", "protocol": mew_core::PROTOCOL, "space": h.space,
                            "connections": h.connections,
                            "participants_online": h.participants_online,
                            "active_streams": h.active_streams, "history": h.history_len}),
                )
            }
            Route::NotFound | Route::WebSocket { .. } => {
                Response::error(404, "not_found", "no such endpoint")
            }
            Route::MethodNotAllowed => {
                Response::error(405, "method_not_allowed", "method not allowed here")
            }
        }
    }

    fn drain(&mut self) {
        while let Some(out) = self.gateway.poll_output() {
            match out {
                Output::Transmit { conn, frame } => {
                    if let Some(h) = self.conns.get_mut(&conn)
                        && let Some(text) = utf8(&mut self.last_frame, frame)
                    {
                        if h.pending.is_empty() {
                            self.dirty.push(conn);
                        }
                        h.pending.push(text);
                    }
                }
                Output::Ping { conn } => {
                    self.flush_pending(conn);
                    if let Some(h) = self.conns.get(&conn) {
                        let _ = h.writer.send(WriterCmd::Ping);
                    }
                }
                Output::Close { conn, code, reason } => {
                    self.flush_pending(conn);
                    if let Some(h) = self.conns.get(&conn) {
                        let _ = h.writer.send(WriterCmd::Close(code, reason));
                        h.closing.send_replace(true);
                    }
                }
                Output::AppendLog { path, mut line } => {
                    if line.last() == Some(&b'\n') {
                        line.truncate(line.len() - 1);
                    }
                    if let Some(l) = &self.logs {
                        l.append(path, line);
                    }
                }
                Output::Audit(rec) => {
                    if let Some(l) = &self.logs {
                        let path = self
                            .base_dir
                            .join(".mew")
                            .join("logs")
                            .join(rec.file().file_name());
                        l.append(path, Bytes::from(rec.to_json_line()));
                    }
                }
                Output::Event(e) => log_event(&e),
            }
        }
        let mut dirty = std::mem::take(&mut self.dirty);
        for conn in dirty.drain(..) {
            self.flush_pending(conn);
        }
        self.dirty = dirty;
        self.last_frame = None;
    }

    fn flush_pending(&mut self, conn: ConnId) {
        if let Some(h) = self.conns.get_mut(&conn)
            && !h.pending.is_empty()
        {
            let frames = std::mem::take(&mut h.pending);
            let _ = h.writer.send(WriterCmd::Frames(frames));
        }
    }
}

/// The frame as tungstenite text, reusing the previous conversion when the core hands out
/// the same `Bytes` again (every recipient of a broadcast).
fn utf8(last: &mut Option<(Bytes, Utf8Bytes)>, frame: Bytes) -> Option<Utf8Bytes> {
    if let Some((b, u)) = last
        && b.as_ptr() == frame.as_ptr()
        && b.len() == frame.len()
    {
        return Some(u.clone());
    }
    match Utf8Bytes::try_from(frame.clone()) {
        Ok(u) => {
            *last = Some((frame, u.clone()));
            Some(u)
        }
        Err(_) => {
            tracing::error!("the core produced a frame that is not UTF-8; dropped");
            None
        }
    }
}

fn log_event(e: &GatewayEvent) {
    match e {
        GatewayEvent::Joined { .. } | GatewayEvent::Left { .. } => tracing::info!("{e:?}"),
        GatewayEvent::Refused { .. } => tracing::debug!("{e:?}"),
        _ => tracing::info!("{e:?}"),
    }
}
