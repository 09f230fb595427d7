//! Scripted-server tests of [`McpClient`]: edge cases that real servers rarely produce on cue.

use super::*;
use proptest::prelude::*;
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
            Output::Write(l) => {
                assert!(l.ends_with('\n') && l.matches('\n').count() == 1, "{l:?}");
                Some(serde_json::from_str(l).expect("client writes JSON"))
            }
            _ => None,
        })
        .collect()
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

fn init_result(version: &str, caps: Value) -> Value {
    json!({"jsonrpc":"2.0","id":1,"result":{
        "protocolVersion": version, "capabilities": caps,
        "serverInfo": {"name":"scripted","version":"0"}}})
}

fn fast_config() -> McpConfig {
    McpConfig {
        init_timeout: Duration::from_millis(500),
        ..McpConfig::default()
    }
}

/// A client spawned and with `initialize` written, at time 0.
fn spawned(config: McpConfig) -> McpClient {
    let mut c = McpClient::new(config);
    c.start(t(0)).unwrap();
    assert_eq!(drain(&mut c), vec![Output::Spawn]);
    c.handle_spawned(t(0));
    let outs = drain(&mut c);
    let w = written(&outs);
    assert_eq!(w.len(), 1);
    assert_eq!(w[0]["method"], "initialize");
    assert_eq!(w[0]["id"], 1);
    assert_eq!(w[0]["params"]["protocolVersion"], "2025-11-25");
    assert_eq!(w[0]["params"]["capabilities"]["roots"]["listChanged"], true);
    c
}

/// A ready client whose server offers tools only, with one tool `t1`.
fn ready(config: McpConfig) -> McpClient {
    let mut c = spawned(config);
    c.handle_stdout(t(1), &line(init_result("2025-11-25", json!({"tools":{}}))));
    let w = written(&drain(&mut c));
    assert_eq!(w[1]["method"], "tools/list");
    let id = w[1]["id"].clone();
    c.handle_stdout(
        t(2),
        &line(json!({"jsonrpc":"2.0","id":id,"result":{"tools":[{"name":"t1"}]}})),
    );
    let ev = events(drain(&mut c));
    assert!(matches!(ev.last(), Some(McpEvent::Ready(_))), "{ev:?}");
    c
}

#[test]
fn handshake_negotiates_then_lists_every_offered_kind_with_pagination() {
    let mut c = spawned(McpConfig::default());
    assert_eq!(c.phase(), Phase::Initializing);
    c.handle_stdout(
        t(10),
        &line(init_result(
            "2025-06-18",
            json!({"tools":{"listChanged":true},"resources":{},"prompts":{},"logging":{}}),
        )),
    );
    let w = written(&drain(&mut c));
    let methods: Vec<_> = w.iter().map(|m| m["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        [
            "notifications/initialized",
            "tools/list",
            "resources/list",
            "prompts/list"
        ]
    );
    assert!(w[0].get("id").is_none());
    assert_eq!(c.phase(), Phase::Listing);
    assert!(c.is_operational());
    let (tools, res, prompts) = (w[1]["id"].clone(), w[2]["id"].clone(), w[3]["id"].clone());

    // Tools come in two pages.
    c.handle_stdout(
        t(11),
        &line(
            json!({"jsonrpc":"2.0","id":tools,"result":{"tools":[{"name":"a"}],"nextCursor":"p2"}}),
        ),
    );
    let w = written(&drain(&mut c));
    assert_eq!(w[0]["method"], "tools/list");
    assert_eq!(w[0]["params"], json!({"cursor":"p2"}));
    let tools2 = w[0]["id"].clone();
    c.handle_stdout(
        t(12),
        &line(json!({"jsonrpc":"2.0","id":tools2,"result":{"tools":[{"name":"b","inputSchema":{"type":"object"}}]}})),
    );
    c.handle_stdout(
        t(12),
        &line(
            json!({"jsonrpc":"2.0","id":res,"result":{"resources":[{"uri":"x://1","name":"one"}]}}),
        ),
    );
    assert_eq!(c.phase(), Phase::Listing);
    c.handle_stdout(
        t(13),
        &line(json!({"jsonrpc":"2.0","id":prompts,"result":{"prompts":[]}})),
    );
    let ev = events(drain(&mut c));
    assert_eq!(ev.len(), 4, "{ev:?}");
    let McpEvent::ToolsChanged(tools) = &ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!(
        tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(tools[1].definition["inputSchema"], json!({"type":"object"}));
    assert!(matches!(&ev[1], McpEvent::ResourcesChanged(r) if r[0].uri == "x://1"));
    assert!(matches!(&ev[2], McpEvent::PromptsChanged(p) if p.is_empty()));
    let McpEvent::Ready(desc) = &ev[3] else {
        panic!()
    };
    assert_eq!(desc.protocol_version, ProtocolVersion::V2025_06_18);
    assert_eq!(desc.server_info["name"], "scripted");
    assert_eq!(c.phase(), Phase::Ready);
    assert_eq!(c.catalog().tools.len(), 2);
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn unknown_protocol_version_is_refused_without_retrying() {
    let mut c = spawned(McpConfig::default());
    c.handle_stdout(t(5), &line(init_result("2099-01-01", json!({}))));
    let outs = drain(&mut c);
    assert!(written(&outs).is_empty(), "no initialized after a refusal");
    assert!(outs.contains(&Output::Kill {
        grace: Duration::from_secs(2)
    }));
    let ev = events(outs);
    assert_eq!(
        ev,
        vec![McpEvent::Failed(McpError::UnsupportedProtocolVersion(
            "2099-01-01".into()
        ))]
    );
    c.handle_exited(t(6), ExitStatus::signal(15));
    let ev = events(drain(&mut c));
    assert!(matches!(
        &ev[..],
        [McpEvent::GaveUp { reason: McpError::UnsupportedProtocolVersion(v) }] if v == "2099-01-01"
    ));
    assert_eq!(c.phase(), Phase::GaveUp);
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn byte_by_byte_input_with_junk_blank_lines_and_early_notifications() {
    let mut c = spawned(McpConfig::default());
    let mut script = Vec::new();
    script.extend_from_slice(b"Server starting on stdio...\n\n   \r\n");
    script.extend(line(
        json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}),
    ));
    script.extend(line(
        json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hi"}}),
    ));
    script.extend(line(init_result("2025-11-25", json!({}))));
    for b in &script {
        c.handle_stdout(t(1), std::slice::from_ref(b));
    }
    let outs = drain(&mut c);
    let w = written(&outs);
    // An early list_changed does not cause a list of a kind the server does not offer.
    assert_eq!(w.len(), 1);
    assert_eq!(w[0]["method"], "notifications/initialized");
    let ev = events(outs);
    assert!(matches!(
        &ev[0],
        McpEvent::StdoutIssue(StdoutIssue::Undecodable { snippet, .. }) if snippet.starts_with("Server starting")
    ));
    assert!(
        matches!(&ev[1], McpEvent::Log { level, .. } if level == "info"),
        "{ev:?}"
    );
    assert!(matches!(&ev[2], McpEvent::Ready(_)));
    assert_eq!(ev.len(), 3);
}

#[test]
fn overlong_and_non_utf8_lines_are_dropped_and_reading_goes_on() {
    let mut c = spawned(McpConfig {
        max_line_len: 256,
        ..McpConfig::default()
    });
    let big = format!("{{\"junk\":\"{}\"}}\n", "x".repeat(1000));
    c.handle_stdout(t(1), &big.as_bytes()[..300]);
    c.handle_stdout(t(1), &big.as_bytes()[300..]);
    c.handle_stdout(t(1), b"\xff\xfe\n");
    c.handle_stdout(t(1), &line(init_result("2024-11-05", json!({}))));
    let ev = events(drain(&mut c));
    assert_eq!(
        ev[0],
        McpEvent::StdoutIssue(StdoutIssue::Overlong { limit: 256 })
    );
    assert_eq!(ev[1], McpEvent::StdoutIssue(StdoutIssue::NotUtf8));
    assert!(
        matches!(&ev[2], McpEvent::Ready(d) if d.protocol_version == ProtocolVersion::V2024_11_05)
    );
}

#[test]
fn server_requests_are_answered_and_unknown_ones_refused() {
    let mut c = spawned(McpConfig {
        roots: vec![Root {
            uri: "file:///srv".into(),
            name: Some("srv".into()),
        }],
        ..McpConfig::default()
    });
    c.handle_stdout(
        t(1),
        &[
            line(json!({"jsonrpc":"2.0","id":0,"method":"roots/list"})),
            line(json!({"jsonrpc":"2.0","id":"p","method":"ping"})),
            line(json!({"jsonrpc":"2.0","id":9,"method":"sampling/createMessage","params":{}})),
        ]
        .concat(),
    );
    let w = written(&drain(&mut c));
    assert_eq!(
        w,
        vec![
            json!({"jsonrpc":"2.0","id":0,"result":{"roots":[{"uri":"file:///srv","name":"srv"}]}}),
            json!({"jsonrpc":"2.0","id":"p","result":{}}),
            json!({"jsonrpc":"2.0","id":9,"error":{"code":-1,"message":"sampling is declined: nobody here may answer it"}}),
        ]
    );
}

#[test]
fn calls_complete_with_result_error_or_timeout() {
    let mut c = ready(McpConfig::default());
    let a = c
        .call(
            t(100),
            "tools/call",
            Some(json!({"name":"t1","arguments":{}})),
            Duration::from_secs(5),
        )
        .unwrap();
    let b = c
        .call(
            t(100),
            "resources/read",
            Some(json!({"uri":"x://1"})),
            Duration::from_secs(5),
        )
        .unwrap();
    let slow = c
        .call(t(100), "prompts/get", None, Duration::from_millis(300))
        .unwrap();
    assert_eq!(c.calls_in_flight(), 3);
    let w = written(&drain(&mut c));
    assert_eq!(w[0]["id"], a.0);
    assert_eq!(w[0]["params"]["name"], "t1");
    assert_eq!(c.poll_timeout(), Some(t(400)));

    // A batch carrying both answers.
    c.handle_stdout(
        t(150),
        &line(json!([
            {"jsonrpc":"2.0","id":b.0,"error":{"code":-32002,"message":"Resource not found","data":{"uri":"x://1"}}},
            {"jsonrpc":"2.0","id":a.0,"result":{"content":[{"type":"text","text":"ok"}]}}
        ])),
    );
    let ev = events(drain(&mut c));
    assert_eq!(
        ev,
        vec![
            McpEvent::CallCompleted {
                call_id: b,
                result: Err(McpError::Server(RpcError {
                    code: -32002,
                    message: "Resource not found".into(),
                    data: Some(json!({"uri":"x://1"}))
                }))
            },
            McpEvent::CallCompleted {
                call_id: a,
                result: Ok(json!({"content":[{"type":"text","text":"ok"}]}))
            },
        ]
    );

    c.handle_timeout(t(399));
    assert!(drain(&mut c).is_empty());
    c.handle_timeout(t(400));
    let outs = drain(&mut c);
    let w = written(&outs);
    assert_eq!(
        w,
        vec![
            json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":slow.0,"reason":"timed out"}})
        ]
    );
    assert_eq!(
        events(outs),
        vec![McpEvent::CallCompleted {
            call_id: slow,
            result: Err(McpError::Timeout(Duration::from_millis(300)))
        }]
    );
    assert_eq!(c.calls_in_flight(), 0);
    assert_eq!(c.poll_timeout(), None);

    // The late answer is noticed, not misattributed.
    c.handle_stdout(
        t(500),
        &line(json!({"jsonrpc":"2.0","id":slow.0,"result":{}})),
    );
    assert_eq!(
        events(drain(&mut c)),
        vec![McpEvent::StdoutIssue(StdoutIssue::UnknownResponse(
            slow.0.to_string()
        ))]
    );
}

#[test]
fn misuse_is_an_error() {
    let mut c = McpClient::new(McpConfig::default());
    assert_eq!(
        c.call(t(0), "tools/call", None, Duration::from_secs(1)),
        Err(McpError::NotReady)
    );
    c.start(t(0)).unwrap();
    assert_eq!(c.start(t(0)), Err(McpError::AlreadyStarted));
    let mut c = ready(McpConfig {
        max_in_flight: 2,
        ..McpConfig::default()
    });
    assert!(matches!(
        c.call(t(3), "initialize", None, Duration::from_secs(1)),
        Err(McpError::ReservedMethod(_))
    ));
    assert!(matches!(
        c.notify("notifications/initialized", None),
        Err(McpError::ReservedMethod(_))
    ));
    c.call(t(3), "tools/call", None, Duration::from_secs(1))
        .unwrap();
    let id = c
        .call(t(3), "tools/call", None, Duration::from_secs(1))
        .unwrap();
    assert_eq!(
        c.call(t(3), "tools/call", None, Duration::from_secs(1)),
        Err(McpError::TooManyCalls(2))
    );
    drain(&mut c);
    assert!(c.cancel(id, Some("user")));
    assert!(!c.cancel(id, None));
    let w = written(&drain(&mut c));
    assert_eq!(w[0]["method"], "notifications/cancelled");
    assert_eq!(w[0]["params"]["requestId"], id.0);
    assert!(
        c.call(t(3), "tools/call", None, Duration::from_secs(1))
            .is_ok()
    );
}

#[test]
fn list_changed_relists_once_more_when_it_arrives_mid_pass() {
    let mut c = ready(McpConfig::default());
    let changed = line(json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    c.handle_stdout(t(10), &changed);
    let w = written(&drain(&mut c));
    assert_eq!(w.len(), 1);
    assert_eq!(w[0]["method"], "tools/list");
    let first = w[0]["id"].clone();
    // Two more announcements during the pass: one extra pass, not two.
    c.handle_stdout(t(11), &[changed.clone(), changed].concat());
    assert!(drain(&mut c).is_empty());
    c.handle_stdout(
        t(12),
        &line(json!({"jsonrpc":"2.0","id":first,"result":{"tools":[{"name":"t1"},{"name":"t2"}]}})),
    );
    let outs = drain(&mut c);
    let w = written(&outs);
    assert_eq!(w.len(), 1);
    assert_eq!(w[0]["method"], "tools/list");
    assert!(matches!(&events(outs)[..], [McpEvent::ToolsChanged(t)] if t.len() == 2));
    // A failing pass keeps the previous list.
    c.handle_stdout(
        t(13),
        &line(json!({"jsonrpc":"2.0","id":w[0]["id"],"error":{"code":-32603,"message":"boom"}})),
    );
    let ev = events(drain(&mut c));
    assert!(matches!(
        &ev[..],
        [McpEvent::ListFailed {
            kind: ListKind::Tools,
            ..
        }]
    ));
    assert_eq!(c.catalog().tools.len(), 2);
    assert_eq!(c.phase(), Phase::Ready);

    // Prompts were not offered: their announcement is not acted on.
    c.handle_stdout(
        t(14),
        &line(json!({"jsonrpc":"2.0","method":"notifications/prompts/list_changed"})),
    );
    assert!(drain(&mut c).is_empty());
}

#[test]
fn list_timeouts_do_not_block_readiness() {
    let mut c = spawned(McpConfig {
        list_timeout: Duration::from_millis(100),
        ..McpConfig::default()
    });
    c.handle_stdout(
        t(10),
        &line(init_result("2025-11-25", json!({"prompts":{}}))),
    );
    drain(&mut c);
    assert_eq!(c.poll_timeout(), Some(t(110)));
    c.handle_timeout(t(110));
    let ev = events(drain(&mut c));
    assert!(matches!(
        &ev[..],
        [
            McpEvent::ListFailed {
                kind: ListKind::Prompts,
                error: McpError::Timeout(_)
            },
            McpEvent::Ready(_)
        ]
    ));
}

#[test]
fn init_timeout_kills_and_restarts_with_backoff() {
    let mut c = spawned(fast_config());
    assert_eq!(c.poll_timeout(), Some(t(500)));
    c.handle_timeout(t(499));
    assert!(drain(&mut c).is_empty());
    c.handle_timeout(t(500));
    let outs = drain(&mut c);
    assert!(outs.contains(&Output::Kill {
        grace: Duration::from_secs(2)
    }));
    assert_eq!(
        events(outs),
        vec![McpEvent::Failed(McpError::InitTimeout(
            Duration::from_millis(500)
        ))]
    );
    assert_eq!(c.phase(), Phase::Stopping);
    // Output from the dying process is not taken for the handshake.
    c.handle_stdout(t(600), &line(init_result("2025-11-25", json!({}))));
    assert!(drain(&mut c).is_empty());
    c.handle_exited(t(700), ExitStatus::signal(15));
    assert_eq!(
        events(drain(&mut c)),
        vec![McpEvent::Restarting {
            attempt: 1,
            delay: Duration::from_secs(1)
        }]
    );
    assert_eq!(c.poll_timeout(), Some(t(1700)));
    c.handle_timeout(t(1700));
    assert_eq!(drain(&mut c), vec![Output::Spawn]);
    c.handle_spawned(t(1700));
    let w = written(&drain(&mut c));
    assert_eq!(w[0]["method"], "initialize");
    assert_ne!(w[0]["id"], 1, "ids are not reused across restarts");
}

#[test]
fn crash_fails_calls_in_flight_then_restarts_until_the_budget_is_spent() {
    let mut c = ready(McpConfig {
        restart: RestartBackoff {
            max_reconnects: 3,
            ..RestartBackoff::default()
        },
        ..McpConfig::default()
    });
    let call = c
        .call(t(10), "tools/call", None, Duration::from_secs(60))
        .unwrap();
    drain(&mut c);
    c.handle_exited(t(20), ExitStatus::code(1));
    let ev = events(drain(&mut c));
    assert_eq!(
        ev,
        vec![
            McpEvent::CallCompleted {
                call_id: call,
                result: Err(McpError::ServerExited(ExitStatus::code(1)))
            },
            McpEvent::Failed(McpError::ServerExited(ExitStatus::code(1))),
            McpEvent::Restarting {
                attempt: 1,
                delay: Duration::from_secs(1)
            },
        ]
    );
    assert_eq!(c.calls_in_flight(), 0);
    assert_eq!(
        c.call(t(21), "tools/call", None, Duration::from_secs(1)),
        Err(McpError::NotReady)
    );

    // Each restart dies during the handshake: delays double, then the client gives up.
    let mut now = 20;
    for (attempt, delay) in [(2u32, 2000u64), (3, 4000)] {
        now += 10_000;
        c.handle_timeout(t(now));
        assert_eq!(drain(&mut c), vec![Output::Spawn]);
        c.handle_spawned(t(now));
        drain(&mut c);
        c.handle_exited(t(now + 1), ExitStatus::code(0));
        let ev = events(drain(&mut c));
        assert_eq!(
            ev,
            vec![
                McpEvent::Failed(McpError::InitExited(ExitStatus::code(0))),
                McpEvent::Restarting {
                    attempt,
                    delay: Duration::from_millis(delay)
                }
            ]
        );
    }
    now += 10_000;
    c.handle_timeout(t(now));
    assert_eq!(drain(&mut c), vec![Output::Spawn]);
    c.handle_spawn_failed(t(now), "No such file or directory (os error 2)");
    let ev = events(drain(&mut c));
    assert_eq!(ev.len(), 2);
    assert!(
        ev[0].clone()
            == McpEvent::Failed(McpError::SpawnFailed(
                "No such file or directory (os error 2)".into()
            ))
    );
    assert!(
        matches!(&ev[1], McpEvent::GaveUp { reason: McpError::SpawnFailed(m) } if m.contains("No such file"))
    );
    assert_eq!(c.phase(), Phase::GaveUp);
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn reaching_ready_restores_the_restart_budget() {
    let mut c = ready(McpConfig {
        restart: RestartBackoff {
            max_reconnects: 1,
            ..RestartBackoff::default()
        },
        ..McpConfig::default()
    });
    for round in 0..3u64 {
        let base = 100_000 * (round + 1);
        c.handle_exited(t(base), ExitStatus::signal(9));
        let ev = events(drain(&mut c));
        assert!(
            matches!(ev.last(), Some(McpEvent::Restarting { attempt: 1, .. })),
            "{ev:?}"
        );
        c.handle_timeout(t(base + 1000));
        assert_eq!(drain(&mut c), vec![Output::Spawn]);
        c.handle_spawned(t(base + 1000));
        let w = written(&drain(&mut c));
        let mut init = init_result("2025-11-25", json!({}));
        init["id"] = w[0]["id"].clone();
        c.handle_stdout(t(base + 1001), &line(init));
        assert!(matches!(
            events(drain(&mut c)).last(),
            Some(McpEvent::Ready(_))
        ));
        // The old catalog of tools is dropped: the new server offers none.
        assert!(c.catalog().tools.is_empty());
    }
}

#[test]
fn rejected_initialize_reports_the_servers_error() {
    let mut c = spawned(McpConfig {
        restart: RestartBackoff::never(),
        ..McpConfig::default()
    });
    c.handle_stdout(
        t(1),
        &line(json!({"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}})),
    );
    let ev = events(drain(&mut c));
    let McpEvent::Failed(err) = &ev[0] else {
        panic!("{ev:?}")
    };
    assert!(err.to_string().contains("rejected initialize"), "{err}");
    c.handle_exited(t(2), ExitStatus::code(0));
    assert!(matches!(
        &events(drain(&mut c))[..],
        [McpEvent::GaveUp { .. }]
    ));
}

#[test]
fn shutdown_fails_calls_and_reports_the_exit() {
    let mut c = ready(McpConfig::default());
    let call = c
        .call(t(5), "tools/call", None, Duration::from_secs(9))
        .unwrap();
    drain(&mut c);
    c.close(t(6));
    let outs = drain(&mut c);
    assert!(outs.contains(&Output::Kill {
        grace: Duration::from_secs(2)
    }));
    assert_eq!(
        events(outs),
        vec![McpEvent::CallCompleted {
            call_id: call,
            result: Err(McpError::Shutdown)
        }]
    );
    c.handle_exited(t(7), ExitStatus::code(0));
    assert_eq!(
        events(drain(&mut c)),
        vec![McpEvent::Stopped(ExitStatus::code(0))]
    );
    assert_eq!(c.phase(), Phase::Stopped);
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn stderr_is_reported_per_line() {
    let mut c = spawned(McpConfig {
        max_stderr_line_len: 8,
        ..McpConfig::default()
    });
    c.handle_stderr(t(1), b"Server run");
    c.handle_stderr(t(1), b"ning\nok\n\n");
    c.handle_stderr(t(1), b"fine\n");
    assert_eq!(
        events(drain(&mut c)),
        vec![
            McpEvent::Stderr("<stderr line longer than 8 bytes dropped>".into()),
            McpEvent::Stderr("ok".into()),
            McpEvent::Stderr("fine".into()),
        ]
    );
}

#[derive(Debug, Clone)]
enum Op {
    Stdout(Vec<u8>),
    Line(String),
    Tick(u64),
    Call(u64),
    Exit,
    SpawnFailed,
    Shutdown,
}

fn op() -> impl Strategy<Value = Op> {
    let json_line = prop_oneof![
        Just(r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"resources":{},"prompts":{}}}}"#.to_string()),
        (0u64..12).prop_map(|id| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[{{"name":"x"}}],"resources":[],"prompts":[],"nextCursor":"c"}}}}"#)),
        (0u64..12).prop_map(|id| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[]}}}}"#)),
        (0u64..12).prop_map(|id| format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-1,"message":"e"}}}}"#)),
        Just(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#.to_string()),
        Just(r#"{"jsonrpc":"2.0","id":"s","method":"roots/list"}"#.to_string()),
        Just("[1,{\"jsonrpc\":\"2.0\",\"method\":\"x\"}]".to_string()),
    ];
    prop_oneof![
        3 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Op::Stdout),
        4 => json_line.prop_map(Op::Line),
        3 => (0u64..5_000).prop_map(Op::Tick),
        2 => (1u64..3_000).prop_map(Op::Call),
        1 => Just(Op::Exit),
        1 => Just(Op::SpawnFailed),
        1 => Just(Op::Shutdown),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the server writes and whenever time passes, the client neither panics nor
    /// holds a request without a deadline, and every call it accepted completes exactly once.
    #[test]
    fn arbitrary_input_never_panics_or_strands_a_call(ops in proptest::collection::vec(op(), 0..60)) {
        let mut c = McpClient::new(McpConfig {
            init_timeout: Duration::from_millis(700),
            list_timeout: Duration::from_millis(400),
            max_line_len: 48,
            restart: RestartBackoff { max_reconnects: 2, initial_delay: Duration::from_millis(100), ..RestartBackoff::default() },
            ..McpConfig::default()
        });
        let mut now = 0u64;
        c.start(t(now)).unwrap();
        let mut accepted = std::collections::BTreeSet::new();
        let mut completed = std::collections::BTreeSet::new();
        for op in ops {
            match op {
                Op::Stdout(b) => c.handle_stdout(t(now), &b),
                Op::Line(l) => { c.handle_stdout(t(now), l.as_bytes()); c.handle_stdout(t(now), b"\n"); }
                Op::Tick(d) => { now += d; c.handle_timeout(t(now)); }
                Op::Call(ms) => if let Ok(id) = c.call(t(now), "tools/call", None, Duration::from_millis(ms)) {
                    prop_assert!(accepted.insert(id));
                },
                Op::Exit => c.handle_exited(t(now), ExitStatus::code(1)),
                Op::SpawnFailed => c.handle_spawn_failed(t(now), "nope"),
                Op::Shutdown => c.close(t(now)),
            }
            while let Some(o) = c.poll_output() {
                match o {
                    Output::Spawn => c.handle_spawned(t(now)),
                    Output::Event(McpEvent::CallCompleted { call_id, .. }) => {
                        prop_assert!(accepted.contains(&call_id));
                        prop_assert!(completed.insert(call_id), "completed twice");
                    }
                    _ => {}
                }
            }
            if c.calls_in_flight() > 0 || c.request_deadlines().next().is_some() {
                let next = c.poll_timeout();
                prop_assert!(next.is_some());
                prop_assert!(c.request_deadlines().all(|d| Some(d) >= next));
            }
        }
        // Running the clock out completes everything.
        for _ in 0..10 {
            now += 100_000;
            c.handle_timeout(t(now));
            while let Some(o) = c.poll_output() {
                if let Output::Event(McpEvent::CallCompleted { call_id, .. }) = o {
                    prop_assert!(completed.insert(call_id));
                }
            }
        }
        prop_assert_eq!(c.calls_in_flight(), 0);
        prop_assert_eq!(&accepted, &completed);
    }
}

#[test]
fn an_echo_of_initialize_is_recognised() {
    let mut c = McpClient::new(McpConfig::default());
    c.start(t(0)).unwrap();
    drain(&mut c);
    c.handle_spawned(t(0));
    let Some(Output::Write(init)) = c.poll_output() else {
        panic!()
    };
    c.handle_stdout(t(1), init.as_bytes());
    let outs = drain(&mut c);
    assert!(written(&outs).is_empty(), "nothing answered to an echo");
    assert!(matches!(
        &events(outs)[..],
        [McpEvent::Failed(McpError::NotAnMcpServer(_))]
    ));
    assert_eq!(c.phase(), Phase::Stopping);
}

#[test]
fn a_stop_the_driver_never_confirms_does_not_hang() {
    let mut c = spawned(fast_config());
    c.handle_timeout(t(500));
    drain(&mut c);
    assert_eq!(c.phase(), Phase::Stopping);
    // Kill grace (2 s) plus the slack for reporting the exit.
    assert_eq!(c.poll_timeout(), Some(t(7500)));
    c.handle_timeout(t(7500));
    assert_eq!(
        events(drain(&mut c)),
        vec![McpEvent::Restarting {
            attempt: 1,
            delay: Duration::from_secs(1)
        }]
    );
    // A report arriving after all is stray and changes nothing.
    c.handle_exited(t(7600), ExitStatus::code(0));
    assert!(drain(&mut c).is_empty());
    assert_eq!(c.phase(), Phase::Backoff);

    let mut c = ready(McpConfig::default());
    c.close(t(10));
    drain(&mut c);
    c.handle_timeout(t(7010));
    assert_eq!(
        events(drain(&mut c)),
        vec![McpEvent::Stopped(ExitStatus::default())]
    );
    assert_eq!(c.phase(), Phase::Stopped);
}
