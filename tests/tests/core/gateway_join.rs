//! Joining: header, `type: join`, `system/join`, refusals, replacement, welcome and presence.

use mew_tests::fixtures::{SPACE, space_with};
use mew_tests::sim::{Sim, envelope};
use serde_json::json;
use std::time::Duration;

#[test]
fn header_join_gets_welcome_and_others_see_presence() {
    let mut sim = Sim::from_yaml(SPACE);
    let human = sim.join("human-token");
    let w = sim.take(human);
    assert_eq!(w.len(), 1, "{w:?}");
    let welcome = &w[0];
    assert_eq!(welcome["kind"], "system/welcome");
    assert_eq!(welcome["from"], "system:gateway");
    assert_eq!(welcome["protocol"], "mew/v0.4");
    assert_eq!(welcome["to"], json!(["human"]));
    assert!(welcome["id"].is_string() && welcome["ts"].is_string());
    assert_eq!(
        welcome["payload"]["you"],
        json!({"id": "human", "capabilities": [{"kind": "*"}]})
    );
    // The virtual participant is a member already.
    assert_eq!(
        welcome["payload"]["participants"],
        json!([{"id": "log", "capabilities": [{"kind": "chat"}]}])
    );
    assert_eq!(welcome["payload"]["active_streams"], json!([]));

    let agent = sim.join("agent-token");
    let seen = sim.take(human);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["kind"], "system/presence");
    assert!(seen[0].get("to").is_none(), "presence is a broadcast");
    assert_eq!(seen[0]["payload"]["event"], "join");
    assert_eq!(seen[0]["payload"]["participant"]["id"], "agent");
    assert_eq!(
        seen[0]["payload"]["participant"]["capabilities"][0],
        json!({"kind": "mcp/proposal"})
    );
    let aw = sim.take(agent);
    assert_eq!(
        aw.len(),
        1,
        "the joiner gets its welcome, not its own presence"
    );
    let others: Vec<_> = aw[0]["payload"]["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(others, vec!["human", "log"]);

    sim.gw.handle_disconnected(sim.now(), agent);
    sim.pump();
    let left = sim.take(human);
    assert_eq!(left.len(), 1);
    assert_eq!(
        left[0]["payload"],
        json!({"event": "leave", "participant": {"id": "agent"}})
    );
}

#[test]
fn type_join_message_joins() {
    let mut sim = Sim::from_yaml(SPACE);
    let c = sim.connect(None);
    assert!(sim.received(c).is_empty(), "nothing before the join");
    sim.send_and_settle(
        c,
        &json!({"type": "join", "space": "test-space", "token": "agent-token", "participantId": "agent", "capabilities": [{"kind": "*"}]}),
    );
    let w = sim.take(c);
    assert_eq!(w[0]["kind"], "system/welcome");
    // Requested capabilities are ignored: the gateway decides.
    assert_eq!(
        w[0]["payload"]["you"]["capabilities"][0],
        json!({"kind": "mcp/proposal"})
    );
}

#[test]
fn system_join_envelope_joins() {
    let mut sim = Sim::from_yaml(SPACE);
    let c = sim.connect(None);
    sim.send_and_settle(
        c,
        &json!({"protocol": "mew/v0.4", "id": "join-1", "kind": "system/join", "payload": {"space": "test-space", "participant": "human", "token": "human-token"}}),
    );
    assert_eq!(sim.received(c)[0]["payload"]["you"]["id"], "human");
}

#[test]
fn unknown_token_is_refused_and_closed() {
    let mut sim = Sim::from_yaml(SPACE);
    let c = sim.connect(Some("nope"));
    let r = sim.received(c);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["kind"], "system/error");
    assert_eq!(r[0]["payload"]["error"], "unknown_token");
    assert!(r[0]["payload"]["message"].is_string());
    assert_eq!(sim.closed(c).unwrap().0, 1008);

    let c2 = sim.connect(None);
    sim.send_and_settle(
        c2,
        &json!({"type": "join", "token": "bad", "participantId": "human"}),
    );
    assert_eq!(sim.received(c2)[0]["payload"]["error"], "unknown_token");
    assert!(sim.closed(c2).is_some());
}

#[test]
fn id_not_matching_token_is_refused() {
    let mut sim = Sim::from_yaml(SPACE);
    let h = sim.join("human-token");
    sim.take(h);
    let c = sim.connect(None);
    sim.send_and_settle(
        c,
        &json!({"type": "join", "token": "agent-token", "participantId": "human"}),
    );
    let r = sim.received(c);
    assert_eq!(r[0]["payload"]["error"], "identity_mismatch");
    assert!(sim.closed(c).is_some());
    assert!(
        sim.received(h).is_empty(),
        "a refused join is not announced"
    );
}

#[test]
fn join_timeout_closes() {
    let mut sim = Sim::from_yaml(SPACE);
    let c = sim.connect(None);
    sim.advance(Duration::from_millis(9_999));
    assert!(sim.closed(c).is_none());
    sim.advance(Duration::from_millis(1));
    assert_eq!(sim.received(c)[0]["payload"]["error"], "join_timeout");
    assert_eq!(sim.closed(c).unwrap().0, 1008);
}

#[test]
fn non_join_first_frame_is_refused() {
    let mut sim = Sim::from_yaml(SPACE);
    let c = sim.connect(None);
    sim.send_and_settle(c, &json!({"kind": "chat", "payload": {"text": "hi"}}));
    assert_eq!(sim.received(c)[0]["payload"]["error"], "join_required");
    assert!(sim.closed(c).is_some());
}

#[test]
fn second_connection_replaces_first() {
    let mut sim = Sim::from_yaml(SPACE);
    let h = sim.join("human-token");
    let a1 = sim.join("agent-token");
    sim.take(h);
    let a2 = sim.join("agent-token");
    let (code, reason) = sim.closed(a1).unwrap();
    assert_eq!(code, 1000);
    assert!(reason.contains("replaced"), "{reason}");
    assert_eq!(sim.received(a2)[0]["kind"], "system/welcome");
    assert!(
        sim.take(h).is_empty(),
        "a replacement is neither a leave nor a join"
    );
    let before = sim.endpoint(a1).inbox.len();
    // Traffic now reaches the new connection only.
    sim.send_and_settle(
        h,
        &envelope("c1", "human", "chat", None, json!({"text": "x"})),
    );
    assert_eq!(sim.received_kind(a2, "chat").len(), 1);
    assert_eq!(sim.endpoint(a1).inbox.len(), before);
}

#[test]
fn join_after_header_is_a_no_op_but_other_identity_is_refused() {
    let mut sim = Sim::from_yaml(SPACE);
    let h = sim.join("human-token");
    let a = sim.join("agent-token");
    sim.take(h);
    sim.take(a);
    sim.send_and_settle(
        a,
        &json!({"type": "join", "token": "agent-token", "participantId": "agent"}),
    );
    assert!(
        sim.take(a).is_empty(),
        "same participant: no error, no second welcome"
    );
    assert!(sim.take(h).is_empty(), "no second presence");
    sim.send_and_settle(
        a,
        &json!({"protocol": "mew/v0.4", "id": "join-2", "kind": "system/join", "payload": {"participant": "agent", "token": "agent-token"}}),
    );
    assert!(sim.take(a).is_empty(), "the envelope form is a no-op too");
    assert!(sim.take(h).is_empty());
    sim.send_and_settle(
        a,
        &json!({"type": "join", "token": "human-token", "participantId": "human"}),
    );
    let r = sim.take(a);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["payload"]["error"], "identity_mismatch");
    assert!(
        sim.closed(a).is_none(),
        "the connection keeps its identity and stays"
    );
}

#[test]
fn anonymous_joins_when_enabled() {
    let mut off = Sim::from_yaml(SPACE);
    let c = off.connect(None);
    off.send_and_settle(c, &json!({"type": "join", "participantId": "guest"}));
    assert_eq!(
        off.received(c)[0]["payload"]["error"],
        "authentication_required"
    );

    let mut sim = Sim::from_yaml(&space_with("  anonymous_joins: true"));
    let g = sim.connect(None);
    sim.send_and_settle(
        g,
        &json!({"type": "join", "participantId": "guest", "token": "whatever"}),
    );
    let w = sim.take(g);
    assert_eq!(
        w[0]["payload"]["you"],
        json!({"id": "guest", "capabilities": [{"kind": "chat"}]})
    );
    let taken = sim.connect(None);
    sim.send_and_settle(taken, &json!({"type": "join", "participantId": "human"}));
    assert_eq!(
        sim.received(taken)[0]["payload"]["error"],
        "participant_id_taken"
    );
    let twin = sim.connect(None);
    sim.send_and_settle(twin, &json!({"type": "join", "participantId": "guest"}));
    assert_eq!(
        sim.received(twin)[0]["payload"]["error"],
        "participant_id_taken"
    );
    // After leaving, the anonymous id is free again.
    sim.gw.handle_disconnected(sim.now(), g);
    sim.pump();
    let again = sim.connect(None);
    sim.send_and_settle(again, &json!({"type": "join", "participantId": "guest"}));
    assert_eq!(sim.received(again)[0]["kind"], "system/welcome");
}
