//! One step of the agent core's loop: a model reply asking for a tool goes in, the tool
//! request comes out; the tool's response goes in, the next model call comes out. This is
//! the agent's own cost per step, beside which the model's latency is everything.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use mew_core::Time;
use mew_core::agent::{
    Agent, AgentConfig, AgentFile, AgentSettings, ModelCallId, ModelOutcome, Output,
};
use mew_core::participant::{GatewayInputs, Input};
use mew_core::participant::{Output as POutput, ParticipantConfig};
use serde_json::{Value, json};
use std::hint::black_box;

const NOW: Time = Time::from_unix_millis(1_736_416_800_000);

/// Drains the outputs; the transmitted envelope of `kind` (parsed; the others are left as
/// text, as a driver leaves them) and the last model call.
fn drain_for(a: &mut Agent, kind: &str) -> (Option<Value>, Option<ModelCallId>) {
    let mut found = None;
    let mut call = None;
    let needle = format!("\"kind\":\"{kind}\"");
    while let Some(o) = a.poll_output() {
        match o {
            Output::Gateway(POutput::Transmit(t)) => {
                if found.is_none() && t.contains(&needle) {
                    found = Some(serde_json::from_str(&t).unwrap());
                }
                black_box(t);
            }
            Output::Model { call: c, .. } => call = Some(c),
            other => {
                black_box(other);
            }
        }
    }
    (found, call)
}

fn drain(a: &mut Agent) -> Option<ModelCallId> {
    drain_for(a, "-").1
}

fn response_to(request: &Value, from: &str, result: Value) -> String {
    json!({"protocol": "mew/v0.4", "id": format!("r-{}", request["id"].as_str().unwrap()),
           "from": from, "to": ["agent"], "kind": "mcp/response",
           "correlation_id": [request["id"]],
           "payload": {"jsonrpc": "2.0", "id": request["payload"]["id"], "result": result}})
    .to_string()
}

/// An agent in a task, waiting for its first model reply, with `calc/add` discovered.
fn agent_awaiting_model() -> (Agent, ModelCallId) {
    let file = AgentFile::from_yaml("max_iterations: 100\n").unwrap();
    let config = AgentConfig::new(
        ParticipantConfig {
            participant_id: Some("agent".into()),
            ..Default::default()
        },
        AgentSettings::from_file(&file).unwrap(),
    );
    let mut a = Agent::new(config, 1);
    a.start(NOW);
    a.handle_input(NOW, Input::Connected);
    a.handle_input(NOW, Input::Frame(&json!({"protocol": "mew/v0.4", "id": "w", "from": "system:gateway", "to": ["agent"],
                "kind": "system/welcome",
                "payload": {"you": {"id": "agent", "capabilities": [{"kind": "*"}]},
                            "participants": [{"id": "calc", "capabilities": [{"kind": "mcp/response"}]}]}})
        .to_string()));
    drain(&mut a);
    a.handle_input(NOW, Input::Timeout);
    let (list, _) = drain_for(&mut a, "mcp/request");
    let list = list.expect("discovery asks calc");
    assert_eq!(list["payload"]["method"], "tools/list");
    let tools = json!({"tools": [{"name": "add", "description": "adds a and b",
        "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}]});
    a.handle_input(NOW, Input::Frame(&response_to(&list, "calc", tools)));
    drain(&mut a);
    a.handle_input(
        NOW,
        Input::Frame(
            &json!({"protocol": "mew/v0.4", "id": "chat-1", "from": "bob", "to": ["agent"],
                "kind": "chat", "payload": {"text": "what is 2 + 3?"}})
            .to_string(),
        ),
    );
    let call = drain(&mut a);
    (a, call.expect("a model call"))
}

fn tool_call_reply() -> ModelOutcome {
    ModelOutcome::Http {
        status: 200,
        retry_after: None,
        body: json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "I will add them.",
            "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "calc__add", "arguments": "{\"a\": 2, \"b\": 3}"}}]}}],
            "usage": {"prompt_tokens": 200, "completion_tokens": 20, "total_tokens": 220}})
        .to_string(),
    }
}

fn bench(c: &mut Criterion) {
    let reply = tool_call_reply();
    let result = json!({"content": [{"type": "text", "text": "5"}]});
    c.bench_function("agent/loop_step", |b| {
        b.iter_batched(
            agent_awaiting_model,
            |(mut a, call)| {
                a.handle_model(NOW, call, reply.clone());
                let (request, _) = drain_for(&mut a, "mcp/request");
                let request = request.expect("the tool call goes out");
                a.handle_input(
                    NOW,
                    Input::Frame(&response_to(&request, "calc", result.clone())),
                );
                let next = drain(&mut a);
                black_box(next.expect("the next model call"));
                a
            },
            BatchSize::SmallInput,
        )
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
