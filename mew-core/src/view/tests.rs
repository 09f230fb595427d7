use super::*;
use crate::participant::{AvailableTool, ToolInfo};
use serde_json::{Value, json};

/// An envelope from JSON with what the tests leave out filled in.
fn env(mut v: Value) -> Envelope {
    v["protocol"] = json!("mew/v0.4");
    if v.get("id").is_none() {
        v["id"] = json!(format!("gen-{}", v.to_string().len()));
    }
    if v.get("from").is_none() {
        v["from"] = json!("system:gateway");
    }
    serde_json::from_value(v).unwrap()
}

fn msg(view: &mut View, v: Value) {
    view.handle_event(&Event::Message(Box::new(env(v))));
}

fn actions(view: &mut View) -> Vec<Action> {
    std::iter::from_fn(|| view.poll_action()).collect()
}

fn changes(view: &mut View) -> Vec<Change> {
    std::iter::from_fn(|| view.poll_change()).collect()
}

fn texts(view: &View) -> Vec<String> {
    view.state()
        .items
        .iter()
        .filter(|i| !i.background || view.state().verbose)
        .map(|i| i.text.clone())
        .collect()
}

fn ids(members: &[Member]) -> Vec<&str> {
    members.iter().map(|m| m.id.as_str()).collect()
}

fn space() -> View {
    let mut v = View::new("human", ViewLimits::default());
    msg(
        &mut v,
        json!({"kind": "system/welcome", "id": "w", "payload": {
        "you": {"id": "human", "capabilities": [{"kind": "*"}], "person": true},
        "participants": [
            {"id": "agent", "capabilities": [{"kind": "mcp/proposal"}, {"kind": "chat"}]},
            {"id": "files", "capabilities": [{"kind": "mcp/response"}]}]}}),
    );
    v
}

fn proposal(id: &str, path: &str) -> Value {
    json!({"kind": "mcp/proposal", "from": "agent", "id": id, "to": ["files"],
           "payload": {"method": "tools/call", "params": {"name": "write_file",
                       "arguments": {"path": path, "content": "hello"}}}})
}

fn fulfilment(id: &str, of: &str, path: &str, ts: &str) -> Value {
    json!({"kind": "mcp/request", "from": "human", "id": id, "ts": ts, "to": ["files"],
           "correlation_id": [of], "payload": {"method": "tools/call", "params": {
               "name": "write_file", "arguments": {"path": path, "content": "hello"}}}})
}

fn queue(view: &View) -> Vec<&str> {
    view.state().queue.iter().map(|p| p.id.as_str()).collect()
}

#[test]
fn members_follow_the_welcome_joins_leaves_and_batches_by_the_sdks_rule() {
    let mut v = space();
    assert_eq!(v.state().status, "joined as human");
    assert_eq!(ids(&v.state().members), ["agent", "files", "human"]);
    let me = &v.state().members[2];
    assert!(me.me && me.person && me.capabilities == ["*"]);
    assert_eq!(
        v.state().members[0].capabilities,
        ["mcp/proposal", "chat"],
        "as labels, in order"
    );
    msg(
        &mut v,
        json!({"kind": "system/presence", "payload": {"event": "join",
        "participant": {"id": "late", "capabilities": [{"kind": "mcp/request", "payload": {"method": "tools/list"}}]}}}),
    );
    assert_eq!(
        v.state().members[3].capabilities,
        [r#"mcp/request {"method":"tools/list"}"#]
    );
    // A leaver is dropped, as the participant drops it (not kept "offline").
    msg(
        &mut v,
        json!({"kind": "system/presence", "payload": {"event": "leave", "participant": {"id": "files"}}}),
    );
    assert_eq!(ids(&v.state().members), ["agent", "human", "late"]);
    msg(
        &mut v,
        json!({"kind": "system/presence", "payload": {
        "event": "batch", "online": 1204, "omitted": 7, "changes": [
            {"event": "join", "participant": {"id": "newcomer", "capabilities": [{"kind": "chat"}]}},
            {"event": "join", "participant": {"id": "agent", "capabilities": [{"kind": "chat"}]}},
            {"event": "leave", "participant": {"id": "late"}}]}}),
    );
    assert_eq!(ids(&v.state().members), ["agent", "human", "newcomer"]);
    assert_eq!(
        v.state().members[0].capabilities,
        ["chat"],
        "a repeated join updates"
    );
    let t = texts(&v);
    assert!(t.contains(&"late joined".to_owned()), "{t:?}");
    assert!(t.contains(&"files left".to_owned()), "{t:?}");
    assert_eq!(
        t.last().unwrap(),
        "2 joined, 1 left (7 more not listed; 1204 online)"
    );
    // Tools discovered show under their member; a leaver's go with it.
    let tool = |p: &str, n: &str| AvailableTool {
        name: format!("{p}/{n}"),
        participant: p.into(),
        tool: ToolInfo {
            name: n.into(),
            description: None,
            input_schema: None,
            annotations: None,
        },
    };
    v.handle_tools(&[tool("agent", "think"), tool("gone", "x")]);
    assert_eq!(v.state().members[0].tools, ["think"]);
    // A rejoin's welcome keeps the tools of those still here until the next discovery.
    msg(
        &mut v,
        json!({"kind": "system/welcome", "id": "w2", "payload": {
        "you": {"id": "human", "capabilities": [{"kind": "*"}]},
        "participants": [{"id": "agent", "capabilities": []}]}}),
    );
    assert_eq!(ids(&v.state().members), ["agent", "human"]);
    assert_eq!(v.state().members[0].tools, ["think"]);
}

#[test]
fn members_are_bounded() {
    let mut v = View::new(
        "human",
        ViewLimits {
            members: 2,
            ..ViewLimits::default()
        },
    );
    let list: Vec<Value> = (0..5).map(|i| json!({"id": format!("p{i}")})).collect();
    msg(
        &mut v,
        json!({"kind": "system/welcome", "payload": {"you": {"id": "human", "capabilities": []},
        "participants": list}}),
    );
    assert_eq!(ids(&v.state().members), ["human", "p0", "p1"]);
    msg(
        &mut v,
        json!({"kind": "system/presence", "payload": {"event": "join", "participant": {"id": "p9"}}}),
    );
    assert_eq!(ids(&v.state().members), ["human", "p0", "p1"]);
}

#[test]
fn the_queue_keeps_order_through_later_withdrawals_and_decisions_elsewhere() {
    let mut v = space();
    for (id, path) in [("p1", "a"), ("p2", "b"), ("p3", "c"), ("p4", "d")] {
        msg(&mut v, proposal(id, path));
    }
    // Our own proposals are not ours to review.
    msg(
        &mut v,
        json!({"kind": "mcp/proposal", "from": "human", "id": "mine", "to": ["files"],
               "payload": {"method": "tools/call", "params": {"name": "x"}}}),
    );
    assert_eq!(queue(&v), ["p1", "p2", "p3", "p4"]);
    assert_eq!(v.state().queue[0].what, "tools/call write_file on files");
    v.handle_command(Command::Later("p1".into())).unwrap();
    assert_eq!(queue(&v), ["p2", "p3", "p4", "p1"]);
    msg(
        &mut v,
        json!({"kind": "mcp/withdraw", "from": "agent", "id": "w1", "correlation_id": ["p3"], "payload": {}}),
    );
    assert_eq!(queue(&v), ["p2", "p4", "p1"]);
    // Rejected on another screen of the same person: it leaves here too, told with what it was.
    msg(
        &mut v,
        json!({"kind": "mcp/reject", "from": "human", "id": "r1", "to": ["agent"],
        "correlation_id": ["p2"], "payload": {"reason": "not now"}}),
    );
    assert_eq!(queue(&v), ["p4", "p1"]);
    msg(&mut v, fulfilment("f4", "p4", "d", "2026-01-01T00:00:00Z"));
    assert_eq!(queue(&v), ["p1"]);
    let t = texts(&v);
    assert!(
        t.contains(&"proposal withdrawn by agent (its tools/call write_file on files)".to_owned()),
        "{t:?}"
    );
    assert!(
        t.contains(
            &"proposal rejected by human: not now (agent's tools/call write_file on files)"
                .to_owned()
        ),
        "{t:?}"
    );
    let record = v.state().items.back().unwrap();
    assert_eq!(record.kind, ItemKind::Decision);
    assert_eq!(
        record.text,
        r#"proposal approved by human: agent's tools/call write_file on files: {"content":"hello","path":"d"}"#
    );
    // A decision on what no longer waits is refused, and changes nothing.
    assert_eq!(
        v.handle_command(Command::Approve("p4".into())),
        Err(ViewError::UnknownProposal("p4".into()))
    );
    assert!(actions(&mut v).is_empty());
}

#[test]
fn decisions_become_actions_and_always_allow_grants_exactly_this_call() {
    let mut v = space();
    msg(&mut v, proposal("p1", "a.txt"));
    msg(&mut v, proposal("p2", "b.txt"));
    msg(&mut v, proposal("p3", "c.txt"));
    v.handle_command(Command::Approve("p1".into())).unwrap();
    v.handle_command(Command::Reject {
        proposal: "p2".into(),
        reason: " ".into(),
    })
    .unwrap();
    v.handle_command(Command::AlwaysAllow("p3".into())).unwrap();
    assert!(v.state().queue.is_empty());
    assert_eq!(
        actions(&mut v),
        [
            Action::Fulfil {
                proposal: "p1".into()
            },
            Action::Reject {
                proposal: "p2".into(),
                reason: "rejected".into()
            },
            Action::Grant {
                recipient: "agent".into(),
                capabilities: vec![json!({"kind": "mcp/request", "payload": {
                    "method": "tools/call", "params": {"name": "write_file",
                    "arguments": {"path": "c.txt", "content": "hello"}}}})],
                reason: ALWAYS_ALLOW_REASON.into()
            },
            Action::Fulfil {
                proposal: "p3".into()
            },
        ]
    );
    v.handle_command(Command::Control {
        target: "agent".into(),
        action: ControlAction::Pause,
    })
    .unwrap();
    assert_eq!(
        actions(&mut v),
        [Action::Send(
            json!({"kind": "participant/pause", "to": ["agent"], "payload": {}})
        )]
    );
}

#[test]
fn reasoning_folds_into_one_item_that_follows_the_thoughts() {
    let mut v = space();
    msg(
        &mut v,
        json!({"kind": "reasoning/start", "from": "agent", "id": "r1", "payload": {"message": "go"}}),
    );
    msg(
        &mut v,
        json!({"kind": "chat", "from": "files", "id": "x", "payload": {"text": "unrelated"}}),
    );
    assert_eq!(v.state().folds["r1"].summary, "agent is thinking…");
    for (i, t) in ["Calling weather", "Adding the tip"].iter().enumerate() {
        msg(
            &mut v,
            json!({"kind": "reasoning/thought", "from": "agent", "id": format!("t{i}"),
                   "context": "r1", "payload": {"message": t}}),
        );
    }
    assert_eq!(
        v.state().folds["r1"].summary,
        "agent is thinking (2 thought(s)): Adding the tip"
    );
    msg(
        &mut v,
        json!({"kind": "reasoning/conclusion", "from": "agent", "id": "c", "context": "r1",
               "payload": {"message": "Answered"}}),
    );
    let f = &v.state().folds["r1"];
    assert_eq!(f.summary, "agent reasoned in 2 step(s): Answered");
    assert_eq!((f.steps, f.conclusion.as_deref()), (2, Some("Answered")));
    // One item for the whole sequence, before the unrelated chat.
    let kinds: Vec<ItemKind> = v.state().items.iter().map(|i| i.kind).collect();
    assert_eq!(kinds, [ItemKind::Reasoning, ItemKind::Chat]);
    assert_eq!(v.state().items[0].context.as_deref(), Some("r1"));
    // A thought of a sequence not seen to start is shown as it is.
    msg(
        &mut v,
        json!({"kind": "reasoning/thought", "from": "agent", "id": "t9", "context": "r0",
               "payload": {"message": "stray"}}),
    );
    assert_eq!(v.state().items.back().unwrap().text, "agent: stray");
}

#[test]
fn discovery_and_its_answers_are_background_and_tool_calls_are_not() {
    let mut v = space();
    msg(
        &mut v,
        json!({"kind": "mcp/request", "from": "agent", "id": "d1", "to": ["files"],
        "payload": {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}}),
    );
    msg(
        &mut v,
        json!({"kind": "mcp/response", "from": "files", "id": "d2", "to": ["agent"],
        "correlation_id": ["d1"], "payload": {"result": {"content": [{"type": "text", "text": "x"}]}}}),
    );
    // A listing whose request was not seen (our own discovery) is background too.
    msg(
        &mut v,
        json!({"kind": "mcp/response", "from": "files", "id": "d3", "to": ["human"],
        "correlation_id": ["human-1"], "payload": {"result": {"tools": []}}}),
    );
    msg(
        &mut v,
        json!({"kind": "mcp/request", "from": "agent", "id": "n1", "to": ["files"],
        "payload": {"method": "notifications/initialized"}}),
    );
    assert_eq!(v.state().background, 4);
    assert!(texts(&v).is_empty(), "{:?}", texts(&v));
    // A tool call and its long answer stay, the answer as a body under its line.
    let long: Vec<String> = (1..=40).map(|i| format!("line {i}")).collect();
    msg(
        &mut v,
        json!({"kind": "mcp/request", "from": "agent", "id": "r1", "to": ["files"],
        "payload": {"method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "big.txt"}}}}),
    );
    msg(
        &mut v,
        json!({"kind": "mcp/response", "from": "files", "id": "r2", "to": ["agent"],
        "correlation_id": ["r1"], "payload": {"result": {"content": [{"type": "text", "text": long.join("\n")}]}}}),
    );
    // A discovery method that fulfils a proposal was asked for by a person.
    msg(
        &mut v,
        json!({"kind": "mcp/request", "from": "agent", "id": "f1", "to": ["files"],
        "correlation_id": ["p9"], "payload": {"method": "tools/list"}}),
    );
    let shown: Vec<&Item> = v.state().items.iter().filter(|i| !i.background).collect();
    assert_eq!(
        shown[0].text,
        r#"agent calls read_file on files: {"path":"big.txt"}"#
    );
    assert_eq!(shown[1].text, "files answers:");
    assert_eq!(shown[1].body.len(), 40);
    assert_eq!(shown[2].text, "agent calls tools/list on files");
    v.handle_command(Command::Line("/verbose".into())).unwrap();
    assert!(v.state().verbose);
    assert!(
        texts(&v).contains(&"agent calls tools/list on files".to_owned()),
        "{:?}",
        texts(&v)
    );
    assert!(chatter::DISCOVERY_METHODS.contains(&"resources/templates/list"));
}

#[test]
fn three_approvals_of_one_shape_make_one_suggestion() {
    let mut v = space();
    for (i, path) in ["src/a.rs", "src/b.rs", "src/c.rs"].iter().enumerate() {
        let id = format!("p{i}");
        msg(&mut v, proposal(&id, path));
        assert!(v.state().suggestions.is_empty());
        v.handle_command(Command::Approve(id.clone())).unwrap();
        msg(
            &mut v,
            fulfilment(
                &format!("f{i}"),
                &id,
                path,
                &format!("2026-11-25T10:00:0{i}Z"),
            ),
        );
    }
    assert_eq!(v.state().suggestions.len(), 1);
    let s = v.state().suggestions[0].clone();
    assert_eq!(s.recipient, "agent");
    assert_eq!(
        s.capability,
        json!({"kind": "mcp/request", "payload": {"method": "tools/call", "params": {
            "name": "write_file", "arguments": {"content": "hello", "path": "src/*"}}}})
    );
    assert_eq!(
        s.summary,
        "agent was approved 3 times by human (2026-11-25T10:00:00Z to 2026-11-25T10:00:02Z)"
    );
    actions(&mut v);
    v.handle_command(Command::GrantSuggestion(s.key.clone()))
        .unwrap();
    assert_eq!(
        actions(&mut v),
        [Action::Grant {
            recipient: "agent".into(),
            capabilities: vec![s.capability.clone()],
            reason: "approved 3 times by human".into()
        }]
    );
    assert!(v.state().suggestions.is_empty());
    // Made once: a fourth approval of the same shape suggests nothing again.
    msg(&mut v, proposal("p3", "src/d.rs"));
    msg(
        &mut v,
        fulfilment("f3", "p3", "src/d.rs", "2026-11-25T10:00:03Z"),
    );
    assert!(v.state().suggestions.is_empty());
    assert_eq!(
        v.handle_command(Command::DismissSuggestion(s.key.clone())),
        Err(ViewError::UnknownSuggestion(s.key))
    );
}

#[test]
fn slash_commands_are_parsed_once_here() {
    let mut v = space();
    let line = |v: &mut View, l: &str| {
        let r = v.handle_command(Command::Line(l.into()));
        (r, actions(v))
    };
    assert_eq!(
        line(&mut v, "hello there"),
        (
            Ok(()),
            vec![Action::Chat {
                text: "hello there".into()
            }]
        )
    );
    assert_eq!(
        line(&mut v, "/grant agent mcp/request"),
        (
            Ok(()),
            vec![Action::Grant {
                recipient: "agent".into(),
                capabilities: vec![json!({"kind": "mcp/request"})],
                reason: String::new()
            }]
        )
    );
    assert_eq!(
        line(&mut v, r#"/revoke agent {"kind": "chat"}"#),
        (
            Ok(()),
            vec![Action::Revoke {
                recipient: "agent".into(),
                capabilities: vec![json!({"kind": "chat"})],
                reason: String::new()
            }]
        )
    );
    assert_eq!(
        line(&mut v, "/pause agent,files").1,
        [Action::Send(
            json!({"kind": "participant/pause", "to": ["agent", "files"], "payload": {}})
        )]
    );
    assert_eq!(
        line(&mut v, "/status agent").1,
        [Action::Send(
            json!({"kind": "participant/request-status", "to": ["agent"], "payload": {}})
        )]
    );
    assert_eq!(
        line(&mut v, "/kick agent").1,
        [Action::Send(json!({"kind": "space/kick", "to": [],
            "payload": {"participant_id": "agent", "reason": "kicked"}}))]
    );
    assert_eq!(
        line(&mut v, "/cancel r1").1,
        [Action::Send(
            json!({"kind": "reasoning/cancel", "context": "r1", "payload": {"reason": "cancelled"}})
        )]
    );
    assert_eq!(
        line(&mut v, r#"/json {"kind":"chat","payload":{"text":"raw"}}"#).1,
        [Action::Send(
            json!({"kind": "chat", "payload": {"text": "raw"}})
        )]
    );
    assert_eq!(line(&mut v, "/quit").1, [Action::Quit]);
    assert_eq!(
        line(&mut v, "/nope"),
        (Err(ViewError::UnknownCommand("nope".into())), vec![])
    );
    let (r, a) = line(&mut v, "/grant agent");
    assert_eq!(
        r.unwrap_err().to_string(),
        "usage: /grant <participant> <capability JSON or kind>"
    );
    assert!(a.is_empty());
    assert!(line(&mut v, "/pause").0.is_err());
    assert!(line(&mut v, "/json [1]").0.is_err());
    assert_eq!(line(&mut v, "   "), (Ok(()), vec![]));
    let before = v.state().items.len();
    line(&mut v, "/help").0.unwrap();
    assert_eq!(v.state().items.len(), before + HELP.len());
    line(&mut v, "/streams").0.unwrap();
    assert_eq!(v.state().items.back().unwrap().text, "no open streams");
    msg(
        &mut v,
        json!({"kind": "stream/open", "from": "agent", "id": "s", "payload": {"stream_id": "st1"}}),
    );
    line(&mut v, "/streams").0.unwrap();
    assert_eq!(v.state().items.back().unwrap().text, "stream st1 of agent");
}

#[test]
fn history_comes_first_repeats_nothing_and_tells_past_presence() {
    let mut v = space();
    v.handle_event(&Event::Ready {
        id: "human".into(),
        reconnected: false,
    });
    assert_eq!(actions(&mut v), [Action::FetchHistory { since: None }]);
    let live =
        json!({"kind": "chat", "from": "agent", "id": "c9", "payload": {"text": "live one"}});
    msg(&mut v, live.clone());
    assert!(texts(&v).is_empty(), "held until the history");
    v.handle_history(Ok(vec![
        env(
            json!({"kind": "chat", "from": "human", "id": "c0", "payload": {"text": "please write"}}),
        ),
        env(
            json!({"kind": "system/presence", "id": "g1", "payload": {"event": "leave", "participant": {"id": "agent"}}}),
        ),
        env(proposal("p0", "notes.txt")),
        env(live.clone()),
    ]));
    msg(&mut v, live);
    assert_eq!(
        texts(&v),
        [
            "earlier in the space (4):",
            "please write",
            "agent left",
            r#"agent proposes tools/call write_file on files: {"content":"hello","path":"notes.txt"}"#,
            "live one",
            "now:"
        ]
    );
    // A leave of the past does not make a present participant absent.
    assert!(ids(&v.state().members).contains(&"agent"));
    assert_eq!(queue(&v), ["p0"]);
    assert_eq!(v.last_seen(), Some("c9"));
    // After a reconnect, the history resumes where the view stopped; a failure says so.
    v.handle_event(&Event::Ready {
        id: "human".into(),
        reconnected: true,
    });
    assert_eq!(
        actions(&mut v),
        [Action::FetchHistory {
            since: Some("c9".into())
        }]
    );
    msg(
        &mut v,
        json!({"kind": "chat", "from": "agent", "id": "c10", "payload": {"text": "after"}}),
    );
    v.handle_history(Err("the gateway answered 403".into()));
    let t = texts(&v);
    assert_eq!(
        t[t.len() - 3..],
        ["joined", "no history: the gateway answered 403", "after"]
    );
}

#[test]
fn every_list_is_bounded_and_a_folds_item_takes_its_fold_along() {
    let limits = ViewLimits {
        items: 5,
        queue: 2,
        held: 3,
        seen: 4,
        changes: 4,
        ..ViewLimits::default()
    };
    let mut v = View::new("human", limits);
    msg(
        &mut v,
        json!({"kind": "reasoning/start", "from": "agent", "id": "r1", "payload": {}}),
    );
    for i in 0..10 {
        msg(&mut v, proposal(&format!("p{i}"), "x"));
    }
    assert_eq!(v.state().items.len(), 5);
    assert!(v.state().folds.is_empty(), "gone with its item");
    assert_eq!(queue(&v), ["p8", "p9"]);
    assert_eq!(v.seen.len(), 4);
    // Too many changes waiting: one snapshot replaces them.
    let c = changes(&mut v);
    assert_eq!(c.len(), 1);
    let Change::Snapshot(s) = &c[0] else {
        panic!("{c:?}")
    };
    assert_eq!(**s, *v.state());
    msg(
        &mut v,
        json!({"kind": "chat", "from": "agent", "id": "c1", "payload": {"text": "hi"}}),
    );
    let c = changes(&mut v);
    assert!(
        matches!(&c[..], [Change::Item(i)] if i.text == "hi"),
        "{c:?}"
    );
    // Held envelopes beyond the bound are shown at once.
    v.handle_event(&Event::Ready {
        id: "human".into(),
        reconnected: false,
    });
    for i in 0..5 {
        msg(
            &mut v,
            json!({"kind": "chat", "from": "agent", "id": format!("h{i}"), "payload": {"text": format!("h{i}")}}),
        );
    }
    let t = texts(&v);
    assert!(
        t.contains(&"h2".to_owned()) && !t.contains(&"h4".to_owned()),
        "{t:?}"
    );
}

#[test]
fn the_change_stream_serializes_as_the_page_reads_it() {
    let mut v = space();
    changes(&mut v);
    msg(&mut v, proposal("p1", "a"));
    let c: Vec<Value> = changes(&mut v)
        .iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    assert_eq!(c[0]["item"]["kind"], "proposal");
    assert_eq!(c[1]["queue"][0]["id"], "p1");
    assert_eq!(
        c[1]["queue"][0]["capability"]["payload"]["params"]["name"],
        "write_file"
    );
    let cmd: Command =
        serde_json::from_value(json!({"reject": {"proposal": "p1", "reason": "no"}})).unwrap();
    assert_eq!(
        cmd,
        Command::Reject {
            proposal: "p1".into(),
            reason: "no".into()
        }
    );
    let cmd: Command =
        serde_json::from_value(json!({"control": {"target": "agent", "action": "shutdown"}}))
            .unwrap();
    assert_eq!(
        cmd,
        Command::Control {
            target: "agent".into(),
            action: ControlAction::Shutdown
        }
    );
    let cmd: Command = serde_json::from_value(json!({"always_allow": "p1"})).unwrap();
    assert_eq!(cmd, Command::AlwaysAllow("p1".into()));
}

#[test]
fn a_join_that_arrives_live_while_the_history_is_fetched_is_applied() {
    let mut v = space();
    v.handle_event(&Event::Ready {
        id: "human".into(),
        reconnected: false,
    });
    actions(&mut v);
    let join = json!({"kind": "system/presence", "id": "g2", "payload": {"event": "join",
                      "participant": {"id": "newcomer", "capabilities": [{"kind": "chat"}]}}});
    msg(&mut v, join.clone());
    // The gateway's history already holds it when it answers.
    v.handle_history(Ok(vec![env(join)]));
    assert!(
        ids(&v.state().members).contains(&"newcomer"),
        "{:?}",
        v.state().members
    );
}

/// One input of a history race: an envelope's live copy, or the history page.
enum Step {
    Live(Value),
    History(Vec<Value>),
}

/// Joins and leaves fed in each order their live copies and the history fetched after the
/// welcome may come in: the members end as the live copies say, and each is told once.
#[test]
fn a_presence_applies_once_whatever_the_order_of_its_live_copy_and_the_history() {
    use Step::{History, Live};
    let presence = |id: &str, event: &str, who: &str| {
        json!({"kind": "system/presence", "id": id, "payload": {"event": event,
               "participant": {"id": who, "capabilities": [{"kind": "mcp/response"}]}}})
    };
    let join_b = presence("g2", "join", "bridge");
    let leave_b = presence("g3", "leave", "bridge");
    let leave_a = presence("g4", "leave", "agent");
    let join_a = presence("g5", "join", "agent");
    let h = |list: &[&Value]| History(list.iter().map(|v| (*v).clone()).collect());
    let cases: Vec<(&str, Vec<Step>, bool, bool)> = vec![
        // (what, steps, bridge here at the end, agent here at the end)
        (
            "history holds the join before its live copy comes",
            vec![h(&[&join_b]), Live(join_b.clone())],
            true,
            true,
        ),
        (
            "live join held, history holds it too",
            vec![Live(join_b.clone()), h(&[&join_b])],
            true,
            true,
        ),
        (
            "live join held, history taken before it",
            vec![Live(join_b.clone()), h(&[])],
            true,
            true,
        ),
        (
            "history without the join, then the live join",
            vec![h(&[]), Live(join_b.clone())],
            true,
            true,
        ),
        (
            "join held; history holds the join and a leave whose live copy comes after",
            vec![
                Live(join_b.clone()),
                h(&[&join_b, &leave_b]),
                Live(leave_b.clone()),
            ],
            false,
            true,
        ),
        (
            "history holds a join and a leave before either live copy",
            vec![
                h(&[&join_b, &leave_b]),
                Live(join_b.clone()),
                Live(leave_b.clone()),
            ],
            false,
            true,
        ),
        (
            "a member leaves (held) and rejoins (live after the history)",
            vec![
                Live(leave_a.clone()),
                h(&[&leave_a, &join_a]),
                Live(join_a.clone()),
            ],
            false,
            true,
        ),
        (
            "a member leaves and rejoins, both live after the history",
            vec![
                h(&[&leave_a, &join_a]),
                Live(leave_a.clone()),
                Live(join_a.clone()),
            ],
            false,
            true,
        ),
        (
            "a member leaves: history first, live copy after",
            vec![h(&[&leave_a]), Live(leave_a.clone())],
            false,
            false,
        ),
    ];
    for (what, steps, bridge, agent) in cases {
        let mut v = space();
        v.handle_event(&Event::Ready {
            id: "human".into(),
            reconnected: false,
        });
        assert_eq!(actions(&mut v), [Action::FetchHistory { since: None }]);
        let mut sent = Vec::new();
        for step in steps {
            match step {
                Live(e) => {
                    sent.push(e["id"].clone());
                    msg(&mut v, e);
                }
                History(list) => v.handle_history(Ok(list.into_iter().map(env).collect())),
            }
        }
        let members = v.state().members.clone();
        assert_eq!(
            ids(&members).contains(&"bridge"),
            bridge,
            "{what}: {members:?}"
        );
        assert_eq!(
            ids(&members).contains(&"agent"),
            agent,
            "{what}: {members:?}"
        );
        if bridge {
            let b = members.iter().find(|m| m.id == "bridge").unwrap();
            assert_eq!(b.capabilities.len(), 1, "{what}: {b:?}");
        }
        // Each live copy told once, whether by the history or live.
        let t = texts(&v);
        for id in sent {
            let e = [&join_b, &leave_b, &leave_a, &join_a]
                .into_iter()
                .find(|e| e["id"] == id)
                .unwrap();
            let p = &e["payload"];
            let word = if p["event"] == "join" {
                "joined"
            } else {
                "left"
            };
            let line = format!("{} {word}", p["participant"]["id"].as_str().unwrap());
            assert_eq!(
                t.iter().filter(|l| **l == line).count(),
                1,
                "{what}: {line} in {t:?}"
            );
        }
    }
}

/// A status told by the history before its live copy comes still shows its sign-in notice.
#[test]
fn a_status_told_by_the_history_takes_effect_when_its_live_copy_comes() {
    let mut v = space();
    v.handle_event(&Event::Ready {
        id: "human".into(),
        reconnected: false,
    });
    actions(&mut v);
    let status = json!({"kind": "participant/status", "from": "files", "id": "s1", "payload": {
        "status": "active", "mcp_server": {"sign_in": {
            "url": "https://auth.example.com/authorize", "host": "auth.example.com"}}}});
    v.handle_history(Ok(vec![env(status.clone())]));
    assert!(
        v.state().notices.is_empty(),
        "a status of the past is not applied"
    );
    msg(&mut v, status.clone());
    assert_eq!(
        v.state()
            .notices
            .iter()
            .map(|n| n.text.as_str())
            .collect::<Vec<_>>(),
        ["files needs you to sign in to auth.example.com"]
    );
    // A second live copy of the same envelope changes nothing.
    v.state.notices.clear();
    msg(&mut v, status);
    assert!(v.state().notices.is_empty());
}

/// A schema of every kind of field an MCP form may hold (as server-everything asks).
fn form_schema() -> Value {
    json!({"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "title": "Name", "description": "Your full name"},
        "check": {"type": "boolean", "title": "Agree"},
        "email": {"type": "string", "format": "email"},
        "integer": {"type": "integer", "title": "Integer", "minimum": 1, "maximum": 100, "default": 42},
        "number": {"type": "number", "minimum": 0, "maximum": 1000, "default": 2.5},
        "friend": {"type": "string", "enum": ["Monica", "Rachel", "Joey"], "default": "Monica"},
        "hero": {"type": "string", "title": "Hero", "oneOf": [
            {"const": "hero-1", "title": "Superman"}, {"const": "hero-2", "title": "Green Lantern"}]},
        "legacy": {"type": "string", "enum": ["a", "b"], "enumNames": ["Alpha", "Beta"]},
        "fish": {"type": "array", "title": "Fish", "minItems": 1, "maxItems": 2,
                 "items": {"anyOf": [{"const": "fish-1", "title": "Tuna"},
                                     {"const": "fish-2", "title": "Salmon"},
                                     {"const": "fish-3", "title": "Trout"}]},
                 "default": ["fish-1"]}
    }})
}

fn ask(view: &mut View, call: u64, params: Value) {
    view.handle_event(&Event::Forwarded {
        call_id: crate::participant::CallId(call),
        from: "files".into(),
        method: "elicitation/create".into(),
        params: Some(params),
        explicit: true,
    });
}

fn values(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn a_form_question_is_built_from_its_schema_checked_and_answered() {
    let mut v = space();
    changes(&mut v);
    ask(
        &mut v,
        7,
        json!({"message": "Tell us", "requestedSchema": form_schema()}),
    );
    let q = v.state().questions[0].clone();
    assert_eq!(
        (q.id.as_str(), q.from.as_str(), q.message.as_str()),
        ("q1", "files", "Tell us")
    );
    assert_eq!(q.url, None);
    // Required first, then by name.
    let names: Vec<&str> = q.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "name", "check", "email", "fish", "friend", "hero", "integer", "legacy", "number"
        ]
    );
    let f = |n: &str| q.fields.iter().find(|f| f.name == n).unwrap().clone();
    assert!(f("name").required && !f("email").required);
    assert_eq!(
        (f("name").kind, f("name").title.as_str()),
        (FieldKind::Text, "Name")
    );
    assert_eq!(f("name").description, "Your full name");
    assert_eq!(f("email").format.as_deref(), Some("email"));
    assert_eq!(f("check").kind, FieldKind::Boolean);
    assert_eq!(
        (f("integer").kind, f("integer").text.as_str()),
        (FieldKind::Integer, "42")
    );
    assert_eq!(f("integer").hint, "1 to 100");
    assert_eq!(
        (f("number").kind, f("number").text.as_str()),
        (FieldKind::Number, "2.5")
    );
    assert_eq!(f("friend").kind, FieldKind::Choice);
    assert_eq!(
        f("friend").options[1],
        Choice {
            value: "Rachel".into(),
            title: "Rachel".into()
        }
    );
    assert_eq!(
        f("hero").options[1],
        Choice {
            value: "hero-2".into(),
            title: "Green Lantern".into()
        }
    );
    assert_eq!(f("legacy").options[0].title, "Alpha");
    assert_eq!(
        (f("fish").kind, f("fish").text.as_str()),
        (FieldKind::Choices, "fish-1")
    );
    assert_eq!(f("fish").hint, "1 to 2 choices");
    assert_eq!(f("fish").default, Some(json!(["fish-1"])));
    assert!(texts(&v).contains(&"files asks you: Tell us".to_owned()));
    let sent: Vec<Change> = changes(&mut v);
    assert!(
        sent.iter()
            .any(|c| matches!(c, Change::Questions(q) if q.len() == 1)),
        "{sent:?}"
    );

    // Nothing for a required field: refused with the field's title; nothing sent.
    let err = v
        .handle_command(Command::accept("q1", values(json!({"name": ""}))))
        .unwrap_err();
    assert_eq!(err, ViewError::Invalid("Name is required".into()));
    assert_eq!(
        v.state().questions[0].problem.as_deref(),
        Some("Name is required")
    );
    // Out of range, and not a number: each told in the field's words.
    let err = v
        .handle_command(Command::accept(
            "q1",
            values(json!({"name": "Ada", "integer": "500"})),
        ))
        .unwrap_err();
    assert!(err.to_string().starts_with("Integer: "), "{err}");
    assert!(err.to_string().contains("100"), "{err}");
    let err = v
        .handle_command(Command::accept(
            "q1",
            values(json!({"name": "Ada", "integer": "lots"})),
        ))
        .unwrap_err();
    assert_eq!(err.to_string(), "Integer: \"lots\" is not a whole number");
    let err = v
        .handle_command(Command::accept(
            "q1",
            values(json!({"name": "Ada", "hero": "Batman"})),
        ))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Hero: \"Batman\" is not one of Superman, Green Lantern"
    );
    let err = v
        .handle_command(Command::accept(
            "q1",
            values(json!({"name": "Ada", "fish": "1,2,3"})),
        ))
        .unwrap_err();
    assert!(err.to_string().starts_with("Fish: "), "{err}");
    assert!(actions(&mut v).is_empty());
    assert_eq!(v.state().questions.len(), 1);

    // Typed text becomes typed values; choices by value, title or number; defaults filled.
    v.handle_command(Command::accept(
        "q1",
        values(
            json!({"name": "Ada", "check": "yes", "integer": " 7 ", "number": "",
                      "hero": "green lantern", "fish": "2, Trout", "legacy": "1", "email": ""}),
        ),
    ))
    .unwrap();
    let want = json!({"action": "accept", "content": {
        "name": "Ada", "check": true, "integer": 7, "number": 2.5, "friend": "Monica",
        "hero": "hero-2", "fish": ["fish-2", "fish-3"], "legacy": "a"}});
    assert_eq!(
        actions(&mut v),
        [Action::Answer {
            call: 7,
            result: want
        }]
    );
    assert!(v.state().questions.is_empty());
    assert_eq!(
        v.handle_command(Command::accept("q1", serde_json::Map::new())),
        Err(ViewError::UnknownQuestion("q1".into()))
    );

    // Typed values as the page sends them (a checkbox, a list) pass as they are.
    ask(
        &mut v,
        8,
        json!({"message": "Again", "requestedSchema": form_schema()}),
    );
    v.handle_command(Command::accept(
        "q2",
        values(json!({"name": "Bo", "check": false, "fish": ["fish-3"], "integer": 9})),
    ))
    .unwrap();
    let Some(Action::Answer { call: 8, result }) = v.poll_action() else {
        panic!()
    };
    assert_eq!(result["content"]["check"], false);
    assert_eq!(result["content"]["fish"], json!(["fish-3"]));
    assert_eq!(result["content"]["integer"], 9);
}

#[test]
fn a_question_may_be_declined_or_cancelled_and_a_bridges_refusal_is_shown() {
    let mut v = space();
    ask(
        &mut v,
        1,
        json!({"message": "Seats?", "requestedSchema": {"type": "object",
        "properties": {"seats": {"type": "integer"}}}, "_meta": {"mew/rejected": "/seats: too many"}}),
    );
    assert_eq!(
        v.state().questions[0].problem.as_deref(),
        Some("the last answer was refused: /seats: too many")
    );
    ask(
        &mut v,
        2,
        json!({"message": "Really?", "requestedSchema": {"type": "object", "properties": {}}}),
    );
    // Values are not looked at when declining.
    let answer = |reply| Command::Answer {
        question: String::new(),
        reply,
        values: values(json!({"seats": "many"})),
    };
    let mut decline = answer(Reply::Decline);
    if let Command::Answer { question, .. } = &mut decline {
        *question = "q1".into();
    }
    v.handle_command(decline).unwrap();
    let mut cancel = answer(Reply::Cancel);
    if let Command::Answer { question, .. } = &mut cancel {
        *question = "q2".into();
    }
    v.handle_command(cancel).unwrap();
    assert_eq!(
        actions(&mut v),
        [
            Action::Answer {
                call: 1,
                result: json!({"action": "decline"})
            },
            Action::Answer {
                call: 2,
                result: json!({"action": "cancel"})
            }
        ]
    );
    let t = texts(&v);
    assert!(
        t.contains(&"you declined files's question".to_owned()),
        "{t:?}"
    );
    assert!(
        t.contains(&"you dismissed files's question".to_owned()),
        "{t:?}"
    );
}

#[test]
fn a_link_question_shows_only_web_links_and_odd_requests_are_not_kept() {
    let mut v = space();
    ask(
        &mut v,
        1,
        json!({"mode": "url", "message": "Authorize", "url": "https://example.com/ok",
        "elicitationId": "e1"}),
    );
    let q = &v.state().questions[0];
    assert_eq!(q.url.as_deref(), Some("https://example.com/ok"));
    assert!(q.fields.is_empty());
    v.handle_command(Command::accept("q1", serde_json::Map::new()))
        .unwrap();
    assert_eq!(
        actions(&mut v),
        [Action::Answer {
            call: 1,
            result: json!({"action": "accept"})
        }]
    );
    // A link a browser would run is never shown: cancelled at once.
    ask(
        &mut v,
        2,
        json!({"mode": "url", "message": "x", "url": "javascript:alert(1)"}),
    );
    assert!(v.state().questions.is_empty());
    assert_eq!(
        actions(&mut v),
        [Action::Answer {
            call: 2,
            result: json!({"action": "cancel"})
        }]
    );
    // Malformed: refused with the MCP client's own reason.
    ask(&mut v, 3, json!({"message": "no schema"}));
    let a = actions(&mut v);
    assert!(
        matches!(&a[..], [Action::Refuse { call: 3, code: -32602, message }] if message.contains("requestedSchema")),
        "{a:?}"
    );
    // Asked of everyone: not ours to answer.
    v.handle_event(&Event::Forwarded {
        call_id: crate::participant::CallId(4),
        from: "files".into(),
        method: "elicitation/create".into(),
        params: Some(json!({"message": "m", "requestedSchema": {"type": "object"}})),
        explicit: false,
    });
    assert_eq!(actions(&mut v), [Action::Ignore { call: 4 }]);
    assert!(v.state().questions.is_empty());
}

#[test]
fn questions_are_bounded() {
    let limits = ViewLimits {
        questions: 2,
        ..ViewLimits::default()
    };
    let mut v = View::new("human", limits);
    for call in 1..=3 {
        ask(
            &mut v,
            call,
            json!({"message": "m", "requestedSchema": {"type": "object"}}),
        );
    }
    assert_eq!(v.state().questions.len(), 2);
    assert_eq!(
        actions(&mut v),
        [Action::Answer {
            call: 3,
            result: json!({"action": "cancel"})
        }]
    );
}

#[test]
fn a_sign_in_notice_comes_with_a_status_and_goes_with_the_next_or_a_leave() {
    let mut v = space();
    changes(&mut v);
    let mut n = 0;
    let mut status = |sign_in: Value| {
        n += 1;
        json!({"kind": "participant/status", "from": "files", "id": format!("s{n}"), "payload": {
            "status": "active", "mcp_server": {"protocol_version": "2026-07-28", "sign_in": sign_in}}})
    };
    msg(
        &mut v,
        status(
            json!({"url": "https://auth.example.com/authorize?x=1", "host": "auth.example.com"}),
        ),
    );
    assert_eq!(
        v.state().notices,
        [Notice {
            participant: "files".into(),
            host: "auth.example.com".into(),
            url: "https://auth.example.com/authorize?x=1".into(),
            text: "files needs you to sign in to auth.example.com".into(),
        }]
    );
    let c = changes(&mut v);
    assert!(
        c.iter()
            .any(|c| matches!(c, Change::Notices(n) if n.len() == 1)),
        "{c:?}"
    );
    // The same status again changes nothing; a later one without sign_in removes it.
    msg(
        &mut v,
        status(
            json!({"url": "https://auth.example.com/authorize?x=1", "host": "auth.example.com"}),
        ),
    );
    assert!(
        !changes(&mut v)
            .iter()
            .any(|c| matches!(c, Change::Notices(_)))
    );
    msg(&mut v, status(Value::Null));
    assert!(v.state().notices.is_empty());
    assert!(
        changes(&mut v)
            .iter()
            .any(|c| matches!(c, Change::Notices(n) if n.is_empty()))
    );
    // A link a browser would run is not shown.
    msg(
        &mut v,
        status(json!({"url": "javascript:alert(1)", "host": "x"})),
    );
    assert!(v.state().notices.is_empty());
    // Gone with its participant.
    msg(
        &mut v,
        status(json!({"url": "https://a.example/", "host": "a.example"})),
    );
    assert_eq!(v.state().notices.len(), 1);
    msg(
        &mut v,
        json!({"kind": "system/presence", "payload": {"event": "leave",
        "participant": {"id": "files"}}}),
    );
    assert!(v.state().notices.is_empty());
    // As the page reads it.
    msg(
        &mut v,
        status(json!({"url": "https://a.example/", "host": "a.example"})),
    );
    let c = changes(&mut v).pop().unwrap();
    assert_eq!(
        serde_json::to_value(&c).unwrap(),
        json!({"notices": [{"participant": "files", "host": "a.example", "url": "https://a.example/",
                            "text": "files needs you to sign in to a.example"}]})
    );
    let cmd: Command =
        serde_json::from_value(json!({"answer": {"question": "q1", "reply": "accept",
        "values": {"a": "1"}}}))
        .unwrap();
    assert_eq!(cmd, Command::accept("q1", values(json!({"a": "1"}))));
}
