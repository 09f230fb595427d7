//! The one simulated world every gateway test builds on: a gateway, a virtual clock, a
//! seed everything random derives from, the connections with every frame the gateway
//! handed to each, and a hash of that history.
//!
//! Used directly it is a driver whose clients write frames by hand (up to the gateway
//! after a seeded latency, down at once); [`super::participants::World`] puts participant
//! machines on it with links both ways; the reference model of the gateway
//! (`tests/tests/core/gateway_model.rs`) drives it one input at a time.

use super::gateway::{self, Input};
use super::{Clock, EPOCH, Endpoint, Net, Seed, Trace, seed_or};
use bytes::Bytes;
use mew_core::Time;
use mew_core::gateway::{
    AuditFile, ConnId, Gateway, GatewayEvent, HttpAccepted, HttpError, Output, SpaceConfig,
};
use mew_core::ids::IdGen;
use serde_json::Value;
use std::time::Duration;

/// A check run on every frame the gateway hands to a connection, before it travels.
pub type TransmitHook = Box<dyn FnMut(&Gateway, ConnId, &Bytes)>;

/// What the gateway handed out for the driver to carry (everything else it says is
/// recorded in the world).
#[derive(Debug, Clone)]
pub enum Handed {
    /// A frame for the connection's peer.
    Frame(ConnId, Bytes),
    /// A ping for the connection's peer.
    Ping(ConnId),
    /// The gateway closed the connection (it has already been told it is gone).
    Close(ConnId, u16, String),
}

/// The simulated world: a gateway, a virtual clock and a network.
pub struct World {
    /// The gateway under test.
    pub gw: Gateway,
    /// Virtual time.
    pub clock: Clock,
    /// Links from clients to the gateway, and every connection's record.
    pub net: Net,
    /// The seed everything derives from.
    pub seed: u64,
    /// Randomness for whatever builds on the world (latencies, delivery order).
    pub rng: IdGen,
    /// Virtual participants' log lines (path, line).
    pub log_lines: Vec<(String, Bytes)>,
    /// Audit lines (without their newline) and their file, in order within each file.
    pub audits: Vec<(AuditFile, String)>,
    /// Gateway events, in order.
    pub events: Vec<GatewayEvent>,
    /// Called on every frame the gateway hands out.
    pub transmit_hook: Option<TransmitHook>,
    trace: Trace,
    /// Printed when the world is dropped by a panic.
    _replay: Seed,
}

impl World {
    /// A world running `config` with no network latency, seeded by `MEW_SIM_SEED` or 0.
    pub fn new(config: SpaceConfig) -> World {
        World::with_latency(config, 0, 0)
    }

    /// A world whose frames to the gateway take up to `max_latency_ms`, seeded by
    /// `MEW_SIM_SEED` or `seed`.
    pub fn with_latency(config: SpaceConfig, seed: u64, max_latency_ms: u64) -> World {
        let mut w = World::seeded(config, seed_or(seed));
        w.net.max_latency_ms = max_latency_ms;
        w
    }

    /// A world with exactly this seed, whatever `MEW_SIM_SEED` says, and no latency.
    pub fn seeded(config: SpaceConfig, seed: u64) -> World {
        World {
            gw: gateway::new(config, seed),
            clock: Clock::new(EPOCH),
            net: Net::new(seed, 0),
            seed,
            rng: IdGen::new(seed ^ 0x0057_0F1D_5EED),
            log_lines: Vec::new(),
            audits: Vec::new(),
            events: Vec::new(),
            transmit_hook: None,
            trace: Trace::default(),
            _replay: Seed(seed),
        }
    }

    /// A world running a space given as YAML.
    pub fn from_yaml(yaml: &str) -> World {
        World::new(SpaceConfig::from_yaml(yaml).unwrap_or_else(|e| panic!("bad test config:\n{e}")))
    }

    /// The current virtual time.
    pub fn now(&self) -> Time {
        self.clock.now()
    }

    /// A hash of the history so far: every frame handed to or by the gateway (with its time
    /// and connection) and whatever [`World::record`] added. Two runs with equal traces saw
    /// the same history.
    pub fn trace(&self) -> u64 {
        self.trace.hash()
    }

    /// Adds `bytes` to the trace.
    pub fn record(&mut self, bytes: &[u8]) {
        self.trace.record(bytes);
    }

    fn record_frame(&mut self, tag: u8, conn: ConnId, frame: &[u8]) {
        let now = self.now();
        self.trace.event(now, tag, conn.as_u64(), frame);
    }

    /// Opens a connection (with an Authorization bearer when given) whose peer reports
    /// every frame written; nothing runs yet.
    pub fn open(&mut self, bearer: Option<&str>) -> ConnId {
        let now = self.now();
        let conn = gateway::input(&mut self.gw, now, Input::Connected { bearer })
            .conn()
            .expect("a connection id");
        self.net.endpoints.insert(
            conn,
            Endpoint {
                drains: true,
                ..Endpoint::default()
            },
        );
        conn
    }

    /// Hands a frame straight to the gateway (no latency) and drains its outputs.
    pub fn frame_in(&mut self, conn: ConnId, frame: Bytes) {
        let now = self.now();
        self.record_frame(b'>', conn, &frame);
        gateway::input(&mut self.gw, now, Input::Frame { conn, frame });
    }

    /// The client closed its connection (or the link broke): the gateway learns of it,
    /// unless it closed the connection itself.
    pub fn disconnect(&mut self, conn: ConnId) {
        let now = self.now();
        let ep = self.net.endpoints.entry(conn).or_default();
        if !ep.ended {
            ep.ended = true;
            gateway::input(&mut self.gw, now, Input::Disconnected { conn });
        }
    }

    /// The peer read `frames` frames (`bytes` bytes) the gateway handed out.
    pub fn sent(&mut self, conn: ConnId, frames: usize, bytes: usize) {
        let now = self.now();
        let sent = Input::Sent {
            conn,
            frames,
            bytes,
        };
        gateway::input(&mut self.gw, now, sent);
    }

    /// Moves the clock by `d` and wakes the gateway once, leaving its outputs to drain.
    pub fn tick(&mut self, d: Duration) {
        self.clock.advance(d);
        let now = self.now();
        gateway::input(&mut self.gw, now, Input::Timeout);
    }

    /// The driver refused a frame over the size limit on a connection.
    pub fn oversize(&mut self, conn: ConnId, size: usize) {
        let now = self.now();
        gateway::input(&mut self.gw, now, Input::Oversize { conn, size });
    }

    /// `POST /participants/{participant}/messages` with `body`; the HTTP answer.
    pub fn post(
        &mut self,
        participant: &str,
        bearer: Option<&str>,
        body: &[u8],
    ) -> Result<HttpAccepted, HttpError> {
        let now = self.now();
        let post = Input::Post {
            participant,
            bearer,
            body,
        };
        gateway::input(&mut self.gw, now, post)
            .posted()
            .expect("a post is answered")
    }

    /// The server shuts down: the gateway closes every connection.
    pub fn shut_down(&mut self) {
        let now = self.now();
        gateway::input(&mut self.gw, now, Input::Close);
    }

    /// A pong arrived on a connection.
    pub fn pong(&mut self, conn: ConnId) {
        let now = self.now();
        gateway::input(&mut self.gw, now, Input::Pong { conn });
    }

    /// When the gateway next wants to be woken.
    pub fn gateway_timeout(&self) -> Option<Time> {
        gateway::poll_timeout(&self.gw)
    }

    /// Wakes the gateway if its timer is due.
    pub fn fire_gateway_timer(&mut self) -> bool {
        let now = self.now();
        let due = self.gateway_timeout().is_some_and(|t| t <= now);
        if due {
            gateway::input(&mut self.gw, now, Input::Timeout);
        }
        due
    }

    /// Opens a connection (with an Authorization bearer when given) and settles.
    pub fn connect(&mut self, bearer: Option<&str>) -> ConnId {
        let conn = self.open(bearer);
        self.pump();
        conn
    }

    /// Connects with a bearer token and runs until quiet.
    pub fn join(&mut self, token: &str) -> ConnId {
        let c = self.connect(Some(token));
        self.run_until_quiet();
        c
    }

    /// Sends a text frame from a client (it arrives after the network's latency).
    pub fn send(&mut self, conn: ConnId, frame: impl Into<String>) {
        let now = self.now();
        self.net.send(now, conn, Bytes::from(frame.into()));
    }

    /// Sends a JSON value from a client.
    pub fn send_json(&mut self, conn: ConnId, v: &Value) {
        self.send(conn, v.to_string());
    }

    /// Sends and runs until quiet.
    pub fn send_and_settle(&mut self, conn: ConnId, v: &Value) {
        self.send_json(conn, v);
        self.run_until_quiet();
    }

    /// Delivers every frame in flight (advancing the clock to each arrival) and drains the
    /// gateway's outputs; timers fire only if they fall due on the way.
    pub fn run_until_quiet(&mut self) {
        self.pump();
        while let Some(at) = self.net.next_arrival() {
            self.step_to(at);
        }
        self.pump();
    }

    /// Advances virtual time by `d`, delivering frames and firing timers on the way.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now() + d;
        loop {
            let next = [self.net.next_arrival(), self.gateway_timeout()]
                .into_iter()
                .flatten()
                .filter(|t| *t <= end)
                .min();
            match next {
                Some(t) => self.step_to(t),
                None => break,
            }
        }
        self.clock.advance_to(end);
        gateway::input(&mut self.gw, end, Input::Timeout);
        self.pump();
    }

    fn step_to(&mut self, t: Time) {
        self.clock.advance_to(t);
        let now = self.now();
        while let Some(f) = self.net.pop_due(now) {
            self.frame_in(f.conn, f.frame);
            self.pump();
        }
        self.fire_gateway_timer();
        self.pump();
    }

    /// Drains the gateway's outputs the way a driver would, the frames staying in each
    /// connection's inbox.
    pub fn pump(&mut self) {
        while !self.drain().is_empty() {}
    }

    /// Drains the gateway's outputs: records every frame in its connection's inbox (and
    /// reports it written when the peer drains), answers closes, keeps events, log lines
    /// and audit records, and returns what the peers are to receive.
    pub fn drain(&mut self) -> Vec<Handed> {
        let now = self.now();
        let mut handed = Vec::new();
        while let Some(o) = gateway::poll(&mut self.gw) {
            match o {
                Output::Transmit { conn, frame } => {
                    if let Some(h) = self.transmit_hook.as_mut() {
                        h(&self.gw, conn, &frame);
                    }
                    self.record_frame(b'<', conn, &frame);
                    let ep = self.net.endpoints.entry(conn).or_default();
                    assert!(
                        !ep.ended,
                        "seed {}: transmit after close on {conn}",
                        self.seed
                    );
                    let len = frame.len();
                    ep.inbox.push(frame.clone());
                    if ep.drains {
                        let sent = Input::Sent {
                            conn,
                            frames: 1,
                            bytes: len,
                        };
                        gateway::input(&mut self.gw, now, sent);
                    }
                    handed.push(Handed::Frame(conn, frame));
                }
                Output::Ping { conn } => {
                    self.net.endpoints.entry(conn).or_default().pings += 1;
                    handed.push(Handed::Ping(conn));
                }
                Output::Close { conn, code, reason } => {
                    self.record_frame(b'x', conn, &code.to_le_bytes());
                    self.net.endpoints.entry(conn).or_default().closed =
                        Some((code, reason.clone()));
                    self.disconnect(conn);
                    handed.push(Handed::Close(conn, code, reason));
                }
                Output::AppendLog { path, line } => self.log_lines.push((path, line)),
                Output::Event(e) => self.events.push(*e),
            }
        }
        while let Some(batch) = gateway::take_audit(&mut self.gw) {
            let file = batch.file;
            let text = String::from_utf8(batch.to_text()).expect("audit lines are UTF-8");
            assert_eq!(
                text.lines().count() as u64,
                batch.lines,
                "seed {}",
                self.seed
            );
            self.audits
                .extend(text.lines().map(|l| (file, l.to_owned())));
        }
        handed
    }

    /// The endpoint of a connection.
    pub fn endpoint(&self, conn: ConnId) -> &Endpoint {
        &self.net.endpoints[&conn]
    }

    /// Makes a connection stop (or resume) reporting written frames.
    pub fn set_draining(&mut self, conn: ConnId, drains: bool) {
        self.net.endpoints.entry(conn).or_default().drains = drains;
    }

    /// Every frame a connection received, parsed as JSON (`#…` stream frames as strings).
    pub fn received(&self, conn: ConnId) -> Vec<Value> {
        self.endpoint(conn).inbox.iter().map(|f| parse(f)).collect()
    }

    /// Takes (and forgets) what a connection received so far.
    pub fn take(&mut self, conn: ConnId) -> Vec<Value> {
        let v = self.received(conn);
        if let Some(e) = self.net.endpoints.get_mut(&conn) {
            e.inbox.clear();
        }
        v
    }

    /// Received envelopes of one kind.
    pub fn received_kind(&self, conn: ConnId, kind: &str) -> Vec<Value> {
        self.received(conn)
            .into_iter()
            .filter(|v| v["kind"] == kind)
            .collect()
    }

    /// How the gateway closed a connection, if it did.
    pub fn closed(&self, conn: ConnId) -> Option<(u16, String)> {
        self.endpoint(conn).closed.clone()
    }
}

/// A frame as JSON (a `#…` stream frame, or anything not JSON, as a string).
pub fn parse(frame: &[u8]) -> Value {
    serde_json::from_slice(frame)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(frame).into_owned()))
}
