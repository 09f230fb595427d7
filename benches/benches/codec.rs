//! Envelope codec: typed parse, routing-view parse, a `serde_json::Value` baseline and
//! serialisation, for a small chat and a ~2 KiB MCP request.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mew_core::envelope::check_depth;
use mew_core::{Envelope, Limits, RoutingView};
use std::hint::black_box;

/// A chat envelope of about 300 bytes.
fn chat() -> String {
    let text = "Hello everyone! The build is green again after the fix to the retry \
                loop; please pull main before starting anything new today.";
    format!(
        r#"{{"protocol":"mew/v0.4","id":"7c0e9f2a-1b7d-4c55-9a57-3f0b6c1d2e4f","ts":"2025-08-26T14:00:00.000Z","from":"user-alice","kind":"chat","correlation_id":["env-1"],"payload":{{"text":"{text}","format":"plain"}}}}"#
    )
}

/// An `mcp/request` envelope of about 2 KiB (a `tools/call` writing a file).
fn mcp_request() -> String {
    let mut content = String::new();
    let mut i = 0;
    while content.len() < 1750 {
        content.push_str(&format!(
            "line {i}: fn handler() {{ return \\\"ok\\\"; }}\\n"
        ));
        i += 1;
    }
    format!(
        r#"{{"protocol":"mew/v0.4","id":"env-call-1","ts":"2025-08-26T14:00:00.000Z","from":"trusted-agent","to":["target-agent"],"kind":"mcp/request","context":"workflow-123/step-1","payload":{{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{{"name":"write_file","arguments":{{"path":"src/lib.rs","content":"{content}","mode":["rw","r","r"],"options":{{"create":true,"overwrite":false}}}}}}}}}}"#
    )
}

fn codec(c: &mut Criterion) {
    let limits = Limits::default();
    let inputs = [("chat", chat()), ("mcp_request", mcp_request())];
    for (name, text) in &inputs {
        // The inputs must be what they claim to be.
        let env = Envelope::parse(text.as_bytes(), &limits).expect("bench input parses");
        assert!(env.payload.is_some());
        eprintln!("{name}: {} bytes", text.len());
    }

    let mut g = c.benchmark_group("codec");
    for (name, text) in &inputs {
        let bytes = text.as_bytes();
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.bench_with_input(
            BenchmarkId::new("envelope_parse", name),
            bytes,
            |b, bytes| b.iter(|| Envelope::parse(black_box(bytes), &limits).unwrap()),
        );
        g.bench_with_input(
            BenchmarkId::new("routing_view_parse", name),
            bytes,
            |b, bytes| {
                b.iter(|| {
                    RoutingView::parse(black_box(bytes), &limits)
                        .unwrap()
                        .kind
                        .len()
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("value_baseline", name),
            bytes,
            |b, bytes| {
                b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(bytes)).unwrap())
            },
        );
        g.bench_with_input(BenchmarkId::new("depth_scan", name), bytes, |b, bytes| {
            b.iter(|| check_depth(black_box(bytes), 127).unwrap())
        });
        let env = Envelope::parse(bytes, &limits).unwrap();
        g.bench_with_input(BenchmarkId::new("serialise", name), &env, |b, env| {
            b.iter(|| black_box(env).to_json())
        });
    }
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
