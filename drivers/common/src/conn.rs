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
use tungstenite::protocol::CloseFrame;
use tungstenite::protocol::frame::Frame;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::frame::coding::{Data, OpCode};
use tungstenite::{Error as WsError, Message};

use crate::Response;
use crate::clock::{self, Sleep};
use crate::host::{CLOSE_GRACE, ConnLink, Input, WRITE_BATCH, WriterCmd};

/// The answer channel for a connection id.
pub type ConnReply = oneshot::Sender<ConnId>;
/// The answer channel for an HTTP response.
pub type HttpReply = oneshot::Sender<Response>;
/// What connections send the core task.
pub type CoreInput = Input<SocketLink, ConnReply, HttpReply>;

impl<T> crate::host::Reply<T> for oneshot::Sender<T> {
    fn reply(self, value: T) -> Result<(), T> {
        self.send(value)
    }
}

/// The core task's end of one connection.
pub struct SocketLink {
    writer: async_channel::Sender<WriterCmd>,
    closing: async_channel::Sender<()>,
}

impl ConnLink for SocketLink {
    fn send(&self, cmd: WriterCmd) {
        // Unbounded: the core bounds each connection's queue through the `Sent` reports.
        let _ = self.writer.try_send(cmd);
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

/// A new link and the connection's side of it.
pub fn link() -> (SocketLink, Halves) {
    let (writer, commands) = async_channel::unbounded();
    let (closing_tx, closing) = async_channel::bounded(1);
    (
        SocketLink {
            writer,
            closing: closing_tx.clone(),
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

/// Runs a server-side WebSocket connection to its end: registers it with the core task,
/// spawns the writer with `spawn`, reads until the peer or the core ends it, then reports
/// it closed. `bearer` is the upgrade request's token.
pub async fn serve_websocket<S, W>(
    ws: W,
    bearer: Option<String>,
    core: async_channel::Sender<CoreInput>,
    report_every: (usize, usize),
    spawn: impl FnOnce(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>),
) where
    S: Sleep,
    W: Stream<Item = Result<Message, WsError>> + Sink<Message, Error = WsError> + Send + 'static,
{
    let (sink, stream) = ws.split();
    let (link, halves) = link();
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
    spawn(Box::pin(writer::<S, _>(
        sink,
        halves,
        WriterCtx {
            core: core.clone(),
            report_every,
            id,
            _done: done_tx,
        },
    )));
    reader::<S, _>(stream, &core, id, closing, done_rx).await;
    let _ = core.send(Input::Closed(id)).await;
}

async fn reader<S: Sleep, R>(
    mut stream: R,
    core: &async_channel::Sender<CoreInput>,
    id: ConnId,
    closing: async_channel::Receiver<()>,
    writer_done: oneshot::Receiver<()>,
) where
    R: Stream<Item = Result<Message, WsError>> + Unpin,
{
    let mut deadline = std::pin::pin!(close_deadline::<S>(closing));
    loop {
        let msg = match select(stream.next(), deadline.as_mut()).await {
            Either::Left((m, _)) => m,
            Either::Right(_) => return,
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

struct WriterCtx {
    core: async_channel::Sender<CoreInput>,
    report_every: (usize, usize),
    id: ConnId,
    /// Dropped when the writer ends (the reader waits on it after an oversize frame).
    _done: oneshot::Sender<()>,
}

async fn writer<S: Sleep, K>(mut sink: K, halves: Halves, ctx: WriterCtx)
where
    K: Sink<Message, Error = WsError> + Unpin,
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
        _done,
    } = ctx;
    let mut deadline = std::pin::pin!(close_deadline::<S>(closing));
    // Every socket operation races the close deadline, so a peer that stopped reading
    // cannot keep this task (and its socket) alive after the core closed it.
    macro_rules! guarded {
        ($op:expr) => {
            match select(std::pin::pin!($op), deadline.as_mut()).await {
                Either::Left((r, _)) => r.is_ok(),
                Either::Right(_) => false,
            }
        };
    }
    let (mut frames, mut bytes) = (0usize, 0usize);
    'run: while let Ok(cmd) = commands.recv().await {
        let mut next = Some(cmd);
        let mut n = 0;
        while let Some(cmd) = next.take() {
            match cmd {
                WriterCmd::Frames(list) => {
                    for t in list {
                        frames += 1;
                        bytes += t.len();
                        if t.len() <= FRAGMENT {
                            if !guarded!(sink.feed(Message::Text(t))) {
                                break 'run;
                            }
                            continue;
                        }
                        for f in fragments(t) {
                            if !guarded!(sink.feed(Message::Frame(f))) {
                                break 'run;
                            }
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
                next = commands.try_recv().ok();
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
    closing_tx.close();
    let _ = clock::timeout::<S, _>(Duration::from_millis(200), sink.close()).await;
}

/// Text messages longer than this go out in fragments of this size. tungstenite copies each
/// frame whole into its write buffer, which keeps the largest size it ever reached: one
/// large welcome (a space of thousands lists them all) would otherwise stay with the
/// connection for its lifetime.
pub const FRAGMENT: usize = 4 * 1024;

/// A long text message as a text frame and continuation frames of [`FRAGMENT`] bytes
/// (shared slices of it, not copies); the message as a whole is still valid UTF-8.
fn fragments(t: tungstenite::Utf8Bytes) -> impl Iterator<Item = Frame> {
    let b = Bytes::from(t);
    let n = b.len().div_ceil(FRAGMENT);
    (0..n).map(move |i| {
        let chunk = b.slice(i * FRAGMENT..((i + 1) * FRAGMENT).min(b.len()));
        let op = if i == 0 { Data::Text } else { Data::Continue };
        Frame::message(chunk, OpCode::Data(op), i + 1 == n)
    })
}

/// Runs the core task: applies inputs in batches, arms the core's timer, carries out its
/// outputs; returns when the shutdown is complete.
pub async fn run_core<S: Sleep>(
    mut host: crate::host::GatewayHost<SocketLink>,
    rx: async_channel::Receiver<CoreInput>,
) {
    use crate::host::{Flow, INPUT_BATCH};
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
        if n > 1 {
            // Busy: let readers queue more before the next pass, so passes (and the writer
            // wake-ups they cause) carry more frames each.
            yield_now().await;
        }
    }
    // Whatever is still connected after the grace period is cut off.
    host.cut_all();
}

/// Gives other tasks on the executor a turn.
async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_go_out_in_fragments_that_add_up_to_them() {
        // Multi-byte characters straddle the fragment boundaries.
        let text: String = "é-ü-€-".repeat(FRAGMENT);
        let frames: Vec<Frame> = fragments(tungstenite::Utf8Bytes::from(text.clone())).collect();
        assert_eq!(frames.len(), text.len().div_ceil(FRAGMENT));
        let mut joined = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            let h = f.header();
            let want = if i == 0 { Data::Text } else { Data::Continue };
            assert_eq!(h.opcode, OpCode::Data(want), "frame {i}");
            assert_eq!(h.is_final, i + 1 == frames.len(), "frame {i}");
            assert!(f.payload().len() <= FRAGMENT);
            joined.extend_from_slice(f.payload());
        }
        assert_eq!(joined, text.as_bytes());
    }
}
