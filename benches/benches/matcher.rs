//! Capability matching: a realistic set of five capabilities against an allowed and a denied
//! message, plus the one-time compile cost.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use mew_core::capability::CapabilitySet;
use mew_core::{Envelope, Limits};
use serde_json::{Value, json};
use std::hint::black_box;

fn capabilities() -> Vec<Value> {
    vec![
        json!({"kind": "chat"}),
        json!({"kind": "mcp/proposal"}),
        json!({"kind": "mcp/response"}),
        json!({"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "read_*"}}}),
        json!({"kind": "mcp/request", "payload": {"method": "*/list"}}),
    ]
}

fn envelope(text: &str) -> Envelope {
    Envelope::parse(text.as_bytes(), &Limits::default()).unwrap()
}

fn bench(c: &mut Criterion) {
    let raw = capabilities();
    let set = CapabilitySet::compile(&raw).unwrap();
    let allowed = envelope(
        r#"{"protocol":"mew/v0.4","id":"m1","from":"agent","kind":"mcp/request","payload":{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/src/lib.rs"}}}}"#,
    );
    let denied = envelope(
        r#"{"protocol":"mew/v0.4","id":"m2","from":"agent","kind":"mcp/request","payload":{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/src/lib.rs","content":"x"}}}}"#,
    );
    assert!(set.allows(allowed.kind.as_str(), allowed.payload.as_ref()));
    assert!(!set.allows(denied.kind.as_str(), denied.payload.as_ref()));

    let mut g = c.benchmark_group("matcher");
    g.bench_function("allowed", |b| {
        b.iter(|| {
            set.allows(
                black_box(allowed.kind.as_str()),
                black_box(allowed.payload.as_ref()),
            )
        })
    });
    g.bench_function("denied", |b| {
        b.iter(|| {
            set.allows(
                black_box(denied.kind.as_str()),
                black_box(denied.payload.as_ref()),
            )
        })
    });
    g.bench_function("chat_kind_only", |b| {
        b.iter(|| set.allows(black_box("chat"), None))
    });
    g.bench_function("compile_set", |b| {
        b.iter(|| CapabilitySet::compile(black_box(&raw)).unwrap())
    });
    let with_regex = [
        json!({"kind": "mcp/{request,proposal}", "payload": {"method": "tools/call", "params": {"name": "{read,list}_?*"}}}),
        json!({"kind": "mcp/request", "payload": {"params": {"arguments": {"path": "/^\\/src\\//"}}}}),
    ];
    let rset = CapabilitySet::compile(&with_regex).unwrap();
    assert!(rset.allows(allowed.kind.as_str(), allowed.payload.as_ref()));
    g.bench_function("allowed_regex_glob", |b| {
        b.iter(|| {
            rset.allows(
                black_box(allowed.kind.as_str()),
                black_box(allowed.payload.as_ref()),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
