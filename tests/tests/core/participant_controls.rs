//! Participant controls: pause (with timeout), resume, request-status, forget, compact,
//! clear, restart, shutdown; only when addressed to us.

use crate::support;

use mew_core::participant::{
    ClientState, CompactOutcome, Control, Event, ForgetDirection, Input, RequestError,
    RequestOptions, SendError,
};
use serde_json::json;
use std::time::Duration;
use support::{ME, Script, all_caps, config};

fn control_id(s: &Script) -> String {
    s.events
        .iter()
        .rev()
        .find_map(|e| match e {
            Event::Control { id, .. } => Some(id.clone()),
            _ => None,
        })
        .unwrap()
}

#[test]
fn pause_refuses_non_exempt_and_auto_resumes() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    let pause = s.send_from(
        "boss",
        &[ME],
        "participant/pause",
        None,
        json!({"reason": "rate_limit", "timeout_seconds": 60}),
    );
    let st = s.sent_one("participant/status");
    assert_eq!(st["payload"]["status"], "paused");
    assert_eq!(st["correlation_id"], json!([pause]));
    assert!(st["payload"]["messages_in_context"].is_u64());
    assert!(
        matches!(s.events.last(), Some(Event::Control { control: Control::Pause { timeout: Some(t), .. }, .. }) if *t == Duration::from_secs(60))
    );
    assert!(matches!(
        s.p.chat(s.now, "hi", vec![]),
        Err(SendError::Paused { .. })
    ));
    assert!(matches!(
        s.p.mcp_request(
            s.now,
            vec!["x".into()],
            json!({"method": "tools/list"}),
            RequestOptions::default()
        ),
        Err(RequestError::Send(SendError::Paused { .. }))
    ));
    // Exempt kinds still go out.
    s.p.report_status(s.now, None).unwrap();
    assert_eq!(
        s.sent_one("participant/status")["payload"]["status"],
        "paused"
    );
    s.advance(59_999);
    assert!(s.p.pause_state().is_some());
    s.advance(1);
    assert!(s.p.pause_state().is_none());
    let resume = s.sent_of("participant/resume");
    assert_eq!(resume.len(), 1);
    assert_eq!(resume[0]["correlation_id"], json!([pause]));
    assert_eq!(
        s.sent_of("participant/status")[0]["payload"]["status"],
        "active"
    );
    assert!(
        s.events
            .iter()
            .any(|e| matches!(e, Event::Resumed { automatic: true }))
    );
    s.take_sent();
    assert!(s.p.chat(s.now, "back", vec![]).is_ok());
}

#[test]
fn resume_and_request_status() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    s.send_from(
        "boss",
        &[ME],
        "participant/pause",
        None,
        json!({"reason": "x"}),
    );
    assert_eq!(
        s.p.pause_state().unwrap().until,
        None,
        "no timeout, no automatic resume"
    );
    let r = s.send_from("boss", &[ME], "participant/resume", None, json!({}));
    assert!(s.p.pause_state().is_none());
    assert!(
        s.events
            .iter()
            .any(|e| matches!(e, Event::Resumed { automatic: false }))
    );
    let st: Vec<_> = s
        .take_sent()
        .into_iter()
        .filter(|e| e["kind"] == "participant/status")
        .collect();
    assert_eq!(st.last().unwrap()["payload"]["status"], "active");
    assert_eq!(st.last().unwrap()["correlation_id"], json!([r]));
    s.p.record_context_usage(s.now, 100, 4);
    let q = s.send_from(
        "boss",
        &[ME],
        "participant/request-status",
        None,
        json!({"fields": ["tokens"]}),
    );
    let st = s.sent_one("participant/status");
    assert_eq!(st["correlation_id"], json!([q]));
    assert_eq!(st["to"], json!(["boss"]));
    assert_eq!(st["payload"]["tokens"], 100);
    assert_eq!(st["payload"]["messages_in_context"], 4);
}

#[test]
fn controls_for_others_or_broadcast_are_ignored() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    s.send_from(
        "boss",
        &["other"],
        "participant/pause",
        None,
        json!({"reason": "x"}),
    );
    s.send_from(
        "boss",
        &[],
        "participant/pause",
        None,
        json!({"reason": "x"}),
    );
    s.send_from("boss", &[], "participant/shutdown", None, json!({}));
    assert!(s.p.pause_state().is_none());
    assert!(s.take_sent().is_empty());
    assert!(!s.events.iter().any(|e| matches!(e, Event::Control { .. })));
    // A malformed forget is reported, not acted on.
    s.send_from(
        "boss",
        &[ME],
        "participant/forget",
        None,
        json!({"direction": "sideways"}),
    );
    assert!(s.events.iter().any(|e| matches!(e, Event::Invalid { .. })));
}

#[test]
fn forget_compact_and_clear_complete_with_status() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    s.p.set_context_usage(s.now, 1000, 20);
    s.send_from(
        "boss",
        &[ME],
        "participant/forget",
        None,
        json!({"direction": "oldest", "entries": 5}),
    );
    let id = control_id(&s);
    assert!(matches!(
        s.p.pending_controls().next(),
        Some((
            _,
            Control::Forget {
                direction: ForgetDirection::Oldest,
                entries: Some(5)
            }
        ))
    ));
    s.take_sent();
    s.p.complete_forget(s.now, &id, 200, 5).unwrap();
    let st = s.sent_one("participant/status");
    assert_eq!(st["payload"]["messages_in_context"], 15);
    assert_eq!(st["payload"]["tokens"], 800);
    assert!(s.p.complete_forget(s.now, &id, 0, 0).is_err());

    let c = s.send_from(
        "boss",
        &[ME],
        "participant/compact",
        None,
        json!({"reason": "token_pressure", "target_tokens": 500}),
    );
    assert_eq!(
        s.sent_one("participant/status")["payload"]["status"],
        "compacting"
    );
    assert!(
        s.p.complete_clear(s.now, &c).is_err(),
        "wrong completion for a compact"
    );
    s.p.complete_compact(
        s.now,
        &c,
        CompactOutcome::Done {
            freed_tokens: 300,
            freed_messages: 5,
        },
    )
    .unwrap();
    let done = s.sent_of("participant/compact-done");
    assert_eq!(done[0]["correlation_id"], json!([c]));
    assert_eq!(done[0]["to"], json!(["boss"]));
    assert_eq!(done[0]["payload"]["freed_tokens"], 300);
    assert_eq!(
        s.sent_of("participant/status")[0]["payload"]["status"],
        "compacted"
    );
    assert_eq!(s.p.context_usage().tokens, 500);
    s.take_sent();
    // Skipped compactions still report compact-done.
    let c2 = s.send_from("boss", &[ME], "participant/compact", None, json!({}));
    s.p.complete_compact(
        s.now,
        &c2,
        CompactOutcome::Skipped {
            reason: Some("nothing".into()),
        },
    )
    .unwrap();
    let done = s.sent_of("participant/compact-done");
    assert_eq!(done[0]["payload"]["skipped"], true);
    s.take_sent();

    let cl = s.send_from("boss", &[ME], "participant/clear", None, json!(null));
    s.p.complete_clear(s.now, &cl).unwrap();
    let st = s.sent_one("participant/status");
    assert_eq!(st["payload"]["status"], "cleared");
    assert_eq!(st["payload"]["messages_in_context"], 0);
}

#[test]
fn restart_ends_outstanding_work() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    let req =
        s.p.mcp_request(
            s.now,
            vec!["x".into()],
            json!({"method": "tools/list"}),
            RequestOptions::default(),
        )
        .unwrap();
    let ctx = s.p.reasoning_start(s.now, "thinking", None).unwrap();
    s.send_from("boss", &[ME], "participant/restart", None, json!({}));
    let id = control_id(&s);
    s.take_sent();
    s.p.complete_restart(s.now, &id).unwrap();
    assert_eq!(
        s.completion(&req),
        Some(Err(RequestError::Cancelled("restart".into())))
    );
    assert!(!s.p.reasoning_active(&ctx));
    assert_eq!(
        s.sent_one("participant/status")["payload"]["status"],
        "restarted"
    );
}

#[test]
fn shutdown_acknowledges_and_closes_for_good() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    let sd = s.send_from("boss", &[ME], "participant/shutdown", None, json!({}));
    assert_eq!(
        s.sent_one("participant/status")["payload"]["status"],
        "shutting_down"
    );
    s.p.complete_shutdown(s.now, &sd).unwrap();
    let ack = s.sent_one("chat/acknowledge");
    assert_eq!(ack["correlation_id"], json!([sd]));
    assert_eq!(s.disconnects, ["shutdown"]);
    assert_eq!(s.p.state(), ClientState::Closed);
    assert_eq!(s.p.chat(s.now, "x", vec![]), Err(SendError::ShutDown));
    s.p.handle_input(s.now, Input::Disconnected { reason: "closed" });
    s.advance(120_000);
    assert_eq!(s.connects, 1, "no reconnect after shutdown");
}
