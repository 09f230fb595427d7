//! Participant state machines and the gateway core over one simulated network.
//!
//! A [`World`] holds one [`Gateway`], any number of [`Participant`] machines (and raw
//! scripted sockets), a virtual clock and seeded links. Each link is two FIFO lanes (as a
//! WebSocket is); latency is drawn per message from the seed, and when messages of several
//! links are due at once the seed picks the order. The clock jumps to the earliest of: the
//! next arrival, the next scheduled application action, and every machine's
//! `poll_timeout`. The seed comes from `MEW_SIM_SEED` when set and is printed when a test
//! panics, so every run replays exactly.

pub mod behaviour;
pub mod link;
pub mod machine;

pub use behaviour::{Behaviour, Later, Verdict};
pub use machine::{AgentNode, Machine, ModelScript};

use super::{Clock, EPOCH, seed_or};
use bytes::Bytes;
use link::{Dir, Link, Msg};
use mew_core::Time;
use mew_core::gateway::{Bearer, Input};
use mew_core::gateway::{ConnId, Gateway, GatewayEvent, Output as GwOutput, SpaceConfig};
use mew_core::ids::IdGen;
use mew_core::participant::{
    ClientState, Event, Output as POutput, Participant, ParticipantConfig, RequestError, RequestId,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// Index of a node (participant or raw socket) in a [`World`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub usize);

/// A raw socket's reaction to a frame: the frames to send back.
pub type RawHandler = Box<dyn FnMut(&str) -> Vec<String>>;

/// A check run on every frame the gateway hands to a connection, before it travels.
pub type TransmitHook = Box<dyn FnMut(&Gateway, ConnId, &Bytes)>;

/// One simulated peer of the gateway.
pub struct Node {
    /// Name for messages (usually the participant id).
    pub name: String,
    machine: Option<Machine>,
    /// The current connection.
    pub conn: Option<ConnId>,
    /// Every event the participant emitted, in order.
    pub events: Vec<Event>,
    /// Every frame delivered to this node, in order.
    pub received: Vec<Bytes>,
    /// Close frames received from the gateway (code, reason).
    pub closes: Vec<(u16, String)>,
    /// Latency range of this node's links, in ms.
    pub latency: (u64, u64),
    /// Whether connection attempts succeed.
    pub reachable: bool,
    bearer: Option<String>,
    behaviours: Vec<Behaviour>,
    raw: Option<RawHandler>,
}

impl Node {
    /// The participant machine (panics for a raw node).
    pub fn p(&self) -> &Participant {
        self.machine.as_ref().expect("a participant node").p()
    }

    /// Received frames parsed as JSON (stream frames as strings).
    pub fn received_json(&self) -> Vec<Value> {
        self.received
            .iter()
            .map(|f| {
                serde_json::from_slice(f)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(f).into_owned()))
            })
            .collect()
    }

    /// Received envelopes of one kind.
    pub fn received_kind(&self, kind: &str) -> Vec<Value> {
        self.received_json()
            .into_iter()
            .filter(|v| v["kind"] == kind)
            .collect()
    }
}

enum Action {
    Open(usize),
    Later(usize, behaviour::Deferred),
}

/// The simulated world.
pub struct World {
    /// The gateway core under test.
    pub gw: Gateway,
    /// Virtual time.
    pub clock: Clock,
    /// The seed everything derives from.
    pub seed: u64,
    rng: IdGen,
    nodes: Vec<Node>,
    links: BTreeMap<ConnId, Link>,
    actions: BTreeMap<(Time, u64), Action>,
    seq: u64,
    trace: u64,
    delivered: u64,
    /// Frames a node transmitted while it had no connection.
    pub lost: u64,
    /// Gateway events, in order.
    pub gw_events: Vec<GatewayEvent>,
    /// Called on every gateway Transmit.
    pub transmit_hook: Option<TransmitHook>,
    default_latency: (u64, u64),
    same_instant: u64,
    last_instant: Time,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// More steps than this at one instant means some machine keeps asking for a timer it does
/// not consume.
const MAX_STEPS_PER_INSTANT: u64 = 100_000;

impl World {
    /// A world running `config`, links with latencies in `latency_ms` (inclusive), seeded by
    /// `MEW_SIM_SEED` or `seed`.
    pub fn new(config: SpaceConfig, seed: u64, latency_ms: (u64, u64)) -> World {
        World::with_exact_seed(config, seed_or(seed), latency_ms)
    }

    /// [`World::new`] with exactly this seed, whatever `MEW_SIM_SEED` says.
    pub fn with_exact_seed(config: SpaceConfig, seed: u64, latency_ms: (u64, u64)) -> World {
        World {
            gw: Gateway::new(config, seed, crate::sim::seeded_tokens(seed), None),
            clock: Clock::new(EPOCH),
            seed,
            rng: IdGen::new(seed ^ 0x0057_0F1D_5EED),
            nodes: Vec::new(),
            links: BTreeMap::new(),
            actions: BTreeMap::new(),
            seq: 0,
            trace: FNV_OFFSET,
            delivered: 0,
            lost: 0,
            gw_events: Vec::new(),
            transmit_hook: None,
            default_latency: (latency_ms.0, latency_ms.1.max(latency_ms.0)),
            same_instant: 0,
            last_instant: EPOCH,
        }
    }

    /// A world running the space given as YAML.
    pub fn from_yaml(yaml: &str, seed: u64, latency_ms: (u64, u64)) -> World {
        let config =
            SpaceConfig::from_yaml(yaml).unwrap_or_else(|e| panic!("bad test config:\n{e}"));
        World::new(config, seed, latency_ms)
    }

    /// The current virtual time.
    pub fn now(&self) -> Time {
        self.clock.now()
    }

    /// A hash of every message delivered so far, in delivery order, with its time, lane and
    /// node: two runs with equal traces saw the same history.
    pub fn trace(&self) -> u64 {
        self.trace
    }

    /// Messages delivered so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// A participant configuration for `id` with this token (the id is requested too).
    pub fn config_for(&self, id: &str, token: &str) -> ParticipantConfig {
        ParticipantConfig {
            gateway_url: "ws://gateway.sim/ws".into(),
            space: "test-space".into(),
            token: token.into(),
            participant_id: Some(id.into()),
            ..Default::default()
        }
    }

    /// The seed of the next node's machine.
    pub fn next_seed(&self) -> u64 {
        self.seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(self.nodes.len() as u64 + 1)
    }

    /// Adds a participant machine (not yet started).
    pub fn add(&mut self, name: &str, config: ParticipantConfig) -> NodeId {
        let seed = self.next_seed();
        self.add_machine(
            name,
            Machine::Participant(Box::new(Participant::new(config, seed))),
        )
    }

    /// Adds a machine (not yet started).
    pub fn add_machine(&mut self, name: &str, machine: Machine) -> NodeId {
        let idx = self.nodes.len();
        self.nodes.push(Node {
            name: name.into(),
            machine: Some(machine),
            conn: None,
            events: Vec::new(),
            received: Vec::new(),
            closes: Vec::new(),
            latency: self.default_latency,
            reachable: true,
            bearer: None,
            behaviours: Vec::new(),
            raw: None,
        });
        NodeId(idx)
    }

    /// Adds, starts and runs until the participant is ready (or panics after 30 s).
    pub fn join(&mut self, id: &str, token: &str) -> NodeId {
        let cfg = self.config_for(id, token);
        self.join_with(id, cfg)
    }

    /// [`World::join`] with a configuration.
    pub fn join_with(&mut self, id: &str, config: ParticipantConfig) -> NodeId {
        let n = self.add(id, config);
        self.start(n);
        let ok = self.run_until(Duration::from_secs(30), |w| {
            w.p(n).state() == ClientState::Ready
        });
        assert!(ok, "seed {}: {id} did not become ready", self.seed);
        n
    }

    /// Adds an agent answered by `script` (the model taking `model_latency` per call),
    /// starts it and runs until it is ready.
    pub fn join_agent(
        &mut self,
        id: &str,
        config: mew_core::agent::AgentConfig,
        script: ModelScript,
        model_latency: Duration,
    ) -> NodeId {
        let seed = self.next_seed();
        let agent = mew_core::tools::ToolsAgent::new(config, seed);
        let n = self.add_machine(id, Machine::agent(agent, script, model_latency));
        self.start(n);
        let ok = self.run_until(Duration::from_secs(30), |w| {
            w.p(n).state() == ClientState::Ready
        });
        assert!(ok, "seed {}: {id} did not become ready", self.seed);
        n
    }

    /// An agent node.
    pub fn agent(&self, n: NodeId) -> &AgentNode {
        self.node(n)
            .machine
            .as_ref()
            .and_then(Machine::agent_node)
            .expect("an agent node")
    }

    /// Runs a command on an agent at the current time, then lets the outputs flow.
    pub fn act_agent<R>(
        &mut self,
        n: NodeId,
        f: impl FnOnce(&mut mew_core::tools::ToolsAgent, Time) -> R,
    ) -> R {
        let now = self.now();
        let node = self.nodes[n.0]
            .machine
            .as_mut()
            .and_then(Machine::agent_node_mut)
            .expect("an agent node");
        let r = f(&mut node.agent, now);
        self.pump();
        r
    }

    /// Starts a participant (it asks to connect).
    pub fn start(&mut self, n: NodeId) {
        let now = self.now();
        self.node_mut(n)
            .machine
            .as_mut()
            .expect("participant")
            .start(now);
        self.pump();
    }

    /// A raw socket connecting with this bearer (if any); frames are sent by hand.
    pub fn connect_raw(&mut self, name: &str, bearer: Option<&str>) -> NodeId {
        let idx = self.nodes.len();
        self.nodes.push(Node {
            name: name.into(),
            machine: None,
            conn: None,
            events: Vec::new(),
            received: Vec::new(),
            closes: Vec::new(),
            latency: self.default_latency,
            reachable: true,
            bearer: bearer.map(str::to_owned),
            behaviours: Vec::new(),
            raw: None,
        });
        self.open(idx);
        NodeId(idx)
    }

    /// Makes a raw socket answer every frame it receives with `handler`'s frames.
    pub fn on_raw_frame(&mut self, n: NodeId, handler: impl FnMut(&str) -> Vec<String> + 'static) {
        self.node_mut(n).raw = Some(Box::new(handler));
    }

    /// Sends a frame from a raw socket.
    pub fn send_raw(&mut self, n: NodeId, frame: impl Into<String>) {
        self.transmit_from(n.0, Bytes::from(frame.into()));
        self.pump();
    }

    /// Adds application behaviour to a participant (run on each of its events).
    pub fn behave(&mut self, n: NodeId, b: Behaviour) {
        self.node_mut(n).behaviours.push(b);
    }

    /// Sets the latency range of a node's links.
    pub fn set_latency(&mut self, n: NodeId, min_ms: u64, max_ms: u64) {
        self.node_mut(n).latency = (min_ms, max_ms.max(min_ms));
    }

    /// Makes a node's connection attempts fail (or succeed again).
    pub fn set_reachable(&mut self, n: NodeId, reachable: bool) {
        self.node_mut(n).reachable = reachable;
    }

    /// A node.
    pub fn node(&self, n: NodeId) -> &Node {
        &self.nodes[n.0]
    }

    fn node_mut(&mut self, n: NodeId) -> &mut Node {
        &mut self.nodes[n.0]
    }

    /// Every node.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        self.nodes.iter().enumerate().map(|(i, n)| (NodeId(i), n))
    }

    /// A node's participant machine.
    pub fn p(&self, n: NodeId) -> &Participant {
        self.node(n).p()
    }

    /// Runs a command on a participant at the current time, then lets the outputs flow.
    pub fn act<R>(&mut self, n: NodeId, f: impl FnOnce(&mut Participant, Time) -> R) -> R {
        let now = self.now();
        let r = f(
            self.nodes[n.0]
                .machine
                .as_mut()
                .expect("participant node")
                .p_mut(),
            now,
        );
        self.pump();
        r
    }

    /// Events a node emitted.
    pub fn events(&self, n: NodeId) -> &[Event] {
        &self.node(n).events
    }

    /// The outcome of a request, once completed.
    pub fn outcome(&self, n: NodeId, id: &RequestId) -> Option<&Result<Value, RequestError>> {
        self.events(n).iter().find_map(|e| match e {
            Event::RequestCompleted { id: i, result } if i == id => Some(result),
            _ => None,
        })
    }

    /// The participant's id.
    pub fn id_of(&self, n: NodeId) -> String {
        self.p(n).id().unwrap_or_default().to_owned()
    }

    /// Hands a frame straight to a participant machine, as if its gateway had sent it.
    pub fn inject(&mut self, n: NodeId, frame: &str) {
        let now = self.now();
        if let Some(p) = self.nodes[n.0].machine.as_mut() {
            p.handle_frame(now, frame);
        }
        self.pump();
    }

    /// Cuts a node's link without a close handshake: in-flight messages are lost and both
    /// ends learn of it at once.
    pub fn drop_link(&mut self, n: NodeId) {
        let now = self.now();
        let Some(conn) = self.nodes[n.0].conn.take() else {
            return;
        };
        if let Some(link) = self.links.remove(&conn)
            && !link.gateway_closed
        {
            self.gw.handle_input(now, Input::Disconnected { conn });
        }
        if let Some(p) = self.nodes[n.0].machine.as_mut() {
            p.handle_disconnected(now, "connection lost");
        }
        self.pump();
    }

    /// Messages in flight on any link.
    pub fn in_flight(&self) -> usize {
        self.links.values().map(|l| l.up.len() + l.down.len()).sum()
    }

    fn latency(&mut self, node: usize) -> Duration {
        let (lo, hi) = self.nodes[node].latency;
        Duration::from_millis(lo + self.rng.below(hi - lo + 1))
    }

    fn push(&mut self, conn: ConnId, dir: Dir, msg: Msg) {
        let Some(node) = self.links.get(&conn).map(|l| l.node) else {
            return;
        };
        let at = self.now() + self.latency(node);
        if let Some(l) = self.links.get_mut(&conn) {
            l.lane(dir).push(at, msg);
        }
    }

    fn transmit_from(&mut self, node: usize, frame: Bytes) {
        match self.nodes[node].conn {
            Some(conn) => self.push(conn, Dir::Up, Msg::Frame(frame)),
            None => self.lost += 1,
        }
    }

    fn schedule(&mut self, at: Time, a: Action) {
        self.seq += 1;
        self.actions.insert((at, self.seq), a);
    }

    fn open(&mut self, node: usize) {
        let now = self.now();
        if !self.nodes[node].reachable {
            if let Some(p) = self.nodes[node].machine.as_mut() {
                p.handle_disconnected(now, "connection refused");
            }
            self.pump();
            return;
        }
        let bearer = self.nodes[node].bearer.clone();
        let conn = self
            .gw
            .handle_input(
                now,
                Input::Connected {
                    bearer: Bearer::from(bearer.as_deref()),
                },
            )
            .conn()
            .expect("a connection");
        self.links.insert(conn, Link::new(node));
        self.nodes[node].conn = Some(conn);
        if let Some(p) = self.nodes[node].machine.as_mut() {
            p.handle_connected(now);
        }
        self.pump();
    }

    /// Drains every machine's outputs until none has anything left, as drivers would.
    pub fn pump(&mut self) {
        loop {
            let mut moved = self.pump_gateway();
            for i in 0..self.nodes.len() {
                moved |= self.pump_node(i);
            }
            if !moved {
                break;
            }
        }
    }

    fn pump_gateway(&mut self) -> bool {
        let now = self.now();
        let mut moved = false;
        while let Some(o) = self.gw.poll_output() {
            moved = true;
            match o {
                GwOutput::Transmit { conn, frame } => {
                    if let Some(h) = self.transmit_hook.as_mut() {
                        h(&self.gw, conn, &frame);
                    }
                    let len = frame.len();
                    self.push(conn, Dir::Down, Msg::Frame(frame));
                    self.gw.handle_input(
                        now,
                        Input::Sent {
                            conn,
                            frames: 1,
                            bytes: len,
                        },
                    );
                }
                GwOutput::Ping { conn } => self.push(conn, Dir::Down, Msg::Ping),
                GwOutput::Close { conn, code, reason } => {
                    self.push(conn, Dir::Down, Msg::Close { code, reason });
                    if let Some(l) = self.links.get_mut(&conn)
                        && !l.gateway_closed
                    {
                        l.gateway_closed = true;
                        self.gw.handle_input(now, Input::Disconnected { conn });
                    }
                }
                GwOutput::Event(e) => self.gw_events.push(*e),
                GwOutput::AppendLog { .. } => {}
            }
        }
        moved
    }

    fn pump_node(&mut self, i: usize) -> bool {
        let now = self.now();
        let mut moved = false;
        while let Some(o) = self.nodes[i]
            .machine
            .as_mut()
            .and_then(|p| p.poll_output(now))
        {
            moved = true;
            match o {
                POutput::Connect { headers, .. } => {
                    let bearer = headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
                        .and_then(|(_, v)| v.strip_prefix("Bearer "))
                        .map(str::to_owned);
                    self.nodes[i].bearer = bearer;
                    let at = now + self.latency(i);
                    self.schedule(at, Action::Open(i));
                }
                POutput::Transmit(text) => self.transmit_from(i, Bytes::from(text)),
                POutput::Ping => {
                    if let Some(conn) = self.nodes[i].conn {
                        self.push(conn, Dir::Up, Msg::Ping);
                    }
                }
                POutput::Disconnect { reason } => {
                    if let Some(conn) = self.nodes[i].conn.take() {
                        self.push(conn, Dir::Up, Msg::Close { code: 1000, reason });
                    }
                }
                POutput::Event(e) => {
                    self.nodes[i].events.push(e.clone());
                    self.run_behaviours(i, now, &e);
                }
            }
        }
        moved
    }

    fn run_behaviours(&mut self, i: usize, now: Time, e: &Event) {
        if self.nodes[i].behaviours.is_empty() {
            return;
        }
        let mut bs = std::mem::take(&mut self.nodes[i].behaviours);
        let mut later = Later::default();
        if let Some(m) = self.nodes[i].machine.as_mut() {
            let p = m.p_mut();
            for b in &mut bs {
                b(p, now, e, &mut later);
            }
        }
        bs.append(&mut self.nodes[i].behaviours);
        self.nodes[i].behaviours = bs;
        for (d, f) in later.take() {
            self.schedule(now + d, Action::Later(i, f));
        }
    }

    fn next_due(&self) -> Option<Time> {
        let lanes = self
            .links
            .values()
            .flat_map(|l| [l.up.head(), l.down.head()])
            .flatten();
        let machines = self
            .nodes
            .iter()
            .filter_map(|n| n.machine.as_ref().and_then(|p| p.poll_timeout()));
        lanes
            .chain(machines)
            .chain(self.actions.keys().next().map(|(t, _)| *t))
            .chain(self.gw.poll_timeout())
            .min()
    }

    /// Handles everything due at the next instant; `false` when nothing is scheduled.
    pub fn step(&mut self) -> bool {
        let Some(t) = self.next_due() else {
            return false;
        };
        self.clock.advance_to(t);
        let now = self.now();
        if now == self.last_instant {
            self.same_instant += 1;
            assert!(
                self.same_instant < MAX_STEPS_PER_INSTANT,
                "seed {}: livelock at {now:?}: timers never consumed",
                self.seed
            );
        } else {
            self.last_instant = now;
            self.same_instant = 0;
        }
        loop {
            let due: Vec<(ConnId, Dir)> = self
                .links
                .iter()
                .flat_map(|(c, l)| {
                    [
                        l.up.head().filter(|a| *a <= now).map(|_| (*c, Dir::Up)),
                        l.down.head().filter(|a| *a <= now).map(|_| (*c, Dir::Down)),
                    ]
                })
                .flatten()
                .collect();
            if due.is_empty() {
                break;
            }
            let (conn, dir) = due[self.rng.below(due.len() as u64) as usize];
            self.deliver(now, conn, dir);
            self.pump();
        }
        while let Some(entry) = self.actions.first_entry() {
            if entry.key().0 > now {
                break;
            }
            match entry.remove() {
                Action::Open(i) => self.open(i),
                Action::Later(i, f) => {
                    if let Some(m) = self.nodes[i].machine.as_mut() {
                        f(m.p_mut(), now);
                    }
                    self.pump();
                }
            }
        }
        if self.gw.poll_timeout().is_some_and(|t| t <= now) {
            self.gw.handle_input(now, Input::Timeout);
            self.pump();
        }
        for i in 0..self.nodes.len() {
            let due = self.nodes[i]
                .machine
                .as_ref()
                .and_then(|p| p.poll_timeout())
                .is_some_and(|t| t <= now);
            if due {
                self.nodes[i]
                    .machine
                    .as_mut()
                    .expect("checked")
                    .handle_timeout(now);
                self.pump();
            }
        }
        true
    }

    fn deliver(&mut self, now: Time, conn: ConnId, dir: Dir) {
        let Some(link) = self.links.get_mut(&conn) else {
            return;
        };
        let node = link.node;
        let Some(msg) = link.lane(dir).pop() else {
            return;
        };
        let gateway_closed = link.gateway_closed;
        self.delivered += 1;
        self.trace = fnv(self.trace, &now.as_unix_millis().to_le_bytes());
        self.trace = fnv(self.trace, &[node as u8, dir as u8]);
        match &msg {
            Msg::Frame(f) => self.trace = fnv(self.trace, f),
            Msg::Close { code, .. } => self.trace = fnv(self.trace, &code.to_le_bytes()),
            Msg::Ping => self.trace = fnv(self.trace, b"ping"),
            Msg::Pong => self.trace = fnv(self.trace, b"pong"),
        }
        match dir {
            Dir::Up => {
                if gateway_closed {
                    return;
                }
                match msg {
                    Msg::Frame(frame) => {
                        self.gw.handle_input(now, Input::Frame { conn, frame });
                    }
                    Msg::Ping => self.push(conn, Dir::Down, Msg::Pong),
                    Msg::Pong => {
                        self.gw.handle_input(now, Input::Pong { conn });
                    }
                    Msg::Close { .. } => {
                        if let Some(l) = self.links.get_mut(&conn) {
                            l.gateway_closed = true;
                            l.up = Default::default();
                        }
                        self.gw.handle_input(now, Input::Disconnected { conn });
                    }
                }
            }
            Dir::Down => {
                if self.nodes[node].conn != Some(conn) {
                    return; // the node already left this connection
                }
                match msg {
                    Msg::Frame(f) => {
                        self.nodes[node].received.push(f.clone());
                        let text = String::from_utf8_lossy(&f);
                        if let Some(p) = self.nodes[node].machine.as_mut() {
                            p.handle_frame(now, &text);
                        } else if let Some(h) = self.nodes[node].raw.as_mut() {
                            let replies = h(&text);
                            for r in replies {
                                self.transmit_from(node, Bytes::from(r));
                            }
                        }
                    }
                    Msg::Ping => self.push(conn, Dir::Up, Msg::Pong),
                    Msg::Pong => {
                        if let Some(p) = self.nodes[node].machine.as_mut() {
                            p.handle_pong(now);
                        }
                    }
                    Msg::Close { code, reason } => {
                        self.nodes[node].closes.push((code, reason.clone()));
                        self.nodes[node].conn = None;
                        self.links.remove(&conn);
                        if let Some(p) = self.nodes[node].machine.as_mut() {
                            p.handle_disconnected(now, &reason);
                        }
                    }
                }
            }
        }
    }

    /// Steps until nothing is in flight and no application action is scheduled (timers
    /// falling due on the way fire), at most 10 virtual minutes.
    pub fn run_until_quiet(&mut self) {
        let end = self.now() + Duration::from_secs(600);
        while (self.in_flight() > 0 || !self.actions.is_empty()) && self.now() <= end {
            if !self.step() {
                break;
            }
        }
    }

    /// Steps until `pred` holds (checked after each step) or `limit` of virtual time
    /// passed; whether it held.
    pub fn run_until(&mut self, limit: Duration, mut pred: impl FnMut(&World) -> bool) -> bool {
        let end = self.now() + limit;
        loop {
            if pred(self) {
                return true;
            }
            match self.next_due() {
                Some(t) if t <= end => {
                    self.step();
                }
                _ => {
                    self.clock.advance_to(end);
                    return pred(self);
                }
            }
        }
    }

    /// Steps through everything due up to `t`, then sets the clock to `t`.
    pub fn run_until_time(&mut self, t: Time) {
        while self.next_due().is_some_and(|d| d <= t) {
            self.step();
        }
        self.clock.advance_to(t);
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let t = self.now() + d;
        self.run_until_time(t);
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "simulation seed: {} (replay with MEW_SIM_SEED={})",
                self.seed, self.seed
            );
        }
    }
}

/// The space the participant scenarios run in: a trusted human (`*`), a proposer that may
/// only propose, chat and finish work, a caller that may request directly, a service that
/// answers MCP (and may document its own resume), and two more services for discovery.
pub const SPACE: &str = r#"
space: {id: test-space, name: Simulated space}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  agent:
    tokens: [agent-token]
    capabilities:
      - {kind: mcp/proposal}
      - {kind: mcp/withdraw}
      - {kind: chat}
      - {kind: chat/acknowledge}
      - {kind: capability/grant-ack}
      - {kind: participant/status}
      - {kind: participant/compact-done}
  caller:
    tokens: [caller-token]
    capabilities:
      - {kind: mcp/request}
      - {kind: chat}
  service:
    tokens: [service-token]
    capabilities:
      - {kind: mcp/response}
      - {kind: chat}
      - {kind: chat/acknowledge}
      - {kind: participant/status}
      - {kind: participant/compact-done}
      - {kind: participant/resume}
  slow:
    tokens: [slow-token]
    capabilities: [{kind: mcp/response}, {kind: chat}]
  broken:
    tokens: [broken-token]
    capabilities: [{kind: mcp/response}, {kind: chat}]
"#;
