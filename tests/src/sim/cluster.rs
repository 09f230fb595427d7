//! A replicated space in simulation: [`mew_core::cluster::Node`]s (each owning its
//! gateway) over one shared in-memory log, on the same parts as [`super::World`]: a virtual
//! clock, a seed everything random derives from (printed when a test panics), and a trace
//! of the history. Every input a node gets goes through the adapter [`super::node`].
//!
//! Each node reads the log at its own pace (the seed decides how far each time), may lose
//! the log (its publishes are refused) or die (it stops altogether).

use super::node::{self, Input};
use super::{Clock, EPOCH, Seed, Trace, seeded_tokens};
use bytes::Bytes;
use mew_core::Time;
use mew_core::cluster::{Node, NodeOptions, NodeOutput, Replica};
use mew_core::gateway::{Bearer, ConnId, Output, SpaceConfig};
use mew_core::ids::IdGen;
use mew_core::secret::TokenHash;
use std::collections::BTreeMap;
use std::time::Duration;

/// One node and what its driver saw.
pub struct ClusterNode {
    /// The node (its replica and gateway inside).
    pub node: Node,
    /// Whether it runs (a dead node reads, writes and keeps time no more).
    pub alive: bool,
    /// Whether it reaches the log.
    pub reach: bool,
    /// Connections this node holds, by its number for them.
    pub conns: BTreeMap<u64, ConnId>,
    /// Frames its gateway sent to the connections it holds.
    pub received: Vec<(ConnId, Bytes)>,
    /// Frames the node itself sent to a connection (refusals while the log is down).
    pub directs: Vec<(ConnId, Bytes)>,
    /// Closes it made: connection, code, and whether it forgot the connection.
    pub closes: Vec<(ConnId, u16, bool)>,
    /// The nodes it saw declared gone.
    pub gone: Vec<String>,
    /// Snapshots it wrote (entries applied, bytes).
    pub snapshots: Vec<(u64, Vec<u8>)>,
    /// Posts refused because the log did not take them.
    pub refused_posts: usize,
}

/// The simulated cluster: nodes, the log they share, a virtual clock and a seed.
pub struct ClusterWorld {
    /// The log, as stored.
    pub log: Vec<Bytes>,
    /// The nodes, in the order added.
    pub nodes: Vec<ClusterNode>,
    /// Virtual time.
    pub clock: Clock,
    /// Randomness for the schedule (steps of time, how far a node reads).
    pub rng: IdGen,
    /// The space every node serves.
    pub config: SpaceConfig,
    /// The seed everything derives from.
    pub seed: u64,
    trace: Trace,
    _replay: Seed,
}

impl ClusterWorld {
    /// Nodes `ids`, started, over an empty log, with exactly this seed (a test takes it
    /// from [`super::seeds`] or [`super::seed_or`]).
    pub fn new(config: SpaceConfig, seed: u64, ids: &[&str], snapshot_every: u64) -> Self {
        let mut w = ClusterWorld {
            log: Vec::new(),
            nodes: Vec::new(),
            clock: Clock::new(EPOCH),
            rng: IdGen::new(seed ^ 0x0C1A_57E2_5EED),
            config,
            seed,
            trace: Trace::default(),
            _replay: Seed(seed),
        };
        for id in ids {
            w.add(id, snapshot_every);
        }
        w
    }

    /// The current virtual time.
    pub fn now(&self) -> Time {
        self.clock.now()
    }

    /// A hash of the history: every record published (with its position) and every frame,
    /// direct answer and close a node's driver carried out, with its time.
    pub fn trace(&self) -> u64 {
        self.trace.hash()
    }

    fn node_for(&self, id: &str, replica: Replica, snapshot_every: u64) -> ClusterNode {
        let mut opts = NodeOptions::new(id);
        opts.snapshot_every = snapshot_every;
        let tokens = seeded_tokens(self.seed.wrapping_add(self.nodes.len() as u64 + 1));
        ClusterNode {
            node: Node::new(opts, replica, self.log.len() as u64, tokens),
            alive: true,
            reach: true,
            conns: BTreeMap::new(),
            received: Vec::new(),
            directs: Vec::new(),
            closes: Vec::new(),
            gone: Vec::new(),
            snapshots: Vec::new(),
            refused_posts: 0,
        }
    }

    /// Adds a new node with an empty replica and starts it; its index.
    pub fn add(&mut self, id: &str, snapshot_every: u64) -> usize {
        let replica = Replica::new(id, self.config.clone(), None);
        let n = self.node_for(id, replica, snapshot_every);
        self.nodes.push(n);
        let i = self.nodes.len() - 1;
        self.start(i);
        i
    }

    /// Adds a node over `replica` (restored from a snapshot), not yet started: it takes
    /// inputs once it has read the log as it is now.
    pub fn add_restored(&mut self, id: &str, replica: Replica, snapshot_every: u64) -> usize {
        let n = self.node_for(id, replica, snapshot_every);
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    /// Node `i` starts (again: its announcement ends its earlier life).
    pub fn start(&mut self, i: usize) {
        self.input(i, Input::Start);
    }

    /// Hands node `i` an input through the adapter and carries out its outputs.
    pub fn input(&mut self, i: usize, input: Input<'_>) -> Option<u64> {
        let now = self.now();
        let r = node::input(&mut self.nodes[i].node, now, input);
        self.outputs(i);
        r
    }

    /// Carries out node `i`'s outputs: publishes go into the log when it is reachable.
    pub fn outputs(&mut self, i: usize) {
        while let Some(o) = self.nodes[i].node.poll_output() {
            let now = self.now();
            let n = &mut self.nodes[i];
            match o {
                NodeOutput::Publish { record, undo } => {
                    if n.reach {
                        let bytes = Bytes::from(record.encode());
                        self.trace.event(now, b'L', self.log.len() as u64, &bytes);
                        self.log.push(bytes);
                    } else {
                        let why = "the log is unreachable";
                        node::input(&mut n.node, now, Input::Refused { undo, why });
                    }
                }
                NodeOutput::Connected { local, conn } => {
                    n.conns.insert(local, conn);
                }
                NodeOutput::Abandon { .. } | NodeOutput::Posted { .. } => {}
                NodeOutput::PostRefused { .. } => n.refused_posts += 1,
                NodeOutput::Direct { conn, frame } => {
                    self.trace.event(now, b'd', conn.as_u64(), &frame);
                    n.directs.push((conn, frame));
                }
                NodeOutput::Close {
                    conn, code, forget, ..
                } => {
                    self.trace
                        .event(now, b'x', conn.as_u64(), &code.to_le_bytes());
                    n.closes.push((conn, code, forget));
                    if forget {
                        n.conns.retain(|_, c| *c != conn);
                    }
                }
                NodeOutput::Snapshot { applied, bytes } => n.snapshots.push((applied, bytes)),
                NodeOutput::NodeGone { node, .. } => n.gone.push(node),
                NodeOutput::Warning(w) => panic!("seed {}: warning: {w}", self.seed),
                NodeOutput::Broken(b) => panic!("seed {}: broken: {b}", self.seed),
            }
        }
    }

    /// Node `i` reads what the log holds past its replica (all of it, or a part the seed
    /// picks), carrying out its gateway's outputs after each entry.
    pub fn read(&mut self, i: usize, all: bool) {
        let n = &self.nodes[i];
        if !n.alive || !n.reach {
            return;
        }
        let from = n.node.applied() as usize;
        let upto = if all {
            self.log.len()
        } else {
            from + self.rng.below((self.log.len() - from) as u64 + 1) as usize
        };
        for seq in from..upto {
            let now = self.now();
            let bytes = self.log[seq].clone();
            let seq = seq as u64 + 1;
            let n = &mut self.nodes[i];
            node::input(&mut n.node, now, Input::Entry { seq, bytes });
            while let Some(o) = super::gateway::poll(n.node.gateway_mut()) {
                if let Output::Transmit { conn, frame } = o
                    && n.conns.values().any(|c| *c == conn)
                {
                    self.trace.event(now, b'<', conn.as_u64(), &frame);
                    n.received.push((conn, frame));
                }
            }
            self.input(i, Input::Drained);
        }
    }

    /// `ms` of time pass in steps the seed picks; every live node reads and keeps time.
    pub fn run(&mut self, ms: u64) {
        let end = self.now() + Duration::from_millis(ms);
        while self.now() < end {
            let step = 1 + self.rng.below(150);
            self.clock.advance(Duration::from_millis(step));
            for i in 0..self.nodes.len() {
                if !self.nodes[i].alive {
                    continue;
                }
                let all = self.rng.below(3) > 0;
                self.read(i, all);
                let up = self.nodes[i].reach;
                self.input(i, Input::LogState { up });
                self.input(i, Input::Timeout);
            }
        }
        for i in 0..self.nodes.len() {
            self.read(i, true);
        }
    }

    /// A client connects to node `i` with `token` and sends its join; the connection.
    pub fn connect(&mut self, i: usize, token: &str) -> ConnId {
        let bearer = Bearer::Hashed(TokenHash::of(token));
        let local = self
            .input(i, Input::Connected { bearer })
            .expect("a connection's number");
        self.read(i, true);
        let conn = self.nodes[i].conns[&local];
        let join = format!(r#"{{"type":"join","participantId":"x","token":"{token}"}}"#);
        self.frame(i, conn, &join);
        conn
    }

    /// A frame from a connection node `i` holds; the node then reads the log.
    pub fn frame(&mut self, i: usize, conn: ConnId, frame: &str) {
        let frame = Bytes::from(frame.to_owned());
        self.input(i, Input::Frame { conn, frame });
        self.read(i, true);
    }

    /// A post to node `i` with a bearer token; the node's number for it.
    pub fn post(&mut self, i: usize, participant: &str, token: &str, body: &str) -> u64 {
        let post = Input::Post {
            participant: participant.into(),
            bearer: Bearer::Hashed(TokenHash::of(token)),
            body: Bytes::from(body.to_owned()),
        };
        self.input(i, post).expect("a post's number")
    }

    /// Node `i`'s replicated state (its snapshot without what differs by node).
    pub fn state(&self, i: usize) -> Vec<u8> {
        let n = &self.nodes[i];
        let s: serde_json::Value =
            serde_json::from_slice(&n.node.replica().snapshot().expect("a snapshot"))
                .expect("a snapshot is JSON");
        serde_json::to_vec(&s).expect("JSON")
    }
}
