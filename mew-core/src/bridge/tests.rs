//! The bridge against a scripted gateway and a scripted MCP server (the real servers are
//! exercised end to end in the tests crate).

use super::*;
use crate::mcp::jsonrpc::codes;
use crate::mcp::{McpConfig, RestartBackoff};
use crate::participant::ParticipantConfig;
use crate::participant::{GatewayInputs, Input};
use serde_json::{Value, json};
use std::time::Duration;

const ME: &str = "fs";

struct Harness {
    b: Bridge,
    now: Time,
    /// Envelopes sent to the gateway, parsed.
    sent: Vec<Value>,
    /// JSON-RPC messages written to the server, parsed.
    written: Vec<Value>,
    spawns: usize,
    kills: usize,
    disconnects: usize,
    exits: Vec<Exit>,
    mcp_events: Vec<McpEvent>,
    next: u64,
}

fn config(max_reconnects: u32) -> BridgeConfig {
    BridgeConfig {
        participant: ParticipantConfig {
            gateway_url: "ws://gw.test/ws?space=s".into(),
            space: "s".into(),
            token: "fs-token".into(),
            participant_id: Some(ME.into()),
            ..Default::default()
        },
        mcp: McpConfig {
            init_timeout: Duration::from_secs(5),
            restart: RestartBackoff {
                max_reconnects,
                initial_delay: Duration::from_millis(100),
                ..RestartBackoff::default()
            },
            ..McpConfig::default()
        },
        call_timeout: Duration::from_secs(10),
        max_waiting: 4,
        sampling_answered_by: None,
    }
}

fn tools() -> Value {
    json!([
        {"name": "echo", "description": "Echoes", "inputSchema": {"type": "object",
            "properties": {"message": {"type": "string"}}, "required": ["message"]},
         "annotations": {"readOnlyHint": true}, "outputSchema": {"type": "object"}},
        {"name": "add", "inputSchema": {"type": "object"}}
    ])
}

impl Harness {
    fn new(max_reconnects: u32) -> Harness {
        Harness::with(config(max_reconnects))
    }

    fn with(config: BridgeConfig) -> Harness {
        let mut h = Harness {
            b: Bridge::new(config, 7),
            now: Time::from_unix_millis(1_700_000_000_000),
            sent: Vec::new(),
            written: Vec::new(),
            spawns: 0,
            kills: 0,
            disconnects: 0,
            exits: Vec::new(),
            mcp_events: Vec::new(),
            next: 0,
        };
        h.b.start(h.now).unwrap();
        h.drain();
        h
    }

    /// Connected, welcomed, and the server ready with [`tools`] plus one resource.
    fn ready() -> Harness {
        let mut h = Harness::new(2);
        h.join();
        h.server_up();
        h
    }

    fn drain(&mut self) {
        while let Some(o) = self.b.poll_output() {
            match o {
                Output::Gateway(participant::Output::Transmit(t)) => {
                    let v: Value = serde_json::from_str(&t).unwrap();
                    if v.get("kind").is_some() {
                        self.sent.push(v);
                    }
                }
                Output::Gateway(participant::Output::Disconnect { .. }) => self.disconnects += 1,
                Output::Gateway(_) => {}
                Output::Server(mcp::Output::Spawn) => self.spawns += 1,
                Output::Server(mcp::Output::Kill { .. }) => self.kills += 1,
                Output::Server(mcp::Output::Write(line)) => {
                    assert!(line.ends_with('\n'));
                    self.written.push(serde_json::from_str(&line).unwrap());
                }
                Output::Server(mcp::Output::Event(_)) => panic!("events come as Output::Mcp"),
                Output::Server(mcp::Output::Http(_) | mcp::Output::HttpAbort(_)) => {
                    panic!("the bridge speaks stdio here")
                }
                Output::OAuthFetch(_) | Output::OAuthSave(_) | Output::Auth(_) => {
                    panic!("no OAuth over stdio")
                }
                Output::Participant(_) => {}
                Output::Mcp(e) => self.mcp_events.push(e),
                Output::Exit(e) => self.exits.push(e),
            }
        }
    }

    fn join(&mut self) {
        self.b.handle_input(self.now, Input::Connected);
        self.frame(json!({
            "protocol": "mew/v0.4", "id": "w1", "from": "system:gateway", "to": [ME],
            "kind": "system/welcome",
            "payload": {"you": {"id": ME, "capabilities": [{"kind": "*"}]},
                        "participants": [{"id": "human", "capabilities": [{"kind": "*"}]}]}
        }));
        self.sent.clear();
    }

    fn frame(&mut self, v: Value) {
        self.b.handle_input(self.now, Input::Frame(&v.to_string()));
        self.drain();
    }

    fn server_line(&mut self, v: Value) {
        let mut line = v.to_string();
        line.push('\n');
        self.b.handle_server_stdout(self.now, line.as_bytes());
        self.drain();
    }

    /// The last written request with `method`.
    fn written_request(&self, method: &str) -> Value {
        self.written
            .iter()
            .rev()
            .find(|m| m["method"] == method)
            .cloned()
            .unwrap_or_else(|| panic!("no {method} written: {:?}", self.written))
    }

    /// Spawned -> initialize answered -> lists answered.
    fn server_up(&mut self) {
        self.b.handle_server_spawned(self.now);
        self.drain();
        let init = self.written_request("initialize");
        self.server_line(json!({"jsonrpc": "2.0", "id": init["id"], "result": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {"listChanged": true}, "resources": {}},
            "serverInfo": {"name": "scripted", "version": "1.0"}}}));
        let list = self.written_request("tools/list");
        self.server_line(json!({"jsonrpc": "2.0", "id": list["id"], "result": {"tools": tools()}}));
        let list = self.written_request("resources/list");
        self.server_line(
            json!({"jsonrpc": "2.0", "id": list["id"], "result": {"resources": [
            {"uri": "test://one", "name": "one", "mimeType": "text/plain"}]}}),
        );
        assert_eq!(self.b.mcp().phase(), Phase::Ready);
    }

    /// A request from `human`; returns its envelope id.
    fn request(&mut self, to: &[&str], method: &str, params: Value) -> String {
        self.next += 1;
        let id = format!("req-{}", self.next);
        self.frame(json!({
            "protocol": "mew/v0.4", "id": id, "from": "human", "to": to,
            "kind": "mcp/request",
            "payload": {"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}
        }));
        id
    }

    fn response_to(&self, request: &str) -> Option<Value> {
        self.sent
            .iter()
            .find(|e| e["kind"] == "mcp/response" && e["correlation_id"] == json!([request]))
            .cloned()
    }

    fn advance(&mut self, d: Duration) {
        self.now = self.now + d;
        self.b.handle_input(self.now, Input::Timeout);
        self.drain();
    }
}

#[test]
fn tools_list_is_served_from_the_catalog_with_full_definitions() {
    let mut h = Harness::ready();
    let before = h.written.len();
    let id = h.request(&[ME], "tools/list", json!({}));
    let r = h.response_to(&id).expect("answered");
    assert_eq!(r["to"], json!(["human"]));
    assert_eq!(r["payload"]["result"]["tools"], tools());
    assert_eq!(h.written.len(), before, "no round trip to the server");
    // The participant's registry mirrors the server's tools.
    let names: Vec<_> = h.b.participant().tools().map(|t| t.name.clone()).collect();
    assert_eq!(names, ["add", "echo"]);
}

#[test]
fn tools_call_is_forwarded_and_the_result_returned_unchanged() {
    let mut h = Harness::ready();
    let args =
        json!({"name": "echo", "arguments": {"message": "hi"}, "_meta": {"progressToken": 3}});
    let id = h.request(&[ME], "tools/call", args.clone());
    let call = h.written_request("tools/call");
    assert_eq!(call["params"], args, "params pass through as sent");
    assert!(h.response_to(&id).is_none());
    assert_eq!(h.b.calls_in_flight(), 1);
    let result =
        json!({"content": [{"type": "text", "text": "Echo: hi"}], "structuredContent": {"x": 1}});
    h.server_line(json!({"jsonrpc": "2.0", "id": call["id"], "result": result}));
    let r = h.response_to(&id).expect("answered");
    assert_eq!(r["payload"]["result"], result);
    assert_eq!(r["payload"]["id"], h.next);
    assert_eq!(h.b.calls_in_flight(), 0);
}

#[test]
fn json_rpc_errors_keep_code_message_and_data() {
    let mut h = Harness::ready();
    let id = h.request(
        &[ME],
        "tools/call",
        json!({"name": "nope", "arguments": {}}),
    );
    let call = h.written_request("tools/call");
    h.server_line(json!({"jsonrpc": "2.0", "id": call["id"],
        "error": {"code": -32602, "message": "Unknown tool: nope", "data": {"hint": 1}}}));
    let r = h.response_to(&id).expect("answered");
    assert_eq!(
        r["payload"]["error"],
        json!({"code": -32602, "message": "Unknown tool: nope", "data": {"hint": 1}})
    );
}

#[test]
fn prompts_list_the_server_does_not_offer_gets_the_servers_own_answer() {
    let mut h = Harness::ready();
    let id = h.request(&[ME], "prompts/list", json!({}));
    let call = h.written_request("prompts/list");
    h.server_line(json!({"jsonrpc": "2.0", "id": call["id"],
        "error": {"code": -32601, "message": "Method not found"}}));
    let r = h.response_to(&id).unwrap();
    assert_eq!(r["payload"]["error"]["code"], -32601);
}

#[test]
fn broadcast_requests_are_served_only_for_what_the_server_offers() {
    let mut h = Harness::ready();
    let other = h.request(
        &[],
        "tools/call",
        json!({"name": "elsewhere", "arguments": {}}),
    );
    assert!(h.response_to(&other).is_none());
    assert!(h.written.iter().all(|m| m["method"] != "tools/call"));
    assert_eq!(
        h.b.participant().pending_calls().count(),
        0,
        "declined, not held"
    );
    let ours = h.request(&[], "resources/read", json!({"uri": "test://one"}));
    let call = h.written_request("resources/read");
    h.server_line(json!({"jsonrpc": "2.0", "id": call["id"], "result": {"contents": []}}));
    assert!(h.response_to(&ours).is_some());
    let list = h.request(&[], "tools/list", json!({}));
    assert!(
        h.response_to(&list).is_some(),
        "broadcast lists are answered"
    );
}

#[test]
fn requests_before_the_server_is_ready_wait_for_it() {
    let mut h = Harness::new(2);
    h.join();
    let list = h.request(&[ME], "tools/list", json!({}));
    let call = h.request(&[ME], "tools/call", json!({"name": "add", "arguments": {}}));
    assert_eq!(h.b.waiting(), 2);
    assert!(h.response_to(&list).is_none());
    h.server_up();
    assert_eq!(h.b.waiting(), 0);
    assert_eq!(
        h.response_to(&list).unwrap()["payload"]["result"]["tools"],
        tools()
    );
    let fwd = h.written_request("tools/call");
    h.server_line(json!({"jsonrpc": "2.0", "id": fwd["id"], "result": {"content": []}}));
    assert!(h.response_to(&call).is_some());
}

#[test]
fn waiting_is_bounded_and_expires() {
    let mut h = Harness::new(2);
    h.join();
    let ids: Vec<String> = (0..5)
        .map(|_| h.request(&[ME], "tools/call", json!({"name": "add"})))
        .collect();
    assert_eq!(h.b.waiting(), 4);
    let refused = h.response_to(&ids[4]).expect("fifth refused at once");
    assert_eq!(refused["payload"]["error"]["code"], codes::INTERNAL_ERROR);
    // The server never answers; the held requests expire with the call timeout.
    h.advance(Duration::from_secs(10));
    for id in &ids[..4] {
        let r = h.response_to(id).expect("expired");
        assert_eq!(r["payload"]["error"]["code"], codes::REQUEST_TIMEOUT, "{r}");
    }
    assert_eq!(h.b.waiting(), 0);
    assert!(h.b.poll_timeout().is_some());
}

#[test]
fn a_crash_fails_the_call_in_flight_and_the_server_comes_back() {
    let mut h = Harness::ready();
    let id = h.request(
        &[ME],
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "x"}}),
    );
    h.b.handle_server_exited(h.now, ExitStatus::signal(9));
    h.drain();
    let r = h
        .response_to(&id)
        .expect("the caller in flight is answered");
    assert_eq!(r["payload"]["error"]["code"], codes::CONNECTION_CLOSED);
    assert!(
        r["payload"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("signal 9"),
        "{r}"
    );
    assert_eq!(h.b.server_state(), ServerState::Restarting);
    // A request during the backoff waits for the new process.
    let during = h.request(&[ME], "tools/list", json!({}));
    assert!(h.response_to(&during).is_none());
    assert_eq!(h.spawns, 1);
    h.advance(Duration::from_millis(100));
    assert_eq!(h.spawns, 2);
    h.server_up();
    assert_eq!(h.b.restarts(), 1);
    assert!(h.response_to(&during).is_some());
    assert_eq!(
        h.b.participant().tools().count(),
        2,
        "tools registered again"
    );
}

#[test]
fn a_first_start_that_fails_ends_the_bridge_at_once() {
    let mut h = Harness::new(3);
    h.join();
    let waiting = h.request(&[ME], "tools/call", json!({"name": "add"}));
    h.b.handle_server_spawn_failed(h.now, "nosuch: No such file or directory (os error 2)");
    h.drain();
    assert_eq!(h.spawns, 1, "no retry of a command that never started");
    let r = h.response_to(&waiting).expect("waiting caller answered");
    assert!(
        r["payload"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("No such file")
    );
    let status = h
        .sent
        .iter()
        .find(|e| e["kind"] == "participant/status")
        .unwrap();
    assert_eq!(status["payload"]["status"], "error");
    assert!(
        status["payload"]["error"]
            .as_str()
            .unwrap()
            .contains("No such file")
    );
    assert!(status["payload"].get("messages_in_context").is_some());
    let chat = h.sent.iter().find(|e| e["kind"] == "chat").unwrap();
    assert!(
        chat["payload"]["text"]
            .as_str()
            .unwrap()
            .contains("No such file")
    );
    assert_eq!(h.disconnects, 1);
    assert_eq!(h.exits.len(), 1);
    assert!(matches!(&h.exits[0], Exit::ServerNeverReady(r) if r.contains("No such file")));
    assert!(h.exits[0].is_error());
    assert!(h.b.is_done());
    assert_eq!(h.b.restarts(), 0);
}

#[test]
fn a_first_start_without_an_initialize_answer_times_out_and_stops_the_process() {
    let mut h = Harness::new(3);
    h.join();
    h.b.handle_server_spawned(h.now);
    h.b.handle_server_stderr(h.now, b"starting up...\n");
    h.drain();
    h.advance(Duration::from_secs(5));
    assert_eq!(h.kills, 1, "the silent process is stopped");
    assert!(h.exits.is_empty(), "after its exit");
    h.b.handle_server_exited(h.now, ExitStatus::signal(15));
    h.drain();
    assert!(
        matches!(&h.exits[..], [Exit::ServerNeverReady(r)] if r.contains("initialize within 5000 ms"))
    );
    assert_eq!(h.spawns, 1);
}

#[test]
fn a_server_that_dies_at_start_is_quoted_from_its_last_stderr_lines_in_the_exit_only() {
    let mut h = Harness::new(3);
    h.join();
    h.b.handle_server_spawned(h.now);
    // npm's answer to a package name with a typo, with more lines than are quoted.
    let mut npm = String::new();
    for i in 0..10 {
        npm.push_str(&format!("npm error line {i}\n"));
    }
    npm.push_str("npm error code E404\n\n");
    npm.push_str(&format!("npm error {}\n", "x".repeat(1000)));
    h.b.handle_server_stderr(h.now, npm.as_bytes());
    h.b.handle_server_exited(h.now, ExitStatus::code(1));
    h.drain();
    let [Exit::ServerNeverReady(reason)] = &h.exits[..] else {
        panic!("{:?}", h.exits);
    };
    assert!(
        reason.starts_with("MCP server exited (exit code 1) before completing"),
        "{reason}"
    );
    assert!(
        reason.contains("its last stderr lines: npm error line 4 | "),
        "{reason}"
    );
    assert!(
        reason.contains("npm error code E404 | npm error xxx"),
        "{reason}"
    );
    assert!(
        !reason.contains("line 3"),
        "at most {STDERR_TAIL_LINES} lines: {reason}"
    );
    // Each line is cut: the reason stays a readable size.
    assert!(reason.len() < 2_000, "{}", reason.len());
    assert!(reason.ends_with('…'), "{reason}");
    // The space hears of the failure, not the server's own output.
    for e in &h.sent {
        assert!(!e.to_string().contains("E404"), "{e}");
    }
}

#[test]
fn stderr_of_an_earlier_process_is_not_quoted_for_a_later_one() {
    let mut h = Harness::new(1);
    h.join();
    h.server_up();
    h.b.handle_server_stderr(h.now, b"first process: all fine\n");
    h.b.handle_server_exited(h.now, ExitStatus::code(1));
    h.drain();
    h.advance(Duration::from_millis(100));
    h.b.handle_server_spawned(h.now);
    h.b.handle_server_stderr(h.now, b"second process: disk full\n");
    h.b.handle_server_exited(h.now, ExitStatus::code(1));
    h.drain();
    let [Exit::ServerGaveUp(reason)] = &h.exits[..] else {
        panic!("{:?}", h.exits);
    };
    assert!(
        reason.ends_with("its last stderr lines: second process: disk full"),
        "{reason}"
    );
}

#[test]
fn crashes_after_the_last_restart_report_to_the_space_and_exit_with_an_error() {
    let mut h = Harness::new(1);
    h.join();
    h.server_up();
    h.b.handle_server_exited(h.now, ExitStatus::code(1));
    h.drain();
    h.advance(Duration::from_millis(100));
    assert_eq!(h.spawns, 2);
    assert!(h.exits.is_empty());
    // The restarted process dies before answering; no restart is left.
    h.b.handle_server_spawned(h.now);
    h.b.handle_server_exited(h.now, ExitStatus::code(1));
    h.drain();
    let status = h
        .sent
        .iter()
        .find(|e| e["kind"] == "participant/status")
        .unwrap();
    assert_eq!(status["payload"]["status"], "error");
    assert_eq!(status["payload"]["mcp_server"]["state"], "failed");
    assert_eq!(status["payload"]["mcp_server"]["restarts"], 1);
    assert!(h.sent.iter().any(|e| e["kind"] == "chat"));
    assert!(matches!(&h.exits[..], [Exit::ServerGaveUp(r)] if r.contains("exit code 1")));
}

#[test]
fn shutdown_control_stops_the_server_then_acknowledges_and_exits_cleanly() {
    let mut h = Harness::ready();
    let inflight = h.request(
        &[ME],
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "x"}}),
    );
    h.frame(
        json!({"protocol": "mew/v0.4", "id": "sd", "from": "human", "to": [ME],
        "kind": "participant/shutdown"}),
    );
    assert_eq!(h.kills, 1);
    assert!(h.exits.is_empty(), "waits for the server to exit");
    let r = h.response_to(&inflight).expect("caller in flight answered");
    assert_eq!(r["payload"]["error"]["code"], codes::CONNECTION_CLOSED);
    let shutting = h
        .sent
        .iter()
        .find(|e| e["kind"] == "participant/status")
        .unwrap();
    assert_eq!(shutting["payload"]["status"], "shutting_down");
    let after = h.request(&[ME], "tools/list", json!({}));
    assert_eq!(
        h.response_to(&after).unwrap()["payload"]["error"]["code"],
        codes::CONNECTION_CLOSED
    );
    h.b.handle_server_exited(h.now, ExitStatus::code(0));
    h.drain();
    let ack = h
        .sent
        .iter()
        .find(|e| e["correlation_id"] == json!(["sd"]) && e["kind"] == "chat/acknowledge");
    assert!(ack.is_some(), "{:?}", h.sent);
    assert_eq!(h.disconnects, 1);
    assert_eq!(h.exits, vec![Exit::Shutdown]);
    assert!(!h.exits[0].is_error());
}

#[test]
fn sigterm_style_shutdown_waits_for_the_server_exit() {
    let mut h = Harness::ready();
    h.b.close(h.now);
    h.drain();
    assert_eq!(h.kills, 1);
    assert!(h.exits.is_empty());
    h.b.handle_server_exited(h.now, ExitStatus::signal(15));
    h.drain();
    assert_eq!(h.exits, vec![Exit::Shutdown]);
    // A second request to stop changes nothing.
    h.b.close(h.now);
    h.drain();
    assert_eq!(h.exits.len(), 1);
}

#[test]
fn shutdown_without_an_exit_report_still_finishes() {
    let mut h = Harness::ready();
    h.b.close(h.now);
    h.advance(Duration::from_secs(60));
    assert_eq!(h.exits, vec![Exit::Shutdown]);
}

#[test]
fn request_status_reports_the_servers_state() {
    let mut h = Harness::new(2);
    h.join();
    h.frame(
        json!({"protocol": "mew/v0.4", "id": "rs1", "from": "human", "to": [ME],
        "kind": "participant/request-status", "payload": {}}),
    );
    let s = h.sent.pop().unwrap();
    assert_eq!(s["kind"], "participant/status");
    assert_eq!(s["correlation_id"], json!(["rs1"]));
    assert_eq!(s["payload"]["mcp_server"]["state"], "starting");
    h.server_up();
    h.frame(
        json!({"protocol": "mew/v0.4", "id": "rs2", "from": "human", "to": [ME],
        "kind": "participant/request-status", "payload": {}}),
    );
    let s = h.sent.pop().unwrap();
    assert_eq!(s["payload"]["status"], "active");
    let m = &s["payload"]["mcp_server"];
    assert_eq!(m["state"], "ready");
    assert_eq!(m["tools"], 2);
    assert_eq!(m["resources"], 1);
    assert_eq!(m["server_info"]["name"], "scripted");
    assert_eq!(m["protocol_version"], "2025-06-18");
    assert_eq!(m["transport"], "stdio");
}

#[test]
fn context_controls_are_completed_at_once() {
    let mut h = Harness::ready();
    h.frame(
        json!({"protocol": "mew/v0.4", "id": "cp", "from": "human", "to": [ME],
        "kind": "participant/compact", "payload": {}}),
    );
    assert!(
        h.sent
            .iter()
            .any(|e| e["kind"] == "participant/compact-done" && e["payload"]["skipped"] == true)
    );
    h.frame(
        json!({"protocol": "mew/v0.4", "id": "cl", "from": "human", "to": [ME],
        "kind": "participant/clear"}),
    );
    assert!(
        h.sent
            .iter()
            .any(|e| e["correlation_id"] == json!(["cl"]) && e["payload"]["status"] == "cleared")
    );
    assert_eq!(h.b.participant().pending_controls().count(), 0);
}

#[test]
fn tools_list_changed_re_registers() {
    let mut h = Harness::ready();
    h.server_line(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
    let list = h.written_request("tools/list");
    h.server_line(
        json!({"jsonrpc": "2.0", "id": list["id"], "result": {"tools": [
        {"name": "fresh", "inputSchema": {"type": "object"}}]}}),
    );
    let names: Vec<_> = h.b.participant().tools().map(|t| t.name.clone()).collect();
    assert_eq!(names, ["fresh"]);
    let id = h.request(&[ME], "tools/list", json!({}));
    assert_eq!(
        h.response_to(&id).unwrap()["payload"]["result"]["tools"][0]["name"],
        "fresh"
    );
}

#[test]
fn a_lost_gateway_leaves_the_server_running() {
    let mut h = Harness::ready();
    h.b.handle_input(
        h.now,
        Input::Disconnected {
            reason: "connection reset",
        },
    );
    h.drain();
    assert_eq!(h.kills, 0);
    assert_eq!(h.b.server_state(), ServerState::Ready);
    assert!(h.exits.is_empty());
    h.advance(Duration::from_secs(40));
    h.join();
    let id = h.request(&[ME], "tools/list", json!({}));
    assert!(h.response_to(&id).is_some());
}

#[test]
fn a_bridge_does_not_discover_other_participants_tools() {
    let mut h = Harness::new(2);
    h.join();
    h.frame(json!({"protocol": "mew/v0.4", "id": "pj", "from": "system:gateway", "to": [ME],
        "kind": "system/presence",
        "payload": {"event": "join", "participant": {"id": "other", "capabilities": [{"kind": "mcp/response"}]}}}));
    h.advance(Duration::from_secs(30));
    assert!(
        h.sent.iter().all(|e| e["kind"] != "mcp/request"),
        "{:?}",
        h.sent
    );
}

#[test]
fn losing_the_gateway_for_good_stops_the_server_and_exits_with_an_error() {
    let mut cfg = config(2);
    cfg.participant.reconnect.max_attempts = 1;
    let mut h = Harness::with(cfg);
    h.join();
    h.server_up();
    h.b.handle_input(
        h.now,
        Input::Disconnected {
            reason: "connection reset",
        },
    );
    h.drain();
    h.advance(Duration::from_secs(10));
    h.b.handle_input(
        h.now,
        Input::Disconnected {
            reason: "connection refused",
        },
    );
    h.drain();
    assert_eq!(h.kills, 1, "the server is stopped");
    assert!(h.exits.is_empty(), "after it exited");
    h.b.handle_server_exited(h.now, ExitStatus::code(0));
    h.drain();
    assert!(
        matches!(&h.exits[..], [Exit::GatewayGaveUp(r)] if r.contains("1 reconnect attempts")),
        "{:?}",
        h.exits
    );
    assert!(h.exits[0].is_error());
}

// ---- the server's questions and notifications ----

/// A bridge to a 2026-07-28 server over stdio (questions come as `input_required` rounds,
/// tied to their call), ready with one tool.
fn ready_2026(sampling_answered_by: Option<&str>) -> Harness {
    let mut c = config(2);
    c.mcp.protocol_version = crate::mcp::ProtocolVersion::V2026_07_28;
    c.sampling_answered_by = sampling_answered_by.map(str::to_owned);
    let mut h = Harness::with(c);
    h.join();
    h.b.handle_server_spawned(h.now);
    h.drain();
    let d = h.written_request("server/discover");
    h.server_line(json!({"jsonrpc":"2.0","id":d["id"],"result":{
        "supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},
        "_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"1"}},
        "resultType":"complete"}}));
    let l = h.written_request("tools/list");
    h.server_line(json!({"jsonrpc":"2.0","id":l["id"],"result":{
        "resultType":"complete","tools":[{"name":"book","inputSchema":{"type":"object"}}]}}));
    assert_eq!(h.b.mcp().phase(), Phase::Ready);
    h
}

fn confirm_schema() -> Value {
    json!({"type":"object","properties":{"seats":{"type":"integer","minimum":1}},"required":["seats"]})
}

impl Harness {
    /// `human` calls `book`; the server answers with one `input_required` question. Returns
    /// the caller's request id and the question envelope put to the caller.
    fn call_and_get_asked(&mut self, input: Value) -> (String, Value) {
        let req = self.request(&[ME], "tools/call", json!({"name":"book","arguments":{}}));
        let call = self.written_request("tools/call");
        self.sent.clear();
        self.server_line(json!({"jsonrpc":"2.0","id":call["id"],"result":{
            "resultType":"input_required","inputRequests":{"q":input},"requestState":"st"}}));
        let asked = self
            .sent
            .iter()
            .find(|e| e["kind"] == "mcp/request")
            .cloned()
            .unwrap_or_else(|| panic!("no question sent: {:?}", self.sent));
        (req, asked)
    }

    /// `who` answers our question envelope `asked` with `result`.
    fn answer_as(&mut self, who: &str, asked: &Value, result: Value) {
        self.frame(json!({
            "protocol":"mew/v0.4","id":format!("ans-{}", asked["id"].as_str().unwrap()),
            "from":who,"to":[ME],"kind":"mcp/response","correlation_id":[asked["id"]],
            "payload":{"jsonrpc":"2.0","id":asked["payload"]["id"],"result":result}}));
    }
}

#[test]
fn an_elicitation_goes_to_the_caller_and_its_answer_to_the_server() {
    let mut h = ready_2026(None);
    let (req, asked) = h.call_and_get_asked(json!({"method":"elicitation/create","params":{
        "message":"How many seats?","requestedSchema":confirm_schema()}}));
    // MCP's own shape, to the caller, about the caller's request.
    assert_eq!(asked["to"], json!(["human"]));
    assert_eq!(asked["correlation_id"], json!([req]));
    assert_eq!(asked["payload"]["method"], "elicitation/create");
    assert_eq!(
        asked["payload"]["params"],
        json!({"mode":"form","message":"How many seats?","requestedSchema":confirm_schema(),
            "_meta":{"mew/inputKey":"q"}})
    );
    let before = h.written.len();

    // Content that breaks the schema does not reach the server; the caller is asked again
    // with the reason, the question stays open.
    h.sent.clear();
    h.answer_as(
        "human",
        &asked,
        json!({"action":"accept","content":{"seats":0}}),
    );
    assert_eq!(h.written.len(), before, "{:?}", &h.written[before..]);
    let again = h
        .sent
        .iter()
        .find(|e| e["kind"] == "mcp/request")
        .cloned()
        .unwrap();
    assert_ne!(again["id"], asked["id"]);
    assert_eq!(again["correlation_id"], json!([req]));
    let why = again["payload"]["params"]["_meta"]["mew/rejected"]
        .as_str()
        .unwrap();
    assert!(why.contains("/seats"), "{why}");
    assert!(h.mcp_events.iter().any(
        |e| matches!(e, McpEvent::Declined { reason, .. } if reason.contains("answer of human was refused"))
    ));
    assert_eq!(h.b.mcp().open_asks(), 1);

    // A fitting answer goes to the server as the round's input response.
    h.answer_as(
        "human",
        &again,
        json!({"action":"accept","content":{"seats":2}}),
    );
    let retry = h.written_request("tools/call");
    assert_eq!(
        retry["params"]["inputResponses"],
        json!({"q":{"action":"accept","content":{"seats":2}}})
    );
    assert_eq!(retry["params"]["requestState"], "st");
    h.server_line(json!({"jsonrpc":"2.0","id":retry["id"],"result":{
        "resultType":"complete","content":[{"type":"text","text":"booked 2"}]}}));
    let resp = h.response_to(&req).unwrap();
    assert_eq!(resp["payload"]["result"]["content"][0]["text"], "booked 2");
}

#[test]
fn decline_and_an_error_response_reach_the_server_as_such() {
    let mut h = ready_2026(None);
    let (_, asked) = h.call_and_get_asked(json!({"method":"elicitation/create","params":{
        "message":"Sure?","requestedSchema":{"type":"object","properties":{}}}}));
    h.answer_as("human", &asked, json!({"action":"decline"}));
    let retry = h.written_request("tools/call");
    assert_eq!(
        retry["params"]["inputResponses"],
        json!({"q":{"action":"decline"}})
    );

    // A caller that does not take elicitations answers with an error: the question is
    // cancelled, never answered for it.
    let (_, asked) = h.call_and_get_asked(json!({"method":"elicitation/create","params":{
        "mode":"url","message":"Sign in","url":"https://idp.example/x","elicitationId":"e7"}}));
    assert_eq!(
        asked["payload"]["params"],
        json!({"mode":"url","message":"Sign in","url":"https://idp.example/x","elicitationId":"e7",
            "_meta":{"mew/inputKey":"q"}})
    );
    h.frame(json!({
        "protocol":"mew/v0.4","id":"err-1","from":"human","to":[ME],"kind":"mcp/response",
        "correlation_id":[asked["id"]],
        "payload":{"jsonrpc":"2.0","id":asked["payload"]["id"],
                   "error":{"code":-32601,"message":"method not found: elicitation/create"}}}));
    let retry = h.written_request("tools/call");
    assert_eq!(
        retry["params"]["inputResponses"],
        json!({"q":{"action":"cancel"}})
    );
}

#[test]
fn an_elicitation_of_no_call_goes_to_the_sole_caller_or_is_refused() {
    // A 2025 server's request over stdio names no call.
    let mut c = config(2);
    c.mcp.protocol_version = crate::mcp::ProtocolVersion::LATEST;
    let mut h = Harness::with(c);
    h.join();
    h.server_up();
    let init = h.written_request("initialize");
    assert!(init["params"]["capabilities"].get("elicitation").is_some());
    assert!(init["params"]["capabilities"].get("sampling").is_none());
    h.sent.clear();
    h.server_line(json!({"jsonrpc":"2.0","id":"s1","method":"elicitation/create","params":{
        "message":"Name?","requestedSchema":{"type":"object","properties":{"n":{"type":"string"}}}}}));
    assert!(
        h.sent.iter().all(|e| e["kind"] != "mcp/request"),
        "{:?}",
        h.sent
    );
    let answer = h.written.iter().find(|m| m["id"] == "s1").unwrap();
    assert_eq!(answer["result"], json!({"action":"cancel"}));
    assert!(h.mcp_events.iter().any(
        |e| matches!(e, McpEvent::Declined { method, reason } if method == "elicitation/create" && reason.contains("names no call"))
    ));

    // While one participant's call is in flight, a question naming no call can only be
    // about that call: it goes to its caller, correlated to it, and the answer (defaults
    // applied) to the server.
    let req = h.request(&[ME], "tools/call", json!({"name":"echo","arguments":{}}));
    h.written_request("tools/call");
    h.sent.clear();
    h.server_line(
        json!({"jsonrpc":"2.0","id":"s2","method":"elicitation/create","params":{
        "message":"Name?","requestedSchema":{"type":"object","properties":{
            "n":{"type":"string","default":"Ada"}}}}}),
    );
    let asked = h
        .sent
        .iter()
        .find(|e| e["kind"] == "mcp/request")
        .cloned()
        .expect("the question reaches the caller");
    assert_eq!(asked["to"], json!(["human"]));
    assert_eq!(asked["correlation_id"], json!([req]));
    assert_eq!(asked["payload"]["params"]["message"], "Name?");
    h.answer_as("human", &asked, json!({"action":"accept","content":{}}));
    let answer = h.written.iter().find(|m| m["id"] == "s2").unwrap();
    assert_eq!(
        answer["result"],
        json!({"action":"accept","content":{"n":"Ada"}})
    );

    // Calls of two participants in flight: nobody can tell whose, so it is cancelled.
    h.frame(json!({
        "protocol":"mew/v0.4","id":"other-1","from":"bob","to":[ME],"kind":"mcp/request",
        "payload":{"jsonrpc":"2.0","id":1,"method":"tools/call",
                   "params":{"name":"echo","arguments":{}}}}));
    assert_eq!(h.b.calls_in_flight(), 2, "{:?}", h.sent);
    h.sent.clear();
    h.server_line(
        json!({"jsonrpc":"2.0","id":"s3","method":"elicitation/create","params":{
        "message":"Name?","requestedSchema":{"type":"object","properties":{}}}}),
    );
    assert!(
        h.sent.iter().all(|e| e["kind"] != "mcp/request"),
        "{:?}",
        h.sent
    );
    let answer = h.written.iter().find(|m| m["id"] == "s3").unwrap();
    assert_eq!(answer["result"], json!({"action":"cancel"}));
}

#[test]
fn sampling_is_declined_unless_a_participant_is_named_to_answer() {
    let mut h = ready_2026(None);
    let sampling =
        json!({"method":"sampling/createMessage","params":{"messages":[],"maxTokens":5}});
    let req = h.request(&[ME], "tools/call", json!({"name":"book","arguments":{}}));
    let call = h.written_request("tools/call");
    h.server_line(json!({"jsonrpc":"2.0","id":call["id"],"result":{
        "resultType":"input_required","inputRequests":{"s":sampling}}}));
    let resp = h.response_to(&req).unwrap();
    let msg = resp["payload"]["error"]["message"].as_str().unwrap();
    assert!(msg.contains("sampling"), "{msg}");
    assert!(h.sent.iter().all(|e| e["kind"] != "mcp/request"));

    let mut h = ready_2026(Some("model"));
    let (req, asked) = h.call_and_get_asked(sampling.clone());
    assert_eq!(asked["to"], json!(["model"]));
    assert_eq!(asked["correlation_id"], json!([req]));
    assert_eq!(asked["payload"]["method"], "sampling/createMessage");
    let mut expected = sampling["params"].clone();
    expected["_meta"] = json!({"mew/inputKey": "q"});
    assert_eq!(asked["payload"]["params"], expected);
    let sampled = json!({"role":"assistant","content":{"type":"text","text":"hi"},"model":"m"});
    h.answer_as("model", &asked, sampled.clone());
    let retry = h.written_request("tools/call");
    assert_eq!(retry["params"]["inputResponses"], json!({"q":sampled}));
}

#[test]
fn progress_and_logs_of_a_call_reach_its_caller() {
    let mut h = Harness::ready();
    let req = h.request(
        &[ME],
        "tools/call",
        json!({"name":"echo","arguments":{"message":"x"}}),
    );
    let call = h.written_request("tools/call");
    // The caller gave no token: its request's id is the call's token.
    assert_eq!(call["params"]["_meta"]["progressToken"], json!(req));
    h.sent.clear();
    h.server_line(
        json!({"jsonrpc":"2.0","method":"notifications/progress","params":{
        "progressToken":req,"progress":1,"total":4,"message":"one of four"}}),
    );
    let n = h
        .sent
        .iter()
        .find(|e| e["kind"] == "mcp/request")
        .cloned()
        .unwrap();
    assert_eq!(n["to"], json!(["human"]));
    assert_eq!(n["correlation_id"], json!([req]));
    assert_eq!(n["payload"]["method"], "notifications/progress");
    assert!(n["payload"].get("id").is_none(), "a notification has no id");
    assert_eq!(
        n["payload"]["params"],
        json!({"progressToken":req,"progress":1.0,"total":4.0,"message":"one of four"})
    );
    // A log line over stdio names no call: it stays in the bridge's log.
    h.sent.clear();
    h.server_line(
        json!({"jsonrpc":"2.0","method":"notifications/message","params":{
        "level":"info","data":"hello"}}),
    );
    assert!(h.sent.is_empty(), "{:?}", h.sent);

    // A caller's own token is kept.
    let req2 = h.request(
        &[ME],
        "tools/call",
        json!({"name":"echo","arguments":{"message":"y"},"_meta":{"progressToken":7}}),
    );
    let call = h.written_request("tools/call");
    assert_eq!(call["params"]["_meta"]["progressToken"], 7);
    h.sent.clear();
    h.server_line(
        json!({"jsonrpc":"2.0","method":"notifications/progress","params":{
        "progressToken":7,"progress":2}}),
    );
    let n = h
        .sent
        .iter()
        .find(|e| e["kind"] == "mcp/request")
        .cloned()
        .unwrap();
    assert_eq!(n["correlation_id"], json!([req2]));
    assert_eq!(n["payload"]["params"]["progressToken"], 7);
}

#[test]
fn an_answer_that_never_fits_cancels_the_question_after_the_reasks() {
    let mut h = ready_2026(None);
    let (_req, mut asked) = h.call_and_get_asked(json!({"method":"elicitation/create","params":{
        "message":"How many seats?","requestedSchema":confirm_schema()}}));
    let before = h.written.len();
    for round in 0..=asks::MAX_REASKS {
        h.sent.clear();
        h.answer_as(
            "human",
            &asked,
            json!({"action":"accept","content":{"seats":0}}),
        );
        let again = h.sent.iter().find(|e| e["kind"] == "mcp/request").cloned();
        if round < asks::MAX_REASKS {
            asked = again.expect("asked again");
        } else {
            assert!(again.is_none(), "asked a fifth time: {again:?}");
        }
    }
    // Cancelled: the server gets its round answered (cancel), the question is closed.
    assert_eq!(h.b.mcp().open_asks(), 0);
    let retry = h.written_request("tools/call");
    assert!(h.written.len() > before);
    assert_eq!(retry["params"]["inputResponses"]["q"]["action"], "cancel");
}
