//! The MCP client's per-message cost: a tool call round trip through the state machine, and
//! framing a large stdout stream.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mew_core::Time;
use mew_core::mcp::{McpClient, McpConfig, McpEvent, Output};
use serde_json::json;
use std::hint::black_box;
use std::time::Duration;

fn ready_client() -> McpClient {
    let mut c = McpClient::new(McpConfig::default());
    let now = Time::from_unix_millis(0);
    c.start(now).unwrap();
    while c.poll_output().is_some() {}
    c.handle_spawned(now);
    while c.poll_output().is_some() {}
    c.handle_stdout(
        now,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"serverInfo\":{\"name\":\"bench\",\"version\":\"0\"}}}\n",
    );
    while c.poll_output().is_some() {}
    c
}

fn call_round_trip(c: &mut Criterion) {
    let mut client = ready_client();
    let now = Time::from_unix_millis(1);
    let params = json!({"name":"echo","arguments":{"message":"hello mew"}});
    let mut g = c.benchmark_group("mcp_client");
    g.throughput(Throughput::Elements(1));
    g.bench_function("tools_call_round_trip", |b| {
        b.iter(|| {
            let id = client
                .call(now, "tools/call", Some(params.clone()), Duration::from_secs(30))
                .unwrap();
            let Some(Output::Write(line)) = client.poll_output() else {
                unreachable!()
            };
            black_box(&line);
            let reply = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"Echo: hello mew\"}}]}}}}\n",
                id.0
            );
            client.handle_stdout(now, reply.as_bytes());
            let Some(Output::Event(McpEvent::CallCompleted { result, .. })) = client.poll_output()
            else {
                unreachable!()
            };
            black_box(result)
        })
    });

    // 1,000 notifications in 64 KiB chunks: framing and decoding of a busy stream.
    let mut stream = Vec::new();
    for i in 0..1000 {
        stream.extend_from_slice(
            format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{{\"level\":\"info\",\"data\":\"log line {i} with some padding text\"}}}}\n")
                .as_bytes(),
        );
    }
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("stdout_1000_notifications", |b| {
        b.iter(|| {
            for chunk in stream.chunks(64 * 1024) {
                client.handle_stdout(now, chunk);
            }
            let mut n = 0;
            while client.poll_output().is_some() {
                n += 1;
            }
            assert_eq!(n, 1000);
        })
    });
    g.finish();
}

criterion_group!(benches, call_round_trip);
criterion_main!(benches);
