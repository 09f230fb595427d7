//! A deterministic simulation of one gateway and its clients.
//!
//! The seed comes from `MEW_SIM_SEED` when set, else from the test; it is printed when a
//! test panics, so any failure replays exactly with `MEW_SIM_SEED=<seed>`.

pub mod clock;
pub mod net;
pub mod participants;

pub use clock::Clock;
pub use net::{Endpoint, Net};

use bytes::Bytes;
use mew_core::Time;
use mew_core::gateway::{
    AuditFile, Bearer, ConnId, Gateway, GatewayEvent, Input, Output, SpaceConfig,
};
use mew_core::ids::IdGen;
use mew_core::secret::TokenSource;
use serde_json::Value;
use std::time::Duration;

/// The simulated world: a gateway, a virtual clock and a network.
pub struct Sim {
    /// The gateway under test.
    pub gw: Gateway,
    /// Virtual time.
    pub clock: Clock,
    /// Links to and from the gateway.
    pub net: Net,
    /// The seed everything derives from.
    pub seed: u64,
    /// Virtual participants' log lines (path, line).
    pub log_lines: Vec<(String, Bytes)>,
    /// Audit lines (without their newline) and their file, in order within each file.
    pub audits: Vec<(AuditFile, String)>,
    /// Gateway events, in order.
    pub events: Vec<GatewayEvent>,
}

/// The seed `MEW_SIM_SEED` names, else `default`.
pub fn seed_or(default: u64) -> u64 {
    std::env::var("MEW_SIM_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

/// The invitation-token source of a simulated gateway: seeded, derived from the
/// simulation's seed, never the generator of ids.
pub fn seeded_tokens(seed: u64) -> Box<dyn TokenSource> {
    Box::new(IdGen::new(seed.rotate_left(29) ^ 0x5EC2_E770_C0FF_EE00))
}

/// The start of simulated time: 2025-01-09T10:00:00Z.
pub const EPOCH: Time = Time::from_unix_millis(1_736_416_800_000);

impl Sim {
    /// A simulation of `config` with no network latency.
    pub fn new(config: SpaceConfig) -> Sim {
        Sim::with_latency(config, 0, 0)
    }

    /// A simulation with latencies up to `max_latency_ms`, seeded by `MEW_SIM_SEED` or `seed`.
    pub fn with_latency(config: SpaceConfig, seed: u64, max_latency_ms: u64) -> Sim {
        let seed = seed_or(seed);
        Sim {
            gw: Gateway::new(config, seed, seeded_tokens(seed), None),
            clock: Clock::new(EPOCH),
            net: Net::new(seed, max_latency_ms),
            seed,
            log_lines: Vec::new(),
            audits: Vec::new(),
            events: Vec::new(),
        }
    }

    /// A simulation of a space given as YAML.
    pub fn from_yaml(yaml: &str) -> Sim {
        Sim::new(SpaceConfig::from_yaml(yaml).unwrap_or_else(|e| panic!("bad test config:\n{e}")))
    }

    /// The current virtual time.
    pub fn now(&self) -> Time {
        self.clock.now()
    }

    /// Opens a connection (with an Authorization bearer when given) and settles.
    pub fn connect(&mut self, bearer: Option<&str>) -> ConnId {
        let now = self.now();
        let conn = self
            .gw
            .handle_input(
                now,
                Input::Connected {
                    bearer: Bearer::from(bearer),
                },
            )
            .conn()
            .expect("a connection");
        self.net.endpoints.insert(
            conn,
            Endpoint {
                drains: true,
                ..Endpoint::default()
            },
        );
        self.pump();
        conn
    }

    /// Connects with a bearer token and runs until quiet.
    pub fn join(&mut self, token: &str) -> ConnId {
        let c = self.connect(Some(token));
        self.run_until_quiet();
        c
    }

    /// Sends a text frame from a client.
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
            let next = [self.net.next_arrival(), self.gw.poll_timeout()]
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
        self.gw.handle_input(end, Input::Timeout);
        self.pump();
    }

    fn step_to(&mut self, t: Time) {
        self.clock.advance_to(t);
        let now = self.now();
        while let Some(f) = self.net.pop_due(now) {
            self.gw.handle_input(
                now,
                Input::Frame {
                    conn: f.conn,
                    frame: f.frame,
                },
            );
            self.pump();
        }
        if self.gw.poll_timeout().is_some_and(|d| d <= now) {
            self.gw.handle_input(now, Input::Timeout);
        }
        self.pump();
    }

    /// Drains the gateway's outputs the way a driver would.
    pub fn pump(&mut self) {
        let now = self.now();
        while let Some(o) = self.gw.poll_output() {
            match o {
                Output::Transmit { conn, frame } => {
                    let ep = self.net.endpoints.entry(conn).or_default();
                    assert!(
                        ep.closed.is_none(),
                        "seed {}: transmit after close on {conn}",
                        self.seed
                    );
                    let len = frame.len();
                    ep.inbox.push(frame);
                    if ep.drains {
                        self.gw.handle_input(
                            now,
                            Input::Sent {
                                conn,
                                frames: 1,
                                bytes: len,
                            },
                        );
                    }
                }
                Output::Ping { conn } => {
                    self.net.endpoints.entry(conn).or_default().pings += 1;
                }
                Output::Close { conn, code, reason } => {
                    self.net.endpoints.entry(conn).or_default().closed = Some((code, reason));
                    self.gw.handle_input(now, Input::Disconnected { conn });
                }
                Output::AppendLog { path, line } => self.log_lines.push((path, line)),
                Output::Event(e) => self.events.push(*e),
            }
        }
        while let Some(batch) = self.gw.poll_audit(Vec::new) {
            let text = String::from_utf8(batch.bytes).expect("audit lines are UTF-8");
            assert_eq!(
                text.lines().count() as u64,
                batch.lines,
                "seed {}",
                self.seed
            );
            let file = batch.file;
            self.audits
                .extend(text.lines().map(|l| (file, l.to_owned())));
        }
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
        self.endpoint(conn)
            .inbox
            .iter()
            .map(|f| {
                serde_json::from_slice(f)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(f).into_owned()))
            })
            .collect()
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

impl Drop for Sim {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "simulation seed: {} (replay with MEW_SIM_SEED={})",
                self.seed, self.seed
            );
        }
    }
}

/// A complete envelope from `from`.
pub fn envelope(id: &str, from: &str, kind: &str, to: Option<&[&str]>, payload: Value) -> Value {
    let mut v = serde_json::json!({
        "protocol": "mew/v0.4",
        "id": id,
        "ts": "2025-01-09T10:00:00.000Z",
        "from": from,
        "kind": kind,
        "payload": payload,
    });
    if let Some(to) = to {
        v["to"] = serde_json::json!(to);
    }
    v
}
