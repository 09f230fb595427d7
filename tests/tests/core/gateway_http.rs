//! HTTP injection and polling, virtual participants, audit records.

use mew_core::gateway::{AuditFile, Gateway, SpaceConfig};
use mew_core::gateway::{Bearer, Input};
use mew_tests::fixtures::{SPACE, space_with};
use mew_tests::sim::{EPOCH, Sim, envelope};
use serde_json::{Value, json};

fn body(e: &mew_core::gateway::HttpError) -> Value {
    serde_json::from_str(&e.body_json).unwrap()
}

#[test]
fn http_post_statuses() {
    let mut sim = Sim::from_yaml(SPACE);
    let h = sim.join("human-token");
    sim.take(h);
    let now = sim.now();
    let chat = br#"{"kind":"chat","payload":{"text":"from a script"}}"#;

    let e = sim
        .gw
        .handle_input(
            now,
            Input::Post {
                participant: "agent",
                bearer: Bearer::None,
                body: chat,
            },
        )
        .posted()
        .expect("an answer")
        .unwrap_err();
    assert_eq!(e.status, 401);
    let e = sim
        .gw
        .handle_input(
            now,
            Input::Post {
                participant: "agent",
                bearer: Bearer::Token("human-token"),
                body: chat,
            },
        )
        .posted()
        .expect("an answer")
        .unwrap_err();
    assert_eq!(e.status, 403);
    assert_eq!(body(&e)["error"], "forbidden");
    let e = sim
        .gw
        .handle_input(
            now,
            Input::Post {
                participant: "nobody",
                bearer: Bearer::Token("agent-token"),
                body: chat,
            },
        )
        .posted()
        .expect("an answer")
        .unwrap_err();
    assert_eq!(e.status, 403);
    for bad in [
        &b"[1]"[..],
        b"not json",
        br#"{"payload":{}}"#,
        br#"{"kind":7}"#,
    ] {
        let e = sim
            .gw
            .handle_input(
                now,
                Input::Post {
                    participant: "agent",
                    bearer: Bearer::Token("agent-token"),
                    body: bad,
                },
            )
            .posted()
            .expect("an answer")
            .unwrap_err();
        assert_eq!(e.status, 400, "{}", String::from_utf8_lossy(bad));
    }
    let e = sim
        .gw
        .handle_input(
            now,
            Input::Post {
                participant: "agent",
                bearer: Bearer::Token("agent-token"),
                body: br#"{"kind":"mcp/request","payload":{"method":"tools/call"}}"#,
            },
        )
        .posted()
        .expect("an answer")
        .unwrap_err();
    assert_eq!(e.status, 403);
    let b = body(&e);
    assert_eq!(b["error"], "capability_violation");
    assert_eq!(b["attempted_kind"], "mcp/request");
    assert_eq!(b["your_capabilities"][0], json!({"kind": "mcp/proposal"}));
    let e = sim
        .gw
        .handle_input(
            now,
            Input::Post {
                participant: "agent",
                bearer: Bearer::Token("agent-token"),
                body: br#"{"kind":"chat","from":"human"}"#,
            },
        )
        .posted()
        .expect("an answer")
        .unwrap_err();
    assert_eq!(
        (e.status, body(&e)["error"].clone()),
        (403, json!("identity_mismatch"))
    );
    let e = sim
        .gw
        .handle_input(
            now,
            Input::Post {
                participant: "agent",
                bearer: Bearer::Token("agent-token"),
                body: br#"{"kind":"system/presence"}"#,
            },
        )
        .posted()
        .expect("an answer")
        .unwrap_err();
    assert_eq!(
        (e.status, body(&e)["error"].clone()),
        (400, json!("reserved_kind"))
    );
    sim.pump();
    assert!(sim.take(h).is_empty(), "nothing refused was delivered");

    let ok = sim
        .gw
        .handle_input(
            now,
            Input::Post {
                participant: "agent",
                bearer: Bearer::Token("agent-token"),
                body: chat,
            },
        )
        .posted()
        .expect("an answer")
        .unwrap();
    assert_eq!(ok.timestamp, now.rfc3339());
    let answer: Value = serde_json::from_str(&ok.body_json()).unwrap();
    assert_eq!(
        answer,
        json!({"id": ok.id, "status": "accepted", "timestamp": ok.timestamp})
    );
    sim.pump();
    let got = sim.take(h);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["from"], "agent");
    assert_eq!(got[0]["id"], ok.id.as_str());
    assert_eq!(got[0]["payload"]["text"], "from a script");
}

#[test]
fn http_history_polling() {
    let mut sim = Sim::from_yaml(&space_with("  delivery: addressed\n  history_size: 4"));
    let h = sim.join("human-token");
    let s = sim.join("service-token");
    sim.send_and_settle(
        h,
        &envelope("to-s", "human", "chat", Some(&["service"]), json!({"n": 1})),
    );
    sim.send_and_settle(h, &envelope("all", "human", "chat", None, json!({"n": 2})));
    sim.send_and_settle(
        s,
        &envelope("to-h", "service", "chat", Some(&["human"]), json!({"n": 3})),
    );
    let ids = |v: Vec<bytes::Bytes>| -> Vec<String> {
        v.iter()
            .map(|b| {
                serde_json::from_slice::<Value>(b).unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    // The agent (never connected) sees only what was for everyone.
    let agent_view = ids(sim
        .gw
        .http_messages("agent", Some("agent-token"), None)
        .unwrap());
    assert!(agent_view.contains(&"all".to_owned()));
    assert!(!agent_view.contains(&"to-s".to_owned()) && !agent_view.contains(&"to-h".to_owned()));
    let service_view = ids(sim
        .gw
        .http_messages("service", Some("service-token"), Some("to-s"))
        .unwrap());
    assert_eq!(service_view, vec!["all", "to-h"]);
    assert_eq!(
        sim.gw
            .http_messages("service", None, None)
            .unwrap_err()
            .status,
        401
    );
    assert_eq!(
        sim.gw
            .http_messages("service", Some("agent-token"), None)
            .unwrap_err()
            .status,
        403
    );
    let later = (sim.now() + std::time::Duration::from_secs(1)).rfc3339();
    assert!(
        sim.gw
            .http_messages("human", Some("human-token"), Some(&later))
            .unwrap()
            .is_empty()
    );
    // Bounded: only the last 4 envelopes are kept.
    for i in 0..10 {
        sim.send_and_settle(
            h,
            &envelope(&format!("b{i}"), "human", "chat", None, json!({})),
        );
    }
    assert_eq!(sim.gw.health().history_len, 4);
    assert_eq!(
        ids(sim
            .gw
            .http_messages("agent", Some("agent-token"), None)
            .unwrap()),
        vec!["b6", "b7", "b8", "b9"]
    );
}

#[test]
fn virtual_participant_logs_and_acts_over_http() {
    let mut sim = Sim::from_yaml(SPACE);
    let h = sim.join("human-token");
    sim.take(h);
    sim.log_lines.clear();
    sim.send_and_settle(
        h,
        &envelope("c1", "human", "chat", None, json!({"text": "to the log"})),
    );
    assert_eq!(sim.log_lines.len(), 1);
    let (path, line) = &sim.log_lines[0];
    assert_eq!(path, "logs/log.jsonl");
    assert!(line.ends_with(b"\n"));
    let v: Value = serde_json::from_slice(line).unwrap();
    assert_eq!(v["id"], "c1");
    let ok = sim
        .gw
        .handle_input(
            sim.now(),
            Input::Post {
                participant: "log",
                bearer: Bearer::Token("log-token"),
                body: br#"{"kind":"chat","payload":{"text":"hi"}}"#,
            },
        )
        .posted()
        .expect("an answer");
    assert!(ok.is_ok());
    sim.pump();
    assert_eq!(sim.received_kind(h, "chat").last().unwrap()["from"], "log");
    let infos = sim.gw.participants();
    let log = infos.iter().find(|p| p.id == "log").unwrap();
    assert!(log.online && log.is_virtual);
    assert!(!infos.iter().find(|p| p.id == "agent").unwrap().online);
}

fn keys(line: &str) -> Vec<String> {
    // Top-level keys in textual order.
    let v: Value = serde_json::from_str(line).unwrap();
    let mut found: Vec<(usize, String)> = v
        .as_object()
        .unwrap()
        .keys()
        .map(|k| (line.find(&format!("\"{k}\":")).unwrap(), k.clone()))
        .collect();
    found.sort();
    found.into_iter().map(|(_, k)| k).collect()
}

#[test]
fn audit_lines_follow_the_reference_layout() {
    let mut sim = Sim::from_yaml(SPACE);
    let h = sim.join("human-token");
    let a = sim.join("agent-token");
    sim.audits.clear();
    sim.send_and_settle(
        a,
        &envelope("ok-1", "agent", "chat", None, json!({"text": "x"})),
    );
    sim.send_and_settle(
        a,
        &envelope("bad-1", "agent", "mcp/request", None, json!({})),
    );
    let _ = h;
    // A `delivered` record is one line per recipient.
    let lines: Vec<(AuditFile, String, String)> = sim
        .audits
        .iter()
        .map(|(file, l)| {
            let v: Value = serde_json::from_str(l).expect("each line is one JSON object");
            (*file, v["event"].as_str().unwrap().to_owned(), l.clone())
        })
        .collect();
    let decision = lines.iter().find(|l| l.1 == "capability_check").unwrap();
    assert_eq!(decision.0.file_name(), "capability-decisions.jsonl");
    assert_eq!(
        keys(&decision.2),
        [
            "timestamp",
            "event",
            "envelope_id",
            "participant",
            "space_id",
            "result",
            "required_capability",
            "matched_capability",
            "granted_capabilities"
        ]
    );
    let d: Value = serde_json::from_str(&decision.2).unwrap();
    assert_eq!(
        (d["result"].as_str(), d["required_capability"].as_str()),
        (Some("allowed"), Some("chat"))
    );
    assert_eq!(d["matched_capability"], json!({"kind": "chat"}));
    let denied = lines
        .iter()
        .filter(|l| l.1 == "capability_check")
        .nth(1)
        .unwrap();
    let d: Value = serde_json::from_str(&denied.2).unwrap();
    assert_eq!(d["result"], "denied");
    assert!(d.get("matched_capability").is_none());

    let received = lines.iter().find(|l| l.1 == "received").unwrap();
    assert_eq!(received.0.file_name(), "envelope-history.jsonl");
    assert_eq!(
        keys(&received.2),
        [
            "timestamp",
            "event",
            "id",
            "envelope",
            "participant",
            "space_id",
            "direction",
            "transport"
        ]
    );
    let r: Value = serde_json::from_str(&received.2).unwrap();
    assert_eq!(
        (r["direction"].as_str(), r["transport"].as_str()),
        (Some("inbound"), Some("websocket"))
    );
    assert_eq!(r["envelope"]["id"], "ok-1");
    assert_eq!(r["space_id"], "test-space");
    // One delivered record per recipient: human, agent and the virtual log.
    let delivered: Vec<Value> = lines
        .iter()
        .filter(|l| l.1 == "delivered")
        .map(|l| serde_json::from_str(&l.2).unwrap())
        .filter(|v: &Value| v["id"] == "ok-1")
        .collect();
    let mut who: Vec<_> = delivered
        .iter()
        .map(|v| v["participant"].as_str().unwrap().to_owned())
        .collect();
    who.sort();
    assert_eq!(who, ["agent", "human", "log"]);
    assert!(delivered.iter().all(|v| v["direction"] == "outbound"));
    assert_eq!(
        delivered
            .iter()
            .find(|v| v["participant"] == "log")
            .unwrap()["transport"],
        "virtual"
    );
    let rejected = lines.iter().find(|l| l.1 == "rejected").unwrap();
    assert_eq!(
        keys(&rejected.2),
        [
            "timestamp",
            "event",
            "id",
            "envelope",
            "participant",
            "space_id",
            "direction",
            "transport",
            "metadata"
        ]
    );
    let r: Value = serde_json::from_str(&rejected.2).unwrap();
    assert_eq!(r["metadata"]["error"], "capability_violation");
    assert_eq!(r["id"], "bad-1");
}

#[test]
fn audit_switches_are_respected() {
    let yaml = format!(
        "{SPACE}logging: {{enabled: true, envelope_history: false, capability_decisions: true}}\n"
    );
    let mut sim = Sim::from_yaml(&yaml);
    let a = sim.join("agent-token");
    sim.send_and_settle(a, &envelope("x", "agent", "chat", None, json!({})));
    assert!(!sim.audits.is_empty());
    assert!(
        sim.audits
            .iter()
            .all(|(file, _)| *file == AuditFile::CapabilityDecisions)
    );

    let mut cfg = SpaceConfig::from_yaml(SPACE).unwrap();
    cfg.logging = mew_core::gateway::LoggingConfig::OFF;
    let mut gw = Gateway::new(cfg, 1, Box::new(mew_core::ids::IdGen::new(2)), None);
    let c = gw
        .handle_input(
            EPOCH,
            Input::Connected {
                bearer: Bearer::Token("agent-token"),
            },
        )
        .conn()
        .expect("a connection");
    gw.handle_input(
        EPOCH,
        Input::Frame {
            conn: c,
            frame: envelope("y", "agent", "chat", None, json!({}))
                .to_string()
                .into(),
        },
    );
    while gw.poll_output().is_some() {}
    assert!(gw.poll_audit(|_| Vec::new()).is_none());
}

/// The reference's scripts: a participant with an `output_log` and no `auto_connect`
/// (`lazy`), one held from the start (`held`), and one that invites.
const SCRIPTED: &str = r#"
space: {id: scripted, name: Scripted}
participants:
  admin: {tokens: [admin-token], capabilities: [{kind: chat}, {kind: space/invite}, {kind: "stream/*"}], output_log: logs/admin.jsonl}
  held: {tokens: [held-token], capabilities: [{kind: chat}], output_log: logs/held.jsonl, auto_connect: true}
  limited: {tokens: [limited-token], capabilities: [{kind: chat}], output_log: logs/limited.jsonl, auto_connect: true}
  watcher: {tokens: [watcher-token], capabilities: [{kind: chat}]}
"#;

fn lines_of(sim: &Sim, path: &str) -> Vec<Value> {
    sim.log_lines
        .iter()
        .filter(|(p, _)| p == path)
        .map(|(_, l)| serde_json::from_slice(l).unwrap())
        .collect()
}

#[test]
fn participants_held_by_the_gateway_are_welcomed_into_their_logs() {
    let mut sim = Sim::from_yaml(SCRIPTED);
    // Held from the start: welcomed when the server starts the space.
    sim.gw.handle_input(sim.now(), Input::WelcomeHeld);
    sim.pump();
    let held = lines_of(&sim, "logs/held.jsonl");
    assert_eq!(held.len(), 1);
    assert_eq!(held[0]["kind"], "system/welcome");
    assert_eq!(held[0]["payload"]["you"]["id"], "held");
    assert!(
        lines_of(&sim, "logs/admin.jsonl").is_empty(),
        "not held yet"
    );
    let w = sim.join("watcher-token");
    sim.take(w);
    // A stream is open before `admin` first posts: its welcome lists it.
    let now = sim.now();
    let opened = sim
        .gw
        .handle_input(
            now,
            Input::Post {
                participant: "held",
                bearer: Bearer::Token("held-token"),
                body: br#"{"kind":"chat","payload":{"text":"x"}}"#,
            },
        )
        .posted()
        .expect("an answer")
        .unwrap();
    assert_eq!(body_of(&opened)["status"], "accepted");
    let ok = sim
        .gw
        .handle_input(
            now,
            Input::Post {
                participant: "admin",
                bearer: Bearer::Token("admin-token"),
                body: br#"{"kind":"stream/request","payload":{"direction":"upload"}}"#,
            },
        )
        .posted()
        .expect("an answer")
        .unwrap();
    let answer = body_of(&ok);
    assert_eq!(answer["status"], "stream_opened");
    assert_eq!(answer["stream_id"], "stream-1");
    sim.pump();
    let admin = lines_of(&sim, "logs/admin.jsonl");
    assert_eq!(admin[0]["kind"], "system/welcome", "{admin:?}");
    assert_eq!(admin[0]["payload"]["you"]["id"], "admin");
    let kinds: Vec<_> = admin.iter().map(|l| l["kind"].clone()).collect();
    assert_eq!(
        kinds,
        vec![
            json!("system/welcome"),
            json!("stream/request"),
            json!("stream/open")
        ]
    );
    // Others saw it join.
    let joined = sim.received_kind(w, "system/presence");
    assert_eq!(joined[0]["payload"]["event"], "join");
    assert_eq!(joined[0]["payload"]["participant"]["id"], "admin");
    assert!(
        sim.gw
            .participants()
            .iter()
            .any(|p| p.id == "admin" && p.online)
    );
    // From now on it receives what is sent to everyone.
    sim.send_and_settle(
        w,
        &envelope("c-1", "watcher", "chat", None, json!({"text": "hi"})),
    );
    assert_eq!(
        lines_of(&sim, "logs/admin.jsonl").last().unwrap()["id"],
        "c-1"
    );
}

fn body_of(ok: &mew_core::gateway::HttpAccepted) -> Value {
    serde_json::from_str(&ok.body_json()).unwrap()
}

#[test]
fn http_refusals_answer_as_the_reference_and_reach_the_senders_log() {
    let mut sim = Sim::from_yaml(SCRIPTED);
    let now = sim.now();
    let e = sim
        .gw
        .handle_input(
            now,
            Input::Post {
                participant: "limited",
                bearer: Bearer::Token("limited-token"),
                body: br#"{"id":"reg-1","kind":"system/register","payload":{"capabilities":[]}}"#,
            },
        )
        .posted()
        .expect("an answer")
        .unwrap_err();
    assert_eq!(e.status, 400);
    assert!(
        e.body_json
            .contains("system/register is reserved for the gateway. Use capability/grant instead."),
        "{}",
        e.body_json
    );
    let e = sim
        .gw
        .handle_input(
            now,
            Input::Post {
                participant: "limited",
                bearer: Bearer::Token("limited-token"),
                body: br#"{"id":"mcp-1","kind":"mcp/request","payload":{}}"#,
            },
        )
        .posted()
        .expect("an answer")
        .unwrap_err();
    assert_eq!(e.status, 403);
    assert_eq!(body(&e)["error"], "capability_violation");
    assert_eq!(
        body(&e)["message"],
        "Participant limited lacks capability for mcp/request"
    );
    sim.pump();
    let log = lines_of(&sim, "logs/limited.jsonl");
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(log[0]["kind"], "system/error");
    assert_eq!(log[0]["correlation_id"], json!(["reg-1"]));
    assert_eq!(
        log[0]["payload"]["message"],
        "system/register is reserved for the gateway. Use capability/grant instead."
    );
    assert_eq!(log[1]["payload"]["error"], "capability_violation");
    assert_eq!(log[1]["payload"]["attempted_kind"], "mcp/request");
    // No backticks or other markup in any message.
    for e in &log {
        assert!(!e["payload"]["message"].as_str().unwrap().contains('`'));
    }
}

#[test]
fn invites_over_http_answer_with_the_token() {
    let mut sim = Sim::from_yaml(SCRIPTED);
    sim.gw.set_connection_url("ws://127.0.0.1:9/");
    let w = sim.join("watcher-token");
    sim.take(w);
    let now = sim.now();
    let post = |sim: &mut Sim, body: &str| {
        sim.gw
            .handle_input(
                now,
                Input::Post {
                    participant: "admin",
                    bearer: Bearer::Token("admin-token"),
                    body: body.as_bytes(),
                },
            )
            .posted()
            .expect("an answer")
    };
    let ok = post(
        &mut sim,
        r#"{"id":"inv-1","kind":"space/invite","payload":{"participant_id":"new-agent","initial_capabilities":[{"kind":"chat"}],"reason":"testing"}}"#,
    )
    .unwrap();
    let a = body_of(&ok);
    assert_eq!(a["status"], "created");
    assert_eq!(a["participant_id"], "new-agent");
    assert_eq!(a["connection_url"], "ws://127.0.0.1:9/");
    let token = a["token"].as_str().unwrap().to_owned();
    sim.pump();
    let admin = lines_of(&sim, "logs/admin.jsonl");
    let ack = admin
        .iter()
        .find(|l| l["kind"] == "space/invite-ack")
        .unwrap();
    assert_eq!(ack["payload"]["token"], token.as_str());
    assert_eq!(ack["correlation_id"], json!(["inv-1"]));
    // The watcher saw `admin` arrive (its first post) and the invitation, no token.
    let seen = sim.take(w);
    let events: Vec<_> = seen.iter().map(|e| e["payload"]["event"].clone()).collect();
    assert_eq!(events, vec![json!("join"), json!("invited")]);
    let seen = &seen[1..];
    assert!(!seen[0].to_string().contains("token"));
    for held in lines_of(&sim, "logs/held.jsonl") {
        assert!(!held.to_string().contains(&token));
    }
    // The new participant posts with its token.
    let chat = sim
        .gw
        .handle_input(
            now,
            Input::Post {
                participant: "new-agent",
                bearer: Bearer::Token(&token),
                body: br#"{"kind":"chat","payload":{"text":"hello"}}"#,
            },
        )
        .posted()
        .expect("an answer")
        .unwrap();
    assert_eq!(body_of(&chat)["status"], "accepted");
    // Statuses of refusals: 409, 400, 400, and 403 for more than the inviter holds.
    for (body, status, needle) in [
        (
            r#"{"kind":"space/invite","payload":{"participant_id":"new-agent"}}"#,
            409,
            "\"already_exists\"",
        ),
        (
            r#"{"kind":"space/invite","payload":{"participant_id":"watcher"}}"#,
            409,
            "\"already_exists\"",
        ),
        (
            r#"{"kind":"space/invite","payload":{"participant_id":"../../../etc/passwd"}}"#,
            400,
            "invalid characters",
        ),
        (
            r#"{"kind":"space/invite","payload":{"participant_id":"foo/bar"}}"#,
            400,
            "invalid characters",
        ),
        (r#"{"kind":"space/invite"}"#, 400, "participant_id"),
        (
            r#"{"kind":"space/invite","payload":{"participant_id":"x","initial_capabilities":[{"kind":"mcp/proposal"}]}}"#,
            403,
            "grant_exceeds_own_capabilities",
        ),
    ] {
        let e = post(&mut sim, body).unwrap_err();
        assert_eq!(e.status, status, "{body}: {}", e.body_json);
        assert!(e.body_json.contains(needle), "{body}: {}", e.body_json);
    }
}

#[test]
fn gateway_broadcasts_carry_their_envelope_in_the_audit() {
    let mut sim = Sim::from_yaml(SCRIPTED);
    let w = sim.join("watcher-token");
    sim.audits.clear();
    let now = sim.now();
    sim.gw
        .handle_input(
            now,
            Input::Post {
                participant: "admin",
                bearer: Bearer::Token("admin-token"),
                body: br#"{"kind":"stream/request","payload":{"direction":"upload"}}"#,
            },
        )
        .posted()
        .expect("an answer")
        .unwrap();
    sim.pump();
    let _ = w;
    let history: Vec<&String> = sim
        .audits
        .iter()
        .filter(|(f, _)| *f == AuditFile::EnvelopeHistory)
        .map(|(_, l)| l)
        .collect();
    let opens: Vec<&&String> = history
        .iter()
        .filter(|l| l.contains("\"kind\":\"stream/open\""))
        .collect();
    assert_eq!(
        opens.len(),
        1,
        "one record holds the envelope: {history:#?}"
    );
    let v: Value = serde_json::from_str(opens[0]).unwrap();
    assert_eq!(v["event"], "delivered");
    assert_eq!(
        v["envelope"]["payload"]["authorized_writers"],
        json!(["admin"])
    );
    // Every recipient still has its own `delivered` line.
    let id = v["id"].as_str().unwrap();
    let delivered = history
        .iter()
        .filter(|l| {
            l.contains("\"event\":\"delivered\"") && l.contains(&format!("\"id\":\"{id}\""))
        })
        .count();
    assert_eq!(delivered, 4, "admin, held, limited, watcher");
}
