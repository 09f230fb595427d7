//! Enforcement and delivery: fan-out in both modes, identity, reserved kinds, capability
//! violations, completion of partial envelopes, oversize and garbage frames.

use mew_core::gateway::Input;
use mew_tests::fixtures::{SPACE, space_with};
use mew_tests::sim::{Sim, envelope};
use serde_json::{Value, json};

fn three(
    sim: &mut Sim,
) -> (
    mew_core::gateway::ConnId,
    mew_core::gateway::ConnId,
    mew_core::gateway::ConnId,
) {
    let h = sim.join("human-token");
    let a = sim.join("agent-token");
    let s = sim.join("service-token");
    for c in [h, a, s] {
        sim.take(c);
    }
    // The virtual participant has logged the presence announcements; start afresh.
    sim.log_lines.clear();
    (h, a, s)
}

#[test]
fn all_mode_everyone_observes_everything_sender_included_unchanged() {
    let mut sim = Sim::from_yaml(SPACE);
    let (h, a, s) = three(&mut sim);
    let text = r#"{"protocol":"mew/v0.4","id":"m1","ts":"2025-01-09T10:00:00Z","from":"agent","to":["service"],"kind":"chat","payload":{"text":"hi","x":[1,2]}}"#;
    sim.send(a, text);
    sim.run_until_quiet();
    for c in [h, a, s] {
        let inbox = &sim.endpoint(c).inbox;
        assert_eq!(inbox.len(), 1, "{c}");
        assert_eq!(&inbox[0][..], text.as_bytes(), "forwarded byte for byte");
    }
    // One buffer shared by every recipient: no copy per recipient.
    let p = sim.endpoint(h).inbox[0].as_ptr();
    assert_eq!(sim.endpoint(a).inbox[0].as_ptr(), p);
    assert_eq!(sim.endpoint(s).inbox[0].as_ptr(), p);
    // The virtual participant logs it, one line.
    assert_eq!(sim.log_lines.len(), 1);
    assert_eq!(sim.log_lines[0].0, "logs/log.jsonl");
    assert_eq!(&sim.log_lines[0].1[..], format!("{text}\n").as_bytes());
}

#[test]
fn addressed_mode_routes_by_to() {
    let mut sim = Sim::from_yaml(&space_with("  delivery: addressed"));
    let (h, a, s) = three(&mut sim);
    sim.send_and_settle(
        a,
        &envelope(
            "d1",
            "agent",
            "chat",
            Some(&["service"]),
            json!({"text": "psst"}),
        ),
    );
    assert!(sim.received(h).is_empty());
    assert!(sim.received(a).is_empty(), "no echo in addressed mode");
    assert_eq!(sim.received(s).len(), 1);
    assert!(sim.log_lines.is_empty());
    sim.send_and_settle(
        a,
        &envelope("b1", "agent", "chat", None, json!({"text": "all"})),
    );
    assert_eq!(sim.received(h).len(), 1);
    assert!(sim.received(a).is_empty());
    assert_eq!(sim.received(s).len(), 2);
    assert_eq!(sim.log_lines.len(), 1);
}

fn only_error(
    sim: &mut Sim,
    c: mew_core::gateway::ConnId,
    others: &[mew_core::gateway::ConnId],
) -> Value {
    let r = sim.take(c);
    assert_eq!(r.len(), 1, "{r:?}");
    for &o in others {
        assert!(
            sim.take(o).is_empty(),
            "refused traffic reaches no one else"
        );
    }
    assert!(sim.log_lines.is_empty());
    assert_eq!(r[0]["kind"], "system/error");
    assert_eq!(r[0]["from"], "system:gateway");
    r[0].clone()
}

#[test]
fn spoofed_from_is_refused() {
    let mut sim = Sim::from_yaml(SPACE);
    let (h, a, s) = three(&mut sim);
    sim.send_and_settle(
        a,
        &envelope(
            "spoof-1",
            "human",
            "chat",
            None,
            json!({"text": "I am human"}),
        ),
    );
    let e = only_error(&mut sim, a, &[h, s]);
    assert_eq!(e["payload"]["error"], "identity_mismatch");
    assert_eq!(e["correlation_id"], json!(["spoof-1"]));
    assert_eq!(e["to"], json!(["agent"]));
}

#[test]
fn system_kinds_from_participants_are_refused_even_with_star() {
    let mut sim = Sim::from_yaml(SPACE);
    let (h, a, s) = three(&mut sim);
    sim.send_and_settle(
        h,
        &envelope(
            "fake-welcome",
            "human",
            "system/welcome",
            Some(&["agent"]),
            json!({"you": {"id": "agent", "capabilities": [{"kind": "*"}]}}),
        ),
    );
    let e = only_error(&mut sim, h, &[a, s]);
    assert_eq!(e["payload"]["error"], "reserved_kind");
    assert_eq!(e["correlation_id"], json!(["fake-welcome"]));
}

#[test]
fn capability_violation_has_the_reference_shape() {
    let mut sim = Sim::from_yaml(SPACE);
    let (h, a, s) = three(&mut sim);
    sim.send_and_settle(
        a,
        &envelope(
            "req-1",
            "agent",
            "mcp/request",
            Some(&["service"]),
            json!({"method": "tools/call"}),
        ),
    );
    let e = only_error(&mut sim, a, &[h, s]);
    assert_eq!(e["correlation_id"], json!(["req-1"]));
    assert_eq!(e["to"], json!(["agent"]));
    let p = &e["payload"];
    assert_eq!(p["error"], "capability_violation");
    assert_eq!(p["attempted_kind"], "mcp/request");
    assert_eq!(p["your_capabilities"][0], json!({"kind": "mcp/proposal"}));
    assert_eq!(p["your_capabilities"].as_array().unwrap().len(), 6);
    assert!(p["message"].as_str().unwrap().contains("mcp/request"));
    // The proposal route is open.
    sim.send_and_settle(
        a,
        &envelope(
            "prop-1",
            "agent",
            "mcp/proposal",
            None,
            json!({"method": "tools/call"}),
        ),
    );
    assert_eq!(sim.received_kind(s, "mcp/proposal").len(), 1);
}

#[test]
fn payload_patterns_decide_when_present() {
    let yaml = r#"
space: {id: s}
participants:
  reader: {tokens: [r], capabilities: [{kind: mcp/request, payload: {method: tools/list}}]}
  other: {tokens: [o], capabilities: [{kind: chat}]}
"#;
    let mut sim = Sim::from_yaml(yaml);
    let r = sim.join("r");
    let o = sim.join("o");
    sim.take(r);
    sim.take(o);
    sim.send_and_settle(
        r,
        &envelope(
            "ok",
            "reader",
            "mcp/request",
            None,
            json!({"method": "tools/list"}),
        ),
    );
    assert_eq!(sim.received(o).len(), 1);
    sim.send_and_settle(
        r,
        &envelope(
            "no",
            "reader",
            "mcp/request",
            None,
            json!({"method": "tools/call"}),
        ),
    );
    assert_eq!(sim.received(o).len(), 1);
    let errs = sim.received_kind(r, "system/error");
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0]["correlation_id"], json!(["no"]));
}

#[test]
fn partial_envelopes_are_completed_and_bare_correlation_normalised() {
    let mut sim = Sim::from_yaml(SPACE);
    let (h, a, _s) = three(&mut sim);
    sim.send_and_settle(a, &json!({"kind": "chat", "payload": {"text": "short"}}));
    let got = sim.take(h);
    assert_eq!(got.len(), 1);
    let e = &got[0];
    assert_eq!(e["from"], "agent");
    assert_eq!(e["protocol"], "mew/v0.4");
    assert!(e["id"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(e["ts"], sim.now().rfc3339());
    assert_eq!(e["payload"]["text"], "short");

    let text = r#"{"protocol":"mew/v0.4","id":"r1","ts":"2025-01-09T10:00:00Z","from":"agent","kind":"chat","correlation_id":"c-9","payload":{"text":"re"}}"#;
    sim.send(a, text);
    sim.run_until_quiet();
    let got = sim.take(h);
    assert_eq!(got[0]["correlation_id"], json!(["c-9"]));
    assert_eq!(got[0]["id"], "r1");
}

#[test]
fn oversize_and_garbage_frames_are_refused_without_harm() {
    let mut sim = Sim::from_yaml(&space_with("  max_frame_bytes: 300"));
    let (h, a, s) = three(&mut sim);
    let big = envelope(
        "big",
        "agent",
        "chat",
        None,
        json!({"text": "x".repeat(400)}),
    );
    sim.send_and_settle(a, &big);
    let e = only_error(&mut sim, a, &[h, s]);
    assert_eq!(e["payload"]["error"], "frame_too_large");

    sim.gw.handle_input(
        sim.now(),
        Input::Oversize {
            conn: a,
            size: 10_000_000,
        },
    );
    sim.pump();
    let e = only_error(&mut sim, a, &[h, s]);
    assert_eq!(e["payload"]["error"], "frame_too_large");

    for garbage in [
        "not json",
        "[1,2]",
        "{\"payload\":{}}",
        "{\"kind\":5}",
        "\u{0}\u{1}",
        "{\"kind\":\"chat\",\"payload\":[]}",
        "{{{{",
    ] {
        sim.send(a, garbage);
        sim.run_until_quiet();
        let e = only_error(&mut sim, a, &[h, s]);
        assert_eq!(e["payload"]["error"], "invalid_envelope", "{garbage}");
        assert!(e["payload"]["message"].is_string());
    }
    let deep = format!("{}{}", "[".repeat(140), "]".repeat(140));
    sim.send(a, deep);
    sim.run_until_quiet();
    assert_eq!(
        only_error(&mut sim, a, &[h, s])["payload"]["error"],
        "invalid_envelope"
    );
    // The connection still works.
    sim.send_and_settle(
        a,
        &envelope("fine", "agent", "chat", None, json!({"text": "ok"})),
    );
    assert_eq!(sim.received(h).len(), 1);
    assert!(sim.closed(a).is_none());
}

fn latency_run(seed: u64) -> Vec<Vec<bytes::Bytes>> {
    let cfg = mew_core::gateway::SpaceConfig::from_yaml(SPACE).unwrap();
    let mut sim = Sim::with_latency(cfg, seed, 50);
    let (h, a, s) = three(&mut sim);
    for i in 0..20 {
        for (c, who) in [(h, "human"), (a, "agent"), (s, "service")] {
            sim.send_json(
                c,
                &envelope(&format!("{who}-{i}"), who, "chat", None, json!({"i": i})),
            );
        }
        sim.advance(std::time::Duration::from_millis(7));
    }
    sim.run_until_quiet();
    [h, a, s]
        .iter()
        .map(|c| sim.endpoint(*c).inbox.clone())
        .collect()
}

#[test]
fn seeded_latency_is_reproducible_and_links_stay_fifo() {
    let seed = mew_tests::sim::seed_or(42);
    let first = latency_run(seed);
    assert_eq!(first, latency_run(seed), "same seed, same world");
    for inbox in &first {
        assert_eq!(inbox.len(), 60);
        for who in ["human", "agent", "service"] {
            let order: Vec<u64> = inbox
                .iter()
                .map(|b| serde_json::from_slice::<Value>(b).unwrap())
                .filter(|v| v["from"] == who)
                .map(|v| v["payload"]["i"].as_u64().unwrap())
                .collect();
            assert_eq!(order, (0..20).collect::<Vec<_>>(), "per-sender order kept");
        }
    }
}

#[test]
fn a_participant_over_its_rate_is_refused_and_recovers_with_time() {
    let mut sim = Sim::from_yaml(
        "space: {id: s}\ngateway: {rate_limit: {per_second: 10, burst: 5}}\nparticipants:\n  human: {tokens: [human-token], capabilities: [{kind: \"*\"}]}\n  other: {tokens: [other-token], capabilities: [{kind: chat}]}\n",
    );
    let h = sim.join("human-token");
    let o = sim.join("other-token");
    sim.take(h);
    sim.take(o);
    for i in 0..20 {
        sim.send_json(
            h,
            &envelope(
                &format!("c{i}"),
                "human",
                "chat",
                None,
                json!({"text": "x"}),
            ),
        );
    }
    sim.run_until_quiet();
    let got = sim.received_kind(o, "chat");
    assert_eq!(got.len(), 5, "the burst gets through");
    let errors: Vec<Value> = sim.received_kind(h, "system/error");
    assert_eq!(errors.len(), 15);
    assert!(
        errors
            .iter()
            .all(|e| e["payload"]["error"] == "rate_limited"),
        "{errors:?}"
    );
    // The other participant has its own bucket.
    sim.send_and_settle(
        o,
        &envelope("o1", "other", "chat", None, json!({"text": "y"})),
    );
    assert!(sim.received_kind(h, "chat").iter().any(|c| c["id"] == "o1"));
    // A second later the bucket is full again: the burst, not the ten a second brought.
    sim.advance(std::time::Duration::from_secs(1));
    sim.take(o);
    for i in 0..12 {
        sim.send_json(
            h,
            &envelope(
                &format!("d{i}"),
                "human",
                "chat",
                None,
                json!({"text": "x"}),
            ),
        );
    }
    sim.run_until_quiet();
    assert_eq!(
        sim.received_kind(o, "chat").len(),
        5,
        "refilled to the burst, not beyond"
    );
}
