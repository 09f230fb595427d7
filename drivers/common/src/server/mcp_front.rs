//! `/mcp`: the space as an MCP server over Streamable HTTP, for MCP hosts.
//!
//! Each host session runs a [`HostSession`] (the protocol, in the core) in its own task,
//! joined to the space's core task over the same channel a socket's connection uses, with
//! the gateway's checks and capabilities for the host's credential: it shows in presence and
//! the audit trail like any participant. A session of the 2025 revisions begins with
//! `initialize` and is named by `Mcp-Session-Id` (192 bits from the OS CSPRNG) until DELETE
//! or [`McpEndpoint::idle_timeout`]; requests of the stateless revision share one session per
//! credential. A host authenticates as a WebSocket join does (`Authorization: Bearer`, a
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

#[derive(Clone)]
struct Handle {
    tx: async_channel::Sender<ToSession>,
    /// The credential that opened it: a request of another cannot use it.
    credential: String,
}

/// The `/mcp` endpoint of one server.
pub(crate) struct McpFront {
    options: McpEndpoint,
    loopback_token: Option<String>,
    sessions: Mutex<HashMap<String, Handle>>,
}

impl McpFront {
    pub(crate) fn new(options: McpEndpoint, loopback_token: Option<String>) -> Self {
        McpFront {
            options,
            loopback_token,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Handle>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// A response head; `keep`: the connection stays open for another request (only with a
/// length: an event stream ends at the close).
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
        "GET" => return listen::<R>(ep, sock, session_id).await,
        "DELETE" => {
            let handle = session_id
                .as_deref()
                .and_then(|s| ep.front.sessions().remove(s));
            let status = match handle {
                Some(h) => {
                    let _ = h.tx.try_send(ToSession::Close);
                    200
                }
                None => 404,
            };
            return respond::<R>(sock, keep, status, &json!({}), &[]).await;
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
    // Who the host is.
    let credential = match head.bearer() {
        Some(b) => b.to_owned(),
        None => match (&ep.front.loopback_token, ep.local) {
            (Some(t), true) => t.clone(),
            _ => return unauthorized::<R>(sock, keep, ep).await,
        },
    };
    let is_initialize =
        matches!(&message, RpcMessage::Request { method, .. } if method == "initialize");
    let (handle, new_id) = if let Some(sid) = &session_id {
        let found = ep.front.sessions().get(sid).cloned();
        match found {
            Some(h) if h.credential == credential => (h, None),
            Some(_) => {
                return respond::<R>(
                    sock,
                    keep,
                    403,
                    &error_body("this session belongs to another credential"),
                    &[],
                )
                .await;
            }
            None => {
                return respond::<R>(
                    sock,
                    keep,
                    404,
                    &error_body("unknown or ended session"),
                    &[],
                )
                .await;
            }
        }
    } else if stateless || is_initialize {
        let key = if stateless {
            format!("stateless:{}", credential_key(&credential))
        } else {
            crate::secret::token()
        };
        let found = stateless
            .then(|| ep.front.sessions().get(&key).cloned())
            .flatten()
            .filter(|h| h.credential == credential && !h.tx.is_closed());
        match found {
            Some(h) => (h, None),
            None => match open_session::<R>(ep, &credential, &key).await {
                Ok(h) => (h, (!stateless).then_some(key)),
                Err((status, why)) => {
                    return respond::<R>(sock, keep, status, &error_body(&why), &[]).await;
                }
            },
        }
    } else {
        return respond::<R>(
            sock,
            keep,
            400,
            &error_body("Bad Request: Mcp-Session-Id header is required (initialize first)"),
            &[],
        )
        .await;
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
    if handle
        .tx
        .send(ToSession::Message(message, Some(tx)))
        .await
        .is_err()
    {
        return respond::<R>(sock, keep, 404, &error_body("the session ended"), &[]).await;
    }
    let Ok(first) = rx.recv().await else {
        return respond::<R>(sock, keep, 503, &error_body("the session ended"), &[]).await;
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

/// A short stable key of a credential (the session map never holds the credential as key);
/// a keyed SipHash, so a collision only opens a fresh session (the credential is compared).
fn credential_key(credential: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    // A keyed hash: the same credential finds its session within this process only.
    static KEYS: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    let mut h = KEYS.get_or_init(Default::default).build_hasher();
    h.write(credential.as_bytes());
    format!("{:016x}", h.finish())
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

async fn unauthorized<R: ServerRuntime>(sock: &mut R::Sock, keep: bool, ep: &Endpoint) -> bool {
    let mut challenge = "Bearer".to_owned();
    if ep.issuer.is_some() {
        challenge.push_str(" resource_metadata=\"/.well-known/oauth-protected-resource/mcp\"");
    }
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
pub const PRM_PATH: &str = "/.well-known/oauth-protected-resource";

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
    let scheme = if ep.tls { "https" } else { "http" };
    let host = head.header("host").unwrap_or("localhost");
    let body = json!({
        "resource": format!("{scheme}://{host}/mcp"),
        "authorization_servers": [issuer],
        "bearer_methods_supported": ["header"],
    });
    respond::<R>(sock, false, 200, &body, &[]).await
}

/// GET: the session's standalone stream.
async fn listen<R: ServerRuntime>(
    ep: &Endpoint,
    sock: &mut R::Sock,
    session: Option<String>,
) -> bool {
    let Some(handle) = session.and_then(|s| ep.front.sessions().get(&s).cloned()) else {
        let allow = [("Allow", "POST, DELETE".to_owned())];
        return respond::<R>(sock, false, 405, &error_body("GET needs a session"), &allow).await;
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
    credential: &str,
    key: &str,
) -> Result<Handle, (u16, String)> {
    {
        let sessions = ep.front.sessions();
        if sessions.len() >= ep.front.options.max_sessions {
            return Err((503, "too many MCP sessions".into()));
        }
    }
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
    let handle = Handle {
        tx,
        credential: credential.to_owned(),
    };
    ep.front.sessions().insert(key.to_owned(), handle.clone());
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
        task.run::<R>(rx, idle).await;
        front.sessions().remove(&key2);
    });
    match clock::timeout::<R, _>(JOIN_WITHIN, ready_rx).await {
        Some(Ok(Ok(()))) => Ok(handle),
        Some(Ok(Err(why))) => {
            ep.front.sessions().remove(key);
            Err((403, why))
        }
        _ => {
            ep.front.sessions().remove(key);
            let _ = handle.tx.try_send(ToSession::Close);
            Err((503, "the space did not admit the host in time".into()))
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
        idle: Duration,
    ) {
        self.s.start(clock::now());
        let mut last_request = std::time::Instant::now();
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
            let wake = self.s.poll_timeout();
            let idle_left = idle.saturating_sub(last_request.elapsed());
            let timer = async move {
                let d = match wake {
                    Some(at) => clock::until(at).min(idle_left),
                    None => idle_left,
                };
                R::sleep(d).await
            };
            futures_util::select_biased! {
                cmd = from_gateway.fuse() => self.gateway(cmd).await,
                m = rx.recv().fuse() => match m {
                    Ok(ToSession::Message(msg, stream)) => {
                        last_request = std::time::Instant::now();
                        if let (RpcMessage::Request { id, .. }, Some(tx)) = (&msg, stream) {
                            self.streams.insert(front::rpc_key(id), tx);
                        }
                        self.s.handle_host(clock::now(), msg);
                    }
                    Ok(ToSession::Listen(tx)) => self.standalone = Some(tx),
                    Ok(ToSession::Close) | Err(_) => break,
                },
                _ = timer.fuse() => {
                    if last_request.elapsed() >= idle && self.streams.is_empty() {
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
        let now = clock::now();
        let Some(conn) = &mut self.conn else {
            return;
        };
        let id = conn.id;
        match cmd {
            Some(WriterCmd::Frames(f)) => {
                conn.taken.0 += f.messages();
                conn.taken.1 += f.bytes();
                let report =
                    conn.taken.0 >= self.report_every.0 || conn.taken.1 >= self.report_every.1;
                let taken = if report {
                    std::mem::take(&mut conn.taken)
                } else {
                    (0, 0)
                };
                for t in f.texts() {
                    if let Ok(t) = std::str::from_utf8(&t) {
                        self.s.handle_input(now, participant::Input::Frame(t));
                    }
                }
                if report {
                    let _ = self.core.send(Input::Sent(id, taken.0, taken.1)).await;
                }
            }
            Some(WriterCmd::Ping) => {
                let _ = self.core.send(Input::Pong(id)).await;
            }
            Some(WriterCmd::Close(code, reason)) => {
                let _ = self.core.send(Input::Closed(id)).await;
                self.conn = None;
                self.s.handle_input(
                    now,
                    participant::Input::Disconnected {
                        reason: &format!("closed by gateway ({code}): {reason}"),
                    },
                );
            }
            None => {
                self.conn = None;
                self.s.handle_input(
                    now,
                    participant::Input::Disconnected {
                        reason: "closed by gateway",
                    },
                );
            }
        }
    }
}
