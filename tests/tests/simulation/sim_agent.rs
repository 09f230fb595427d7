//! The agent core through the real gateway core, seeded: a scripted model, tool-providing
//! participants and a human, over simulated links with latency. Covers the spec's weather +
//! tip example, proposals fulfilled, rejected and auto-fulfilled, cancellation, the step
//! budget, model failures and replies the agent cannot use. `MEW_SIM_SEED` replays a run.

use mew_core::agent::{
    AgentConfig, AgentEvent, AgentFile, AgentSettings, ModelOutcome, ModelRequest, Role,
    TaskOutcome,
};
use mew_core::envelope::Kind;
use mew_core::participant::{Draft, ToolSpec};
use mew_tests::sim::participants::behaviour::{reviewer, tool_handler};
use mew_tests::sim::participants::machine::{
    model_status, model_stream, model_text, model_tool_calls,
};
use mew_tests::sim::participants::{ModelScript, NodeId, Verdict, World};
use serde_json::{Value, json};
use std::time::Duration;

const SPACE: &str = r#"
space: {id: test-space}
participants:
  human: {tokens: [human-token], person: true, capabilities: [{kind: "*"}]}
  assistant:
    tokens: [assistant-token]
    capabilities:
      - {kind: chat}
      - {kind: chat/acknowledge}
      - {kind: "reasoning/*"}
      - {kind: mcp/request, payload: {method: tools/list}}
      - {kind: mcp/request, payload: {method: tools/call, params: {name: get_weather}}}
      - {kind: mcp/proposal}
      - {kind: mcp/withdraw}
      - {kind: participant/status}
      - {kind: participant/compact-done}
  trusted:
    tokens: [trusted-token]
    capabilities: [{kind: "mcp/*"}, {kind: chat}, {kind: "reasoning/*"}, {kind: participant/status}]
  weather-service:
    tokens: [weather-service-token]
    capabilities: [{kind: mcp/response}, {kind: chat}]
  calculator:
    tokens: [calculator-token]
    capabilities: [{kind: mcp/response}, {kind: chat}]
"#;

const QUESTION: &str = "What's the weather in Tokyo and calculate 15% tip on $85?";

fn tool(name: &str, description: &str, schema: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: Some(description.into()),
        input_schema: Some(schema),
    }
}

fn quiet_join(w: &mut World, id: &str) -> NodeId {
    let mut c = w.config_for(id, &format!("{id}-token"));
    c.discovery.auto = false;
    w.join_with(id, c)
}

/// A world with the weather and calculator services, a human, and nothing else.
fn world(seed: u64) -> (World, NodeId) {
    let mut w = World::from_yaml(SPACE, seed, (1, 30));
    let weather = quiet_join(&mut w, "weather-service");
    w.act(weather, |p, _| {
        p.register_tool(tool(
            "get_weather",
            "Current weather of a city",
            json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}),
        ))
    })
    .unwrap();
    w.behave(
        weather,
        tool_handler(|_, args| {
            let city = args["location"].as_str().unwrap_or("?").to_owned();
            Ok(json!({"content": [{"type": "text", "text": format!("{city}: 22°C, partly cloudy")}]}))
        }),
    );
    let calc = quiet_join(&mut w, "calculator");
    w.act(calc, |p, _| {
        p.register_tool(tool(
            "multiply",
            "Multiplies a by b",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}),
        ))
    })
    .unwrap();
    w.behave(
        calc,
        tool_handler(|_, args| {
            let p = args["a"].as_f64().unwrap_or(0.0) * args["b"].as_f64().unwrap_or(0.0);
            Ok(json!({"content": [{"type": "text", "text": format!("{p}")}]}))
        }),
    );
    let human = quiet_join(&mut w, "human");
    w.run_until_quiet();
    (w, human)
}

fn agent_config(w: &World, id: &str, yaml: &str) -> AgentConfig {
    let file = AgentFile::from_yaml(yaml).unwrap();
    let mut participant = w.config_for(id, &format!("{id}-token"));
    AgentConfig::apply_timeouts(&mut participant, &file);
    AgentConfig::new(participant, AgentSettings::from_file(&file).unwrap())
}

fn join_agent(w: &mut World, yaml: &str, script: ModelScript) -> NodeId {
    let cfg = agent_config(w, "assistant", yaml);
    let n = w.join_agent("assistant", cfg, script, Duration::from_millis(400));
    w.run_until_quiet();
    n
}

fn ask(w: &mut World, human: NodeId, to: &str, text: &str) -> String {
    w.act(human, |p, now| p.chat(now, text, vec![to.into()]))
        .unwrap()
}

fn finished(w: &World, a: NodeId) -> Vec<TaskOutcome> {
    w.agent(a)
        .events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TaskFinished { outcome, .. } => Some(outcome.clone()),
            _ => None,
        })
        .collect()
}

fn run_until_finished(w: &mut World, a: NodeId) {
    let ok = w.run_until(Duration::from_secs(600), |w| !finished(w, a).is_empty());
    assert!(ok, "seed {}: the task never finished", w.seed);
    w.run_until_quiet();
}

/// The chats the human received from the assistant.
fn answers(w: &World, human: NodeId) -> Vec<Value> {
    w.node(human)
        .received_kind("chat")
        .into_iter()
        .filter(|c| c["from"] == "assistant")
        .collect()
}

fn tool_names(r: &ModelRequest) -> Vec<String> {
    let mut v: Vec<String> = r.tools.iter().map(|t| t.name.clone()).collect();
    v.sort();
    v
}

fn last_tool_message(r: &ModelRequest) -> String {
    r.messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Tool)
        .and_then(|m| m.content.clone())
        .unwrap_or_default()
}

fn weather_then_tip() -> ModelScript {
    Box::new(|_, n| match n {
        0 => model_tool_calls(&[(
            "call_1",
            "weather-service__get_weather",
            json!({"location": "Tokyo"}),
        )]),
        1 => model_tool_calls(&[(
            "call_2",
            "calculator__multiply",
            json!({"a": 85, "b": 0.15}),
        )]),
        _ => model_text("Tokyo is 22°C and partly cloudy; a 15% tip on $85 is $12.75."),
    })
}

#[test]
fn weather_and_tip_end_to_end_in_the_open() {
    let (mut w, human) = world(11);
    let a = join_agent(
        &mut w,
        "name: assistant\ndiscovery_wait_ms: 3000\n",
        weather_then_tip(),
    );
    // The calculator's multiply needs a proposal: the human approves it.
    w.behave(
        human,
        reviewer(Duration::from_millis(200), |_, _| Verdict::Fulfil),
    );
    let chat = ask(&mut w, human, "assistant", QUESTION);
    run_until_finished(&mut w, a);

    let reqs = &w.agent(a).requests;
    assert_eq!(reqs.len(), 3, "{reqs:#?}");
    assert_eq!(
        tool_names(&reqs[0]),
        ["calculator__multiply", "weather-service__get_weather"]
    );
    let weather_def = reqs[0]
        .tools
        .iter()
        .find(|t| t.name == "weather-service__get_weather")
        .unwrap();
    assert!(
        weather_def
            .description
            .contains("(tool `get_weather` of participant `weather-service`)"),
        "{weather_def:?}"
    );
    assert_eq!(weather_def.parameters["required"], json!(["location"]));
    let user = reqs[0]
        .messages
        .iter()
        .find(|m| m.role == Role::User)
        .unwrap();
    assert!(user.content.as_deref().unwrap().contains(QUESTION));
    assert_eq!(last_tool_message(&reqs[1]), "Tokyo: 22°C, partly cloudy");
    assert_eq!(last_tool_message(&reqs[2]), "12.75");

    // What the human saw, in order.
    let seen: Vec<Value> = w
        .node(human)
        .received_json()
        .into_iter()
        .filter(|e| e["from"] == "assistant" && e["payload"]["method"] != "tools/list")
        .collect();
    let kinds: Vec<&str> = seen.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "chat/acknowledge",
            "reasoning/start",
            "reasoning/thought",
            "mcp/request",
            "reasoning/thought",
            "mcp/proposal",
            "reasoning/conclusion",
            "chat"
        ]
    );
    let start = &seen[1];
    assert_eq!(start["correlation_id"], json!([chat]));
    let ctx = start["id"].as_str().unwrap();
    for e in seen.iter().filter(|e| e["kind"] == "reasoning/thought") {
        assert_eq!(e["context"], ctx, "{e}");
    }
    assert_eq!(seen[3]["to"], json!(["weather-service"]));
    assert_eq!(seen[3]["payload"]["params"]["name"], "get_weather");
    assert_eq!(seen[5]["to"], json!(["calculator"]));
    assert_eq!(
        seen[5]["payload"]["params"]["arguments"],
        json!({"a": 85, "b": 0.15})
    );
    let answer = &seen[7];
    assert_eq!(answer["correlation_id"], json!([chat]));
    assert_eq!(answer["to"], json!(["human"]));
    assert!(
        answer["payload"]["text"]
            .as_str()
            .unwrap()
            .contains("$12.75")
    );
    assert!(matches!(&finished(&w, a)[..], [TaskOutcome::Answered(t)] if t.contains("12.75")));
    assert_eq!(w.p(a).pending_requests().count(), 0);
}

#[test]
fn a_rejected_proposal_is_an_observation_and_the_task_still_answers() {
    let (mut w, human) = world(12);
    let a = join_agent(
        &mut w,
        "name: assistant\n",
        Box::new(|_, n| match n {
            0 => model_tool_calls(&[("c1", "calculator__multiply", json!({"a": 2, "b": 3}))]),
            _ => model_text("The calculator was not allowed; 2 times 3 is 6."),
        }),
    );
    w.behave(
        human,
        reviewer(Duration::from_millis(100), |_, _| {
            Verdict::Reject("not today".into())
        }),
    );
    ask(&mut w, human, "assistant", "what is 2*3?");
    run_until_finished(&mut w, a);
    let reqs = &w.agent(a).requests;
    assert_eq!(reqs.len(), 2);
    let obs = last_tool_message(&reqs[1]);
    assert!(
        obs.starts_with("Error:") && obs.contains("not today"),
        "{obs}"
    );
    assert!(
        answers(&w, human)[0]["payload"]["text"]
            .as_str()
            .unwrap()
            .contains("is 6")
    );
    assert_eq!(w.p(a).pending_requests().count(), 0);
}

#[test]
fn an_auto_fulfil_rule_of_a_trusted_agent_serves_the_proposal() {
    let (mut w, human) = world(13);
    let trusted_cfg = agent_config(
        &w,
        "trusted",
        "auto_respond: false\nauto_fulfil: [{from: assistant, to: calculator, method: tools/call, tool: mult*}]\n",
    );
    let trusted = w.join_agent(
        "trusted",
        trusted_cfg,
        Box::new(|_, _| panic!("the trusted agent never asks its model")),
        Duration::from_millis(100),
    );
    let a = join_agent(
        &mut w,
        "name: assistant\n",
        Box::new(|_, n| match n {
            0 => model_tool_calls(&[("c1", "calculator__multiply", json!({"a": 4, "b": 5}))]),
            _ => model_text("4 times 5 is 20."),
        }),
    );
    ask(&mut w, human, "assistant", "what is 4*5?");
    run_until_finished(&mut w, a);
    assert_eq!(last_tool_message(&w.agent(a).requests[1]), "20");
    let fulfilled: Vec<&AgentEvent> = w
        .agent(trusted)
        .events
        .iter()
        .filter(|e| matches!(e, AgentEvent::AutoFulfilled { rule: 0, .. }))
        .collect();
    assert_eq!(fulfilled.len(), 1);
    // The fulfilment is the trusted agent's request, correlated to the proposal.
    let proposal = w
        .node(human)
        .received_kind("mcp/proposal")
        .pop()
        .expect("the human saw the proposal");
    let request = w
        .node(human)
        .received_kind("mcp/request")
        .into_iter()
        .find(|r| r["from"] == "trusted" && r["payload"]["method"] == "tools/call")
        .expect("a fulfilling request");
    assert_eq!(request["correlation_id"], json!([proposal["id"]]));
}

#[test]
fn reasoning_cancel_stops_the_loop_and_withdraws_what_is_pending() {
    let (mut w, human) = world(14);
    // The proposal is never reviewed; the model would go on forever.
    let a = join_agent(
        &mut w,
        "name: assistant\n",
        Box::new(|_, _| {
            model_tool_calls(&[("c", "calculator__multiply", json!({"a": 1, "b": 1}))])
        }),
    );
    ask(&mut w, human, "assistant", "multiply forever");
    let ok = w.run_until(Duration::from_secs(60), |w| {
        !w.node(human).received_kind("mcp/proposal").is_empty()
    });
    assert!(ok);
    let start = w
        .node(human)
        .received_kind("reasoning/start")
        .pop()
        .unwrap();
    let ctx = start["id"].as_str().unwrap().to_owned();
    w.act(human, |p, now| {
        p.send(
            now,
            Draft::new(Kind::ReasoningCancel)
                .context(ctx.clone())
                .payload(json!({"reason": "enough"})),
        )
    })
    .unwrap();
    run_until_finished(&mut w, a);
    w.run_for(Duration::from_secs(30));
    assert!(matches!(&finished(&w, a)[..], [TaskOutcome::Cancelled(r)] if r.contains("human")));
    assert_eq!(
        w.agent(a).requests.len(),
        1,
        "no model call after the cancel"
    );
    let withdraw = w.node(human).received_kind("mcp/withdraw");
    let proposal = w.node(human).received_kind("mcp/proposal").pop().unwrap();
    assert_eq!(withdraw.len(), 1);
    assert_eq!(withdraw[0]["correlation_id"], json!([proposal["id"]]));
    let after_cancel = w
        .node(human)
        .received_json()
        .into_iter()
        .filter(|e| e["from"] == "assistant")
        .skip_while(|e| e["kind"] != "mcp/withdraw")
        .filter(|e| e["kind"] == "reasoning/thought" || e["kind"] == "mcp/proposal")
        .count();
    assert_eq!(after_cancel, 0, "no thought or tool call after the cancel");
    assert_eq!(w.p(a).pending_requests().count(), 0);
}

#[test]
fn the_step_budget_ends_with_a_final_answer_without_tools() {
    let (mut w, human) = world(15);
    let a = join_agent(
        &mut w,
        "name: assistant\nmax_iterations: 2\n",
        Box::new(|r, _| {
            if r.tools.is_empty() {
                model_text("Best effort: it is 22°C.")
            } else {
                model_tool_calls(&[(
                    "c",
                    "weather-service__get_weather",
                    json!({"location": "Oslo"}),
                )])
            }
        }),
    );
    ask(&mut w, human, "assistant", "weather?");
    run_until_finished(&mut w, a);
    let reqs = &w.agent(a).requests;
    assert_eq!(reqs.len(), 3, "two steps with tools, then one without");
    assert!(reqs[2].tools.is_empty());
    assert_eq!(
        answers(&w, human)[0]["payload"]["text"],
        "Best effort: it is 22°C."
    );
}

#[test]
fn a_429_with_retry_after_is_retried_then_succeeds() {
    let (mut w, human) = world(16);
    let a = join_agent(
        &mut w,
        "name: assistant\n",
        Box::new(|_, n| match n {
            0 => model_status(429, Some(Duration::from_secs(7))),
            _ => model_text("hello after the wait"),
        }),
    );
    let t0 = w.now();
    ask(&mut w, human, "assistant", "hi");
    run_until_finished(&mut w, a);
    let retries: Vec<Duration> = w
        .agent(a)
        .events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ModelRetry { after, .. } => Some(*after),
            _ => None,
        })
        .collect();
    // Retry-After is the least wait; jitter (up to 20%) spreads retrying clients.
    assert_eq!(retries.len(), 1);
    assert!(
        retries[0] >= Duration::from_secs(7) && retries[0] <= Duration::from_millis(8400),
        "{retries:?}"
    );
    assert!(w.now() >= t0 + Duration::from_secs(7));
    assert_eq!(
        answers(&w, human)[0]["payload"]["text"],
        "hello after the wait"
    );
}

#[test]
fn a_500_forever_gives_up_after_the_retries_with_a_chat_saying_so() {
    let (mut w, human) = world(17);
    let a = join_agent(
        &mut w,
        "name: assistant\nmodel_retries: 2\n",
        Box::new(|_, _| model_status(500, None)),
    );
    ask(&mut w, human, "assistant", "hi");
    run_until_finished(&mut w, a);
    assert_eq!(w.agent(a).requests.len(), 3, "the call and two retries");
    let text = answers(&w, human)[0]["payload"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.starts_with("I could not complete this:") && text.contains("500"),
        "{text}"
    );
    assert!(matches!(&finished(&w, a)[..], [TaskOutcome::Failed(_)]));
    // The agent takes the next chat normally.
    assert!(!w.agent(a).agent.agent().is_busy());
}

#[test]
fn unreadable_replies_and_unknown_tools_become_observations() {
    let (mut w, human) = world(18);
    let a = join_agent(
        &mut w,
        "name: assistant\n",
        Box::new(|_, n| match n {
            0 => ModelOutcome::Http {
                status: 200,
                retry_after: None,
                body: "{\"choices\": \"not a list\"}".into(),
            },
            1 => model_tool_calls(&[("c", "nobody__nothing", json!({}))]),
            2 => model_tool_calls(&[("d", "weather-service__get_weather", json!("Tokyo"))]),
            _ => model_text("done"),
        }),
    );
    ask(&mut w, human, "assistant", "try things");
    run_until_finished(&mut w, a);
    let reqs = &w.agent(a).requests;
    // A body that is not a chat completion fails the call (no retry of a 200).
    let outcomes = finished(&w, a);
    match &outcomes[..] {
        [TaskOutcome::Failed(e)] => assert!(e.contains("choices") || e.contains("reply"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(reqs.len(), 1);

    // The next task sees the unknown tool and the bad arguments as observations.
    ask(&mut w, human, "assistant", "try again");
    let ok = w.run_until(Duration::from_secs(600), |w| finished(w, a).len() == 2);
    assert!(ok);
    w.run_until_quiet();
    let reqs = &w.agent(a).requests;
    assert_eq!(reqs.len(), 4);
    let unknown = last_tool_message(&reqs[2]);
    assert!(
        unknown.starts_with("Error: there is no tool named `nobody__nothing`")
            && unknown.contains("weather-service__get_weather"),
        "{unknown}"
    );
    let bad = last_tool_message(&reqs[3]);
    assert!(bad.contains("must be a JSON object"), "{bad}");
    assert_eq!(
        answers(&w, human).last().unwrap()["payload"]["text"],
        "done"
    );
}

#[test]
fn scratchpad_format_parses_text_and_explains_what_it_cannot_read() {
    let (mut w, human) = world(19);
    let a = join_agent(
        &mut w,
        "name: assistant\nreasoning_format: scratchpad\n",
        Box::new(|_, n| match n {
            0 => model_text("I think I should look outside."),
            1 => model_text(
                r#"{"reasoning": "need weather", "action": "tool_call", "actionInput": {"tool": "weather-service/get_weather", "arguments": {"location": "Lima"}}}"#,
            ),
            _ => model_text(
                r#"{"reasoning": "have it", "action": "respond", "actionInput": {"message": "Lima is 22°C."}}"#,
            ),
        }),
    );
    ask(&mut w, human, "assistant", "weather in Lima?");
    run_until_finished(&mut w, a);
    let reqs = &w.agent(a).requests;
    assert_eq!(reqs.len(), 3);
    assert!(
        reqs[0].tools.is_empty(),
        "scratchpad shows tools in the prompt"
    );
    let system = reqs[0].messages[0].content.clone().unwrap();
    assert!(system.contains("weather-service/get_weather"), "{system}");
    let second = reqs[1].messages.last().unwrap().content.clone().unwrap();
    assert!(second.contains("could not be read"), "{second}");
    let third = reqs[2].messages.last().unwrap().content.clone().unwrap();
    assert!(third.contains("Lima: 22°C, partly cloudy"), "{third}");
    assert_eq!(answers(&w, human)[0]["payload"]["text"], "Lima is 22°C.");
}

#[test]
fn chats_arriving_while_busy_are_answered_in_order_and_self_replies_ignored() {
    let (mut w, human) = world(20);
    let a = join_agent(
        &mut w,
        "name: assistant\n",
        Box::new(|r, _| {
            let q = r
                .messages
                .iter()
                .rev()
                .find(|m| m.role == Role::User)
                .and_then(|m| m.content.clone())
                .unwrap_or_default();
            let n = if q.contains("first") { "one" } else { "two" };
            model_text(&format!("answer {n}"))
        }),
    );
    ask(&mut w, human, "assistant", "first question");
    ask(&mut w, human, "assistant", "second question");
    let ok = w.run_until(Duration::from_secs(600), |w| finished(w, a).len() == 2);
    assert!(ok);
    w.run_until_quiet();
    let texts: Vec<Value> = answers(&w, human)
        .into_iter()
        .map(|c| c["payload"]["text"].clone())
        .collect();
    assert_eq!(texts, [json!("answer one"), json!("answer two")]);
    // Its own chats never start a task.
    assert_eq!(w.agent(a).requests.len(), 2);
}

#[test]
fn the_same_seed_gives_the_same_run() {
    fn run(seed: u64) -> (u64, Vec<String>) {
        let (mut w, human) = world(seed);
        let a = join_agent(&mut w, "name: assistant\n", weather_then_tip());
        w.behave(
            human,
            reviewer(Duration::from_millis(50), |_, _| Verdict::Fulfil),
        );
        ask(&mut w, human, "assistant", QUESTION);
        run_until_finished(&mut w, a);
        let kinds = w
            .node(human)
            .received_json()
            .iter()
            .map(|e| format!("{}:{}", e["from"], e["kind"]))
            .collect();
        (w.trace(), kinds)
    }
    let seed = mew_tests::sim::seed_or(42);
    assert_eq!(run(seed), run(seed));
}

/// The text of the last user message of a request.
fn last_user(r: &ModelRequest) -> String {
    r.messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .and_then(|m| m.content.clone())
        .unwrap_or_default()
}

/// Answers "answer to <question>", and summaries with "SUMMARY".
fn echo_model() -> ModelScript {
    Box::new(|r, _| {
        let q = last_user(r);
        if r.messages.iter().any(|m| {
            m.content
                .as_deref()
                .is_some_and(|c| c.contains("Summarise the conversation"))
        }) {
            model_text("SUMMARY: two questions were asked")
        } else {
            model_text(&format!("answer to {q}"))
        }
    })
}

fn control(w: &mut World, human: NodeId, kind: Kind, payload: Value) -> String {
    w.act(human, |p, now| {
        p.send(now, Draft::new(kind).to(["assistant"]).payload(payload))
    })
    .unwrap()
}

#[test]
fn compaction_on_request_summarises_through_the_model_and_says_done() {
    let (mut w, human) = world(21);
    let a = join_agent(
        &mut w,
        "name: assistant\nconversation_history_length: 10\n",
        echo_model(),
    );
    ask(&mut w, human, "assistant", "first?");
    run_until_finished(&mut w, a);
    ask(&mut w, human, "assistant", "second?");
    let ok = w.run_until(Duration::from_secs(600), |w| finished(w, a).len() == 2);
    assert!(ok);
    w.run_until_quiet();
    // The second call saw the first turn.
    let second = &w.agent(a).requests[1];
    assert!(
        second
            .messages
            .iter()
            .any(|m| m.content.as_deref() == Some("answer to first?"))
    );
    assert_eq!(w.agent(a).agent.agent().history_len(), 4);

    let id = control(&mut w, human, Kind::ParticipantCompact, json!({}));
    w.run_for(Duration::from_secs(10));
    let done = w.node(human).received_kind("participant/compact-done");
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0]["correlation_id"], json!([id]));
    assert_eq!(done[0]["from"], "assistant");
    let statuses: Vec<Value> = w
        .node(human)
        .received_kind("participant/status")
        .into_iter()
        .filter(|s| s["from"] == "assistant")
        .map(|s| s["payload"]["status"].clone())
        .collect();
    assert!(statuses.contains(&json!("compacting")), "{statuses:?}");

    // The next task starts from the summary.
    ask(&mut w, human, "assistant", "third?");
    let ok = w.run_until(Duration::from_secs(600), |w| finished(w, a).len() == 3);
    assert!(ok);
    let third = w.agent(a).requests.last().unwrap();
    assert!(
        third.messages.iter().any(|m| m
            .content
            .as_deref()
            .is_some_and(|c| c.contains("SUMMARY: two questions were asked"))),
        "{third:#?}"
    );
    assert!(
        !third
            .messages
            .iter()
            .any(|m| m.content.as_deref() == Some("answer to first?"))
    );
}

#[test]
fn clear_forgets_the_conversation_and_mentions_are_answered() {
    let (mut w, human) = world(22);
    // The cheapest strategy: mentions and direct chats only.
    let a = join_agent(
        &mut w,
        "name: assistant\nconversation_history_length: 10\nchat: {classify: false, respond_to_questions: false}\n",
        echo_model(),
    );
    ask(&mut w, human, "assistant", "remember me?");
    run_until_finished(&mut w, a);
    control(&mut w, human, Kind::ParticipantClear, json!({}));
    w.run_until_quiet();
    assert_eq!(w.agent(a).agent.agent().history_len(), 0);
    // A broadcast that does not mention the agent is left alone; one that does is answered.
    w.act(human, |p, now| p.chat(now, "lunch anyone?", vec![]))
        .unwrap();
    w.act(human, |p, now| {
        p.chat(now, "hey @assistant, still there?", vec![])
    })
    .unwrap();
    let ok = w.run_until(Duration::from_secs(600), |w| finished(w, a).len() == 2);
    assert!(ok);
    w.run_until_quiet();
    let reqs = &w.agent(a).requests;
    assert_eq!(reqs.len(), 2);
    // Cleared: the second call has no earlier turns.
    assert_eq!(
        reqs[1]
            .messages
            .iter()
            .filter(|m| m.role != Role::System)
            .count(),
        1,
        "{:#?}",
        reqs[1].messages
    );
    assert!(last_user(&reqs[1]).contains("still there?"));
    let texts: Vec<Value> = answers(&w, human)
        .into_iter()
        .map(|c| c["payload"]["text"].clone())
        .collect();
    assert_eq!(
        texts,
        [
            json!("answer to remember me?"),
            json!("answer to hey @assistant, still there?")
        ]
    );
}

fn ignored(w: &World, a: NodeId) -> Vec<String> {
    w.agent(a)
        .events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ChatIgnored { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

fn thoughts(w: &World, human: NodeId) -> Vec<String> {
    w.node(human)
        .received_kind("reasoning/thought")
        .into_iter()
        .filter_map(|t| t["payload"]["message"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn the_default_strategy_classifies_broadcasts_and_falls_back_to_questions() {
    let (mut w, human) = world(31);
    let a = join_agent(
        &mut w,
        "name: assistant\n",
        Box::new(|r, _| {
            let q = last_user(r);
            if !q.contains("Should you respond") {
                return model_text(&format!("answer to {q}"));
            }
            if q.contains("lunch") {
                model_text(
                    "{\"shouldRespond\": false, \"confidence\": 0.9, \"reason\": \"chatter\"}",
                )
            } else if q.contains("Tokyo") {
                model_text(
                    "<think>it is about weather</think>{\"shouldRespond\": true, \"confidence\": 0.8}",
                )
            } else if q.contains("unsure") {
                model_text("{\"shouldRespond\": true, \"confidence\": 0.3}")
            } else if q.contains("what now") {
                model_status(400, None)
            } else {
                model_text("I cannot say")
            }
        }),
    );
    let broadcast = |w: &mut World, text: &str| {
        w.act(human, |p, now| p.chat(now, text, vec![])).unwrap();
        w.run_until_quiet();
        w.run_for(Duration::from_secs(5));
    };
    for text in [
        "lunch anyone?",
        "how warm is Tokyo today",
        "unsure whether to ask",
        "what now?",
        "fine then",
    ] {
        broadcast(&mut w, text);
    }
    w.act(human, |p, now| {
        p.chat(
            now,
            "for the weather service only",
            vec!["weather-service".into()],
        )
    })
    .unwrap();
    w.run_until_quiet();
    let reqs = &w.agent(a).requests;
    // Classification: its own short prompt, no tools, a small budget, no stream.
    let classify: Vec<&ModelRequest> = reqs
        .iter()
        .filter(|r| last_user(r).contains("Should you respond"))
        .collect();
    assert_eq!(classify.len(), 5);
    for c in &classify {
        assert!(c.tools.is_empty() && !c.stream);
        assert_eq!(c.max_tokens, Some(256));
        assert_eq!(c.messages.len(), 1);
    }
    let texts: Vec<Value> = answers(&w, human)
        .into_iter()
        .map(|c| c["payload"]["text"].clone())
        .collect();
    // Tokyo (judged yes) and "what now?" (classification failed; a question) are answered.
    assert_eq!(
        texts,
        [
            json!("answer to how warm is Tokyo today"),
            json!("answer to what now?")
        ]
    );
    let why = ignored(&w, a);
    assert!(
        why.iter()
            .any(|r| r.contains("shouldRespond false, confidence 0.9")),
        "{why:?}"
    );
    assert!(
        why.iter()
            .any(|r| r.contains("confidence 0.3, threshold 0.5")),
        "{why:?}"
    );
    assert!(
        why.iter()
            .any(|r| r.contains("could not be read, and it asks no question")),
        "{why:?}"
    );
    assert!(
        why.iter().any(|r| r == "addressed to weather-service"),
        "{why:?}"
    );
}

#[test]
fn streamed_reasoning_becomes_thoughts_a_paragraph_at_a_time() {
    let para = |n: usize| format!("Paragraph {n}: {}\n", "weighing the options ".repeat(12));
    for (yaml, shown) in [
        ("name: assistant\n", true),
        ("name: assistant\nmodel_reasoning: none\n", false),
    ] {
        let (mut w, human) = world(32);
        let (p1, p2) = (para(1), para(2));
        let a = join_agent(
            &mut w,
            yaml,
            Box::new(move |_, _| {
                let mut deltas: Vec<Value> = Vec::new();
                for chunk in format!("{p1}{p2}tail thought").as_bytes().chunks(40) {
                    let c = String::from_utf8_lossy(chunk).into_owned();
                    deltas.push(json!({"reasoning_content": c}));
                }
                deltas.push(json!({"content": "The answer."}));
                model_stream(&deltas)
            }),
        );
        ask(&mut w, human, "assistant", "think hard");
        run_until_finished(&mut w, a);
        assert!(w.agent(a).requests[0].stream);
        assert_eq!(answers(&w, human)[0]["payload"]["text"], "The answer.");
        let t = thoughts(&w, human);
        let about = |s: &str| t.iter().filter(|x| x.contains(s)).count();
        if shown {
            // Each paragraph a thought of its own as it streamed in, the rest when the
            // reply ended; nothing twice.
            assert_eq!(about("Paragraph 1"), 1, "{t:?}");
            assert_eq!(about("Paragraph 2"), 1, "{t:?}");
            assert_eq!(about("tail thought"), 1, "{t:?}");
            assert!(
                t.iter()
                    .any(|x| x.contains("Paragraph 1") && !x.contains("Paragraph 2"))
            );
            assert!(t.iter().any(|x| x == "tail thought"), "{t:?}");
        } else {
            assert_eq!(about("Paragraph") + about("tail thought"), 0, "{t:?}");
        }
    }
}

#[test]
fn arguments_against_the_schema_and_cut_answers_go_back_or_are_flagged() {
    let (mut w, human) = world(33);
    let a = join_agent(
        &mut w,
        "name: assistant\n",
        Box::new(|_, n| match n {
            0 => {
                model_tool_calls(&[("c", "weather-service__get_weather", json!({"city": "Oslo"}))])
            }
            _ => ModelOutcome::Http {
                status: 200,
                retry_after: None,
                body: json!({"choices": [{"index": 0, "finish_reason": "length",
                    "message": {"role": "assistant", "content": "It is cold and"}}]})
                .to_string(),
            },
        }),
    );
    ask(&mut w, human, "assistant", "weather in Oslo?");
    run_until_finished(&mut w, a);
    let reqs = &w.agent(a).requests;
    let obs = last_tool_message(&reqs[1]);
    assert!(
        obs.starts_with(
            "Error: the arguments do not match the schema of weather-service/get_weather"
        ) && obs.contains("location"),
        "{obs}"
    );
    // Nothing reached the weather service.
    assert!(
        w.node(human)
            .received_kind("mcp/request")
            .iter()
            .all(|r| r["payload"]["method"] != "tools/call")
    );
    let text = answers(&w, human)[0]["payload"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.starts_with("It is cold and") && text.contains("cut short"),
        "{text}"
    );
}

#[test]
fn respond_to_all_answers_persons_and_acknowledges_what_it_takes_on() {
    let (mut w, human) = world(33);
    let a = join_agent(
        &mut w,
        "name: assistant\nchat: {respond_to_all: true}\n",
        echo_model(),
    );
    // A bridge reporting its failure, again and again: no model call, no answer.
    let service = w
        .nodes()
        .find(|(_, node)| node.name == "weather-service")
        .map(|(n, _)| n)
        .expect("the weather service is in the world");
    for i in 0..6 {
        w.act(service, |p, now| {
            p.chat(now, &format!("MCP server failed to start ({i})"), vec![])
        })
        .unwrap();
        w.run_until_quiet();
    }
    assert!(
        w.agent(a).requests.is_empty(),
        "no model call for a bridge's chats"
    );
    let why = ignored(&w, a);
    assert_eq!(why.len(), 6, "{why:?}");
    assert!(
        why.iter()
            .all(|r| r.starts_with("weather-service is not a person")),
        "{why:?}"
    );
    // The person's chat to everyone is taken on: acknowledged, then answered.
    let id = w
        .act(human, |p, now| {
            p.chat(now, "please write hello.txt", vec![])
        })
        .unwrap();
    run_until_finished(&mut w, a);
    assert_eq!(w.agent(a).requests.len(), 1);
    let acks: Vec<Value> = w
        .node(human)
        .received_kind("chat/acknowledge")
        .into_iter()
        .filter(|e| e["from"] == "assistant")
        .collect();
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!(acks[0]["to"], json!(["human"]));
    assert_eq!(acks[0]["correlation_id"], json!([id]));
    assert_eq!(acks[0]["payload"]["status"], "received");
    let texts: Vec<Value> = answers(&w, human)
        .into_iter()
        .map(|c| c["payload"]["text"].clone())
        .collect();
    assert_eq!(texts.len(), 1, "{texts:?}");
    assert!(
        texts[0]
            .as_str()
            .unwrap()
            .contains("please write hello.txt")
    );
}

const ASKING_SPACE: &str = r#"
space: {id: test-space}
participants:
  human: {tokens: [human-token], person: true, capabilities: [{kind: "*"}]}
  files: {tokens: [files-token], capabilities: [{kind: "mcp/*"}]}
  assistant:
    tokens: [assistant-token]
    capabilities:
      - {kind: "mcp/*"}
      - {kind: chat}
      - {kind: participant/status}
"#;

/// The bridge's question to the agent, as the bridge puts it; its envelope id.
fn elicit_agent(w: &mut World, files: NodeId) -> String {
    let payload = json!({"method": "elicitation/create", "params": {
        "mode": "form", "message": "How many seats?",
        "requestedSchema": {"type": "object", "properties": {"seats": {"type": "integer"}}}}});
    let opts = mew_core::participant::RequestOptions {
        timeout: Some(Duration::from_secs(600)),
        prefer_proposal: false,
    };
    w.act(files, |p, now| {
        p.mcp_request(now, vec!["assistant".into()], payload, opts)
    })
    .unwrap()
    .to_string()
}

fn files_outcome(w: &World, files: NodeId) -> Option<Result<Value, String>> {
    w.node(files).events.iter().find_map(|e| match e {
        mew_core::participant::Event::RequestCompleted { result, .. } => {
            Some(result.clone().map_err(|e| e.to_string()))
        }
        _ => None,
    })
}

#[test]
fn an_elicitation_goes_to_the_people_and_the_first_answer_back() {
    let mut w = World::from_yaml(ASKING_SPACE, 31, (1, 30));
    let human = quiet_join(&mut w, "human");
    w.act(human, |p, _| p.forward_method("elicitation/create"));
    w.behave(
        human,
        Box::new(|p, now, e, _| {
            if let mew_core::participant::Event::Forwarded { call_id, .. } = e {
                p.complete_call(
                    now,
                    *call_id,
                    Ok(json!({"action": "accept", "content": {"seats": 4}})),
                )
                .unwrap();
            }
        }),
    );
    let files = quiet_join(&mut w, "files");
    join_agent(&mut w, "name: assistant\ndiscovery: false\n", echo_model());
    let asked = elicit_agent(&mut w, files);
    let ok = w.run_until(Duration::from_secs(30), |w| {
        files_outcome(w, files).is_some()
    });
    assert!(ok, "seed {}: the question was never answered", w.seed);
    assert_eq!(
        files_outcome(&w, files).unwrap(),
        Ok(json!({"action": "accept", "content": {"seats": 4}}))
    );
    // The human was asked by the agent, the same question, about the bridge's.
    let put: Vec<Value> = w
        .node(human)
        .received_kind("mcp/request")
        .into_iter()
        .filter(|e| e["payload"]["method"] == "elicitation/create" && e["from"] == "assistant")
        .collect();
    assert_eq!(put.len(), 1, "{put:#?}");
    assert_eq!(put[0]["from"], "assistant");
    assert_eq!(put[0]["to"], json!(["human"]));
    assert_eq!(put[0]["correlation_id"], json!([asked]));
    assert_eq!(put[0]["payload"]["params"]["message"], "How many seats?");
    assert_eq!(
        put[0]["payload"]["params"]["requestedSchema"]["properties"]["seats"]["type"],
        "integer"
    );
    // The model was never asked.
    assert!(w.agent(w_agent(&w)).requests.is_empty());
}

fn w_agent(w: &World) -> NodeId {
    w.nodes()
        .find(|(_, n)| n.name == "assistant")
        .map(|(id, _)| id)
        .unwrap()
}

#[test]
fn an_elicitation_with_no_person_present_is_refused_saying_a_person_is_needed() {
    let mut w = World::from_yaml(ASKING_SPACE, 32, (1, 30));
    let files = quiet_join(&mut w, "files");
    join_agent(&mut w, "name: assistant\ndiscovery: false\n", echo_model());
    elicit_agent(&mut w, files);
    let ok = w.run_until(Duration::from_secs(30), |w| {
        files_outcome(w, files).is_some()
    });
    assert!(ok, "seed {}: the question was never answered", w.seed);
    let err = files_outcome(&w, files).unwrap().unwrap_err();
    assert!(err.contains("needs a person"), "{err}");
}
