//! A person at several screens: a participant marked `person: true` (or given
//! `connections: N`) holds several connections at once, each receiving what the participant
//! receives, and is present once; everyone else keeps the protocol's one connection.

use mew_core::gateway::Input;
use mew_core::gateway::{Gateway, Output, SpaceConfig};
use mew_tests::sim::{Sim, envelope};
use serde_json::{Value, json};

fn space(delivery: &str) -> String {
    format!(
        r#"
space: {{id: screens, name: Screens}}
participants:
  human: {{tokens: [human-token], person: true, connections: 3, capabilities: [{{kind: "*"}}]}}
  agent:
    tokens: [agent-token]
    capabilities: [{{kind: mcp/proposal}}, {{kind: chat}}, {{kind: mcp/response}}]
gateway: {{delivery: {delivery}}}
"#
    )
}

fn kinds(v: &[Value]) -> Vec<String> {
    v.iter()
        .map(|e| e["kind"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[test]
fn a_person_holds_several_screens_each_sees_everything_and_is_present_once() {
    let mut sim = Sim::from_yaml(&space("all"));
    let h1 = sim.join("human-token");
    let agent = sim.join("agent-token");
    let aw = sim.take(agent);
    assert_eq!(
        aw[0]["payload"]["participants"],
        json!([{"id": "human", "capabilities": [{"kind": "*"}], "person": true}]),
        "a person is marked so in welcomes"
    );
    sim.take(h1);

    let h2 = sim.join("human-token");
    assert_eq!(sim.closed(h1), None, "the first screen stays");
    let w2 = sim.take(h2);
    assert_eq!(kinds(&w2), ["system/welcome"]);
    assert_eq!(w2[0]["payload"]["you"]["person"], true);
    assert!(sim.take(h1).is_empty(), "a screen is not welcomed twice");
    assert!(sim.take(agent).is_empty(), "another screen is no presence");

    // A proposal and a chat addressed to the person reach both screens.
    let proposal = envelope(
        "p1",
        "agent",
        "mcp/proposal",
        None,
        json!({"method": "tools/call", "params": {"name": "write_file"}}),
    );
    sim.send_and_settle(agent, &proposal);
    let chat = envelope(
        "c1",
        "agent",
        "chat",
        Some(&["human"]),
        json!({"text": "hi"}),
    );
    sim.send_and_settle(agent, &chat);
    for h in [h1, h2] {
        let got = sim.take(h);
        assert_eq!(kinds(&got), ["mcp/proposal", "chat"], "{h}");
        assert_eq!(got[0]["id"], "p1");
        assert_eq!(got[1]["payload"]["text"], "hi");
    }
    sim.take(agent);
    // A decision on one screen is seen on the other (which closes its dialog).
    let mut reject = envelope(
        "r1",
        "human",
        "mcp/reject",
        Some(&["agent"]),
        json!({"reason": "no"}),
    );
    reject["correlation_id"] = json!(["p1"]);
    sim.send_and_settle(h1, &reject);
    let on_h2 = sim.take(h2);
    assert_eq!(kinds(&on_h2), ["mcp/reject"]);
    assert_eq!(on_h2[0]["correlation_id"], json!(["p1"]));
    assert_eq!(kinds(&sim.take(agent)), ["mcp/reject"]);

    // Beyond the bound (3), a new screen replaces the oldest, as a single connection is.
    let h3 = sim.join("human-token");
    let h4 = sim.join("human-token");
    let (code, reason) = sim.closed(h1).expect("the oldest screen is replaced");
    assert_eq!(code, 1000);
    assert!(reason.contains("replaced"), "{reason}");
    assert_eq!(sim.closed(h2), None);
    assert!(
        sim.take(agent).is_empty(),
        "replacing a screen is no presence either"
    );

    // Leaving: no presence until the last screen goes.
    for h in [h2, h3] {
        sim.gw
            .handle_input(sim.now(), Input::Disconnected { conn: h });
        sim.run_until_quiet();
        assert!(sim.take(agent).is_empty());
    }
    assert!(
        sim.gw
            .participants()
            .iter()
            .any(|p| p.id == "human" && p.online)
    );
    sim.gw
        .handle_input(sim.now(), Input::Disconnected { conn: h4 });
    sim.run_until_quiet();
    let left = sim.take(agent);
    assert_eq!(
        left.iter()
            .map(|e| e["payload"].clone())
            .collect::<Vec<_>>(),
        [json!({"event": "leave", "participant": {"id": "human"}})]
    );
    assert!(
        !sim.gw
            .participants()
            .iter()
            .any(|p| p.id == "human" && p.online)
    );
}

#[test]
fn under_addressed_delivery_a_screen_sees_what_another_sent() {
    let mut sim = Sim::from_yaml(&space("addressed"));
    let h1 = sim.join("human-token");
    let h2 = sim.join("human-token");
    let agent = sim.join("agent-token");
    for c in [h1, h2, agent] {
        sim.take(c);
    }
    // The fulfilment of a proposal, addressed to the agent, from the first screen.
    let proposal = envelope(
        "p1",
        "agent",
        "mcp/proposal",
        None,
        json!({"method": "tools/call"}),
    );
    sim.send_and_settle(agent, &proposal);
    let mut fulfil = envelope(
        "f1",
        "human",
        "mcp/request",
        Some(&["agent"]),
        json!({"method": "tools/call"}),
    );
    fulfil["correlation_id"] = json!(["p1"]);
    sim.send_and_settle(h1, &fulfil);
    assert_eq!(
        kinds(&sim.take(h1)),
        ["mcp/proposal"],
        "no echo to the sender"
    );
    assert_eq!(kinds(&sim.take(h2)), ["mcp/proposal", "mcp/request"]);
    assert_eq!(kinds(&sim.take(agent)), ["mcp/request"]);
    // A broadcast from the second screen: the first sees it, the second does not.
    sim.send_and_settle(
        h2,
        &envelope("c1", "human", "chat", None, json!({"text": "x"})),
    );
    assert_eq!(kinds(&sim.take(h1)), ["chat"]);
    assert!(sim.take(h2).is_empty());
    assert_eq!(kinds(&sim.take(agent)), ["chat"]);
    // Addressed to the person: both screens.
    sim.send_and_settle(
        agent,
        &envelope(
            "c2",
            "agent",
            "chat",
            Some(&["human"]),
            json!({"text": "y"}),
        ),
    );
    assert_eq!(kinds(&sim.take(h1)), ["chat"]);
    assert_eq!(kinds(&sim.take(h2)), ["chat"]);
}

#[test]
fn only_the_marked_participant_has_several_connections() {
    let mut sim = Sim::from_yaml(&space("all"));
    let a1 = sim.join("agent-token");
    let a2 = sim.join("agent-token");
    assert_eq!(
        sim.closed(a1).map(|c| c.0),
        Some(1000),
        "the protocol's rule"
    );
    assert_eq!(sim.closed(a2), None);
    // The welcome shows no mark for a participant that is not a person.
    assert!(
        sim.received(a2)[0]["payload"]["you"]
            .get("person")
            .is_none()
    );
}

#[test]
fn connections_is_checked_and_person_defaults_to_eight() {
    let bad = space("all").replace("connections: 3", "connections: 17");
    let e = SpaceConfig::from_yaml(&bad).unwrap_err().to_string();
    assert!(e.contains("participants.human.connections"), "{e}");
    assert!(e.contains("at most 16"), "{e}");
    let zero = space("all").replace("connections: 3", "connections: 0");
    assert!(SpaceConfig::from_yaml(&zero).is_err());
    let default = SpaceConfig::from_yaml(&space("all").replace("connections: 3, ", "")).unwrap();
    assert_eq!(default.participant("human").unwrap().max_connections(), 8);
    assert_eq!(default.participant("agent").unwrap().max_connections(), 1);
}

#[test]
fn every_screen_survives_a_snapshot() {
    let yaml = space("all");
    let mut sim = Sim::from_yaml(&yaml);
    let h1 = sim.join("human-token");
    let h2 = sim.join("human-token");
    let agent = sim.join("agent-token");
    for c in [h1, h2, agent] {
        sim.take(c);
    }
    let snap = sim.gw.snapshot().unwrap();
    let mut g = Gateway::restore(
        SpaceConfig::from_yaml(&yaml).unwrap(),
        &snap,
        Box::new(mew_core::ids::IdGen::new(3)),
        None,
    )
    .unwrap();
    let chat = envelope("c1", "agent", "chat", None, json!({"text": "after"}));
    g.handle_input(
        sim.now(),
        Input::Frame {
            conn: agent,
            frame: chat.to_string().into(),
        },
    );
    let mut to = Vec::new();
    while let Some(o) = g.poll_output() {
        if let Output::Transmit { conn, .. } = o {
            to.push(conn);
        }
    }
    to.sort();
    let mut want = vec![h1, h2, agent];
    want.sort();
    assert_eq!(to, want);
    // Two screens in the snapshot; one leaving is still no presence.
    g.handle_input(sim.now(), Input::Disconnected { conn: h1 });
    let mut outs = 0;
    while g.poll_output().is_some() {
        outs += 1;
    }
    assert_eq!(outs, 0);
}
