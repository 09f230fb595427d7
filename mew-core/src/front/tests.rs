//! A host session against a scripted gateway: what a host sees and what its calls become.

use super::*;
use crate::participant::{GatewayInputs, Input, ParticipantConfig};
use serde_json::{Value, json};

const ME: &str = "host";

struct Harness {
    s: HostSession,
    now: Time,
    sent: Vec<Value>,
    host: Vec<HostMessage>,
    ends: Vec<String>,
    next: u64,
}

impl Harness {
    /// Welcomed with these capabilities, beside a bridge `fs` and a person `human`.
    fn new(caps: Value) -> Harness {
        Harness::with_reconnect(caps, true)
    }

    /// As [`Harness::new`]; `reconnect`: whether the participant rejoins on its own.
    fn with_reconnect(caps: Value, reconnect: bool) -> Harness {
        let mut pc = ParticipantConfig {
            gateway_url: "ws://in-process/mcp".into(),
            space: "s".into(),
            token: "host-token".into(),
            participant_id: Some(ME.into()),
            proposal_timeout: Duration::from_secs(60),
            ..Default::default()
        };
        pc.reconnect.enabled = reconnect;
        let p = Participant::new(pc, 3);
        let config = FrontConfig {
            progress_every: Duration::from_secs(2),
            ..FrontConfig::default()
        };
        let mut h = Harness {
            s: HostSession::new(p, config),
            now: Time::from_unix_millis(1_700_000_000_000),
            sent: Vec::new(),
            host: Vec::new(),
            ends: Vec::new(),
            next: 0,
        };
        h.s.start(h.now);
        h.s.handle_input(h.now, Input::Connected);
        h.frame(json!({
            "protocol": "mew/v0.4", "id": "w1", "from": "system:gateway", "to": [ME],
            "kind": "system/welcome",
            "payload": {"you": {"id": ME, "capabilities": caps},
                "participants": [
                    {"id": "fs", "capabilities": [{"kind": "mcp/response"}]},
                    {"id": "human", "capabilities": [{"kind": "chat"}]}]}
        }));
        h.sent.clear();
        h
    }

    fn drain(&mut self) {
        while let Some(o) = self.s.poll_output() {
            match o {
                Output::Gateway(participant::Output::Transmit(t)) => {
                    let v: Value = serde_json::from_str(&t).unwrap();
                    if v.get("kind").is_some() {
                        self.sent.push(v);
                    }
                }
                Output::Host(m) => self.host.push(m),
                Output::End(why) => self.ends.push(why),
                _ => {}
            }
        }
    }

    fn frame(&mut self, v: Value) {
        self.s.handle_input(self.now, Input::Frame(&v.to_string()));
        self.drain();
    }

    fn host(&mut self, v: Value) {
        let m = crate::front::http::read_body(v.to_string().as_bytes()).unwrap();
        self.s.handle_host(self.now, m);
        self.drain();
    }

    /// Answers the last envelope sent, as `from`.
    fn respond(&mut self, from: &str, result: Value) {
        let req = self.sent.last().unwrap().clone();
        self.next += 1;
        self.frame(json!({
            "protocol": "mew/v0.4", "id": format!("r{}", self.next), "from": from, "to": [ME],
            "kind": "mcp/response", "correlation_id": [req["id"]],
            "payload": {"jsonrpc": "2.0", "id": req["payload"]["id"], "result": result}
        }));
    }

    fn init(&mut self) {
        self.host(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}));
        let r = self.host.remove(0);
        assert_eq!(r.message["result"]["protocolVersion"], "2025-11-25");
        assert!(r.message["result"]["capabilities"]["tools"]["listChanged"] == true);
    }

    fn list_tools(&mut self) -> Value {
        self.host(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
        let ask = self.sent.last().unwrap().clone();
        assert_eq!(
            (ask["kind"].as_str(), ask["to"][0].as_str()),
            (Some("mcp/request"), Some("fs"))
        );
        assert_eq!(ask["payload"]["method"], "tools/list");
        self.respond(
            "fs",
            json!({"tools": [{"name": "read_file", "inputSchema": {"type": "object",
                "$schema": "https://json-schema.org/draft/2020-12/schema"}}]}),
        );
        self.host.pop().unwrap().message
    }
}

#[test]
fn lists_merge_members_and_a_call_comes_back_with_its_result() {
    let mut h = Harness::new(json!([{"kind": "mcp/request"}, {"kind": "mcp/proposal"}]));
    h.init();
    let list = h.list_tools();
    assert_eq!(list["id"], 1);
    assert_eq!(list["result"]["tools"][0]["name"], "read_file");
    assert_eq!(
        list["result"]["tools"][0]["inputSchema"]["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    h.host(
        json!({"jsonrpc":"2.0","id":"c","method":"tools/call","params":{
        "name":"read_file","arguments":{"path":"/a"},"_meta":{"progressToken":"p"}}}),
    );
    let req = h.sent.last().unwrap().clone();
    assert_eq!(req["kind"], "mcp/request");
    assert_eq!(req["payload"]["params"]["arguments"]["path"], "/a");
    // A progress notification of the bridge reaches the host on the call's stream.
    h.frame(
        json!({"protocol":"mew/v0.4","id":"n1","from":"fs","to":[ME],"kind":"mcp/request",
        "correlation_id":[req["id"]],"payload":{"jsonrpc":"2.0","method":"notifications/progress",
        "params":{"progressToken":"p","progress":1,"total":2}}}),
    );
    let n = h.host.remove(0);
    assert_eq!(n.about.as_deref(), Some("\"c\""));
    assert_eq!(n.message["params"]["progress"], 1);
    assert!(!n.last);
    h.sent.push(req);
    h.respond("fs", json!({"content":[{"type":"text","text":"hello"}]}));
    let r = h.host.pop().unwrap();
    assert!(r.last);
    assert_eq!(r.message["id"], "c");
    assert_eq!(r.message["result"]["content"][0]["text"], "hello");
    assert_eq!(h.s.open_requests(), 0);
}

#[test]
fn a_proposal_keeps_the_host_waiting_with_progress_and_ends_with_the_reason() {
    let mut h = Harness::new(json!([
        {"kind": "mcp/request", "payload": {"method": "tools/list"}},
        {"kind": "mcp/proposal"}
    ]));
    h.init();
    h.list_tools();
    h.host(
        json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{
        "name":"read_file","arguments":{},"_meta":{"progressToken":9}}}),
    );
    let prop = h.sent.last().unwrap().clone();
    assert_eq!(prop["kind"], "mcp/proposal");
    let first = h.host.remove(0);
    assert_eq!(first.message["method"], "notifications/progress");
    assert_eq!(first.message["params"]["progressToken"], 9);
    h.now = h.now + Duration::from_secs(2);
    assert!(h.s.poll_timeout().unwrap() <= h.now);
    h.s.handle_input(h.now, Input::Timeout);
    h.drain();
    assert_eq!(h.host.remove(0).message["params"]["progress"], 2);
    h.frame(
        json!({"protocol":"mew/v0.4","id":"rj","from":"human","to":[ME],"kind":"mcp/reject",
        "correlation_id":[prop["id"]],"payload":{"reason":"not on a Friday"}}),
    );
    let r = h.host.pop().unwrap();
    assert!(r.last);
    assert_eq!(r.message["error"]["code"], REFUSED);
    assert!(
        r.message["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not on a Friday"),
        "{r:?}"
    );
}

#[test]
fn an_approved_proposal_ends_with_the_result() {
    let mut h = Harness::new(json!([
        {"kind": "mcp/request", "payload": {"method": "tools/list"}},
        {"kind": "mcp/proposal"}
    ]));
    h.init();
    h.list_tools();
    h.host(json!({"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"read_file","arguments":{}}}));
    let prop = h.sent.last().unwrap().clone();
    // No progress token: no progress.
    assert!(h.host.is_empty());
    // A person fulfils: the bridge answers the proposer too (correlated to the fulfilment).
    h.frame(
        json!({"protocol":"mew/v0.4","id":"f1","from":"human","to":["fs"],"kind":"mcp/request",
        "correlation_id":[prop["id"]],"payload":{"jsonrpc":"2.0","id":77,"method":"tools/call",
        "params":{"name":"read_file","arguments":{}}}}),
    );
    h.frame(json!({"protocol":"mew/v0.4","id":"f2","from":"fs","to":["human"],"kind":"mcp/response",
        "correlation_id":["f1"],"payload":{"jsonrpc":"2.0","id":77,"result":{"content":[{"type":"text","text":"ok"}]}}}));
    let r = h.host.pop().unwrap();
    assert_eq!(r.message["id"], 6);
    assert_eq!(r.message["result"]["content"][0]["text"], "ok");
}

#[test]
fn a_call_without_capability_names_what_is_missing() {
    let mut h = Harness::new(json!([{"kind": "mcp/request", "payload": {"method": "tools/list"}}]));
    h.init();
    h.list_tools();
    h.host(json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_file","arguments":{}}}));
    let r = h.host.pop().unwrap();
    assert_eq!(r.message["error"]["code"], FORBIDDEN);
    let msg = r.message["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("read_file") && msg.contains("fs") && msg.contains("mcp/request"),
        "{msg}"
    );
    assert_eq!(r.message["error"]["data"]["missing"]["kind"], "mcp/request");
    // Unknown tools, before initialize, unknown methods.
    h.host(json!({"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"nope"}}));
    assert_eq!(h.host.pop().unwrap().message["error"]["code"], -32602);
    h.host(json!({"jsonrpc":"2.0","id":9,"method":"tasks/list"}));
    assert_eq!(h.host.pop().unwrap().message["error"]["code"], -32601);
}

#[test]
fn a_question_of_the_bridge_goes_to_the_host_and_its_answer_back() {
    let mut h = Harness::new(json!([{"kind": "*"}]));
    h.init();
    h.list_tools();
    h.host(json!({"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"read_file","arguments":{}}}));
    let req = h.sent.last().unwrap().clone();
    h.frame(json!({"protocol":"mew/v0.4","id":"q1","from":"fs","to":[ME],"kind":"mcp/request",
        "correlation_id":[req["id"]],"payload":{"jsonrpc":"2.0","id":40,"method":"elicitation/create",
        "params":{"message":"Name?","requestedSchema":{"type":"object"}}}}));
    let q = h.host.remove(0);
    assert_eq!(q.about.as_deref(), Some("10"));
    assert_eq!(q.message["method"], "elicitation/create");
    let qid = q.message["id"].clone();
    h.sent.clear();
    h.host(json!({"jsonrpc":"2.0","id":qid,"result":{"action":"accept","content":{"name":"Ada"}}}));
    let answer = h.sent.last().unwrap();
    assert_eq!(answer["kind"], "mcp/response");
    assert_eq!(answer["correlation_id"][0], "q1");
    assert_eq!(answer["payload"]["result"]["content"]["name"], "Ada");
}

#[test]
fn members_coming_and_going_change_the_lists() {
    let mut h = Harness::new(json!([{"kind": "*"}]));
    h.init();
    h.frame(json!({"protocol":"mew/v0.4","id":"p1","from":"system:gateway","kind":"system/presence",
        "payload":{"event":"join","participant":{"id":"notes","capabilities":[{"kind":"mcp/response"}]}}}));
    let methods: Vec<&str> = h
        .host
        .iter()
        .map(|m| m.message["method"].as_str().unwrap())
        .collect();
    assert!(
        methods.contains(&"notifications/tools/list_changed"),
        "{methods:?}"
    );
    assert!(h.host.iter().all(|m| m.about.is_none()));
}

#[test]
fn stateless_requests_are_served_without_initialize() {
    let mut h = Harness::new(json!([{"kind": "*"}]));
    let meta = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":{}});
    h.host(json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":meta}}));
    let d = h.host.pop().unwrap().message;
    assert!(
        d["result"]["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28"))
    );
    h.host(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_file","arguments":{},"_meta":meta}}));
    // The call lists first, then goes out.
    h.respond(
        "fs",
        json!({"tools":[{"name":"read_file","inputSchema":{"type":"object"}}]}),
    );
    let call = h.sent.last().unwrap().clone();
    assert_eq!(call["payload"]["method"], "tools/call");
    h.respond("fs", json!({"content":[]}));
    let r = h.host.pop().unwrap().message;
    assert_eq!(r["result"]["resultType"], "complete");
}

#[test]
fn a_host_whose_participant_is_removed_gets_its_open_calls_failed() {
    let mut h = Harness::new(json!([{"kind": "*"}]));
    h.init();
    h.list_tools();
    h.host(json!({"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"read_file","arguments":{}}}));
    h.s.handle_input(
        h.now,
        Input::Disconnected {
            reason: "removed by a reload",
        },
    );
    h.drain();
    let r = h.host.pop().unwrap().message;
    assert_eq!(r["id"], 11);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("removed by a reload")
    );
    assert!(h.ends.is_empty());
}

#[test]
fn a_session_that_does_not_rejoin_ends_when_its_participant_is_removed() {
    let mut h = Harness::with_reconnect(json!([{"kind": "*"}]), false);
    h.init();
    h.list_tools();
    h.host(json!({"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"read_file","arguments":{}}}));
    h.s.handle_input(
        h.now,
        Input::Disconnected {
            reason: "closed by gateway (1008): removed from the space",
        },
    );
    h.drain();
    let r = h.host.pop().unwrap().message;
    assert_eq!(r["id"], 12);
    assert!(r["error"]["message"].as_str().unwrap().contains("removed"));
    assert_eq!(h.ends.len(), 1, "{:?}", h.ends);
    assert!(h.ends[0].contains("removed from the space"), "{:?}", h.ends);
}

#[test]
fn a_stateless_host_gets_questions_as_an_input_required_round_and_retries() {
    let mut h = Harness::new(json!([{"kind": "*"}]));
    let meta = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}});
    h.host(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{},"_meta":meta}}));
    h.respond(
        "fs",
        json!({"tools":[{"name":"read_file","inputSchema":{"type":"object"}}]}),
    );
    let call = h.sent.last().unwrap().clone();
    for (n, q, meta) in [
        (40, "Name?", json!({"mew/inputKey": "user_name"})),
        (41, "Age?", json!({})),
    ] {
        h.frame(json!({"protocol":"mew/v0.4","id":format!("q{n}"),"from":"fs","to":[ME],"kind":"mcp/request",
            "correlation_id":[call["id"]],"payload":{"jsonrpc":"2.0","id":n,"method":"elicitation/create",
            "params":{"message":q,"_meta":meta}}}));
    }
    assert!(h.host.is_empty());
    h.now = h.now + GATHER;
    h.s.handle_input(h.now, Input::Timeout);
    h.drain();
    let round = h.host.pop().unwrap();
    assert!(round.last);
    let r = &round.message["result"];
    assert_eq!(r["resultType"], "input_required");
    // The server's own key where the bridge named it; its `_meta` is not passed on.
    assert_eq!(
        r["inputRequests"]["user_name"]["params"],
        json!({"message": "Name?"})
    );
    assert_eq!(r["inputRequests"]["q2"]["method"], "elicitation/create");
    let state = r["requestState"].clone();
    // A state never issued is refused.
    h.host(
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_file",
        "arguments":{},"requestState":"forged","_meta":meta}}),
    );
    assert_eq!(h.host.pop().unwrap().message["error"]["code"], -32602);
    h.sent.clear();
    h.host(
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_file",
        "arguments":{},"requestState":state,"inputResponses":{
            "user_name":{"action":"accept","content":{"name":"Ada"}},
            "q2":{"action":"decline"}},"_meta":meta}}),
    );
    let answers: Vec<&Value> = h
        .sent
        .iter()
        .filter(|e| e["kind"] == "mcp/response")
        .collect();
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0]["correlation_id"][0], "q40");
    assert_eq!(answers[0]["payload"]["result"]["content"]["name"], "Ada");
    assert_eq!(answers[1]["payload"]["result"]["action"], "decline");
    // The call's result answers the retry.
    h.sent.push(call);
    h.respond("fs", json!({"content":[{"type":"text","text":"done"}]}));
    let r = h.host.pop().unwrap().message;
    assert_eq!(r["id"], 3);
    assert_eq!(r["result"]["content"][0]["text"], "done");
    assert_eq!(h.s.open_requests(), 0);
}
