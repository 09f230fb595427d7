//! Streams, heartbeats, idle timeouts and slow consumers.

use mew_core::gateway::ConnId;
use mew_tests::fixtures::{SPACE, space_with};
use mew_tests::sim::{Sim, envelope};
use serde_json::{Value, json};
use std::time::Duration;

fn joined(sim: &mut Sim) -> (ConnId, ConnId, ConnId) {
    let h = sim.join("human-token");
    let a = sim.join("agent-token");
    let s = sim.join("service-token");
    for c in [h, a, s] {
        sim.take(c);
    }
    sim.log_lines.clear();
    (h, a, s)
}

fn request_payload() -> Value {
    json!({
        "direction": "upload",
        "expected_size_bytes": 1048576,
        "description": "Chain-of-thought reasoning",
        "content_type": "application/json",
        "format": "jsonl",
        "metadata": {"compression": "none"},
        "custom_field": [1, 2, 3],
        "owner": "forged"
    })
}

fn open_stream(sim: &mut Sim, a: ConnId) -> String {
    sim.send_and_settle(
        a,
        &envelope(
            "sr-1",
            "agent",
            "stream/request",
            Some(&["gateway"]),
            request_payload(),
        ),
    );
    let got = sim.take(a);
    let kinds: Vec<_> = got.iter().map(|e| e["kind"].clone()).collect();
    assert_eq!(kinds, vec![json!("stream/request"), json!("stream/open")]);
    let open = &got[1];
    assert_eq!(open["to"], json!(["agent"]));
    assert_eq!(open["correlation_id"], json!(["sr-1"]));
    assert_eq!(open["from"], "system:gateway");
    open["payload"]["stream_id"].as_str().unwrap().to_owned()
}

#[test]
fn stream_lifecycle() {
    let mut sim = Sim::from_yaml(SPACE);
    let (h, a, s) = joined(&mut sim);
    let sid = open_stream(&mut sim, a);
    assert_eq!(sid, "stream-1");
    assert_eq!(sim.take(h).len(), 2, "everyone observes request and open");
    sim.take(s);

    let frame = format!("#{sid}#{{\"step\":1}}");
    sim.send(a, frame.clone());
    sim.run_until_quiet();
    for c in [h, a, s] {
        assert_eq!(
            sim.endpoint(c).inbox.last().unwrap(),
            frame.as_bytes(),
            "unchanged"
        );
    }
    assert_eq!(
        sim.log_lines.last().unwrap().1,
        format!("{frame}\n").as_bytes()
    );
    for c in [h, a, s] {
        sim.take(c);
    }

    // Someone else's frames on the stream are refused.
    sim.send(h, format!("#{sid}#forged"));
    sim.send(h, "#stream-99#nothing");
    sim.send(h, "#no-second-hash");
    sim.run_until_quiet();
    let errs: Vec<_> = sim
        .take(h)
        .iter()
        .map(|e| e["payload"]["error"].clone())
        .collect();
    assert_eq!(
        errs,
        vec![
            json!("stream_not_owned"),
            json!("unknown_stream"),
            json!("invalid_stream_frame")
        ]
    );
    assert!(sim.take(a).is_empty() && sim.take(s).is_empty());

    // Only the owner closes it.
    sim.send_and_settle(
        h,
        &envelope(
            "cl-x",
            "human",
            "stream/close",
            None,
            json!({"stream_id": sid, "reason": "complete"}),
        ),
    );
    assert_eq!(sim.take(h)[0]["payload"]["error"], "stream_not_owned");
    sim.send_and_settle(
        a,
        &envelope(
            "cl-1",
            "agent",
            "stream/close",
            None,
            json!({"stream_id": sid, "reason": "complete"}),
        ),
    );
    assert_eq!(sim.take(s)[0]["kind"], "stream/close");
    sim.take(a);
    sim.send(a, format!("#{sid}#late"));
    sim.run_until_quiet();
    assert_eq!(sim.take(a)[0]["payload"]["error"], "unknown_stream");
    assert!(sim.take(s).is_empty());
}

#[test]
fn late_joiner_sees_active_streams_with_every_field() {
    let yaml = SPACE.replace(
        "defaults:",
        "  late: {tokens: [late-token], capabilities: [{kind: chat}]}\ndefaults:",
    );
    let mut sim = Sim::from_yaml(&yaml);
    let (_h, a, _s) = joined(&mut sim);
    let sid = open_stream(&mut sim, a);
    let late = sim.join("late-token");
    let w = sim.take(late);
    let streams = w[0]["payload"]["active_streams"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(streams.len(), 1);
    let st = &streams[0];
    assert_eq!(st["stream_id"], sid.as_str());
    assert_eq!(
        st["owner"], "agent",
        "the gateway's owner wins over a forged field"
    );
    assert_eq!(st["created"], sim.now().rfc3339());
    for (k, v) in request_payload().as_object().unwrap() {
        if k != "owner" {
            assert_eq!(&st[k], v, "field {k} preserved");
        }
    }
}

#[test]
fn leaving_owner_closes_its_streams() {
    let mut sim = Sim::from_yaml(SPACE);
    let (h, a, _s) = joined(&mut sim);
    let sid = open_stream(&mut sim, a);
    sim.take(h);
    sim.gw.handle_closed(sim.now(), a);
    sim.pump();
    let got = sim.take(h);
    assert_eq!(got[0]["kind"], "stream/close");
    assert_eq!(got[0]["from"], "system:gateway");
    assert_eq!(got[0]["payload"]["stream_id"], sid.as_str());
    assert_eq!(got[1]["kind"], "system/presence");
    assert_eq!(sim.gw.health().active_streams, 0);
}

#[test]
fn stream_close_by_correlation() {
    let mut sim = Sim::from_yaml(SPACE);
    let (_h, a, _s) = joined(&mut sim);
    let sid = open_stream(&mut sim, a);
    let mut close = envelope(
        "cl",
        "agent",
        "stream/close",
        None,
        json!({"reason": "done"}),
    );
    close["correlation_id"] = json!([sid]);
    sim.send_and_settle(a, &close);
    assert_eq!(sim.take(a)[0]["kind"], "stream/close");
    assert_eq!(sim.gw.health().active_streams, 0);
}

#[test]
fn addressed_mode_stream_open_goes_to_the_requester_only() {
    let mut sim = Sim::from_yaml(&space_with("  delivery: addressed"));
    let (h, a, _s) = joined(&mut sim);
    sim.send_and_settle(
        a,
        &envelope(
            "sr",
            "agent",
            "stream/request",
            Some(&["gateway"]),
            json!({"direction": "upload"}),
        ),
    );
    assert_eq!(sim.take(a)[0]["kind"], "stream/open");
    assert!(sim.take(h).is_empty());
    sim.send(a, "#stream-1#x");
    sim.run_until_quiet();
    assert_eq!(sim.take(h).len(), 1, "data goes to everyone but the owner");
    assert!(sim.take(a).is_empty());
}

#[test]
fn pings_on_interval_and_idle_connections_close() {
    let mut sim = Sim::from_yaml(SPACE);
    let (h, a, _s) = joined(&mut sim);
    sim.advance(Duration::from_secs(30));
    assert_eq!(sim.endpoint(h).pings, 1);
    // `h` answers pings; `a` keeps quiet.
    sim.gw.handle_pong(sim.now(), h);
    sim.advance(Duration::from_secs(30));
    sim.gw.handle_pong(sim.now(), h);
    assert_eq!(sim.endpoint(h).pings, 2);
    sim.advance(Duration::from_secs(29));
    assert!(sim.closed(a).is_none());
    sim.advance(Duration::from_secs(1));
    let (code, reason) = sim.closed(a).unwrap();
    assert_eq!(code, 1001);
    assert!(reason.contains("idle"));
    assert!(sim.closed(h).is_none());
    let left = sim.received_kind(h, "system/presence");
    assert_eq!(
        left.last().unwrap()["payload"]["participant"]["id"],
        "agent"
    );
}

#[test]
fn slow_consumer_is_closed_while_others_keep_receiving() {
    let mut sim = Sim::from_yaml(&space_with(
        "  max_queue_frames: 20\n  max_queue_bytes: 100000",
    ));
    let (h, a, s) = joined(&mut sim);
    sim.set_draining(s, false);
    for i in 0..50 {
        sim.send(
            h,
            envelope(&format!("m{i}"), "human", "chat", None, json!({"text": i})).to_string(),
        );
    }
    sim.run_until_quiet();
    let (code, reason) = sim.closed(s).unwrap();
    assert_eq!(code, 1013);
    assert!(reason.contains("slow"));
    assert_eq!(
        sim.endpoint(s).inbox.len(),
        20,
        "nothing beyond the limit was handed out"
    );
    assert_eq!(sim.received_kind(a, "chat").len(), 50);
    assert_eq!(sim.received_kind(h, "chat").len(), 50);
    assert_eq!(
        sim.received_kind(a, "system/presence").last().unwrap()["payload"]["participant"]["id"],
        "service"
    );

    // Bytes count too.
    let mut sim = Sim::from_yaml(&space_with("  max_queue_bytes: 2000"));
    let (h, a, s) = joined(&mut sim);
    sim.set_draining(a, false);
    sim.send_and_settle(
        h,
        &envelope(
            "big1",
            "human",
            "chat",
            None,
            json!({"text": "y".repeat(1500)}),
        ),
    );
    assert!(
        sim.closed(a).is_none(),
        "one large frame alone is no backlog"
    );
    sim.send_and_settle(
        h,
        &envelope(
            "big2",
            "human",
            "chat",
            None,
            json!({"text": "y".repeat(1500)}),
        ),
    );
    assert_eq!(sim.closed(a).unwrap().0, 1013);
    assert_eq!(sim.received_kind(s, "chat").len(), 2);
}
