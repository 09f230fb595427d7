//! The audit trail of `mew gateway` over real sockets: records cannot be forged, secrets do
//! not reach the logs, files are private, a flood of bad frames costs a few lines, logs
//! rotate by size, and the reference's tools can read the records line by line.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use mew_tests::process::MewGateway;
use mew_tests::scratch::Scratch;
use mew_tests::wait::{read_kind, until};
use regex::Regex;
use serde_json::{Value, json};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket, stream::MaybeTlsStream};

const MEW: &str = env!("CARGO_BIN_EXE_mew");

struct Gateway {
    gw: MewGateway,
    logs: PathBuf,
    /// Declared after `gw`, so dropped after it: the gateway writes here until it stops.
    _dir: Scratch,
}

impl std::ops::Deref for Gateway {
    type Target = MewGateway;
    fn deref(&self) -> &MewGateway {
        &self.gw
    }
}

fn start(name: &str, logging: &str) -> Gateway {
    start_with(name, logging, "")
}

/// [`start`] with more lines of `space.yaml` (`extra` ends with a newline).
fn start_with(name: &str, logging: &str, extra: &str) -> Gateway {
    let dir = Scratch::space("audit", name);
    let config = dir.join(".mew/space.yaml");
    std::fs::write(
        &config,
        format!(
            r#"space: {{id: audit-e2e}}
logging: {logging}
participants:
  human: {{tokens: [human-token], capabilities: [{{kind: "*"}}]}}
  a: {{tokens: [a-token], capabilities: [{{kind: chat}}]}}
  b: {{tokens: [b-token], capabilities: [{{kind: chat}}]}}
  mallory: {{tokens: [mallory-token], capabilities: [{{kind: chat}}]}}
{extra}"#
        ),
    )
    .unwrap();
    let mut cmd = Command::new(MEW);
    cmd.args(["gateway", "--port", "0", "--log-level", "warn", "--config"])
        .arg(&config)
        .current_dir(&dir)
        .stderr(Stdio::inherit());
    Gateway {
        gw: MewGateway::start(cmd),
        logs: dir.join(".mew/logs"),
        _dir: dir,
    }
}

type Ws = WebSocket<MaybeTlsStream<TcpStream>>;

fn join(gw: &Gateway, token: &str) -> Ws {
    let mut req = format!("ws://{}/ws?space=audit-e2e", gw.addr)
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("Authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, _) = tungstenite::connect(req).unwrap();
    let welcome = next_json(&mut ws);
    assert_eq!(welcome["kind"], "system/welcome");
    ws
}

fn next_json(ws: &mut Ws) -> Value {
    loop {
        match ws.read().unwrap() {
            Message::Text(t) => return serde_json::from_str(&t).unwrap(),
            _ => continue,
        }
    }
}

fn post(addr: &str, who: &str, token: &str, body: &str) -> u16 {
    mew_tests::http::post(addr, who, token, body).0
}

fn health(addr: &str) -> Value {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    serde_json::from_str(out.split_once("\r\n\r\n").unwrap().1).unwrap()
}

/// Every line of every file in the log folder.
fn all_lines(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap();
        out.extend(text.lines().map(|l| (e.path(), l.to_owned())));
    }
    out
}

fn history(gw: &Gateway) -> Vec<Value> {
    let text = std::fs::read_to_string(gw.logs.join("envelope-history.jsonl")).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn records_cannot_be_forged_secrets_stay_out_and_files_are_private() {
    let gw = start("forge", "{enabled: true}");
    let mut human = join(&gw, "human-token");
    let mut a = join(&gw, "a-token");
    let mut b = join(&gw, "b-token");
    let mut mallory = join(&gw, "mallory-token");

    // A pretty-printed envelope whose inner line is a whole record.
    let forged = "{\"protocol\":\"mew/v0.4\",\"id\":\"m-1\",\"kind\":\"chat\",\"payload\":\n{\"timestamp\":\"2020-01-01T00:00:00.000Z\",\"event\":\"delivered\",\"id\":\"forged\",\"participant\":\"admin\",\"space_id\":\"audit-e2e\",\"direction\":\"outbound\",\"transport\":\"websocket\"}\n}";
    mallory.send(Message::text(forged)).unwrap();
    let seen = read_kind(&mut human, "chat");
    assert_eq!(seen["id"], "m-1");

    // An invite: the token goes to the inviter only, never to a log.
    human
        .send(Message::text(
            json!({"protocol": "mew/v0.4", "id": "inv-1", "kind": "space/invite",
                   "payload": {"participant_id": "guest", "initial_capabilities": [{"kind": "chat"}]}})
            .to_string(),
        ))
        .unwrap();
    let invite = read_kind(&mut human, "space/invite-ack");
    let token = invite["payload"]["token"].as_str().unwrap().to_owned();
    assert!(token.len() >= 16);

    // A broadcast to everyone: one `delivered` record per recipient, as the reference's
    // tools read them.
    human
        .send(Message::text(
            json!({"protocol": "mew/v0.4", "id": "bc-1", "kind": "chat", "payload": {"text": "to all"}})
                .to_string(),
        ))
        .unwrap();
    for ws in [&mut a, &mut b, &mut mallory] {
        loop {
            let v = read_kind(ws, "chat");
            if v["id"] == "bc-1" {
                break;
            }
        }
    }
    let path = gw.logs.join("envelope-history.jsonl");
    let text = until("the delivered records", Duration::from_secs(5), || {
        let t = std::fs::read_to_string(&path).ok()?;
        (t.matches("\"event\":\"delivered\",\"id\":\"bc-1\"").count() == 4).then_some(t)
    });
    for who in ["human", "a", "b", "mallory"] {
        let re = Regex::new(&format!(
            r#"^\{{"timestamp":"[^"]+","event":"delivered","id":"bc-1".*"participant":"{who}""#
        ))
        .unwrap();
        assert_eq!(text.lines().filter(|l| re.is_match(l)).count(), 1, "{who}");
    }
    let received =
        Regex::new(r#"^\{"timestamp":"[^"]+","event":"received","id":"bc-1","envelope":\{"#)
            .unwrap();
    assert_eq!(text.lines().filter(|l| received.is_match(l)).count(), 1);
    // The delivered records are small: the envelope is in the received one only.
    for l in text
        .lines()
        .filter(|l| l.contains("\"event\":\"delivered\",\"id\":\"bc-1\""))
    {
        assert!(!l.contains("\"envelope\""), "{l}");
    }

    // Every line of every log parses; nothing forged; no token anywhere.
    for (file, line) in all_lines(&gw.logs) {
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
            panic!("{}: not one record per line ({e}): {line}", file.display())
        });
        assert_ne!(v["id"], "forged", "{line}");
        assert!(
            !line.contains(&token),
            "the invite token reached {}",
            file.display()
        );
        assert!(!line.contains("human-token") && !line.contains("mallory-token"));
    }
    let invite_record = history(&gw)
        .into_iter()
        .find(|r| r["envelope"]["kind"] == "space/invite-ack")
        .expect("the invite is recorded");
    assert_eq!(invite_record["envelope"]["payload"]["token"], "[redacted]");
    assert_eq!(
        invite_record["envelope"]["payload"]["participant_id"],
        "guest"
    );

    // `mew audit` answers "what did mallory send, and who got it".
    let out = Command::new(MEW)
        .args(["audit", "--logs"])
        .arg(&gw.logs)
        .args(["--kind", "chat", "--participant", "mallory", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let records: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let events: Vec<(String, String)> = records
        .iter()
        .map(|r| {
            (
                r["event"].as_str().unwrap().to_owned(),
                r["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        events.contains(&("received".into(), "m-1".into())),
        "{events:?}"
    );
    assert!(
        events.contains(&("delivered".into(), "bc-1".into())),
        "{events:?}"
    );
    assert!(!events.iter().any(|(_, id)| id == "inv-1"), "not a chat");
    let out = Command::new(MEW)
        .args(["audit", "--logs"])
        .arg(&gw.logs)
        .args(["--event", "received", "--kind", "space/invite"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains("received")
            && text.contains("human")
            && text.contains("space/invite")
            && text.contains("id=inv-1"),
        "{text}"
    );
    let out = Command::new(MEW)
        .args(["audit", "--logs", "/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&gw.logs), 0o700);
        for e in std::fs::read_dir(&gw.logs).unwrap().flatten() {
            assert_eq!(mode(&e.path()), 0o600, "{}", e.path().display());
        }
    }
}

#[test]
fn a_flood_of_bad_frames_is_counted_and_logs_rotate_by_size() {
    // The audit writer under a flood, without the durable state's fsync per pass: on a
    // machine busy with other tests that fsync could hold the space's task long enough for
    // the flood's unread errors to close Mallory as a slow consumer, which is not what this
    // test is about (the durable path has tests of its own in durable.rs).
    let gw = start_with(
        "flood",
        "{max_file_kb: 128, max_files: 2}",
        "gateway: {durability: off}\n",
    );
    let mut mallory = join(&gw, "mallory-token");
    const FLOOD: u64 = 20_000;
    // Mallory reads its errors now and then, as a client must (a reader that never reads is
    // closed as a slow consumer).
    if let MaybeTlsStream::Plain(s) = mallory.get_mut() {
        s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
    }
    let drain = |ws: &mut Ws| {
        while let Ok(m) = ws.read() {
            drop(m);
        }
    };
    for i in 0..FLOOD {
        let mut frame = vec![0u8; 64];
        frame[..8].copy_from_slice(&i.to_le_bytes());
        mallory.write(Message::binary(frame)).unwrap();
        if i % 200 == 199 {
            mallory.flush().unwrap();
            drain(&mut mallory);
        }
    }
    mallory.flush().unwrap();
    // Every refusal is accounted for: logged, or counted in an aggregate record.
    let records = until(
        "every refusal accounted for",
        Duration::from_secs(20),
        || {
            drain(&mut mallory);
            let h = history(&gw);
            let refusals: Vec<Value> = h
                .into_iter()
                .filter(|r| r["event"] == "rejected" && r["participant"] == "mallory")
                .collect();
            let logged = refusals
                .iter()
                .filter(|r| r["metadata"]["suppressed"].is_null())
                .count() as u64;
            let counted: u64 = refusals
                .iter()
                .filter_map(|r| r["metadata"]["suppressed"].as_u64())
                .sum();
            (logged + counted == FLOOD).then_some(refusals)
        },
    );
    let full = records
        .iter()
        .filter(|r| r["metadata"]["suppressed"].is_null())
        .count();
    assert!(full <= 200, "{full} refusals logged one by one");
    let size: u64 = std::fs::read_dir(&gw.logs)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(size < 200 * 1024, "the flood wrote {size} bytes of log");
    assert_eq!(health(&gw.addr)["audit_dropped"], 0);

    // Rotation: about 1.5 MB of chats into 128 KB files, two old ones kept.
    let body = json!({"kind": "chat", "payload": {"text": "x".repeat(300)}}).to_string();
    for _ in 0..3000 {
        // The posts may outrun the sender's rate limit (1,000/s, burst 2,000): wait it out.
        let mut status = post(&gw.addr, "human", "human-token", &body);
        while status == 429 {
            std::thread::sleep(Duration::from_millis(20));
            status = post(&gw.addr, "human", "human-token", &body);
        }
        assert_eq!(status, 200);
    }
    let name = "envelope-history.jsonl";
    until("rotation", Duration::from_secs(10), || {
        gw.logs.join(format!("{name}.2")).exists().then_some(())
    });
    assert!(!gw.logs.join(format!("{name}.3")).exists());
    for f in [name.to_owned(), format!("{name}.1"), format!("{name}.2")] {
        let len = std::fs::metadata(gw.logs.join(&f)).unwrap().len();
        assert!(len <= 128 * 1024, "{f} is {len} bytes");
        let text = std::fs::read_to_string(gw.logs.join(&f)).unwrap();
        for l in text.lines() {
            serde_json::from_str::<Value>(l).unwrap();
        }
    }
}

fn metrics(addr: &str) -> prometheus_parse::Scrape {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("application/openmetrics-text"), "{head}");
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap()
}

fn sample(s: &prometheus_parse::Scrape, name: &str, label: Option<(&str, &str)>) -> f64 {
    s.samples
        .iter()
        .find(|x| x.metric == name && label.is_none_or(|(k, v)| x.labels.get(k) == Some(v)))
        .map(|x| match x.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
        .unwrap_or_else(|| panic!("{name} {label:?} not in {:#?}", s.samples))
}

#[test]
fn metrics_count_the_traffic_sent() {
    let gw = start("metrics", "{enabled: false}");
    let mut a = join(&gw, "a-token");
    let mut b = join(&gw, "b-token");
    let mut human = join(&gw, "human-token");
    for i in 0..5 {
        a.send(Message::text(
            json!({"protocol": "mew/v0.4", "id": format!("c{i}"), "kind": "chat",
                   "payload": {"text": "hi"}})
            .to_string(),
        ))
        .unwrap();
    }
    for i in 0..2 {
        a.send(Message::text(
            json!({"protocol": "mew/v0.4", "id": format!("x{i}"), "kind": "mcp/request",
                   "to": ["b"], "payload": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}})
            .to_string(),
        ))
        .unwrap();
    }
    // Each chat reaches all three; the refusals reach `a` alone.
    for _ in 0..5 {
        read_kind(&mut b, "chat");
        read_kind(&mut human, "chat");
    }
    for _ in 0..2 {
        read_kind(&mut a, "system/error");
    }
    assert_eq!(
        post(
            &gw.addr,
            "human",
            "human-token",
            r#"{"kind":"system/welcome","payload":{}}"#
        ),
        400
    );
    let m = metrics(&gw.addr);
    assert_eq!(
        sample(&m, "mew_envelopes_received_total", Some(("kind", "chat"))),
        5.0
    );
    assert_eq!(
        sample(&m, "mew_envelopes_delivered_total", Some(("kind", "chat"))),
        15.0
    );
    assert_eq!(
        sample(
            &m,
            "mew_refusals_total",
            Some(("reason", "capability_violation"))
        ),
        2.0
    );
    assert_eq!(
        sample(&m, "mew_refusals_total", Some(("reason", "reserved_kind"))),
        1.0
    );
    assert_eq!(sample(&m, "mew_connections", None), 3.0);
    assert_eq!(sample(&m, "mew_participants_online", None), 3.0);
    assert_eq!(sample(&m, "mew_slow_consumer_closes_total", None), 0.0);
    assert!(sample(&m, "mew_frames_out_total", None) >= 15.0 + 2.0);
    let timed = m
        .samples
        .iter()
        .find(|x| x.metric == "mew_core_frame_seconds")
        .expect("the core's timing histogram");
    let prometheus_parse::Value::Histogram(buckets) = &timed.value else {
        panic!("{timed:?}")
    };
    assert!(!buckets.is_empty());
}
