//! Tools mode's own cost per call: checking a typical call's arguments against the tool's
//! schema, filling its prompt template, and a whole `tools/call` line through the MCP server
//! side (parse, check, hand out; answer, serialise).

use criterion::{Criterion, criterion_group, criterion_main};
use mew_core::mcp::{McpServer, ServerConfig, ServerEvent, ServerOutput};
use mew_core::tools::ToolSet;
use serde_json::{Value, json};
use std::hint::black_box;

fn tools() -> ToolSet {
    let v: Value = serde_norway::from_str(
        r#"
name: Travel desk
tools:
  - name: book_flight
    description: Books a flight ticket for a user.
    parameters:
      type: object
      properties:
        destination: {type: string, minLength: 2, maxLength: 80}
        departure_date: {type: string, pattern: "^\\d{4}-\\d{2}-\\d{2}$"}
        passengers: {type: integer, minimum: 1, maximum: 9, default: 1}
        class: {type: string, enum: [economy, premium, business, first]}
        extras: {type: array, items: {type: string}, uniqueItems: true, maxItems: 5}
      required: [destination, departure_date]
      additionalProperties: false
    prompt: "Book {passengers} seat(s) to {destination} on {departure_date} in {class}; extras: {extras}."
"#,
    )
    .unwrap();
    ToolSet::load(&v).unwrap()
}

fn bench(c: &mut Criterion) {
    let set = tools();
    let def = set.get("book_flight").unwrap();
    let args = json!({"destination": "Paris, France", "departure_date": "2026-12-01",
                      "class": "economy", "extras": ["meal", "lounge"]});
    c.bench_function("tools/validate typical call", |b| {
        b.iter(|| black_box(def.schema.validate(black_box(&args))).is_ok())
    });
    let map = args.as_object().unwrap().clone();
    c.bench_function("tools/fill prompt", |b| {
        b.iter(|| black_box(def.fill(black_box(&map))))
    });
    let mut server = McpServer::new(ServerConfig::new(set.info.clone()), set.served());
    server.handle_stdin(
        b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}}\n",
    );
    while server.poll_output().is_some() {}
    let line = format!(
        "{}\n",
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": "book_flight", "arguments": args}})
    );
    c.bench_function("tools/mcp tools/call in and answered", |b| {
        b.iter(|| {
            server.handle_stdin(black_box(line.as_bytes()));
            let mut call = None;
            while let Some(o) = server.poll_output() {
                if let ServerOutput::Event(ServerEvent::Call { call: c, .. }) = o {
                    call = Some(c);
                }
            }
            server.complete(call.unwrap(), "Booked: AF1234, seat 12A.", false);
            black_box(server.poll_output())
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
