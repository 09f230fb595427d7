//! Tool discovery: staggered start, slow and failing participants, retries, TTL refresh,
//! leave, and calling discovered tools by `participant/tool`.

use crate::support;

use mew_core::participant::{DiscoveryState, Event, RequestOptions};
use serde_json::{Value, json};
use support::{ME, Script, all_caps, config};

fn tools_of(names: &[&str]) -> Value {
    json!({"tools": names.iter().map(|n| json!({"name": n, "inputSchema": {"type": "object"}})).collect::<Vec<_>>()})
}

/// Answers every outstanding tools/list per `answer(target)`; `None` leaves it unanswered.
fn answer_lists(s: &mut Script, answer: impl Fn(&str) -> Option<Value>) -> Vec<String> {
    let mut asked = vec![];
    for req in s
        .take_sent()
        .into_iter()
        .filter(|e| e["kind"] == "mcp/request" && e["payload"]["method"] == "tools/list")
    {
        let target = req["to"][0].as_str().unwrap().to_owned();
        asked.push(target.clone());
        if let Some(payload) = answer(&target) {
            let id = req["id"].as_str().unwrap().to_owned();
            s.send_from(&target, &[ME], "mcp/response", Some(&id), payload);
        }
    }
    asked
}

/// A configuration with discovery on (it is opt-in).
fn discovering() -> mew_core::participant::ParticipantConfig {
    let mut c = config();
    c.discovery.auto = true;
    c
}

#[test]
fn slow_and_failing_participants_settle() {
    let peers = [
        ("calc", json!([{"kind": "mcp/response"}])),
        ("slow", json!([{"kind": "mcp/response"}])),
        ("broken", json!([{"kind": "mcp/*"}])),
        ("human", json!([{"kind": "chat"}])),
    ];
    let mut s = Script::joined(discovering(), all_caps(), &peers);
    // Candidates only: participants able to send mcp/response.
    assert_eq!(s.p.discoveries_pending(), 3);
    assert!(s.p.discovery_status("human").is_none());
    let reply = |t: &str| match t {
        "calc" => Some(json!({"result": tools_of(&["add", "mul"])})),
        "broken" => Some(json!({"error": {"code": -32603, "message": "crashed"}})),
        _ => None,
    };
    // Staggered: one start per second, the first at once.
    s.advance(0);
    let mut asked = answer_lists(&mut s, reply);
    for _ in 0..3 {
        s.advance(1000);
        asked.extend(answer_lists(&mut s, reply));
    }
    asked.sort();
    assert_eq!(asked, ["broken", "calc", "slow"]);
    assert_eq!(
        s.p.discovery_status("calc").unwrap().state,
        DiscoveryState::Completed
    );
    assert_eq!(
        s.p.discovery_status("slow").unwrap().state,
        DiscoveryState::InProgress
    );
    // Retries: broken fails 3 times in all (5 s, then 10 s later), slow times out 3 times.
    let mut attempts_broken = 1;
    for _ in 0..60 {
        s.advance(1000);
        for t in answer_lists(&mut s, reply) {
            if t == "broken" {
                attempts_broken += 1;
            }
        }
    }
    assert_eq!(attempts_broken, 3);
    assert_eq!(
        s.p.discovery_status("broken").unwrap().state,
        DiscoveryState::Failed
    );
    assert_eq!(
        s.p.discovery_status("slow").unwrap().state,
        DiscoveryState::Failed
    );
    assert_eq!(s.p.discoveries_pending(), 0);
    assert_eq!(
        s.events
            .iter()
            .filter(|e| matches!(e, Event::DiscoverySettled))
            .count(),
        1
    );
    let names: Vec<String> = s.p.available_tools().into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["calc/add", "calc/mul"]);
}

#[test]
fn no_tools_leave_refresh_and_call_by_name() {
    let mut cfg = discovering();
    cfg.discovery.ttl = std::time::Duration::from_secs(60);
    let mut s = Script::joined(
        cfg,
        all_caps(),
        &[("calc", json!([{"kind": "mcp/response"}]))],
    );
    s.advance(0);
    answer_lists(&mut s, |_| Some(json!({"result": tools_of(&["add"])})));
    // A participant without tools, joining later.
    s.send_from("system:gateway", &[], "system/presence", None,
        json!({"event": "join", "participant": {"id": "empty", "capabilities": [{"kind": "mcp/response"}]}}));
    s.advance(1000);
    answer_lists(&mut s, |_| Some(json!({"result": {"tools": []}})));
    assert_eq!(
        s.p.discovery_status("empty").unwrap().state,
        DiscoveryState::NoTools
    );
    // Call by participant/tool.
    let id =
        s.p.call_tool(
            s.now,
            "calc/add",
            json!({"a": 1}),
            RequestOptions::default(),
        )
        .unwrap();
    let req = s.sent_one("mcp/request");
    assert_eq!(req["to"], json!(["calc"]));
    assert_eq!(
        req["payload"]["params"],
        json!({"name": "add", "arguments": {"a": 1}})
    );
    assert!(
        s.p.call_tool(s.now, "calc/nope", json!({}), RequestOptions::default())
            .is_err()
    );
    s.send_from(
        "calc",
        &[ME],
        "mcp/response",
        Some(id.as_str()),
        json!({"result": {"content": []}}),
    );
    assert!(s.completion(&id).unwrap().is_ok());
    // TTL refresh asks again and keeps the tools meanwhile.
    s.advance(60_000);
    let asked = answer_lists(&mut s, |_| None);
    assert!(asked.contains(&"calc".to_owned()), "{asked:?}");
    assert_eq!(s.p.available_tools().len(), 1);
    // Leave clears.
    s.send_from(
        "system:gateway",
        &[],
        "system/presence",
        None,
        json!({"event": "leave", "participant": {"id": "calc"}}),
    );
    assert!(s.p.discovery_status("calc").is_none());
    assert!(s.p.available_tools().is_empty());
}

#[test]
fn a_crowded_space_announces_joins_and_leaves_in_batches() {
    let mut s = Script::joined(
        discovering(),
        all_caps(),
        &[("calc", json!([{"kind": "mcp/response"}]))],
    );
    s.advance(0);
    answer_lists(&mut s, |_| Some(json!({"result": tools_of(&["add"])})));
    let joins_before = s
        .events
        .iter()
        .filter(|e| matches!(e, Event::ParticipantJoined { .. }))
        .count();
    // One batch: a new tool holder, a repeat of one already known, this participant's own
    // join, and a leave.
    s.send_from(
        "system:gateway",
        &[],
        "system/presence",
        None,
        json!({"event": "batch", "online": 1500, "omitted": 0, "changes": [
            {"event": "join", "participant": {"id": "search", "capabilities": [{"kind": "mcp/response"}]}},
            {"event": "join", "participant": {"id": "calc", "capabilities": [{"kind": "mcp/response"}]}},
            {"event": "join", "participant": {"id": ME, "capabilities": []}},
            {"event": "leave", "participant": {"id": "calc"}}
        ]}),
    );
    let joined: Vec<&str> = s.events[..]
        .iter()
        .filter_map(|e| match e {
            Event::ParticipantJoined { id } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(joined.len(), joins_before + 1, "{joined:?}");
    assert_eq!(joined.last(), Some(&"search"));
    assert!(s.p.discovery_status("calc").is_none(), "the leave applied");
    assert!(s.p.available_tools().is_empty());
    // The newcomer is discovered like any joiner.
    s.advance(1000);
    let asked = answer_lists(&mut s, |_| Some(json!({"result": tools_of(&["find"])})));
    assert_eq!(asked, ["search"]);
    let names: Vec<String> = s.p.available_tools().into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["search/find"]);
    // A batch without its list of changes is refused as a peer fault, not a panic.
    s.send_from(
        "system:gateway",
        &[],
        "system/presence",
        None,
        json!({"event": "batch"}),
    );
    assert!(
        matches!(s.events.last(), Some(Event::Invalid { reason, .. }) if reason == "presence batch without changes"),
        "{:?}",
        s.events.last()
    );
}
