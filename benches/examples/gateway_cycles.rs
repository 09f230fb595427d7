//! Fixed-count fan-out runs for `perf stat`: CPU cycles per routed envelope do not depend on
//! how busy the machine is, unlike criterion's wall-clock figures.
//!
//! `perf stat -e task-clock,cycles,instructions target/release/examples/gateway_cycles <n> <iters>`
//!
//! Without hardware counters (virtual machines), count instructions with callgrind, and
//! subtract a run with `<iters>` 0 to leave out the setup:
//! `valgrind --tool=callgrind target/release/examples/gateway_cycles 10 20000`
//!
//! A third argument `audit` turns the audit trail on: its lines are formatted and taken in
//! batches of 64 envelopes, as the driver does (without the file I/O).
//!
//! A third argument `durable` runs the space as a durable single node does: every frame
//! becomes a record of the node's log, encoded into a buffer taken every 64 envelopes
//! (without the file I/O) and applied through the node's replica.

use bytes::Bytes;
use mew_core::Time;
use mew_core::capability::{Capability, CapabilitySet};
use mew_core::gateway::{Bearer, Gateway, Input, LoggingConfig, ParticipantEntry, SpaceConfig};
use mew_core::ids::IdGen;
use std::hint::black_box;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(10);
    let iters = args.get(1).copied().unwrap_or(1_000_000);
    let audit = std::env::args().any(|a| a == "audit");
    let durable = std::env::args().any(|a| a == "durable");
    let now = Time::from_unix_millis(1_736_416_800_000);
    let mut cfg = SpaceConfig::default_space(&mut IdGen::new(1));
    let chat = CapabilitySet::from_capabilities(vec![
        Capability::compile(serde_json::json!({"kind": "chat"})).unwrap(),
    ]);
    cfg.participants = (0..n)
        .map(|i| ParticipantEntry::new(&format!("p{i}"), vec![format!("t{i}")], chat.clone()))
        .collect();
    cfg.logging = if audit {
        LoggingConfig::default()
    } else {
        LoggingConfig::OFF
    };
    cfg.gateway.max_queue_frames = usize::MAX;
    cfg.gateway.max_queue_bytes = usize::MAX;
    cfg.gateway.rate_limit = None;
    if durable {
        return run_durable(cfg, now, n, iters);
    }
    let mut gw = Gateway::new(cfg, 1, Box::new(IdGen::new(2)), None);
    let conns: Vec<_> = (0..n)
        .map(|i| {
            gw.handle_input(
                now,
                Input::Connected {
                    bearer: Bearer::Token(&format!("t{i}")),
                },
            )
            .conn()
            .expect("a connection")
        })
        .collect();
    while gw.poll_output().is_some() {}
    let frame = chat_frame();
    let start = std::time::Instant::now();
    let mut delivered = 0usize;
    let mut spares: Vec<Vec<u8>> = Vec::new();
    for i in 0..iters {
        gw.handle_input(
            now,
            Input::Frame {
                conn: conns[0],
                frame: frame.clone(),
            },
        );
        while let Some(o) = gw.poll_output() {
            black_box(&o);
            delivered += 1;
        }
        if audit && i % 64 == 63 {
            while let Some(batch) = gw.poll_audit(|_| spares.pop().unwrap_or_default()) {
                black_box(batch.pieces().count());
                spares.push(batch.into_buffer());
            }
        }
    }
    let el = start.elapsed();
    println!("{n} participants: {iters} envelopes, {delivered} deliveries in {el:?} (wall)");
}

fn chat_frame() -> Bytes {
    Bytes::from_static(
        br#"{"protocol":"mew/v0.4","id":"m-1","ts":"2025-01-09T10:00:00Z","from":"p0","kind":"chat","payload":{"text":"hello everyone","format":"plain"}}"#,
    )
}

/// The durable single node's path: a node publishes a record per input, the record is
/// encoded into the log's buffer and applied through the replica.
fn run_durable(cfg: SpaceConfig, now: Time, n: usize, iters: usize) {
    use mew_core::cluster::{Encoder, Node, NodeInput, NodeOptions, NodeOutput, Replica, journal};
    let replica = Replica::open("local", cfg, None, None).expect("replica");
    let tokens = Box::new(IdGen::new(7));
    let mut node = Node::new(NodeOptions::new("local"), replica, 0, tokens);
    let mut log = Vec::new();
    let mut encoder = Encoder::new();
    let mut pump = |node: &mut Node, log: &mut Vec<u8>| {
        let mut conns = Vec::new();
        while let Some(o) = node.poll_output() {
            match o {
                NodeOutput::Publish { record, .. } => {
                    let seq = node.applied() + 1;
                    journal::push_with(log, seq, |out| encoder.encode_into(&record, out));
                    let at = record.at;
                    black_box(node.handle_input(at, NodeInput::OwnRecord { seq, record }));
                }
                NodeOutput::Connected { conn, .. } => conns.push(conn),
                _ => {}
            }
        }
        conns
    };
    node.handle_input(now, NodeInput::Start);
    pump(&mut node, &mut log);
    let mut conns = Vec::new();
    for i in 0..n {
        let token = format!("t{i}");
        let bearer = Bearer::Token(&token);
        node.handle_input(now, NodeInput::Connected { bearer });
        conns.extend(pump(&mut node, &mut log));
    }
    while node.gateway_mut().poll_output().is_some() {}
    let frame = chat_frame();
    let start = std::time::Instant::now();
    let mut delivered = 0usize;
    for i in 0..iters {
        let (conn, frame) = (conns[0], frame.clone());
        node.handle_input(now, NodeInput::Frame { conn, frame });
        pump(&mut node, &mut log);
        while let Some(o) = node.gateway_mut().poll_output() {
            black_box(&o);
            delivered += 1;
        }
        if i % 64 == 63 {
            black_box(&log);
            log.clear();
        }
    }
    let el = start.elapsed();
    println!(
        "{n} participants, durable: {iters} envelopes, {delivered} deliveries in {el:?} (wall)"
    );
}
