//! Envelopes routed per second through the gateway core alone (no I/O): broadcast to 10,
//! 100 and 1,000 participants (with a static frame, and with a heap frame as drivers hand
//! over), and directed delivery in `addressed` mode. Audit records off, except in
//! `gateway_broadcast_audit`, which also formats the audit lines and takes them as a driver
//! does (the writer's file I/O is not in it); the polling history at its default size.

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mew_core::Time;
use mew_core::capability::{Capability, CapabilitySet};
use mew_core::gateway::{Bearer, Input};
use mew_core::gateway::{
    ConnId, DeliveryMode, Gateway, LoggingConfig, ParticipantEntry, SpaceConfig,
};
use mew_core::ids::IdGen;
use std::hint::black_box;

fn space(n: usize, delivery: DeliveryMode, logging: LoggingConfig) -> SpaceConfig {
    let mut cfg = SpaceConfig::default_space(&mut IdGen::new(1));
    let chat = CapabilitySet::from_capabilities(vec![
        Capability::compile(serde_json::json!({"kind": "chat"})).unwrap(),
    ]);
    cfg.participants = (0..n)
        .map(|i| ParticipantEntry::new(&format!("p{i}"), vec![format!("t{i}")], chat.clone()))
        .collect();
    cfg.logging = logging;
    cfg.gateway.delivery = delivery;
    // One sender at full speed: the per-participant rate limit is not what is measured.
    cfg.gateway.rate_limit = None;
    // The bench drains outputs without reporting writes; keep slow-consumer checks out of it.
    cfg.gateway.max_queue_frames = usize::MAX;
    cfg.gateway.max_queue_bytes = usize::MAX;
    cfg
}

fn setup(n: usize, delivery: DeliveryMode) -> (Gateway, Vec<ConnId>) {
    setup_with(n, delivery, LoggingConfig::OFF)
}

fn setup_with(n: usize, delivery: DeliveryMode, logging: LoggingConfig) -> (Gateway, Vec<ConnId>) {
    let now = Time::from_unix_millis(1_736_416_800_000);
    let tokens = Box::new(IdGen::new(2));
    let mut gw = Gateway::new(space(n, delivery, logging), 1, tokens, None);
    let conns: Vec<ConnId> = (0..n)
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
    while gw.poll_audit(|_| Vec::new()).is_some() {}
    (gw, conns)
}

fn drain(gw: &mut Gateway) -> usize {
    let mut n = 0;
    while let Some(o) = gw.poll_output() {
        black_box(&o);
        n += 1;
    }
    n
}

fn broadcast(c: &mut Criterion) {
    let now = Time::from_unix_millis(1_736_416_800_000);
    let frame = Bytes::from_static(
        br#"{"protocol":"mew/v0.4","id":"m-1","ts":"2025-01-09T10:00:00Z","from":"p0","kind":"chat","payload":{"text":"hello everyone","format":"plain"}}"#,
    );
    let mut g = c.benchmark_group("gateway_broadcast");
    for n in [10usize, 100, 1000] {
        let (mut gw, conns) = setup(n, DeliveryMode::All);
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                gw.handle_input(
                    now,
                    Input::Frame {
                        conn: conns[0],
                        frame: frame.clone(),
                    },
                );
                assert_eq!(drain(&mut gw), n);
            })
        });
    }
    g.finish();
    // Frames from a driver live on the heap: every recipient's clone is then an atomic
    // reference count increment rather than a static copy.
    let heap = Bytes::from(frame.to_vec());
    let mut g = c.benchmark_group("gateway_broadcast_heap_frame");
    for n in [10usize, 1000] {
        let (mut gw, conns) = setup(n, DeliveryMode::All);
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                gw.handle_input(
                    now,
                    Input::Frame {
                        conn: conns[0],
                        frame: heap.clone(),
                    },
                );
                assert_eq!(drain(&mut gw), n);
            })
        });
    }
    g.finish();
    // Audit on: a `received` and a `capability_check` line, and a `delivered` line per
    // recipient, taken in batches of 64 envelopes into recycled buffers as the host does:
    // the space's task's part. The lines are read (the deferred ones formatted, the
    // references expanded) on the log writer's thread, which this leaves out.
    let mut g = c.benchmark_group("gateway_broadcast_audit");
    for n in [10usize, 100] {
        let (mut gw, conns) = setup_with(n, DeliveryMode::All, LoggingConfig::default());
        let mut spares: Vec<Vec<u8>> = Vec::new();
        let mut k = 0u32;
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                gw.handle_input(
                    now,
                    Input::Frame {
                        conn: conns[0],
                        frame: heap.clone(),
                    },
                );
                assert_eq!(drain(&mut gw), n);
                k += 1;
                if k.is_multiple_of(64) {
                    while let Some(batch) = gw.poll_audit(|_| spares.pop().unwrap_or_default()) {
                        spares.push(black_box(batch).into_buffer());
                    }
                }
            })
        });
    }
    g.finish();
}

fn directed(c: &mut Criterion) {
    let now = Time::from_unix_millis(1_736_416_800_000);
    let frame = Bytes::from_static(
        br#"{"protocol":"mew/v0.4","id":"m-2","ts":"2025-01-09T10:00:00Z","from":"p0","to":["p7"],"kind":"chat","payload":{"text":"just for you"}}"#,
    );
    let mut g = c.benchmark_group("gateway_directed");
    for n in [10usize, 1000] {
        let (mut gw, conns) = setup(n, DeliveryMode::Addressed);
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                gw.handle_input(
                    now,
                    Input::Frame {
                        conn: conns[0],
                        frame: frame.clone(),
                    },
                );
                assert_eq!(drain(&mut gw), 1);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, broadcast, directed);
criterion_main!(benches);
