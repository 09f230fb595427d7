//! Space operations the gateway owns: grants, revocations, invitations, kicks, pause,
//! resume and shutdown.

use mew_core::gateway::ConnId;
use mew_tests::fixtures::SPACE;
use mew_tests::sim::{Sim, envelope};
use serde_json::{Value, json};
use std::time::Duration;

struct World {
    sim: Sim,
    h: ConnId,
    a: ConnId,
    s: ConnId,
}

fn world() -> World {
    let mut sim = Sim::from_yaml(SPACE);
    let h = sim.join("human-token");
    let a = sim.join("agent-token");
    let s = sim.join("service-token");
    for c in [h, a, s] {
        sim.take(c);
    }
    World { sim, h, a, s }
}

fn kinds(v: &[Value]) -> Vec<String> {
    v.iter()
        .map(|e| e["kind"].as_str().unwrap_or("#").to_owned())
        .collect()
}

fn request(id: &str) -> Value {
    envelope(
        id,
        "agent",
        "mcp/request",
        Some(&["service"]),
        json!({"method": "tools/call", "params": {"name": "read_file"}}),
    )
}

fn grant(id: &str, from: &str, caps: Value) -> Value {
    envelope(
        id,
        from,
        "capability/grant",
        Some(&["agent"]),
        json!({"recipient": "agent", "capabilities": caps, "reason": "trust"}),
    )
}

fn my_caps(sim: &Sim, c: ConnId) -> Value {
    let w = sim.received_kind(c, "system/welcome");
    w.last().expect("a welcome")["payload"]["you"]["capabilities"].clone()
}

#[test]
fn grant_then_direct_request() {
    let World { mut sim, h, a, s } = world();
    sim.send_and_settle(a, &request("before"));
    assert_eq!(sim.take(a)[0]["payload"]["error"], "capability_violation");

    sim.send_and_settle(
        h,
        &grant("grant-1", "human", json!([{"kind": "mcp/request"}])),
    );
    let got = sim.take(a);
    assert_eq!(
        kinds(&got),
        vec!["system/welcome", "capability/grant"],
        "welcome first, then the grant"
    );
    assert_eq!(got[0]["to"], json!(["agent"]));
    let caps = got[0]["payload"]["you"]["capabilities"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(caps.last().unwrap(), &json!({"kind": "mcp/request"}));
    assert_eq!(caps.len(), 7);
    assert_eq!(
        kinds(&sim.take(s)),
        vec!["capability/grant"],
        "others see the grant, not the welcome"
    );
    assert_eq!(
        sim.gw.grant_chain(),
        vec![("human".to_owned(), "agent".to_owned(), "grant-1".to_owned())]
    );

    // The gateway never forges the ack; the agent's own ack passes through.
    assert!(
        sim.take(h)
            .iter()
            .all(|e| e["kind"] != "capability/grant-ack")
    );
    sim.send_and_settle(
        a,
        &json!({"protocol": "mew/v0.4", "id": "ack-1", "from": "agent", "kind": "capability/grant-ack", "correlation_id": ["grant-1"], "payload": {"status": "accepted"}}),
    );
    assert_eq!(kinds(&sim.take(h)), vec!["capability/grant-ack"]);

    sim.send_and_settle(a, &request("after"));
    let seen = sim.take(s);
    assert_eq!(kinds(&seen), vec!["capability/grant-ack", "mcp/request"]);
    assert_eq!(seen[1]["id"], "after");
}

#[test]
fn grant_beyond_own_capabilities_is_refused() {
    let World { mut sim, h, a, s } = world();
    sim.send_and_settle(
        s,
        &grant("g-x", "service", json!([{"kind": "mcp/request"}])),
    );
    let e = sim.take(s);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0]["payload"]["error"], "grant_exceeds_own_capabilities");
    assert_eq!(e[0]["correlation_id"], json!(["g-x"]));
    assert!(sim.take(a).is_empty() && sim.take(h).is_empty());
    assert!(sim.gw.grant_chain().is_empty());
    // What the service holds itself it may pass on.
    sim.send_and_settle(
        s,
        &grant("g-ok", "service", json!([{"kind": "mcp/response"}])),
    );
    assert_eq!(
        kinds(&sim.take(a)),
        vec!["system/welcome", "capability/grant"]
    );
}

#[test]
fn grant_without_permission_is_a_capability_violation() {
    let World { mut sim, h, a, .. } = world();
    sim.send_and_settle(
        a,
        &envelope(
            "g-self",
            "agent",
            "capability/grant",
            None,
            json!({"recipient": "agent", "capabilities": [{"kind": "*"}]}),
        ),
    );
    let e = sim.take(a);
    assert_eq!(e[0]["payload"]["error"], "capability_violation");
    assert_eq!(e[0]["payload"]["attempted_kind"], "capability/grant");
    assert!(sim.take(h).is_empty());
    // Unknown recipients and bad capabilities are refused too.
    sim.send_and_settle(
        h,
        &envelope(
            "g-ghost",
            "human",
            "capability/grant",
            None,
            json!({"recipient": "ghost", "capabilities": [{"kind": "chat"}]}),
        ),
    );
    assert_eq!(sim.take(h)[0]["payload"]["error"], "unknown_participant");
    sim.send_and_settle(
        h,
        &envelope(
            "g-bad",
            "human",
            "capability/grant",
            None,
            json!({"recipient": "agent", "capabilities": [{"nokind": 1}]}),
        ),
    );
    assert_eq!(sim.take(h)[0]["payload"]["error"], "invalid_capability");
}

#[test]
fn revoke_by_grant_id() {
    let World { mut sim, h, a, .. } = world();
    sim.send_and_settle(
        h,
        &grant("grant-1", "human", json!([{"kind": "mcp/request"}])),
    );
    sim.take(a);
    sim.send_and_settle(
        h,
        &envelope(
            "rv-1",
            "human",
            "capability/revoke",
            Some(&["agent"]),
            json!({"recipient": "agent", "grant_id": "grant-1"}),
        ),
    );
    let got = sim.take(a);
    assert_eq!(kinds(&got), vec!["system/welcome", "capability/revoke"]);
    assert_eq!(
        got[0]["payload"]["you"]["capabilities"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    sim.send_and_settle(a, &request("after-revoke"));
    assert_eq!(sim.take(a)[0]["payload"]["error"], "capability_violation");
    sim.send_and_settle(
        h,
        &envelope(
            "rv-2",
            "human",
            "capability/revoke",
            None,
            json!({"recipient": "agent", "grant_id": "grant-1"}),
        ),
    );
    assert_eq!(
        sim.take(h).last().unwrap()["payload"]["error"],
        "unknown_grant"
    );
}

#[test]
fn revoke_by_pattern_removes_runtime_grants_only() {
    let World { mut sim, h, a, .. } = world();
    sim.send_and_settle(
        h,
        &grant(
            "g1",
            "human",
            json!([{"kind": "mcp/request"}, {"kind": "mcp/response"}]),
        ),
    );
    sim.send_and_settle(h, &grant("g2", "human", json!([{"kind": "mcp/request"}])));
    sim.take(a);
    sim.send_and_settle(
        h,
        &envelope("rv", "human", "capability/revoke", None, json!({"recipient": "agent", "capabilities": [{"kind": "mcp/request"}, {"kind": "chat"}]})),
    );
    let caps = my_caps(&sim, a);
    let kinds_held: Vec<_> = caps
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(!kinds_held.contains(&"mcp/request".to_owned()));
    assert!(kinds_held.contains(&"mcp/response".to_owned()));
    assert!(
        kinds_held.contains(&"chat".to_owned()),
        "static capabilities stay: {kinds_held:?}"
    );
    assert_eq!(
        sim.gw.grant_chain().len(),
        1,
        "g2 emptied and gone, g1 keeps mcp/response"
    );
    sim.send_and_settle(
        a,
        &envelope("c", "agent", "chat", None, json!({"text": "still here"})),
    );
    assert_eq!(sim.received_kind(h, "chat").len(), 1);
}

#[test]
fn invite_then_join_with_the_new_token() {
    let World { mut sim, h, a, s } = world();
    sim.send_and_settle(
        h,
        &envelope("inv-1", "human", "space/invite", None, json!({"participant_id": "newbie", "initial_capabilities": [{"kind": "chat"}], "reason": "help"})),
    );
    // [i7k]: the inviter alone gets the acknowledgement with the token; the invite itself
    // is not forwarded.
    let got = sim.take(h);
    assert_eq!(kinds(&got), vec!["space/invite-ack"]);
    let ack = &got[0];
    let tok = ack["payload"]["token"].as_str().unwrap().to_owned();
    assert_eq!(ack["from"], "system:gateway");
    assert_eq!(ack["to"], json!(["human"]));
    assert_eq!(ack["correlation_id"], json!(["inv-1"]));
    assert_eq!(ack["payload"]["status"], "created");
    assert_eq!(ack["payload"]["participant_id"], "newbie");
    for c in [a, s] {
        let seen = sim.take(c);
        assert_eq!(kinds(&seen), vec!["system/presence"], "{seen:?}");
        let p = &seen[0]["payload"];
        assert_eq!(p["event"], "invited");
        assert_eq!(
            p["participant"],
            json!({"id": "newbie", "capabilities": [{"kind": "chat"}]})
        );
        assert_eq!(p["invited_by"], "human");
        assert_eq!(p["reason"], "help");
        assert!(
            !seen[0].to_string().contains(&tok) && !seen[0].to_string().contains("token"),
            "only the inviter learns the token"
        );
    }
    let n = sim.join(&tok);
    let w = sim.take(n);
    assert_eq!(
        w[0]["payload"]["you"],
        json!({"id": "newbie", "capabilities": [{"kind": "chat"}]})
    );
    assert_eq!(sim.take(a)[0]["payload"]["participant"]["id"], "newbie");
    // Inviting an existing id (configured or invited) is refused with `already_exists`.
    for (n, who) in [("inv-2", "agent"), ("inv-3", "newbie")] {
        sim.send_and_settle(
            h,
            &envelope(
                n,
                "human",
                "space/invite",
                None,
                json!({"participant_id": who}),
            ),
        );
        let e = sim.take(h);
        let e = e.last().unwrap();
        assert_eq!(e["kind"], "system/error");
        assert_eq!(e["payload"]["error"], "already_exists");
        assert_eq!(e["payload"]["participant_id"], who);
        assert_eq!(e["correlation_id"], json!([n]));
    }
    // Ids that would escape the tokens folder, or pass for the gateway, are refused.
    for (n, bad) in [
        ("inv-4", "../../../etc/passwd"),
        ("inv-5", "foo/bar"),
        ("inv-6", "a\\b"),
        ("inv-7", "x..y"),
        ("inv-8", "system:gateway"),
        ("inv-9", ""),
    ] {
        sim.send_and_settle(
            h,
            &envelope(
                n,
                "human",
                "space/invite",
                None,
                json!({"participant_id": bad}),
            ),
        );
        let e = sim.take(h);
        let e = e.last().unwrap();
        assert_eq!(
            e["payload"]["error"], "invalid_participant_id",
            "{bad}: {e}"
        );
        if bad.contains('/') || bad.contains('\\') || bad.contains("..") {
            assert_eq!(
                e["payload"]["message"],
                "participant_id contains invalid characters"
            );
        }
    }
    assert!(sim.take(a).is_empty(), "refused invites tell nobody");
    // A participant cannot forge an acknowledgement (nor the stream notifications).
    for kind in [
        "space/invite-ack",
        "stream/write-granted",
        "stream/write-revoked",
        "stream/ownership-transferred",
    ] {
        sim.send_and_settle(
            h,
            &envelope("forged", "human", kind, None, json!({"token": "x"})),
        );
        assert_eq!(
            sim.take(h)[0]["payload"]["error"],
            "reserved_kind",
            "{kind}"
        );
    }
    assert!(sim.take(a).is_empty());
}

#[test]
fn invite_is_bounded_by_the_inviters_capabilities() {
    let yaml = "space: {id: s}\nparticipants:\n  host: {tokens: [host-token], capabilities: [{kind: space/invite}, {kind: chat}]}\n";
    let mut sim = Sim::from_yaml(yaml);
    let host = sim.join("host-token");
    sim.take(host);
    sim.send_and_settle(
        host,
        &envelope(
            "i1",
            "host",
            "space/invite",
            None,
            json!({"participant_id": "x", "initial_capabilities": [{"kind": "mcp/request"}]}),
        ),
    );
    assert_eq!(
        sim.take(host)[0]["payload"]["error"],
        "grant_exceeds_own_capabilities"
    );
    sim.send_and_settle(
        host,
        &envelope(
            "i2",
            "host",
            "space/invite",
            None,
            json!({"participant_id": "x", "initial_capabilities": [{"kind": "chat"}]}),
        ),
    );
    assert_eq!(kinds(&sim.take(host)), vec!["space/invite-ack"]);
}

#[test]
fn kick_closes_and_refuses_the_token_until_reinvited() {
    let World { mut sim, h, a, s } = world();
    sim.send_and_settle(
        h,
        &envelope(
            "k1",
            "human",
            "space/kick",
            None,
            json!({"participant_id": "agent", "reason": "misbehaving"}),
        ),
    );
    assert_eq!(kinds(&sim.take(a)), vec!["space/kick"]);
    let (code, reason) = sim.closed(a).unwrap();
    assert_eq!(code, 1008);
    assert!(reason.contains("misbehaving"));
    let hs = sim.take(h);
    assert_eq!(kinds(&hs), vec!["space/kick", "system/presence"]);
    assert_eq!(
        hs[1]["payload"],
        json!({"event": "leave", "participant": {"id": "agent"}})
    );
    assert_eq!(kinds(&sim.take(s)), vec!["space/kick", "system/presence"]);
    let again = sim.connect(Some("agent-token"));
    assert_eq!(sim.received(again)[0]["payload"]["error"], "unknown_token");
    assert!(sim.gw.participants().iter().all(|p| p.id != "agent"));
    // Kicking requires the capability.
    let s_kick = envelope(
        "k2",
        "service",
        "space/kick",
        None,
        json!({"participant_id": "human"}),
    );
    sim.send_and_settle(s, &s_kick);
    assert_eq!(sim.take(s)[0]["payload"]["error"], "capability_violation");
    // A kick does not free a configured id: it cannot be invited.
    sim.send_and_settle(
        h,
        &envelope(
            "inv",
            "human",
            "space/invite",
            None,
            json!({"participant_id": "agent", "initial_capabilities": [{"kind": "chat"}]}),
        ),
    );
    let e = sim.take(h);
    assert_eq!(e.last().unwrap()["payload"]["error"], "already_exists");
    assert!(sim.take(s).is_empty(), "a refused invite tells nobody");
    // An invited participant, kicked, may be invited again and join with its new token.
    let invite = |n: &str| {
        envelope(
            n,
            "human",
            "space/invite",
            None,
            json!({"participant_id": "guest", "initial_capabilities": [{"kind": "chat"}]}),
        )
    };
    sim.send_and_settle(h, &invite("inv-g1"));
    let first = sim.take(h).last().unwrap()["payload"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    sim.send_and_settle(
        h,
        &envelope(
            "k3",
            "human",
            "space/kick",
            None,
            json!({"participant_id": "guest"}),
        ),
    );
    sim.take(h);
    sim.send_and_settle(h, &invite("inv-g2"));
    let tok = sim.take(h).last().unwrap()["payload"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(tok, first);
    let old = sim.connect(Some(&first));
    assert_eq!(sim.received(old)[0]["payload"]["error"], "unknown_token");
    let back = sim.join(&tok);
    assert_eq!(sim.received(back)[0]["payload"]["you"]["id"], "guest");
}

#[test]
fn invited_ids_follow_the_id_rule() {
    let World { mut sim, h, a, .. } = world();
    let long = "x".repeat(100_000);
    let over = "y".repeat(129);
    for (n, bad, needle) in [
        (
            "i1",
            long.as_str(),
            "at most 128 bytes (this one has 100000)",
        ),
        ("i2", over.as_str(), "at most 128 bytes (this one has 129)"),
        ("i3", "ag\u{200B}ent", "U+200B"),
        ("i4", "\u{202E}tnega", "U+202E"),
        ("i5", "ag\u{00AD}ent", "U+00AD"),
        ("i6", "\u{FEFF}agent", "U+FEFF"),
        ("i7", "agent\n", "U+000A"),
        // Cyrillic а in place of Latin a: displays as the configured `agent`.
        ("i8", "\u{0430}gent", "looks like participant agent"),
        ("i9", "hum\u{0430}n", "looks like participant human"),
    ] {
        sim.send_and_settle(
            h,
            &envelope(
                n,
                "human",
                "space/invite",
                None,
                json!({"participant_id": bad, "initial_capabilities": [{"kind": "chat"}]}),
            ),
        );
        let got = sim.take(h);
        assert_eq!(kinds(&got), vec!["system/error"], "{n}");
        let p = &got[0]["payload"];
        assert_eq!(p["error"], "invalid_participant_id", "{n}: {p}");
        let msg = p["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{n}: {msg}");
        assert!(
            got[0].to_string().len() < 1_000,
            "{n}: the error does not repeat the id"
        );
        assert!(sim.take(a).is_empty(), "{n}: nobody else hears of it");
    }
    // A lookalike of an invited id is refused as well.
    sim.send_and_settle(
        h,
        &envelope(
            "i10",
            "human",
            "space/invite",
            None,
            json!({"participant_id": "helper", "initial_capabilities": [{"kind": "chat"}]}),
        ),
    );
    assert_eq!(kinds(&sim.take(h)), vec!["space/invite-ack"]);
    sim.take(a);
    sim.send_and_settle(
        h,
        &envelope(
            "i11",
            "human",
            "space/invite",
            None,
            json!({"participant_id": "he\u{04CF}per"}),
        ),
    );
    let got = sim.take(h);
    assert_eq!(got[0]["payload"]["error"], "invalid_participant_id");
    assert!(sim.take(a).is_empty());
}

#[test]
fn pause_with_timeout_then_expiry() {
    let World { mut sim, h, a, .. } = world();
    sim.send_and_settle(
        h,
        &envelope(
            "p1",
            "human",
            "participant/pause",
            Some(&["agent"]),
            json!({"reason": "rate_limit", "timeout_seconds": 60}),
        ),
    );
    assert_eq!(kinds(&sim.take(a)), vec!["participant/pause"]);
    sim.send_and_settle(
        a,
        &envelope("c1", "agent", "chat", None, json!({"text": "busy"})),
    );
    let e = sim.take(a);
    assert_eq!(e[0]["payload"]["error"], "participant_paused");
    assert_eq!(e[0]["correlation_id"], json!(["c1"]));
    sim.take(h);
    // Acknowledgements are exempt.
    sim.send_and_settle(
        a,
        &envelope(
            "ack",
            "agent",
            "chat/acknowledge",
            None,
            json!({"status": "paused"}),
        ),
    );
    assert_eq!(kinds(&sim.take(h)), vec!["chat/acknowledge"]);
    sim.advance(Duration::from_secs(59));
    sim.take(a);
    sim.send_and_settle(
        a,
        &envelope("c2", "agent", "chat", None, json!({"text": "still"})),
    );
    assert_eq!(sim.take(a)[0]["payload"]["error"], "participant_paused");
    sim.advance(Duration::from_secs(1));
    sim.send_and_settle(
        a,
        &envelope("c3", "agent", "chat", None, json!({"text": "back"})),
    );
    assert_eq!(kinds(&sim.take(h)), vec!["chat"]);
}

#[test]
fn pause_then_resume() {
    let World { mut sim, h, a, .. } = world();
    sim.send_and_settle(
        h,
        &envelope(
            "p1",
            "human",
            "participant/pause",
            Some(&["agent"]),
            json!({}),
        ),
    );
    // Longer than any timeout would be, within the idle limit.
    sim.advance(Duration::from_secs(80));
    sim.send_and_settle(
        a,
        &envelope("c1", "agent", "chat", None, json!({"text": "x"})),
    );
    assert_eq!(sim.received_kind(a, "system/error").len(), 1);
    sim.send_and_settle(
        h,
        &envelope(
            "r1",
            "human",
            "participant/resume",
            Some(&["agent"]),
            json!({}),
        ),
    );
    sim.take(h);
    sim.send_and_settle(
        a,
        &envelope("c2", "agent", "chat", None, json!({"text": "x"})),
    );
    assert_eq!(kinds(&sim.take(h)), vec!["chat"]);
    // A participant without the capability cannot pause others.
    sim.send_and_settle(
        a,
        &envelope(
            "p2",
            "agent",
            "participant/pause",
            Some(&["human"]),
            json!({}),
        ),
    );
    assert_eq!(
        sim.received_kind(a, "system/error").last().unwrap()["payload"]["error"],
        "capability_violation"
    );
}

#[test]
fn shutdown_holds_until_rejoin() {
    let World { mut sim, h, a, .. } = world();
    sim.send_and_settle(
        h,
        &envelope(
            "sd",
            "human",
            "participant/shutdown",
            Some(&["agent"]),
            Value::Null,
        ),
    );
    sim.take(h);
    sim.send_and_settle(
        a,
        &envelope("c1", "agent", "chat", None, json!({"text": "x"})),
    );
    assert_eq!(
        sim.take(a).last().unwrap()["payload"]["error"],
        "participant_shutdown"
    );
    sim.send_and_settle(
        a,
        &envelope("ack", "agent", "chat/acknowledge", None, json!({})),
    );
    assert_eq!(kinds(&sim.take(h)), vec!["chat/acknowledge"]);
    let a2 = sim.join("agent-token");
    sim.take(a2);
    sim.send_and_settle(
        a2,
        &envelope("c2", "agent", "chat", None, json!({"text": "x"})),
    );
    assert_eq!(kinds(&sim.take(h)), vec!["chat"]);
}

#[test]
fn invites_are_bounded() {
    let yaml = "space: {id: s}\nparticipants:\n  host: {tokens: [host-token], capabilities: [{kind: \"*\"}]}\ngateway: {max_participants: 3}\n";
    let mut sim = Sim::from_yaml(yaml);
    let host = sim.join("host-token");
    for i in 0..3 {
        sim.send_and_settle(
            host,
            &envelope(
                &format!("i{i}"),
                "host",
                "space/invite",
                None,
                json!({"participant_id": format!("guest-{i}")}),
            ),
        );
    }
    let errors: Vec<_> = sim
        .received_kind(host, "system/error")
        .iter()
        .map(|e| e["payload"]["error"].clone())
        .collect();
    assert_eq!(
        errors,
        vec![json!("too_many_participants")],
        "two fit beside the host, the third does not"
    );
    assert_eq!(sim.gw.participants().len(), 3);
}
