//! Scripted-server tests of [`McpClient`] in the stateless revision, over Streamable HTTP,
//! and with the server's questions; the server's messages are the conformance suite's where
//! it has them.

use super::*;
use crate::mcp::asks::{AnswerError, AskAnswer, ElicitationMode};
use crate::mcp::http::HttpResponseHead;
use serde_json::json;

fn t(ms: u64) -> Time {
    Time::from_unix_millis(ms)
}

fn drain(c: &mut McpClient) -> Vec<Output> {
    std::iter::from_fn(|| c.poll_output()).collect()
}

fn written(outs: &[Output]) -> Vec<Value> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Write(l) => Some(serde_json::from_str(l).expect("client writes JSON")),
            _ => None,
        })
        .collect()
}

fn exchanges(outs: &[Output]) -> Vec<HttpRequest> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Http(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

fn body(r: &HttpRequest) -> Value {
    serde_json::from_str(r.body.as_deref().expect("a POST has a body")).unwrap()
}

fn events(outs: Vec<Output>) -> Vec<McpEvent> {
    outs.into_iter()
        .filter_map(|o| match o {
            Output::Event(e) => Some(e),
            _ => None,
        })
        .collect()
}

fn line(v: Value) -> Vec<u8> {
    let mut s = serde_json::to_vec(&v).unwrap();
    s.push(b'\n');
    s
}

const META_2026: &str = "io.modelcontextprotocol/protocolVersion";

/// `server/discover` as the conformance suite's stateless mock answers it.
fn discover_result(id: &Value, caps: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"result":{
        "supportedVersions":["2026-07-28"],
        "capabilities":caps,
        "_meta":{"io.modelcontextprotocol/serverInfo":{"name":"conformance-mock-server","version":"1.0.0"}},
        "resultType":"complete","ttlMs":0,"cacheScope":"private"}})
}

fn stdio_2026(asks: AskPolicy) -> McpConfig {
    McpConfig {
        protocol_version: ProtocolVersion::V2026_07_28,
        asks,
        ..McpConfig::default()
    }
}

fn asking() -> AskPolicy {
    AskPolicy {
        elicitation: true,
        sampling: true,
        roots: false,
        timeout: Duration::from_secs(60),
        max_open: 8,
    }
}

/// A stdio client of a 2026-07-28 server, ready with the given tools.
fn ready_2026(config: McpConfig, tools: Value) -> McpClient {
    let mut c = McpClient::new(config);
    c.start(t(0)).unwrap();
    assert_eq!(drain(&mut c), vec![Output::Spawn]);
    c.handle_spawned(t(0));
    let w = written(&drain(&mut c));
    assert_eq!(w.len(), 1);
    assert_eq!(w[0]["method"], "server/discover");
    c.handle_stdout(
        t(1),
        &line(discover_result(&w[0]["id"], json!({"tools":{}}))),
    );
    let w = written(&drain(&mut c));
    assert_eq!(
        w.len(),
        1,
        "no initialize, no notifications/initialized: {w:?}"
    );
    assert_eq!(w[0]["method"], "tools/list");
    assert_eq!(w[0]["params"]["_meta"][META_2026], "2026-07-28");
    c.handle_stdout(
        t(2),
        &line(json!({"jsonrpc":"2.0","id":w[0]["id"],"result":{
            "resultType":"complete","ttlMs":30000,"cacheScope":"public","tools":tools}})),
    );
    let ev = events(drain(&mut c));
    assert!(
        matches!(ev.last(), Some(McpEvent::Ready(d)) if d.protocol_version == ProtocolVersion::V2026_07_28),
        "{ev:?}"
    );
    c
}

#[test]
fn discover_first_then_stateless_requests_carry_meta() {
    let caps = asking();
    let mut c = McpClient::new(stdio_2026(caps));
    c.start(t(0)).unwrap();
    drain(&mut c);
    c.handle_spawned(t(0));
    let w = written(&drain(&mut c));
    assert_eq!(
        w[0],
        json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{
            "io.modelcontextprotocol/protocolVersion":"2026-07-28",
            "io.modelcontextprotocol/clientCapabilities":{
                "roots":{"listChanged":true},"elicitation":{"form":{},"url":{}},"sampling":{}},
            "io.modelcontextprotocol/clientInfo":{"name":"mew-bridge","version":env!("CARGO_PKG_VERSION")}
        }}})
    );
    c.handle_stdout(t(1), &line(discover_result(&json!(1), json!({"tools":{}}))));
    let w = written(&drain(&mut c));
    c.handle_stdout(
        t(2),
        &line(json!({"jsonrpc":"2.0","id":w[0]["id"],"result":{
            "resultType":"complete","ttlMs":30000,"cacheScope":"public","tools":[{"name":"add"}]}})),
    );
    let ev = events(drain(&mut c));
    let Some(McpEvent::Ready(d)) = ev.last() else {
        panic!("{ev:?}")
    };
    assert_eq!(d.server_info["name"], "conformance-mock-server");
    assert_eq!(c.protocol_version(), Some(ProtocolVersion::V2026_07_28));
    assert_eq!(
        c.cache_hint(ListKind::Tools),
        Some(CacheHint {
            ttl: Duration::from_secs(30),
            scope: stateless::CacheScope::Public
        })
    );
    assert_eq!(c.discover_cache_hint().map(|h| h.ttl), Some(Duration::ZERO));

    let id = c
        .call(
            t(3),
            "tools/call",
            Some(json!({"name":"add","arguments":{"a":2,"b":3},"_meta":{"progressToken":"p"}})),
            Duration::from_secs(5),
        )
        .unwrap();
    let w = written(&drain(&mut c));
    assert_eq!(w[0]["params"]["name"], "add");
    assert_eq!(w[0]["params"]["_meta"]["progressToken"], "p");
    assert_eq!(w[0]["params"]["_meta"][META_2026], "2026-07-28");
    c.handle_stdout(
        t(4),
        &line(json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1,"total":2,"message":"half"}})),
    );
    c.handle_stdout(
        t(5),
        &line(json!({"jsonrpc":"2.0","id":w[0]["id"],"result":{"resultType":"complete","content":[{"type":"text","text":"5"}]}})),
    );
    let ev = events(drain(&mut c));
    assert_eq!(
        ev[0],
        McpEvent::Progress {
            call_id: Some(id),
            token: json!("p"),
            progress: 1.0,
            total: Some(2.0),
            message: Some("half".into())
        }
    );
    assert!(
        matches!(&ev[1], McpEvent::CallCompleted { call_id, result: Ok(r) } if *call_id == id && r["content"][0]["text"] == "5")
    );
}

#[test]
fn an_older_server_gets_initialize_after_discover_fails_or_stays_silent() {
    // A 2025 server answers the unknown method with an error.
    let mut c = McpClient::new(stdio_2026(AskPolicy::default()));
    c.start(t(0)).unwrap();
    drain(&mut c);
    c.handle_spawned(t(0));
    drain(&mut c);
    c.handle_stdout(
        t(1),
        &line(json!({"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}})),
    );
    let w = written(&drain(&mut c));
    assert_eq!(w[0]["method"], "initialize");
    assert_eq!(w[0]["params"]["protocolVersion"], "2025-11-25");
    assert!(w[0]["params"].get("_meta").is_none());
    c.handle_stdout(
        t(2),
        &line(json!({"jsonrpc":"2.0","id":w[0]["id"],"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"old","version":"1"}}})),
    );
    let outs = drain(&mut c);
    assert_eq!(written(&outs)[0]["method"], "notifications/initialized");
    assert!(
        matches!(events(outs).last(), Some(McpEvent::Ready(d)) if d.protocol_version == ProtocolVersion::V2025_06_18)
    );
    c.call(
        t(3),
        "tools/call",
        Some(json!({"name":"x"})),
        Duration::from_secs(1),
    )
    .unwrap();
    let w = written(&drain(&mut c));
    assert_eq!(
        w[0]["params"],
        json!({"name":"x"}),
        "no _meta in a session revision"
    );

    // A server that never answers discover is given initialize after the discover timeout.
    let mut c = McpClient::new(McpConfig {
        discover_timeout: Duration::from_millis(300),
        ..stdio_2026(AskPolicy::default())
    });
    c.start(t(0)).unwrap();
    drain(&mut c);
    c.handle_spawned(t(0));
    drain(&mut c);
    assert_eq!(c.poll_timeout(), Some(t(300)));
    c.handle_timeout(t(300));
    let w = written(&drain(&mut c));
    assert_eq!(w[0]["method"], "initialize");
    assert_eq!(c.phase(), Phase::Initializing);
    // Its late answer to discover is noted, not mistaken for the initialize reply.
    c.handle_stdout(t(301), &line(discover_result(&json!(1), json!({}))));
    assert!(matches!(
        &events(drain(&mut c))[..],
        [McpEvent::StdoutIssue(StdoutIssue::UnknownResponse(_))]
    ));
}

/// The conformance suite's `request-metadata` scenario rejects the first request with
/// UnsupportedProtocolVersion naming 2026-07-28; the client asks again in that revision.
#[test]
fn unsupported_version_errors_steer_the_choice() {
    let reject = |id: &Value, supported: Value| {
        line(
            json!({"jsonrpc":"2.0","id":id,"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":supported,"requested":"2026-07-28"}}}),
        )
    };
    let mut c = McpClient::new(stdio_2026(AskPolicy::default()));
    c.start(t(0)).unwrap();
    drain(&mut c);
    c.handle_spawned(t(0));
    drain(&mut c);
    c.handle_stdout(t(1), &reject(&json!(1), json!(["2026-07-28"])));
    let w = written(&drain(&mut c));
    assert_eq!(w[0]["method"], "server/discover");
    assert_ne!(w[0]["id"], 1, "a new id");
    assert_eq!(w[0]["params"]["_meta"][META_2026], "2026-07-28");
    c.handle_stdout(t(2), &line(discover_result(&w[0]["id"], json!({}))));
    assert!(matches!(
        events(drain(&mut c)).last(),
        Some(McpEvent::Ready(_))
    ));

    // A server naming only an older revision gets initialize in it.
    let mut c = McpClient::new(stdio_2026(AskPolicy::default()));
    c.start(t(0)).unwrap();
    drain(&mut c);
    c.handle_spawned(t(0));
    drain(&mut c);
    c.handle_stdout(
        t(1),
        &reject(&json!(1), json!(["2025-06-18", "2024-11-05"])),
    );
    let w = written(&drain(&mut c));
    assert_eq!(w[0]["method"], "initialize");
    assert_eq!(w[0]["params"]["protocolVersion"], "2025-06-18");

    // A server naming nothing known is refused for good.
    let mut c = McpClient::new(stdio_2026(AskPolicy::default()));
    c.start(t(0)).unwrap();
    drain(&mut c);
    c.handle_spawned(t(0));
    drain(&mut c);
    c.handle_stdout(t(1), &reject(&json!(1), json!(["2099-01-01"])));
    let ev = events(drain(&mut c));
    assert!(
        matches!(&ev[0], McpEvent::Failed(McpError::UnsupportedProtocolVersion(v)) if v == "2099-01-01"),
        "{ev:?}"
    );
}

/// The conformance suite's `sep-2322-client-request-state` scenario, message for message:
/// an `input_required` round is put to the owner, an unrelated call in between carries
/// nothing of it, and the retry has a new id, the answers and the state byte for byte.
#[test]
fn input_required_rounds_go_to_the_owner_and_retry_with_state() {
    let mut c = ready_2026(
        stdio_2026(asking()),
        json!([{"name":"test_mrtr_echo_state"},{"name":"test_mrtr_unrelated"}]),
    );
    let call = c
        .call(
            t(10),
            "tools/call",
            Some(json!({"name":"test_mrtr_echo_state","arguments":{}})),
            Duration::from_secs(5),
        )
        .unwrap();
    let w = written(&drain(&mut c));
    let first_id = w[0]["id"].clone();
    let state = r#"{"nonce":"8c0e6a4e-0b8f-4a53-9a8e-6f1f0c2d9b11","originalId":5}"#;
    c.handle_stdout(
        t(11),
        &line(json!({"jsonrpc":"2.0","id":first_id,"result":{
            "resultType":"input_required",
            "inputRequests":{"confirm":{"method":"elicitation/create","params":{
                "message":"Please confirm to continue",
                "requestedSchema":{"type":"object","properties":{"confirmed":{"type":"boolean","description":"Confirm?"}}}}}},
            "requestState":state}})),
    );
    let outs = drain(&mut c);
    assert!(
        written(&outs).is_empty(),
        "nothing is sent before the answer"
    );
    let ev = events(outs);
    let [
        McpEvent::Asked {
            ask_id,
            call_id,
            round,
            ask: Ask::Elicitation(e),
        },
    ] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!((*call_id, *round), (Some(call), Some(1)));
    assert_eq!(e.message, "Please confirm to continue");
    assert!(matches!(e.mode, ElicitationMode::Form { .. }));
    assert_eq!(c.calls_in_flight(), 1);
    assert_eq!(c.open_asks(), 1);

    // An unrelated call meanwhile carries no answers and no state.
    c.call(
        t(12),
        "tools/call",
        Some(json!({"name":"test_mrtr_unrelated","arguments":{}})),
        Duration::from_secs(5),
    )
    .unwrap();
    let w = written(&drain(&mut c));
    assert!(w[0]["params"].get("inputResponses").is_none());
    assert!(w[0]["params"].get("requestState").is_none());

    // An answer that breaks the requested schema is refused; the question stays open.
    let mut wrong = Map::new();
    wrong.insert("confirmed".into(), json!("yes"));
    assert!(matches!(
        c.answer(t(13), *ask_id, AskAnswer::Accept(Some(wrong))),
        Err(AnswerError::Invalid(m)) if m.contains("/confirmed")
    ));
    assert!(drain(&mut c).is_empty());

    let mut content = Map::new();
    content.insert("confirmed".into(), json!(true));
    c.answer(t(14), *ask_id, AskAnswer::Accept(Some(content)))
        .unwrap();
    let w = written(&drain(&mut c));
    assert_eq!(w.len(), 1);
    assert_ne!(w[0]["id"], first_id);
    assert_eq!(w[0]["method"], "tools/call");
    assert_eq!(w[0]["params"]["name"], "test_mrtr_echo_state");
    assert_eq!(
        w[0]["params"]["inputResponses"],
        json!({"confirm":{"action":"accept","content":{"confirmed":true}}})
    );
    assert_eq!(w[0]["params"]["requestState"].as_str(), Some(state));
    assert_eq!(w[0]["params"]["_meta"][META_2026], "2026-07-28");
    c.handle_stdout(
        t(15),
        &line(json!({"jsonrpc":"2.0","id":w[0]["id"],"result":{"resultType":"complete","content":[{"type":"text","text":"echo-state-ok"}]}})),
    );
    let ev = events(drain(&mut c));
    assert!(
        matches!(&ev[..], [McpEvent::CallCompleted { call_id, result: Ok(r) }] if *call_id == call && r["content"][0]["text"] == "echo-state-ok"),
        "{ev:?}"
    );
    assert_eq!(c.open_asks(), 0);
}

#[test]
fn a_round_without_state_retries_without_state_and_unanswered_questions_cancel() {
    let mut c = ready_2026(
        McpConfig {
            roots: vec![Root {
                uri: "file:///work".into(),
                name: None,
            }],
            ..stdio_2026(AskPolicy {
                timeout: Duration::from_secs(30),
                ..asking()
            })
        },
        json!([{"name":"test_mrtr_no_state"}]),
    );
    c.call(
        t(10),
        "tools/call",
        Some(json!({"name":"test_mrtr_no_state","arguments":{}})),
        Duration::from_secs(5),
    )
    .unwrap();
    let w = written(&drain(&mut c));
    c.handle_stdout(
        t(11),
        &line(json!({"jsonrpc":"2.0","id":w[0]["id"],"result":{
            "resultType":"input_required",
            "inputRequests":{
                "confirm":{"method":"elicitation/create","params":{"message":"Please confirm to continue (no state test)",
                    "requestedSchema":{"type":"object","properties":{"confirmed":{"type":"boolean","description":"Confirm?"}}}}},
                "where":{"method":"roots/list","params":{}}}}})),
    );
    let ev = events(drain(&mut c));
    let [McpEvent::Asked { ask_id, .. }] = &ev[..] else {
        panic!("{ev:?}")
    };
    // The call's own timeout does not run while a person is being asked.
    assert_eq!(c.poll_timeout(), Some(t(11) + Duration::from_secs(30)));
    c.handle_timeout(t(11) + Duration::from_secs(30));
    let outs = drain(&mut c);
    assert!(
        matches!(&events(outs.clone())[..], [McpEvent::AskClosed { ask_id: a, reason }] if a == ask_id && reason.contains("no answer"))
    );
    let w = written(&outs);
    assert_eq!(
        w[0]["params"]["inputResponses"],
        json!({"confirm":{"action":"cancel"},"where":{"roots":[{"uri":"file:///work"}]}})
    );
    assert!(w[0]["params"].get("requestState").is_none());
}

/// Roots put to the owner: its answer goes to the server; a refusal is answered with the
/// client's own roots.
#[test]
fn roots_taken_by_the_owner_are_its_answer_and_a_refusal_gets_the_clients_own() {
    let mut c = ready_2026(
        McpConfig {
            roots: vec![Root {
                uri: "file:///bridge".into(),
                name: None,
            }],
            ..stdio_2026(AskPolicy {
                roots: true,
                ..asking()
            })
        },
        json!([{"name":"where"}]),
    );
    c.call(
        t(10),
        "tools/call",
        Some(json!({"name":"where","arguments":{}})),
        Duration::from_secs(5),
    )
    .unwrap();
    let round = |c: &mut McpClient, at: u64| {
        let w = written(&drain(c));
        c.handle_stdout(
            t(at),
            &line(json!({"jsonrpc":"2.0","id":w[0]["id"],"result":{
                "resultType":"input_required",
                "inputRequests":{"r":{"method":"roots/list","params":{}}}}})),
        );
        let ev = events(drain(c));
        let [
            McpEvent::Asked {
                ask_id,
                ask: Ask::Roots,
                ..
            },
        ] = &ev[..]
        else {
            panic!("{ev:?}")
        };
        *ask_id
    };
    let ask = round(&mut c, 11);
    assert!(matches!(
        c.answer(
            t(12),
            ask,
            AskAnswer::Roots(json!({"roots":[{"name":"x"}]}))
        ),
        Err(AnswerError::Invalid(_))
    ));
    let host = json!({"roots":[{"uri":"file:///host","name":"host"}]});
    c.answer(t(12), ask, AskAnswer::Roots(host.clone()))
        .unwrap();
    let outs = drain(&mut c);
    assert_eq!(
        written(&outs)[0]["params"]["inputResponses"],
        json!({"r": host})
    );
    c.handle_stdout(
        t(13),
        &line(
            json!({"jsonrpc":"2.0","id":written(&outs)[0]["id"],"result":{
        "resultType":"input_required",
        "inputRequests":{"r":{"method":"roots/list","params":{}}}}}),
        ),
    );
    let ev = events(drain(&mut c));
    let [McpEvent::Asked { ask_id, .. }] = &ev[..] else {
        panic!("{ev:?}")
    };
    c.answer(t(14), *ask_id, AskAnswer::Refuse("method not found".into()))
        .unwrap();
    assert_eq!(
        written(&drain(&mut c))[0]["params"]["inputResponses"],
        json!({"r":{"roots":[{"uri":"file:///bridge"}]}})
    );
}

#[test]
fn questions_the_owner_does_not_take_end_the_call_or_are_refused() {
    let mut c = ready_2026(
        stdio_2026(AskPolicy::default()),
        json!([{"name":"needs_a_model"}]),
    );
    let call = c
        .call(
            t(10),
            "tools/call",
            Some(json!({"name":"needs_a_model"})),
            Duration::from_secs(5),
        )
        .unwrap();
    let w = written(&drain(&mut c));
    c.handle_stdout(
        t(11),
        &line(json!({"jsonrpc":"2.0","id":w[0]["id"],"result":{
            "resultType":"input_required",
            "inputRequests":{"s":{"method":"sampling/createMessage","params":{"messages":[],"maxTokens":5}}}}})),
    );
    let ev = events(drain(&mut c));
    assert!(
        matches!(&ev[..], [McpEvent::CallCompleted { call_id, result: Err(McpError::Declined(m)) }] if *call_id == call && m.contains("sampling")),
        "{ev:?}"
    );
    assert_eq!(c.calls_in_flight(), 0);
}

/// 2025-11-25 server requests: elicitation and sampling put to the owner when it takes them,
/// withdrawn by `notifications/cancelled`.
#[test]
fn server_requests_become_questions_with_answers() {
    let mut c = McpClient::new(McpConfig {
        asks: asking(),
        ..McpConfig::default()
    });
    c.start(t(0)).unwrap();
    drain(&mut c);
    c.handle_spawned(t(0));
    let w = written(&drain(&mut c));
    assert_eq!(
        w[0]["params"]["capabilities"],
        json!({"roots":{"listChanged":true},"elicitation":{"form":{},"url":{}},"sampling":{}})
    );
    c.handle_stdout(
        t(1),
        &line(json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}})),
    );
    drain(&mut c);
    // The elicitation of the conformance suite's `elicitation-sep1034-client-defaults`.
    c.handle_stdout(
        t(2),
        &line(json!({"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{
            "message":"Test client default value handling - please accept with defaults",
            "requestedSchema":{"type":"object","properties":{
                "name":{"type":"string","description":"User name","default":"John Doe"},
                "age":{"type":"integer","description":"User age","default":30},
                "score":{"type":"number","description":"User score","default":95.5},
                "status":{"type":"string","description":"User status","enum":["active","inactive","pending"],"default":"active"},
                "verified":{"type":"boolean","description":"Verification status","default":true}},
                "required":[]}}})),
    );
    c.handle_stdout(
        t(2),
        &line(json!({"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":9}})),
    );
    c.handle_stdout(
        t(2),
        &line(json!({"jsonrpc":"2.0","id":2,"method":"elicitation/create","params":{"mode":"url","message":"Sign in","url":"https://idp.example/x","elicitationId":"e"}})),
    );
    let ev = events(drain(&mut c));
    let ids: Vec<AskId> = ev
        .iter()
        .map(|e| match e {
            McpEvent::Asked {
                ask_id,
                call_id: None,
                round: None,
                ..
            } => *ask_id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ids.len(), 3);
    c.answer(t(3), ids[0], AskAnswer::Accept(None)).unwrap();
    c.answer(t(3), ids[1], AskAnswer::Refuse("no model here".into()))
        .unwrap();
    assert_eq!(
        c.answer(t(3), ids[1], AskAnswer::Decline),
        Err(AnswerError::Unknown(ids[1]))
    );
    let w = written(&drain(&mut c));
    assert_eq!(
        w,
        vec![
            json!({"jsonrpc":"2.0","id":0,"result":{"action":"accept","content":{
                "name":"John Doe","age":30,"score":95.5,"status":"active","verified":true}}}),
            json!({"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no model here"}}),
        ]
    );
    c.handle_stdout(
        t(4),
        &line(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"timeout"}})),
    );
    let ev = events(drain(&mut c));
    assert_eq!(
        ev,
        vec![McpEvent::AskClosed {
            ask_id: ids[2],
            reason: "withdrawn by the server".into()
        }]
    );
    assert_eq!(c.open_asks(), 0);

    // Without elicitation on, the question is refused at once, as a client without the
    // capability does.
    let mut c = McpClient::new(McpConfig::default());
    c.start(t(0)).unwrap();
    drain(&mut c);
    c.handle_spawned(t(0));
    drain(&mut c);
    c.handle_stdout(
        t(1),
        &line(json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}})),
    );
    drain(&mut c);
    c.handle_stdout(
        t(2),
        &line(json!({"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object"}}})),
    );
    let outs = drain(&mut c);
    assert_eq!(written(&outs)[0]["error"]["code"], -32601);
    assert!(
        matches!(&events(outs)[..], [McpEvent::Declined { method, .. }] if method == "elicitation/create")
    );
}

// ---- Streamable HTTP ----

fn head(status: u16, headers: &[(&str, &str)]) -> HttpResponseHead {
    HttpResponseHead::new(status, headers)
}

fn json_answer(c: &mut McpClient, now: Time, x: ExchangeId, v: Value, extra: &[(&str, &str)]) {
    let mut h = vec![("Content-Type", "application/json")];
    h.extend_from_slice(extra);
    c.handle_http_response(now, x, head(200, &h));
    c.handle_http_body(now, x, serde_json::to_string(&v).unwrap().as_bytes());
    c.handle_http_end(now, x);
}

fn accepted(c: &mut McpClient, now: Time, x: ExchangeId) {
    c.handle_http_response(now, x, head(202, &[]));
    c.handle_http_end(now, x);
}

/// A GET stream that never answers holds the client back for at most the list timeout.
#[test]
fn a_silent_get_stream_delays_ready_by_the_list_timeout_at_most() {
    let mut c = McpClient::new(McpConfig {
        protocol_version: ProtocolVersion::V2025_11_25,
        list_timeout: Duration::from_secs(5),
        ..McpConfig::http()
    });
    c.start(t(0)).unwrap();
    let init = exchanges(&drain(&mut c)).remove(0);
    json_answer(
        &mut c,
        t(1),
        init.exchange,
        json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","serverInfo":{"name":"s","version":"1"},"capabilities":{"tools":{}}}}),
        &[("mcp-session-id", "session-1")],
    );
    let xs = exchanges(&drain(&mut c));
    assert_eq!(xs[1].method, HttpMethod::Get);
    json_answer(
        &mut c,
        t(2),
        xs[2].exchange,
        json!({"jsonrpc":"2.0","id":2,"result":{"tools":[]}}),
        &[],
    );
    assert!(
        !events(drain(&mut c))
            .iter()
            .any(|e| matches!(e, McpEvent::Ready(_)))
    );
    assert_eq!(c.poll_timeout(), Some(t(5001)));
    c.handle_timeout(t(5001));
    assert!(
        events(drain(&mut c))
            .iter()
            .any(|e| matches!(e, McpEvent::Ready(_)))
    );
    assert_eq!(c.phase(), Phase::Ready);
}

/// A 2025-11-25 session over HTTP: the session id from the `initialize` answer on every
/// later exchange, `MCP-Protocol-Version` after the handshake, 202 for notifications, the
/// GET stream, and the conformance suite's `sse-retry` scenario: a response stream closed
/// after its priming event is resumed by GET with `Last-Event-ID` after the `retry` delay.
#[test]
fn http_session_with_resumption() {
    let mut c = McpClient::new(McpConfig {
        protocol_version: ProtocolVersion::V2025_11_25,
        ..McpConfig::http()
    });
    c.start(t(0)).unwrap();
    let xs = exchanges(&drain(&mut c));
    assert_eq!(xs.len(), 1);
    let init = &xs[0];
    assert_eq!(init.method, HttpMethod::Post);
    assert_eq!(init.header("Mcp-Method"), Some("initialize"));
    assert_eq!(
        init.header("Accept"),
        Some("application/json, text/event-stream")
    );
    assert_eq!(init.header("Content-Type"), Some("application/json"));
    assert_eq!(init.header("MCP-Protocol-Version"), None);
    assert_eq!(init.header("Mcp-Session-Id"), None);
    assert_eq!(body(init)["params"]["protocolVersion"], "2025-11-25");
    json_answer(
        &mut c,
        t(1),
        init.exchange,
        json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-03-26","serverInfo":{"name":"sse-retry-test-server","version":"1.0.0"},"capabilities":{"tools":{}}}}),
        &[("mcp-session-id", "session-1")],
    );
    let xs = exchanges(&drain(&mut c));
    let kinds: Vec<_> = xs
        .iter()
        .map(|x| (x.method, x.header("Mcp-Method").map(str::to_owned)))
        .collect();
    // The GET stream is opened first, and the client is ready only once it answered: a
    // call's stream resumed later is never confused with it.
    assert_eq!(
        kinds,
        vec![
            (HttpMethod::Post, Some("notifications/initialized".into())),
            (HttpMethod::Get, None),
            (HttpMethod::Post, Some("tools/list".into())),
        ]
    );
    for x in &xs {
        assert_eq!(x.header("mcp-session-id"), Some("session-1"));
        assert_eq!(x.header("mcp-protocol-version"), Some("2025-03-26"));
    }
    assert_eq!(xs[1].header("Accept"), Some("text/event-stream"));
    assert_eq!(xs[1].body, None);
    accepted(&mut c, t(2), xs[0].exchange);
    json_answer(
        &mut c,
        t(2),
        xs[2].exchange,
        json!({"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"test_reconnection","inputSchema":{"type":"object","properties":{},"required":[]}}]}}),
        &[("mcp-session-id", "session-1")],
    );
    let ev = events(drain(&mut c));
    assert!(
        !ev.iter().any(|e| matches!(e, McpEvent::Ready(_))),
        "ready before the GET stream answered: {ev:?}"
    );
    assert_eq!(c.phase(), Phase::Listing);
    // The scenario's GET stream: open, a blank event.
    c.handle_http_response(
        t(2),
        xs[1].exchange,
        head(200, &[("content-type", "text/event-stream")]),
    );
    c.handle_http_body(t(2), xs[1].exchange, b"data: \n\n");
    let ev = events(drain(&mut c));
    assert!(
        matches!(ev.last(), Some(McpEvent::Ready(d)) if d.protocol_version == ProtocolVersion::V2025_03_26),
        "{ev:?}"
    );

    let call = c
        .call(
            t(10),
            "tools/call",
            Some(json!({"name":"test_reconnection","arguments":{}})),
            Duration::from_secs(10),
        )
        .unwrap();
    let xs = exchanges(&drain(&mut c));
    assert_eq!(xs[0].header("Mcp-Name"), Some("test_reconnection"));
    let post = xs[0].exchange;
    c.handle_http_response(
        t(11),
        post,
        head(
            200,
            &[
                ("content-type", "text/event-stream"),
                ("mcp-session-id", "session-1"),
            ],
        ),
    );
    c.handle_http_body(t(11), post, b"id: event-1\nretry: 500\ndata: \n\n");
    c.handle_http_end(t(61), post);
    assert!(
        drain(&mut c).is_empty(),
        "the call waits for the resumption"
    );
    assert_eq!(c.poll_timeout(), Some(t(561)));
    c.handle_timeout(t(561));
    let xs = exchanges(&drain(&mut c));
    assert_eq!(xs.len(), 1);
    let get = &xs[0];
    assert_eq!(get.method, HttpMethod::Get);
    assert_eq!(get.header("Last-Event-ID"), Some("event-1"));
    assert_eq!(get.header("Mcp-Session-Id"), Some("session-1"));
    c.handle_http_response(
        t(562),
        get.exchange,
        head(200, &[("content-type", "text/event-stream")]),
    );
    c.handle_http_body(t(562), get.exchange, b"id: event-2\nretry: 500\ndata: \n\n");
    c.handle_http_body(
        t(562),
        get.exchange,
        format!("event: message\nid: event-3\ndata: {}\n\n", json!({"jsonrpc":"2.0","id":call.0,"result":{"content":[{"type":"text","text":"Reconnection test completed successfully"}]}})).as_bytes(),
    );
    let outs = drain(&mut c);
    // The server keeps the resumed stream open; it is closed once it has answered.
    assert!(outs.contains(&Output::HttpAbort(get.exchange)));
    let ev = events(outs);
    assert!(
        matches!(&ev[..], [McpEvent::CallCompleted { call_id, result: Ok(r) }] if *call_id == call && r["content"][0]["text"] == "Reconnection test completed successfully"),
        "{ev:?}"
    );

    // Closing ends the session with DELETE and closes the GET stream.
    c.close(t(600));
    let outs = drain(&mut c);
    let xs = exchanges(&outs);
    assert_eq!(xs.len(), 1);
    assert_eq!(xs[0].method, HttpMethod::Delete);
    assert_eq!(xs[0].header("Mcp-Session-Id"), Some("session-1"));
    assert!(outs.iter().any(|o| matches!(o, Output::HttpAbort(_))));
    assert!(matches!(events(outs).last(), Some(McpEvent::Stopped(_))));
    assert_eq!(c.phase(), Phase::Stopped);
}

/// A 2026-07-28 server over HTTP: the conformance suite's `http-standard-headers` and
/// `http-custom-headers` tools, the `MCP-Protocol-Version` header on every POST matching
/// `_meta`, a call answered on an event stream with progress first, and the invalid tool of
/// `http-invalid-tool-headers` left out.
#[test]
fn http_stateless_headers_streams_and_refused_tools() {
    let mut c = McpClient::new(McpConfig::http());
    c.start(t(0)).unwrap();
    let xs = exchanges(&drain(&mut c));
    let d = &xs[0];
    assert_eq!(d.header("Mcp-Method"), Some("server/discover"));
    assert_eq!(d.header("MCP-Protocol-Version"), Some("2026-07-28"));
    assert_eq!(body(d)["params"]["_meta"][META_2026], "2026-07-28");
    json_answer(
        &mut c,
        t(1),
        d.exchange,
        json!({"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","ttlMs":0,"cacheScope":"private",
            "supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"serverInfo":{"name":"http-custom-headers-server","version":"1.0.0"}}}),
        &[],
    );
    let xs = exchanges(&drain(&mut c));
    assert_eq!(xs.len(), 1, "no notifications/initialized, no GET stream");
    let list = &xs[0];
    assert_eq!(list.header("Mcp-Method"), Some("tools/list"));
    assert_eq!(list.header("MCP-Protocol-Version"), Some("2026-07-28"));
    json_answer(
        &mut c,
        t(2),
        list.exchange,
        json!({"jsonrpc":"2.0","id":2,"result":{"resultType":"complete","ttlMs":0,"cacheScope":"private","tools":[
            {"name":"test_custom_headers_null","inputSchema":{"type":"object","properties":{
                "region":{"type":"string","x-mcp-header":"Region"},
                "priority":{"type":"integer","x-mcp-header":"Priority"},
                "verbose":{"type":"boolean","x-mcp-header":"Verbose"},
                "query":{"type":"string"}},"required":["region","priority","query"]}},
            {"name":"invalid_duplicate_diff_case","inputSchema":{"type":"object","properties":{
                "field1":{"type":"string","x-mcp-header":"MyField"},
                "field2":{"type":"string","x-mcp-header":"myfield"}},"required":["field1","field2"]}}]}}),
        &[],
    );
    let ev = events(drain(&mut c));
    assert!(
        matches!(&ev[0], McpEvent::ToolRefused { name, .. } if name == "invalid_duplicate_diff_case"),
        "{ev:?}"
    );
    assert!(matches!(&ev[1], McpEvent::ToolsChanged(t) if t.len() == 1));
    assert!(matches!(ev.last(), Some(McpEvent::Ready(_))));

    let call = c
        .call(
            t(3),
            "tools/call",
            Some(json!({"name":"test_custom_headers_null","arguments":{"region":"us-east1","priority":1,"verbose":null,"query":"SELECT 1"},"_meta":{"progressToken":7}})),
            Duration::from_secs(5),
        )
        .unwrap();
    let xs = exchanges(&drain(&mut c));
    let x = &xs[0];
    assert_eq!(x.header("Mcp-Name"), Some("test_custom_headers_null"));
    assert_eq!(x.header("Mcp-Param-Region"), Some("us-east1"));
    assert_eq!(x.header("Mcp-Param-Priority"), Some("1"));
    assert_eq!(x.header("Mcp-Param-Verbose"), None);
    assert_eq!(x.header("Mcp-Param-Query"), None);
    assert_eq!(
        x.header("MCP-Protocol-Version"),
        body(x)["params"]["_meta"][META_2026].as_str()
    );
    c.handle_http_response(
        t(4),
        x.exchange,
        head(200, &[("content-type", "text/event-stream")]),
    );
    let stream = format!(
        "event: message\ndata: {}\n\nevent: message\ndata: {}\n\n",
        json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"progress":50,"total":100}}),
        json!({"jsonrpc":"2.0","id":call.0,"result":{"resultType":"complete","content":[{"type":"text","text":"Custom headers test completed"}]}}),
    );
    // Split mid-event, as a network would.
    let (a, b) = stream.as_bytes().split_at(37);
    c.handle_http_body(t(4), x.exchange, a);
    c.handle_http_body(t(5), x.exchange, b);
    let outs = drain(&mut c);
    let ev = events(outs);
    assert!(
        matches!(&ev[0], McpEvent::Progress { call_id: Some(id), progress, .. } if *id == call && *progress == 50.0),
        "{ev:?}"
    );
    assert!(
        matches!(&ev[1], McpEvent::CallCompleted { call_id, result: Ok(_) } if *call_id == call)
    );
    // The stream's end after the answer changes nothing.
    c.handle_http_end(t(6), x.exchange);
    assert!(drain(&mut c).is_empty());

    // A stateless call is cancelled by closing its stream, not by a notification.
    let call = c
        .call(
            t(7),
            "tools/call",
            Some(json!({"name":"test_custom_headers_null"})),
            Duration::from_secs(5),
        )
        .unwrap();
    let x = exchanges(&drain(&mut c))[0].exchange;
    assert!(c.cancel(call, Some("user")));
    assert_eq!(drain(&mut c), vec![Output::HttpAbort(x)]);
}

#[test]
fn http_trouble_is_one_clear_error_each() {
    // 401 at the handshake: no retrying without credentials; the challenge is kept.
    let mut c = McpClient::new(McpConfig::http());
    c.start(t(0)).unwrap();
    let x = exchanges(&drain(&mut c))[0].exchange;
    c.handle_http_response(
        t(1),
        x,
        head(401, &[("WWW-Authenticate", r#"Bearer resource_metadata="http://localhost:1/.well-known/oauth-protected-resource""#)]),
    );
    let ev = events(drain(&mut c));
    assert!(
        matches!(&ev[0], McpEvent::Failed(McpError::Unauthorized { status: 401, challenge: Some(ch) }) if ch.contains("resource_metadata")),
        "{ev:?}"
    );
    assert!(matches!(ev.last(), Some(McpEvent::GaveUp { .. })));

    // A 2025 server refusing discover with 400 gets initialize; unreachable means restart.
    let mut c = McpClient::new(McpConfig::http());
    c.start(t(0)).unwrap();
    let x = exchanges(&drain(&mut c))[0].exchange;
    c.handle_http_response(t(1), x, head(400, &[("content-type", "application/json")]));
    c.handle_http_body(t(1), x, br#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},"id":null}"#);
    c.handle_http_end(t(1), x);
    let outs = drain(&mut c);
    let xs = exchanges(&outs);
    assert_eq!(body(&xs[0])["method"], "initialize");
    c.handle_http_failed(t(2), xs[0].exchange, "connection refused");
    let ev = events(drain(&mut c));
    assert!(
        matches!(&ev[0], McpEvent::Failed(McpError::Transport(m)) if m == "connection refused"),
        "{ev:?}"
    );
    assert!(matches!(&ev[1], McpEvent::Restarting { attempt: 1, .. }));
    assert_eq!(c.phase(), Phase::Backoff);

    // A ready 2026 server that answers a call with HTML, with too much JSON, or not at all.
    let mut c = McpClient::new(McpConfig {
        max_http_body: 200,
        ..McpConfig::http()
    });
    c.start(t(0)).unwrap();
    let x = exchanges(&drain(&mut c))[0].exchange;
    json_answer(
        &mut c,
        t(1),
        x,
        json!({"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}),
        &[],
    );
    assert!(matches!(
        events(drain(&mut c)).last(),
        Some(McpEvent::Ready(_))
    ));
    let call = |c: &mut McpClient| {
        let id = c
            .call(
                t(2),
                "tools/call",
                Some(json!({"name":"x"})),
                Duration::from_secs(5),
            )
            .unwrap();
        (id, exchanges(&drain(c))[0].exchange)
    };
    let (id, x) = call(&mut c);
    c.handle_http_response(
        t(3),
        x,
        head(200, &[("content-type", "text/html; charset=utf-8")]),
    );
    c.handle_http_body(t(3), x, b"<html><body>Gateway   error</body></html>");
    c.handle_http_end(t(3), x);
    let ev = events(drain(&mut c));
    assert!(
        matches!(&ev[..], [McpEvent::CallCompleted { call_id, result: Err(McpError::Http { status: 200, detail }) }] if *call_id == id && detail.contains("text/html")),
        "{ev:?}"
    );
    let (id, x) = call(&mut c);
    c.handle_http_response(t(4), x, head(200, &[("content-type", "application/json")]));
    c.handle_http_body(t(4), x, &[b' '; 150]);
    c.handle_http_body(t(4), x, &[b' '; 150]);
    c.handle_http_end(t(4), x);
    let ev = events(drain(&mut c));
    assert!(
        matches!(&ev[..], [McpEvent::CallCompleted { call_id, result: Err(McpError::Http { detail, .. }) }] if *call_id == id && detail.contains("larger than 200")),
        "{ev:?}"
    );
    let (id, x) = call(&mut c);
    c.handle_http_response(t(5), x, head(500, &[("content-type", "text/plain")]));
    c.handle_http_body(t(5), x, b"upstream\n\n  crashed");
    c.handle_http_end(t(5), x);
    let ev = events(drain(&mut c));
    assert!(
        matches!(&ev[..], [McpEvent::CallCompleted { call_id, result: Err(e) }] if *call_id == id && e.to_string() == "MCP server answered HTTP 500: upstream crashed"),
        "{ev:?}"
    );
    // A stateless response stream that ends early fails its call (no resumption there).
    let (id, x) = call(&mut c);
    c.handle_http_response(t(6), x, head(200, &[("content-type", "text/event-stream")]));
    c.handle_http_body(t(6), x, b"id: 1\nretry: 10\ndata: \n\n");
    c.handle_http_end(t(6), x);
    let ev = events(drain(&mut c));
    assert!(
        matches!(&ev[..], [McpEvent::CallCompleted { call_id, result: Err(McpError::StreamEnded) }] if *call_id == id),
        "{ev:?}"
    );
    // Reports about exchanges the client forgot are ignored.
    c.handle_http_body(t(7), x, b"data: {}\n\n");
    c.handle_http_end(t(7), x);
    assert!(drain(&mut c).is_empty());
}

#[test]
fn an_expired_session_starts_a_new_one() {
    let mut c = McpClient::new(McpConfig {
        protocol_version: ProtocolVersion::V2025_11_25,
        listen: false,
        ..McpConfig::http()
    });
    c.start(t(0)).unwrap();
    let x = exchanges(&drain(&mut c))[0].exchange;
    json_answer(
        &mut c,
        t(1),
        x,
        json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}),
        &[("Mcp-Session-Id", "s1")],
    );
    drain(&mut c);
    let id = c
        .call(
            t(2),
            "tools/call",
            Some(json!({"name":"x"})),
            Duration::from_secs(5),
        )
        .unwrap();
    let x = exchanges(&drain(&mut c))[0].exchange;
    c.handle_http_response(t(3), x, head(404, &[]));
    let outs = drain(&mut c);
    assert!(
        exchanges(&outs).is_empty(),
        "no DELETE for a session the server forgot"
    );
    let ev = events(outs);
    assert!(matches!(&ev[0], McpEvent::Failed(McpError::SessionExpired)));
    assert!(
        matches!(&ev[1], McpEvent::CallCompleted { call_id, result: Err(McpError::SessionExpired) } if *call_id == id)
    );
    assert!(matches!(&ev[2], McpEvent::Restarting { .. }));
    assert_eq!(c.session_id(), None);
    c.handle_timeout(t(3) + Duration::from_secs(1));
    let xs = exchanges(&drain(&mut c));
    assert_eq!(body(&xs[0])["method"], "initialize");
    assert_eq!(xs[0].header("Mcp-Session-Id"), None);
}

#[test]
fn a_server_request_nobody_answers_is_cancelled_in_time() {
    let mut c = McpClient::new(McpConfig {
        asks: asking(),
        ..McpConfig::default()
    });
    c.start(t(0)).unwrap();
    drain(&mut c);
    c.handle_spawned(t(0));
    drain(&mut c);
    c.handle_stdout(
        t(1),
        &line(json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}})),
    );
    drain(&mut c);
    c.handle_stdout(
        t(1000),
        &line(json!({"jsonrpc":"2.0","id":"e1","method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{}}}})),
    );
    let ev = events(drain(&mut c));
    let [McpEvent::Asked { ask_id, .. }] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(c.poll_timeout(), Some(t(61_000)));
    c.handle_timeout(t(60_999));
    assert!(drain(&mut c).is_empty());
    c.handle_timeout(t(61_000));
    let outs = drain(&mut c);
    assert_eq!(
        written(&outs),
        vec![json!({"jsonrpc":"2.0","id":"e1","result":{"action":"cancel"}})]
    );
    assert!(
        matches!(&events(outs)[..], [McpEvent::AskClosed { ask_id: a, reason }] if a == ask_id && reason == "no answer within 60 s")
    );
    assert_eq!(c.poll_timeout(), None);
}
