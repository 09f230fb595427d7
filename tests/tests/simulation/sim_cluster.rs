//! A space replicated over a log, in simulation: three nodes' replicas apply the same
//! generated log (joins, chats, grants, invites, pauses, streams, kicks, HTTP posts, closes,
//! slow consumers, node restarts, nodes falling silent) and must end in the same state; a
//! replica restored from a snapshot taken at any point, then given the rest of the log,
//! equals one that applied every entry, and produces the same frames after that point.

use bytes::Bytes;
use mew_core::Time;
use mew_core::cluster::{Entry, Record, Replica, ReplicaEvent};
use mew_core::gateway::{ConnId, Gateway, Output, SpaceConfig};
use mew_core::secret::TokenHash;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

const SPACE: &str = r#"
space: {id: cluster-sim}
gateway: {anonymous_joins: true, delivery: addressed}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  agent: {tokens: [agent-token], capabilities: [{kind: chat}, {kind: mcp/proposal}, {kind: stream/request}]}
  service: {tokens: [service-token], capabilities: [{kind: "mcp/*"}, {kind: chat}]}
"#;

const NODES: [&str; 3] = ["a", "b", "c"];
const TOKENS: [Option<&str>; 5] = [
    Some("human-token"),
    Some("agent-token"),
    Some("service-token"),
    Some("wrong"),
    None,
];

#[derive(Debug, Clone)]
enum Op {
    Connect { node: usize, token: usize },
    Send { conn: usize, what: usize },
    Close { conn: usize },
    Pong { conn: usize },
    Slow { conn: usize },
    Quiet { node: usize, ms: u64 },
    Post { node: usize, token: usize },
    Restart { node: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..3usize, 0..8usize).prop_map(|(node, token)| Op::Connect { node, token }),
        8 => (0..8usize, 0..10usize).prop_map(|(conn, what)| Op::Send { conn, what }),
        1 => (0..8usize).prop_map(|conn| Op::Close { conn }),
        1 => (0..8usize).prop_map(|conn| Op::Pong { conn }),
        1 => (0..8usize).prop_map(|conn| Op::Slow { conn }),
        3 => (0..3usize, 1..3_000u64).prop_map(|(node, ms)| Op::Quiet { node, ms }),
        1 => (0..3usize, 0..5usize).prop_map(|(node, token)| Op::Post { node, token }),
        1 => (0..3usize).prop_map(|node| Op::Restart { node }),
    ]
}

fn envelope(what: usize, n: usize) -> String {
    let body = match what {
        0 | 1 => r#""kind":"chat","payload":{"text":"hello"}"#.to_owned(),
        2 => r#""kind":"capability/grant","to":["agent"],"payload":{"recipient":"agent","capabilities":[{"kind":"mcp/request"}]}"#.to_owned(),
        3 => r#""kind":"space/invite","payload":{"participant_id":"guest","initial_capabilities":[{"kind":"chat"}]}"#.to_owned(),
        4 => r#""kind":"participant/pause","to":["agent"],"payload":{"timeout_seconds":3}"#.to_owned(),
        5 => r#""kind":"participant/resume","to":["agent"],"payload":{}"#.to_owned(),
        6 => r#""kind":"stream/request","to":["gateway"],"payload":{"direction":"upload"}"#.to_owned(),
        7 => r#""kind":"space/kick","payload":{"participant_id":"service"}"#.to_owned(),
        8 => r#""kind":"mcp/proposal","to":["service"],"payload":{"method":"tools/call","params":{"name":"x"}}"#.to_owned(),
        _ => return r#"{"type":"join","participantId":"guest","token":"human-token"}"#.to_owned(),
    };
    format!(r#"{{"protocol":"mew/v0.4","id":"m{n}",{body}}}"#)
}

/// Turns ops into records, learning connection ids from three replicas (one per node)
/// that apply each record as it is made.
fn materialise(ops: &[Op]) -> (Vec<Record>, Vec<Replica>) {
    let config = SpaceConfig::from_yaml(SPACE).unwrap();
    let mut reps: Vec<Replica> = NODES
        .iter()
        .map(|n| Replica::new(n, config.clone(), None))
        .collect();
    let mut records = Vec::new();
    let mut clock = 1_000_000u64;
    let mut conns: Vec<(usize, ConnId)> = Vec::new();
    let mut locals = 0u64;
    let mut push = |rec: Record, reps: &mut Vec<Replica>, conns: &mut Vec<(usize, ConnId)>| {
        let seq = records.len() as u64 + 1;
        records.push(rec.clone());
        for (i, r) in reps.iter_mut().enumerate() {
            r.handle_record(seq, rec.clone()).unwrap();
            while r.gateway_mut().poll_output().is_some() {}
            while let Some(e) = r.poll_output() {
                if let ReplicaEvent::Connected { conn, .. } = e {
                    conns.push((i, conn));
                }
            }
        }
    };
    let rec = |node: usize, clock: u64, entry: Entry| Record {
        node: NODES[node].into(),
        // Node clocks disagree a little; replicas never let time run backwards.
        at: Time::from_unix_millis(clock + node as u64 * 17),
        entropy: Some([clock as u8 ^ node as u8; 24]),
        entry,
    };
    for node in 0..3 {
        push(
            rec(
                node,
                clock,
                Entry::NodeUp {
                    timeout: Duration::from_secs(5),
                },
            ),
            &mut reps,
            &mut conns,
        );
    }
    for (n, op) in ops.iter().enumerate() {
        clock += 10;
        let on = |conn: usize| conns.get(conn % conns.len().max(1)).copied();
        let r = match op.clone() {
            Op::Connect { node, token } => {
                locals += 1;
                // Beyond the listed tokens: JWTs their node judged (valid for a while, for
                // an unknown subject, or refused).
                let entry = match token {
                    5 | 6 => Entry::ConnectJudged {
                        local: locals,
                        judged: Ok(mew_core::gateway::Identity {
                            subject: if token == 5 { "agent" } else { "stranger" }.into(),
                            expires_at: Some(Time::from_unix_millis(clock + 2_000)),
                            not_before: None,
                        }),
                    },
                    7 => Entry::ConnectJudged {
                        local: locals,
                        judged: Err("the token's signature does not verify".into()),
                    },
                    _ => Entry::Connect {
                        local: locals,
                        token: TOKENS[token].map(TokenHash::of),
                    },
                };
                rec(node, clock, entry)
            }
            Op::Send { conn, what } => match on(conn) {
                Some((node, conn)) => {
                    let frame = Bytes::from(envelope(what, n));
                    match mew_core::gateway::seal_join(&frame) {
                        Some((frame, token)) => {
                            rec(node, clock, Entry::SealedJoin { conn, frame, token })
                        }
                        None => rec(node, clock, Entry::Frame { conn, frame }),
                    }
                }
                None => continue,
            },
            Op::Close { conn } => match on(conn) {
                Some((node, conn)) => rec(node, clock, Entry::Closed { conn }),
                None => continue,
            },
            Op::Pong { conn } => match on(conn) {
                Some((node, conn)) => rec(node, clock, Entry::Pong { conn }),
                None => continue,
            },
            Op::Slow { conn } => match on(conn) {
                Some((node, conn)) => rec(node, clock, Entry::Slow { conn }),
                None => continue,
            },
            Op::Quiet { node, ms } => {
                // Only `node` speaks for a while: the others may be declared gone.
                clock += ms;
                rec(node, clock, Entry::Beat)
            }
            Op::Post { node, token } => {
                locals += 1;
                rec(
                    node,
                    clock,
                    Entry::Post {
                        local: locals,
                        participant: "human".into(),
                        token: TOKENS[token].map(TokenHash::of),
                        body: Bytes::from(envelope(0, n)),
                    },
                )
            }
            Op::Restart { node } => rec(
                node,
                clock,
                Entry::NodeUp {
                    timeout: Duration::from_secs(5),
                },
            ),
        };
        push(r, &mut reps, &mut conns);
    }
    (records, reps)
}

fn frames(g: &mut Gateway) -> Vec<(ConnId, Bytes)> {
    let mut out = Vec::new();
    while let Some(o) = g.poll_output() {
        if let Output::Transmit { conn, frame } = o {
            out.push((conn, frame));
        }
    }
    out
}

fn check(ops: &[Op], cut: usize) -> Result<(), TestCaseError> {
    let (records, reps) = materialise(ops);
    let config = SpaceConfig::from_yaml(SPACE).unwrap();
    // Every node's replica ends in the same state.
    let states: Vec<Vec<u8>> = reps.iter().map(|r| r.snapshot().unwrap()).collect();
    prop_assert_eq!(&states[0], &states[1]);
    prop_assert_eq!(&states[0], &states[2]);
    // A snapshot after `cut` entries, restored on another node, plus the rest.
    let cut = cut % (records.len() + 1);
    let mut first = Replica::new("b", config.clone(), None);
    let mut expected = Vec::new();
    for (i, rec) in records.iter().enumerate() {
        first.handle_record(i as u64 + 1, rec.clone()).unwrap();
        let f = frames(first.gateway_mut());
        if i >= cut {
            expected.push(f);
        }
        if i + 1 == cut {
            let snap = first.snapshot().unwrap();
            let mut restored = Replica::restore("c", config.clone(), &snap, None).unwrap();
            prop_assert_eq!(restored.applied(), cut as u64);
            let mut got = Vec::new();
            for (j, rec) in records.iter().enumerate().skip(cut) {
                restored.handle_record(j as u64 + 1, rec.clone()).unwrap();
                got.push(frames(restored.gateway_mut()));
            }
            // The restored replica sends what the original sends, and ends in its state.
            let mut rest_expected = Vec::new();
            let mut again = Replica::restore("a", config.clone(), &snap, None).unwrap();
            for (j, rec) in records.iter().enumerate().skip(cut) {
                again.handle_record(j as u64 + 1, rec.clone()).unwrap();
                rest_expected.push(frames(again.gateway_mut()));
            }
            prop_assert_eq!(&got, &rest_expected);
            prop_assert_eq!(restored.snapshot().unwrap(), states[0].clone());
            return Ok(());
        }
    }
    // cut == 0: a snapshot of the empty space.
    let empty = Replica::new("a", config.clone(), None);
    let snap = empty.snapshot().unwrap();
    let mut restored = Replica::restore("c", config, &snap, None).unwrap();
    let mut got = Vec::new();
    for (j, rec) in records.iter().enumerate() {
        restored.handle_record(j as u64 + 1, rec.clone()).unwrap();
        got.push(frames(restored.gateway_mut()));
    }
    prop_assert_eq!(&got, &expected);
    prop_assert_eq!(restored.snapshot().unwrap(), states[0].clone());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn replicas_agree_and_snapshots_restore(ops in prop::collection::vec(op(), 1..70), cut in 0usize..200) {
        check(&ops, cut)?;
    }
}

#[test]
fn a_silent_node_is_declared_gone_once_and_its_participants_leave() {
    // Only a beats, once a second: b and c fall silent.
    let mut ops = vec![
        Op::Connect { node: 0, token: 0 },
        Op::Connect { node: 1, token: 1 },
    ];
    ops.extend((0..7).map(|_| Op::Quiet { node: 0, ms: 990 }));
    let (records, _) = materialise(&ops);
    let config = SpaceConfig::from_yaml(SPACE).unwrap();
    let mut r = Replica::new("a", config, None);
    let mut gone = Vec::new();
    let mut leaves = 0;
    for (i, rec) in records.into_iter().enumerate() {
        r.handle_record(i as u64 + 1, rec).unwrap();
        for (_, f) in frames(r.gateway_mut()) {
            let v: serde_json::Value = serde_json::from_slice(&f).unwrap();
            if v["kind"] == "system/presence" && v["payload"]["event"] == "leave" {
                assert_eq!(v["payload"]["participant"]["id"], "agent", "{v}");
                leaves += 1;
            }
        }
        while let Some(e) = r.poll_output() {
            if let ReplicaEvent::NodeGone { node, connections } = e {
                gone.push((node, connections));
            }
        }
    }
    // b (holding agent) and c (holding nothing) fell silent; a's human saw agent leave once.
    assert_eq!(gone, vec![("b".to_owned(), 1), ("c".to_owned(), 0)]);
    assert_eq!(leaves, 1);
    assert_eq!(r.live_nodes().collect::<Vec<_>>(), vec!["a"]);
}

#[test]
fn a_pause_of_the_whole_log_declares_no_node_gone() {
    let ops = [
        Op::Connect { node: 0, token: 0 },
        Op::Connect { node: 1, token: 1 },
        // The log itself was down for 6 s: the first record after it is a's.
        Op::Quiet { node: 0, ms: 6_000 },
        Op::Quiet { node: 1, ms: 500 },
    ];
    let (_, reps) = materialise(&ops);
    let r = &reps[0];
    assert_eq!(r.live_nodes().collect::<Vec<_>>(), vec!["a", "b", "c"]);
}

#[test]
fn invite_tokens_come_from_the_logs_entropy_and_only_digests_are_kept() {
    let ops = [
        Op::Connect { node: 0, token: 0 },
        Op::Send { conn: 0, what: 3 },
    ];
    let (_, reps) = materialise(&ops);
    let snap = String::from_utf8(reps[0].snapshot().unwrap()).unwrap();
    for t in ["human-token", "agent-token", "service-token"] {
        assert!(!snap.contains(t), "a token in the snapshot");
        assert!(snap.contains(&TokenHash::of(t).to_hex()));
    }
    let _ = BTreeMap::<u8, u8>::new();
}

/// Nodes ([`mew_core::cluster::Node`]) over a shared in-memory log, driven by a seeded
/// schedule: each node reads the log at its own pace, may lose the log (its publishes are
/// refused) or die (it stops altogether).
mod nodes {
    use super::*;
    use mew_core::cluster::{Node, NodeInput, NodeOptions, NodeOutput, Undo};
    use mew_core::gateway::Bearer;
    use mew_core::secret::{Entropy, TokenSource};

    /// A tiny seeded generator (xorshift): the schedules vary by seed, reproducibly.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Entropy that differs at every draw (and is no secret).
    struct Counter(u8);

    impl TokenSource for Counter {
        fn entropy(&mut self) -> Option<Entropy> {
            self.0 = self.0.wrapping_add(1);
            Some([self.0; 24])
        }
    }

    struct SimNode {
        node: Node,
        alive: bool,
        reach: bool,
        /// Connections this node holds, by local number then id.
        conns: BTreeMap<u64, ConnId>,
        received: Vec<(ConnId, Bytes)>,
        directs: Vec<(ConnId, Bytes)>,
        closes: Vec<(ConnId, u16, bool)>,
        gone: Vec<String>,
        snapshots: Vec<(u64, Vec<u8>)>,
        refused_posts: usize,
    }

    struct Sim {
        log: Vec<Bytes>,
        nodes: Vec<SimNode>,
        now: Time,
        rng: Rng,
        config: SpaceConfig,
    }

    impl Sim {
        fn new(seed: u64, ids: &[&str], snapshot_every: u64) -> Sim {
            let config = SpaceConfig::from_yaml(SPACE).unwrap();
            let mut sim = Sim {
                log: Vec::new(),
                nodes: Vec::new(),
                now: Time::from_unix_millis(1_000_000),
                rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
                config,
            };
            for id in ids {
                sim.add(id, snapshot_every);
            }
            sim
        }

        fn add(&mut self, id: &str, snapshot_every: u64) -> usize {
            let replica = Replica::new(id, self.config.clone(), None);
            let mut opts = NodeOptions::new(id);
            opts.snapshot_every = snapshot_every;
            let node = Node::new(opts, replica, 0, Box::new(Counter(0)));
            self.nodes.push(SimNode {
                node,
                alive: true,
                reach: true,
                conns: BTreeMap::new(),
                received: Vec::new(),
                directs: Vec::new(),
                closes: Vec::new(),
                gone: Vec::new(),
                snapshots: Vec::new(),
                refused_posts: 0,
            });
            let i = self.nodes.len() - 1;
            let now = self.now;
            self.nodes[i].node.handle_input(now, NodeInput::Start);
            self.outputs(i);
            i
        }

        /// Carries out node `i`'s outputs: publishes go into the log when it is reachable.
        fn outputs(&mut self, i: usize) {
            while let Some(o) = self.nodes[i].node.poll_output() {
                let now = self.now;
                let n = &mut self.nodes[i];
                match o {
                    NodeOutput::Publish { record, undo } => {
                        if n.reach {
                            self.log.push(Bytes::from(record.encode()));
                        } else {
                            let why = "the log is unreachable";
                            n.node.handle_input(now, NodeInput::Refused { undo, why });
                        }
                    }
                    NodeOutput::Connected { local, conn } => {
                        n.conns.insert(local, conn);
                    }
                    NodeOutput::Abandon { .. } => {}
                    NodeOutput::Posted { .. } => {}
                    NodeOutput::PostRefused { .. } => n.refused_posts += 1,
                    NodeOutput::Direct { conn, frame } => n.directs.push((conn, frame)),
                    NodeOutput::Close {
                        conn, code, forget, ..
                    } => {
                        n.closes.push((conn, code, forget));
                        if forget {
                            n.conns.retain(|_, c| *c != conn);
                        }
                    }
                    NodeOutput::Snapshot { applied, bytes } => n.snapshots.push((applied, bytes)),
                    NodeOutput::NodeGone { node, .. } => n.gone.push(node),
                    NodeOutput::Warning(w) => panic!("warning: {w}"),
                    NodeOutput::Broken(b) => panic!("broken: {b}"),
                }
            }
        }

        /// Node `i` reads what the log holds past its replica (all of it, or a random part).
        fn read(&mut self, i: usize, all: bool) {
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
            let now = self.now;
            for seq in from..upto {
                let bytes = self.log[seq].clone();
                let n = &mut self.nodes[i];
                let seq = seq as u64 + 1;
                n.node.handle_input(now, NodeInput::Entry { seq, bytes });
                while let Some(o) = n.node.gateway_mut().poll_output() {
                    if let Output::Transmit { conn, frame } = o
                        && n.conns.values().any(|c| *c == conn)
                    {
                        n.received.push((conn, frame));
                    }
                }
                n.node.handle_input(now, NodeInput::Drained);
                self.outputs(i);
            }
        }

        /// `ms` of time pass in random steps; every live node reads and keeps time.
        fn run(&mut self, ms: u64) {
            let end = self.now + Duration::from_millis(ms);
            while self.now < end {
                self.now = self.now + Duration::from_millis(1 + self.rng.below(150));
                for i in 0..self.nodes.len() {
                    if !self.nodes[i].alive {
                        continue;
                    }
                    let all = self.rng.below(3) > 0;
                    self.read(i, all);
                    let now = self.now;
                    let n = &mut self.nodes[i];
                    let up = n.reach;
                    n.node.handle_input(now, NodeInput::LogState { up });
                    n.node.handle_input(now, NodeInput::Timeout);
                    self.outputs(i);
                }
            }
            for i in 0..self.nodes.len() {
                self.read(i, true);
            }
        }

        fn connect(&mut self, i: usize, token: &str) -> ConnId {
            let now = self.now;
            let bearer = Bearer::Hashed(TokenHash::of(token));
            let local = self.nodes[i]
                .node
                .handle_input(now, NodeInput::Connected { bearer })
                .local()
                .expect("a connection's number");
            self.outputs(i);
            self.read(i, true);
            let conn = self.nodes[i].conns[&local];
            let join = format!(r#"{{"type":"join","participantId":"x","token":"{token}"}}"#);
            self.frame(i, conn, &join);
            conn
        }

        fn frame(&mut self, i: usize, conn: ConnId, frame: &str) {
            let now = self.now;
            let n = &mut self.nodes[i];
            let frame = Bytes::from(frame.to_owned());
            n.node.handle_input(now, NodeInput::Frame { conn, frame });
            self.outputs(i);
            self.read(i, true);
        }

        fn state(&mut self, i: usize) -> Vec<u8> {
            let n = &self.nodes[i];
            // Node ids differ; the replicated state does not.
            let s: serde_json::Value =
                serde_json::from_slice(&n.node.replica().snapshot().unwrap()).unwrap();
            serde_json::to_vec(&s).unwrap()
        }
    }

    fn saw(frames: &[(ConnId, Bytes)], conn: ConnId, what: &str) -> bool {
        frames
            .iter()
            .any(|(c, f)| *c == conn && std::str::from_utf8(f).unwrap().contains(what))
    }

    #[test]
    fn a_node_that_dies_is_declared_gone_by_the_others_and_its_participant_leaves() {
        for seed in 0..40 {
            let mut sim = Sim::new(seed, &["a", "b", "c"], 1_000_000);
            sim.run(500);
            let human = sim.connect(0, "human-token");
            let agent = sim.connect(1, "agent-token");
            let wait = 300 + sim.rng.below(2_000);
            sim.run(wait);
            sim.nodes[1].alive = false;
            sim.run(8_000);
            for i in [0, 2] {
                assert_eq!(
                    sim.nodes[i].gone,
                    ["b"],
                    "seed {seed}: node {i} declared b gone once"
                );
            }
            assert!(
                saw(&sim.nodes[0].received, human, r#""kind":"system/presence""#)
                    && saw(&sim.nodes[0].received, human, r#""event":"leave""#),
                "seed {seed}: the human saw the agent leave"
            );
            let _ = agent;
            assert_eq!(sim.state(0), sim.state(2), "seed {seed}: a and c agree");
            // b comes back: its NodeUp ends its old life; it catches up and agrees too.
            sim.nodes[1].alive = true;
            let now = sim.now;
            sim.nodes[1].node.handle_input(now, NodeInput::Start);
            sim.outputs(1);
            sim.run(1_000);
            assert_eq!(sim.state(0), sim.state(1), "seed {seed}: b agrees again");
            assert!(
                sim.nodes[0].gone.len() == 1,
                "seed {seed}: b is back, not gone twice"
            );
        }
    }

    #[test]
    fn an_outage_of_the_log_refuses_inputs_and_a_node_cut_off_too_long_is_evicted() {
        for seed in 0..40 {
            let mut sim = Sim::new(seed, &["a", "b"], 1_000_000);
            sim.run(300);
            let human = sim.connect(0, "human-token");
            let agent = sim.connect(1, "agent-token");
            // Everyone loses the log for 3 s (more than its quiet limit, less than a node's
            // timeout): inputs are refused with a reason, nobody is declared gone.
            for n in &mut sim.nodes {
                n.reach = false;
            }
            let before = sim.log.len();
            sim.frame(0, human, &envelope(0, 1));
            let now = sim.now;
            let post = NodeInput::Post {
                participant: "human".into(),
                bearer: Bearer::Hashed(TokenHash::of("human-token")),
                body: Bytes::from(envelope(0, 2)),
            };
            let local = sim.nodes[0].node.handle_input(now, post).local();
            assert!(local.is_some_and(|l| l > 0));
            sim.outputs(0);
            sim.run(3_000);
            assert_eq!(
                sim.log.len(),
                before,
                "seed {seed}: nothing published, not even beats"
            );
            assert!(saw(&sim.nodes[0].directs, human, "log_unavailable"));
            assert_eq!(sim.nodes[0].refused_posts, 1);
            for n in &mut sim.nodes {
                n.reach = true;
            }
            sim.run(2_000);
            for n in &sim.nodes {
                assert!(
                    n.gone.is_empty(),
                    "seed {seed}: no node declared gone for the log's outage"
                );
            }
            // Now b alone is cut off for longer than its timeout: a declares it gone, and b,
            // reading the log again, learns it was evicted and closes its socket.
            sim.nodes[1].reach = false;
            sim.run(7_000);
            assert_eq!(sim.nodes[0].gone, ["b"], "seed {seed}");
            sim.nodes[1].reach = true;
            sim.run(500);
            assert!(
                sim.nodes[1].closes.contains(&(agent, 1001, true)),
                "seed {seed}: b closed its connection as evicted: {:?}",
                sim.nodes[1].closes
            );
            assert_eq!(sim.state(0), sim.state(1), "seed {seed}");
        }
    }

    #[test]
    fn the_live_node_with_the_smallest_id_writes_snapshots_and_they_restore() {
        for seed in 0..20 {
            let mut sim = Sim::new(seed, &["c", "a", "b"], 25);
            let human = sim.connect(2, "human-token");
            for k in 0..20 {
                sim.frame(2, human, &envelope(k % 4, k));
                sim.run(100);
            }
            sim.run(1_000);
            assert!(
                !sim.nodes[1].snapshots.is_empty(),
                "seed {seed}: a took snapshots"
            );
            assert!(sim.nodes[0].snapshots.is_empty() && sim.nodes[2].snapshots.is_empty());
            // a dies: b, now the smallest live id, takes over once a is declared gone.
            sim.nodes[1].alive = false;
            let b_before = sim.log.len();
            sim.run(6_000);
            for k in 20..40 {
                sim.frame(2, human, &envelope(k % 4, k));
                sim.run(100);
            }
            sim.run(2_000);
            let (applied, snap) = sim.nodes[2].snapshots.last().cloned().unwrap_or_else(|| {
                panic!(
                    "seed {seed}: b took no snapshot (log {b_before}..{})",
                    sim.log.len()
                )
            });
            assert!(sim.nodes[0].snapshots.is_empty(), "seed {seed}: c never");
            // A node started from b's snapshot, given the rest of the log, agrees with c.
            let replica = Replica::restore("d", sim.config.clone(), &snap, None).unwrap();
            assert_eq!(replica.applied(), applied);
            let i = sim.nodes.len();
            let mut opts = NodeOptions::new("d");
            opts.snapshot_every = 1_000_000;
            sim.nodes.push(SimNode {
                node: Node::new(opts, replica, sim.log.len() as u64, Box::new(Counter(9))),
                alive: true,
                reach: true,
                conns: BTreeMap::new(),
                received: Vec::new(),
                directs: Vec::new(),
                closes: Vec::new(),
                gone: Vec::new(),
                snapshots: Vec::new(),
                refused_posts: 0,
            });
            assert!(!sim.nodes[i].node.ready());
            sim.read(i, true);
            assert!(sim.nodes[i].node.ready());
            assert_eq!(sim.state(i), sim.state(0), "seed {seed}");
            let _ = Undo::Nothing;
        }
    }
}
