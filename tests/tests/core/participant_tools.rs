//! Serving our own tools and resources, with schema validation and JSON-RPC errors.

use crate::support;

use mew_core::participant::{
    CommandError, Event, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, ResourceSpec,
    ToolError, ToolSpec,
};
use serde_json::{Value, json};
use support::{ME, Script, all_caps, config};

fn calculator() -> Script {
    let mut s = Script::joined(config(), all_caps(), &[]);
    s.p.register_tool(ToolSpec {
        name: "add".into(),
        description: Some("Add two numbers".into()),
        input_schema: Some(json!({
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
            "additionalProperties": false
        })),
    })
    .unwrap();
    s.p.register_resource(ResourceSpec {
        uri: "file:///notes.txt".into(),
        name: "notes".into(),
        description: None,
        mime_type: Some("text/plain".into()),
    });
    s
}

fn call(s: &mut Script, to: &[&str], args: Value) -> (String, Value) {
    let id = s.send_from("human", to, "mcp/request", None,
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "add", "arguments": args}}));
    let sent = s.take_sent();
    (id, sent.into_iter().next().unwrap_or(Value::Null))
}

#[test]
fn lists_tools_and_resources() {
    let mut s = calculator();
    let id = s.send_from(
        "human",
        &[ME],
        "mcp/request",
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    );
    let r = s.sent_one("mcp/response");
    assert_eq!(r["to"], json!(["human"]));
    assert_eq!(r["correlation_id"], json!([id]));
    assert_eq!(r["payload"]["id"], 1);
    assert_eq!(r["payload"]["result"]["tools"][0]["name"], "add");
    assert_eq!(
        r["payload"]["result"]["tools"][0]["inputSchema"]["required"],
        json!(["a", "b"])
    );
    // A broadcast tools/list is answered too (to empty).
    s.send_from(
        "human",
        &[],
        "mcp/request",
        None,
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list"}),
    );
    let r = s.sent_one("mcp/response");
    assert_eq!(
        r["payload"]["result"]["resources"][0]["uri"],
        "file:///notes.txt"
    );
    assert_eq!(
        r["payload"]["result"]["resources"][0]["mimeType"],
        "text/plain"
    );
    // Addressed to someone else: not ours to answer.
    s.send_from(
        "human",
        &["calc2"],
        "mcp/request",
        None,
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    );
    assert!(s.take_sent().is_empty());
}

#[test]
fn valid_call_becomes_an_event_and_completion_answers() {
    let mut s = calculator();
    let (id, sent) = call(&mut s, &[ME], json!({"a": 1, "b": 2}));
    assert_eq!(
        sent,
        Value::Null,
        "nothing is sent before the application answers"
    );
    let call_id = s
        .events
        .iter()
        .find_map(|e| match e {
            Event::ToolCall {
                call_id,
                tool,
                arguments,
                from,
            } => {
                assert_eq!((tool.as_str(), from.as_str()), ("add", "human"));
                assert_eq!(arguments, &json!({"a": 1, "b": 2}));
                Some(*call_id)
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(s.p.pending_calls().collect::<Vec<_>>(), vec![call_id]);
    s.p.complete_tool_call(s.now, call_id, Ok(json!(3)))
        .unwrap();
    let r = s.sent_one("mcp/response");
    assert_eq!(r["correlation_id"], json!([id]));
    assert_eq!(
        r["payload"],
        json!({"jsonrpc": "2.0", "id": 9, "result": {"content": [{"type": "text", "text": "3"}]}})
    );
    assert!(matches!(
        s.p.complete_call(s.now, call_id, Ok(json!(1))),
        Err(CommandError::Unknown { .. })
    ));
    // A tool failure becomes a JSON-RPC error.
    call(&mut s, &[ME], json!({"a": 1, "b": 2}));
    let call_id = s.p.pending_calls().next().unwrap();
    s.p.complete_call(s.now, call_id, Err(ToolError::internal("boom")))
        .unwrap();
    let r = s.sent_one("mcp/response");
    assert_eq!(
        r["payload"]["error"],
        json!({"code": -32603, "message": "boom"})
    );
}

#[test]
fn schema_violations_are_invalid_params() {
    let mut s = calculator();
    for (args, path) in [
        (json!({"a": 1}), "/"),
        (json!({"a": "1", "b": 2}), "/a"),
        (json!({"a": 1, "b": 2, "c": 3}), "/c"),
    ] {
        let (_, r) = call(&mut s, &[ME], args);
        assert_eq!(r["payload"]["error"]["code"], INVALID_PARAMS, "{r}");
        assert_eq!(r["payload"]["error"]["data"]["path"], path);
    }
    assert!(!s.events.iter().any(|e| matches!(e, Event::ToolCall { .. })));
}

#[test]
fn unknown_tools_methods_and_malformed_requests() {
    let mut s = calculator();
    s.send_from("human", &[ME], "mcp/request", None, json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "mul", "arguments": {}}}));
    assert_eq!(
        s.sent_one("mcp/response")["payload"]["error"]["code"],
        METHOD_NOT_FOUND
    );
    s.send_from(
        "human",
        &[ME],
        "mcp/request",
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/list"}),
    );
    assert_eq!(
        s.sent_one("mcp/response")["payload"]["error"]["code"],
        METHOD_NOT_FOUND
    );
    s.send_from(
        "human",
        &[ME],
        "mcp/request",
        None,
        json!({"jsonrpc": "2.0", "id": 1}),
    );
    assert_eq!(
        s.sent_one("mcp/response")["payload"]["error"]["code"],
        INVALID_REQUEST
    );
    s.send_from("human", &[ME], "mcp/request", None, json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "file:///nope"}}));
    assert_eq!(
        s.sent_one("mcp/response")["payload"]["error"]["code"],
        METHOD_NOT_FOUND
    );
    // Broadcast requests for things we lack are left to others.
    s.send_from(
        "human",
        &[],
        "mcp/request",
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/list"}),
    );
    s.send_from(
        "human",
        &[],
        "mcp/request",
        None,
        json!({"method": "tools/call", "params": {"name": "mul"}}),
    );
    assert!(s.take_sent().is_empty());
}

#[test]
fn resource_reads_complete_with_contents() {
    let mut s = calculator();
    s.send_from("human", &[ME], "mcp/request", None, json!({"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"uri": "file:///notes.txt"}}));
    let call_id = s
        .events
        .iter()
        .find_map(|e| match e {
            Event::ResourceRead { call_id, uri, .. } if uri == "file:///notes.txt" => {
                Some(*call_id)
            }
            _ => None,
        })
        .unwrap();
    s.p.complete_call(s.now, call_id, Ok(json!("hello")))
        .unwrap();
    let r = s.sent_one("mcp/response");
    assert_eq!(
        r["payload"]["result"],
        json!({"contents": [{"uri": "file:///notes.txt", "text": "hello"}]})
    );
}

#[test]
fn pending_calls_are_bounded_and_bad_schemas_refused() {
    let mut cfg = config();
    cfg.bounds.max_pending_calls = 2;
    let mut s = Script::joined(cfg, all_caps(), &[]);
    s.p.register_tool(ToolSpec {
        name: "add".into(),
        description: None,
        input_schema: None,
    })
    .unwrap();
    for _ in 0..2 {
        let (_, r) = call(&mut s, &[ME], json!({}));
        assert_eq!(r, Value::Null);
    }
    let (_, r) = call(&mut s, &[ME], json!({}));
    assert_eq!(r["payload"]["error"]["code"], -32603);
    let bad = s.p.register_tool(ToolSpec {
        name: "x".into(),
        description: None,
        input_schema: Some(json!({"type": "nope"})),
    });
    assert!(matches!(bad, Err(CommandError::InvalidTool { .. })));
}
