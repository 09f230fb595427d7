//! Grant then direct request through the real gateway core: the proposer's `mcp_request`
//! switches from proposal to request after the updated welcome, the grant is acknowledged,
//! and a revocation switches it back.

use mew_core::envelope::Kind;
use mew_core::participant::{
    Draft, Event, ParticipantConfig, RequestOptions, RequestRoute, ToolSpec,
};
use mew_tests::sim::participants::behaviour::tool_handler;
use mew_tests::sim::participants::{NodeId, SPACE, World};
use serde_json::{Value, json};
use std::time::Duration;

fn cfg(w: &World, id: &str) -> ParticipantConfig {
    let mut c = w.config_for(id, &format!("{id}-token"));
    c.discovery.auto = false;
    c
}

fn last_route(w: &World, n: NodeId) -> Option<RequestRoute> {
    w.events(n).iter().rev().find_map(|e| match e {
        Event::RouteDecision { route, .. } => Some(*route),
        _ => None,
    })
}

fn ping_service(w: &mut World, agent: NodeId) -> mew_core::participant::RequestId {
    w.act(agent, |p, now| {
        p.mcp_request(
            now,
            vec!["service".into()],
            json!({"method": "tools/call", "params": {"name": "echo", "arguments": {"n": 7}}}),
            RequestOptions::default(),
        )
    })
    .unwrap()
}

#[test]
fn grant_switches_proposals_to_direct_requests_and_revoke_switches_back() {
    let mut w = World::from_yaml(SPACE, 31, (1, 60));
    let c = cfg(&w, "service");
    let service = w.join_with("service", c);
    w.act(service, |p, _| {
        p.register_tool(ToolSpec {
            name: "echo".into(),
            description: None,
            input_schema: None,
        })
    })
    .unwrap();
    w.behave(service, tool_handler(|_, a| Ok(a.clone())));
    let c = cfg(&w, "agent");
    let agent = w.join_with("agent", c);
    let c = cfg(&w, "human");
    let human = w.join_with("human", c);
    w.run_until_quiet();

    // Before the grant: a proposal (nobody reviews it; withdraw it again).
    let before = ping_service(&mut w, agent);
    assert_eq!(last_route(&w, agent), Some(RequestRoute::Proposal));
    w.act(agent, |p, now| p.withdraw(now, &before, "superseded"))
        .unwrap();
    w.run_until_quiet();

    let grant_id = w
        .act(human, |p, now| {
            p.send(
                now,
                Draft::new(Kind::CapabilityGrant).to(["agent"]).payload(
                    json!({"recipient": "agent", "capabilities": [{"kind": "mcp/request"}]}),
                ),
            )
        })
        .unwrap();
    w.run_until_quiet();

    // The updated welcome arrived first, then the grant, which the agent acknowledged.
    let ev = w.events(agent);
    let changed = ev
        .iter()
        .rposition(|e| matches!(e, Event::CapabilitiesChanged { .. }))
        .unwrap();
    let granted = ev
        .iter()
        .position(|e| matches!(e, Event::Granted { grant_id: g, .. } if *g == grant_id))
        .unwrap();
    assert!(changed < granted);
    assert!(
        w.p(agent)
            .capabilities()
            .allows("mcp/request", Some(&json!({"method": "x"})))
    );
    let acks = w.node(human).received_kind("capability/grant-ack");
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0]["from"], "agent");
    assert_eq!(acks[0]["correlation_id"], json!([grant_id]));
    assert_eq!(
        w.gw.capabilities_of("agent").unwrap(),
        w.p(agent).capabilities().to_json()
    );

    // After the grant: a direct request, answered.
    let after = ping_service(&mut w, agent);
    assert_eq!(last_route(&w, agent), Some(RequestRoute::Request));
    assert!(w.run_until(Duration::from_secs(5), |w| {
        w.outcome(agent, &after).is_some()
    }));
    let r = w.outcome(agent, &after).unwrap().clone().unwrap();
    assert_eq!(r["content"][0]["text"], json!({"n": 7}).to_string());
    let direct: Vec<Value> = w
        .node(service)
        .received_kind("mcp/request")
        .into_iter()
        .filter(|e| e["from"] == "agent")
        .collect();
    assert_eq!(direct.len(), 1);

    // Revoking the grant by id sends the agent back to proposals.
    w.act(human, |p, now| {
        p.send(
            now,
            Draft::new(Kind::CapabilityRevoke)
                .to(["agent"])
                .payload(json!({"recipient": "agent", "grant_id": grant_id})),
        )
    })
    .unwrap();
    w.run_until_quiet();
    assert!(
        !w.p(agent)
            .capabilities()
            .allows("mcp/request", Some(&json!({"method": "x"})))
    );
    assert_eq!(
        w.gw.capabilities_of("agent").unwrap(),
        w.p(agent).capabilities().to_json()
    );
    let again = ping_service(&mut w, agent);
    assert_eq!(last_route(&w, agent), Some(RequestRoute::Proposal));
    assert!(w.p(agent).is_pending(&again));
}

#[test]
fn a_grant_beyond_the_granters_own_capabilities_changes_nothing() {
    let mut w = World::from_yaml(SPACE, 32, (1, 60));
    let c = cfg(&w, "agent");
    let agent = w.join_with("agent", c);
    let c = cfg(&w, "service");
    let service = w.join_with("service", c);
    let before = w.p(agent).capabilities().to_json();
    // The service may not grant at all; a raw grant written on its socket is refused.
    w.send_raw(
        service,
        json!({"protocol": "mew/v0.4", "id": "g-1", "from": "service", "to": ["agent"],
            "kind": "capability/grant",
            "payload": {"recipient": "agent", "capabilities": [{"kind": "*"}]}})
        .to_string(),
    );
    w.run_until_quiet();
    assert_eq!(w.p(agent).capabilities().to_json(), before);
    assert!(w.node(agent).received_kind("capability/grant").is_empty());
    assert!(
        w.events(agent)
            .iter()
            .all(|e| !matches!(e, Event::Granted { .. }))
    );
    let refused = w.events(service).iter().any(|e| {
        matches!(e, Event::GatewayError { payload } if payload["error"] == "capability_violation")
    });
    assert!(refused);
}
