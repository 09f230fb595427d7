//! The web page's session: `/ui/session`, a WebSocket on which the gateway serves the page
//! the core's view of the space ([`mew_core::view`]) for one participant.
//!
//! The page opens the socket on its own origin and sends its token as the first message
//! (`{"token": "...", "space": "id"}`, within [`SessionLimits::auth_within`]; never in the
//! URL). The server then runs the participant of that token inside the process: it joins the
//! space's core task over the same channel as a socket's connection (no socket and no TLS
//! between them, so a TLS space needs nothing more), with the gateway's checks and
//! capabilities for that token, and shows in presence like any connection of it. Its events
//! feed a [`View`]; every change of the view goes to the page as one JSON text message
//! (`{"snapshot": ...}` first, then increments), and every message of the page
//! (`{"command": ...}`) goes to the view, whose actions the participant carries out. The page
//! holds no protocol rule: it draws what it is sent and forwards clicks and keys.
//!
//! Everything is bounded: sessions at once ([`SessionLimits::max_sessions`]; more are
//! answered 503), the size of a message of the page ([`SessionLimits::max_command`]; a
//! larger one closes the session with 1009), and the changes waiting for the page
//! ([`SessionLimits::queue_changes`], [`SessionLimits::queue_bytes`]): a page that stops
//! reading is closed (1008, with the reason) rather than buffered for.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures_channel::oneshot;
use futures_util::{FutureExt, Sink, SinkExt, Stream, StreamExt};
use mew_core::Envelope;
use mew_core::participant::{self, Draft, Event, Participant, ParticipantConfig, RequestId};
use mew_core::view::{self, View};
use serde_json::{Value, json};
use tungstenite::error::CapacityError;
use tungstenite::{Error as WsError, Message};

use crate::Response;
use crate::clock::{self, Sleep};
use crate::server::ServerRuntime;
use crate::server::conn::CoreInput;
use crate::server::frames::{Batch, RawSocket};
use crate::server::host::{HttpRequest, Input, WRITE_BATCH, WriterCmd};
use crate::server::http::RequestHead;
use crate::server::route::{Route, UI_SESSION as PATH};
use crate::server::ws;

/// Bounds of the page sessions of one server.
#[derive(Debug, Clone)]
pub struct SessionLimits {
    /// Sessions open at once; an upgrade past it is answered 503.
    pub max_sessions: usize,
    /// How long the page has, once its socket is open, to send its token.
    pub auth_within: Duration,
    /// Bytes of one message of the page (its token, a command) at most.
    pub max_command: usize,
    /// Changes waiting for the page at most: past it the page is closed as not reading.
    pub queue_changes: usize,
    /// Bytes of changes waiting for the page at most (same consequence).
    pub queue_bytes: usize,
    /// How long one write to the page may wait on its socket before the page is given up.
    pub write_within: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max_sessions: 256,
            auth_within: Duration::from_secs(10),
            max_command: 64 * 1024,
            queue_changes: 4096,
            queue_bytes: 16 * 1024 * 1024,
            write_within: Duration::from_secs(15),
        }
    }
}

/// The sessions of one server: their bounds and how many are open.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    limits: SessionLimits,
    open: AtomicUsize,
}

/// A session's place in the count, given back when dropped.
struct SessionSlot<'a>(&'a AtomicUsize);

impl Drop for SessionSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Sessions {
    pub(crate) fn new(limits: SessionLimits) -> Self {
        Sessions {
            limits,
            open: AtomicUsize::new(0),
        }
    }

    fn take(&self) -> Option<SessionSlot<'_>> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limits.max_sessions).then_some(n + 1)
            })
            .ok()
            .map(|_| SessionSlot(&self.open))
    }
}

/// What a session needs of its server.
pub(crate) struct Endpoint<'a> {
    pub(crate) sessions: &'a Sessions,
    pub(crate) core: async_channel::Sender<CoreInput>,
    /// The id of the space the server serves.
    pub(crate) space: &'a str,
    /// The space's limits (the participant reads frames within them).
    pub(crate) limits: mew_core::Limits,
    /// How often written frames are reported to the core (see [`crate::server::host`]).
    pub(crate) report_every: (usize, usize),
}

/// Why the session ended, as the page's close frame says it.
struct Ending(u16, String);

impl Ending {
    fn policy(reason: impl Into<String>) -> Self {
        Ending(1008, reason.into())
    }
}

/// Serves an upgrade request for [`PATH`] to its end.
pub(crate) async fn serve<R: ServerRuntime>(
    ep: Endpoint<'_>,
    mut sock: R::Sock,
    head: RequestHead,
    leftover: Vec<u8>,
) {
    let refuse = |status: u16, code: &str, msg: &str| Response::error(status, code, msg);
    if let Some(origin) = head.header("origin")
        && !same_origin(origin, head.header("host"))
    {
        // A page of another site cannot hold a session here, token or not.
        let r = refuse(
            403,
            "forbidden",
            "the session is for the page of this gateway",
        );
        let _ = R::write_all(&mut sock, &r.to_bytes()).await;
        return;
    }
    let accept = match ws::accept_key(&head) {
        Ok(a) => a,
        Err(e) => {
            let r = refuse(e.status(), "bad_upgrade", &e.to_string());
            let _ = R::write_all(&mut sock, &r.to_bytes()).await;
            return;
        }
    };
    let Some(_slot) = ep.sessions.take() else {
        let r = refuse(503, "unavailable", "too many page sessions");
        let _ = R::write_all(&mut sock, &r.to_bytes()).await;
        return;
    };
    if R::write_all(&mut sock, &ws::switching_protocols(&accept))
        .await
        .is_err()
    {
        return;
    }
    let limits = ep.sessions.limits.clone();
    let config = crate::websocket::ws_config(limits.max_command)
        .read_buffer_size(4 * 1024)
        .write_buffer_size(0);
    let ws = R::websocket(sock, leftover, config).await;
    let page = Arc::new(Mutex::new(ws));
    let (nudge_tx, nudge_rx) = async_channel::bounded::<()>(1);
    let (text_tx, text_rx) = async_channel::bounded::<Bytes>(limits.queue_changes.max(1));
    let (close_tx, close_rx) = async_channel::bounded::<Ending>(1);
    let queued = Arc::new(AtomicUsize::new(0));
    let (done_tx, done_rx) = oneshot::channel::<()>();
    R::spawn(page_writer::<R, _, _>(
        page.clone(),
        R::raw,
        WriterEnds {
            texts: text_rx,
            closes: close_rx,
            nudge: nudge_rx,
            queued: queued.clone(),
            within: limits.write_within,
            _done: done_tx,
        },
    ));
    let reader = PageReader {
        ws: page,
        raw: R::raw,
        nudge: nudge_tx,
    };
    let out = PageOut {
        texts: text_tx,
        queued,
        max_bytes: limits.queue_bytes,
    };
    let ending = session::<R, _, _>(&ep, &limits, &reader, &out).await;
    tracing::debug!(code = ending.0, reason = %ending.1, "page session ended");
    let _ = close_tx.try_send(ending);
    drop(out);
    // The writer sends the close frame (or the reply to the page's) and stops.
    let _ = clock::timeout::<R, _>(limits.write_within, done_rx).await;
}

/// Whether `origin` (`scheme://host[:port]`) names the host the request was sent to.
fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let Some(host) = host else { return false };
    let authority = origin.split_once("://").map_or("", |(_, a)| a);
    authority.eq_ignore_ascii_case(host.trim())
}

// ---- the page's socket ---------------------------------------------------------------------

/// The page's WebSocket, shared by the session (which reads it) and its writer: each locks it
/// only within one poll, never across an await.
type SharedWs<W> = Arc<Mutex<W>>;

fn lock<W>(ws: &SharedWs<W>) -> MutexGuard<'_, W> {
    ws.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

struct PageReader<W, X> {
    ws: SharedWs<W>,
    raw: fn(&mut W) -> &mut X,
    /// Wakes the writer when the WebSocket layer queued a frame of its own (a pong).
    nudge: async_channel::Sender<()>,
}

/// What the page sent.
enum FromPage {
    Text(String),
    /// Over [`SessionLimits::max_command`].
    TooLong(usize),
    /// Closed, or the connection failed.
    Gone,
}

impl<W, X> PageReader<W, X>
where
    W: Stream<Item = Result<Message, WsError>> + Sink<Message, Error = WsError> + Unpin,
    X: RawSocket,
{
    async fn next(&self) -> FromPage {
        loop {
            let msg = std::future::poll_fn(|cx| {
                let mut g = lock(&self.ws);
                let r = g.poll_next_unpin(cx);
                if !(self.raw)(&mut g).control().is_empty() {
                    let _ = self.nudge.try_send(());
                }
                r
            })
            .await;
            return match msg {
                Some(Ok(Message::Text(t))) => FromPage::Text(t.as_str().to_owned()),
                Some(Ok(Message::Binary(b))) => match String::from_utf8(b.to_vec()) {
                    Ok(t) => FromPage::Text(t),
                    Err(_) => FromPage::Gone,
                },
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                Some(Err(WsError::Capacity(CapacityError::MessageTooLong { size, .. }))) => {
                    FromPage::TooLong(size)
                }
                Some(Ok(Message::Close(_))) => {
                    // The reply goes to the control bytes, which the writer sends.
                    let _ = std::future::poll_fn(|cx| lock(&self.ws).poll_flush_unpin(cx)).await;
                    FromPage::Gone
                }
                Some(Err(_)) | None => FromPage::Gone,
            };
        }
    }
}

/// The session's end of the queue to the page.
struct PageOut {
    texts: async_channel::Sender<Bytes>,
    /// Bytes queued and not yet taken by the writer.
    queued: Arc<AtomicUsize>,
    max_bytes: usize,
}

impl PageOut {
    /// Queues one message; `Err` when the page is too far behind (or gone).
    fn send(&self, text: Bytes) -> Result<(), Ending> {
        let behind = || Ending::policy("the page is not reading its session");
        let len = text.len();
        if self.queued.load(Ordering::Acquire) + len > self.max_bytes {
            return Err(behind());
        }
        self.queued.fetch_add(len, Ordering::AcqRel);
        self.texts.try_send(text).map_err(|e| match e {
            async_channel::TrySendError::Full(_) => behind(),
            async_channel::TrySendError::Closed(_) => Ending(1001, "the page is gone".into()),
        })
    }

    fn change(&self, c: &view::Change) -> Result<(), Ending> {
        match serde_json::to_vec(c) {
            Ok(b) => self.send(Bytes::from(b)),
            Err(e) => Err(Ending(1011, format!("cannot encode the view: {e}"))),
        }
    }
}

struct WriterEnds {
    texts: async_channel::Receiver<Bytes>,
    closes: async_channel::Receiver<Ending>,
    nudge: async_channel::Receiver<()>,
    queued: Arc<AtomicUsize>,
    within: Duration,
    /// Dropped when the writer ends.
    _done: oneshot::Sender<()>,
}

/// Writes the queued messages to the page's socket, and the close frame last.
async fn page_writer<S: Sleep, W, X: RawSocket>(
    ws: SharedWs<W>,
    raw: fn(&mut W) -> &mut X,
    ends: WriterEnds,
) {
    let WriterEnds {
        texts,
        closes,
        nudge,
        queued,
        within,
        _done,
    } = ends;
    let mut batch = Batch::default();
    let mut reading = true;
    loop {
        let mut ending = None;
        let mut first = None;
        let nudged = async {
            if reading {
                nudge.recv().await
            } else {
                std::future::pending().await
            }
        };
        futures_util::select_biased! {
            c = closes.recv().fuse() => ending = Some(c.unwrap_or(Ending(1000, String::new()))),
            t = texts.recv().fuse() => match t {
                Ok(t) => first = Some(t),
                // The session is gone: its ending is on the way.
                Err(_) => ending = Some(closes.recv().await.unwrap_or(Ending(1000, String::new()))),
            },
            n = nudged.fuse() => reading = n.is_ok(),
        }
        batch.take_control(raw(&mut lock(&ws)).control());
        let mut n = 0;
        while let Some(t) = first.take().or_else(|| {
            (ending.is_none() && n < WRITE_BATCH)
                .then(|| texts.try_recv().ok())
                .flatten()
        }) {
            queued.fetch_sub(t.len(), Ordering::AcqRel);
            batch.push_text(t);
            n += 1;
        }
        if let Some(Ending(code, reason)) = &ending {
            batch.push_close(*code, reason);
        }
        let write = std::future::poll_fn(|cx| batch.poll_write(cx, raw(&mut lock(&ws))));
        let written = matches!(clock::timeout::<S, _>(within, write).await, Some(Ok(())));
        if ending.is_some() || !written {
            return;
        }
    }
}

// ---- the session ---------------------------------------------------------------------------

async fn session<R, W, X>(
    ep: &Endpoint<'_>,
    limits: &SessionLimits,
    page: &PageReader<W, X>,
    out: &PageOut,
) -> Ending
where
    R: ServerRuntime,
    W: Stream<Item = Result<Message, WsError>> + Sink<Message, Error = WsError> + Unpin,
    X: RawSocket,
{
    let first = match clock::timeout::<R, _>(limits.auth_within, page.next()).await {
        None => return Ending::policy("no token in time"),
        Some(FromPage::TooLong(n)) => return too_long(n, limits),
        Some(FromPage::Gone) => return Ending(1000, String::new()),
        Some(FromPage::Text(t)) => t,
    };
    let auth = serde_json::from_str::<Value>(&first).unwrap_or_default();
    let Some(token) = auth["token"].as_str().filter(|t| !t.is_empty()) else {
        return Ending::policy("the first message is {\"token\": ..., \"space\": ...}");
    };
    if let Some(s) = auth["space"].as_str()
        && s != ep.space
    {
        return Ending::policy(format!("this gateway serves space {:?}", ep.space));
    }
    let mut config = ParticipantConfig {
        gateway_url: format!("ws://in-process{PATH}"),
        space: ep.space.to_owned(),
        token: token.to_owned(),
        limits: ep.limits,
        ..ParticipantConfig::default()
    };
    // Each member's tools are listed (when allowed), as the terminal does.
    config.discovery.auto = true;
    // The connection is inside the process: nothing to ping.
    config.heartbeat.interval = None;
    let mut s = Session {
        p: Participant::new(config, clock::os_seed()),
        // Whose view it is comes with the welcome.
        view: View::new("", view::ViewLimits::default()),
        fulfils: VecDeque::new(),
        conn: None,
        core: ep.core.clone(),
        report_every: ep.report_every,
        ready: false,
        want_history: None,
        quit: false,
    };
    let (hist_tx, hist_rx) = async_channel::bounded::<History>(1);
    // A server's questions to the person come to the view instead of being refused.
    for m in view::FORWARDED {
        s.p.forward_method(*m);
    }
    s.p.start(clock::now());
    loop {
        if let Err(e) = s.pump(out).await {
            s.leave().await;
            return e;
        }
        if let Some(since) = s.want_history.take()
            && let Some(ask) = s.history_request(since, &hist_tx)
        {
            R::spawn(ask);
        }
        if s.quit {
            s.leave().await;
            return Ending(1000, "left the space".into());
        }
        let commands = s.conn.as_ref().map(|c| c.commands.clone());
        let from_gateway = async move {
            match commands {
                Some(c) => c.recv().await.ok(),
                None => std::future::pending().await,
            }
        };
        let wake = s.p.poll_timeout();
        let timer = async move {
            match wake {
                Some(at) => R::sleep(clock::until(at)).await,
                None => std::future::pending().await,
            }
        };
        futures_util::select_biased! {
            cmd = from_gateway.fuse() => if let Err(e) = s.gateway_command(cmd).await {
                s.leave().await;
                return e;
            },
            msg = page.next().fuse() => match msg {
                FromPage::Text(t) => {
                    if let Err(e) = s.command(&t, out) {
                        s.leave().await;
                        return e;
                    }
                }
                FromPage::TooLong(n) => {
                    s.leave().await;
                    return too_long(n, limits);
                }
                FromPage::Gone => {
                    s.leave().await;
                    return Ending(1000, String::new());
                }
            },
            h = hist_rx.recv().fuse() => if let Ok(h) = h {
                s.view.handle_history(h);
            },
            _ = timer.fuse() => s.p.handle_input(clock::now(), participant::Input::Timeout),
        }
    }
}

fn too_long(n: usize, limits: &SessionLimits) -> Ending {
    Ending(
        1009,
        format!(
            "a message of {n} bytes; at most {} are taken",
            limits.max_command
        ),
    )
}

struct Session {
    p: Participant,
    view: View,
    conn: Option<crate::server::conn::InProcessConn>,
    core: async_channel::Sender<CoreInput>,
    report_every: (usize, usize),
    /// Whether the participant was welcomed once (a refusal before ends the session).
    ready: bool,
    /// The history the view asked for (after each welcome): where it starts.
    want_history: Option<Option<String>>,
    /// Approvals in flight: a failure is told in the view.
    fulfils: VecDeque<RequestId>,
    /// The person asked to leave.
    quit: bool,
}

/// Approvals in flight remembered, at most.
const MAX_FULFILS: usize = 256;

impl Session {
    /// Carries out what the participant and the view have to do, until neither has more;
    /// the view's changes go to the page.
    async fn pump(&mut self, out: &PageOut) -> Result<(), Ending> {
        loop {
            let mut busy = false;
            while let Some(o) = self.p.poll_output() {
                busy = true;
                self.carry(o).await?;
            }
            while let Some(a) = self.view.poll_action() {
                busy = true;
                self.act(a);
            }
            while let Some(c) = self.view.poll_change() {
                out.change(&c)?;
            }
            if !busy {
                return Ok(());
            }
        }
    }

    async fn carry(&mut self, o: participant::Output) -> Result<(), Ending> {
        let now = clock::now();
        match o {
            participant::Output::Connect { headers, .. } => {
                self.drop_conn().await;
                let Some(conn) = crate::server::conn::join_in_process(&self.core, &headers).await
                else {
                    return Err(Ending(1001, "the gateway is shutting down".into()));
                };
                self.conn = Some(conn);
                self.p.handle_input(now, participant::Input::Connected);
            }
            participant::Output::Transmit(text) => {
                if let Some(c) = &self.conn {
                    let _ = self.core.send(Input::Frame(c.id, Bytes::from(text))).await;
                }
            }
            // Nothing between the participant and the core can be silently lost.
            participant::Output::Ping => self.p.handle_input(now, participant::Input::Pong),
            participant::Output::Disconnect { .. } => self.drop_conn().await,
            participant::Output::Event(e) => self.event(now, e)?,
        }
        Ok(())
    }

    fn event(&mut self, now: mew_core::Time, e: Event) -> Result<(), Ending> {
        match &e {
            Event::Ready { .. } => self.ready = true,
            Event::Discovery { .. } | Event::DiscoverySettled => {
                self.view.handle_tools(&self.p.available_tools());
            }
            Event::RequestCompleted { id, result } => {
                if let Some(i) = self.fulfils.iter().position(|f| f == id) {
                    self.fulfils.remove(i);
                    if let Err(e) = result {
                        self.view.note(format!("approval failed: {e}"));
                    }
                }
            }
            Event::GatewayError { payload } if !self.ready => {
                return Err(Ending::policy(refusal(payload)));
            }
            Event::Disconnected { reason } if !self.ready => {
                return Err(Ending::policy(format!("could not join: {reason}")));
            }
            Event::Replaced { reason } => {
                return Err(Ending::policy(format!("replaced: {reason}")));
            }
            Event::GaveUp { attempts } => {
                return Err(Ending(
                    1011,
                    format!("the connection to the space was lost ({attempts} attempts)"),
                ));
            }
            _ => {}
        }
        let _ = now;
        self.view.handle_event(&e);
        Ok(())
    }

    /// Asks the core for what this participant may see of the space's history (since the
    /// last envelope the view saw, after a rejoin); the answer goes to `hist`.
    fn history_request(
        &self,
        since: Option<String>,
        hist: &async_channel::Sender<History>,
    ) -> Option<impl Future<Output = ()> + Send + 'static> {
        let me = self.p.id()?.to_owned();
        let req = HttpRequest {
            route: Route::GetMessages {
                participant: me,
                since,
            },
            bearer: Some(self.p.config().token.clone()),
            body: Bytes::new(),
        };
        let (core, hist) = (self.core.clone(), hist.clone());
        let ask = async move {
            let (tx, rx) = oneshot::channel();
            let r = match core.send(Input::Http(req, tx)).await {
                Ok(()) => match rx.await {
                    Ok(resp) if resp.status == 200 => envelopes(&resp.body),
                    Ok(resp) => Err(format!("the gateway answered {}", resp.status)),
                    Err(_) => Err("the gateway is shutting down".into()),
                },
                Err(_) => Err("the gateway is shutting down".into()),
            };
            let _ = hist.send(r).await;
        };
        Some(ask)
    }

    /// Hands a view's action to the participant; a refusal is told in the view.
    fn act(&mut self, a: view::Action) {
        let now = clock::now();
        let refused = match a {
            view::Action::Chat { text } => self
                .p
                .chat(now, &text, Vec::new())
                .err()
                .map(|e| format!("not sent: {e}")),
            view::Action::Fulfil { proposal } => match self.p.fulfil(now, &proposal) {
                Ok(id) => {
                    if self.fulfils.len() >= MAX_FULFILS {
                        self.fulfils.pop_front();
                    }
                    self.fulfils.push_back(id);
                    None
                }
                Err(e) => Some(format!("approval failed: {e}")),
            },
            view::Action::Reject { proposal, reason } => self
                .p
                .reject(now, &proposal, &reason)
                .err()
                .map(|e| format!("not rejected: {e}")),
            view::Action::Grant {
                recipient,
                capabilities,
                reason,
            } => self
                .p
                .grant(now, &recipient, capabilities, &reason)
                .err()
                .map(|e| format!("grant not sent: {e}")),
            view::Action::Revoke {
                recipient,
                capabilities,
                reason,
            } => self
                .p
                .revoke(now, &recipient, capabilities, &reason)
                .err()
                .map(|e| format!("revoke not sent: {e}")),
            view::Action::Send(v) => match Draft::from_value(&v) {
                Ok(d) => self.p.send(now, d).err().map(|e| format!("not sent: {e}")),
                Err(e) => Some(format!("not sent: {e}")),
            },
            view::Action::Answer { call, result } => self
                .p
                .complete_call(now, participant::CallId(call), Ok(result))
                .err()
                .map(|e| format!("answer not sent: {e}")),
            view::Action::Refuse {
                call,
                code,
                message,
            } => {
                let error = participant::ToolError {
                    code,
                    message,
                    data: None,
                };
                let _ = self
                    .p
                    .complete_call(now, participant::CallId(call), Err(error));
                None
            }
            view::Action::Ignore { call } => {
                let _ = self.p.decline_call(participant::CallId(call));
                None
            }
            view::Action::FetchHistory { since } => {
                self.want_history = Some(since);
                None
            }
            view::Action::Quit => {
                self.quit = true;
                None
            }
        };
        if let Some(note) = refused {
            self.view.note(note);
        }
    }

    /// One message of the page: a command for the view.
    fn command(&mut self, text: &str, out: &PageOut) -> Result<(), Ending> {
        let error = |e: String| out.send(Bytes::from(json!({ "error": e }).to_string()));
        let mut v = serde_json::from_str::<Value>(text).unwrap_or_default();
        let cmd = match serde_json::from_value::<view::Command>(v["command"].take()) {
            Ok(c) => c,
            Err(e) => return error(format!("not a command: {e}")),
        };
        if let Err(e) = self.view.handle_command(cmd) {
            return error(e.to_string());
        }
        Ok(())
    }

    /// A command of the core task for the participant's connection; `Err` when the gateway is going away: the page is told so (it comes back later).
    async fn gateway_command(&mut self, cmd: Option<WriterCmd>) -> Result<(), Ending> {
        let taken = crate::server::conn::take_command(
            &mut self.conn,
            &self.core,
            self.report_every,
            &mut self.p,
            cmd,
        )
        .await;
        match taken {
            None => {}
            Some(closed) if closed.code == Some(1001) => return Err(Ending(1001, closed.reason)),
            Some(closed) => self.p.handle_input(
                clock::now(),
                participant::Input::Disconnected {
                    reason: &closed.describe(),
                },
            ),
        }
        Ok(())
    }

    /// Tells the core the participant's connection ended.
    async fn drop_conn(&mut self) {
        if let Some(c) = self.conn.take() {
            let _ = self.core.send(Input::Closed(c.id)).await;
        }
    }

    /// The page is gone: the participant leaves.
    async fn leave(&mut self) {
        self.p.close(clock::now(), "the page closed its session");
        self.drop_conn().await;
    }
}

/// What a history fetch gives the view.
type History = Result<Vec<Envelope>, String>;

/// The envelopes of a history answer (a JSON array); one that does not parse is left out.
fn envelopes(body: &[u8]) -> History {
    let list = serde_json::from_slice::<Vec<Value>>(body)
        .map_err(|e| format!("the history is not a list of envelopes: {e}"))?;
    Ok(list
        .into_iter()
        .filter_map(|v| serde_json::from_value::<Envelope>(v).ok())
        .collect())
}

/// One line for a gateway's refusal (`system/error`).
fn refusal(payload: &Value) -> String {
    match (payload["error"].as_str(), payload["message"].as_str()) {
        (Some(e), Some(m)) => format!("{e}: {m}"),
        (Some(e), None) => e.to_owned(),
        _ => payload.to_string(),
    }
}
