//! Participant controls through the real gateway core: pause with a timeout enforced by
//! both ends and resumed automatically, request-status, forget, compact, clear, restart,
//! and shutdown after which the gateway refuses the participant until it rejoins.

use mew_core::participant::{
    ClientState, Control, Event, ForgetDirection, ParticipantConfig, RequestError, RequestOptions,
    SendError, ToolSpec,
};
use mew_tests::sim::participants::behaviour::{control_handler, tool_handler};
use mew_tests::sim::participants::{NodeId, SPACE, World};
use serde_json::{Value, json};
use std::time::Duration;

fn cfg(w: &World, id: &str) -> ParticipantConfig {
    let mut c = w.config_for(id, &format!("{id}-token"));
    c.discovery.auto = false;
    c
}

fn space(seed: u64) -> (World, NodeId, NodeId) {
    let mut w = World::from_yaml(SPACE, seed, (1, 50));
    let c = cfg(&w, "service");
    let service = w.join_with("service", c);
    let c = cfg(&w, "human");
    let human = w.join_with("human", c);
    w.run_until_quiet();
    (w, service, human)
}

fn chat_frame(from: &str, id: &str, text: &str) -> String {
    json!({"protocol": "mew/v0.4", "id": id, "from": from, "kind": "chat",
        "payload": {"text": text}})
    .to_string()
}

fn gateway_errors(w: &World, n: NodeId) -> Vec<Value> {
    w.events(n)
        .iter()
        .filter_map(|e| match e {
            Event::GatewayError { payload } => Some(payload.clone()),
            _ => None,
        })
        .collect()
}

fn statuses(w: &World, n: NodeId, from: &str) -> Vec<Value> {
    w.node(n)
        .received_kind("participant/status")
        .into_iter()
        .filter(|s| s["from"] == from)
        .collect()
}

#[test]
fn pause_with_timeout_is_enforced_by_both_ends_and_resumes_automatically() {
    let (mut w, service, human) = space(21);
    w.act(service, |p, _| {
        p.register_tool(ToolSpec {
            name: "echo".into(),
            description: None,
            input_schema: None,
        })
    })
    .unwrap();
    w.behave(service, tool_handler(|_, args| Ok(args.clone())));
    let pause = Control::Pause {
        reason: "rate_limit".into(),
        timeout: Some(Duration::from_secs(30)),
    };
    let pause_id = w
        .act(human, |p, now| p.send_control(now, "service", &pause))
        .unwrap();
    w.run_until_quiet();
    let paused_at = w.now();
    let st = w.p(service).pause_state().cloned().expect("paused");
    assert_eq!(
        (st.by.as_str(), st.reason.as_str()),
        ("human", "rate_limit")
    );
    let s = statuses(&w, human, "service");
    assert_eq!(s.last().unwrap()["payload"]["status"], "paused");
    assert_eq!(s.last().unwrap()["correlation_id"], json!([pause_id]));

    // The participant refuses locally...
    assert!(matches!(
        w.act(service, |p, now| p.chat(now, "hello", vec![])),
        Err(SendError::Paused { .. })
    ));
    // ...and the gateway refuses the same envelope written on the socket by hand.
    w.send_raw(service, chat_frame("service", "sneaky-1", "sneaking out"));
    w.run_until_quiet();
    let errs = gateway_errors(&w, service);
    assert_eq!(errs.last().unwrap()["error"], "participant_paused");
    assert!(
        w.node(human).received_kind("chat").is_empty(),
        "nothing from a paused participant reaches others"
    );

    // Answers to requests are exempt at both ends.
    let c = cfg(&w, "caller");
    let caller = w.join_with("caller", c);
    let req = w
        .act(caller, |p, now| {
            p.mcp_request(
                now,
                vec!["service".into()],
                json!({"method": "tools/call", "params": {"name": "echo", "arguments": {"x": 1}}}),
                RequestOptions::default(),
            )
        })
        .unwrap();
    assert!(w.run_until(Duration::from_secs(5), |w| {
        w.outcome(caller, &req).is_some()
    }));
    assert!(w.outcome(caller, &req).unwrap().is_ok());

    // The timeout resumes the participant, which documents it with participant/resume.
    assert!(w.run_until(Duration::from_secs(60), |w| {
        w.events(service)
            .iter()
            .any(|e| matches!(e, Event::Resumed { automatic: true }))
    }));
    let resumed_after = w.now().saturating_since(paused_at);
    assert!(
        resumed_after <= Duration::from_secs(30) && resumed_after >= Duration::from_secs(29),
        "{resumed_after:?}"
    );
    assert!(w.p(service).pause_state().is_none());
    w.run_until_quiet();
    let resumes = w.node(human).received_kind("participant/resume");
    assert_eq!(resumes.len(), 1);
    assert_eq!(resumes[0]["from"], "service");
    assert_eq!(resumes[0]["payload"]["reason"], "timeout");
    assert_eq!(resumes[0]["correlation_id"], json!([pause_id]));
    assert_eq!(
        statuses(&w, human, "service").last().unwrap()["payload"]["status"],
        "active"
    );
    // The gateway lifted its pause too: chat flows again.
    w.act(service, |p, now| p.chat(now, "back", vec![]))
        .unwrap();
    w.run_until_quiet();
    let chats = w.node(human).received_kind("chat");
    assert_eq!(chats.len(), 1);
    assert_eq!(chats[0]["payload"]["text"], "back");
    assert_eq!(gateway_errors(&w, service).len(), 1);
}

#[test]
fn explicit_resume_lifts_the_pause_at_both_ends() {
    let (mut w, service, human) = space(22);
    let pause = Control::Pause {
        reason: "review".into(),
        timeout: None,
    };
    w.act(human, |p, now| p.send_control(now, "service", &pause))
        .unwrap();
    w.run_for(Duration::from_secs(120));
    assert!(
        w.p(service).pause_state().is_some(),
        "no timeout: stays paused"
    );
    w.act(human, |p, now| {
        p.send_control(now, "service", &Control::Resume)
    })
    .unwrap();
    w.run_until_quiet();
    assert!(w.p(service).pause_state().is_none());
    assert!(
        w.events(service)
            .iter()
            .any(|e| matches!(e, Event::Resumed { automatic: false }))
    );
    w.send_raw(service, chat_frame("service", "c-1", "raw but allowed"));
    w.run_until_quiet();
    assert_eq!(w.node(human).received_kind("chat").len(), 1);
    assert!(gateway_errors(&w, service).is_empty());
}

#[test]
fn request_status_forget_compact_clear_and_restart() {
    let (mut w, service, human) = space(23);
    w.behave(service, control_handler(Duration::from_millis(500), 700));
    w.act(service, |p, now| p.set_context_usage(now, 5_000, 40));

    let ask = |w: &mut World, c: Control| {
        let id = w
            .act(human, |p, now| p.send_control(now, "service", &c))
            .unwrap();
        w.run_until_quiet();
        let s: Vec<Value> = statuses(w, human, "service")
            .into_iter()
            .filter(|s| s["correlation_id"] == json!([id]))
            .collect();
        (id, s)
    };

    let (_, s) = ask(&mut w, Control::RequestStatus { fields: vec![] });
    assert_eq!(s.len(), 1);
    assert_eq!(s[0]["payload"]["status"], "active");
    assert_eq!(s[0]["payload"]["tokens"], 5_000);
    assert_eq!(s[0]["payload"]["messages_in_context"], 40);

    let (_, s) = ask(
        &mut w,
        Control::Forget {
            direction: ForgetDirection::Oldest,
            entries: Some(1),
        },
    );
    assert_eq!(s.len(), 1);
    assert_eq!(s[0]["payload"]["freed_tokens"], 700);
    assert_eq!(s[0]["payload"]["tokens"], 4_300);

    let (compact_id, s) = ask(
        &mut w,
        Control::Compact {
            reason: Some("token_pressure".into()),
            target_tokens: Some(1_000),
        },
    );
    let states: Vec<&Value> = s.iter().map(|s| &s["payload"]["status"]).collect();
    assert_eq!(states, ["compacting", "compacted"]);
    let done = w.node(human).received_kind("participant/compact-done");
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["correlation_id"], json!([compact_id]));
    assert_eq!(done[0]["payload"]["freed_tokens"], 700);
    assert_eq!(s[1]["payload"]["tokens"], 3_600);

    let (_, s) = ask(&mut w, Control::Clear);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0]["payload"]["status"], "cleared");
    assert_eq!(s[0]["payload"]["tokens"], 0);

    // A restart ends the service's outstanding work: a tool call it was still running is
    // answered with an error, and the pauser-independent status says `restarted`.
    w.act(service, |p, _| {
        p.register_tool(ToolSpec {
            name: "long".into(),
            description: None,
            input_schema: None,
        })
    })
    .unwrap();
    w.behave(
        service,
        mew_tests::sim::participants::behaviour::slow_tool_handler(
            Duration::from_secs(60),
            |_, _| Ok(json!("too late")),
        ),
    );
    let c = cfg(&w, "caller");
    let caller = w.join_with("caller", c);
    let pending = w
        .act(caller, |p, now| {
            p.mcp_request(
                now,
                vec!["service".into()],
                json!({"method": "tools/call", "params": {"name": "long"}}),
                RequestOptions::default(),
            )
        })
        .unwrap();
    // Not run_until_quiet: the handler's scheduled answer would count as pending work.
    w.run_for(Duration::from_secs(1));
    assert_eq!(w.p(service).pending_calls().count(), 1);
    let (_, s) = ask(&mut w, Control::Restart);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0]["payload"]["status"], "restarted");
    assert_eq!(s[0]["payload"]["tokens"], 0);
    assert_eq!(w.p(service).pending_calls().count(), 0);
    match w.outcome(caller, &pending) {
        Some(Err(RequestError::Rpc { message, .. })) => assert_eq!(message, "restart"),
        other => panic!("expected the call to fail with the restart, got {other:?}"),
    }
    // The call's handler finishing later sends nothing more.
    w.run_for(Duration::from_secs(90));
    assert_eq!(w.node(caller).received_kind("mcp/response").len(), 1);
}

#[test]
fn shutdown_then_the_gateway_refuses_until_rejoin() {
    let (mut w, service, human) = space(24);
    // The service takes two seconds to wind down.
    w.behave(service, control_handler(Duration::from_secs(2), 0));
    let id = w
        .act(human, |p, now| {
            p.send_control(now, "service", &Control::Shutdown)
        })
        .unwrap();
    w.run_for(Duration::from_millis(500));
    let s = statuses(&w, human, "service");
    assert_eq!(s.last().unwrap()["payload"]["status"], "shutting_down");
    // Meanwhile the gateway already holds the participant.
    w.send_raw(service, chat_frame("service", "late-1", "one more thing"));
    w.run_for(Duration::from_millis(500));
    assert_eq!(
        gateway_errors(&w, service).last().unwrap()["error"],
        "participant_shutdown"
    );
    // The application completes: acknowledgement, then the connection closes for good.
    w.run_for(Duration::from_secs(3));
    let acks = w.node(human).received_kind("chat/acknowledge");
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0]["correlation_id"], json!([id]));
    assert_eq!(acks[0]["payload"]["status"], "shutdown");
    assert_eq!(w.p(service).state(), ClientState::Closed);
    assert!(w.node(service).conn.is_none());
    assert!(matches!(
        w.act(service, |p, now| p.chat(now, "x", vec![])),
        Err(SendError::ShutDown)
    ));
    w.run_for(Duration::from_secs(60));
    assert_eq!(
        w.p(service).state(),
        ClientState::Closed,
        "no reconnect after shutdown"
    );
    let leaves: Vec<Value> = w
        .node(human)
        .received_kind("system/presence")
        .into_iter()
        .filter(|p| p["payload"]["event"] == "leave")
        .collect();
    assert_eq!(leaves.len(), 1);
    assert!(w.node(human).received_kind("chat").is_empty());

    // A fresh process for the same participant rejoins and may speak again.
    let c = cfg(&w, "service");
    let again = w.join_with("service", c);
    w.act(again, |p, now| p.chat(now, "I am back", vec![]))
        .unwrap();
    w.run_until_quiet();
    let chats = w.node(human).received_kind("chat");
    assert_eq!(chats.len(), 1);
    assert_eq!(chats[0]["payload"]["text"], "I am back");
    assert!(gateway_errors(&w, again).is_empty());
}

#[test]
fn a_paused_participant_refuses_locally_what_the_gateway_would_refuse() {
    // A reviewer paused by someone else: both ends must agree on what it may still send,
    // or the participant reports success for envelopes the gateway drops.
    let mut w = World::from_yaml(SPACE, 25, (1, 50));
    let c = cfg(&w, "agent");
    let agent = w.join_with("agent", c);
    let c = cfg(&w, "human");
    let human = w.join_with("human", c);
    let c = cfg(&w, "caller");
    let caller = w.join_with("caller", c);
    w.run_until_quiet();
    // The caller may not pause; grant it that from the human first.
    w.act(human, |p, now| {
        p.send(
            now,
            mew_core::participant::Draft::new(mew_core::envelope::Kind::CapabilityGrant)
                .to(["caller"])
                .payload(
                    json!({"recipient": "caller", "capabilities": [{"kind": "participant/pause"}]}),
                ),
        )
    })
    .unwrap();
    w.run_until_quiet();
    let proposal = w
        .act(agent, |p, now| {
            p.mcp_request(
                now,
                vec!["service".into()],
                json!({"method": "ping"}),
                RequestOptions::default(),
            )
        })
        .unwrap();
    let pause = Control::Pause {
        reason: "hold on".into(),
        timeout: None,
    };
    w.act(caller, |p, now| p.send_control(now, "human", &pause))
        .unwrap();
    w.run_until_quiet();
    assert!(w.p(human).pause_state().is_some());
    let mut accepted_locally = Vec::new();
    for kind in [
        "chat/acknowledge",
        "chat/cancel",
        "mcp/withdraw",
        "mcp/reject",
        "mcp/response",
        "reasoning/cancel",
        "capability/grant-ack",
        "participant/status",
        "participant/resume",
        "participant/compact-done",
        "stream/close",
        "chat",
    ] {
        let k = mew_core::envelope::Kind::from(kind);
        if w.p(human).can_send(&k, None) && w.p(human).config().pause_exempt_kinds.contains(&k) {
            accepted_locally.push(kind);
        }
    }
    // Rejecting while paused: whatever the participant answers, the gateway must agree.
    let local = w.act(human, |p, now| p.reject(now, proposal.as_str(), "later"));
    w.run_until_quiet();
    let refused = gateway_errors(&w, human)
        .iter()
        .any(|e| e["error"] == "participant_paused");
    assert!(
        !refused,
        "participant said {local:?} but the gateway refused; exempt locally: {accepted_locally:?}"
    );
    if local.is_ok() {
        assert!(w.outcome(agent, &proposal).is_some());
    } else {
        assert!(w.p(agent).is_pending(&proposal));
    }
}

#[test]
fn automatic_resume_sends_only_what_the_capabilities_allow() {
    // The agent may not send participant/resume; its autonomous resume must not earn it a
    // refusal, yet the pauser still learns it is active again.
    let mut w = World::from_yaml(SPACE, 26, (1, 50));
    let c = cfg(&w, "agent");
    let agent = w.join_with("agent", c);
    let c = cfg(&w, "human");
    let human = w.join_with("human", c);
    w.run_until_quiet();
    let pause = Control::Pause {
        reason: "breathe".into(),
        timeout: Some(Duration::from_secs(5)),
    };
    let pause_id = w
        .act(human, |p, now| p.send_control(now, "agent", &pause))
        .unwrap();
    assert!(w.run_until(Duration::from_secs(10), |w| {
        w.events(agent)
            .iter()
            .any(|e| matches!(e, Event::Resumed { automatic: true }))
    }));
    w.run_until_quiet();
    assert!(
        gateway_errors(&w, agent).is_empty(),
        "{:?}",
        gateway_errors(&w, agent)
    );
    let last = statuses(&w, human, "agent").pop().unwrap();
    assert_eq!(last["payload"]["status"], "active");
    assert_eq!(last["correlation_id"], json!([pause_id]));
    w.act(agent, |p, now| p.chat(now, "free again", vec![]))
        .unwrap();
    w.run_until_quiet();
    assert_eq!(w.node(human).received_kind("chat").len(), 1);
}

#[test]
fn a_participant_that_may_not_send_status_says_so_instead_of_answering() {
    let mut w = World::from_yaml(SPACE, 61, (1, 20));
    let human = w.join("human", "human-token");
    let caller = w.join("caller", "caller-token");
    w.run_until_quiet();
    let id = w
        .act(human, |p, now| {
            p.send_control(now, "caller", &Control::RequestStatus { fields: vec![] })
        })
        .unwrap();
    w.run_until_quiet();
    let said = w.events(caller).iter().find_map(|e| match e {
        Event::Invalid { id: about, reason } if reason.contains("participant/status") => {
            Some((about.clone(), reason.clone()))
        }
        _ => None,
    });
    let (about, reason) = said.expect("the caller says why it does not answer");
    assert_eq!(about, id);
    assert!(reason.contains("human"), "{reason}");
    // Nothing was sent to be refused.
    assert!(
        !w.events(caller)
            .iter()
            .any(|e| matches!(e, Event::GatewayError { .. })),
        "no refused status"
    );
}
