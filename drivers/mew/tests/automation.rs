//! `mew automation suggest` over a real gateway's history: a person fulfils an agent's
//! proposals to read files under `src/` and rejects a write; the suggestion is the narrowest
//! grant that covers the reads and not the write.

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use mew_tests::process::MewGateway;
use mew_tests::scratch::Scratch;
use mew_tests::wait::read_until;
use serde_json::{Value, json};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket, stream::MaybeTlsStream};

const MEW: &str = env!("CARGO_BIN_EXE_mew");
type Ws = WebSocket<MaybeTlsStream<TcpStream>>;

fn join(addr: &str, token: &str) -> Ws {
    let mut req = format!("ws://{addr}/ws?space=auto")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("Authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, _) = tungstenite::connect(req).unwrap();
    read_until(&mut ws, |v| v["kind"] == "system/welcome");
    ws
}

fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).unwrap();
}

#[test]
fn approvals_in_the_history_become_a_suggested_grant() {
    let dir = Scratch::space("automation", "suggest");
    std::fs::write(
        dir.join(".mew/space.yaml"),
        r#"space: {id: auto}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  agent: {tokens: [agent-token], capabilities: [{kind: mcp/proposal}, {kind: chat}]}
  files: {tokens: [files-token], capabilities: [{kind: mcp/response}]}
"#,
    )
    .unwrap();
    let mut cmd = Command::new(MEW);
    cmd.args(["gateway", "--port", "0", "--log-level", "warn", "--config"])
        .arg(dir.join(".mew/space.yaml"))
        .current_dir(&dir)
        .stderr(Stdio::inherit());
    let gw = MewGateway::start(cmd);
    let mut human = join(&gw.addr, "human-token");
    let mut agent = join(&gw.addr, "agent-token");
    let proposals = [
        ("p1", "read_file", json!({"path": "src/main.rs"}), true),
        ("p2", "read_file", json!({"path": "src/lib.rs"}), true),
        ("p3", "read_file", json!({"path": "src/util.rs"}), true),
        (
            "p4",
            "write_file",
            json!({"path": "src/main.rs", "content": "x"}),
            false,
        ),
    ];
    for (id, tool, args, approve) in &proposals {
        let payload = json!({"method": "tools/call", "params": {"name": tool, "arguments": args}});
        send(
            &mut agent,
            json!({"protocol": "mew/v0.4", "id": id, "kind": "mcp/proposal",
                                "to": ["files"], "payload": payload}),
        );
        read_until(&mut human, |v| v["id"] == *id);
        if *approve {
            send(
                &mut human,
                json!({"protocol": "mew/v0.4", "id": format!("f-{id}"),
                "kind": "mcp/request", "to": ["files"], "correlation_id": [id],
                "payload": {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": payload["params"]}}),
            );
            read_until(&mut human, |v| v["id"] == format!("f-{id}"));
        } else {
            send(
                &mut human,
                json!({"protocol": "mew/v0.4", "id": format!("r-{id}"),
                "kind": "mcp/reject", "to": ["agent"], "correlation_id": [id],
                "payload": {"reason": "not now"}}),
            );
            read_until(&mut human, |v| v["id"] == format!("r-{id}"));
        }
    }
    // The history is written by the gateway's log thread: give it a moment.
    std::thread::sleep(Duration::from_millis(500));
    let out = Command::new(MEW)
        .args(["automation", "suggest", "--json", "--space-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    let s = &list[0];
    assert_eq!(s["recipient"], "agent");
    assert_eq!(
        s["capability"],
        json!({"kind": "mcp/request", "payload": {"method": "tools/call",
               "params": {"name": "read_file", "arguments": {"path": "src/*"}}}})
    );
    assert_eq!(s["approved"], json!(["p1", "p2", "p3"]));
    assert_eq!(s["approvers"], json!(["human"]));
    assert_eq!(s["grant"]["kind"], "capability/grant");
    assert_eq!(s["grant"]["payload"]["recipient"], "agent");
    // The human line mode names the evidence; a higher bar gives nothing.
    let out = Command::new(MEW)
        .args(["automation", "suggest", "--min", "4", "--space-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("no suggestion: 4 decided proposals"));
    drop(gw);
}
