//! A tools-mode agent in a simulated space (real gateway core, seeded links, a scripted
//! model): other participants call its tools with `mcp/request`; each call is a headless run
//! with its own conversation, offered only the tools the agent may call directly, so a tool
//! that would need a proposal is never waited on.

use mew_core::agent::{AgentConfig, AgentEvent, AgentFile, AgentSettings, ModelRequest, Role};
use mew_core::participant::{RequestOptions, ToolSpec};
use mew_core::tools::ToolSet;
use mew_tests::sim::participants::behaviour::tool_handler;
use mew_tests::sim::participants::machine::{model_text, model_tool_calls};
use mew_tests::sim::participants::{NodeId, World};
use serde_json::{Value, json};
use std::time::Duration;

const SPACE: &str = r#"
space: {id: test-space}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  desk:
    tokens: [desk-token]
    capabilities:
      - {kind: mcp/response}
      - {kind: chat}
      - {kind: mcp/request, payload: {method: tools/list}}
      - {kind: mcp/request, payload: {method: tools/call, params: {name: get_weather}}}
      - {kind: mcp/proposal}
  weather-service:
    tokens: [weather-service-token]
    capabilities: [{kind: mcp/response}]
  calculator:
    tokens: [calculator-token]
    capabilities: [{kind: mcp/response}]
"#;

const AGENT: &str = r#"
discovery_wait_ms: 3000
metadata:
  name: Desk
  tools:
    - name: trip_brief
      description: A short brief for a trip.
      parameters:
        type: object
        properties: {city: {type: string}, budget: {type: number, minimum: 0}}
        required: [city]
      prompt: "Brief for {city} (budget {budget})"
"#;

fn quiet_join(w: &mut World, id: &str) -> NodeId {
    let mut c = w.config_for(id, &format!("{id}-token"));
    c.discovery.auto = false;
    w.join_with(id, c)
}

fn spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: Some(format!("{name} tool")),
        input_schema: Some(json!({"type": "object"})),
    }
}

fn city_of(r: &ModelRequest) -> String {
    let user = r
        .messages
        .iter()
        .find(|m| m.role == Role::User)
        .and_then(|m| m.content.clone())
        .unwrap_or_default();
    user.trim_start_matches("Brief for ")
        .split(' ')
        .next()
        .unwrap_or("?")
        .to_owned()
}

#[test]
fn calls_from_the_space_run_apart_and_never_wait_for_approval() {
    for seed in [3, 17, 40] {
        let mut w = World::from_yaml(SPACE, seed, (1, 30));
        let weather = quiet_join(&mut w, "weather-service");
        w.act(weather, |p, _| p.register_tool(spec("get_weather")))
            .unwrap();
        w.behave(
            weather,
            tool_handler(|_, _| Ok(json!({"content": [{"type": "text", "text": "22°C"}]}))),
        );
        let calc = quiet_join(&mut w, "calculator");
        w.act(calc, |p, _| p.register_tool(spec("multiply")))
            .unwrap();
        let human = quiet_join(&mut w, "human");
        w.run_until_quiet();

        let file = AgentFile::from_yaml(AGENT).unwrap();
        let mut cfg = AgentConfig::new(
            w.config_for("desk", "desk-token"),
            AgentSettings::from_file(&file).unwrap(),
        );
        cfg.tools = Some(ToolSet::load(file.metadata.as_ref().unwrap()).unwrap());
        // The model asks for the weather (direct) and for multiply (proposal only) at once,
        // then answers from its own prompt.
        let script = Box::new(|r: &ModelRequest, _n: usize| {
            let city = city_of(r);
            if r.messages.iter().any(|m| m.role == Role::Tool) {
                model_text(&format!("{city} brief"))
            } else {
                model_tool_calls(&[
                    ("w", "weather-service__get_weather", json!({})),
                    ("m", "calculator__multiply", json!({"a": 1, "b": 2})),
                ])
            }
        });
        let desk = w.join_agent("desk", cfg, script, Duration::from_millis(300));
        w.run_until_quiet();

        let call = |w: &mut World, city: &str| {
            let payload = json!({"method": "tools/call",
                                 "params": {"name": "trip_brief", "arguments": {"city": city, "budget": 900}}});
            w.act(human, |p, now| {
                p.mcp_request(now, vec!["desk".into()], payload, RequestOptions::default())
            })
            .unwrap()
        };
        let oslo = call(&mut w, "Oslo");
        let rome = call(&mut w, "Rome");
        let bad = w
            .act(human, |p, now| {
                p.mcp_request(
                    now,
                    vec!["desk".into()],
                    json!({"method": "tools/call", "params": {"name": "trip_brief", "arguments": {"budget": -1}}}),
                    RequestOptions::default(),
                )
            })
            .unwrap();
        let ok = w.run_until(Duration::from_secs(60), |w| {
            w.outcome(human, &oslo).is_some() && w.outcome(human, &rome).is_some()
        });
        assert!(ok, "seed {seed}: the calls were not answered");
        w.run_until_quiet();

        let text = |v: &Value| v["content"][0]["text"].as_str().unwrap_or("").to_owned();
        let got_oslo = w.outcome(human, &oslo).unwrap().clone().unwrap();
        let got_rome = w.outcome(human, &rome).unwrap().clone().unwrap();
        assert_eq!(text(&got_oslo), "Oslo brief", "seed {seed}");
        assert_eq!(text(&got_rome), "Rome brief", "seed {seed}");
        assert_eq!(got_oslo["isError"], false);
        // Refused by the tool's schema before any run: `city` is required.
        let refused = w.outcome(human, &bad).unwrap().clone().unwrap_err();
        assert!(refused.to_string().contains("required"), "{refused}");

        let node = w.agent(desk);
        // Two runs, two model calls each; each run saw only its own prompt.
        assert_eq!(node.requests.len(), 4, "seed {seed}");
        let mut refusals = 0;
        for r in &node.requests {
            let users = r.messages.iter().filter(|m| m.role == Role::User).count();
            assert_eq!(users, 1, "seed {seed}: a run saw another's conversation");
            if !r.tools.is_empty() {
                let names: Vec<&str> = r.tools.iter().map(|t| t.name.as_str()).collect();
                assert_eq!(names, ["weather-service__get_weather"], "seed {seed}");
            }
            if let Some(obs) = r
                .messages
                .iter()
                .rev()
                .find(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == Some("m"))
            {
                assert!(
                    obs.content.as_deref().unwrap_or("")
                        == "Error: calling calculator/multiply needs a person's approval, and none is available here",
                    "seed {seed}: {obs:?}"
                );
                refusals += 1;
            }
        }
        assert_eq!(
            refusals, 2,
            "seed {seed}: each run was told why multiply was refused"
        );
        let runs_finished = node
            .events
            .iter()
            .filter(|e| matches!(e, AgentEvent::RunFinished { .. }))
            .count();
        assert_eq!(runs_finished, 2);
        // No proposal was made for the calculator: nobody would have been there to approve.
        let proposals: Vec<Value> = w
            .node(human)
            .received_kind("mcp/proposal")
            .into_iter()
            .filter(|e| e["from"] == "desk")
            .collect();
        assert!(proposals.is_empty(), "seed {seed}: {proposals:?}");
    }
}
