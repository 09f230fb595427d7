//! Joining: header, `type: join`, `system/join`, refusals, replacement, welcome and presence.

use mew_core::gateway::Input;
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

    sim.gw
        .handle_input(sim.now(), Input::Disconnected { conn: agent });
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
    sim.gw
        .handle_input(sim.now(), Input::Disconnected { conn: g });
    sim.pump();
    let again = sim.connect(None);
    sim.send_and_settle(again, &json!({"type": "join", "participantId": "guest"}));
    assert_eq!(sim.received(again)[0]["kind"], "system/welcome");
}

/// Ids of a presence batch's changes, as `join:id` / `leave:id`.
fn batch_changes(p: &serde_json::Value) -> Vec<String> {
    p["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{}:{}",
                c["event"].as_str().unwrap(),
                c["participant"]["id"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn a_crowd_gets_bounded_welcomes_and_presence_in_batches() {
    // `log` (virtual) is online from the start; beyond 3 online the space is a crowd.
    let mut sim = Sim::from_yaml(&space_with(
        "  anonymous_joins: true\n  crowd: {size: 3, batch_ms: 1000, batch_max: 2}",
    ));
    let human = sim.join("human-token");
    sim.take(human);
    let anon = |sim: &mut Sim, id: &str| {
        let c = sim.connect(None);
        sim.send_and_settle(c, &json!({"type": "join", "participantId": id}));
        c
    };
    // Up to the crowd's size, as ever: one announcement per join, welcomes list everyone.
    let a1 = anon(&mut sim, "a1");
    let seen = sim.take(human);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["payload"]["event"], "join");
    let w = sim.take(a1);
    assert_eq!(w[0]["payload"]["participants"].as_array().unwrap().len(), 2);
    assert!(w[0]["payload"].get("participants_omitted").is_none());

    // Beyond it: nothing announced at once; the welcome lists at most 3 others.
    let kept = sim.gw.health().history_len;
    let a2 = anon(&mut sim, "a2");
    let a3 = anon(&mut sim, "a3");
    let a4 = anon(&mut sim, "a4");
    assert!(
        sim.take(human).is_empty(),
        "joins of a crowd wait for their batch"
    );
    let w3 = sim.take(a3);
    assert_eq!(w3[0]["kind"], "system/welcome");
    assert_eq!(
        w3[0]["payload"]["participants"].as_array().unwrap().len(),
        3
    );
    assert_eq!(w3[0]["payload"]["participants_omitted"], 1);
    assert_eq!(w3[0]["payload"]["you"]["id"], "a3");
    let w4 = sim.take(a4);
    assert_eq!(w4[0]["payload"]["participants_omitted"], 2);
    assert_eq!(
        w4[0]["payload"]["participants"][0]["id"], "human",
        "configured participants are listed first"
    );
    // Welcomes are not kept for polling (and nothing was announced yet).
    let history = sim.gw.health().history_len;
    assert_eq!(history, kept);

    // One batch a second, to everyone: the first two changes listed, the third counted.
    sim.advance(Duration::from_millis(1000));
    let batch = sim.take(human);
    assert_eq!(batch.len(), 1, "{batch:?}");
    assert_eq!(batch[0]["kind"], "system/presence");
    assert!(batch[0].get("to").is_none());
    let p = &batch[0]["payload"];
    assert_eq!(p["event"], "batch");
    assert_eq!(batch_changes(p), ["join:a2", "join:a3"]);
    assert_eq!(
        p["changes"][0],
        json!({"event": "join", "participant": {"id": "a2", "capabilities": [{"kind": "chat"}]}}),
        "each change is what a single announcement would carry"
    );
    assert_eq!(p["omitted"], 1);
    assert_eq!(p["online"], 6);
    let a2_got = sim.take(a2);
    assert_eq!(a2_got.len(), 2, "its welcome, then the batch: {a2_got:?}");
    assert_eq!(
        a2_got[1]["payload"]["event"], "batch",
        "the joiners get the batch too"
    );
    assert_eq!(sim.gw.health().history_len, history + 1);

    // Leaves are gathered the same way until the space is no longer a crowd: then what is
    // gathered goes out first, and the next leave on its own after it.
    for c in [a4, a1, a2, a3] {
        sim.gw
            .handle_input(sim.now(), Input::Disconnected { conn: c });
        sim.pump();
    }
    let seen = sim.take(human);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0]["payload"]["event"], "batch");
    assert_eq!(batch_changes(&seen[0]["payload"]), ["leave:a4", "leave:a1"]);
    assert_eq!(seen[0]["payload"]["omitted"], 1);
    assert_eq!(seen[0]["payload"]["online"], 2);
    assert_eq!(
        seen[1]["payload"],
        json!({"event": "leave", "participant": {"id": "a3"}})
    );
    sim.advance(Duration::from_secs(2));
    assert!(sim.take(human).is_empty(), "nothing left to announce");
}

#[test]
fn a_gathered_batch_survives_a_snapshot() {
    let yaml =
        space_with("  anonymous_joins: true\n  crowd: {size: 2, batch_ms: 1000, batch_max: 10}");
    let mut sim = Sim::from_yaml(&yaml);
    let human = sim.join("human-token");
    for id in ["b1", "b2"] {
        let c = sim.connect(None);
        sim.send_and_settle(c, &json!({"type": "join", "participantId": id}));
    }
    sim.take(human);
    let snap = sim.gw.snapshot().unwrap();
    let config = mew_core::gateway::SpaceConfig::from_yaml(&yaml).unwrap();
    let mut restored = mew_core::gateway::Gateway::restore(
        config,
        &snap,
        Box::new(mew_core::ids::IdGen::new(3)),
        None,
    )
    .unwrap();
    let due = restored.poll_timeout().unwrap();
    assert!(due <= sim.now() + Duration::from_millis(1000));
    restored.handle_input(sim.now() + Duration::from_millis(1000), Input::Timeout);
    let mut batches = Vec::new();
    while let Some(o) = restored.poll_output() {
        if let mew_core::gateway::Output::Transmit { conn, frame } = o
            && conn == human
        {
            batches.push(serde_json::from_slice::<serde_json::Value>(&frame).unwrap());
        }
    }
    assert_eq!(batches.len(), 1, "{batches:?}");
    assert_eq!(
        batch_changes(&batches[0]["payload"]),
        ["join:b1", "join:b2"]
    );
}
