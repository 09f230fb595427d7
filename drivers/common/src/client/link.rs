//! The client link: one gateway connection's lifecycle, written once for every core that
//! speaks to a gateway (participant, agent, tools agent, bridge).
//!
//! A core asks for a connection ([`Output::Connect`]), frames ([`Output::Transmit`]),
//! pings and a close; the link carries these out and feeds back what the socket does
//! through [`GatewayInputs`] (the core's one trait for it, which the machines around a
//! participant get by forwarding): connected, a frame, a pong, disconnected. It owns:
//!
//! - the connect attempt, given up after the core's `connect_timeout`;
//! - the reader of each socket, and an epoch so that frames of a socket the core already
//!   gave up on (replaced by a new connection, or abandoned after a failed write) are dropped;
//! - every write bounded by the core's `write_timeout`: a gateway that stops reading cannot
//!   hold the task (and so the core's timers and commands) longer than that, and the socket is
//!   then given up and reported as disconnected (the core decides whether to reconnect);
//! - the close on exit, bounded by [`CLOSE_WITHIN`] (or the write timeout when shorter),
//!   which first waits for the gateway to take the join in its order (an attempt in
//!   flight to open, a socket's first frame): joined late, a closed link would displace a
//!   successor with the same identity.
//!
//! [`Output::Connect`]: participant::Output::Connect
//! [`Output::Transmit`]: participant::Output::Transmit

use std::future::Future;
use std::time::{Duration, Instant};

use futures_util::stream::SplitSink;
use futures_util::{FutureExt, SinkExt, StreamExt};
use mew_core::participant::{self, GatewayInputs, Input, ParticipantConfig};
use tungstenite::Message;
use tungstenite::protocol::CloseFrame;

use crate::client::socket::{
    Incoming, OpenFailure, Runtime, open_within, read_client, write_within,
};
use crate::clock;

/// Longest wait for the close frame and the last queued frames when a core is done.
pub const CLOSE_WITHIN: Duration = Duration::from_secs(2);

/// Something one of the link's sockets did, to hand back to [`Link::handle`].
pub struct LinkEvent<W> {
    epoch: u64,
    what: What<W>,
}

enum What<W> {
    Connected(Box<W>),
    ConnectFailed(OpenFailure),
    Frame(String),
    Pong,
    Closed(String),
}

/// One gateway connection at a time, driven by a core's outputs. See the module docs.
pub struct Link<R: Runtime> {
    max_frame: usize,
    connect_within: Duration,
    write_within: Duration,
    /// Counts sockets; events of an earlier one are dropped.
    epoch: u64,
    sink: Option<SplitSink<R::Ws, Message>>,
    /// Dropped to abandon the connect attempt in flight (a new one replaces it, or the
    /// link is gone): a socket that opens after that must not reach the gateway as a join.
    attempt: Option<async_channel::Sender<()>>,
    /// Frames fed since the last flush.
    wrote: bool,
    /// Whether the current socket brought a frame: the gateway took its join in order.
    heard: bool,
    tx: async_channel::Sender<LinkEvent<R::Ws>>,
    rx: async_channel::Receiver<LinkEvent<R::Ws>>,
}

/// Socket events waiting for the driving task; readers wait when it is full.
const EVENTS: usize = 1024;

impl<R: Runtime> Link<R> {
    /// A link with the deadlines and frame limit of `config`; nothing is opened until the
    /// core asks.
    pub fn new(config: &ParticipantConfig) -> Self {
        let (tx, rx) = async_channel::bounded(EVENTS);
        Link {
            max_frame: config.limits.max_frame_bytes,
            connect_within: config.heartbeat.connect_timeout,
            write_within: config.heartbeat.write_timeout,
            epoch: 0,
            sink: None,
            attempt: None,
            wrote: false,
            heard: false,
            tx,
            rx,
        }
    }

    /// Whether a socket is open.
    pub fn is_open(&self) -> bool {
        self.sink.is_some()
    }

    /// Carries out one gateway output of `core`; an [`Event`](participant::Event) is handed
    /// back for the caller. A failed write gives the socket up and tells `core`.
    pub async fn carry(
        &mut self,
        out: participant::Output,
        core: &mut impl GatewayInputs,
    ) -> Option<participant::Event> {
        match out {
            participant::Output::Connect { url, headers } => {
                self.replace();
                let (epoch, tx) = (self.epoch, self.tx.clone());
                let (limit, within) = (self.max_frame, self.connect_within);
                let (alive, abandoned) = async_channel::bounded::<()>(1);
                self.attempt = Some(alive);
                R::spawn(async move {
                    let open = open_within::<R>(&url, &headers, limit, within);
                    let abandoned = abandoned.recv();
                    let opened = futures_util::select_biased! {
                        _ = abandoned.fuse() => return,
                        opened = open.fuse() => opened,
                    };
                    let what = match opened {
                        Ok(ws) => What::Connected(Box::new(ws)),
                        Err(e) => What::ConnectFailed(e),
                    };
                    let _ = tx.send(LinkEvent { epoch, what }).await;
                });
            }
            participant::Output::Transmit(text) => self.feed(Message::text(text), core).await,
            participant::Output::Ping => self.feed(Message::Ping(Default::default()), core).await,
            participant::Output::Disconnect { reason } => {
                let started = Instant::now();
                self.settle().await;
                if let Some(mut sink) = self.replace() {
                    let frame = CloseFrame {
                        code: 1000.into(),
                        reason: reason.into(),
                    };
                    let close = sink.send(Message::Close(Some(frame)));
                    let left = self.close_within().saturating_sub(started.elapsed());
                    let _ = clock::timeout::<R, _>(left, close).await;
                }
            }
            participant::Output::Event(e) => return Some(e),
        }
        None
    }

    /// Sends the frames fed since the last flush (call once the core's outputs are drained,
    /// so that a burst leaves in one write). False when the write failed and the socket was
    /// given up: `core` then has outputs again.
    pub async fn flush(&mut self, core: &mut impl GatewayInputs) -> bool {
        if !std::mem::take(&mut self.wrote) {
            return true;
        }
        let Some(sink) = &mut self.sink else {
            return true;
        };
        match write_within::<R, _>(self.write_within, sink.flush()).await {
            Ok(()) => true,
            Err(reason) => {
                self.give_up(reason, core);
                false
            }
        }
    }

    /// The next event of the link's sockets (hand it to [`Link::handle`]). Never ends: the
    /// link holds a sender itself. The future does not borrow the link.
    pub fn next(&self) -> impl Future<Output = Option<LinkEvent<R::Ws>>> + Send + 'static {
        let rx = self.rx.clone();
        async move { rx.recv().await.ok() }
    }

    /// Feeds a socket event to `core` (events of a socket given up on are dropped). Returns
    /// the reason when a connect attempt failed, for the caller to log.
    pub fn handle(
        &mut self,
        ev: LinkEvent<R::Ws>,
        core: &mut impl GatewayInputs,
    ) -> Option<String> {
        if ev.epoch != self.epoch {
            return None;
        }
        let now = clock::now();
        match ev.what {
            What::Connected(ws) => {
                self.attempt = None;
                let (sink, stream) = (*ws).split();
                self.sink = Some(sink);
                let (epoch, tx) = (self.epoch, self.tx.clone());
                R::spawn(read_client(stream, move |event| {
                    let tx = tx.clone();
                    async move {
                        let what = match event {
                            Incoming::Frame(t) => What::Frame(t),
                            Incoming::Pong => What::Pong,
                            Incoming::Closed(r) => What::Closed(r),
                        };
                        tx.send(LinkEvent { epoch, what }).await.is_ok()
                    }
                }));
                core.handle_input(now, Input::Connected);
            }
            What::ConnectFailed(OpenFailure { reason, fatal }) => {
                self.attempt = None;
                if fatal {
                    core.handle_input(now, Input::Refused { reason: &reason });
                } else {
                    core.handle_input(now, Input::Disconnected { reason: &reason });
                }
                return Some(reason);
            }
            What::Frame(text) => {
                self.heard = true;
                core.handle_input(now, Input::Frame(&text))
            }
            What::Pong => core.handle_input(now, Input::Pong),
            What::Closed(reason) => {
                self.sink = None;
                core.handle_input(now, Input::Disconnected { reason: &reason });
            }
        }
        None
    }

    /// Flushes and closes the socket, if one is open, within [`CLOSE_WITHIN`].
    pub async fn close(&mut self) {
        let started = Instant::now();
        self.settle().await;
        if let Some(mut sink) = self.replace() {
            let left = self.close_within().saturating_sub(started.elapsed());
            let _ = clock::timeout::<R, _>(left, sink.close()).await;
        }
    }

    /// Waits, within the close's bound, until the gateway has taken this link's join in
    /// its order: a connect attempt still in flight is waited for (its socket kept, to be
    /// closed with the link's), and a socket's first frame (the welcome, or a refusal).
    ///
    /// The gateway answers the upgrade before its space sees the connection, and joins it
    /// by its headers. A link that closed before then could be joined after it has gone,
    /// and displace a successor with the same identity (a bridge restarted at once), which
    /// would then give up as replaced. Its first frame comes from the space, after the join.
    async fn settle(&mut self) {
        let started = Instant::now();
        let within = self.close_within();
        let (epoch, rx) = (self.epoch, self.rx.clone());
        if self.attempt.is_some() {
            let opened = clock::timeout::<R, _>(within, async move {
                while let Ok(ev) = rx.recv().await {
                    if ev.epoch == epoch {
                        return match ev.what {
                            What::Connected(ws) => Some(ws),
                            _ => None,
                        };
                    }
                }
                None
            })
            .await;
            if let Some(Some(ws)) = opened {
                let mut ws = *ws;
                let left = within.saturating_sub(started.elapsed());
                let _ = clock::timeout::<R, _>(left, ws.next()).await;
                self.sink = Some(ws.split().0);
            }
        } else if self.sink.is_some() && !self.heard {
            let _ = clock::timeout::<R, _>(within, async move {
                while let Ok(ev) = rx.recv().await {
                    if ev.epoch == epoch && matches!(ev.what, What::Frame(_) | What::Closed(_)) {
                        return;
                    }
                }
            })
            .await;
        }
    }

    fn close_within(&self) -> Duration {
        CLOSE_WITHIN.min(self.write_within)
    }

    /// Starts a new epoch: the current socket (returned) and its reader are given up.
    fn replace(&mut self) -> Option<SplitSink<R::Ws, Message>> {
        self.epoch += 1;
        self.attempt = None;
        self.wrote = false;
        self.heard = false;
        self.sink.take()
    }

    async fn feed(&mut self, msg: Message, core: &mut impl GatewayInputs) {
        let Some(sink) = &mut self.sink else { return };
        match write_within::<R, _>(self.write_within, sink.feed(msg)).await {
            Ok(()) => self.wrote = true,
            Err(reason) => self.give_up(reason, core),
        }
    }

    /// Abandons the socket and its reader; the core decides whether to reconnect.
    fn give_up(&mut self, reason: &str, core: &mut impl GatewayInputs) {
        self.replace();
        core.handle_input(clock::now(), Input::Disconnected { reason });
    }
}
