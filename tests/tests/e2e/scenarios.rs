//! The scenarios, each generic over the driver under test.

use std::time::Duration;

use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::{Driver, QUIET, RawClient, WAIT, http, space};
use mew_driver_common::client::socket::Runtime;
use mew_tests::scratch::Scratch;

/// The participant runtime of the driver under test.
type ParticipantRuntime<D> =
    mew_driver_common::client::participant::ParticipantRuntime<<D as Driver>::Rt>;
use futures_util::{SinkExt, StreamExt};

fn start<D: Driver>(extra: &str) -> super::RunningGateway {
    let dir = Scratch::new("e2e", "gw");
    D::start(space(extra), &dir).owning(dir)
}

fn error_code(v: &Value) -> &str {
    v["payload"]["error"].as_str().unwrap_or("")
}

pub async fn join_by_header<D: Driver>() {
    let gw = start::<D>("");
    let (_h, w) = RawClient::join(&gw, "human-token").await;
    assert_eq!(w["kind"], "system/welcome");
    assert_eq!(w["from"], "system:gateway");
    assert_eq!(w["to"], json!(["human"]));
    assert_eq!(w["payload"]["you"]["id"], "human");
    assert_eq!(w["payload"]["you"]["capabilities"], json!([{"kind": "*"}]));
    assert!(w["payload"]["participants"].is_array());
    assert!(w["payload"]["active_streams"].is_array());
}

pub async fn join_by_reference_messages<D: Driver>() {
    let gw = start::<D>("");
    // The reference's clients: any path, no header, a `type: join` first frame.
    let mut a = RawClient::open(&format!("ws://{}/", gw.addr), None).await;
    a.send_text(
        json!({"type":"join","space":"e2e","token":"agent-token","participantId":"agent"})
            .to_string(),
    )
    .await;
    let w = a.expect_kind("system/welcome").await;
    assert_eq!(w["payload"]["you"]["id"], "agent");
    // Its interactive CLI: a `system/join` envelope.
    let mut s = RawClient::open(&format!("ws://{}/some/path", gw.addr), None).await;
    s.send_text(
        json!({"protocol":"mew/v0.4","id":"join-1","kind":"system/join",
               "payload":{"space":"e2e","participant":"service","token":"service-token"}})
        .to_string(),
    )
    .await;
    let w = s.expect_kind("system/welcome").await;
    assert_eq!(w["payload"]["you"]["id"], "service");
    // A header-authenticated client that also sends the join: no second presence.
    let (mut h, _) = RawClient::join(&gw, "human-token").await;
    h.send_text(json!({"type":"join","space":"e2e","token":"human-token"}).to_string())
        .await;
    loop {
        let p = a.expect_kind("system/presence").await;
        if p["payload"]["participant"]["id"] == "human" {
            break;
        }
    }
    a.expect_none(|v| v["kind"] == "system/presence").await;
    // An unknown token is refused with an error, then the socket closes.
    let mut bad = RawClient::open(&gw.ws_url("e2e"), Some("nope")).await;
    let e = bad.expect_kind("system/error").await;
    assert_eq!(error_code(&e), "unknown_token", "{e}");
    bad.expect_close().await;
}

pub async fn welcome_and_presence<D: Driver>() {
    let gw = start::<D>("");
    let (mut h, _) = RawClient::join(&gw, "human-token").await;
    let (a, w) = RawClient::join(&gw, "agent-token").await;
    let ids: Vec<&str> = w["payload"]["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"human"), "{w}");
    let p = h.expect_kind("system/presence").await;
    assert_eq!(p["payload"]["event"], "join");
    assert_eq!(p["payload"]["participant"]["id"], "agent");
    assert!(p["payload"]["participant"]["capabilities"].is_array());
    drop(a);
    let p = h.expect_kind("system/presence").await;
    assert_eq!(p["payload"]["event"], "leave");
    assert_eq!(p["payload"]["participant"]["id"], "agent");
}

pub async fn chat_fan_out<D: Driver>() {
    let gw = start::<D>("");
    let (mut h, _) = RawClient::join(&gw, "human-token").await;
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    let (mut s, _) = RawClient::join(&gw, "service-token").await;
    let text = r#"{"protocol":"mew/v0.4","id":"c-1","ts":"2025-01-01T00:00:00.000Z","from":"agent","kind":"chat","payload":{"text":"hello  all","format":"plain"}}"#;
    a.send_text(text).await;
    // Forwarded unchanged, byte for byte, to everyone, the sender included.
    assert_eq!(h.expect_id("c-1").await, text);
    assert_eq!(s.expect_id("c-1").await, text);
    assert_eq!(a.expect_id("c-1").await, text);
}

/// A message longer than the gateway's write fragments (written as a text frame and
/// continuation frames) arrives as the one message that was sent.
pub async fn long_chat_arrives_whole<D: Driver>() {
    let gw = start::<D>("");
    let (mut h, _) = RawClient::join(&gw, "human-token").await;
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    let body = "long é ü € text ".repeat(20_000);
    let text = format!(
        r#"{{"protocol":"mew/v0.4","id":"long-1","from":"agent","kind":"chat","payload":{{"text":"{body}"}}}}"#
    );
    a.send_text(&text).await;
    for got in [h.expect_id("long-1").await, a.expect_id("long-1").await] {
        let v: serde_json::Value = serde_json::from_str(&got).unwrap();
        assert_eq!(v["payload"]["text"], body.as_str());
    }
}

pub async fn capability_violation<D: Driver>() {
    let gw = start::<D>("");
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    let (mut s, _) = RawClient::join(&gw, "service-token").await;
    let id = a
        .send(
            "mcp/request",
            &["service"],
            json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}),
        )
        .await;
    let e = a.expect_kind("system/error").await;
    assert_eq!(e["correlation_id"], json!([id]));
    assert_eq!(error_code(&e), "capability_violation");
    assert_eq!(e["payload"]["attempted_kind"], "mcp/request");
    assert!(e["payload"]["your_capabilities"].as_array().unwrap().len() >= 2);
    s.expect_none(|v| v["id"] == id.as_str()).await;
    // `from` spoofing and system kinds are refused too.
    a.send_text(
        json!({"protocol":"mew/v0.4","id":"spoof","from":"human","kind":"chat","payload":{"text":"x"}})
            .to_string(),
    )
    .await;
    let e = a.expect_kind("system/error").await;
    assert_eq!(error_code(&e), "identity_mismatch", "{e}");
    s.expect_none(|v| v["id"] == "spoof").await;
}

pub async fn proposal_fulfilled_by_another_participant<D: Driver>() {
    use mew_core::participant::{Event, ParticipantConfig, RequestOptions, ToolSpec};
    let gw = start::<D>("");
    let cfg = |token: &str| ParticipantConfig {
        gateway_url: gw.ws_url("e2e"),
        space: "e2e".into(),
        token: token.into(),
        ..ParticipantConfig::default()
    };
    let (service, _sev, _) = ParticipantRuntime::<D>::connect(cfg("service-token"), Some(1))
        .await
        .unwrap();
    service
        .register_tool(
            ToolSpec {
                name: "add".into(),
                description: Some("adds".into()),
                input_schema: Some(json!({"type":"object","required":["a","b"],
                    "properties":{"a":{"type":"number"},"b":{"type":"number"}}})),
            },
            |args: Value| async move {
                let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
                Ok(json!({"content":[{"type":"text","text": sum.to_string()}]}))
            },
        )
        .await
        .unwrap()
        .unwrap();
    let (human, mut hev, _) = ParticipantRuntime::<D>::connect(cfg("human-token"), Some(2))
        .await
        .unwrap();
    let (agent, _aev, _) = ParticipantRuntime::<D>::connect(cfg("agent-token"), Some(3))
        .await
        .unwrap();
    let call = tokio::spawn(async move {
        agent
            .mcp_request(
                vec!["service".into()],
                json!({"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3}}}),
                RequestOptions::default(),
            )
            .await
    });
    let proposal = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(Event::ProposalSeen { id, from, .. }) = D::Rt::recv_event(&mut hev).await {
                assert_eq!(from, "agent");
                return id;
            }
        }
    })
    .await
    .expect("the human sees the proposal");
    let fulfilled = human.fulfil(proposal).await.expect("fulfilment answered");
    assert_eq!(fulfilled["content"][0]["text"], "5");
    let result = tokio::time::timeout(WAIT, call)
        .await
        .expect("proposal settled in time")
        .unwrap()
        .expect("proposal fulfilled");
    assert_eq!(result["content"][0]["text"], "5");
}

pub async fn grant_then_direct_request<D: Driver>() {
    let gw = start::<D>("");
    let (mut h, _) = RawClient::join(&gw, "human-token").await;
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    let (mut s, _) = RawClient::join(&gw, "service-token").await;
    let grant = h
        .send(
            "capability/grant",
            &["agent"],
            json!({"recipient":"agent","capabilities":[{"kind":"mcp/request"}],"reason":"trusted"}),
        )
        .await;
    // The updated welcome comes first, then the grant itself.
    let w = a.expect_kind("system/welcome").await;
    assert!(
        w["payload"]["you"]["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!({"kind":"mcp/request"})),
        "{w}"
    );
    let g = a.expect_kind("capability/grant").await;
    assert_eq!(g["id"], grant.as_str());
    let req = a
        .send(
            "mcp/request",
            &["service"],
            json!({"jsonrpc":"2.0","id":7,"method":"tools/list"}),
        )
        .await;
    s.expect_id(&req).await;
}

pub async fn pause_enforced<D: Driver>() {
    let gw = start::<D>("");
    let (mut h, _) = RawClient::join(&gw, "human-token").await;
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    let pause = h
        .send(
            "participant/pause",
            &["agent"],
            json!({"reason":"rate_limit","timeout_seconds":60}),
        )
        .await;
    a.expect_id(&pause).await;
    let chat = a.send("chat", &[], json!({"text":"still talking"})).await;
    let e = a.expect_kind("system/error").await;
    assert_eq!(error_code(&e), "participant_paused");
    assert_eq!(e["correlation_id"], json!([chat]));
    h.expect_none(|v| v["id"] == chat.as_str()).await;
    let resume = h.send("participant/resume", &["agent"], json!({})).await;
    a.expect_id(&resume).await;
    let chat = a.send("chat", &[], json!({"text":"back"})).await;
    h.expect_id(&chat).await;
}

pub async fn kick<D: Driver>() {
    let gw = start::<D>("");
    let (mut h, _) = RawClient::join(&gw, "human-token").await;
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    h.send(
        "space/kick",
        &[],
        json!({"participant_id":"agent","reason":"misbehaving"}),
    )
    .await;
    a.expect_close().await;
    loop {
        let p = h.expect_kind("system/presence").await;
        if p["payload"]["event"] == "leave" {
            assert_eq!(p["payload"]["participant"]["id"], "agent");
            break;
        }
    }
    // The token no longer joins.
    let mut again = RawClient::open(&gw.ws_url("e2e"), Some("agent-token")).await;
    let e = again.expect_kind("system/error").await;
    assert_eq!(error_code(&e), "unknown_token", "{e}");
    again.expect_close().await;
}

pub async fn streams_with_frames<D: Driver>() {
    let gw = start::<D>("");
    let (mut h, _) = RawClient::join(&gw, "human-token").await;
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    let req = h
        .send(
            "stream/request",
            &["gateway"],
            json!({"direction":"upload","description":"data"}),
        )
        .await;
    let open = h.expect_kind("stream/open").await;
    assert_eq!(open["correlation_id"], json!([req]));
    let sid = open["payload"]["stream_id"].as_str().unwrap().to_owned();
    h.send_text(format!("#{sid}#chunk-1")).await;
    loop {
        let t = a.next_text_within(WAIT).await.expect("stream frame");
        if t.starts_with('#') {
            assert_eq!(t, format!("#{sid}#chunk-1"));
            break;
        }
    }
    // A non-owner may not write on it.
    a.send_text(format!("#{sid}#intruder")).await;
    let e = a.expect_kind("system/error").await;
    assert_eq!(error_code(&e), "unauthorized_stream_write", "{e}");
    h.expect_none(|_| false).await;
    // A late joiner sees it in its welcome.
    let (_s, w) = RawClient::join(&gw, "service-token").await;
    assert_eq!(w["payload"]["active_streams"][0]["stream_id"], sid.as_str());
    h.send("stream/close", &[], json!({"stream_id": sid})).await;
    a.expect_kind("stream/close").await;
}

pub async fn http_injection_and_polling<D: Driver>() {
    let gw = start::<D>("");
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    let body = r#"{"kind":"chat","payload":{"text":"over http"}}"#;
    let path = "/participants/human/messages";
    assert_eq!(http(gw.addr, "POST", path, None, Some(body)).await.0, 401);
    assert_eq!(
        http(gw.addr, "POST", path, Some("agent-token"), Some(body))
            .await
            .0,
        403
    );
    assert_eq!(
        http(gw.addr, "POST", path, Some("human-token"), Some("[1]"))
            .await
            .0,
        400
    );
    let (st, v) = http(
        gw.addr,
        "POST",
        "/participants/agent/messages",
        Some("agent-token"),
        Some(r#"{"kind":"mcp/request","to":["service"],"payload":{"method":"tools/list"}}"#),
    )
    .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (403, Some("capability_violation"))
    );
    let (st, v) = http(gw.addr, "POST", path, Some("human-token"), Some(body)).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["status"], "accepted");
    let id = v["id"].as_str().unwrap().to_owned();
    let got: Value = serde_json::from_str(&a.expect_id(&id).await).unwrap();
    assert_eq!(got["from"], "human");
    assert_eq!(got["payload"]["text"], "over http");
    let (st, list) = http(gw.addr, "GET", path, Some("human-token"), None).await;
    assert_eq!(st, 200);
    let list = list.as_array().unwrap();
    assert!(list.iter().any(|e| e["id"] == id.as_str()), "{list:?}");
    let since = format!("{path}?since={id}");
    let (_, after) = http(gw.addr, "GET", &since, Some("human-token"), None).await;
    assert!(
        !after
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"] == id.as_str()),
        "since excludes the envelope itself"
    );
    // Who is in the space is for its participants only.
    let (st, v) = http(gw.addr, "GET", "/participants?space=e2e", None, None).await;
    assert_eq!((st, v["error"].as_str()), (401, Some("unauthorized")));
    let (st, v) = http(gw.addr, "GET", "/participants", Some("not-a-token"), None).await;
    assert_eq!((st, v["error"].as_str()), (403, Some("forbidden")));
    let (st, v) = http(
        gw.addr,
        "GET",
        "/participants?space=e2e",
        Some("agent-token"),
        None,
    )
    .await;
    assert_eq!(st, 200);
    let ids: Vec<&str> = v["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["human", "agent", "service"]);
    assert_eq!(v["participants"][0]["capabilities"], json!([{"kind": "*"}]));
    // An empty kind is a bad request, not a capability question.
    let (st, v) = http(
        gw.addr,
        "POST",
        "/participants/human/messages",
        Some("human-token"),
        Some(r#"{"kind":""}"#),
    )
    .await;
    assert_eq!((st, v["error"].as_str()), (400, Some("invalid_request")));
    assert!(v["message"].as_str().unwrap().contains("non-empty"), "{v}");
    let (st, v) = http(gw.addr, "GET", "/health", None, None).await;
    assert_eq!((st, v["status"].as_str()), (200, Some("ok")));
    assert_eq!(http(gw.addr, "GET", "/nope", None, None).await.0, 404);
    assert_eq!(
        http(
            gw.addr,
            "GET",
            "/participants?space=other",
            Some("human-token"),
            None
        )
        .await
        .0,
        404
    );
    // A WebSocket upgrade naming another space is refused before the handshake.
    let req = format!("ws://{}/ws?space=other", gw.addr);
    assert!(tokio_tungstenite::connect_async(req).await.is_err());
    // A body sent only after `100 Continue` (as curl does for larger bodies).
    let mut sock = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = format!(
        r#"{{"kind":"chat","payload":{{"text":"{}"}}}}"#,
        "z".repeat(2000)
    );
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer human-token\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    let mut buf = [0u8; 25];
    tokio::time::timeout(WAIT, sock.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf, b"HTTP/1.1 100 Continue\r\n\r\n");
    sock.write_all(body.as_bytes()).await.unwrap();
    let mut rest = String::new();
    tokio::time::timeout(WAIT, sock.read_to_string(&mut rest))
        .await
        .unwrap()
        .unwrap();
    assert!(rest.starts_with("HTTP/1.1 200"), "{rest}");
}

pub async fn slow_consumer_is_closed<D: Driver>() {
    // No rate limit: 32 MiB from one sender would pass the default byte rate (8 MiB/s after a
    // 16 MiB burst) whenever the loop runs fast, and the refusals are not what is tested.
    let gw =
        start::<D>("gateway: {max_queue_bytes: 262144, max_queue_frames: 100000, rate_limit: off}");
    let (mut h, _) = RawClient::join(&gw, "human-token").await;
    let (mut s, _) = RawClient::join(&gw, "service-token").await;
    // The slow one joins and then never reads again.
    let (slow, _) = RawClient::join(&gw, "agent-token").await;
    // 32 MiB in all: more than loopback socket buffers hold, so the slow queue must grow.
    let big = "x".repeat(32 * 1024);
    let mut left = false;
    for i in 0..1000 {
        let id = h.send("chat", &[], json!({"text": big, "n": i})).await;
        // The fast receivers (the sender observes its own envelopes too) keep reading, one
        // envelope behind at most: ten unread 32 KiB frames would already exceed the queue
        // limit whenever the kernel's socket buffers happen to be small.
        s.expect_id(&id).await;
        h.expect_id(&id).await;
    }
    // The service saw everything and, at some point, the slow agent's leave.
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        let Some(t) = s.next_text_within(QUIET).await else {
            break;
        };
        let v: Value = serde_json::from_str(&t).unwrap();
        if v["kind"] == "system/presence" && v["payload"]["event"] == "leave" {
            assert_eq!(v["payload"]["participant"]["id"], "agent");
            left = true;
        }
    }
    let (_, v) = http(gw.addr, "GET", "/participants", Some("human-token"), None).await;
    let agent = v["participants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "agent")
        .cloned()
        .unwrap();
    assert_eq!(agent["online"], false, "slow consumer disconnected: {v}");
    let _ = left;
    drop(slow);
}

pub async fn oversize_frame<D: Driver>() {
    let gw = start::<D>("gateway: {max_frame_bytes: 4096}");
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    let (mut s, _) = RawClient::join(&gw, "service-token").await;
    let big = format!(
        r#"{{"protocol":"mew/v0.4","id":"big","from":"agent","kind":"chat","payload":{{"text":"{}"}}}}"#,
        "y".repeat(10_000)
    );
    a.send_text(big).await;
    let e = a.expect_kind("system/error").await;
    assert_eq!(error_code(&e), "frame_too_large");
    let close = a.expect_close().await;
    if let Some(f) = close {
        assert_eq!(u16::from(f.code), 1009);
    }
    s.expect_none(|v| v["id"] == "big").await;
}

pub async fn garbage_frames<D: Driver>() {
    let gw = start::<D>("");
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    let (mut s, _) = RawClient::join(&gw, "service-token").await;
    for junk in ["not json", "{}", "[1,2,3]", r#"{"kind":5}"#, "{\"a\":"] {
        a.send_text(junk).await;
        let e = a.expect_kind("system/error").await;
        assert!(!error_code(&e).is_empty(), "{junk}: {e}");
    }
    a.ws.send(Message::Binary(vec![0xff, 0xfe, 0x00].into()))
        .await
        .unwrap();
    a.expect_kind("system/error").await;
    // The connection still works and nobody else saw any of it.
    let ok = a.send("chat", &[], json!({"text":"fine"})).await;
    let t = s.expect_id(&ok).await;
    assert!(t.contains("fine"));
}

/// The gateway writes its frames itself (not through the WebSocket library, which still
/// reads): a client's pings are answered with their payload between whole frames of a
/// busy stream, and a client's close is answered with a close frame.
pub async fn pings_answered_and_close_replied<D: Driver>() {
    let gw = start::<D>("");
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    let (mut s, _) = RawClient::join(&gw, "service-token").await;
    let mut ids = Vec::new();
    for i in 0..50u8 {
        ids.push(
            a.send(
                "chat",
                &[],
                json!({"text": "x".repeat(300 * usize::from(i))}),
            )
            .await,
        );
        s.ws.send(Message::Ping(vec![i; 3].into())).await.unwrap();
    }
    let (mut pongs, mut seen) = (Vec::new(), 0);
    while pongs.len() < 50 || seen < ids.len() {
        match tokio::time::timeout(WAIT, s.ws.next()).await {
            Ok(Some(Ok(Message::Pong(p)))) => pongs.push(p.to_vec()),
            Ok(Some(Ok(Message::Text(t)))) => {
                let v: Value = serde_json::from_str(t.as_str()).expect("whole JSON frames");
                if v["id"] == ids[seen] {
                    seen += 1;
                }
            }
            Ok(Some(Ok(_))) => {}
            other => panic!("pongs {}, chats {seen}: {other:?}", pongs.len()),
        }
    }
    let want: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 3]).collect();
    assert_eq!(pongs, want);
    s.ws.close(None).await.unwrap();
    loop {
        match tokio::time::timeout(WAIT, s.ws.next()).await {
            Ok(Some(Ok(Message::Close(_)))) => break,
            Ok(Some(Ok(_))) => continue,
            other => panic!("no close reply: {other:?}"),
        }
    }
    assert!(matches!(
        tokio::time::timeout(WAIT, s.ws.next()).await,
        Ok(None | Some(Err(_)))
    ));
}

pub async fn graceful_shutdown<D: Driver>() {
    let mut gw = start::<D>("");
    let (mut h, _) = RawClient::join(&gw, "human-token").await;
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    let stopper = std::thread::spawn(move || {
        gw.stop();
        gw
    });
    for c in [&mut h, &mut a] {
        let f = c.expect_close().await.expect("a close frame");
        assert_eq!(u16::from(f.code), 1001);
    }
    let gw = tokio::task::spawn_blocking(move || stopper.join().unwrap())
        .await
        .unwrap();
    // Nothing listens any more.
    assert!(tokio::net::TcpStream::connect(gw.addr).await.is_err());
}

pub async fn audit_and_virtual_logs<D: Driver>() {
    let dir = Scratch::new("e2e", "audit");
    let log = dir.join("observer.jsonl");
    let yaml = format!(
        r#"
space: {{id: e2e}}
participants:
  human: {{tokens: [human-token], capabilities: [{{kind: "*"}}]}}
  agent: {{tokens: [agent-token], capabilities: [{{kind: chat}}]}}
  observer: {{tokens: [observer-token], capabilities: [{{kind: chat}}], output_log: "{}", auto_connect: true}}
"#,
        log.display()
    );
    let config = mew_core::gateway::SpaceConfig::from_yaml(&yaml).unwrap();
    let mut gw = D::start(config, &dir);
    let (mut h, _) = RawClient::join(&gw, "human-token").await;
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    let chat = h.send("chat", &[], json!({"text":"for the record"})).await;
    a.expect_id(&chat).await;
    let bad = a
        .send("mcp/request", &[], json!({"method":"tools/list"}))
        .await;
    a.expect_kind("system/error").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    tokio::task::spawn_blocking(move || gw.stop())
        .await
        .unwrap();
    let history = std::fs::read_to_string(dir.join(".mew/logs/envelope-history.jsonl"))
        .expect("envelope history written");
    let lines: Vec<Value> = history
        .lines()
        .map(|l| {
            assert!(l.starts_with(r#"{"timestamp":"#), "key order: {l}");
            serde_json::from_str(l).unwrap()
        })
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["event"] == "received" && l["id"] == chat.as_str())
    );
    assert!(
        lines
            .iter()
            .any(|l| l["event"] == "delivered" && l["id"] == chat.as_str())
    );
    assert!(
        lines
            .iter()
            .any(|l| l["event"] == "rejected" && l["id"] == bad.as_str())
    );
    let decisions = std::fs::read_to_string(dir.join(".mew/logs/capability-decisions.jsonl"))
        .expect("capability decisions written");
    assert!(
        decisions
            .lines()
            .any(|l| l.contains(&bad) && l.contains("denied"))
    );
    let observed = std::fs::read_to_string(&log).expect("virtual participant log");
    let first = observed
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("one JSON envelope per line"))
        .find(|v| v["id"] == chat.as_str());
    assert!(first.is_some(), "{observed}");
    let _ = WAIT;
}

pub async fn runtime_reconnects<D: Driver>() {
    use mew_core::participant::{Event, ParticipantConfig, ReconnectPolicy};
    let mut gw = start::<D>("");
    let addr = gw.addr;
    let config = ParticipantConfig {
        gateway_url: gw.ws_url("e2e"),
        space: "e2e".into(),
        token: "agent-token".into(),
        reconnect: ReconnectPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(200),
            ..ReconnectPolicy::default()
        },
        ..ParticipantConfig::default()
    };
    let (rt, mut events, id) = ParticipantRuntime::<D>::connect(config, Some(9))
        .await
        .unwrap();
    assert_eq!(id, "agent");
    tokio::task::spawn_blocking(move || gw.stop())
        .await
        .unwrap();
    wait_for::<D>(&mut events, |e| matches!(e, Event::Disconnected { .. })).await;
    // The same address comes back; the core schedules the reconnect, the driver dials.
    let dir2 = Scratch::new("e2e", "gw2");
    let _gw2 = D::start_on(space(""), &dir2, addr).owning(dir2);
    wait_for::<D>(&mut events, |e| {
        matches!(
            e,
            Event::Ready {
                reconnected: true,
                ..
            }
        )
    })
    .await;
    let (mut h, _) = RawClient::join(&_gw2, "human-token").await;
    let sent = rt.chat("after the restart", vec![]).await.unwrap().unwrap();
    h.expect_id(&sent).await;
}

async fn wait_for<D: Driver>(
    events: &mut <D::Rt as Runtime>::Events,
    want: fn(&mew_core::participant::Event) -> bool,
) -> mew_core::participant::Event {
    tokio::time::timeout(WAIT, async {
        loop {
            let e = D::Rt::recv_event(events).await.expect("runtime alive");
            if want(&e) {
                return e;
            }
        }
    })
    .await
    .expect("event in time")
}

pub async fn join_timeout<D: Driver>() {
    let gw = start::<D>("gateway: {join_timeout_ms: 300}");
    // Connected, never joins: refused with an error, then closed.
    let mut c = RawClient::open(&gw.ws_url("e2e"), None).await;
    let e = c.expect_kind("system/error").await;
    assert_eq!(error_code(&e), "join_timeout", "{e}");
    c.expect_close().await;
}

pub async fn heartbeat_and_idle_close<D: Driver>() {
    use futures_util::StreamExt;
    let gw = start::<D>("gateway: {heartbeat_interval_ms: 100, idle_timeout_ms: 600}");
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    // A reading client sees the gateway's pings (and tungstenite answers them).
    let ping = tokio::time::timeout(WAIT, async {
        loop {
            match a.ws.next().await {
                Some(Ok(Message::Ping(_))) => return true,
                Some(Ok(_)) => continue,
                _ => return false,
            }
        }
    })
    .await;
    assert_eq!(ping, Ok(true), "a ping within {WAIT:?}");
    // Answered pings keep it online well past the idle timeout...
    let until = tokio::time::Instant::now() + Duration::from_millis(1200);
    while tokio::time::Instant::now() < until {
        let _ = tokio::time::timeout(Duration::from_millis(50), a.ws.next()).await;
    }
    let online = |v: &Value| {
        v["participants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == "agent")
            .map(|p| p["online"].clone())
    };
    let (_, v) = http(gw.addr, "GET", "/participants", Some("human-token"), None).await;
    assert_eq!(online(&v), Some(json!(true)), "{v}");
    // ...while a client that stops reading (so never answers) is closed as idle.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, v) = http(gw.addr, "GET", "/participants", Some("human-token"), None).await;
    assert_eq!(online(&v), Some(json!(false)), "{v}");
}

/// The agent runtime on this driver: a chat answered with a tool call, the model being a
/// scripted chat-completions server on loopback.
pub async fn agent_answers_with_a_tool<D: Driver>() {
    use mew_core::agent::{AgentConfig, AgentFile, AgentSettings};
    use mew_core::participant::{ParticipantConfig, ToolSpec};
    use mew_driver_common::client::agent::{AgentExit, HttpTransport, ModelEndpoint, run_agent};
    use mew_tests::model_server::{ModelServer, Turn};
    use std::sync::Arc;
    let gw = start::<D>(
        "  bot:\n    tokens: [bot-token]\n    capabilities: [{kind: chat}, {kind: chat/acknowledge}, {kind: \"reasoning/*\"}, {kind: mcp/request}]\n",
    );
    let model = ModelServer::start(vec![
        Turn::call("c1", "service__add", json!({"a": 2, "b": 3})),
        Turn::text("2 + 3 = 5"),
    ]);
    let cfg = |token: &str| ParticipantConfig {
        gateway_url: gw.ws_url("e2e"),
        space: "e2e".into(),
        token: token.into(),
        ..ParticipantConfig::default()
    };
    let (service, _events, _) = ParticipantRuntime::<D>::connect(cfg("service-token"), Some(1))
        .await
        .unwrap();
    service
        .register_tool(
            ToolSpec {
                name: "add".into(),
                description: Some("adds a and b".into()),
                input_schema: Some(json!({"type": "object"})),
            },
            |args: Value| async move {
                let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
                Ok(json!({"content": [{"type": "text", "text": sum.to_string()}]}))
            },
        )
        .await
        .unwrap()
        .unwrap();
    let (mut human, _) = RawClient::join(&gw, "human-token").await;
    // The raw human never answers `tools/list`: do not wait long for it.
    let config = AgentConfig::new(
        cfg("bot-token"),
        AgentSettings::from_file(&AgentFile::from_yaml("discovery_wait_ms: 300").unwrap()).unwrap(),
    );
    let endpoint = ModelEndpoint {
        base_url: model.base_url.clone(),
        api_key: None,
    };
    let (stop, stopped) = async_channel::bounded::<()>(1);
    let agent = tokio::spawn(run_agent::<D::Rt>(
        config,
        endpoint,
        Arc::new(HttpTransport),
        Some(9),
        async move {
            let _ = stopped.recv().await;
        },
        |_| {},
    ));
    loop {
        let p = human.expect_kind("system/presence").await;
        if p["payload"]["participant"]["id"] == "bot" {
            break;
        }
    }
    let chat = human.send("chat", &["bot"], json!({"text": "2+3?"})).await;
    let answer = loop {
        let c = human.expect_kind("chat").await;
        if c["from"] == "bot" {
            break c;
        }
    };
    assert_eq!(answer["payload"]["text"], "2 + 3 = 5");
    assert_eq!(answer["correlation_id"], json!([chat]));
    let reqs = model.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[0].body["tools"][0]["function"]["name"], "service__add",
        "{}",
        reqs[0].body
    );
    let tool = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap();
    assert_eq!(tool["content"], "5");
    stop.send(()).await.unwrap();
    assert_eq!(agent.await.unwrap(), AgentExit::Shutdown);
}

/// A "gateway" that accepts TCP and then says nothing cannot hang a participant: the
/// attempt is given up at the connect timeout.
pub async fn silent_gateway_is_given_up_on<D: Driver>() {
    use mew_core::participant::ParticipantConfig;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let held = std::thread::spawn(move || {
        // Hold the accepted sockets open, silently, until the test ends.
        let mut socks = Vec::new();
        for s in listener.incoming().take(2) {
            socks.push(s);
        }
        std::thread::sleep(Duration::from_secs(3));
        drop(socks);
    });
    let mut cfg = ParticipantConfig {
        gateway_url: format!("ws://{addr}/ws?space=e2e"),
        space: "e2e".into(),
        token: "human-token".into(),
        ..ParticipantConfig::default()
    };
    cfg.heartbeat.connect_timeout = Duration::from_millis(400);
    cfg.reconnect.enabled = false;
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        ParticipantRuntime::<D>::connect(cfg, Some(1)),
    )
    .await
    .expect("connect gives up by itself");
    let reason = r.err().expect("no gateway answered");
    // Whichever deadline fires first, the driver's or the core's, says so.
    assert!(
        reason.contains("no answer within 400ms") || reason.contains("no welcome"),
        "{reason}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(held);
}

/// A gateway that welcomes and then stops reading cannot hold a participant's task: writes
/// give up at the write timeout and the participant reconnects.
pub async fn a_gateway_that_stops_reading_is_given_up_on<D: Driver>() {
    use mew_core::participant::{Event, ParticipantConfig};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (sock, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(sock).await.unwrap();
        let welcome = json!({"protocol": "mew/v0.4", "id": "w", "from": "system:gateway",
            "to": ["human"], "kind": "system/welcome",
            "payload": {"you": {"id": "human", "capabilities": [{"kind": "*"}]}, "participants": []}});
        ws.send(Message::text(welcome.to_string())).await.unwrap();
        // Never read again; hold the socket open.
        tokio::time::sleep(Duration::from_secs(20)).await;
        drop(ws);
    });
    let mut cfg = ParticipantConfig {
        gateway_url: format!("ws://{addr}/ws?space=e2e"),
        space: "e2e".into(),
        token: "human-token".into(),
        ..ParticipantConfig::default()
    };
    cfg.heartbeat.write_timeout = Duration::from_millis(300);
    cfg.reconnect.enabled = false;
    let (rt, mut events, _) = ParticipantRuntime::<D>::connect(cfg, Some(1))
        .await
        .expect("welcomed");
    let big = "x".repeat(60_000);
    let started = std::time::Instant::now();
    // Enough to fill both ends' socket buffers many times over.
    for _ in 0..400 {
        if rt.chat(big.clone(), vec![]).await.is_err() {
            break;
        }
        if started.elapsed() > Duration::from_secs(10) {
            break;
        }
    }
    let reason = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match D::Rt::recv_event(&mut events).await {
                Some(Event::Disconnected { reason }) => return reason,
                Some(_) => continue,
                None => return "events ended".to_owned(),
            }
        }
    })
    .await
    .expect("the participant gives up on the silent gateway");
    assert!(reason.contains("write timeout"), "{reason}");
    // The task still answers commands.
    let alive = tokio::time::timeout(Duration::from_secs(2), rt.with(|p, _| p.state())).await;
    assert!(alive.is_ok(), "the runtime is not stuck");
    server.abort();
}

/// A person at two screens: both stay joined and see everything, a decision taken on one
/// settles the proposal on the other, the others see one presence; a participant that is
/// not a person keeps the one-connection rule.
pub async fn a_person_at_two_screens<D: Driver>() {
    use mew_core::participant::{Event, ParticipantConfig, ReviewState};
    let mut config = space("");
    config
        .participants
        .iter_mut()
        .find(|p| p.id == "human")
        .unwrap()
        .person = true;
    let dir = Scratch::new("e2e", "gw");
    let gw = D::start(config, &dir).owning(dir);
    let (mut screen1, _) = RawClient::join(&gw, "human-token").await;
    // The second screen through the SDK, as `mew client` joins.
    let (screen2, mut events, _) = ParticipantRuntime::<D>::connect(
        mew_core::participant::ParticipantConfig {
            gateway_url: gw.ws_url("e2e"),
            space: "e2e".into(),
            token: "human-token".into(),
            ..ParticipantConfig::default()
        },
        Some(2),
    )
    .await
    .unwrap();
    let (mut agent, welcome) = RawClient::join(&gw, "agent-token").await;
    let human = welcome["payload"]["participants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "human")
        .cloned()
        .expect("the human is present");
    assert_eq!(human["person"], true, "{human}");

    let proposal = agent
        .send(
            "mcp/proposal",
            &[],
            json!({"method": "tools/call", "params": {"name": "write_file", "arguments": {"path": "a"}}}),
        )
        .await;
    screen1.expect_id(&proposal).await;
    tokio::time::timeout(WAIT, async {
        loop {
            if let Some(Event::ProposalSeen { id, .. }) = D::Rt::recv_event(&mut events).await
                && id == proposal
            {
                return;
            }
        }
    })
    .await
    .expect("the second screen sees the proposal");
    // Rejected on the first screen: settled on the second.
    let reject = json!({"protocol": "mew/v0.4", "id": "reject-1", "from": "human",
        "to": ["agent"], "kind": "mcp/reject", "correlation_id": [proposal],
        "payload": {"reason": "not now"}});
    screen1.send_text(reject.to_string()).await;
    let state = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(Event::ProposalStateChanged { id, state }) =
                D::Rt::recv_event(&mut events).await
                && id == proposal
            {
                return state;
            }
        }
    })
    .await
    .expect("the second screen learns of the decision");
    assert!(
        matches!(&state, ReviewState::Rejected { by, .. } if by == "human"),
        "{state:?}"
    );
    agent.expect_kind("mcp/reject").await;
    // A chat addressed to the person reaches both screens.
    let chat = agent
        .send("chat", &["human"], json!({"text": "both?"}))
        .await;
    screen1.expect_id(&chat).await;

    // Leaving: no presence until the last screen goes.
    drop(screen2);
    agent
        .expect_none(|v| v["kind"] == "system/presence" && v["payload"]["event"] == "leave")
        .await;
    screen1.ws.close(None).await.unwrap();
    let left = agent.expect_kind("system/presence").await;
    assert_eq!(
        left["payload"],
        json!({"event": "leave", "participant": {"id": "human"}})
    );

    // Not a person: a second connection replaces the first.
    let (_agent2, _) = RawClient::join(&gw, "agent-token").await;
    let close = agent.expect_close().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1000);
    assert!(close.reason.contains("replaced"), "{}", close.reason);
}
