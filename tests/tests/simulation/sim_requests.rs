//! Requests and proposals between participant machines through the real gateway core:
//! direct request, proposal fulfilled / rejected / withdrawn / timed out.

use mew_core::participant::{
    ParticipantConfig, RequestError, RequestOptions, RequestRoute, ReviewState, ToolSpec,
};
use mew_tests::sim::participants::behaviour::{reviewer, tool_handler};
use mew_tests::sim::participants::{NodeId, SPACE, Verdict, World};
use serde_json::{Value, json};
use std::time::Duration;

fn quiet_config(w: &World, id: &str) -> ParticipantConfig {
    let mut c = w.config_for(id, &format!("{id}-token"));
    c.discovery.auto = false;
    c
}

fn join(w: &mut World, id: &str) -> NodeId {
    let c = quiet_config(w, id);
    w.join_with(id, c)
}

/// A world with a service offering `add` and the given extra participants joined.
fn world(seed: u64, ids: &[&str]) -> (World, NodeId, Vec<NodeId>) {
    world_in(SPACE, seed, ids)
}

fn world_in(space: &str, seed: u64, ids: &[&str]) -> (World, NodeId, Vec<NodeId>) {
    let mut w = World::from_yaml(space, seed, (1, 40));
    let service = join(&mut w, "service");
    w.act(service, |p, _| {
        p.register_tool(ToolSpec {
            name: "add".into(),
            description: Some("adds a and b".into()),
            input_schema: Some(json!({"type": "object", "required": ["a", "b"],
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}}})),
        })
    })
    .unwrap();
    w.behave(
        service,
        tool_handler(|_, args| {
            let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
            Ok(json!({"content": [{"type": "text", "text": sum.to_string()}]}))
        }),
    );
    let others = ids.iter().map(|id| join(&mut w, id)).collect();
    w.run_until_quiet();
    (w, service, others)
}

fn add_call(a: i64, b: i64) -> Value {
    json!({"method": "tools/call", "params": {"name": "add", "arguments": {"a": a, "b": b}}})
}

fn route_of(w: &World, n: NodeId) -> Vec<RequestRoute> {
    w.events(n)
        .iter()
        .filter_map(|e| match e {
            mew_core::participant::Event::RouteDecision { route, .. } => Some(*route),
            _ => None,
        })
        .collect()
}

#[test]
fn direct_request_is_answered_by_the_tool() {
    let (mut w, service, others) = world(1, &["caller"]);
    let caller = others[0];
    let id = w
        .act(caller, |p, now| {
            p.mcp_request(
                now,
                vec!["service".into()],
                add_call(2, 3),
                RequestOptions::default(),
            )
        })
        .unwrap();
    assert_eq!(route_of(&w, caller), vec![RequestRoute::Request]);
    assert!(w.run_until(Duration::from_secs(5), |w| w.outcome(caller, &id).is_some()));
    let result = w.outcome(caller, &id).unwrap().clone().unwrap();
    assert_eq!(result["content"][0]["text"], "5");
    assert!(!w.p(caller).is_pending(&id));
    // The service really received the request from the gateway and answered it.
    assert_eq!(w.node(service).received_kind("mcp/request").len(), 1);
    assert_eq!(w.p(service).pending_calls().count(), 0);
}

#[test]
fn proposal_fulfilled_by_a_reviewer_resolves_with_the_result() {
    let (mut w, _service, others) = world(2, &["agent", "human"]);
    let (agent, human) = (others[0], others[1]);
    w.behave(
        human,
        reviewer(Duration::from_millis(200), |_, _| Verdict::Fulfil),
    );
    let id = w
        .act(agent, |p, now| {
            p.mcp_request(
                now,
                vec!["service".into()],
                add_call(20, 22),
                RequestOptions::default(),
            )
        })
        .unwrap();
    // The agent may not request directly: its capabilities route it to a proposal.
    assert_eq!(route_of(&w, agent), vec![RequestRoute::Proposal]);
    assert!(w.run_until(Duration::from_secs(10), |w| w.outcome(agent, &id).is_some()));
    let result = w.outcome(agent, &id).unwrap().clone().unwrap();
    assert_eq!(result["content"][0]["text"], "42");
    // The reviewer's view of the proposal ends fulfilled (once the response reached it
    // too: each link has its own latency).
    w.run_until_quiet();
    assert_eq!(
        w.p(human).proposal(id.as_str()).map(|p| p.state.clone()),
        Some(ReviewState::Fulfilled)
    );
    // The gateway never let the agent send an mcp/request itself.
    let req_from_agent = w
        .node(human)
        .received_kind("mcp/request")
        .into_iter()
        .filter(|e| e["from"] == "agent")
        .count();
    assert_eq!(req_from_agent, 0);
}

#[test]
fn rejected_proposal_fails_fast_with_rejecter_and_reason() {
    let (mut w, service, others) = world(3, &["agent", "human"]);
    let (agent, human) = (others[0], others[1]);
    w.behave(
        human,
        reviewer(Duration::from_millis(100), |_, _| {
            Verdict::Reject("unsafe".into())
        }),
    );
    let start = w.now();
    let id = w
        .act(agent, |p, now| {
            p.mcp_request(
                now,
                vec!["service".into()],
                add_call(1, 1),
                RequestOptions::default(),
            )
        })
        .unwrap();
    assert!(w.run_until(Duration::from_secs(10), |w| w.outcome(agent, &id).is_some()));
    assert_eq!(
        w.outcome(agent, &id).unwrap(),
        &Err(RequestError::Rejected {
            by: "human".into(),
            reason: "unsafe".into()
        })
    );
    // Fail fast: well before the proposal timeout.
    assert!(w.now().saturating_since(start) < Duration::from_secs(2));
    assert!(w.node(service).received_kind("mcp/request").is_empty());
}

#[test]
fn withdrawn_proposal_completes_and_reviewers_see_it() {
    let (mut w, _service, others) = world(4, &["agent", "human"]);
    let (agent, human) = (others[0], others[1]);
    let id = w
        .act(agent, |p, now| {
            p.mcp_request(
                now,
                vec!["service".into()],
                add_call(1, 2),
                RequestOptions::default(),
            )
        })
        .unwrap();
    w.run_until_quiet();
    assert_eq!(
        w.p(human).proposal(id.as_str()).map(|p| p.state.clone()),
        Some(ReviewState::Open)
    );
    w.act(agent, |p, now| p.withdraw(now, &id, "changed_mind"))
        .unwrap();
    assert_eq!(
        w.outcome(agent, &id),
        Some(&Err(RequestError::Withdrawn {
            reason: "changed_mind".into()
        }))
    );
    w.run_until_quiet();
    assert_eq!(
        w.p(human).proposal(id.as_str()).map(|p| p.state.clone()),
        Some(ReviewState::Withdrawn {
            reason: "changed_mind".into()
        })
    );
    // Fulfilling a withdrawn proposal is refused locally.
    assert!(w.act(human, |p, now| p.fulfil(now, id.as_str())).is_err());
}

#[test]
fn timed_out_proposal_is_withdrawn_with_reason_timeout() {
    let mut w = World::from_yaml(SPACE, 5, (1, 40));
    let mut c = quiet_config(&w, "agent");
    c.proposal_timeout = Duration::from_secs(60);
    let agent = w.join_with("agent", c);
    let human = join(&mut w, "human");
    let start = w.now();
    let id = w
        .act(agent, |p, now| {
            p.mcp_request(
                now,
                vec!["service".into()],
                add_call(1, 2),
                RequestOptions::default(),
            )
        })
        .unwrap();
    let deadline = w.p(agent).pending_requests().next().unwrap().1;
    assert_eq!(deadline, start + Duration::from_secs(60));
    assert!(w.run_until(Duration::from_secs(120), |w| {
        w.outcome(agent, &id).is_some()
    }));
    assert_eq!(w.outcome(agent, &id), Some(&Err(RequestError::Timeout)));
    assert_eq!(w.now(), deadline);
    w.run_until_quiet();
    let withdraws = w.node(human).received_kind("mcp/withdraw");
    assert_eq!(withdraws.len(), 1);
    assert_eq!(withdraws[0]["payload"]["reason"], "timeout");
    assert_eq!(withdraws[0]["correlation_id"], json!([id.as_str()]));
    assert_eq!(
        w.p(human).proposal(id.as_str()).map(|p| p.state.clone()),
        Some(ReviewState::Withdrawn {
            reason: "timeout".into()
        })
    );
}

#[test]
fn direct_request_to_a_silent_target_times_out_at_its_deadline() {
    let (mut w, _service, others) = world(6, &["caller"]);
    let caller = others[0];
    let start = w.now();
    let id = w
        .act(caller, |p, now| {
            p.mcp_request(
                now,
                vec!["nobody".into()],
                json!({"method": "ping"}),
                RequestOptions {
                    timeout: Some(Duration::from_secs(3)),
                    ..Default::default()
                },
            )
        })
        .unwrap();
    assert!(w.run_until(Duration::from_secs(10), |w| {
        w.outcome(caller, &id).is_some()
    }));
    assert_eq!(w.outcome(caller, &id), Some(&Err(RequestError::Timeout)));
    assert_eq!(w.now(), start + Duration::from_secs(3));
}

#[test]
fn proposal_round_trip_holds_across_many_seeds_and_latencies() {
    use mew_core::gateway::SpaceConfig;
    for seed in 100..160 {
        let config = SpaceConfig::from_yaml(SPACE).unwrap();
        let mut w = World::with_exact_seed(config, seed, (0, 250));
        let service = join(&mut w, "service");
        w.act(service, |p, _| {
            p.register_tool(ToolSpec {
                name: "add".into(),
                description: None,
                input_schema: None,
            })
        })
        .unwrap();
        w.behave(
            service,
            tool_handler(|_, a| Ok(json!(a["a"].as_i64().unwrap_or(0) * 2))),
        );
        let agent = join(&mut w, "agent");
        let human = join(&mut w, "human");
        w.behave(human, reviewer(Duration::ZERO, |_, _| Verdict::Fulfil));
        let ids: Vec<_> = (0..5)
            .map(|i| {
                w.act(agent, |p, now| {
                    p.mcp_request(
                        now,
                        vec!["service".into()],
                        add_call(i, 0),
                        RequestOptions::default(),
                    )
                })
                .unwrap()
            })
            .collect();
        let done = w.run_until(Duration::from_secs(20), |w| {
            ids.iter().all(|id| w.outcome(agent, id).is_some())
        });
        assert!(done, "seed {seed}: not every proposal settled");
        for (i, id) in ids.iter().enumerate() {
            let r = w.outcome(agent, id).unwrap().clone();
            assert_eq!(
                r.map(|v| v["content"][0]["text"].clone()),
                Ok(json!((i * 2).to_string())),
                "seed {seed}"
            );
        }
        assert_eq!(w.p(agent).pending_requests().count(), 0, "seed {seed}");
    }
}

#[test]
fn proposals_work_under_addressed_delivery() {
    // Strict routing by `to` would hide the proposal from the reviewer and the outcome from
    // the proposer; the gateway routes the proposal workflow so neither happens.
    let space = format!("{SPACE}gateway: {{delivery: addressed}}\n");
    let (mut w, _service, others) = world_in(&space, 4, &["agent", "human", "caller"]);
    let (agent, human, caller) = (others[0], others[1], others[2]);
    w.behave(
        human,
        reviewer(Duration::from_millis(50), |_, _| Verdict::Fulfil),
    );
    let id = w
        .act(agent, |p, now| {
            p.mcp_request(
                now,
                vec!["service".into()],
                add_call(40, 2),
                RequestOptions::default(),
            )
        })
        .unwrap();
    assert!(w.run_until(Duration::from_secs(10), |w| w.outcome(agent, &id).is_some()));
    let result = w.outcome(agent, &id).unwrap().clone().unwrap();
    assert_eq!(result["content"][0]["text"], "42");
    w.run_until_quiet();
    // Strict routing still holds for everything else: the bystander saw the proposal (every
    // reviewer may act on it) but neither the fulfilment nor its response.
    assert_eq!(w.node(caller).received_kind("mcp/proposal").len(), 1);
    assert_eq!(w.node(caller).received_kind("mcp/request").len(), 0);
    assert_eq!(w.node(caller).received_kind("mcp/response").len(), 0);
}
