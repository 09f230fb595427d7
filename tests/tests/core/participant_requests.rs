//! Requests: routing (ADR-WCM), responses, errors, timeouts, reconnects and grants.

use crate::support;

use mew_core::participant::{
    ClientState, Event, Input, RequestError, RequestId, RequestOptions, RequestRoute, RouteReason,
    SendError,
};
use serde_json::json;
use support::{ME, Script, all_caps, config};

fn list() -> serde_json::Value {
    json!({"method": "tools/list"})
}

/// `tools/list` to `calc` with default options: the request most scenarios start from.
fn list_calc(s: &mut Script) -> Result<RequestId, RequestError> {
    s.p.mcp_request(
        s.now,
        vec!["calc".into()],
        list(),
        RequestOptions::default(),
    )
}

#[test]
fn direct_request_resolves_by_correlation() {
    let mut s = Script::joined(
        config(),
        all_caps(),
        &[("calc", json!([{"kind": "mcp/response"}]))],
    );
    s.take_sent();
    let id = list_calc(&mut s).unwrap();
    s.drain();
    let req = s.sent_one("mcp/request");
    assert_eq!(req["id"], id.as_str());
    assert_eq!(req["to"], json!(["calc"]));
    assert_eq!(req["from"], ME);
    assert_eq!(req["payload"]["jsonrpc"], "2.0");
    assert!(req["payload"]["id"].is_u64());
    assert!(s.events.iter().any(|e| matches!(
        e,
        Event::RouteDecision {
            route: RequestRoute::Request,
            reason: RouteReason::DirectAllowed,
            ..
        }
    )));
    // An unrelated response does not settle it.
    s.send_from(
        "calc",
        &[ME],
        "mcp/response",
        Some("other"),
        json!({"result": {}}),
    );
    assert!(s.p.is_pending(&id));
    s.send_from(
        "calc",
        &[ME],
        "mcp/response",
        Some(id.as_str()),
        json!({"jsonrpc": "2.0", "id": req["payload"]["id"], "result": {"tools": []}}),
    );
    assert_eq!(s.completion(&id), Some(Ok(json!({"tools": []}))));
    assert!(!s.p.is_pending(&id));
    assert_eq!(s.p.pending_requests().count(), 0);
}

#[test]
fn json_rpc_errors_are_typed() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    let id = list_calc(&mut s).unwrap();
    s.send_from("calc", &[ME], "mcp/response", Some(id.as_str()),
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "no", "data": {"x": 1}}}));
    assert_eq!(
        s.completion(&id),
        Some(Err(RequestError::Rpc {
            code: -32601,
            message: "no".into(),
            data: Some(json!({"x": 1}))
        }))
    );
}

#[test]
fn requests_time_out_at_their_deadline() {
    let mut cfg = config();
    cfg.request_timeout = std::time::Duration::from_secs(5);
    let mut s = Script::joined(cfg, all_caps(), &[]);
    let id = list_calc(&mut s).unwrap();
    let (_, deadline) = s.p.pending_requests().next().unwrap();
    assert_eq!(deadline.as_unix_millis() - s.now.as_unix_millis(), 5000);
    s.advance(4999);
    assert!(s.p.is_pending(&id));
    s.advance(1);
    assert_eq!(s.completion(&id), Some(Err(RequestError::Timeout)));
    // A late response is ignored.
    s.send_from(
        "calc",
        &[ME],
        "mcp/response",
        Some(id.as_str()),
        json!({"result": {}}),
    );
    assert_eq!(s.completion(&id), None);
}

#[test]
fn gateway_refusal_fails_the_request() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    let id = list_calc(&mut s).unwrap();
    s.send_from("system:gateway", &[ME], "system/error", Some(id.as_str()),
        json!({"error": "capability_violation", "attempted_kind": "mcp/request", "your_capabilities": []}));
    assert!(
        matches!(s.completion(&id), Some(Err(RequestError::Gateway { error, .. })) if error == "capability_violation")
    );
}

#[test]
fn routes_to_proposal_without_request_capability() {
    let caps = json!([{"kind": "mcp/proposal"}, {"kind": "chat"}]);
    let mut s = Script::joined(config(), caps, &[]);
    s.take_sent();
    let id =
        s.p.mcp_request(s.now, vec!["fs".into()], list(), RequestOptions::default())
            .unwrap();
    let prop = s.sent_one("mcp/proposal");
    assert_eq!(prop["id"], id.as_str());
    assert_eq!(prop["to"], json!(["fs"]));
    assert_eq!(prop["payload"], json!({"method": "tools/list"}));
    assert!(s.events.iter().any(|e| matches!(
        e,
        Event::RouteDecision {
            route: RequestRoute::Proposal,
            reason: RouteReason::DirectNotAllowed,
            ..
        }
    )));
}

#[test]
fn payload_patterns_decide_the_route() {
    // Direct requests only for tools/list; proposals for anything.
    let caps = json!([
        {"kind": "mcp/request", "payload": {"method": "tools/list"}},
        {"kind": "mcp/proposal"}
    ]);
    let mut s = Script::joined(config(), caps, &[]);
    s.take_sent();
    s.p.mcp_request(s.now, vec!["fs".into()], list(), RequestOptions::default())
        .unwrap();
    s.drain();
    assert_eq!(s.sent_of("mcp/request").len(), 1);
    s.p.mcp_request(
        s.now,
        vec!["fs".into()],
        json!({"method": "tools/call", "params": {"name": "rm"}}),
        RequestOptions::default(),
    )
    .unwrap();
    s.drain();
    assert_eq!(s.sent_of("mcp/proposal").len(), 1);
    // Preferring a proposal overrides an allowed direct request.
    s.take_sent();
    s.p.mcp_request(
        s.now,
        vec!["fs".into()],
        list(),
        RequestOptions {
            prefer_proposal: true,
            ..Default::default()
        },
    )
    .unwrap();
    s.drain();
    assert_eq!(s.sent_of("mcp/proposal").len(), 1);
    assert!(s.events.iter().any(|e| matches!(
        e,
        Event::RouteDecision {
            reason: RouteReason::PreferProposal,
            ..
        }
    )));
}

#[test]
fn no_capability_is_a_typed_error_naming_what_is_held() {
    let mut s = Script::joined(config(), json!([{"kind": "chat"}]), &[]);
    s.take_sent();
    let err =
        s.p.mcp_request(s.now, vec!["fs".into()], list(), RequestOptions::default())
            .unwrap_err();
    assert_eq!(
        err,
        RequestError::NoCapability {
            held: json!([{"kind": "chat"}])
        }
    );
    assert!(err.to_string().contains("chat"));
    s.drain();
    assert!(s.sent.is_empty());
}

#[test]
fn grant_then_direct_request() {
    let mut s = Script::joined(
        config(),
        json!([{"kind": "mcp/proposal"}, {"kind": "chat"}]),
        &[],
    );
    s.take_sent();
    s.take_events();
    // The gateway sends the updated welcome first, then the grant.
    s.welcome(json!([{"kind": "mcp/proposal"}, {"kind": "chat"}, {"kind": "mcp/request", "payload": {"method": "tools/*"}}]), &[]);
    let grant = s.send_from("boss", &[ME], "capability/grant", None, json!({
        "recipient": ME, "capabilities": [{"kind": "mcp/request", "payload": {"method": "tools/*"}}]
    }));
    let ack = s.sent_one("capability/grant-ack");
    assert_eq!(ack["correlation_id"], json!([grant]));
    assert_eq!(ack["payload"], json!({"status": "accepted"}));
    assert!(
        s.events
            .iter()
            .any(|e| matches!(e, Event::CapabilitiesChanged { .. }))
    );
    assert!(
        s.events
            .iter()
            .any(|e| matches!(e, Event::Granted { grant_id, .. } if *grant_id == grant))
    );
    s.p.mcp_request(s.now, vec!["fs".into()], list(), RequestOptions::default())
        .unwrap();
    s.drain();
    assert_eq!(s.sent_of("mcp/request").len(), 1);
    // A grant for someone else is not acknowledged by us.
    s.take_sent();
    s.send_from(
        "boss",
        &["other"],
        "capability/grant",
        None,
        json!({"recipient": "other", "capabilities": []}),
    );
    assert!(s.sent_of("capability/grant-ack").is_empty());
}

#[test]
fn reconnect_fails_in_flight_requests_and_rejoins() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    let id = list_calc(&mut s).unwrap();
    s.take_sent();
    s.p.handle_input(
        s.now,
        Input::Disconnected {
            reason: "reset by peer",
        },
    );
    s.drain();
    assert_eq!(s.completion(&id), Some(Err(RequestError::Disconnected)));
    assert_eq!(s.p.pending_requests().count(), 0);
    // A request made while disconnected is queued and keeps its deadline.
    let queued = list_calc(&mut s).unwrap();
    assert!(s.p.pending_requests().any(|(r, _)| *r == queued));
    s.drain();
    assert!(s.sent.is_empty(), "{:?}", s.sent);
    let at = s.p.poll_timeout().unwrap();
    assert!(
        s.events
            .iter()
            .any(|e| matches!(e, Event::Reconnecting { attempt: 1, .. }))
    );
    let connects = s.connects;
    s.advance(at.as_unix_millis() - s.now.as_unix_millis());
    assert_eq!(s.connects, connects + 1);
    assert_eq!(s.p.state(), ClientState::Connecting);
    s.p.handle_input(s.now, Input::Connected);
    s.drain();
    assert!(s.raw.iter().any(|r| r.contains(r#""type":"join""#)));
    s.welcome(all_caps(), &[]);
    assert!(s.events.iter().any(|e| matches!(
        e,
        Event::Ready {
            reconnected: true,
            ..
        }
    )));
    let req = s.sent_one("mcp/request");
    assert_eq!(req["id"], queued.as_str());
    s.send_from(
        "calc",
        &[ME],
        "mcp/response",
        Some(queued.as_str()),
        json!({"result": 7}),
    );
    assert_eq!(s.completion(&queued), Some(Ok(json!(7))));
}

#[test]
fn refuse_policy_and_reserved_kinds() {
    let mut cfg = config();
    cfg.not_ready = mew_core::participant::NotReadyPolicy::Refuse;
    let mut s = Script::new(cfg);
    assert_eq!(s.p.chat(s.now, "hi", vec![]), Err(SendError::NotReady));
    let mut s = Script::joined(config(), all_caps(), &[]);
    let err =
        s.p.send(
            s.now,
            mew_core::participant::Draft::new(mew_core::Kind::SystemWelcome),
        )
        .unwrap_err();
    assert!(matches!(err, SendError::Reserved(_)));
    let mut s2 = Script::joined(config(), json!([{"kind": "mcp/*"}]), &[]);
    assert!(matches!(
        s2.p.chat(s2.now, "hi", vec![]),
        Err(SendError::NotAllowed { .. })
    ));
    s.take_sent();
}

#[test]
fn garbage_frames_become_events() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    for f in [
        "",
        "not json",
        "[1,2]",
        r#"{"protocol":"mew/v0.4"}"#,
        r#"{"protocol":"mew/v0.3","id":"a","from":"x","kind":"chat"}"#,
    ] {
        s.frame(f);
    }
    let n = s
        .events
        .iter()
        .filter(|e| matches!(e, Event::Malformed { .. }))
        .count();
    assert_eq!(n, 5);
    // Still working.
    s.send_from("bob", &[], "chat", None, json!({"text": "hi"}));
    assert_eq!(s.p.context_usage().messages_in_context, 1);
}

#[test]
fn settled_queued_requests_are_never_sent() {
    let mut cfg = config();
    cfg.request_timeout = std::time::Duration::from_secs(1);
    cfg.reconnect.base_delay = std::time::Duration::from_secs(5);
    cfg.reconnect.jitter = 0.0;
    let mut s = Script::joined(cfg, all_caps(), &[]);
    s.p.handle_input(s.now, Input::Disconnected { reason: "gone" });
    let id = list_calc(&mut s).unwrap();
    let kept =
        s.p.mcp_request(
            s.now,
            vec!["calc".into()],
            list(),
            RequestOptions {
                timeout: Some(std::time::Duration::from_secs(60)),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(s.p.client().queued(), 2);
    s.advance(1000);
    assert_eq!(s.completion(&id), Some(Err(RequestError::Timeout)));
    assert_eq!(s.p.client().queued(), 1);
    s.advance(4000);
    s.p.handle_input(s.now, Input::Connected);
    s.welcome(all_caps(), &[]);
    let sent = s.take_sent();
    let ids: Vec<&str> = sent.iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(ids, [kept.as_str()], "the timed-out request stays unsent");
    // Now on the wire: a loss fails it.
    s.p.handle_input(s.now, Input::Disconnected { reason: "again" });
    assert_eq!(s.completion(&kept), Some(Err(RequestError::Disconnected)));
}

#[test]
fn non_object_payloads_are_refused() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    let err =
        s.p.mcp_request(
            s.now,
            vec!["calc".into()],
            json!("tools/list"),
            RequestOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(err, RequestError::InvalidPayload(_)));
    assert_eq!(s.p.pending_requests().count(), 0);
}

#[test]
fn spoofed_answers_and_forged_system_envelopes_are_ignored() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    let id = list_calc(&mut s).unwrap();
    // Another participant saw the request id and answers in the target's place.
    s.send_from(
        "mallory",
        &[ME],
        "mcp/response",
        Some(id.as_str()),
        json!({"result": "forged"}),
    );
    assert!(s.p.is_pending(&id));
    assert!(s.events.iter().any(|e| matches!(e, Event::Invalid { .. })));
    // A forged welcome does not change our capabilities.
    s.send_from(
        "mallory",
        &[ME],
        "system/welcome",
        None,
        json!({"you": {"id": ME, "capabilities": []}, "participants": []}),
    );
    assert!(s.p.capabilities().allows("chat", None));
    // Nor does a forged gateway error fail the request.
    s.send_from(
        "mallory",
        &[ME],
        "system/error",
        Some(id.as_str()),
        json!({"error": "capability_violation"}),
    );
    assert!(s.p.is_pending(&id));
    s.send_from(
        "calc",
        &[ME],
        "mcp/response",
        Some(id.as_str()),
        json!({"result": "real"}),
    );
    assert_eq!(s.completion(&id), Some(Ok(json!("real"))));
}
