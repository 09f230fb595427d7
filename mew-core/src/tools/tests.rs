use super::*;
use crate::agent::{AgentFile, AgentSettings};
use crate::participant::ParticipantConfig;
use serde_json::Value;

const NOW: Time = Time::from_unix_millis(1_000);

fn agent(yaml: &str, mcp: bool) -> ToolsAgent {
    let file = AgentFile::from_yaml(yaml).unwrap();
    let mut config = AgentConfig::new(
        ParticipantConfig::default(),
        AgentSettings::from_file(&file).unwrap(),
    );
    config.tools = Some(ToolSet::load(file.metadata.as_ref().unwrap()).unwrap());
    config.mcp_stdio = mcp;
    config.join_space = false;
    let mut a = ToolsAgent::new(config, 1);
    a.start(NOW);
    a
}

const YAML: &str = "
metadata:
  name: Desk
  tools:
    - name: echo
      description: Says it back.
      parameters: {type: object, properties: {text: {type: string}}, required: [text]}
      prompt: 'Say {text}'
";

/// Drains outputs: MCP lines (parsed) and model calls.
fn drain(a: &mut ToolsAgent) -> (Vec<Value>, Vec<(ModelCallId, String)>) {
    let (mut lines, mut calls) = (Vec::new(), Vec::new());
    while let Some(o) = a.poll_output() {
        match o {
            Output::Mcp(l) => lines.push(serde_json::from_str(&l).unwrap()),
            Output::Model { call, request, .. } => {
                let user = request
                    .messages
                    .iter()
                    .rev()
                    .find(|m| m.role == crate::agent::Role::User)
                    .and_then(|m| m.content.clone())
                    .unwrap_or_default();
                calls.push((call, user));
            }
            _ => {}
        }
    }
    (lines, calls)
}

fn reply(text: &str) -> ModelOutcome {
    ModelOutcome::Http {
        status: 200,
        retry_after: None,
        body: serde_json::json!({"choices": [{"message": {"role": "assistant", "content": text}}]})
            .to_string(),
    }
}

fn stdin(a: &mut ToolsAgent, v: Value) {
    a.handle_stdin(NOW, format!("{v}\n").as_bytes());
}

#[test]
fn concurrent_calls_are_answered_each_from_its_own_run() {
    let mut a = agent(YAML, true);
    stdin(
        &mut a,
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}}}),
    );
    drain(&mut a);
    for (id, text) in [(1, "one"), (2, "two")] {
        stdin(
            &mut a,
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": text}}}),
        );
    }
    let (lines, calls) = drain(&mut a);
    assert!(lines.is_empty(), "{lines:?}");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].1, "Say one");
    assert_eq!(calls[1].1, "Say two");
    assert_eq!(a.running(), 2);
    // Answered in the other order.
    a.handle_model(NOW, calls[1].0, reply("two!"));
    a.handle_model(NOW, calls[0].0, reply("one!"));
    let (lines, _) = drain(&mut a);
    let answers: Vec<(i64, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["id"].as_i64().unwrap(),
                l["result"]["content"][0]["text"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(answers, [(2, "two!"), (1, "one!")]);
    assert_eq!(a.running(), 0);
}
