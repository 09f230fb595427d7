use super::*;
use mew_core::participant::ToolInfo;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use serde_json::{Value, json};

fn key(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

/// An envelope from JSON with what the tests leave out filled in.
fn envelope(mut v: Value) -> Envelope {
    v["protocol"] = json!("mew/v0.4");
    if v.get("id").is_none() {
        v["id"] = json!(format!("gen-{}", v.to_string().len()));
    }
    if v.get("from").is_none() {
        v["from"] = json!("system:gateway");
    }
    serde_json::from_value(v).unwrap()
}

impl Screen {
    fn on_envelope(&mut self, v: &Value) {
        self.handle_event(&Event::Message(Box::new(envelope(v.clone()))));
    }

    fn actions(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.poll_action()).collect()
    }

    fn pending(&self) -> impl Iterator<Item = &Proposal> {
        self.state().queue.iter()
    }

    /// A key, and what the view then asks the participant to do.
    fn press(&mut self, k: KeyEvent) -> Vec<Action> {
        let quit = self.on_key(k);
        let mut a = self.actions();
        if quit {
            a.push(Action::Quit);
        }
        a
    }

    fn set_tools(&mut self, tools: Vec<(&str, &str)>) {
        let tools: Vec<AvailableTool> = tools
            .into_iter()
            .map(|(p, t)| AvailableTool {
                name: format!("{p}/{t}"),
                participant: p.into(),
                tool: ToolInfo {
                    name: t.into(),
                    description: None,
                    input_schema: None,
                    annotations: None,
                },
            })
            .collect();
        self.handle_tools(&tools);
    }
}

fn typed(s: &mut Screen, text: &str) -> Vec<Action> {
    let mut out = Vec::new();
    for c in text.chars() {
        out.extend(s.press(key(KeyCode::Char(c))));
    }
    out.extend(s.press(key(KeyCode::Enter)));
    out
}

fn space() -> Screen {
    let mut s = Screen::new("human");
    s.on_envelope(&json!({"kind": "system/welcome", "payload": {
        "you": {"id": "human", "capabilities": [{"kind": "*"}]},
        "participants": [
            {"id": "agent", "capabilities": [{"kind": "mcp/proposal"}, {"kind": "chat"}]},
            {"id": "files", "capabilities": [{"kind": "mcp/response"}]}]}}));
    s.on_envelope(&json!({"kind": "chat", "from": "agent", "id": "c1",
        "payload": {"text": "I would like to write a file — 日本語 too"}}));
    s
}

fn proposal(id: &str, path: &str) -> Value {
    json!({"kind": "mcp/proposal", "from": "agent", "id": id, "to": ["files"],
           "payload": {"method": "tools/call", "params": {"name": "write_file",
                       "arguments": {"path": path, "content": "hello"}}}})
}

fn frame(s: &Screen, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| s.render(f)).unwrap();
    format!("{}", t.backend())
}

#[test]
fn a_proposal_opens_the_review_dialog_and_y_approves_it() {
    let mut s = space();
    s.on_envelope(&proposal("p1", "notes.txt"));
    s.on_envelope(&proposal("p2", "other.txt"));
    s.set_tools(vec![("files", "write_file"), ("files", "read_file")]);
    insta::assert_snapshot!("review_dialog_80x24", frame(&s, 80, 24));
    let wide = frame(&s, 100, 30);
    assert!(
        wide.contains("· write_file") && wide.contains("· read_file"),
        "{wide}"
    );
    // Typing goes to the dialog, not the input line.
    assert_eq!(
        s.press(key(KeyCode::Char('y'))),
        vec![Action::Fulfil {
            proposal: "p1".into()
        }]
    );
    assert_eq!(s.pending().count(), 1);
    // The next proposal is under review now.
    assert!(frame(&s, 80, 24).contains("other.txt"));
}

#[test]
fn n_asks_a_reason_and_a_grants_exactly_this_call() {
    let mut s = space();
    s.on_envelope(&proposal("p1", "notes.txt"));
    assert!(s.press(key(KeyCode::Char('n'))).is_empty());
    let acts = typed(&mut s, "not there");
    assert_eq!(
        acts,
        vec![Action::Reject {
            proposal: "p1".into(),
            reason: "not there".into()
        }]
    );
    s.on_envelope(&proposal("p2", "ok.txt"));
    assert!(s.press(key(KeyCode::Char('a'))).is_empty());
    insta::assert_snapshot!("always_allow_confirm", frame(&s, 80, 24));
    let acts = s.press(key(KeyCode::Enter));
    // Always allow: the grant of exactly this call (by `Participant::grant`), then approve.
    assert_eq!(
        acts,
        vec![
            Action::Grant {
                recipient: "agent".into(),
                capabilities: vec![
                    json!({"kind": "mcp/request", "payload": {"method": "tools/call",
                "params": {"name": "write_file", "arguments": {"path": "ok.txt", "content": "hello"}}}})
                ],
                reason: "always allowed from the review dialog".into(),
            },
            Action::Fulfil {
                proposal: "p2".into()
            }
        ]
    );
}

#[test]
fn settled_elsewhere_closes_the_dialog_and_esc_defers() {
    let mut s = space();
    s.on_envelope(&proposal("p1", "a"));
    s.on_envelope(&json!({"kind": "mcp/withdraw", "from": "agent", "id": "w",
                          "correlation_id": ["p1"], "payload": {}}));
    assert_eq!(s.pending().count(), 0);
    assert!(!frame(&s, 80, 24).contains(" review "));
    s.on_envelope(&proposal("p2", "b"));
    assert!(s.press(key(KeyCode::Esc)).is_empty());
    // The keyboard is the input line's again: this is a chat.
    assert_eq!(
        typed(&mut s, "hi"),
        vec![Action::Chat { text: "hi".into() }]
    );
    // Enter on an empty line brings the deferred proposal back.
    assert!(s.press(key(KeyCode::Enter)).is_empty());
    assert_eq!(
        s.press(key(KeyCode::Char('y'))),
        vec![Action::Fulfil {
            proposal: "p2".into()
        }]
    );
}

#[test]
fn slash_commands_make_envelopes_and_bad_ones_say_why() {
    let mut s = space();
    assert_eq!(
        typed(&mut s, "/grant agent mcp/request"),
        vec![Action::Grant {
            recipient: "agent".into(),
            capabilities: vec![json!({"kind": "mcp/request"})],
            reason: String::new()
        }]
    );
    assert_eq!(
        typed(&mut s, "/revoke agent {\"kind\": \"chat\"}"),
        vec![Action::Revoke {
            recipient: "agent".into(),
            capabilities: vec![json!({"kind": "chat"})],
            reason: String::new()
        }]
    );
    assert_eq!(
        typed(&mut s, "/pause agent"),
        vec![Action::Send(
            json!({"kind": "participant/pause", "to": ["agent"], "payload": {}})
        )]
    );
    assert_eq!(
        typed(&mut s, "/kick agent"),
        vec![Action::Send(json!({"kind": "space/kick", "to": [],
            "payload": {"participant_id": "agent", "reason": "kicked"}}))]
    );
    assert_eq!(
        typed(&mut s, r#"/json {"kind":"chat","payload":{"text":"raw"}}"#),
        vec![Action::Send(
            json!({"kind": "chat", "payload": {"text": "raw"}})
        )]
    );
    assert!(typed(&mut s, "/nope").is_empty());
    assert!(typed(&mut s, "/grant").is_empty());
    assert_eq!(typed(&mut s, "/quit"), vec![Action::Quit]);
    // History: Up brings the last line back.
    s.press(key(KeyCode::Up));
    assert_eq!(s.press(key(KeyCode::Enter)), vec![Action::Quit]);
    let f = frame(&s, 80, 24);
    assert!(f.contains("unknown command /nope"), "{f}");
    assert!(f.contains("usage: /grant"), "{f}");
}

#[test]
fn a_narrow_terminal_keeps_the_messages_and_the_dialog() {
    let mut s = space();
    for i in 0..300 {
        s.on_envelope(
            &json!({"kind": "chat", "from": "agent", "id": format!("m{i}"),
                              "payload": {"text": format!("line {i}")}}),
        );
    }
    let f = frame(&s, 60, 20);
    assert!(f.contains("line 299"), "the newest line is in view: {f}");
    s.on_envelope(&proposal("p1", "x"));
    let f = frame(&s, 60, 20);
    assert!(
        f.contains("agent proposes tools/call write_file on files"),
        "{f}"
    );
    insta::assert_snapshot!("narrow_60x20", f);
}

#[test]
fn three_approvals_bring_a_suggestion_card() {
    let mut s = space();
    for (i, path) in ["src/a.rs", "src/b.rs", "src/c.rs"].iter().enumerate() {
        let id = format!("p{i}");
        s.on_envelope(&proposal(&id, path));
        assert_eq!(
            s.press(key(KeyCode::Char('y'))),
            vec![Action::Fulfil {
                proposal: id.clone()
            }]
        );
        // The fulfilling request, as the gateway shows it to everyone.
        s.on_envelope(
            &json!({"kind": "mcp/request", "from": "human", "id": format!("f{i}"),
            "ts": format!("2026-11-25T10:00:0{i}Z"), "to": ["files"], "correlation_id": [id],
            "payload": {"method": "tools/call", "params": {"name": "write_file",
                        "arguments": {"path": path, "content": "hello"}}}}),
        );
    }
    let f = frame(&s, 100, 24);
    assert!(f.contains(" suggestion "), "{f}");
    insta::assert_snapshot!("suggestion_card", f);
    let acts = s.press(key(KeyCode::Char('g')));
    assert_eq!(
        acts,
        vec![Action::Grant {
            recipient: "agent".into(),
            capabilities: vec![
                json!({"kind": "mcp/request", "payload": {"method": "tools/call", "params": {
                "name": "write_file", "arguments": {"content": "hello", "path": "src/*"}}}})
            ],
            reason: "approved 3 times by human".into()
        }]
    );
    // Shown once: nothing more is suggested for the same shape.
    assert!(!frame(&s, 100, 24).contains(" suggestion "));
}

#[test]
fn reasoning_folds_under_its_chat_and_follows_the_thoughts() {
    let mut s = space();
    s.on_envelope(
        &json!({"kind": "chat", "from": "human", "id": "q", "payload": {"text": "weather?"}}),
    );
    s.on_envelope(
        &json!({"kind": "reasoning/start", "from": "agent", "id": "r1",
                          "correlation_id": ["q"], "payload": {"message": "Working on: weather?"}}),
    );
    s.on_envelope(
        &json!({"kind": "chat", "from": "files", "id": "x", "payload": {"text": "unrelated"}}),
    );
    assert!(frame(&s, 100, 24).contains("▸ agent is thinking…"));
    for (i, t) in ["Calling weather-service/get_weather", "Adding the tip"]
        .iter()
        .enumerate()
    {
        s.on_envelope(
            &json!({"kind": "reasoning/thought", "from": "agent", "id": format!("t{i}"),
                              "context": "r1", "payload": {"message": t}}),
        );
    }
    let f = frame(&s, 100, 24);
    assert!(
        f.contains("▸ agent is thinking (2 thought(s)): Adding the tip"),
        "{f}"
    );
    // One line, under the question and before the unrelated chat, however many thoughts.
    let rows: Vec<&str> = f.lines().collect();
    let at = |needle: &str| rows.iter().position(|r| r.contains(needle)).unwrap();
    assert!(
        at("weather?") < at("▸ agent") && at("▸ agent") < at("unrelated"),
        "{f}"
    );
    s.on_envelope(
        &json!({"kind": "reasoning/conclusion", "from": "agent", "id": "c",
                          "context": "r1", "payload": {"message": "Answered after 2 step(s)"}}),
    );
    assert!(frame(&s, 100, 24).contains("▸ agent reasoned in 2 step(s): Answered after 2 step(s)"));
}

#[test]
fn discovery_is_folded_away_and_long_texts_are_summarised() {
    let mut s = space();
    // The agent discovers the file server's tools: four envelopes nobody asked to see.
    s.on_envelope(
        &json!({"kind": "mcp/request", "from": "agent", "id": "d1", "to": ["files"],
        "payload": {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}}),
    );
    s.on_envelope(
        &json!({"kind": "mcp/response", "from": "files", "id": "d2", "to": ["agent"],
        "correlation_id": ["d1"], "payload": {"jsonrpc": "2.0", "id": 1,
        "result": {"tools": [{"name": "read_file", "inputSchema": {"type": "object"}}]}}}),
    );
    s.on_envelope(
        &json!({"kind": "mcp/request", "from": "agent", "id": "d3", "to": ["files"],
        "payload": {"jsonrpc": "2.0", "id": 2, "method": "resources/list"}}),
    );
    // An answer listing tools whose request was not seen is chatter too.
    s.on_envelope(
        &json!({"kind": "mcp/response", "from": "files", "id": "d4", "to": ["agent"],
        "correlation_id": ["x"], "payload": {"jsonrpc": "2.0", "id": 3,
        "result": {"tools": []}}}),
    );
    // A tool call and its long answer stay, summarised.
    let long: Vec<String> = (1..=40).map(|i| format!("line {i} of the file")).collect();
    s.on_envelope(
        &json!({"kind": "mcp/request", "from": "agent", "id": "r1", "to": ["files"],
        "payload": {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                    "params": {"name": "read_file", "arguments": {"path": "big.txt"}}}}),
    );
    s.on_envelope(
        &json!({"kind": "mcp/response", "from": "files", "id": "r2", "to": ["agent"],
        "correlation_id": ["r1"], "payload": {"jsonrpc": "2.0", "id": 4,
        "result": {"content": [{"type": "text", "text": long.join("\n")}]}}}),
    );
    let f = frame(&s, 100, 30);
    assert!(
        !f.contains("tools/list") && !f.contains("resources/list"),
        "{f}"
    );
    assert!(
        f.contains("4 background message(s) hidden: /verbose"),
        "{f}"
    );
    assert!(
        f.contains(r#"agent calls read_file on files: {"path":"big.txt"}"#),
        "{f}"
    );
    assert!(
        f.contains("files answers:") && f.contains("line 3 of the file"),
        "{f}"
    );
    assert!(!f.contains("line 4 of the file"), "{f}");
    assert!(f.contains("… 37 more line(s): Ctrl-O expands"), "{f}");

    // Ctrl-O shows the whole text; again folds it.
    s.press(KeyEvent::new(KeyCode::Char('o'), KeyModifiers::CONTROL));
    let f = frame(&s, 100, 60);
    assert!(
        f.contains("line 40 of the file") && !f.contains("more line(s)"),
        "{f}"
    );
    s.press(KeyEvent::new(KeyCode::Char('o'), KeyModifiers::CONTROL));

    // /verbose shows the chatter, dimmed, earlier ones included.
    assert_eq!(typed(&mut s, "/verbose"), vec![]);
    let f = frame(&s, 100, 40);
    assert!(
        f.contains("agent calls tools/list on files") && f.contains("resources/list"),
        "{f}"
    );
    assert!(f.contains("4 background message(s) shown"), "{f}");
    typed(&mut s, "/verbose");
    assert!(!frame(&s, 100, 40).contains("tools/list"));

    // A discovery request that fulfils a proposal was asked for by a person: it stays.
    s.on_envelope(
        &json!({"kind": "mcp/request", "from": "agent", "id": "f1", "to": ["files"],
        "correlation_id": ["p9"], "payload": {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}}),
    );
    assert!(frame(&s, 100, 40).contains("agent calls tools/list on files"));
}

#[test]
fn a_crowds_batched_presence_updates_the_members_in_one_line() {
    let mut s = space();
    s.on_envelope(&json!({"kind": "system/presence", "from": "system:gateway", "payload": {
        "event": "batch", "online": 1204, "omitted": 7, "changes": [
            {"event": "join", "participant": {"id": "newcomer", "capabilities": [{"kind": "chat"}]}},
            {"event": "leave", "participant": {"id": "files"}}]}}));
    // A leaver is dropped from the panel, as the participant SDK drops it.
    let ids: Vec<&str> = s.state().members.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["agent", "human", "newcomer"]);
    let f = frame(&s, 100, 30);
    assert!(!f.contains("● files"), "{f}");
    assert!(
        f.contains("1 joined, 1 left (7 more not listed; 1204 online)"),
        "{f}"
    );
    assert!(f.contains("newcomer"), "{f}");
}

#[test]
fn history_comes_first_and_repeats_nothing() {
    let mut s = space();
    // The join: the view asks for the history and holds what arrives meanwhile.
    s.handle_event(&Event::Ready {
        id: "human".into(),
        reconnected: false,
    });
    assert_eq!(
        s.actions(),
        [Action::FetchHistory {
            since: Some("c1".into())
        }]
    );
    let live =
        json!({"kind": "chat", "from": "agent", "id": "c9", "payload": {"text": "live one"}});
    s.on_envelope(&live);
    assert!(
        !frame(&s, 100, 30).contains("live one"),
        "held until the history"
    );
    s.handle_history(Ok(vec![
        envelope(
            json!({"kind": "chat", "from": "human", "id": "c0", "payload": {"text": "please write notes.txt"}}),
        ),
        envelope(json!({"kind": "system/presence", "from": "system:gateway", "id": "g1",
               "payload": {"event": "leave", "participant": {"id": "agent"}}})),
        envelope(proposal("p0", "notes.txt")),
        envelope(live.clone()),
    ]));
    // The live chat came during the fetch and is in the history too: shown once, in its
    // place; sent again (a repeat), not shown again.
    s.on_envelope(&live);
    s.press(key(KeyCode::Esc));
    let f = frame(&s, 100, 40);
    let at = |t: &str| f.find(t).unwrap_or_else(|| panic!("{t} not in\n{f}"));
    assert!(at("earlier in the space (4):") < at("please write notes.txt"));
    assert!(at("please write notes.txt") < at("agent left"));
    assert!(at("agent left") < at("live one"));
    assert!(at("live one") < at("now:"));
    assert_eq!(f.matches("live one").count(), 1, "{f}");
    // A leave of the past does not make a present participant absent.
    assert!(f.contains("● agent"), "{f}");
    // The proposal still open is up for review, with what led to it above.
    assert_eq!(
        s.pending().map(|p| p.id.as_str()).collect::<Vec<_>>(),
        ["p0"]
    );
    assert_eq!(s.last_seen(), Some("c9"));
    // A failed fetch (after a rejoin: from where the screen stopped) says so and shows
    // what was held.
    s.handle_event(&Event::Ready {
        id: "human".into(),
        reconnected: true,
    });
    assert_eq!(
        s.actions(),
        [Action::FetchHistory {
            since: Some("c9".into())
        }]
    );
    s.on_envelope(
        &json!({"kind": "chat", "from": "agent", "id": "c10", "payload": {"text": "after"}}),
    );
    s.handle_history(Err("the gateway answered 403".into()));
    let f = frame(&s, 100, 40);
    assert!(
        f.contains("no history: the gateway answered 403") && f.contains("after"),
        "{f}"
    );
}

#[test]
fn a_decision_is_recorded_with_what_was_decided() {
    let mut s = space();
    s.on_envelope(&proposal("p1", "notes.txt"));
    assert_eq!(
        s.press(key(KeyCode::Char('y'))),
        vec![Action::Fulfil {
            proposal: "p1".into()
        }]
    );
    // This screen's own fulfilment comes back from the gateway.
    s.on_envelope(
        &json!({"kind": "mcp/request", "from": "human", "id": "f1", "to": ["files"],
        "correlation_id": ["p1"], "payload": {"method": "tools/call",
        "params": {"name": "write_file", "arguments": {"path": "notes.txt", "content": "hello"}}}}),
    );
    let f = frame(&s, 120, 30);
    assert!(
        f.contains("proposal approved by human: agent's tools/call write_file on files:"),
        "{f}"
    );
    assert!(
        f.contains(r#"{"content":"hello","path":"notes.txt"}"#),
        "{f}"
    );
    assert!(!f.contains("human calls"), "{f}");
    // Rejected on another screen of the same person: the dialog here closes, and says why.
    s.on_envelope(&proposal("p2", "other.txt"));
    assert!(frame(&s, 100, 30).contains(" review "));
    s.on_envelope(
        &json!({"kind": "mcp/reject", "from": "human", "id": "r1", "to": ["agent"],
        "correlation_id": ["p2"], "payload": {"reason": "not now"}}),
    );
    assert_eq!(s.pending().count(), 0);
    let f = frame(&s, 120, 30);
    assert!(!f.contains(" review "), "{f}");
    assert!(
        f.contains("proposal rejected by human: not now (agent's tools/call write_file on files)"),
        "{f}"
    );
}

#[test]
fn capabilities_show_their_patterns_and_own_listings_are_chatter() {
    let mut s = Screen::new("human");
    s.on_envelope(&json!({"kind": "system/welcome", "payload": {
        "you": {"id": "human", "capabilities": [{"kind": "*"}]},
        "participants": [{"id": "agent", "capabilities": [
            {"kind": "chat"},
            {"kind": "mcp/request", "payload": {"method": "tools/list"}}]}]}}));
    let f = frame(&s, 120, 30);
    assert!(f.contains(r#"{"method":"tools/list"#), "{f}");
    // The answer to this participant's own discovery: a listing, folded away.
    let tools: Vec<Value> = (0..40)
        .map(|i| json!({"name": format!("tool_{i}"), "inputSchema": {"type": "object"}}))
        .collect();
    s.on_envelope(
        &json!({"kind": "mcp/response", "from": "files", "id": "l1", "to": ["human"],
        "correlation_id": ["human-1"], "payload": {"result": {"tools": tools}}}),
    );
    let f = frame(&s, 120, 30);
    assert!(!f.contains("tool_0") && !f.contains("files answers"), "{f}");
    assert!(
        f.contains("1 background message(s) hidden: /verbose"),
        "{f}"
    );
}

fn ctrl(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL)
}

fn asked(s: &mut Screen, call: u64, params: Value) {
    s.handle_event(&Event::Forwarded {
        call_id: mew_core::participant::CallId(call),
        from: "files".into(),
        method: "elicitation/create".into(),
        params: Some(params),
        explicit: true,
    });
}

#[test]
fn a_question_is_a_form_answered_from_the_keyboard() {
    let mut s = space();
    asked(
        &mut s,
        5,
        json!({"message": "Book seats", "requestedSchema": {"type": "object",
        "required": ["seats"], "properties": {
            "seats": {"type": "integer", "title": "Seats", "minimum": 1, "maximum": 4},
            "window": {"type": "boolean", "title": "Window", "default": true},
            "meal": {"type": "string", "title": "Meal", "oneOf": [
                {"const": "v", "title": "Veggie"}, {"const": "m", "title": "Meat"}]}}}}),
    );
    let f = frame(&s, 90, 30);
    assert!(f.contains("files asks: Book seats"), "{f}");
    assert!(f.contains("› Seats*: _"), "{f}");
    assert!(f.contains("Window: yes"), "{f}");
    assert!(f.contains("1 Veggie · 2 Meat"), "{f}");
    assert!(f.contains("1 to 4"), "{f}");
    // Too many seats: refused with the reason in the dialog, nothing sent.
    assert!(typed(&mut s, "9").is_empty());
    let f = frame(&s, 90, 30);
    assert!(f.contains("! Seats: "), "{f}");
    insta::assert_snapshot!("question_form", f);
    // Corrected, the next field chosen by its number, then answered.
    s.press(key(KeyCode::Backspace));
    // Required first, then by name: seats, meal, window.
    for k in [
        key(KeyCode::Char('2')),
        key(KeyCode::Tab),
        key(KeyCode::Char('2')),
    ] {
        s.press(k);
    }
    let a = s.press(key(KeyCode::Enter));
    assert_eq!(
        a,
        [Action::Answer {
            call: 5,
            result: json!({"action": "accept", "content": {
            "seats": 2, "window": true, "meal": "m"}})
        }]
    );
    assert!(!frame(&s, 90, 30).contains("Book seats\n"));
    // Declined and cancelled with their keys; a link is shown whole.
    asked(
        &mut s,
        6,
        json!({"message": "Sure?", "requestedSchema": {"type": "object"}}),
    );
    assert_eq!(
        s.press(ctrl('d')),
        [Action::Answer {
            call: 6,
            result: json!({"action": "decline"})
        }]
    );
    asked(
        &mut s,
        7,
        json!({"mode": "url", "message": "Connect", "url": "https://auth.example.com/a"}),
    );
    let f = frame(&s, 90, 30);
    assert!(f.contains("open https://auth.example.com/a"), "{f}");
    assert_eq!(
        s.press(key(KeyCode::Esc)),
        [Action::Answer {
            call: 7,
            result: json!({"action": "cancel"})
        }]
    );
}

#[test]
fn a_sign_in_notice_shows_above_the_messages_until_the_next_status() {
    let mut s = space();
    s.on_envelope(
        &json!({"kind": "participant/status", "from": "files", "id": "st1",
        "payload": {"mcp_server": {"sign_in": {"url": "https://auth.example.com/authorize?c=1",
                                                "host": "auth.example.com"}}}}),
    );
    let f = frame(&s, 100, 24);
    assert!(
        f.contains("files needs you to sign in to auth.example.com"),
        "{f}"
    );
    assert!(
        f.contains("open https://auth.example.com/authorize?c=1"),
        "{f}"
    );
    s.on_envelope(
        &json!({"kind": "participant/status", "from": "files", "id": "st2",
        "payload": {"mcp_server": {"protocol_version": "2025-11-25"}}}),
    );
    let f = frame(&s, 100, 24);
    assert!(!f.contains("sign in"), "{f}");
}
