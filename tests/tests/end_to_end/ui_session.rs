//! The web page's session (`/ui/session`) over real sockets, on both drivers: the page's
//! token in its first message makes the session that participant (presence, capabilities,
//! chat, review), the page receives the core's view as JSON and sends commands; and every
//! bound: no token in time, a bad token, another space, an oversize command, a page that
//! stops reading, too many sessions, another site's page.

use crate::e2e;

use std::time::Duration;

use e2e::drivers::{AsyncStd, Tokio};
use e2e::{Driver, RawClient, RunningGateway, WAIT, space};
use futures_util::{SinkExt, StreamExt};
use mew_driver_common::server::ServerOptions;
use mew_driver_common::server::ui_session::SessionLimits;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

fn gateway<D: Driver>(limits: SessionLimits) -> RunningGateway {
    let opts = ServerOptions {
        seed: Some(3),
        ui: Some(&[]),
        ui_session: limits,
        ..Default::default()
    };
    D::start_with(space(""), "127.0.0.1:0".parse().unwrap(), opts)
}

/// Opens the page's session socket (no token anywhere in the request).
async fn open(gw: &RunningGateway) -> Ws {
    let req = format!("ws://{}/ui/session", gw.addr)
        .into_client_request()
        .unwrap();
    let (ws, _) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(req))
        .await
        .expect("upgraded in time")
        .expect("upgraded");
    ws
}

/// A session that sent its token.
async fn login(gw: &RunningGateway, token: &str) -> Ws {
    let mut ws = open(gw).await;
    let auth = json!({"token": token, "space": "e2e"});
    ws.send(Message::text(auth.to_string())).await.unwrap();
    ws
}

/// The next change the page receives (panics on a close or after [`WAIT`]).
async fn change(ws: &mut Ws) -> Value {
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => return serde_json::from_str(t.as_str()).unwrap(),
            Ok(Some(Ok(Message::Close(f)))) => panic!("closed: {f:?}"),
            Ok(Some(Ok(_))) => continue,
            other => panic!("no change: {other:?}"),
        }
    }
}

/// Changes until one `f` accepts.
async fn until(ws: &mut Ws, f: impl Fn(&Value) -> bool) -> Value {
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        assert!(tokio::time::Instant::now() < end, "no such change in time");
        let c = change(ws).await;
        if f(&c) {
            return c;
        }
    }
}

/// The close frame's code and reason, skipping what comes before it.
async fn closed(ws: &mut Ws) -> (CloseCode, String) {
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await {
            Ok(Some(Ok(Message::Close(Some(f))))) => return (f.code, f.reason.to_string()),
            Ok(Some(Ok(_))) => continue,
            other => panic!("no close frame: {other:?}"),
        }
    }
}

fn member_ids(members: &Value) -> Vec<String> {
    members
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn the_session_is_the_participant_of_its_token<D: Driver>() {
    let gw = gateway::<D>(SessionLimits::default());
    let mut page = login(&gw, "human-token").await;
    let first = change(&mut page).await;
    assert!(first["snapshot"].is_object(), "the first change: {first}");
    until(&mut page, |c| {
        c["status"]
            .as_str()
            .is_some_and(|s| s.contains("joined as human"))
            || c["snapshot"]["status"]
                .as_str()
                .is_some_and(|s| s.contains("joined as human"))
    })
    .await;

    // Presence: the others see the human.
    let (mut agent, welcome) = RawClient::join(&gw, "agent-token").await;
    let present: Vec<&str> = welcome["payload"]["participants"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["id"].as_str())
        .collect();
    assert!(present.contains(&"human"), "{welcome}");
    let (mut service, _) = RawClient::join(&gw, "service-token").await;
    let members = until(&mut page, |c| {
        c["members"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["id"] == "service"))
    })
    .await;
    let ids = member_ids(&members["members"]);
    assert_eq!(ids, ["agent", "human", "service"], "{members}");
    let me = &members["members"].as_array().unwrap()[1];
    assert_eq!(
        (me["me"].clone(), me["capabilities"][0].clone()),
        (json!(true), json!("*"))
    );

    // Chat both ways.
    agent.send("chat", &[], json!({"text": "hello page"})).await;
    let item = until(&mut page, |c| c["item"]["kind"] == "chat").await;
    assert_eq!(
        (item["item"]["from"].as_str(), item["item"]["text"].as_str()),
        (Some("agent"), Some("hello page"))
    );
    let line = json!({"command": {"line": "hello agent"}});
    page.send(Message::text(line.to_string())).await.unwrap();
    let chat = loop {
        let c = agent.expect_kind("chat").await;
        if c["from"] != "agent" {
            break c;
        }
    };
    assert_eq!(
        (chat["from"].clone(), chat["payload"]["text"].clone()),
        (json!("human"), json!("hello agent"))
    );

    // A proposal waits in the queue; approved from the page, the human fulfils it.
    let call =
        json!({"method": "tools/call", "params": {"name": "read", "arguments": {"path": "/a"}}});
    let p = agent.send("mcp/proposal", &["service"], call.clone()).await;
    let queue = until(&mut page, |c| {
        c["queue"].as_array().is_some_and(|q| !q.is_empty())
    })
    .await;
    assert_eq!(queue["queue"][0]["id"], p.as_str());
    assert_eq!(
        queue["queue"][0]["capability"],
        mew_core::automation::narrowest(&call)
    );
    let approve = json!({"command": {"approve": p}});
    page.send(Message::text(approve.to_string())).await.unwrap();
    // (The session's discovery asks the service for its tools first.)
    let req = loop {
        let r = service.expect_kind("mcp/request").await;
        if r["payload"]["method"] == "tools/call" {
            break r;
        }
        assert_eq!(r["payload"]["method"], "tools/list", "{r}");
    };
    let c = &req["correlation_id"];
    let correlation = if c.is_array() {
        c[0].clone()
    } else {
        c.clone()
    };
    assert_eq!(
        (req["from"].clone(), correlation),
        (json!("human"), json!(p))
    );
    assert_eq!(req["payload"]["params"], call["params"]);
    until(&mut page, |c| {
        c["queue"].as_array().is_some_and(|q| q.is_empty())
    })
    .await;

    // A command the core refuses comes back as an error; the session goes on.
    let unknown = json!({"command": {"approve": "nope"}});
    page.send(Message::text(unknown.to_string())).await.unwrap();
    let e = until(&mut page, |c| c.get("error").is_some()).await;
    assert!(e["error"].as_str().unwrap().contains("nope"), "{e}");
    page.send(Message::text("{\"command\": 7}")).await.unwrap();
    let e = until(&mut page, |c| c.get("error").is_some()).await;
    assert!(
        e["error"].as_str().unwrap().starts_with("not a command"),
        "{e}"
    );

    // The page closes: the human leaves the space.
    page.close(None).await.unwrap();
    loop {
        let p = agent.expect_kind("system/presence").await;
        if p["payload"]["event"] == "leave" {
            assert_eq!(p["payload"]["participant"]["id"], "human", "{p}");
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_session_is_its_tokens_participant_tokio() {
    the_session_is_the_participant_of_its_token::<Tokio>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_session_is_its_tokens_participant_async_std() {
    the_session_is_the_participant_of_its_token::<AsyncStd>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_a_good_token_in_time_is_closed_with_the_reason() {
    let gw = gateway::<Tokio>(SessionLimits {
        auth_within: Duration::from_millis(300),
        ..SessionLimits::default()
    });
    // Nothing said.
    let mut ws = open(&gw).await;
    let t = std::time::Instant::now();
    let (code, reason) = closed(&mut ws).await;
    assert_eq!(
        (code, reason.as_str()),
        (CloseCode::Policy, "no token in time")
    );
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    // A token the space does not know.
    let mut ws = login(&gw, "not-a-token").await;
    let (code, reason) = closed(&mut ws).await;
    assert_eq!(code, CloseCode::Policy);
    assert!(reason.contains("token"), "{reason}");
    // Another space.
    let mut ws = open(&gw).await;
    let auth = json!({"token": "human-token", "space": "elsewhere"});
    ws.send(Message::text(auth.to_string())).await.unwrap();
    let (code, reason) = closed(&mut ws).await;
    assert_eq!(
        (code, reason.as_str()),
        (CloseCode::Policy, "this gateway serves space \"e2e\"")
    );
    // Not the token message.
    let mut ws = open(&gw).await;
    ws.send(Message::text("hello")).await.unwrap();
    assert_eq!(closed(&mut ws).await.0, CloseCode::Policy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_command_closes_the_session() {
    let gw = gateway::<Tokio>(SessionLimits {
        max_command: 1024,
        ..SessionLimits::default()
    });
    let mut page = login(&gw, "human-token").await;
    change(&mut page).await;
    let big = json!({"command": {"line": "x".repeat(2000)}});
    page.send(Message::text(big.to_string())).await.unwrap();
    let (code, reason) = closed(&mut page).await;
    assert_eq!(code, CloseCode::Size);
    assert!(reason.contains("at most 1024"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_that_stops_reading_is_closed() {
    let gw = gateway::<Tokio>(SessionLimits {
        queue_changes: 16,
        queue_bytes: 256 * 1024,
        write_within: Duration::from_millis(500),
        ..SessionLimits::default()
    });
    let page = login(&gw, "human-token").await;
    let (mut agent, _) = RawClient::join(&gw, "agent-token").await;
    // Far more than the socket's buffers and the queue hold, and the page reads nothing.
    let text = "y".repeat(60_000);
    let end = tokio::time::Instant::now() + WAIT;
    let mut left = None;
    for _ in 0..400 {
        agent.send("chat", &[], json!({ "text": text })).await;
        while let Some(t) = agent.next_text_within(Duration::from_millis(1)).await {
            let v: Value = serde_json::from_str(&t).unwrap();
            if v["kind"] == "system/presence" && v["payload"]["event"] == "leave" {
                left = Some(v);
            }
        }
        if left.is_some() {
            break;
        }
    }
    while left.is_none() {
        assert!(
            tokio::time::Instant::now() < end,
            "the page was never closed"
        );
        let v = agent.expect_kind("system/presence").await;
        if v["payload"]["event"] == "leave" {
            left = Some(v);
        }
    }
    assert_eq!(left.unwrap()["payload"]["participant"]["id"], "human");
    drop(page);
    // Its place is free again.
    let mut again = login(&gw, "human-token").await;
    assert!(change(&mut again).await["snapshot"].is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_bounded_and_only_for_the_page_of_this_gateway() {
    let gw = gateway::<Tokio>(SessionLimits {
        max_sessions: 1,
        ..SessionLimits::default()
    });
    let mut first = login(&gw, "human-token").await;
    change(&mut first).await;
    let req = format!("ws://{}/ui/session", gw.addr)
        .into_client_request()
        .unwrap();
    let refused = tokio_tungstenite::connect_async(req).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 503),
        other => panic!("a second session: {other:?}"),
    }
    first.close(None).await.unwrap();
    drop(first);
    // Another site's page may not open one, whatever it holds.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut req = format!("ws://{}/ui/session", gw.addr)
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("origin", "http://evil.example".parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 403),
        other => panic!("another origin: {other:?}"),
    }
    // The page's own origin may.
    let mut req = format!("ws://{}/ui/session", gw.addr)
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("origin", format!("http://{}", gw.addr).parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let auth = json!({"token": "human-token", "space": "e2e"});
    ws.send(Message::text(auth.to_string())).await.unwrap();
    assert!(change(&mut ws).await["snapshot"].is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_without_a_page_has_no_session() {
    let opts = ServerOptions {
        seed: Some(3),
        ..Default::default()
    };
    let gw = Tokio::start_with(space(""), "127.0.0.1:0".parse().unwrap(), opts);
    let req = format!("ws://{}/ui/session", gw.addr)
        .into_client_request()
        .unwrap();
    match tokio_tungstenite::connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 404),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_going_away_tells_the_page() {
    let mut gw = gateway::<Tokio>(SessionLimits::default());
    let mut page = login(&gw, "human-token").await;
    until(&mut page, |c| {
        c["members"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["me"] == true))
    })
    .await;
    let stop = tokio::task::spawn_blocking(move || gw.stop());
    let (code, reason) = closed(&mut page).await;
    assert_eq!(code, CloseCode::Away, "{reason}");
    stop.await.unwrap();
}
