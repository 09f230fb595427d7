//! Envelopes processed per second by a participant: inbound chats, and inbound responses
//! settling pending requests.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use mew_core::Time;
use mew_core::participant::{Input, Output, Participant, ParticipantConfig, RequestOptions};
use serde_json::json;
use std::hint::black_box;

const BATCH: usize = 1000;

fn ready_participant() -> Participant {
    let mut cfg = ParticipantConfig {
        participant_id: Some("agent".into()),
        ..Default::default()
    };
    cfg.bounds.max_pending_requests = BATCH;
    cfg.bounds.max_pending_chats = 64;
    let mut p = Participant::new(cfg, 1);
    let now = Time::from_unix_millis(1_000);
    p.start(now);
    p.handle_input(now, Input::Connected);
    p.handle_input(now, Input::Frame(&json!({"protocol": "mew/v0.4", "id": "w", "from": "system:gateway", "to": ["agent"],
                "kind": "system/welcome",
                "payload": {"you": {"id": "agent", "capabilities": [{"kind": "*"}]}, "participants": []}})
        .to_string()));
    while p.poll_output().is_some() {}
    p
}

fn drain(p: &mut Participant) -> usize {
    let mut n = 0;
    while let Some(o) = p.poll_output() {
        black_box(&o);
        if matches!(o, Output::Transmit(_)) {
            n += 1;
        }
    }
    n
}

fn bench(c: &mut Criterion) {
    let now = Time::from_unix_millis(2_000);
    let chats: Vec<String> = (0..BATCH)
        .map(|i| {
            json!({"protocol": "mew/v0.4", "id": format!("c{i}"), "ts": "2025-01-09T10:00:00.000Z",
                   "from": "bob", "kind": "chat", "payload": {"text": "hello there, how are things going today?"}})
            .to_string()
        })
        .collect();
    let mut g = c.benchmark_group("participant");
    g.throughput(Throughput::Elements(BATCH as u64));
    // Baseline: parsing alone, to show what the participant adds on top.
    g.bench_function("parse_only_chat", |b| {
        let limits = mew_core::Limits::default();
        b.iter(|| {
            for f in &chats {
                black_box(mew_core::Envelope::parse(f.as_bytes(), &limits).ok());
            }
        })
    });
    g.bench_function("inbound_chat", |b| {
        let mut p = ready_participant();
        b.iter(|| {
            for f in &chats {
                p.handle_input(now, Input::Frame(f));
            }
            drain(&mut p);
        })
    });
    g.bench_function("parse_only_response", |b| {
        let limits = mew_core::Limits::default();
        let responses: Vec<String> = (0..BATCH)
            .map(|i| {
                let id = format!("{:08x}-0000-4000-8000-{:012x}", i, i);
                json!({"protocol": "mew/v0.4", "id": format!("r-{id}"), "from": "calc", "to": ["agent"],
                       "kind": "mcp/response", "correlation_id": [id],
                       "payload": {"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}})
                .to_string()
            })
            .collect();
        b.iter(|| {
            for f in &responses {
                black_box(mew_core::Envelope::parse(f.as_bytes(), &limits).ok());
            }
        })
    });
    g.bench_function("responses_settle_requests", |b| {
        b.iter_batched(
            || {
                let mut p = ready_participant();
                let responses: Vec<String> = (0..BATCH)
                    .map(|_| {
                        let id = p
                            .mcp_request(now, vec!["calc".into()], json!({"method": "tools/list"}), RequestOptions::default())
                            .expect("request accepted");
                        json!({"protocol": "mew/v0.4", "id": format!("r-{id}"), "from": "calc", "to": ["agent"],
                               "kind": "mcp/response", "correlation_id": [id.as_str()],
                               "payload": {"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}})
                        .to_string()
                    })
                    .collect();
                while p.poll_output().is_some() {}
                (p, responses)
            },
            |(mut p, responses)| {
                for f in &responses {
                    p.handle_input(now, Input::Frame(f));
                }
                drain(&mut p);
                assert_eq!(p.pending_requests().count(), 0);
                // Returned so that dropping them stays outside the measurement.
                (p, responses)
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
