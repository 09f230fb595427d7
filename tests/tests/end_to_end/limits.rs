//! Connection limits of the server over real sockets: a crowd of silent clients, too many
//! connections from one address, a request body that is never sent and a request that
//! dribbles cannot tie the gateway up.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use mew_tokio::{GatewayServer, ServerOptions};

const SPACE: &str = "space: {id: s}\nlogging: {enabled: false}\nparticipants:\n  human: {tokens: [human-token], capabilities: [{kind: \"*\"}]}\n";

async fn start(opts: ServerOptions) -> (SocketAddr, mew_tokio::ShutdownHandle) {
    start_space(SPACE, opts).await
}

/// A gateway serving the space `yaml` on a loopback port.
async fn start_space(yaml: &str, opts: ServerOptions) -> (SocketAddr, mew_tokio::ShutdownHandle) {
    let config = mew_core::gateway::SpaceConfig::from_yaml(yaml).unwrap();
    let server = GatewayServer::bind_with("127.0.0.1:0".parse().unwrap(), config, opts)
        .await
        .unwrap();
    let addr = server.local_addr();
    let h = server.shutdown_handle();
    tokio::spawn(server.serve());
    (addr, h)
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket to space `s` with `token`, once its welcome came (with `welcome`), or at once.
async fn joined(addr: SocketAddr, token: &str, welcome: bool) -> Ws {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};
    let mut req = format!("ws://{addr}/ws?space=s")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    if welcome {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) if t.contains("system/welcome") => break,
                Some(Ok(_)) => {}
                other => panic!("no welcome for {token}: {other:?}"),
            }
        }
    }
    ws
}

/// Everything the server sends until it closes (or `within` passes).
fn answer(s: &mut TcpStream, within: Duration) -> String {
    s.set_read_timeout(Some(within)).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn upgrade(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /ws?space=s HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer human-token\r\n\r\n"
    )
    .unwrap();
    let mut buf = [0u8; 12];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"HTTP/1.1 101", "upgraded");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_crowds_and_greedy_addresses_are_refused_at_once() {
    let (addr, stop) = start(ServerOptions {
        head_timeout: Duration::from_millis(500),
        max_unauthenticated: 2,
        max_connections_per_address: 3,
        ..ServerOptions::default()
    })
    .await;
    tokio::task::spawn_blocking(move || {
        // Two clients that say nothing fill the unidentified slots: a third is refused.
        let mut quiet: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(100));
        let mut third = TcpStream::connect(addr).unwrap();
        let t = Instant::now();
        let a = answer(&mut third, Duration::from_secs(2));
        assert!(a.starts_with("HTTP/1.1 503"), "{a}");
        assert!(a.contains("waiting to be identified"), "{a}");
        assert!(t.elapsed() < Duration::from_millis(400));
        // The silent ones are closed at the head deadline, with a 408.
        let t = Instant::now();
        for q in &mut quiet {
            let a = answer(q, Duration::from_secs(3));
            assert!(a.starts_with("HTTP/1.1 408"), "{a}");
        }
        assert!(
            t.elapsed() < Duration::from_millis(1500),
            "{:?}",
            t.elapsed()
        );

        // Three connections from one address are allowed, a fourth is not.
        let open: Vec<TcpStream> = (0..3).map(|_| upgrade(addr)).collect();
        let mut fourth = TcpStream::connect(addr).unwrap();
        let a = answer(&mut fourth, Duration::from_secs(2));
        assert!(a.starts_with("HTTP/1.1 503"), "{a}");
        assert!(a.contains("from this address"), "{a}");
        drop(open);
        std::thread::sleep(Duration::from_millis(200));
        // Freed slots are given back.
        let again = upgrade(addr);
        drop(again);

        // A body announced but never sent, without a token: refused before any body is read.
        let mut s = TcpStream::connect(addr).unwrap();
        write!(
            s,
            "POST /participants/human/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n"
        )
        .unwrap();
        let t = Instant::now();
        let a = answer(&mut s, Duration::from_secs(2));
        assert!(a.starts_with("HTTP/1.1 401"), "{a}");
        assert!(t.elapsed() < Duration::from_millis(400));
    })
    .await
    .unwrap();
    stop.shutdown();
}

/// A request that dribbles (its head slowly, then its body a byte at a time) is answered
/// when one deadline from the connection passes (1 s here), not a second deadline after
/// its head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dribbled_head_and_body_share_one_deadline() {
    let (addr, stop) = start(ServerOptions {
        head_timeout: Duration::from_secs(1),
        ..ServerOptions::default()
    })
    .await;
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"POST /participants/human/messages HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
        std::thread::sleep(Duration::from_millis(600));
        s.write_all(
            b"Authorization: Bearer human-token\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n",
        )
        .unwrap();
        let mut reader = s.try_clone().unwrap();
        let got = std::thread::spawn(move || {
            let a = answer(&mut reader, Duration::from_secs(5));
            (a, start.elapsed())
        });
        for _ in 0..200 {
            if got.is_finished() || s.write_all(b" ").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(40));
        }
        let (a, closed) = got.join().unwrap();
        assert!(a.starts_with("HTTP/1.1 400"), "{a}");
        assert!(a.contains("incomplete request body"), "{a}");
        assert!(
            closed >= Duration::from_millis(950) && closed < Duration::from_millis(1400),
            "{closed:?}"
        );
    })
    .await
    .unwrap();
    stop.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_thousand_binary_frames_close_no_one_else() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as M;
    let yaml = "space: {id: s}\nlogging: {enabled: false}\ngateway: {rate_limit: off}\nparticipants:\n  human: {tokens: [human-token], capabilities: [{kind: \"*\"}]}\n  mallory: {tokens: [mallory-token], capabilities: [{kind: chat}]}\n";
    let (addr, stop) = start_space(yaml, ServerOptions::default()).await;
    let join = |token: &'static str| joined(addr, token, false);
    let (mut human_tx, mut human_rx) = join("human-token").await.split();
    let (mut mallory_tx, mut mallory_rx) = join("mallory-token").await.split();
    // Mallory reads everything it is sent (a client that never reads is rightly closed as a
    // slow consumer; this one must not be, nor anyone else).
    let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mallory_reader = tokio::spawn({
        let read = read.clone();
        async move {
            let mut closed = None;
            while let Some(Ok(m)) = mallory_rx.next().await {
                match m {
                    M::Text(t) if t.contains("\"system/error\"") => {
                        read.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    M::Close(c) => closed = c,
                    _ => {}
                }
            }
            (read.load(std::sync::atomic::Ordering::Relaxed), closed)
        }
    });
    // Binary frames are not envelopes: each is refused to its sender, and none may count
    // toward anyone's unwritten backlog once written.
    let frame = bytes::Bytes::from(vec![0xAB; 64]);
    for i in 0..200_000u32 {
        if mallory_tx.feed(M::Binary(frame.clone())).await.is_err() {
            let (errors, closed) = mallory_reader.await.unwrap();
            panic!("mallory closed after {i} frames, {errors} errors read: {closed:?}");
        }
        if i % 1_000 == 999 {
            mallory_tx.flush().await.unwrap();
            // Paced by what Mallory has read back: its backlog stays under 2,000 frames,
            // so only frames that were never released could close it.
            while read.load(std::sync::atomic::Ordering::Relaxed) + 1_000 < u64::from(i) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    mallory_tx.flush().await.unwrap();
    // Both still talk through the gateway.
    for (who, tx) in [("human", &mut human_tx), ("mallory", &mut mallory_tx)] {
        let env = serde_json::json!({"protocol": "mew/v0.4", "id": format!("after-{who}"),
                                     "kind": "chat", "payload": {"text": format!("{who} is still here")}});
        tx.send(M::text(env.to_string())).await.unwrap();
    }
    let mut seen = Vec::new();
    let wait = tokio::time::timeout(Duration::from_secs(60), async {
        while seen.len() < 2 {
            let Some(Ok(M::Text(t))) = human_rx.next().await else {
                panic!("the human's connection ended")
            };
            let v: serde_json::Value = serde_json::from_str(&t).unwrap();
            if v["kind"] == "chat" {
                seen.push((
                    v["from"].as_str().unwrap().to_owned(),
                    v["payload"]["text"].as_str().unwrap().to_owned(),
                ));
            }
        }
    })
    .await;
    assert!(
        wait.is_ok(),
        "the chats after the flood never came: {seen:?}"
    );
    seen.sort();
    assert_eq!(
        seen,
        [
            ("human".to_owned(), "human is still here".to_owned()),
            ("mallory".to_owned(), "mallory is still here".to_owned())
        ]
    );
    let health = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let a = answer(&mut s, Duration::from_secs(5));
        serde_json::from_str::<serde_json::Value>(a.split_once("\r\n\r\n").unwrap().1).unwrap()
    })
    .await
    .unwrap();
    assert_eq!(health["participants_online"], 2, "{health}");
    mallory_tx.close().await.unwrap();
    let (errors, closed) = mallory_reader.await.unwrap();
    assert_eq!(errors, 200_000, "one error per binary frame");
    assert!(
        closed.as_ref().is_none_or(|c| u16::from(c.code) == 1000),
        "mallory was closed: {closed:?}"
    );
    stop.shutdown();
}

/// A receiver that stops reading while a burst goes to it gets every message, whole and in
/// order, once it reads again: the core writes to a socket itself only while nothing is
/// ahead, and leaves what a full socket did not take to the connection's writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_pauses_gets_a_burst_whole_and_in_order() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    const N: usize = 2_500;
    const TEXT: usize = 6_000;
    let yaml = "space: {id: s}\nlogging: {enabled: false}\ngateway: {rate_limit: off}\nparticipants:\n  a: {tokens: [ta], capabilities: [{kind: chat}]}\n  b: {tokens: [tb], capabilities: [{kind: chat}]}\n";
    let (addr, stop) = start_space(yaml, ServerOptions::default()).await;
    let join = |token: &'static str| joined(addr, token, true);
    let mut b = join("tb").await;
    let a = join("ta").await;
    let (mut tx, mut rx) = a.split();
    // a's own copies are read as they come.
    let echo = tokio::spawn(async move {
        let mut n = 0;
        while n < N {
            match rx.next().await {
                Some(Ok(Message::Text(t))) if t.contains("\"chat\"") => n += 1,
                Some(Ok(_)) => {}
                other => panic!("a lost its connection: {other:?}"),
            }
        }
    });
    let pad = "x".repeat(TEXT);
    for i in 0..N {
        let env = format!(
            r#"{{"protocol":"mew/v0.4","id":"c-{i}","kind":"chat","payload":{{"text":"{pad}"}}}}"#
        );
        tx.feed(Message::text(env)).await.unwrap();
    }
    tx.flush().await.unwrap();
    // b has read nothing meanwhile: its socket filled up long before the burst ended.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut next = 0;
    while next < N {
        let msg = tokio::time::timeout(Duration::from_secs(20), b.next())
            .await
            .expect("the burst keeps coming")
            .expect("b's connection is open")
            .expect("a valid frame");
        let Message::Text(t) = msg else { continue };
        let v: serde_json::Value = serde_json::from_str(&t).expect("a whole envelope");
        if v["kind"] != "chat" {
            continue;
        }
        assert_eq!(v["id"], format!("c-{next}"), "in order");
        assert_eq!(v["payload"]["text"].as_str().map(str::len), Some(TEXT));
        next += 1;
    }
    echo.await.unwrap();
    stop.shutdown();
}

// This guards the order of the core's one input queue, not the turn for other tasks: it
// passes as well with no turn at all (`BUSY_PASSES_PER_TURN` at `u32::MAX`); the turn is
// guarded by `server::conn::tests` in drivers/common.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_sender_starves_neither_another_senders_chat_nor_a_join() {
    use futures_util::{SinkExt, StreamExt};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    use tokio_tungstenite::tungstenite::Message as M;
    let yaml = "space: {id: s}\nlogging: {enabled: false}\ngateway: {rate_limit: off}\nparticipants:\n  human: {tokens: [human-token], capabilities: [{kind: chat}]}\n  mallory: {tokens: [mallory-token], capabilities: [{kind: chat}]}\n  bob: {tokens: [bob-token], capabilities: [{kind: chat}]}\n  carol: {tokens: [carol-token], capabilities: [{kind: chat}]}\n";
    let (addr, stop) = start_space(yaml, ServerOptions::default()).await;
    let join = |addr, token| joined(addr, token, true);
    let (_bob_tx, mut bob_rx) = join(addr, "bob-token").await.split();
    // Everyone gets the flood: each reads it, as a live client would.
    fn drain<S: futures_util::Stream + Send + Unpin + 'static>(mut rx: S) {
        tokio::spawn(async move { while rx.next().await.is_some() {} });
    }
    let (mut human, human_rx) = join(addr, "human-token").await.split();
    drain(human_rx);
    // Bob reads everything; the flood is paced by what he has read (at most 2,000 behind),
    // so it never stops and no one is closed as a slow consumer.
    let flooded = Arc::new(AtomicU64::new(0));
    let flooding = Arc::new(AtomicBool::new(true));
    let (saw_tx, bob) = tokio::sync::oneshot::channel();
    let bob_reader = tokio::spawn({
        let flooded = flooded.clone();
        async move {
            let mut saw = Some(saw_tx);
            while let Some(m) = bob_rx.next().await {
                let m = m.map_err(|e| e.to_string())?;
                let M::Text(t) = m else { continue };
                if t.contains("\"flood-") {
                    flooded.fetch_add(1, Relaxed);
                } else if t.contains("human, during the flood")
                    && let Some(saw) = saw.take()
                {
                    let _ = saw.send(flooded.load(Relaxed));
                }
            }
            Err::<(), String>("bob's connection ended".into())
        }
    });
    // The flood comes from a thread and a runtime of its own, as a client elsewhere would.
    let flood = std::thread::spawn({
        let (flooded, flooding) = (flooded.clone(), flooding.clone());
        move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (mut tx, rx) = join(addr, "mallory-token").await.split();
                drain(rx);
                let mut i = 0u64;
                while flooding.load(Relaxed) {
                    let env = format!(
                        r#"{{"protocol":"mew/v0.4","id":"flood-{i}","kind":"chat","payload":{{"text":"{}"}}}}"#,
                        "x".repeat(200)
                    );
                    tx.feed(M::text(env)).await.unwrap();
                    i += 1;
                    if i.is_multiple_of(64) {
                        tx.flush().await.unwrap();
                        while flooded.load(Relaxed) + 2_000 < i && flooding.load(Relaxed) {
                            tokio::time::sleep(Duration::from_micros(200)).await;
                        }
                    }
                }
                i
            })
        }
    });
    // Well into the flood: a chat of another sender, and a join.
    let into = tokio::time::timeout(Duration::from_secs(60), async {
        while flooded.load(Relaxed) < 20_000 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(
        into.is_ok(),
        "the flood never got going: {flooded:?} read, sender ended: {}, bob: {:?}",
        flood.is_finished(),
        if bob_reader.is_finished() {
            Some(bob_reader.await)
        } else {
            None
        }
    );
    let before = flooded.load(Relaxed);
    let t0 = Instant::now();
    let env = r#"{"protocol":"mew/v0.4","id":"h-1","kind":"chat","payload":{"text":"human, during the flood"}}"#;
    human.send(M::text(env)).await.unwrap();
    let carol = tokio::spawn(async move {
        let t = Instant::now();
        let (tx, rx) = join(addr, "carol-token").await.split();
        let took = t.elapsed();
        drain(rx);
        (took, tx)
    });
    let seen_after = tokio::time::timeout(Duration::from_secs(5), bob)
        .await
        .expect("the human's chat did not reach bob within 5 s of a flood")
        .expect("bob's connection ended");
    let chat_took = t0.elapsed();
    let (join_took, _carol) = tokio::time::timeout(Duration::from_secs(5), carol)
        .await
        .expect("carol's join was not welcomed within 5 s of a flood")
        .unwrap();
    // Both came while the flood went on: more of it was delivered after them.
    let settle = Instant::now();
    while flooded.load(Relaxed) <= seen_after && settle.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    flooding.store(false, Relaxed);
    let sent = flood.join().unwrap();
    assert!(
        seen_after > before && sent > seen_after,
        "the chat came amid the flood: {before} flood chats read when it was sent, {seen_after} when it came, {sent} sent in all"
    );
    assert!(
        chat_took < Duration::from_secs(2) && join_took < Duration::from_secs(2),
        "chat {chat_took:?}, join {join_took:?} amid a flood"
    );
    stop.shutdown();
}

/// A core task that ends by itself (a durable space whose disk failed, a cluster node cut
/// off) stops the server, which says so, rather than accept connections nothing serves.
#[tokio::test]
async fn a_server_whose_core_stops_by_itself_stops_and_says_why() {
    let config = mew_core::gateway::SpaceConfig::from_yaml(SPACE).unwrap();
    let server = GatewayServer::bind_with(
        "127.0.0.1:0".parse().unwrap(),
        config,
        ServerOptions::default(),
    )
    .await
    .unwrap();
    let addr = server.local_addr();
    let (end_core, ended) = async_channel::bounded::<()>(1);
    let core: mew_driver_common::server::conn::CoreTask = Box::new(move |_host, _inputs| {
        Box::pin(async move {
            let _ = ended.recv().await;
        })
    });
    let serving = tokio::spawn(server.serve_with(Some(core)));
    tokio::net::TcpStream::connect(addr)
        .await
        .expect("accepts while its core runs");
    drop(end_core);
    let served = tokio::time::timeout(Duration::from_secs(5), serving)
        .await
        .expect("the server stops")
        .unwrap();
    let e = served.expect_err("an error, not a clean stop");
    assert!(e.to_string().contains("core stopped"), "{e}");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer accepts"
    );
}
