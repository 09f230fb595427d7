//! `/mcp`: the space as an MCP server over Streamable HTTP, for MCP hosts.
//!
//! Each host session runs a [`HostSession`] (the protocol, in the core) in its own task,
//! joined to the space's core task over the same channel a socket's connection uses, with
//! the gateway's checks and capabilities for the host's credential: it shows in presence and
//! the audit trail like any participant. A session of the 2025 revisions begins with
//! `initialize` and is named by `Mcp-Session-Id` (192 bits from the OS CSPRNG) until DELETE
//! or [`McpEndpoint::idle_timeout`]; requests of the stateless revision share one session per
//! credential. Which request goes to which session, and when one ends, are the rules of
//! [`mew_core::front::sessions`]; this module carries them out. A host authenticates as a WebSocket join does (`Authorization: Bearer`, a
//! token or a JWT); a host on this machine without one is admitted as
//! `gateway.mcp.loopback_as` when `space.yaml` names it.
//!
//! Every request is answered on its own POST: a JSON body when the answer is all there is,
//! else an event stream (progress, logs, the member's questions, then the answer). A
//! connection whose answer had a length stays open for the host's next request (HTTP/1.1
//! keep-alive, within [`http::KEEP_ALIVE_IDLE`] and [`http::KEEP_ALIVE_REQUESTS`]); an event
//! stream ends its connection. `GET`
//! opens the session's standalone stream (`list_changed`). Bounds: sessions at once
//! ([`McpEndpoint::max_sessions`], then 503), a body at most the space's frame size (413),
//! [`STREAM_QUEUE`] messages waiting for one stream (a host that does not read loses the
//! stream), [`WRITE_WITHIN`] for one write, and the session's open requests (the core's).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_channel::oneshot;
use futures_util::FutureExt;
use mew_core::front::sessions::{self, Route, Sessions};
use mew_core::front::{self, FrontConfig, HostMessage, HostSession, Output};
use mew_core::gateway::McpEndpoint;
use mew_core::mcp::jsonrpc::RpcMessage;
use mew_core::participant::{self, GatewayInputs, Participant, ParticipantConfig};
use serde_json::{Value, json};

use crate::clock;
use crate::server::ServerRuntime;
use crate::server::conn::CoreInput;
use crate::server::host::{Input, WriterCmd};
use crate::server::http::{self, RequestHead};

/// Messages that may wait for one stream of a host.
pub const STREAM_QUEUE: usize = 256;
/// How long one write to a host may wait.
pub const WRITE_WITHIN: Duration = Duration::from_secs(15);
/// How long a new session may take to join the space.
const JOIN_WITHIN: Duration = Duration::from_secs(10);
/// Commands waiting for one session.
const SESSION_QUEUE: usize = 64;

/// What an HTTP request asks of a session.
enum ToSession {
    /// A message of the host; for a request, where its stream goes.
    Message(RpcMessage, Option<async_channel::Sender<HostMessage>>),
    /// The standalone stream.
    Listen(async_channel::Sender<HostMessage>),
    /// DELETE.
    Close,
}

/// How a request reaches its session's task.
#[derive(Clone)]
struct Handle {
    tx: async_channel::Sender<ToSession>,
}

/// The `/mcp` endpoint of one server.
pub(crate) struct McpFront {
    options: McpEndpoint,
    loopback_token: Option<String>,
    /// Which request goes to which session (the rules are the core's).
    sessions: Mutex<Sessions<Handle>>,
}

impl McpFront {
    pub(crate) fn new(options: McpEndpoint, loopback_token: Option<String>) -> Self {
        let sessions = Sessions::new(options.max_sessions, options.idle_timeout);
        McpFront {
            options,
            loopback_token,
            sessions: Mutex::new(sessions),
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions<Handle>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ends the sessions idle too long; whether `key` is one of them.
    fn expire(&self, key: &str) -> bool {
        let mut expired = Vec::new();
        {
            let mut s = self.sessions();
            s.handle_timeout(clock::now());
            while let Some(sessions::Output::Expire(k, h)) = s.poll_output() {
                expired.push((k, h));
            }
        }
        let mut me = false;
        for (k, h) in expired {
            me |= k == key;
            let _ = h.tx.try_send(ToSession::Close);
        }
        me
    }
}

/// A request under way in a session: an idle session is one without any.
struct Busy {
    front: Arc<McpFront>,
    key: String,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.front.sessions().end_request(clock::now(), &self.key);
    }
}

/// What a request needs of its server.
pub(crate) struct Endpoint {
    pub(crate) front: Arc<McpFront>,
    pub(crate) core: async_channel::Sender<CoreInput>,
    pub(crate) space: String,
    pub(crate) limits: mew_core::Limits,
    pub(crate) report_every: (usize, usize),
    /// The request came from this machine.
    pub(crate) local: bool,
    /// The space verifies JWTs from this issuer: a 401 points at its metadata.
    pub(crate) issuer: Option<String>,
    /// The port speaks TLS.
    pub(crate) tls: bool,
}

fn head_bytes(
    status: u16,
    content_type: &str,
    extra: &[(&str, String)],
    len: Option<usize>,
    keep: bool,
) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let keep = keep && len.is_some();
    let mut h = if keep {
        format!(
            "HTTP/1.1 {status} {reason}\r\nConnection: keep-alive\r\nKeep-Alive: timeout={}\r\n",
            http::KEEP_ALIVE_IDLE.as_secs()
        )
    } else {
        format!("HTTP/1.1 {status} {reason}\r\nConnection: close\r\n")
    };
    if !content_type.is_empty() {
        h.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    if let Some(n) = len {
        h.push_str(&format!("Content-Length: {n}\r\n"));
    } else {
        h.push_str("Cache-Control: no-cache\r\n");
    }
    for (k, v) in extra {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    h.into_bytes()
}

/// Writes a JSON answer; whether the connection may carry another request (`keep` and the
/// answer written).
async fn respond<R: ServerRuntime>(
    sock: &mut R::Sock,
    keep: bool,
    status: u16,
    body: &Value,
    extra: &[(&str, String)],
) -> bool {
    let b = serde_json::to_vec(body).unwrap_or_default();
    let mut out = head_bytes(status, "application/json", extra, Some(b.len()), keep);
    out.extend_from_slice(&b);
    write::<R>(sock, &out).await && keep
}

fn error_body(message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": message}})
}

/// Serves one HTTP request for `/mcp` to its end. `keep_alive`: the connection may carry
/// another request after this one; then the bytes read past this request are returned if
/// it does (the body was read whole and the answer had a length).
pub(crate) async fn serve<R: ServerRuntime>(
    ep: &Endpoint,
    sock: &mut R::Sock,
    head: RequestHead,
    body: Vec<u8>,
    keep_alive: bool,
) -> Option<Vec<u8>> {
    let mut rest = Vec::new();
    exchange::<R>(ep, sock, head, body, keep_alive, &mut rest)
        .await
        .then_some(rest)
}

/// [`serve`]: `true` when the connection may carry another request (whose first bytes, if
/// any arrived, are in `rest`).
async fn exchange<R: ServerRuntime>(
    ep: &Endpoint,
    sock: &mut R::Sock,
    head: RequestHead,
    mut body: Vec<u8>,
    keep_alive: bool,
    rest: &mut Vec<u8>,
) -> bool {
    // Until the body is read whole, an answer ends the connection.
    let mut keep = false;
    if let Err(r) = front::http::check_origin(head.header("host"), head.header("origin"), ep.local)
    {
        return respond::<R>(sock, keep, r.status, &r.body, &[]).await;
    }
    if head.path.starts_with(PRM_PATH) {
        return metadata::<R>(ep, sock, &head).await;
    }
    let session_id = head.header(front::http::SESSION_HEADER).map(str::to_owned);
    match head.method.as_str() {
        "POST" => {}
        "GET" => {
            let Some(credential) = credential_of(ep, &head) else {
                return unauthorized::<R>(sock, false, ep, &head).await;
            };
            return listen::<R>(ep, sock, session_id, &credential).await;
        }
        "DELETE" => {
            let Some(credential) = credential_of(ep, &head) else {
                return unauthorized::<R>(sock, keep, ep, &head).await;
            };
            let found = ep
                .front
                .sessions()
                .delete(session_id.as_deref(), &credential);
            return match found {
                Ok(h) => {
                    let _ = h.tx.try_send(ToSession::Close);
                    respond::<R>(sock, keep, 200, &json!({}), &[]).await
                }
                Err(r) => respond::<R>(sock, keep, r.status, &r.body, &[]).await,
            };
        }
        _ => {
            let allow = [("Allow", "GET, POST, DELETE".to_owned())];
            return respond::<R>(sock, keep, 405, &error_body("method not allowed"), &allow).await;
        }
    }
    if let Err(r) =
        front::http::check_post_headers(head.header("content-type"), head.header("accept"))
    {
        return respond::<R>(sock, keep, r.status, &r.body, &[]).await;
    }
    let len = match head.content_length(ep.limits.max_frame_bytes) {
        Ok(l) => l,
        Err(e) => {
            return respond::<R>(sock, keep, e.status(), &error_body(&e.to_string()), &[]).await;
        }
    };
    while body.len() < len {
        let mut chunk = vec![0u8; (len - body.len()).min(16 * 1024)];
        match clock::timeout::<R, _>(WRITE_WITHIN, R::read(sock, &mut chunk)).await {
            Some(Ok(n)) if n > 0 => body.extend_from_slice(&chunk[..n]),
            _ => return respond::<R>(sock, keep, 400, &error_body("incomplete body"), &[]).await,
        }
    }
    *rest = body.split_off(len);
    keep = keep_alive;
    let message = match front::http::read_body(&body) {
        Ok(m) => m,
        Err(r) => return respond::<R>(sock, keep, r.status, &r.body, &[]).await,
    };
    let version_header = head.header(front::http::VERSION_HEADER);
    let stateless = session_id.is_none() && front::http::is_stateless(&message, version_header);
    let check = if stateless {
        front::http::check_stateless(&message, version_header)
    } else {
        front::http::check_session_header(version_header)
    };
    if let Err(r) = check {
        return respond::<R>(sock, keep, r.status, &r.body, &[]).await;
    }
    let Some(credential) = credential_of(ep, &head) else {
        return unauthorized::<R>(sock, keep, ep, &head).await;
    };
    let is_initialize =
        matches!(&message, RpcMessage::Request { method, .. } if method == "initialize");
    let request = sessions::Request {
        session_id: session_id.as_deref(),
        credential: &credential,
        stateless,
        initialize: is_initialize,
    };
    let route = ep.front.sessions().route(clock::now(), request);
    let opened = matches!(route, Route::Open { .. });
    let (key, handle, new_id) = match route {
        Route::Use(key, handle) => (key, handle, None),
        Route::Open { announce } => {
            let key = crate::secret::token();
            match open_session::<R>(ep, request, &key).await {
                Ok(h) => (key.clone(), h, announce.then_some(key)),
                Err(r) => return respond::<R>(sock, keep, r.status, &r.body, &[]).await,
            }
        }
        Route::Refuse(r) => return respond::<R>(sock, keep, r.status, &r.body, &[]).await,
    };
    let _busy = Busy {
        front: ep.front.clone(),
        key,
    };
    let mut extra = Vec::new();
    if let Some(id) = &new_id {
        extra.push(("Mcp-Session-Id", id.clone()));
    }
    if !matches!(message, RpcMessage::Request { .. }) {
        if handle
            .tx
            .try_send(ToSession::Message(message, None))
            .is_err()
        {
            return respond::<R>(sock, keep, 503, &error_body("the session is busy"), &[]).await;
        }
        let out = head_bytes(202, "", &extra, Some(0), keep);
        return write::<R>(sock, &out).await && keep;
    }
    let (tx, rx) = async_channel::bounded::<HostMessage>(STREAM_QUEUE);
    // A session that ended as it began was not the host's to lose: the space is busy.
    let (status, why) = if opened {
        (503, "the space closed the host's new session")
    } else {
        (404, "the session ended")
    };
    if handle
        .tx
        .send(ToSession::Message(message, Some(tx)))
        .await
        .is_err()
    {
        return respond::<R>(sock, keep, status, &error_body(why), &[]).await;
    }
    let Ok(first) = rx.recv().await else {
        return respond::<R>(sock, keep, status, &error_body(why), &[]).await;
    };
    if first.last {
        let status = if stateless {
            front::http::stateless_status(&first.message)
        } else {
            200
        };
        return respond::<R>(sock, keep, status, &first.message, &extra).await;
    }
    let mut out = head_bytes(200, "text/event-stream", &extra, None, false);
    out.extend_from_slice(&event(&first.message));
    if !write::<R>(sock, &out).await {
        return false;
    }
    while let Ok(m) = rx.recv().await {
        if !write::<R>(sock, &event(&m.message)).await || m.last {
            break;
        }
    }
    let _ = R::shutdown(sock).await;
    false
}

async fn write<R: ServerRuntime>(sock: &mut R::Sock, bytes: &[u8]) -> bool {
    matches!(
        clock::timeout::<R, _>(WRITE_WITHIN, R::write_all(sock, bytes)).await,
        Some(Ok(()))
    )
}

fn event(m: &Value) -> Vec<u8> {
    format!("event: message\ndata: {}\n\n", front::message_text(m)).into_bytes()
}

fn credential_of(ep: &Endpoint, head: &RequestHead) -> Option<String> {
    let loopback = ep.front.loopback_token.as_deref();
    front::http::credential(head.bearer(), loopback, ep.local).map(str::to_owned)
}

async fn unauthorized<R: ServerRuntime>(
    sock: &mut R::Sock,
    keep: bool,
    ep: &Endpoint,
    head: &RequestHead,
) -> bool {
    let origin = front::http::origin(ep.tls, head.header("host"));
    let challenge = front::http::challenge(&origin, ep.issuer.is_some());
    respond::<R>(
        sock,
        keep,
        401,
        &error_body("an Authorization: Bearer token (or JWT) is required"),
        &[("WWW-Authenticate", challenge)],
    )
    .await
}

/// Where protected resource metadata (RFC 9728) of `/mcp` is served.
pub use front::http::PRM_PATH;

/// The protected resource metadata: `/mcp` takes bearer tokens from the space's JWT issuer.
async fn metadata<R: ServerRuntime>(ep: &Endpoint, sock: &mut R::Sock, head: &RequestHead) -> bool {
    let Some(issuer) = &ep.issuer else {
        return respond::<R>(
            sock,
            false,
            404,
            &error_body("this space takes no OAuth tokens"),
            &[],
        )
        .await;
    };
    let origin = front::http::origin(ep.tls, head.header("host"));
    let body = front::http::resource_metadata(&origin, issuer);
    respond::<R>(sock, false, 200, &body, &[]).await
}

/// GET: the session's standalone stream.
async fn listen<R: ServerRuntime>(
    ep: &Endpoint,
    sock: &mut R::Sock,
    session: Option<String>,
    credential: &str,
) -> bool {
    let found = ep.front.sessions().listen(session.as_deref(), credential);
    let handle = match found {
        Ok(h) => h,
        Err(r) => {
            let allow = [("Allow", "POST, DELETE".to_owned())];
            let extra: &[(&str, String)] = if r.status == 405 { &allow } else { &[] };
            return respond::<R>(sock, false, r.status, &r.body, extra).await;
        }
    };
    let (tx, rx) = async_channel::bounded::<HostMessage>(STREAM_QUEUE);
    if handle.tx.send(ToSession::Listen(tx)).await.is_err() {
        return respond::<R>(sock, false, 404, &error_body("the session ended"), &[]).await;
    }
    if !write::<R>(
        sock,
        &head_bytes(200, "text/event-stream", &[], None, false),
    )
    .await
    {
        return false;
    }
    while let Ok(m) = rx.recv().await {
        if !write::<R>(sock, &event(&m.message)).await {
            break;
        }
    }
    let _ = R::shutdown(sock).await;
    false
}

/// Starts a session's task and waits until its participant is in the space.
async fn open_session<R: ServerRuntime>(
    ep: &Endpoint,
    request: sessions::Request<'_>,
    key: &str,
) -> Result<Handle, front::http::Refusal> {
    let credential = request.credential;
    let mut config = ParticipantConfig {
        gateway_url: "ws://in-process/mcp".into(),
        space: ep.space.clone(),
        token: credential.to_owned(),
        limits: ep.limits,
        proposal_timeout: ep.front.options.proposal_timeout,
        ..ParticipantConfig::default()
    };
    config.heartbeat.interval = None;
    // A host's session does not come back on its own: the host opens a new one.
    config.reconnect.enabled = false;
    let fc = FrontConfig {
        name: ep.space.clone(),
        ..FrontConfig::default()
    };
    let s = HostSession::new(Participant::new(config, clock::os_seed()), fc);
    let (tx, rx) = async_channel::bounded::<ToSession>(SESSION_QUEUE);
    let (ready_tx, ready_rx) = oneshot::channel::<Result<(), String>>();
    let handle = Handle { tx };
    ep.front
        .sessions()
        .open(clock::now(), key, request, handle.clone())?;
    let task = SessionTask {
        s,
        conn: None,
        core: ep.core.clone(),
        report_every: ep.report_every,
        streams: HashMap::new(),
        standalone: None,
        ready: Some(ready_tx),
    };
    let front = ep.front.clone();
    let key2 = key.to_owned();
    let idle = ep.front.options.idle_timeout;
    R::spawn(async move {
        task.run::<R>(rx, &front, &key2, idle).await;
        front.sessions().handle_ended(&key2);
    });
    let refusal = |status, why: &str| front::http::Refusal {
        status,
        body: error_body(why),
    };
    match clock::timeout::<R, _>(JOIN_WITHIN, ready_rx).await {
        Some(Ok(Ok(()))) => Ok(handle),
        Some(Ok(Err(why))) => {
            ep.front.sessions().handle_ended(key);
            Err(refusal(403, &why))
        }
        _ => {
            ep.front.sessions().handle_ended(key);
            let _ = handle.tx.try_send(ToSession::Close);
            Err(refusal(503, "the space did not admit the host in time"))
        }
    }
}

struct SessionTask {
    s: HostSession,
    conn: Option<crate::server::conn::InProcessConn>,
    core: async_channel::Sender<CoreInput>,
    report_every: (usize, usize),
    streams: HashMap<String, async_channel::Sender<HostMessage>>,
    standalone: Option<async_channel::Sender<HostMessage>>,
    ready: Option<oneshot::Sender<Result<(), String>>>,
}

impl SessionTask {
    async fn run<R: ServerRuntime>(
        mut self,
        rx: async_channel::Receiver<ToSession>,
        front: &McpFront,
        key: &str,
        idle: Duration,
    ) {
        self.s.start(clock::now());
        loop {
            if !self.carry().await {
                break;
            }
            if self.s.is_ready()
                && let Some(r) = self.ready.take()
            {
                let _ = r.send(Ok(()));
            }
            let commands = self.conn.as_ref().map(|c| c.commands.clone());
            let from_gateway = async move {
                match commands {
                    Some(c) => c.recv().await.ok(),
                    None => std::future::pending().await,
                }
            };
            // The endpoint's idle expiry is looked at again at least every `idle`: a
            // request ending does not wake this task.
            let expires = front.sessions().expires_at(key);
            let wake = [self.s.poll_timeout(), expires].into_iter().flatten().min();
            let timer = async move {
                let d = wake.map_or(idle, |at| clock::until(at).min(idle));
                R::sleep(d).await
            };
            futures_util::select_biased! {
                cmd = from_gateway.fuse() => self.gateway(cmd).await,
                m = rx.recv().fuse() => match m {
                    Ok(ToSession::Message(msg, stream)) => {
                        if let (RpcMessage::Request { id, .. }, Some(tx)) = (&msg, stream) {
                            self.streams.insert(front::rpc_key(id), tx);
                        }
                        self.s.handle_host(clock::now(), msg);
                    }
                    Ok(ToSession::Listen(tx)) => self.standalone = Some(tx),
                    Ok(ToSession::Close) | Err(_) => break,
                },
                _ = timer.fuse() => {
                    if front.expire(key) {
                        break;
                    }
                    self.s.handle_input(clock::now(), participant::Input::Timeout);
                }
            }
        }
        self.s.close(clock::now(), "the MCP host's session ended");
        let _ = self.carry().await;
        if let Some(c) = self.conn.take() {
            let _ = self.core.send(Input::Closed(c.id)).await;
        }
        // What is still queued holds its request's stream: dropped here, its request is
        // answered at once. Left in the channel, it would live as long as any sender of it
        // (the request itself holds one), and the request would wait for ever.
        rx.close();
        while rx.try_recv().is_ok() {}
    }

    /// Carries out the session's outputs; `false` when it must end.
    async fn carry(&mut self) -> bool {
        while let Some(o) = self.s.poll_output() {
            match o {
                Output::Gateway(participant::Output::Connect { headers, .. }) => {
                    if let Some(c) = self.conn.take() {
                        let _ = self.core.send(Input::Closed(c.id)).await;
                    }
                    let Some(conn) =
                        crate::server::conn::join_in_process(&self.core, &headers).await
                    else {
                        return false;
                    };
                    self.conn = Some(conn);
                    self.s
                        .handle_input(clock::now(), participant::Input::Connected);
                }
                Output::Gateway(participant::Output::Transmit(text)) => {
                    if let Some(c) = &self.conn {
                        let _ = self.core.send(Input::Frame(c.id, Bytes::from(text))).await;
                    }
                }
                Output::Gateway(participant::Output::Ping) => {
                    self.s.handle_input(clock::now(), participant::Input::Pong)
                }
                Output::Gateway(participant::Output::Disconnect { .. }) => {
                    if let Some(c) = self.conn.take() {
                        let _ = self.core.send(Input::Closed(c.id)).await;
                    }
                }
                Output::Gateway(participant::Output::Event(_)) => {}
                Output::Host(m) => self.send_host(m),
                Output::Event(e) => {
                    tracing::trace!(?e, "MCP host session");
                }
                Output::End(why) => {
                    if let Some(r) = self.ready.take() {
                        let _ = r.send(Err(why));
                    }
                    return false;
                }
            }
        }
        true
    }

    fn send_host(&mut self, m: HostMessage) {
        let Some(key) = m.about.clone() else {
            if let Some(s) = &self.standalone
                && s.try_send(m).is_err()
            {
                // Not read: the stream is given up; the host may open another.
                self.standalone = None;
            }
            return;
        };
        let last = m.last;
        let Some(tx) = self.streams.get(&key) else {
            return;
        };
        if tx.try_send(m).is_err() || last {
            self.streams.remove(&key);
        }
    }

    async fn gateway(&mut self, cmd: Option<WriterCmd>) {
        let taken = crate::server::conn::take_command(
            &mut self.conn,
            &self.core,
            self.report_every,
            &mut self.s,
            cmd,
        )
        .await;
        if let Some(closed) = taken {
            self.s.handle_input(
                clock::now(),
                participant::Input::Disconnected {
                    reason: &closed.describe(),
                },
            );
        }
    }
}
