//! SIGHUP to `mew gateway`: the edited space.yaml applies to the running space; a file
//! that does not parse changes nothing and the gateway goes on.

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

const SPACE: &str = r#"space: {id: reload-e2e}
logging: {enabled: false}
participants:
  human: {tokens: [human-token], capabilities: ["*"]}
  leaver: {tokens: [leaver-token], capabilities: [chat]}
"#;

/// Opens a socket with a bearer token; the socket and the first envelope.
fn open(addr: &str, token: &str) -> (Ws, Value) {
    let mut req = format!("ws://{addr}/ws?space=reload-e2e")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("Authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, _) = tungstenite::connect(req).unwrap();
    if let MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    }
    let first = read_until(&mut ws, |_| true);
    (ws, first)
}

fn hup(gw: &MewGateway) {
    let done = Command::new("kill")
        .args(["-HUP", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(done.success());
}

fn chat(ws: &mut Ws, text: &str) {
    let env = json!({"protocol": "mew/v0.4", "id": text, "kind": "chat",
                     "payload": {"text": text}});
    ws.send(Message::text(env.to_string())).unwrap();
    read_until(ws, |v| v["id"] == text);
}

#[test]
fn sighup_applies_the_edited_space_yaml_and_a_broken_file_changes_nothing() {
    let dir = Scratch::space("reload", "sighup");
    let config = dir.join(".mew/space.yaml");
    std::fs::write(&config, SPACE).unwrap();
    let mut cmd = Command::new(MEW);
    cmd.args(["gateway", "--port", "0", "--log-level", "warn", "--config"])
        .arg(&config)
        .current_dir(&dir)
        .stderr(Stdio::inherit());
    let gw = MewGateway::start(cmd);
    let (mut human, w) = open(&gw.addr, "human-token");
    assert_eq!(w["kind"], "system/welcome");
    let (mut leaver, _) = open(&gw.addr, "leaver-token");

    // A file that does not parse: nothing changes, the gateway goes on.
    std::fs::write(&config, "participants: [this is not").unwrap();
    hup(&gw);
    chat(&mut human, "after-a-broken-file");
    chat(&mut leaver, "leaver-still-here");

    // leaver removed, newbie added, human's capabilities narrowed.
    std::fs::write(
        &config,
        SPACE
            .replace(
                "  leaver: {tokens: [leaver-token], capabilities: [chat]}\n",
                "  newbie: {tokens: [newbie-token], capabilities: [chat]}\n",
            )
            .replace(
                r#"capabilities: ["*"]"#,
                "capabilities: [chat, mcp/proposal]",
            ),
    )
    .unwrap();
    hup(&gw);
    let welcome = read_until(&mut human, |v| v["kind"] == "system/welcome");
    assert_eq!(
        welcome["payload"]["you"]["capabilities"],
        json!([{"kind": "chat"}, {"kind": "mcp/proposal"}])
    );
    let closed = loop {
        match leaver.read() {
            Ok(Message::Close(f)) => break f.expect("a close frame with a reason"),
            Ok(_) => continue,
            Err(e) => panic!("no close frame: {e}"),
        }
    };
    assert!(closed.reason.contains("removed"), "{}", closed.reason);
    let (_, refused) = open(&gw.addr, "leaver-token");
    assert_eq!(refused["payload"]["error"], "unknown_token", "{refused}");
    let (mut newbie, w) = open(&gw.addr, "newbie-token");
    assert_eq!(w["payload"]["you"]["id"], "newbie");
    chat(&mut newbie, "hello-from-newbie");
    read_until(&mut human, |v| v["id"] == "hello-from-newbie");
}
