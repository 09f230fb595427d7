//! The two halves of an accepted WebSocket connection, for any runtime: a reader that
//! feeds the core task and a writer that carries out the core's [`WriterCmd`]s.
//!
//! A driver performs the handshake with its own sockets and hands the split stream to
//! [`serve_websocket`], which spawns the writer and runs the reader. The closing signal is an `async_channel` that is closed
//! (never sent on) once a close was requested: any number of halves can wait on it.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use futures_channel::oneshot;
use futures_util::future::{Either, select};
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use mew_core::gateway::ConnId;
use tungstenite::error::CapacityError;
use tungstenite::{Error as WsError, Message};

use crate::Response;
use crate::clock::{self, Sleep};
use crate::server::frames::{Batch, Frames, RawSocket};
use crate::server::hops;
use crate::server::host::{CLOSE_GRACE, ConnLink, Input, WRITE_BATCH, WriterCmd};

/// A task that owns the space's core instead of [`run_core`] (a replicated space's
/// node): given the host and the connections' inputs, it runs until the shutdown is done.
pub type CoreTask = Box<
    dyn FnOnce(
            crate::server::host::GatewayHost<SocketLink>,
            async_channel::Receiver<CoreInput>,
        ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>
        + Send,
>;

/// The answer channel for a connection id.
pub type ConnReply = oneshot::Sender<ConnId>;
/// The answer channel for an HTTP response.
pub type HttpReply = oneshot::Sender<Response>;
/// What connections send the core task.
pub type CoreInput = Input<SocketLink, ConnReply, HttpReply>;

impl<T> crate::server::host::Reply<T> for oneshot::Sender<T> {
    fn reply(self, value: T) -> Result<(), T> {
        self.send(value)
    }
}

/// The core task's end of one connection.
pub struct SocketLink {
    writer: async_channel::Sender<WriterCmd>,
    closing: async_channel::Sender<()>,
    /// The connection's socket, for frames the core writes itself while the writer has
    /// nothing to do (`None`: a connection inside the process, which has no socket).
    direct: Option<std::sync::Arc<dyn Direct>>,
}

impl ConnLink for SocketLink {
    fn send(&self, cmd: WriterCmd) {
        if let Some(d) = &self.direct {
            d.queue();
        }
        // Unbounded: the core bounds each connection's queue through the `Sent` reports.
        let _ = self.writer.try_send(cmd);
    }

    fn send_frames(&self, frames: Frames) -> Option<(usize, usize)> {
        let frames = match &self.direct {
            Some(d) => match d.offer(frames) {
                Offer::Written(n, bytes) => return Some((n, bytes)),
                Offer::Left => return None,
                Offer::Queue(f) => f,
            },
            None => frames,
        };
        let _ = self.writer.try_send(WriterCmd::Frames(frames));
        None
    }

    fn closing(&self) {
        self.closing.close();
    }
}

/// The connection's side of a [`SocketLink`].
pub struct Halves {
    commands: async_channel::Receiver<WriterCmd>,
    closing_tx: async_channel::Sender<()>,
    closing: async_channel::Receiver<()>,
}

impl Halves {
    /// The commands for the connection, for one inside the process (the web page's
    /// session, [`crate::ui_session`]) that carries them out itself.
    pub(crate) fn into_commands(self) -> async_channel::Receiver<WriterCmd> {
        self.commands
    }

    /// The next command queued for the writer, if any (tests of core tasks).
    #[cfg(test)]
    pub(crate) fn try_next(&self) -> Option<WriterCmd> {
        self.commands.try_recv().ok()
    }
}

/// A new link and the connection's side of it.
pub fn link() -> (SocketLink, Halves) {
    let (writer, commands) = async_channel::unbounded();
    let (closing_tx, closing) = async_channel::bounded(1);
    (
        SocketLink {
            writer,
            closing: closing_tx.clone(),
            direct: None,
        },
        Halves {
            commands,
            closing_tx,
            closing,
        },
    )
}

/// Resolves once a close was requested and the grace period after it has passed.
async fn close_deadline<S: Sleep>(closing: async_channel::Receiver<()>) {
    // Nothing is ever sent: `recv` returns once the channel is closed.
    let _ = closing.recv().await;
    S::sleep(CLOSE_GRACE).await;
}

/// A server WebSocket shared by its connection's reader, its writer and the core task:
/// each locks it only within one poll or one attempt (never across an await), the reader
/// to read, the writer and the core to write frames straight to the socket under it.
type Shared<W> = std::sync::Arc<std::sync::Mutex<Io<W>>>;

/// The WebSocket and who may write to its socket next.
///
/// The core task writes a pass's frames itself when nothing is ahead of them (no command
/// queued or being written, no rest of its own left): one wake-up of the writer per
/// connection and pass saved. Otherwise they go to the writer's queue as before, so the
/// order on the wire is the order of the core's outputs, and frames never interleave.
struct Io<W> {
    ws: W,
    /// Commands queued for the writer and not yet taken by it.
    queued: usize,
    /// The writer holds bytes not yet written whole (or has stopped).
    writing: bool,
    /// What the core could not write at once, with its frames and bytes for the writer's
    /// report: the writer writes it before anything else.
    rest: Option<(Batch, usize, usize)>,
}

fn lock<W>(ws: &Shared<W>) -> std::sync::MutexGuard<'_, Io<W>> {
    // A panic while locked leaves nothing half-done that matters here: carry on.
    ws.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What [`Direct::offer`] did with a pass's frames.
enum Offer {
    /// Written whole: this many frames and bytes.
    Written(usize, usize),
    /// Written in part; the writer was woken for the rest and reports it.
    Left,
    /// The writer has work ahead of them: they go to its queue.
    Queue(Frames),
}

/// The core task's way to a connection's socket.
trait Direct: Send + Sync {
    /// Writes `frames` now if nothing is ahead of them, without waiting for the socket.
    fn offer(&self, frames: Frames) -> Offer;
    /// Counts a command about to be queued for the writer.
    fn queue(&self);
}

struct DirectIo<W, X> {
    io: Shared<W>,
    raw: fn(&mut W) -> &mut X,
    /// Wakes the writer for a rest.
    nudge: async_channel::Sender<()>,
    /// A number for the connection in [`hops`]' stamps (its id comes later).
    conn: u64,
}

impl<W: Send, X: RawSocket> Direct for DirectIo<W, X> {
    fn offer(&self, frames: Frames) -> Offer {
        let mut g = lock(&self.io);
        if g.queued > 0 || g.writing || g.rest.is_some() {
            g.queued += 1;
            return Offer::Queue(frames);
        }
        let (n, bytes) = (frames.messages(), frames.bytes());
        let mut batch = Batch::default();
        let raw = (self.raw)(&mut g.ws);
        batch.take_control(raw.control());
        batch.push_frames(frames);
        // No waker of its own: if the socket is full, the writer goes on with the rest
        // and waits for the socket with its own.
        let traced = hops::enabled().then(|| {
            let ids = batch.traced_ids();
            hops::record(&ids, hops::Hop::Taken, self.conn);
            ids
        });
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let r = batch.poll_write(&mut cx, raw);
        if let Some(ids) = traced {
            hops::record(&ids, hops::Hop::Written, self.conn);
        }
        match r {
            std::task::Poll::Ready(Ok(())) => Offer::Written(n, bytes),
            // An error is the writer's to find (it stops, and the connection with it).
            _ => {
                g.rest = Some((batch, n, bytes));
                g.writing = true;
                let _ = self.nudge.try_send(());
                Offer::Left
            }
        }
    }

    fn queue(&self) {
        lock(&self.io).queued += 1;
    }
}

/// Runs a server-side WebSocket connection to its end: registers it with the core task,
/// spawns the writer with `spawn`, reads until the peer or the core ends it, then reports
/// it closed. `bearer` is the upgrade request's token; `raw` finds the socket under the
/// WebSocket, which the writer writes to (see [`crate::server::frames`]).
pub async fn serve_websocket<S, W, X>(
    ws: W,
    raw: fn(&mut W) -> &mut X,
    bearer: Option<String>,
    core: async_channel::Sender<CoreInput>,
    report_every: (usize, usize),
    spawn: impl FnOnce(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>),
) where
    S: Sleep,
    W: Stream<Item = Result<Message, WsError>>
        + Sink<Message, Error = WsError>
        + Send
        + Unpin
        + 'static,
    X: RawSocket + 'static,
{
    let ws: Shared<W> = std::sync::Arc::new(std::sync::Mutex::new(Io {
        ws,
        queued: 0,
        writing: false,
        rest: None,
    }));
    let (mut link, halves) = link();
    // The reader tells the writer when the WebSocket layer queued a frame of its own, and
    // the core when it left a rest.
    let (nudge_tx, nudge_rx) = async_channel::bounded::<()>(1);
    link.direct = Some(std::sync::Arc::new(DirectIo {
        io: ws.clone(),
        raw,
        nudge: nudge_tx.clone(),
        conn: std::sync::Arc::as_ptr(&ws) as usize as u64,
    }));
    let (reply_tx, reply_rx) = oneshot::channel();
    let connect = Input::Connect {
        bearer,
        link,
        reply: reply_tx,
    };
    if core.send(connect).await.is_err() {
        return;
    }
    let Ok(id) = reply_rx.await else { return };
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let closing = halves.closing.clone();
    spawn(Box::pin(writer::<S, _, _>(
        ws.clone(),
        raw,
        halves,
        WriterCtx {
            core: core.clone(),
            report_every,
            id,
            nudge: nudge_rx,
            _done: done_tx,
        },
    )));
    let ends = ReaderEnds {
        core: &core,
        id,
        closing,
        writer_done: done_rx,
        nudge: nudge_tx,
    };
    reader::<S, _, _>(&ws, raw, ends).await;
    let _ = core.send(Input::Closed(id)).await;
}

/// What the reader is connected to besides its socket.
struct ReaderEnds<'a> {
    core: &'a async_channel::Sender<CoreInput>,
    id: ConnId,
    closing: async_channel::Receiver<()>,
    writer_done: oneshot::Receiver<()>,
    nudge: async_channel::Sender<()>,
}

async fn reader<S: Sleep, W, X>(ws: &Shared<W>, raw: fn(&mut W) -> &mut X, ends: ReaderEnds<'_>)
where
    W: Stream<Item = Result<Message, WsError>> + Sink<Message, Error = WsError> + Unpin,
    X: RawSocket,
{
    let ReaderEnds {
        core,
        id,
        closing,
        writer_done,
        nudge,
    } = ends;
    let mut deadline = std::pin::pin!(close_deadline::<S>(closing));
    // Reads one message; wakes the writer when the WebSocket layer wrote a frame of its own
    // (a pong, a close reply) into the control bytes meanwhile.
    let next = || {
        std::future::poll_fn(|cx| {
            let mut g = lock(ws);
            let r = g.ws.poll_next_unpin(cx);
            if !raw(&mut g.ws).control().is_empty() {
                let _ = nudge.try_send(());
            }
            r
        })
    };
    loop {
        let msg = match select(std::pin::pin!(next()), deadline.as_mut()).await {
            Either::Left((m, _)) => m,
            Either::Right(_) => return,
        };
        let input = match msg {
            Some(Ok(Message::Text(t))) => {
                if hops::enabled() {
                    let mut ids = Vec::new();
                    hops::traced_ids(t.as_bytes(), &mut ids);
                    hops::record(&ids, hops::Hop::Read, id.as_u64());
                }
                Input::Frame(id, Bytes::from(t))
            }
            Some(Ok(Message::Binary(b))) => Input::Frame(id, b),
            // A client's ping is activity too; tungstenite answers it.
            Some(Ok(Message::Pong(_) | Message::Ping(_))) => Input::Pong(id),
            Some(Ok(Message::Frame(_))) => continue,
            Some(Ok(Message::Close(_))) | None => {
                // The reply to a client's close goes to the control bytes, which the writer
                // sends before it stops.
                let _ = std::future::poll_fn(|cx| lock(ws).ws.poll_flush_unpin(cx)).await;
                return;
            }
            Some(Err(WsError::Capacity(CapacityError::MessageTooLong { size, .. }))) => {
                let _ = core.send(Input::Oversize(id, size)).await;
                // Let the writer deliver the error and the close frame first.
                let _ = clock::timeout::<S, _>(CLOSE_GRACE, writer_done).await;
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

/// Writes all of `batch` to the socket under `ws`.
fn write<'a, W, X: RawSocket + 'a>(
    ws: &'a Shared<W>,
    raw: fn(&mut W) -> &mut X,
    batch: &'a mut Batch,
) -> impl Future<Output = std::io::Result<()>> + 'a {
    std::future::poll_fn(move |cx| batch.poll_write(cx, raw(&mut lock(ws).ws)))
}

struct WriterCtx {
    core: async_channel::Sender<CoreInput>,
    report_every: (usize, usize),
    id: ConnId,
    /// Signalled when the WebSocket layer has frames of its own to send.
    nudge: async_channel::Receiver<()>,
    /// Dropped when the writer ends (the reader waits on it after an oversize frame).
    _done: oneshot::Sender<()>,
}

/// Carries out the core's commands for one connection: frames each message once (header
/// and shared payload) and writes everything one pass queued with vectored writes.
async fn writer<S: Sleep, W, X>(
    ws: Shared<W>,
    raw: fn(&mut W) -> &mut X,
    halves: Halves,
    ctx: WriterCtx,
) where
    X: RawSocket,
{
    let Halves {
        commands,
        closing_tx,
        closing,
    } = halves;
    let WriterCtx {
        core,
        report_every,
        id,
        nudge,
        _done,
    } = ctx;
    let mut deadline = std::pin::pin!(close_deadline::<S>(closing));
    let mut batch = Batch::default();
    let (mut frames, mut bytes) = (0usize, 0usize);
    let (mut stop, mut reading) = (false, true);
    let mut traced = hops::enabled().then(Vec::new);
    loop {
        let mut next = if reading {
            match select(
                std::pin::pin!(commands.recv()),
                std::pin::pin!(nudge.recv()),
            )
            .await
            {
                Either::Left((Ok(cmd), _)) => Some(cmd),
                Either::Left((Err(_), _)) => break,
                Either::Right((r, _)) => {
                    // Closed: the reader is gone, and will nudge no more.
                    reading = r.is_ok();
                    None
                }
            }
        } else {
            match commands.recv().await {
                Ok(cmd) => Some(cmd),
                Err(_) => break,
            }
        };
        // What the core left unwritten goes first: it may end in a frame cut short.
        if let Some((rest, f, b)) = lock(&ws).rest.take() {
            batch = rest;
            frames += f;
            bytes += b;
        }
        let mut n = 0;
        while let Some(cmd) = next.take() {
            match cmd {
                WriterCmd::Frames(f) => {
                    frames += f.messages();
                    bytes += f.bytes();
                    batch.push_frames(f);
                }
                WriterCmd::Ping => batch.push_ping(),
                WriterCmd::Close(code, reason) => {
                    batch.push_close(code, &reason);
                    stop = true;
                    break;
                }
            }
            n += 1;
            if n < WRITE_BATCH {
                next = commands.try_recv().ok();
            }
        }
        {
            let mut g = lock(&ws);
            batch.take_control(raw(&mut g.ws).control());
            g.queued = g.queued.saturating_sub(n);
            g.writing = true;
        }
        if traced.is_some() {
            traced = Some(batch.traced_ids());
            if let Some(ids) = &traced {
                hops::record(ids, hops::Hop::Taken, id.as_u64());
            }
        }
        // Every socket operation races the close deadline, so a peer that stopped reading
        // cannot keep this task (and its socket) alive after the core closed it.
        let written = match select(
            std::pin::pin!(write(&ws, raw, &mut batch)),
            deadline.as_mut(),
        )
        .await
        {
            Either::Left((r, _)) => r.is_ok(),
            Either::Right(_) => false,
        };
        if let Some(ids) = &traced {
            hops::record(ids, hops::Hop::Written, id.as_u64());
        }
        if written && !stop {
            // Nothing of ours is on its way: the core may write again.
            lock(&ws).writing = false;
        }
        if stop {
            if frames > 0 {
                let _ = core.send(Input::Sent(id, frames, bytes)).await;
            }
            break;
        }
        if !written {
            break;
        }
        if frames >= report_every.0 || bytes >= report_every.1 {
            if core.send(Input::Sent(id, frames, bytes)).await.is_err() {
                break;
            }
            (frames, bytes) = (0, 0);
        }
    }
    closing_tx.close();
    // As tungstenite's own close would: the reply to a client's close if the WebSocket layer
    // made one, else a close frame of our own, unless one went out already.
    // Not after a frame cut short by an error or the deadline: that connection is beyond
    // saving.
    if !batch.closes() && batch.is_empty() {
        batch.take_control(raw(&mut lock(&ws).ws).control());
        batch.push_close_empty();
        let _ =
            clock::timeout::<S, _>(Duration::from_millis(200), write(&ws, raw, &mut batch)).await;
    }
}

/// Runs the core task: applies inputs in batches, arms the core's timer, carries out its
/// outputs; returns when the shutdown is complete.
pub async fn run_core<S: Sleep>(
    mut host: crate::server::host::GatewayHost<SocketLink>,
    rx: async_channel::Receiver<CoreInput>,
) {
    use crate::server::host::{Flow, INPUT_BATCH, Turns};
    let mut turns = Turns::default();
    loop {
        let wake = host.next_wake();
        let timer = async {
            match wake {
                Some(at) => S::sleep(clock::until(at)).await,
                None => std::future::pending().await,
            }
        };
        let input = match select(std::pin::pin!(rx.recv()), std::pin::pin!(timer)).await {
            Either::Left((input, _)) => input,
            Either::Right(_) => {
                if host.handle_wake(clock::now()) == Flow::Stop {
                    break;
                }
                continue;
            }
        };
        let Ok(input) = input else { break };
        let now = clock::now();
        host.apply(now, input);
        let mut n = 1;
        while n < INPUT_BATCH {
            match rx.try_recv() {
                Ok(input) => host.apply(now, input),
                Err(_) => break,
            }
            n += 1;
        }
        host.drain();
        if host.finished() {
            break;
        }
        // A turn for other tasks after busy passes (`BUSY_PASSES_PER_TURN`): a task woken
        // on this worker (where other workers cannot take it) runs even while the queue
        // never runs empty.
        if turns.after_pass(n) {
            S::yield_now().await;
        }
    }
    // Whatever is still connected after the grace period is cut off.
    host.cut_all();
}

/// A participant the server runs in-process (the web page's session, an MCP host's
/// session), joined to the core task over the same link a socket uses.
pub(crate) struct InProcessConn {
    pub(crate) id: ConnId,
    pub(crate) commands: async_channel::Receiver<WriterCmd>,
    /// Frames and bytes taken and not yet reported (see [`crate::server::host`]).
    pub(crate) taken: (usize, usize),
}

/// Joins an in-process participant as its `Connect` output asks (the bearer of its
/// `Authorization` header); `None` when the core task is gone.
pub(crate) async fn join_in_process(
    core: &async_channel::Sender<CoreInput>,
    headers: &[(String, String)],
) -> Option<InProcessConn> {
    let bearer = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .and_then(|(_, v)| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let (link, halves) = link();
    let (reply, id) = oneshot::channel();
    let connect = Input::Connect {
        bearer,
        link,
        reply,
    };
    core.send(connect).await.ok()?;
    Some(InProcessConn {
        id: id.await.ok()?,
        commands: halves.into_commands(),
        taken: (0, 0),
    })
}

/// How the core task ended an in-process participant's connection.
pub(crate) struct ClosedByGateway {
    /// The close code (`None`: the core task dropped the connection).
    pub(crate) code: Option<u16>,
    /// Why.
    pub(crate) reason: String,
}

impl ClosedByGateway {
    /// What the participant is told (its `Disconnected` reason).
    pub(crate) fn describe(&self) -> String {
        match self.code {
            Some(code) => format!("closed by gateway ({code}): {}", self.reason),
            None => "closed by gateway".into(),
        }
    }
}

/// Carries out one command of the core task for an in-process participant's connection
/// (`conn`): frames go to `machine` (the taken ones reported every `report_every` frames or
/// bytes, as a socket's writer does), a ping is answered. When the connection ends, `conn`
/// is emptied (the core told, for a close) and the close is returned: the caller tells its
/// machine (`Disconnected`) or ends.
pub(crate) async fn take_command<M: mew_core::participant::GatewayInputs>(
    conn: &mut Option<InProcessConn>,
    core: &async_channel::Sender<CoreInput>,
    report_every: (usize, usize),
    machine: &mut M,
    cmd: Option<WriterCmd>,
) -> Option<ClosedByGateway> {
    let now = crate::clock::now();
    let c = conn.as_mut()?;
    let id = c.id;
    match cmd {
        Some(WriterCmd::Frames(f)) => {
            c.taken.0 += f.messages();
            c.taken.1 += f.bytes();
            let report = c.taken.0 >= report_every.0 || c.taken.1 >= report_every.1;
            let taken = if report {
                std::mem::take(&mut c.taken)
            } else {
                (0, 0)
            };
            for t in f.texts() {
                if let Ok(t) = std::str::from_utf8(&t) {
                    machine.handle_input(now, mew_core::participant::Input::Frame(t));
                }
            }
            if report {
                let _ = core.send(Input::Sent(id, taken.0, taken.1)).await;
            }
            None
        }
        Some(WriterCmd::Ping) => {
            let _ = core.send(Input::Pong(id)).await;
            None
        }
        Some(WriterCmd::Close(code, reason)) => {
            *conn = None;
            let _ = core.send(Input::Closed(id)).await;
            Some(ClosedByGateway {
                code: Some(code),
                reason,
            })
        }
        None => {
            *conn = None;
            Some(ClosedByGateway {
                code: None,
                reason: String::new(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::host::{BUSY_PASSES_PER_TURN, GatewayHost, INPUT_BATCH};
    use mew_core::gateway::{Gateway, SpaceConfig};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Wake, Waker};

    /// A timer that never fires: the test drives the core task by its inputs alone.
    struct Never;

    impl Sleep for Never {
        fn sleep(_: Duration) -> impl Future<Output = ()> + Send {
            std::future::pending()
        }
    }

    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The core task gives the executor back after a run of busy passes even when its
    /// queue never runs empty, asking to be polled again (a yield, not a wait), and it
    /// keeps the inputs' order: polled once with more inputs queued than that run takes, it
    /// returns with exactly the rest still queued.
    #[test]
    fn a_queue_that_never_runs_empty_still_gives_other_tasks_a_turn() {
        let config = SpaceConfig::from_yaml(
            "space: {id: s, name: s}\nparticipants:\n  a: {tokens: [ta], capabilities: [{kind: '*'}]}\n",
        )
        .unwrap();
        let gw = Gateway::new(config, 1, Box::new(mew_core::ids::IdGen::new(2)), None);
        let host = GatewayHost::new(gw, None, ".".into(), Duration::from_secs(2));
        let (tx, rx) = async_channel::unbounded();
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut core = Box::pin(run_core::<Never>(host, rx.clone()));

        let (link, _halves) = link();
        let (reply, id) = oneshot::channel();
        let bearer = Some("ta".to_owned());
        tx.try_send(Input::Connect {
            bearer,
            link,
            reply,
        })
        .unwrap();
        assert!(core.as_mut().poll(&mut cx).is_pending());
        let mut id = id;
        let conn = match id.try_recv() {
            Ok(Some(conn)) => conn,
            other => panic!("the connection was not answered: {other:?}"),
        };

        let per_turn = BUSY_PASSES_PER_TURN as usize * INPUT_BATCH;
        let queued = 3 * per_turn + 5;
        for _ in 0..queued {
            tx.try_send(Input::Pong(conn)).unwrap();
        }
        let before = wakes.0.load(Ordering::SeqCst);
        assert!(core.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            rx.len(),
            queued - per_turn,
            "one run of busy passes, then a turn"
        );
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            before + 1,
            "a yield: the task asks to run again at once"
        );
        let mut polls = 1;
        while !rx.is_empty() {
            assert!(core.as_mut().poll(&mut cx).is_pending());
            polls += 1;
        }
        assert_eq!(polls, 4, "three full runs and the rest");
    }
}
