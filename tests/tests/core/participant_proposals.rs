//! Proposals: proposer lifecycle (fulfilled, rejected, withdrawn, timed out, several
//! fulfillers) and the reviewer side (fulfil, reject, states).

use crate::support;

use mew_core::participant::{Event, Input, RequestError, RequestId, RequestOptions, ReviewState};
use serde_json::{Value, json};
use std::time::Duration;
use support::{ME, Script, config};

fn proposer() -> Script {
    let mut cfg = config();
    cfg.proposal_timeout = Duration::from_secs(60);
    Script::joined(
        cfg,
        json!([{"kind": "mcp/proposal"}, {"kind": "mcp/withdraw"}, {"kind": "chat"}]),
        &[],
    )
}

fn call() -> Value {
    json!({"method": "tools/call", "params": {"name": "write", "arguments": {"path": "a"}}})
}

fn propose(s: &mut Script) -> RequestId {
    let id =
        s.p.mcp_request(s.now, vec!["fs".into()], call(), RequestOptions::default())
            .unwrap();
    s.sent_one("mcp/proposal");
    id
}

#[test]
fn fulfilled_by_correlation_chain() {
    let mut s = proposer();
    let id = propose(&mut s);
    // A human fulfils: mcp/request with correlation_id [proposal].
    let f = s.send_from(
        "human",
        &["fs"],
        "mcp/request",
        Some(id.as_str()),
        json!({"jsonrpc": "2.0", "id": 44, "method": "tools/call", "params": {"name": "write"}}),
    );
    assert!(s.events.iter().any(|e| matches!(e,
        Event::ProposalFulfilling { id: p, by, fulfilment_id } if *p == id && by == "human" && *fulfilment_id == f)));
    assert!(s.p.is_pending(&id));
    // We are not the target: nothing is served or answered.
    assert!(s.take_sent().is_empty());
    s.send_from(
        "fs",
        &["human"],
        "mcp/response",
        Some(&f),
        json!({"jsonrpc": "2.0", "id": 44, "result": {"ok": true}}),
    );
    assert_eq!(s.completion(&id), Some(Ok(json!({"ok": true}))));
    assert!(!s.p.is_pending(&id));
}

#[test]
fn two_fulfillers_first_response_wins() {
    let mut s = proposer();
    let id = propose(&mut s);
    let f1 = s.send_from("h1", &["fs"], "mcp/request", Some(id.as_str()), call());
    let f2 = s.send_from("h2", &["fs"], "mcp/request", Some(id.as_str()), call());
    s.send_from(
        "fs",
        &["h2"],
        "mcp/response",
        Some(&f2),
        json!({"result": "second"}),
    );
    s.send_from(
        "fs",
        &["h1"],
        "mcp/response",
        Some(&f1),
        json!({"result": "first"}),
    );
    s.drain();
    let completions: Vec<_> = s
        .events
        .iter()
        .filter(|e| matches!(e, Event::RequestCompleted { .. }))
        .collect();
    assert_eq!(completions.len(), 1);
    assert_eq!(s.completion(&id), Some(Ok(json!("second"))));
}

#[test]
fn rejection_fails_fast_with_reason_and_rejecter() {
    let mut s = proposer();
    let id = propose(&mut s);
    s.send_from(
        "fs",
        &[ME],
        "mcp/reject",
        Some(id.as_str()),
        json!({"reason": "unsafe"}),
    );
    let r = s.completion(&id).unwrap();
    assert_eq!(
        r,
        Err(RequestError::Rejected {
            by: "fs".into(),
            reason: "unsafe".into()
        })
    );
    assert_eq!(
        r.unwrap_err().to_string(),
        "proposal rejected by fs: unsafe"
    );
}

#[test]
fn withdrawals_by_others_are_ignored_own_withdraw_settles() {
    let mut s = proposer();
    let id = propose(&mut s);
    s.send_from(
        "mallory",
        &[],
        "mcp/withdraw",
        Some(id.as_str()),
        json!({"reason": "no_longer_needed"}),
    );
    assert!(s.p.is_pending(&id));
    s.p.withdraw(s.now, &id, "no_longer_needed").unwrap();
    let w = s.sent_one("mcp/withdraw");
    assert_eq!(w["correlation_id"], json!([id.as_str()]));
    assert_eq!(w["payload"]["reason"], "no_longer_needed");
    assert_eq!(
        s.completion(&id),
        Some(Err(RequestError::Withdrawn {
            reason: "no_longer_needed".into()
        }))
    );
    assert!(s.p.withdraw(s.now, &id, "x").is_err());
}

#[test]
fn timeout_withdraws_with_reason_timeout() {
    let mut s = proposer();
    let id = propose(&mut s);
    s.advance(59_999);
    assert!(s.p.is_pending(&id));
    s.advance(1);
    let w = s.sent_one("mcp/withdraw");
    assert_eq!(w["payload"]["reason"], "timeout");
    assert_eq!(w["correlation_id"], json!([id.as_str()]));
    assert_eq!(s.completion(&id), Some(Err(RequestError::Timeout)));
}

#[test]
fn proposals_survive_a_reconnect_with_their_deadline() {
    let mut s = proposer();
    let id = propose(&mut s);
    s.p.handle_input(s.now, Input::Disconnected { reason: "blip" });
    s.drain();
    assert!(s.p.is_pending(&id));
    assert!(s.p.pending_requests().all(|(_, d)| d > s.now));
}

fn reviewer() -> Script {
    Script::joined(
        config(),
        json!([{"kind": "*"}]),
        &[("agent2", json!([{"kind": "mcp/proposal"}]))],
    )
}

#[test]
fn reviewer_fulfils_with_the_proposal_payload() {
    let mut s = reviewer();
    let pid = s.send_from("agent2", &["fs"], "mcp/proposal", None, call());
    assert!(s.events.iter().any(
        |e| matches!(e, Event::ProposalSeen { id, from, .. } if *id == pid && from == "agent2")
    ));
    assert_eq!(s.p.proposal(&pid).unwrap().state, ReviewState::Open);
    let rid = s.p.fulfil(s.now, &pid).unwrap();
    let req = s.sent_one("mcp/request");
    assert_eq!(req["to"], json!(["fs"]));
    assert_eq!(req["correlation_id"], json!([pid]));
    assert_eq!(req["payload"]["method"], "tools/call");
    assert_eq!(req["payload"]["params"], call()["params"]);
    assert_eq!(req["payload"]["jsonrpc"], "2.0");
    assert!(req["payload"]["id"].is_u64());
    assert!(matches!(
        s.p.proposal(&pid).unwrap().state,
        ReviewState::Fulfilling { .. }
    ));
    // Fulfilling twice is refused.
    assert!(s.p.fulfil(s.now, &pid).is_err());
    s.send_from(
        "fs",
        &[ME],
        "mcp/response",
        Some(rid.as_str()),
        json!({"result": {"done": 1}}),
    );
    assert_eq!(s.completion(&rid), Some(Ok(json!({"done": 1}))));
    assert_eq!(s.p.proposal(&pid).unwrap().state, ReviewState::Fulfilled);
}

#[test]
fn reviewer_rejects_and_tracks_others() {
    let mut s = reviewer();
    let p1 = s.send_from("agent2", &["fs"], "mcp/proposal", None, call());
    s.p.reject(s.now, &p1, "unsafe").unwrap();
    let r = s.sent_one("mcp/reject");
    assert_eq!(r["to"], json!(["agent2"]));
    assert_eq!(r["correlation_id"], json!([p1]));
    assert_eq!(r["payload"]["reason"], "unsafe");
    assert!(matches!(
        s.p.proposal(&p1).unwrap().state,
        ReviewState::Rejected { .. }
    ));
    // Withdraw by a non-proposer is ignored, by the proposer honoured.
    let p2 = s.send_from("agent2", &["fs"], "mcp/proposal", None, call());
    s.send_from(
        "mallory",
        &[],
        "mcp/withdraw",
        Some(&p2),
        json!({"reason": "x"}),
    );
    assert_eq!(s.p.proposal(&p2).unwrap().state, ReviewState::Open);
    s.send_from(
        "agent2",
        &[],
        "mcp/withdraw",
        Some(&p2),
        json!({"reason": "no_longer_needed"}),
    );
    assert_eq!(
        s.p.proposal(&p2).unwrap().state,
        ReviewState::Withdrawn {
            reason: "no_longer_needed".into()
        }
    );
    assert!(s.p.fulfil(s.now, &p2).is_err());
    // Someone else fulfils a third; its response marks it fulfilled.
    let p3 = s.send_from("agent2", &["fs"], "mcp/proposal", None, call());
    let f = s.send_from("human", &["fs"], "mcp/request", Some(&p3), call());
    assert_eq!(
        s.p.proposal(&p3).unwrap().state,
        ReviewState::Fulfilling { by: "human".into() }
    );
    s.send_from(
        "fs",
        &["human"],
        "mcp/response",
        Some(&f),
        json!({"result": {}}),
    );
    assert_eq!(s.p.proposal(&p3).unwrap().state, ReviewState::Fulfilled);
    // Proposals older than the proposal timeout expire.
    let p4 = s.send_from("agent2", &["fs"], "mcp/proposal", None, call());
    s.advance(s.p.config().proposal_timeout.as_millis() as u64);
    assert_eq!(s.p.proposal(&p4).unwrap().state, ReviewState::Expired);
    assert!(s.events.iter().any(|e| matches!(e,
        Event::ProposalStateChanged { id, state: ReviewState::Expired } if *id == p4)));
    assert!(s.p.fulfil(s.now, &p4).is_err());
}

#[test]
fn review_queue_is_bounded() {
    let mut cfg = config();
    cfg.bounds.max_reviewed_proposals = 3;
    let mut s = Script::joined(cfg, json!([{"kind": "*"}]), &[]);
    let ids: Vec<String> = (0..5)
        .map(|_| s.send_from("a2", &["fs"], "mcp/proposal", None, call()))
        .collect();
    assert_eq!(s.p.proposals().count(), 3);
    assert!(s.p.proposal(&ids[0]).is_none());
    assert!(s.p.proposal(&ids[4]).is_some());
}

#[test]
fn fulfilment_answers_only_from_the_target() {
    let mut s = proposer();
    let id = propose(&mut s);
    let f = s.send_from("human", &["fs"], "mcp/request", Some(id.as_str()), call());
    s.send_from(
        "mallory",
        &["human"],
        "mcp/response",
        Some(&f),
        json!({"result": "forged"}),
    );
    assert!(s.p.is_pending(&id));
    s.send_from(
        "fs",
        &["human"],
        "mcp/response",
        Some(&f),
        json!({"result": "real"}),
    );
    assert_eq!(s.completion(&id), Some(Ok(json!("real"))));
}
