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
}

/// Nodes ([`mew_core::cluster::Node`]) over a shared in-memory log on the simulated
/// cluster ([`ClusterWorld`]), driven by a seeded schedule: each node reads the log at its
/// own pace, may lose the log (its publishes are refused) or die (it stops altogether).
mod nodes {
    use super::*;
    use mew_tests::sim::node::Input;
    use mew_tests::sim::{ClusterWorld, seeds};

    fn world(seed: u64, ids: &[&str], snapshot_every: u64) -> ClusterWorld {
        ClusterWorld::new(
            SpaceConfig::from_yaml(SPACE).unwrap(),
            seed,
            ids,
            snapshot_every,
        )
    }

    fn saw(frames: &[(ConnId, Bytes)], conn: ConnId, what: &str) -> bool {
        frames
            .iter()
            .any(|(c, f)| *c == conn && std::str::from_utf8(f).unwrap().contains(what))
    }

    #[test]
    fn a_node_that_dies_is_declared_gone_by_the_others_and_its_participant_leaves() {
        for seed in seeds(0..40) {
            let mut sim = world(seed, &["a", "b", "c"], 1_000_000);
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
            sim.start(1);
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
        for seed in seeds(0..40) {
            let mut sim = world(seed, &["a", "b"], 1_000_000);
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
            let local = sim.post(0, "human", "human-token", &envelope(0, 2));
            assert!(local > 0);
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
        for seed in seeds(0..20) {
            let mut sim = world(seed, &["c", "a", "b"], 25);
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
            let i = sim.add_restored("d", replica, 1_000_000);
            assert!(!sim.nodes[i].node.ready());
            sim.read(i, true);
            assert!(sim.nodes[i].node.ready());
            assert_eq!(sim.state(i), sim.state(0), "seed {seed}");
        }
    }

    #[test]
    fn one_seed_gives_one_history_and_another_seed_another() {
        let run = |seed: u64| {
            let mut sim = world(seed, &["a", "b", "c"], 30);
            sim.run(400);
            let human = sim.connect(0, "human-token");
            let agent = sim.connect(2, "agent-token");
            for k in 0..12 {
                sim.frame(k % 2 * 2, [human, agent][k % 2], &envelope(k % 9, k));
                sim.run(50 + 40 * k as u64);
            }
            sim.nodes[1].alive = false;
            sim.run(7_000);
            let _ = sim.input(0, Input::Pong { conn: human });
            sim.run(300);
            assert_eq!(sim.state(0), sim.state(2));
            (sim.trace(), sim.log.len())
        };
        let seed = mew_tests::sim::seed_or(11);
        assert_eq!(run(seed), run(seed), "seed {seed}: the same history twice");
        assert_ne!(
            run(seed).0,
            run(seed + 1).0,
            "seeds {seed} and {}",
            seed + 1
        );
    }
}
