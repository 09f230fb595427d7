//! The core task of a durable space: every input goes into the log and is applied at once;
//! a pass that changes the space holds its outputs until the log thread reports its entries
//! kept (see the module above for what each policy may lose).

use std::io;

use bytes::Bytes;
use mew_core::Time;
use mew_core::cluster::{Node, NodeInput, NodeOutput, Record};
use mew_core::gateway::{Fsync, Input as GwInput};

use super::log::{LogEvent, StateDir};
use super::recovery::Restored;
use crate::Response;
use crate::clock::{self, Sleep};
use crate::server::conn::{ConnReply, CoreInput, CoreTask, HttpReply, SocketLink};
use crate::server::host::{Flow, GatewayHost, INPUT_BATCH, Input, Reply, Turns};
use crate::server::node_inputs::{NodeInputs, Unhandled};

/// The task that serves a restored space (for
/// [`crate::server::GatewayServer::serve_with`]) on runtime `S`.
pub fn core_task<S: Sleep + Send>(restored: Restored) -> CoreTask {
    Box::new(move |host, rx| Box::pin(run::<S>(restored, host, rx)))
}

/// The host of a durable space: its node owns the space's gateway.
pub(super) type Host = GatewayHost<SocketLink, Node>;

pub(super) struct Running {
    pub(super) state: StateDir,
    inputs: NodeInputs,
    /// What the pass in progress will carry out once its entries are kept.
    pass: Vec<Held>,
    /// Earlier passes' outputs waiting for the report that covers them, in order.
    held: std::collections::VecDeque<(Need, Held)>,
    /// Emptied output lists, for the next passes.
    spare_outputs: Vec<Vec<mew_core::gateway::Output>>,
    /// Every byte of the log up to this mark is written ([`LogEvent::Written`]).
    written: u64,
    /// Every byte of the log up to this mark is on the disk.
    pub(super) durable: u64,
    /// The pass in progress holds a record that changes the space (not only a message):
    /// with `fsync: always` its outputs wait for the flush.
    pass_changes: bool,
    /// The pass in progress asked for a snapshot its outputs wait for: an invitation's
    /// (whose token's entropy must be out of the log before the answer leaves) or a
    /// reload's (applied outside the log).
    pass_snapshot: bool,
    /// Snapshots written (or given up) so far, by their number
    /// ([`StateDir::snapshots_handed`], [`LogEvent::Snapshot`]).
    snapshots: u64,
    broken: bool,
    stopping: bool,
}

/// What a pass's outputs wait for: its entries written (to `mark`), and flushed too when
/// `flushed`.
#[derive(Debug, Clone, Copy)]
struct Need {
    mark: u64,
    flushed: bool,
    /// And the snapshot of this number (its pass asked for it; 0: none) written or given
    /// up.
    snapshot: u64,
}

impl Need {
    /// A pass of messages only: its outputs go at once (behind what is held).
    const NOTHING: Need = Need {
        mark: 0,
        flushed: false,
        snapshot: 0,
    };

    fn written(mark: u64) -> Need {
        Need {
            mark,
            ..Need::NOTHING
        }
    }

    fn flushed(mark: u64) -> Need {
        Need {
            mark,
            flushed: true,
            snapshot: 0,
        }
    }
}

/// Something a pass of the core carries out once its entries are kept.
enum Held {
    Conn(ConnReply, mew_core::gateway::ConnId),
    Http(HttpReply, Response),
    /// The core's outputs, taken with [`GatewayHost::hold`].
    Outputs(Vec<mew_core::gateway::Output>),
    /// A frame of the node's own and/or a close; `true`: the space has let it go.
    Direct(
        mew_core::gateway::ConnId,
        Option<Bytes>,
        Option<(u16, String)>,
        bool,
    ),
}

impl Running {
    /// A durable node over `state`, nothing held yet; with `hold_reads`, answers to reads
    /// wait for the flush like everything else (see [`NodeInputs::reads`]).
    pub(super) fn new(state: StateDir, hold_reads: bool) -> Running {
        let mark = state.written();
        Running {
            written: mark,
            durable: mark,
            state,
            inputs: NodeInputs {
                reads: hold_reads.then(Vec::new),
                ..NodeInputs::default()
            },
            pass: Vec::new(),
            held: std::collections::VecDeque::new(),
            spare_outputs: Vec::new(),
            pass_changes: false,
            pass_snapshot: false,
            snapshots: 0,
            broken: false,
            stopping: false,
        }
    }

    pub(super) fn input(&mut self, host: &mut Host, now: Time, input: CoreInput) {
        if self.stopping {
            // Shutting down: connections end outside the log (the next start's `NodeUp`
            // ends them in the state too).
            host.apply(now, input);
            return;
        }
        match self.inputs.feed(host, now, input) {
            None => {}
            Some(Unhandled::Reconfigure(config)) => {
                // Applied outside the log, so a snapshot follows at once: the state on disk
                // is then the one under the new file, which the next start reads.
                host.reconfigure(now, *config);
                host.core_mut().request_snapshot();
                self.pass_snapshot = true;
            }
            Some(Unhandled::Shutdown) => {
                // What was held leaves first, written and flushed: the shutdown's closes
                // follow it.
                self.settle(host, now);
                if let Err(e) = self.state.finish() {
                    self.fail(&e);
                    return;
                }
                self.written = self.state.written();
                self.durable = self.written;
                self.release(host, now);
                self.stopping = true;
                host.apply::<ConnReply, HttpReply>(now, Input::Shutdown);
            }
        }
        if let Some(reads) = &mut self.inputs.reads {
            self.pass
                .extend(reads.drain(..).map(|(reply, resp)| Held::Http(reply, resp)));
        }
    }

    /// Carries out the node's outputs: each record is applied at once and encoded for the
    /// log; what answers or sends waits for the pass's end ([`Running::settle`]).
    fn pump(&mut self, host: &mut Host) {
        while let Some(o) = host.core_mut().poll_output() {
            match o {
                NodeOutput::Publish { record, .. } => self.publish(host, record),
                NodeOutput::Connected { local, conn } => {
                    if let Some((link, reply)) = self.inputs.conns.remove(&local) {
                        host.register(conn, link);
                        self.pass.push(Held::Conn(reply, conn));
                    }
                }
                NodeOutput::Abandon { local } => {
                    self.inputs.conns.remove(&local);
                }
                NodeOutput::Posted { local, result } => {
                    if let Some(reply) = self.inputs.posts.remove(&local) {
                        self.pass.push(Held::Http(reply, Response::posted(result)));
                    }
                }
                NodeOutput::PostRefused { local, message } => {
                    if let Some(reply) = self.inputs.posts.remove(&local) {
                        let resp = Response::error(503, "state_unavailable", &message);
                        self.pass.push(Held::Http(reply, resp));
                    }
                }
                NodeOutput::Direct { conn, frame } => {
                    self.pass.push(Held::Direct(conn, Some(frame), None, false));
                }
                NodeOutput::Close {
                    conn,
                    code,
                    reason,
                    forget,
                } => self
                    .pass
                    .push(Held::Direct(conn, None, Some((code, reason)), forget)),
                NodeOutput::Snapshot { applied, bytes } => {
                    // With the log thread, the thread writes it while the space goes on,
                    // and reports the entries it holds kept.
                    match self.state.write_snapshot(applied, bytes) {
                        Ok(false) => {}
                        Ok(true) => {
                            // The snapshot in place holds every entry handed over.
                            self.written = self.state.written();
                            self.durable = self.written;
                            self.snapshots = self.state.snapshots_handed();
                        }
                        // The log keeps the entries: a later snapshot may succeed.
                        Err(e) => tracing::warn!(
                            "writing the space's snapshot in {} failed: {e}",
                            self.state.dir().display()
                        ),
                    }
                }
                NodeOutput::NodeGone { .. } => {}
                NodeOutput::Warning(w) => tracing::warn!("{w}"),
                NodeOutput::Broken(why) => {
                    tracing::error!("{why}");
                    self.broken = true;
                }
            }
        }
    }

    fn publish(&mut self, host: &mut Host, record: Record) {
        let node = host.core_mut();
        let seq = node.applied() + 1;
        // Encoded once, into the pass's entries; applied as it is, not read back.
        self.state.append_record(seq, &record);
        // An entry takes effect at the time it carries.
        let at = record.at;
        let answer = node.handle_input(at, NodeInput::OwnRecord { seq, record });
        if answer.message_only() == Some(false) {
            self.pass_changes = true;
        }
        if node.replica().used_entropy() || self.state.log_large() {
            // The entropy is an invitation's token: the snapshot right after this pass
            // keeps only its digest, and the log holding it is cut, before the pass's
            // outputs leave.
            self.pass_snapshot |= node.replica().used_entropy();
            node.request_snapshot();
        }
    }

    fn fail(&mut self, e: &io::Error) {
        // Nothing of this pass may be acknowledged as kept: stop serving.
        tracing::error!(
            "cannot write the space's state in {}: {e}; the gateway stops",
            self.state.dir().display()
        );
        self.broken = true;
    }

    /// Whether what waits for `need` may go.
    fn ready(&self, need: Need) -> bool {
        self.written >= need.mark
            && (!need.flushed || self.durable >= need.mark)
            && self.snapshots >= need.snapshot
    }

    /// Ends a pass: its entries go to the log's thread. When the pass changed the space,
    /// what it produced is held until the thread reports its entries written, or flushed
    /// under `fsync: always` (the thread goes at once then), and what follows leaves behind
    /// it; a pass of messages only carries out at once when nothing is held. A snapshot
    /// follows when one is due.
    pub(super) fn settle(&mut self, host: &mut Host, now: Time) {
        loop {
            self.pump(host);
            if let Err(e) = self.state.write() {
                self.fail(&e);
                return;
            }
            // What a killed process may take: messages of the last MESSAGE_WRITE, never a
            // change acknowledged (nor anything before one). What a power loss may take:
            // with `always`, messages of the last MESSAGE_FLUSH, never a change
            // acknowledged; with `every_ms`, up to N ms of anything.
            let changes = std::mem::take(&mut self.pass_changes);
            let snapshot = std::mem::take(&mut self.pass_snapshot);
            let mark = self.state.written();
            let mut need = match (changes, self.state.fsync()) {
                (false, _) => Need::NOTHING,
                (true, Fsync::Always) => {
                    self.state.want_flush(mark);
                    Need::flushed(mark)
                }
                (true, Fsync::EveryMs(_)) => {
                    self.state.want_written(mark);
                    Need::written(mark)
                }
            };
            // The snapshot this pass asked for is the next one handed over (in this
            // settle's last pump, or none: see below).
            let next_snapshot = self.state.snapshots_handed() + 1;
            if snapshot {
                need.mark = mark;
                need.snapshot = next_snapshot;
            }
            if self.ready(need) && self.held.is_empty() {
                let pass = std::mem::take(&mut self.pass);
                self.carry_out(host, now, pass);
                host.drain();
            } else {
                let mut outputs = self.spare_outputs.pop().unwrap_or_default();
                host.hold(&mut outputs);
                for h in self.pass.drain(..) {
                    self.held.push_back((need, h));
                }
                if outputs.is_empty() {
                    self.spare_outputs.push(outputs);
                } else {
                    self.held.push_back((need, Held::Outputs(outputs)));
                }
            }
            for conn in host.take_slow() {
                host.core_mut().handle_input(now, NodeInput::Slow { conn });
            }
            // A snapshot, when due, is made here: its encoding is the core's part of it.
            let t = std::time::Instant::now();
            host.core_mut().handle_input(now, NodeInput::Drained);
            host.core_mut().handle_input(now, NodeInput::Timeout);
            let durable = self.durable;
            self.pump(host);
            let handed = self.state.snapshots_handed() >= next_snapshot;
            if handed {
                tracing::debug!(
                    ms = t.elapsed().as_secs_f64() * 1e3,
                    "state snapshot made, handed to the log thread"
                );
            }
            if snapshot && !handed {
                // The node could not make it: nothing to wait for.
                for (need, _) in self.held.iter_mut() {
                    if need.snapshot == next_snapshot {
                        need.snapshot = 0;
                    }
                }
                self.release(host, now);
            }
            if self.durable > durable {
                // A snapshot now holds what waited (an invitation's answer, most often):
                // it goes now, with nothing after it needed to carry it.
                self.release(host, now);
            }
            if self.broken || (!self.state.has_pending() && self.pass.is_empty()) {
                return;
            }
        }
    }

    /// A report of the log's threads: what waited for it is carried out.
    pub(super) fn handle_event(&mut self, host: &mut Host, now: Time, event: LogEvent) {
        match event {
            LogEvent::Written(mark) => self.written = self.written.max(mark),
            LogEvent::Snapshot(number) => self.snapshots = self.snapshots.max(number),
            LogEvent::Synced(mark) => {
                self.durable = self.durable.max(mark);
                self.written = self.written.max(mark);
            }
            LogEvent::Failed(e) => {
                self.fail(&e);
                return;
            }
        }
        self.release(host, now);
        self.settle(host, now);
    }

    fn release(&mut self, host: &mut Host, now: Time) {
        let mut ready = Vec::new();
        while let Some((need, _)) = self.held.front()
            && self.ready(*need)
        {
            if let Some((_, h)) = self.held.pop_front() {
                ready.push(h);
            }
        }
        if !ready.is_empty() {
            self.carry_out(host, now, ready);
            for conn in host.take_slow() {
                host.core_mut().handle_input(now, NodeInput::Slow { conn });
            }
        }
    }

    fn carry_out(&mut self, host: &mut Host, now: Time, items: Vec<Held>) {
        for h in items {
            match h {
                Held::Conn(reply, conn) => {
                    if reply.reply(conn).is_err() {
                        // Gone while waiting: its close goes into the log.
                        host.unregister(conn);
                        host.core_mut()
                            .handle_input(now, NodeInput::Disconnected { conn });
                    }
                }
                Held::Http(reply, resp) => {
                    let _ = reply.reply(resp);
                }
                Held::Outputs(mut outputs) => {
                    host.release(outputs.drain(..));
                    if self.spare_outputs.len() < 4 {
                        self.spare_outputs.push(outputs);
                    }
                }
                Held::Direct(conn, frame, close, forget) => {
                    host.send_direct(conn, frame, close);
                    if forget {
                        host.unregister(conn);
                    }
                }
            }
        }
    }
}

async fn run<S: Sleep + Send>(
    restored: Restored,
    host: GatewayHost<SocketLink>,
    rx: async_channel::Receiver<CoreInput>,
) {
    use futures_util::future::{Either, select};
    let Restored {
        mut state,
        mut node,
        report,
    } = restored;
    let (tx, events) = async_channel::unbounded();
    match state.start_syncer(tx) {
        Ok(()) => {}
        Err(e) => {
            tracing::error!("cannot start writing the space's state: {e}; the gateway stops");
            let mut host = host;
            host.cut_all();
            return;
        }
    };
    // The node's gateway takes over the address the server gave the one it built.
    let mut host = host.with_core(|built| {
        if let Some(url) = built.connection_url() {
            node.gateway_mut().set_connection_url(url);
        }
        node
    });
    // One node is the only writer of the held participants' logs: a start, restored or not,
    // welcomes them as the plain server does.
    host.gateway_mut()
        .handle_input(clock::now(), GwInput::WelcomeHeld);
    host.track_backlogs();
    host.set_restored(report.to_json());
    let hold_reads = state.fsync() == Fsync::Always;
    let mut run = Running::new(state, hold_reads);
    host.core_mut().handle_input(clock::now(), NodeInput::Start);
    run.settle(&mut host, clock::now());
    let mut turns = Turns::default();
    while !run.broken {
        // Reports that came meanwhile first: inputs never starve what waits for them.
        while let Ok(ev) = events.try_recv() {
            run.handle_event(&mut host, clock::now(), ev);
        }
        if run.broken {
            break;
        }
        let wake = if run.stopping {
            host.next_wake().map(clock::until)
        } else {
            host.core().poll_timeout().map(clock::until)
        };
        let timer = async {
            match wake {
                Some(d) => S::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let reported = async {
            match events.recv().await {
                Ok(ev) => ev,
                // The threads are gone only once the log writer is dropped.
                Err(_) => std::future::pending().await,
            }
        };
        let woke = match select(
            std::pin::pin!(rx.recv()),
            select(std::pin::pin!(reported), std::pin::pin!(timer)),
        )
        .await
        {
            Either::Left((input, _)) => Ok(input),
            Either::Right((Either::Left((ev, _)), _)) => Err(Some(ev)),
            Either::Right((Either::Right(_), _)) => Err(None),
        };
        let input = match woke {
            Ok(input) => input,
            Err(Some(ev)) => {
                run.handle_event(&mut host, clock::now(), ev);
                continue;
            }
            Err(None) => {
                let now = clock::now();
                if run.stopping {
                    if host.handle_wake(now) == Flow::Stop {
                        break;
                    }
                } else {
                    host.core_mut().handle_input(now, NodeInput::Timeout);
                    run.settle(&mut host, now);
                }
                continue;
            }
        };
        let Ok(input) = input else { break };
        let now = clock::now();
        run.input(&mut host, now, input);
        let mut n = 1;
        while n < INPUT_BATCH {
            match rx.try_recv() {
                Ok(input) => run.input(&mut host, now, input),
                Err(_) => break,
            }
            n += 1;
        }
        if run.stopping {
            host.drain();
            if host.finished() {
                break;
            }
        } else {
            run.settle(&mut host, now);
        }
        // As the plain gateway's core: a turn for the executor's other tasks after busy
        // passes (`BUSY_PASSES_PER_TURN`).
        if turns.after_pass(n) {
            S::yield_now().await;
        }
    }
    if let Err(e) = run.state.finish() {
        tracing::warn!("flushing the space's state: {e}");
    }
    host.cut_all();
}
