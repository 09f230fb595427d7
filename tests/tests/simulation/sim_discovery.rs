//! Tool discovery through the real gateway core: a prompt participant, a slow one (its
//! link takes seconds each way) and a failing one (answers with errors, or never), then
//! the "all settled" event.

use mew_core::participant::{DiscoveryState, Event, ParticipantConfig, ToolSpec};
use mew_tests::sim::participants::{NodeId, SPACE, World};
use serde_json::{Value, json};
use std::time::Duration;

fn tool(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: Some(format!("the {name} tool")),
        input_schema: Some(json!({"type": "object"})),
    }
}

fn tool_owner(w: &mut World, id: &str, tool_name: &str) -> NodeId {
    let mut c: ParticipantConfig = w.config_for(id, &format!("{id}-token"));
    c.discovery.auto = false;
    let n = w.join_with(id, c);
    w.act(n, |p, _| p.register_tool(tool(tool_name))).unwrap();
    n
}

/// A raw socket joined as `broken`; `answer` decides the reply to a `tools/list`.
fn broken(w: &mut World, answer: Option<Value>) -> NodeId {
    let n = w.connect_raw("broken", Some("broken-token"));
    w.on_raw_frame(n, move |frame| {
        let Ok(env) = serde_json::from_str::<Value>(frame) else {
            return vec![];
        };
        let for_me = env["to"]
            .as_array()
            .is_some_and(|t| t.iter().any(|x| x == "broken"));
        if env["kind"] != "mcp/request" || !for_me {
            return vec![];
        }
        let Some(error) = answer.clone() else {
            return vec![]; // never answers
        };
        vec![
            json!({
                "protocol": "mew/v0.4", "id": format!("r-{}", env["id"].as_str().unwrap_or("")),
                "from": "broken", "to": [env["from"]], "kind": "mcp/response",
                "correlation_id": [env["id"]],
                "payload": {"jsonrpc": "2.0", "id": env["payload"]["id"], "error": error}
            })
            .to_string(),
        ]
    });
    n
}

fn discovery_log(w: &World, n: NodeId, who: &str) -> Vec<DiscoveryState> {
    w.events(n)
        .iter()
        .filter_map(|e| match e {
            Event::Discovery { participant, state } if participant == who => Some(*state),
            _ => None,
        })
        .collect()
}

fn settled_count(w: &World, n: NodeId) -> usize {
    w.events(n)
        .iter()
        .filter(|e| matches!(e, Event::DiscoverySettled))
        .count()
}

fn setup(seed: u64, broken_answer: Option<Value>) -> (World, NodeId) {
    let mut w = World::from_yaml(SPACE, seed, (1, 30));
    tool_owner(&mut w, "service", "add");
    let slow = tool_owner(&mut w, "slow", "summarise");
    w.set_latency(slow, 3_000, 4_000);
    broken(&mut w, broken_answer);
    w.run_until_quiet();
    // Discovery is opt-in: the human asks for it.
    let mut cfg = w.config_for("human", "human-token");
    cfg.discovery.auto = true;
    let human = w.join_with("human", cfg);
    (w, human)
}

#[test]
fn discovery_settles_with_slow_and_erroring_participants() {
    let (mut w, human) = setup(11, Some(json!({"code": -32603, "message": "exploded"})));
    let start = w.now();
    assert!(w.p(human).discoveries_pending() > 0);
    assert!(w.run_until(Duration::from_secs(120), |w| settled_count(w, human) > 0));
    let settled_after = w.now().saturating_since(start);

    assert_eq!(
        discovery_log(&w, human, "service").last(),
        Some(&DiscoveryState::Completed)
    );
    // The slow participant answers after several seconds, within the discovery timeout.
    assert_eq!(
        discovery_log(&w, human, "slow").last(),
        Some(&DiscoveryState::Completed)
    );
    let slow_status = w.p(human).discovery_status("slow").unwrap();
    let fetched = slow_status.fetched_at.unwrap();
    assert!(fetched.saturating_since(slow_status.last_attempt.unwrap()) >= Duration::from_secs(6));
    // The erroring one is retried, then failed.
    assert_eq!(
        discovery_log(&w, human, "broken").last(),
        Some(&DiscoveryState::Failed)
    );
    let asked = w
        .node(NodeId(2))
        .received_kind("mcp/request")
        .into_iter()
        .filter(|e| e["from"] == "human" && e["to"] == json!(["broken"]))
        .filter(|e| e["payload"]["method"] == "tools/list")
        .count();
    assert_eq!(asked, 3, "three attempts before failing");
    // Retries wait 5 s then 10 s: settling takes at least that long.
    assert!(
        settled_after >= Duration::from_secs(15),
        "{settled_after:?}"
    );
    assert_eq!(w.p(human).discoveries_pending(), 0);
    assert_eq!(settled_count(&w, human), 1);

    let mut names: Vec<String> = w
        .p(human)
        .available_tools()
        .into_iter()
        .map(|t| t.name)
        .collect();
    names.sort();
    assert_eq!(names, ["service/add", "slow/summarise"]);
}

#[test]
fn a_participant_that_never_answers_fails_after_timeouts() {
    let (mut w, human) = setup(12, None);
    let start = w.now();
    assert!(w.run_until(Duration::from_secs(300), |w| settled_count(w, human) > 0));
    assert_eq!(
        discovery_log(&w, human, "broken").last(),
        Some(&DiscoveryState::Failed)
    );
    // Three 10 s timeouts plus 5 s and 10 s between attempts.
    assert!(w.now().saturating_since(start) >= Duration::from_secs(45));
    assert_eq!(
        discovery_log(&w, human, "service").last(),
        Some(&DiscoveryState::Completed)
    );
    assert_eq!(w.p(human).discoveries_pending(), 0);
    // No request is left pending once discovery settled.
    assert_eq!(w.p(human).pending_requests().count(), 0);
}

#[test]
fn a_participant_that_may_only_propose_learns_tools_from_listings_it_sees() {
    let mut w = World::from_yaml(SPACE, mew_tests::sim::seed_or(5), (1, 20));
    let _service = tool_owner(&mut w, "service", "add");
    // `agent` may only propose: it cannot list tools itself.
    let mut c = w.config_for("agent", "agent-token");
    c.discovery.auto = true;
    let agent = w.join_with("agent", c);
    w.run_for(Duration::from_secs(5));
    assert_eq!(
        w.p(agent).discovery_status("service").unwrap().state,
        DiscoveryState::Failed
    );
    assert!(w.p(agent).available_tools().is_empty());
    // A person's client lists the service's tools; the agent sees the answer go by.
    let mut c = w.config_for("human", "human-token");
    c.discovery.auto = true;
    let human = w.join_with("human", c);
    w.run_for(Duration::from_secs(5));
    assert!(
        w.p(human)
            .available_tools()
            .iter()
            .any(|t| t.name == "service/add")
    );
    let names: Vec<String> = w
        .p(agent)
        .available_tools()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["service/add"]);
    assert_eq!(
        w.p(agent).discovery_status("service").unwrap().state,
        DiscoveryState::Completed
    );
}
