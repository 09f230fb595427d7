//! The interactive `mew client` in a real terminal: tmux runs it against a real gateway (the
//! embedded default space) with a scripted service and a scripted agent; keys go in with
//! `tmux send-keys`, the screen comes back with `tmux capture-pane`.

use mew_tests::tmux::Tmux;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mew_core::participant::{ParticipantConfig, ToolSpec};
use mew_tests::scratch::Scratch;
use mew_tests::wait::{self, read_until};
use mew_tokio::ParticipantRuntime;
use serde_json::{Value, json};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket, stream::MaybeTlsStream};

const MEW: &str = env!("CARGO_BIN_EXE_mew");

struct Gateway {
    child: Child,
    addr: String,
    tokens: Vec<(String, String)>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn gateway() -> Gateway {
    let mut child = Command::new(MEW)
        .args(["gateway", "--port", "0", "--log-level", "off"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut addr, mut tokens) = (None, Vec::new());
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.split("ws://").nth(1)
            && addr.is_none()
        {
            addr = Some(rest.split('/').next().unwrap().to_owned());
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() >= 3 && w[1] == "token" {
            tokens.push((w[0].to_owned(), w[2].to_owned()));
        }
        if line.starts_with("join with:") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Gateway {
        child,
        addr: addr.unwrap(),
        tokens,
    }
}

impl Gateway {
    fn token(&self, id: &str) -> String {
        self.tokens.iter().find(|(p, _)| p == id).unwrap().1.clone()
    }
}

type Ws = WebSocket<MaybeTlsStream<TcpStream>>;

fn agent(gw: &Gateway) -> Ws {
    let mut req = format!("ws://{}/ws?space=default", gw.addr)
        .into_client_request()
        .unwrap();
    let t = gw.token("agent");
    req.headers_mut()
        .insert("Authorization", format!("Bearer {t}").parse().unwrap());
    tungstenite::connect(req).unwrap().0
}

fn propose(ws: &mut Ws, id: &str, text: &str) {
    let env = json!({"protocol": "mew/v0.4", "id": id, "kind": "mcp/proposal", "to": ["service"],
        "payload": {"method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}}});
    ws.send(Message::text(env.to_string())).unwrap();
}

/// The human's view of the space, from the gateway's history (HTTP polling).
fn history(gw: &Gateway) -> Vec<Value> {
    let mut s = TcpStream::connect(&gw.addr).unwrap();
    write!(
        s,
        "GET /participants/human/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        gw.token("human")
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    serde_json::from_str(out.split_once("\r\n\r\n").unwrap().1).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_reject_and_always_allow_from_the_review_dialog() {
    let gw = gateway();
    let (service, _ev, _) = ParticipantRuntime::connect(
        ParticipantConfig {
            gateway_url: format!("ws://{}/ws?space=default", gw.addr),
            space: "default".into(),
            token: gw.token("service"),
            ..ParticipantConfig::default()
        },
        Some(4),
    )
    .await
    .unwrap();
    service
        .register_tool(
            ToolSpec {
                name: "echo".into(),
                description: Some("Says it back".into()),
                input_schema: Some(json!({"type": "object"})),
            },
            |args: Value| async move {
                let t = args["text"].as_str().unwrap_or("").to_owned();
                Ok(json!({"content": [{"type": "text", "text": format!("echoed: {t}")}]}))
            },
        )
        .await
        .unwrap()
        .unwrap();
    let addr = gw.addr.clone();
    let human = gw.token("human");
    let tmux = Tmux::new(format!("mew-tui-{}", std::process::id()), "ui");
    tokio::task::spawn_blocking(move || {
        let client = format!("{MEW} client --gateway ws://{addr} --space default");
        tmux.start(100, 30, &[&format!("MEW_TOKEN={human}")], &[&client]);
        tmux.until("joined as human");
        // The service's tools, discovered, in the participants panel.
        tmux.until("· echo");
        let mut a = agent(&gw);
        read_until(&mut a, |v| v["kind"] == "system/welcome");

        // Approve once: the tool's result shows, the fulfilling request is in the history.
        propose(&mut a, "p1", "hi");
        let s = tmux.until("y approve once");
        assert!(s.contains("agent proposes tools/call echo on service"), "{s}");
        assert!(s.contains("\"text\": \"hi\""), "{s}");
        tmux.keys(&["y"]);
        tmux.until("result: echoed: hi");
        let h = history(&gw);
        assert!(
            h.iter().any(|e| e["kind"] == "mcp/request"
                && e["from"] == "human"
                && e["to"] == json!(["service"])
                && e["correlation_id"] == json!(["p1"])),
            "{h:#?}"
        );

        // Reject with a reason.
        propose(&mut a, "p2", "no");
        tmux.until("y approve once");
        tmux.keys(&["n"]);
        tmux.until("reason:");
        tmux.keys(&["-l", "not today"]);
        tmux.keys(&["Enter"]);
        let r = read_until(&mut a, |v| v["kind"] == "mcp/reject");
        assert_eq!(r["correlation_id"], json!(["p2"]));
        assert_eq!(r["payload"]["reason"], "not today");

        // Always allow: the grant covers exactly this call, and the call runs.
        propose(&mut a, "p3", "again");
        tmux.until("y approve once");
        tmux.keys(&["a"]);
        tmux.until("Enter grant and approve");
        tmux.keys(&["Enter"]);
        let g = read_until(&mut a, |v| v["kind"] == "capability/grant");
        assert_eq!(g["from"], "human");
        assert_eq!(g["to"], json!(["agent"]));
        assert_eq!(
            g["payload"],
            json!({"recipient": "agent",
                   "capabilities": [{"kind": "mcp/request", "payload": {"method": "tools/call",
                       "params": {"name": "echo", "arguments": {"text": "again"}}}}],
                   "reason": "always allowed from the review dialog"})
        );
        tmux.until("result: echoed: again");
        // The agent may now make exactly that call itself.
        let direct = json!({"protocol": "mew/v0.4", "id": "d1", "kind": "mcp/request", "to": ["service"],
            "payload": {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"text": "again"}}}});
        a.send(Message::text(direct.to_string())).unwrap();
        let resp = read_until(&mut a, |v| {
            v["kind"] == "mcp/response" && v["correlation_id"] == json!(["d1"])
                || v["kind"] == "system/error"
        });
        assert_eq!(resp["kind"], "mcp/response", "{resp}");

        // A resize to 80x24 keeps the layout.
        tmux.cmd(&["resize-window", "-t", "ui", "-x", "80", "-y", "24"]);
        std::thread::sleep(Duration::from_millis(500));
        let s = tmux.until("participants");
        assert!(s.contains("messages") && s.contains("human"), "{s}");
        assert!(s.lines().count() <= 24, "{s}");
        tmux.keys(&["C-c"]);
    })
    .await
    .unwrap();
}

/// A space with a `space.yaml` keeps what it was given: a grant made with "always allow" in
/// the terminal interface still lets the agent through after the gateway is killed
/// (`kill -9`) and started again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_always_allow_grant_survives_a_gateway_restart() {
    let dir = Scratch::space("tui", "durable");
    std::fs::write(
        dir.join(".mew/space.yaml"),
        r#"
space: {id: default}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  agent: {tokens: [agent-token], capabilities: [{kind: mcp/proposal}, {kind: chat}]}
  service: {tokens: [service-token], capabilities: [{kind: "mcp/*"}, {kind: chat}]}
"#,
    )
    .unwrap();
    // Killed with SIGKILL when dropped (`Child::kill`).
    let start = |dir: &std::path::Path| {
        let mut child = Command::new(MEW)
            .args([
                "gateway",
                "--port",
                "0",
                "--log-level",
                "off",
                "--no-auto-start",
            ])
            .args(["--config", ".mew/space.yaml"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let addr = loop {
            let line = lines.next().unwrap().unwrap();
            if let Some(rest) = line.split("ws://").nth(1) {
                break rest.split('/').next().unwrap().to_owned();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Gateway {
            child,
            addr,
            tokens: ["human", "agent", "service"]
                .iter()
                .map(|p| (p.to_string(), format!("{p}-token")))
                .collect(),
        }
    };
    let gw = start(&dir);
    let (service, _ev, _) = ParticipantRuntime::connect(
        ParticipantConfig {
            gateway_url: format!("ws://{}/ws?space=default", gw.addr),
            space: "default".into(),
            token: gw.token("service"),
            ..ParticipantConfig::default()
        },
        Some(4),
    )
    .await
    .unwrap();
    service
        .register_tool(
            ToolSpec {
                name: "echo".into(),
                description: Some("Says it back".into()),
                input_schema: Some(json!({"type": "object"})),
            },
            |args: Value| async move {
                let t = args["text"].as_str().unwrap_or("").to_owned();
                Ok(json!({"content": [{"type": "text", "text": format!("echoed: {t}")}]}))
            },
        )
        .await
        .unwrap()
        .unwrap();
    let addr = gw.addr.clone();
    let tmux = Tmux::new(format!("mew-tui-durable-{}", std::process::id()), "ui");
    let dir2 = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let client = format!("{MEW} client --gateway ws://{addr} --space default");
        tmux.start(100, 30, &["MEW_TOKEN=human-token"], &[&client]);
        tmux.until("joined as human");
        tmux.until("· echo");
        let mut a = agent(&gw);
        read_until(&mut a, |v| v["kind"] == "system/welcome");
        propose(&mut a, "p1", "again");
        tmux.until("y approve once");
        tmux.keys(&["a"]);
        tmux.until("Enter grant and approve");
        tmux.keys(&["Enter"]);
        read_until(&mut a, |v| v["kind"] == "capability/grant");
        tmux.until("result: echoed: again");
        tmux.keys(&["C-c"]);
        drop(a);
        // kill -9.
        drop(gw);

        let gw = start(&dir2);
        let mut svc = agent_as(&gw, "service-token");
        read_until(&mut svc, |v| v["kind"] == "system/welcome");
        let mut a = agent(&gw);
        read_until(&mut a, |v| v["kind"] == "system/welcome");
        let direct = json!({"protocol": "mew/v0.4", "id": "d1", "kind": "mcp/request", "to": ["service"],
            "payload": {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"text": "again"}}}});
        a.send(Message::text(direct.to_string())).unwrap();
        let got = read_until(&mut svc, |v| v["kind"] == "mcp/request" && v["id"] == "d1");
        assert_eq!(got["from"], "agent", "the grant held after the restart: {got}");
        drop(gw);
    })
    .await
    .unwrap();
}

fn agent_as(gw: &Gateway, token: &str) -> Ws {
    let mut req = format!("ws://{}/ws?space=default", gw.addr)
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("Authorization", format!("Bearer {token}").parse().unwrap());
    tungstenite::connect(req).unwrap().0
}

/// A space of a person and a bridge (`everything`, started by the gateway) to
/// server-everything over Streamable HTTP; `MEW_TOKEN=human-token`.
fn asking_space(dir: &std::path::Path, url: &str) -> mew_tests::process::MewGateway {
    let yaml = format!(
        "space: {{id: asks}}\nparticipants:\n  human: {{tokens: [human-token], person: true, capabilities: [{{kind: \"*\"}}]}}\n  everything:\n    type: mcp-bridge\n    auto_start: true\n    tokens: [everything-token]\n    capabilities: [{{kind: mcp/response}}, {{kind: mcp/request}}, {{kind: participant/status}}]\n    mcp_server: {{url: \"{url}\"}}\n"
    );
    let config = dir.join("space.yaml");
    std::fs::write(&config, yaml).unwrap();
    let mut cmd = Command::new(MEW);
    cmd.args(["gateway", "--config"])
        .arg(&config)
        .args(["--port", "0", "--log-level", "warn"])
        .current_dir(dir);
    mew_tests::process::MewGateway::start(cmd)
}

/// Whether `id` is online, as `GET /participants` tells the human.
fn online(addr: &str, id: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = write!(
        s,
        "GET /participants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer human-token\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str::<Value>(body).is_ok_and(|v| {
        v["participants"]
            .as_array()
            .is_some_and(|l| l.iter().any(|p| p["id"] == id && p["online"] == true))
    })
}

/// The `/json` line that calls server-everything's elicitation tool through the space.
const ASK_LINE: &str = r#"/json {"kind":"mcp/request","to":["everything"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"trigger-elicitation-request","arguments":{}}}}"#;

/// server-everything's question, asked because the person's call caused it, is a form in
/// the terminal: filled from the keyboard (a value out of range is refused with the reason
/// and nothing sent; a titled choice named by its title), answered, and the tool's result
/// shows what was given; a second question is declined with Ctrl-D.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_question_is_answered_in_the_terminal() {
    let server = mew_tests::process::HttpMcpServer::everything();
    let dir = Scratch::new("tui", "ask");
    let gw = asking_space(&dir, &server.url);
    let addr = gw.addr.clone();
    wait::until_ok("the bridge online", Duration::from_secs(30), || {
        if online(&addr, "everything") {
            Ok(())
        } else {
            Err("offline")
        }
    });
    let tmux = Tmux::new(format!("mew-tui-ask-{}", std::process::id()), "ui");
    tokio::task::spawn_blocking(move || {
        let client = format!("{MEW} client --gateway ws://{addr} --space asks");
        tmux.start(120, 80, &["MEW_TOKEN=human-token"], &[&client]);
        tmux.until("joined as human");
        // The bridge's tools, discovered: it is ready.
        tmux.until("· +");
        tmux.keys(&["-l", ASK_LINE]);
        tmux.keys(&["Enter"]);
        let s = tmux.until("everything asks: Please provide inputs for the following fields:");
        assert!(s.contains("› String*: _"), "{s}");
        assert!(s.contains("Integer: 42"), "{s}");
        assert!(
            s.contains("1 Superman · 2 Green Lantern · 3 Wonder Woman"),
            "{s}"
        );
        // name, birthdate, check, email, firstLine, homepage, integer, ...
        tmux.keys(&["-l", "Ada Lovelace"]);
        for _ in 0..6 {
            tmux.keys(&["Tab"]);
        }
        tmux.keys(&["BSpace", "BSpace"]);
        tmux.keys(&["-l", "500"]);
        tmux.keys(&["Enter"]);
        let s = tmux.until("! Integer: must be <= 100");
        assert!(s.contains("everything asks: Please provide inputs"), "{s}");
        tmux.keys(&["BSpace", "BSpace", "BSpace"]);
        tmux.keys(&["-l", "7"]);
        // ... legacyTitledEnum, number, titledMultipleSelectEnum, titledSingleSelectEnum.
        for _ in 0..4 {
            tmux.keys(&["Tab"]);
        }
        for _ in 0.."hero-1".len() {
            tmux.keys(&["BSpace"]);
        }
        tmux.keys(&["-l", "Green Lantern"]);
        for _ in 0..8 {
            tmux.keys(&["Up"]);
        }
        tmux.keys(&["-l", "yes"]);
        tmux.keys(&["Enter"]);
        tmux.until("everything answers:");
        tmux.keys(&["C-o"]);
        let s = tmux.until("- Favorite Integer: 7");
        assert!(s.contains("- Name: Ada Lovelace"), "{s}");
        assert!(s.contains("- Agreed to terms: true"), "{s}");
        assert!(s.contains("\"titledSingleSelectEnum\": \"hero-2\""), "{s}");
        assert!(s.contains("you answered everything's question"), "{s}");

        tmux.keys(&["-l", ASK_LINE]);
        tmux.keys(&["Enter"]);
        tmux.until("Tab next field");
        tmux.keys(&["C-d"]);
        let s = tmux.until("User declined to provide the requested information");
        assert!(!s.contains("Tab next field"), "{s}");
        tmux.keys(&["C-c"]);
    })
    .await
    .unwrap();
    drop(gw);
}
