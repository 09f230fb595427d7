//! Streams, heartbeats, idle timeouts and slow consumers.

use mew_core::gateway::ConnId;
use mew_core::gateway::Input;
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
            json!("unauthorized_stream_write"),
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
    sim.gw
        .handle_input(sim.now(), Input::Disconnected { conn: a });
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
    sim.gw.handle_input(sim.now(), Input::Pong { conn: h });
    sim.advance(Duration::from_secs(30));
    sim.gw.handle_input(sim.now(), Input::Pong { conn: h });
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

/// Three participants that may use every stream kind, and a virtual one (the reference's
/// stream scenarios).
const OWNERSHIP: &str = r#"
space: {id: own, name: Ownership}
participants:
  owner: {tokens: [owner-token], capabilities: [{kind: chat}, {kind: "stream/*"}]}
  writer: {tokens: [writer-token], capabilities: [{kind: chat}, {kind: "stream/*"}]}
  verifier: {tokens: [verifier-token], capabilities: [{kind: chat}]}
  controller: {tokens: [controller-token], capabilities: [{kind: chat}], output_log: logs/c.jsonl, auto_connect: true}
"#;

fn ownership() -> (Sim, ConnId, ConnId, ConnId) {
    let mut sim = Sim::from_yaml(OWNERSHIP);
    let o = sim.join("owner-token");
    let w = sim.join("writer-token");
    let v = sim.join("verifier-token");
    for c in [o, w, v] {
        sim.take(c);
    }
    sim.log_lines.clear();
    (sim, o, w, v)
}

fn request(sim: &mut Sim, c: ConnId, from: &str, id: &str, payload: Value) -> Vec<Value> {
    sim.send_and_settle(
        c,
        &envelope(id, from, "stream/request", Some(&["gateway"]), payload),
    );
    sim.take(c)
}

fn op(sim: &mut Sim, c: ConnId, from: &str, id: &str, kind: &str, payload: Value) -> Vec<Value> {
    sim.send_and_settle(c, &envelope(id, from, kind, None, payload));
    sim.take(c)
}

fn frame(sim: &mut Sim, c: ConnId, sid: &str, data: &str) {
    sim.send(c, format!("#{sid}#{data}"));
    sim.run_until_quiet();
}

/// The frames (not envelopes) a connection received since it was last taken.
fn frames_of(sim: &Sim, c: ConnId) -> Vec<String> {
    sim.endpoint(c)
        .inbox
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .filter(|f| f.starts_with('#'))
        .collect()
}

#[test]
fn stream_open_names_owner_and_writers_and_ignores_forged_ones() {
    let (mut sim, o, w, v) = ownership();
    let got = request(
        &mut sim,
        o,
        "owner",
        "sr-1",
        json!({"direction": "upload", "description": "positions",
               "participantId": "attacker", "authorizedWriters": ["verifier", "attacker"],
               "owner": "attacker", "authorized_writers": ["verifier"]}),
    );
    let open = got.iter().find(|e| e["kind"] == "stream/open").unwrap();
    assert_eq!(
        open["payload"],
        json!({"stream_id": "stream-1", "encoding": "text", "owner": "owner",
               "authorized_writers": ["owner"]})
    );
    for c in [w, v] {
        assert!(sim.take(c).iter().any(|e| e["kind"] == "stream/open"));
    }
    // The welcome of a late joiner shows the same, with the request's other fields.
    sim.gw
        .handle_input(sim.now(), Input::Disconnected { conn: v });
    sim.pump();
    let v = sim.join("verifier-token");
    let welcome = &sim.take(v)[0];
    let st = &welcome["payload"]["active_streams"][0];
    assert_eq!(st["owner"], "owner");
    assert_eq!(st["authorized_writers"], json!(["owner"]));
    assert_eq!(st["description"], "positions");
    // The forged look-alikes give nobody write access.
    frame(&mut sim, v, "stream-1", "forged");
    let e = sim.take(v);
    assert_eq!(e[0]["payload"]["error"], "unauthorized_stream_write");
    assert_eq!(e[0]["payload"]["stream_id"], "stream-1");
    assert!(frames_of(&sim, o).is_empty());
}

#[test]
fn grant_revoke_and_transfer_write_access() {
    let (mut sim, o, w, v) = ownership();
    request(&mut sim, o, "owner", "sr-1", json!({"direction": "upload"}));
    for c in [w, v] {
        sim.take(c);
    }
    // Not a writer yet.
    frame(&mut sim, w, "stream-1", "early");
    let e = sim.take(w);
    assert_eq!(e[0]["kind"], "system/error");
    assert_eq!(e[0]["payload"]["error"], "unauthorized_stream_write");
    assert_eq!(e[0]["payload"]["stream_id"], "stream-1");
    assert!(frames_of(&sim, v).is_empty());

    // Only the owner grants; the grant is announced to everyone instead of forwarded.
    let e = op(
        &mut sim,
        w,
        "writer",
        "g0",
        "stream/grant-write",
        json!({"stream_id": "stream-1", "participant_id": "writer"}),
    );
    assert_eq!(e[0]["payload"]["error"], "unauthorized");
    let e = op(
        &mut sim,
        o,
        "owner",
        "g1",
        "stream/grant-write",
        json!({"stream_id": "stream-9", "participant_id": "writer"}),
    );
    assert_eq!(e[0]["payload"]["error"], "stream_not_found");
    let e = op(
        &mut sim,
        o,
        "owner",
        "g2",
        "stream/grant-write",
        json!({"stream_id": "stream-1", "participant_id": "nobody"}),
    );
    assert_eq!(e[0]["payload"]["error"], "participant_not_found");
    let got = op(
        &mut sim,
        o,
        "owner",
        "g3",
        "stream/grant-write",
        json!({"stream_id": "stream-1", "participant_id": "writer", "reason": "takes control"}),
    );
    assert_eq!(got.len(), 1, "{got:?}");
    let ack = &got[0];
    assert_eq!(ack["kind"], "stream/write-granted");
    assert_eq!(ack["from"], "system:gateway");
    assert_eq!(ack["correlation_id"], json!(["g3"]));
    assert_eq!(
        ack["payload"],
        json!({"stream_id": "stream-1", "participant_id": "writer",
               "authorized_writers": ["owner", "writer"], "reason": "takes control"})
    );
    for c in [w, v] {
        assert_eq!(sim.take(c)[0]["kind"], "stream/write-granted");
    }
    let log = String::from_utf8_lossy(&sim.log_lines.last().unwrap().1).into_owned();
    assert!(log.contains("\"kind\":\"stream/write-granted\""), "{log}");
    // Granting again changes nothing.
    let again = op(
        &mut sim,
        o,
        "owner",
        "g4",
        "stream/grant-write",
        json!({"stream_id": "stream-1", "participant_id": "writer"}),
    );
    assert_eq!(
        again[0]["payload"]["authorized_writers"],
        json!(["owner", "writer"])
    );
    sim.take(w);
    sim.take(v);

    frame(&mut sim, w, "stream-1", "by-writer");
    assert!(
        sim.take(w).iter().all(|e| e["kind"] != "system/error"),
        "no error"
    );
    assert_eq!(frames_of(&sim, v), vec!["#stream-1#by-writer"]);
    for c in [o, v] {
        sim.take(c);
    }

    // Revoke: the owner cannot revoke itself; the writer loses access.
    let e = op(
        &mut sim,
        o,
        "owner",
        "r0",
        "stream/revoke-write",
        json!({"stream_id": "stream-1", "participant_id": "owner"}),
    );
    assert_eq!(e[0]["payload"]["error"], "invalid_operation");
    let got = op(
        &mut sim,
        o,
        "owner",
        "r1",
        "stream/revoke-write",
        json!({"stream_id": "stream-1", "participant_id": "writer", "reason": "done"}),
    );
    assert_eq!(got[0]["kind"], "stream/write-revoked");
    assert_eq!(got[0]["payload"]["authorized_writers"], json!(["owner"]));
    sim.take(w);
    frame(&mut sim, w, "stream-1", "after-revoke");
    assert_eq!(
        sim.take(w)[0]["payload"]["error"],
        "unauthorized_stream_write"
    );

    // Transfer: the new owner may write and close; the previous one may do neither.
    let e = op(
        &mut sim,
        o,
        "owner",
        "t0",
        "stream/transfer-ownership",
        json!({"stream_id": "stream-1", "new_owner": "ghost"}),
    );
    assert_eq!(e[0]["payload"]["error"], "participant_not_found");
    let got = op(
        &mut sim,
        o,
        "owner",
        "t1",
        "stream/transfer-ownership",
        json!({"stream_id": "stream-1", "new_owner": "writer", "reason": "AI takes over"}),
    );
    assert_eq!(got[0]["kind"], "stream/ownership-transferred");
    assert_eq!(
        got[0]["payload"],
        json!({"stream_id": "stream-1", "previous_owner": "owner", "new_owner": "writer",
               "authorized_writers": ["writer"], "reason": "AI takes over"})
    );
    sim.take(w);
    sim.take(v);
    frame(&mut sim, o, "stream-1", "old-owner");
    assert_eq!(
        sim.take(o)[0]["payload"]["error"],
        "unauthorized_stream_write"
    );
    frame(&mut sim, w, "stream-1", "new-owner");
    assert!(frames_of(&sim, v).contains(&"#stream-1#new-owner".to_owned()));
    sim.take(o);
    let e = op(
        &mut sim,
        o,
        "owner",
        "c0",
        "stream/close",
        json!({"stream_id": "stream-1"}),
    );
    assert_eq!(e[0]["payload"]["error"], "stream_not_owned");
    let late = sim.join("verifier-token");
    let st = &sim.take(late)[0]["payload"]["active_streams"][0];
    assert_eq!(st["owner"], "writer");
    assert_eq!(st["authorized_writers"], json!(["writer"]));
    op(
        &mut sim,
        w,
        "writer",
        "c1",
        "stream/close",
        json!({"stream_id": "stream-1"}),
    );
    assert_eq!(sim.gw.health().active_streams, 0);
}

#[test]
fn a_writer_that_leaves_loses_its_access_and_the_owner_keeps_its_own() {
    let (mut sim, o, w, v) = ownership();
    request(&mut sim, o, "owner", "sr-1", json!({"direction": "upload"}));
    op(
        &mut sim,
        o,
        "owner",
        "g",
        "stream/grant-write",
        json!({"stream_id": "stream-1", "participant_id": "writer"}),
    );
    sim.take(v);
    sim.gw
        .handle_input(sim.now(), Input::Disconnected { conn: w });
    sim.pump();
    let got = sim.take(v);
    let revoked = got
        .iter()
        .find(|e| e["kind"] == "stream/write-revoked")
        .unwrap();
    assert_eq!(revoked["payload"]["participant_id"], "writer");
    assert_eq!(revoked["payload"]["authorized_writers"], json!(["owner"]));
    assert_eq!(revoked["payload"]["reason"], "participant_left");
    // Back again, it is not a writer any more.
    let w = sim.join("writer-token");
    let st = &sim.take(w)[0]["payload"]["active_streams"][0];
    assert_eq!(st["authorized_writers"], json!(["owner"]));
    frame(&mut sim, w, "stream-1", "x");
    assert_eq!(
        sim.take(w)[0]["payload"]["error"],
        "unauthorized_stream_write"
    );
    frame(&mut sim, o, "stream-1", "still-mine");
    assert!(frames_of(&sim, v).contains(&"#stream-1#still-mine".to_owned()));
}

#[test]
fn targeted_stream_frames_reach_only_the_targets_and_the_owner() {
    let (mut sim, o, w, v) = ownership();
    // Targets must be present in the space.
    let e = request(
        &mut sim,
        o,
        "owner",
        "sr-0",
        json!({"direction": "upload", "target": ["writer", "ghost"]}),
    );
    assert_eq!(e[0]["kind"], "system/error");
    assert_eq!(e[0]["payload"]["error"], "target_not_found");
    assert_eq!(e[0]["payload"]["targets"], json!(["ghost"]));
    assert_eq!(e[0]["correlation_id"], json!(["sr-0"]));
    let e = request(
        &mut sim,
        o,
        "owner",
        "sr-x",
        json!({"direction": "upload", "target": "writer"}),
    );
    assert_eq!(e[0]["payload"]["error"], "invalid_envelope");
    assert_eq!(sim.gw.health().active_streams, 0);

    // The writer asks for a stream to the owner: everyone sees it opened, with its target.
    let got = request(
        &mut sim,
        w,
        "writer",
        "sr-1",
        json!({"direction": "upload", "target": ["verifier"]}),
    );
    let open = got.iter().find(|e| e["kind"] == "stream/open").unwrap();
    assert_eq!(open["payload"]["target"], json!(["verifier"]));
    assert_eq!(open["payload"]["owner"], "writer");
    for c in [o, v] {
        assert!(sim.take(c).iter().any(|e| e["kind"] == "stream/open"));
    }
    sim.log_lines.clear();
    frame(&mut sim, w, "stream-1", "pos-1");
    assert_eq!(frames_of(&sim, v), vec!["#stream-1#pos-1"]);
    assert!(frames_of(&sim, o).is_empty(), "not a target");
    assert!(
        sim.log_lines.is_empty(),
        "the virtual participant is not a target"
    );
    // An empty target is a broadcast.
    request(
        &mut sim,
        o,
        "owner",
        "sr-2",
        json!({"direction": "upload", "target": []}),
    );
    frame(&mut sim, o, "stream-2", "all");
    for c in [w, v] {
        assert!(frames_of(&sim, c).contains(&"#stream-2#all".to_owned()));
    }
    assert_eq!(sim.log_lines.len(), 1 + 2, "open, request... and the frame");
    // A late joiner learns the target from its welcome.
    sim.gw
        .handle_input(sim.now(), Input::Disconnected { conn: v });
    sim.pump();
    let v = sim.join("verifier-token");
    let streams = sim.take(v)[0]["payload"]["active_streams"].clone();
    assert_eq!(streams[0]["target"], json!(["verifier"]));
}

#[test]
fn a_close_of_a_stream_the_gateway_never_opened_is_forwarded() {
    let (mut sim, o, w, v) = ownership();
    // Participants negotiating a stream between themselves (the reference's scenario 12).
    let mut open = envelope(
        "peer-open",
        "owner",
        "stream/open",
        Some(&["writer"]),
        json!({"stream_id": "stream-123", "encoding": "text"}),
    );
    open["correlation_id"] = json!(["trigger"]);
    sim.send_and_settle(o, &open);
    let mut close = envelope(
        "peer-close",
        "owner",
        "stream/close",
        Some(&["writer"]),
        json!({"reason": "complete"}),
    );
    close["correlation_id"] = json!(["peer-open"]);
    sim.send_and_settle(o, &close);
    for c in [w, v] {
        let kinds: Vec<_> = sim.take(c).iter().map(|e| e["kind"].clone()).collect();
        assert_eq!(kinds, vec![json!("stream/open"), json!("stream/close")]);
    }
    let e = sim.take(o);
    assert!(e.iter().all(|e| e["kind"] != "system/error"), "{e:?}");
}

#[test]
fn a_snapshot_keeps_writers_targets_and_owners() {
    let (mut sim, o, w, v) = ownership();
    request(
        &mut sim,
        o,
        "owner",
        "sr-1",
        json!({"direction": "upload", "target": ["verifier"]}),
    );
    op(
        &mut sim,
        o,
        "owner",
        "g",
        "stream/grant-write",
        json!({"stream_id": "stream-1", "participant_id": "writer"}),
    );
    for c in [w, v] {
        sim.take(c);
    }
    sim.pump();
    let snap = sim.gw.snapshot().unwrap();
    let config = mew_core::gateway::SpaceConfig::from_yaml(OWNERSHIP).unwrap();
    let restored = mew_core::gateway::Gateway::restore(
        config,
        &snap,
        Box::new(mew_core::ids::IdGen::new(3)),
        None,
    )
    .unwrap();
    assert_eq!(
        restored.snapshot().unwrap(),
        snap,
        "restores to the same state"
    );
    sim.gw = restored;
    // The restored space still knows who may write and where frames go.
    frame(&mut sim, w, "stream-1", "after-restore");
    assert!(sim.take(w).iter().all(|e| e["kind"] != "system/error"));
    assert_eq!(frames_of(&sim, v), vec!["#stream-1#after-restore"]);
    let late = sim.join("verifier-token");
    let st = &sim.take(late)[0]["payload"]["active_streams"][0];
    assert_eq!(st["authorized_writers"], json!(["owner", "writer"]));
    assert_eq!(st["target"], json!(["verifier"]));
}

#[test]
fn frames_written_to_a_connection_count_as_a_sign_of_life() {
    // A ping queued behind a long burst is answered late; the burst going out shows the
    // peer is reading all the same.
    let mut sim = Sim::from_yaml(SPACE);
    let (h, a, _s) = joined(&mut sim);
    sim.set_draining(a, false);
    for step in 0..12 {
        sim.advance(Duration::from_secs(10));
        let now = sim.now();
        sim.gw.handle_input(now, Input::Pong { conn: h });
        // `a` never answers a ping, but its socket keeps taking frames.
        sim.gw.handle_input(
            now,
            Input::Sent {
                conn: a,
                frames: 1,
                bytes: 100,
            },
        );
        assert!(sim.closed(a).is_none(), "closed at step {step}");
    }
    // Once nothing more is written, the idle timeout applies.
    sim.advance(Duration::from_secs(91));
    assert_eq!(sim.closed(a).unwrap().0, 1001);
}
