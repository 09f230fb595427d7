//! A link dropped in the middle of a pending request: the request fails with the
//! documented typed error within its deadline, the participant rejoins by itself and works
//! again; late answers to the old request change nothing.

use mew_core::participant::{
    ClientState, Event, ParticipantConfig, RequestError, RequestId, RequestOptions, ToolSpec,
};
use mew_tests::sim::participants::behaviour::slow_tool_handler;
use mew_tests::sim::participants::{NodeId, SPACE, World};
use serde_json::json;
use std::time::Duration;

fn cfg(w: &World, id: &str) -> ParticipantConfig {
    let mut c = w.config_for(id, &format!("{id}-token"));
    c.discovery.auto = false;
    c
}

fn world(seed: u64, work: Duration) -> (World, NodeId, NodeId) {
    let mut w = World::from_yaml(SPACE, seed, (1, 80));
    let c = cfg(&w, "service");
    let service = w.join_with("service", c);
    w.act(service, |p, _| {
        p.register_tool(ToolSpec {
            name: "work".into(),
            description: None,
            input_schema: None,
        })
    })
    .unwrap();
    w.behave(service, slow_tool_handler(work, |_, _| Ok(json!("done"))));
    let mut c = cfg(&w, "caller");
    c.request_timeout = Duration::from_secs(10);
    let caller = w.join_with("caller", c);
    w.run_until_quiet();
    (w, service, caller)
}

fn call(w: &mut World, caller: NodeId) -> RequestId {
    w.act(caller, |p, now| {
        p.mcp_request(
            now,
            vec!["service".into()],
            json!({"method": "tools/call", "params": {"name": "work"}}),
            RequestOptions::default(),
        )
    })
    .unwrap()
}

fn completions(w: &World, n: NodeId, id: &RequestId) -> usize {
    w.events(n)
        .iter()
        .filter(|e| matches!(e, Event::RequestCompleted { id: i, .. } if i == id))
        .count()
}

#[test]
fn requester_link_dropped_mid_request_fails_typed_then_rejoins_and_works() {
    let (mut w, service, caller) = world(41, Duration::from_secs(4));
    let id = call(&mut w, caller);
    let deadline = w.p(caller).pending_requests().next().unwrap().1;
    w.run_for(Duration::from_secs(1));
    assert!(w.p(caller).is_pending(&id));
    assert_eq!(
        w.p(service).pending_calls().count(),
        1,
        "the service is working on it"
    );

    w.drop_link(caller);
    assert_eq!(
        w.outcome(caller, &id),
        Some(&Err(RequestError::Disconnected))
    );
    assert!(w.now() < deadline);
    assert_eq!(w.p(caller).pending_requests().count(), 0);

    // The client reconnects by its policy (about a second later) and is welcomed again.
    assert!(w.run_until(Duration::from_secs(5), |w| w.p(caller).state()
        == ClientState::Ready));
    assert!(w.events(caller).iter().any(|e| matches!(
        e,
        Event::Ready {
            reconnected: true,
            ..
        }
    )));
    w.run_until_quiet();
    let presence: Vec<String> = w
        .node(service)
        .received_kind("system/presence")
        .iter()
        .filter(|p| p["payload"]["participant"]["id"] == "caller")
        .map(|p| p["payload"]["event"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(presence[presence.len() - 2..], ["leave", "join"]);

    // The service's late answer to the old request reaches the new connection and is
    // ignored: the request completed exactly once.
    w.run_for(Duration::from_secs(5));
    assert!(w.node(caller).received_kind("mcp/response").len() == 1);
    assert_eq!(completions(&w, caller, &id), 1);

    // And it works again.
    let again = call(&mut w, caller);
    assert!(w.run_until(Duration::from_secs(8), |w| {
        w.outcome(caller, &again).is_some()
    }));
    let r = w.outcome(caller, &again).unwrap().clone().unwrap();
    assert_eq!(r["content"][0]["text"], "done");
}

#[test]
fn target_link_dropped_mid_request_times_out_at_the_deadline() {
    let (mut w, service, caller) = world(42, Duration::from_secs(20));
    let id = call(&mut w, caller);
    let deadline = w.p(caller).pending_requests().next().unwrap().1;
    w.run_for(Duration::from_secs(1));
    w.drop_link(service);
    assert!(w.run_until(Duration::from_secs(30), |w| {
        w.outcome(caller, &id).is_some()
    }));
    assert_eq!(w.outcome(caller, &id), Some(&Err(RequestError::Timeout)));
    assert_eq!(w.now(), deadline);
    // The service is back and answers new work (quickly this time).
    assert_eq!(w.p(service).state(), ClientState::Ready);
    w.run_for(Duration::from_secs(15));
    assert_eq!(completions(&w, caller, &id), 1);
}

#[test]
fn an_unreachable_gateway_is_retried_with_backoff_until_it_returns() {
    let (mut w, _service, caller) = world(43, Duration::from_secs(1));
    w.set_reachable(caller, false);
    w.drop_link(caller);
    w.run_for(Duration::from_secs(10));
    let attempts: Vec<(u32, mew_core::Time)> = w
        .events(caller)
        .iter()
        .filter_map(|e| match e {
            Event::Reconnecting { attempt, at } => Some((*attempt, *at)),
            _ => None,
        })
        .collect();
    let numbers: Vec<u32> = attempts.iter().map(|a| a.0).collect();
    assert_eq!(numbers, [1, 2, 3, 4]);
    // Each refused attempt waits twice as long as the one before (plus up to 20 % jitter
    // and the connect latency).
    for (k, pair) in attempts.windows(2).enumerate() {
        let gap = pair[1].1.saturating_since(pair[0].1);
        let base = Duration::from_secs(2 << k);
        assert!(
            gap >= base && gap <= base * 12 / 10 + Duration::from_millis(80),
            "{gap:?}"
        );
    }
    w.set_reachable(caller, true);
    assert!(w.run_until(Duration::from_secs(30), |w| w.p(caller).state()
        == ClientState::Ready));
    let id = call(&mut w, caller);
    assert!(w.run_until(Duration::from_secs(5), |w| w.outcome(caller, &id).is_some()));
    assert!(w.outcome(caller, &id).unwrap().is_ok());
}

#[test]
fn a_pending_proposal_survives_a_reconnect_and_is_fulfilled_after_it() {
    let (mut w, _service, _caller) = world(44, Duration::from_millis(100));
    let c = cfg(&w, "agent");
    let agent = w.join_with("agent", c);
    let c = cfg(&w, "human");
    let human = w.join_with("human", c);
    w.run_until_quiet();
    let id = w
        .act(agent, |p, now| {
            p.mcp_request(
                now,
                vec!["service".into()],
                json!({"method": "tools/call", "params": {"name": "work"}}),
                RequestOptions::default(),
            )
        })
        .unwrap();
    w.run_until_quiet();
    let deadline = w.p(agent).pending_requests().next().unwrap().1;
    w.drop_link(agent);
    // Proposals stay pending across a reconnect (their fulfilment happens elsewhere).
    assert!(w.p(agent).is_pending(&id));
    assert_eq!(w.p(agent).pending_requests().next().unwrap().1, deadline);
    // While disconnected, a chat waits in the not-ready queue.
    w.act(agent, |p, now| p.chat(now, "queued while away", vec![]))
        .unwrap();
    assert!(w.run_until(Duration::from_secs(5), |w| w.p(agent).state()
        == ClientState::Ready));
    w.run_until_quiet();
    let chats = w.node(human).received_kind("chat");
    assert_eq!(chats.len(), 1, "the queued chat went out once ready");
    assert_eq!(chats[0]["payload"]["text"], "queued while away");
    // Now the reviewer fulfils it; the result reaches the agent's new connection.
    w.act(human, |p, now| p.fulfil(now, id.as_str())).unwrap();
    assert!(w.run_until(Duration::from_secs(5), |w| w.outcome(agent, &id).is_some()));
    let r = w.outcome(agent, &id).unwrap().clone().unwrap();
    assert_eq!(r["content"][0]["text"], "done");
}
