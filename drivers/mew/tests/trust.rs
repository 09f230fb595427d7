//! Trust at the edges, tried as an attacker would against a real `mew gateway`, real
//! files, SIGHUP and `kill -9`: an invitation never outgrows what its inviter gave (it never
//! becomes a configured participant's credential), and every path that names a
//! participant follows one id rule.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use mew_tests::http::post;
use mew_tests::process::MewGateway;
use mew_tests::scratch::Scratch;
use mew_tests::wait::read_until;
use serde_json::{Value, json};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket, stream::MaybeTlsStream};

const MEW: &str = env!("CARGO_BIN_EXE_mew");

type Ws = WebSocket<MaybeTlsStream<TcpStream>>;

fn start(dir: &Path) -> MewGateway {
    let mut cmd = Command::new(MEW);
    cmd.args(["gateway", "--port", "0", "--log-level", "warn", "--config"])
        .arg(dir.join(".mew/space.yaml"))
        .current_dir(dir)
        .stderr(Stdio::inherit());
    MewGateway::start(cmd)
}

fn kill9(mut g: MewGateway) {
    g.child.kill().unwrap();
    g.child.wait().unwrap();
    std::mem::forget(g);
}

fn hup(gw: &MewGateway) {
    let done = Command::new("kill")
        .args(["-HUP", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(done.success());
}

/// A socket opened with a bearer token (or none), and the first envelope it gets.
fn open(addr: &str, token: Option<&str>) -> (Ws, Value) {
    let mut req = format!("ws://{addr}/ws").into_client_request().unwrap();
    if let Some(token) = token {
        req.headers_mut()
            .insert("Authorization", format!("Bearer {token}").parse().unwrap());
    }
    let (mut ws, _) = tungstenite::connect(req).unwrap();
    if let MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    }
    if token.is_none() {
        return (ws, Value::Null);
    }
    let first = read_until(&mut ws, |_| true);
    (ws, first)
}

fn send(ws: &mut Ws, env: Value) {
    ws.send(Message::text(env.to_string())).unwrap();
}

/// Invites `who` with `caps` from `ws`; the gateway's answer (`space/invite-ack` or
/// `system/error`).
fn invite(ws: &mut Ws, id: &str, who: &str, caps: Value) -> Value {
    send(
        ws,
        json!({"protocol": "mew/v0.4", "id": id, "kind": "space/invite",
               "payload": {"participant_id": who, "initial_capabilities": caps}}),
    );
    read_until(ws, |v| {
        v["correlation_id"] == json!([id])
            && (v["kind"] == "space/invite-ack" || v["kind"] == "system/error")
    })
}

/// The close frame's reason, reading past envelopes.
fn close_reason(ws: &mut Ws) -> String {
    loop {
        match ws.read() {
            Ok(Message::Close(f)) => return f.map(|f| f.reason.to_string()).unwrap_or_default(),
            Ok(_) => continue,
            Err(e) => panic!("no close frame: {e}"),
        }
    }
}

/// Every file under `dir`, with its bytes.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut folders = vec![dir.to_owned()];
    while let Some(d) = folders.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                folders.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap_or_default();
                out.push((p, bytes));
            }
        }
    }
    out
}

fn assert_in_no_file(dir: &Path, secret: &str) {
    for (p, bytes) in files_under(dir) {
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "{} holds the invitation's token",
            p.display()
        );
    }
}

const INVITER_SPACE: &str = "space: {id: trust-e2e}
participants:
  human: {tokens: [human-token], capabilities: [\"*\"]}
  inviter: {tokens: [inviter-token], capabilities: [chat, space/invite]}
";

/// `[chat, space/invite]` invites `deployer` with `[chat]`; the operator then adds
/// `deployer` to space.yaml with `*` and reloads: the invitation ends (its connection
/// closed with the reason, its token refused) and never joins as the entry.
#[test]
fn an_invitation_never_becomes_the_entry_a_reload_adds() {
    let dir = Scratch::space("trust", "reload");
    std::fs::write(dir.join(".mew/space.yaml"), INVITER_SPACE).unwrap();
    let gw = start(&dir);
    let (mut inviter, _) = open(&gw.addr, Some("inviter-token"));
    let ack = invite(&mut inviter, "i1", "deployer", json!([{"kind": "chat"}]));
    assert_eq!(ack["payload"]["status"], "created", "{ack}");
    let token = ack["payload"]["token"].as_str().unwrap().to_owned();
    let (mut invited, w) = open(&gw.addr, Some(&token));
    assert_eq!(w["payload"]["you"]["id"], "deployer");
    assert_eq!(
        w["payload"]["you"]["capabilities"],
        json!([{"kind": "chat"}])
    );
    // No file holds the invitation's credential: nothing a later entry could read.
    assert!(!dir.join(".mew/tokens/deployer.token").exists());
    assert_in_no_file(&dir, &token);

    // The operator gives `deployer` its own entry with `*` and no token literal: the
    // gateway generates one into .mew/tokens/deployer.token.
    std::fs::write(
        dir.join(".mew/space.yaml"),
        format!("{INVITER_SPACE}  deployer: {{capabilities: [\"*\"]}}\n"),
    )
    .unwrap();
    hup(&gw);
    let reason = close_reason(&mut invited);
    assert!(reason.contains("invitation ended"), "{reason}");
    let (_, refused) = open(&gw.addr, Some(&token));
    assert_eq!(refused["payload"]["error"], "unknown_token", "{refused}");
    let (status, body) = post(
        &gw.addr,
        "deployer",
        &token,
        r#"{"kind":"chat","payload":{"text":"x"}}"#,
    );
    assert_eq!(status, 403, "{body}");
    // The entry's own token (generated into its file) joins with `*`.
    let file = std::fs::read_to_string(dir.join(".mew/tokens/deployer.token")).unwrap();
    let own = file.trim();
    assert_ne!(own, token);
    let (_, w) = open(&gw.addr, Some(own));
    assert_eq!(w["payload"]["you"]["id"], "deployer");
    assert_eq!(w["payload"]["you"]["capabilities"], json!([{"kind": "*"}]));
}

/// The same, across a restart: the invitation is made, the gateway killed (`kill -9`),
/// space.yaml given a `deployer` entry with `*`, the gateway started again.
#[test]
fn an_invitation_never_becomes_the_entry_a_restart_adds() {
    let dir = Scratch::space("trust", "restart");
    std::fs::write(dir.join(".mew/space.yaml"), INVITER_SPACE).unwrap();
    let gw = start(&dir);
    let (mut inviter, _) = open(&gw.addr, Some("inviter-token"));
    let ack = invite(&mut inviter, "i1", "deployer", json!([{"kind": "chat"}]));
    let token = ack["payload"]["token"].as_str().unwrap().to_owned();
    let (_, w) = open(&gw.addr, Some(&token));
    assert_eq!(w["payload"]["you"]["id"], "deployer");
    kill9(gw);

    // Restarted as it was, the invitation still holds (durable state).
    let gw = start(&dir);
    let (_, w) = open(&gw.addr, Some(&token));
    assert_eq!(w["payload"]["you"]["id"], "deployer");
    kill9(gw);

    std::fs::write(
        dir.join(".mew/space.yaml"),
        format!("{INVITER_SPACE}  deployer: {{tokens: [deployer-token], capabilities: [\"*\"]}}\n"),
    )
    .unwrap();
    let gw = start(&dir);
    let (_, refused) = open(&gw.addr, Some(&token));
    assert_eq!(refused["payload"]["error"], "unknown_token", "{refused}");
    let (_, w) = open(&gw.addr, Some("deployer-token"));
    assert_eq!(w["payload"]["you"]["capabilities"], json!([{"kind": "*"}]));
    assert_in_no_file(&dir, &token);
}

/// `[chat, space/invite, space/kick]` kicks the configured `bot` (whose token is in its
/// file), then invites `bot`: refused; the file is untouched; bot's own token is back
/// after a reload and after a restart, and no invitation token ever joins as bot.
#[test]
fn a_kick_does_not_free_a_configured_id() {
    let dir = Scratch::space("trust", "kick");
    std::fs::write(
        dir.join(".mew/space.yaml"),
        "space: {id: trust-e2e}
participants:
  admin: {tokens: [admin-token], capabilities: [chat, space/invite, space/kick]}
  bot: {capabilities: [chat, mcp/request]}
",
    )
    .unwrap();
    std::fs::create_dir_all(dir.join(".mew/tokens")).unwrap();
    let bot_file = dir.join(".mew/tokens/bot.token");
    std::fs::write(&bot_file, "bot-file-token\n").unwrap();
    let gw = start(&dir);
    let (mut admin, _) = open(&gw.addr, Some("admin-token"));
    let (mut bot, w) = open(&gw.addr, Some("bot-file-token"));
    assert_eq!(w["payload"]["you"]["id"], "bot");
    send(
        &mut admin,
        json!({"protocol": "mew/v0.4", "id": "k1", "kind": "space/kick",
               "payload": {"participant_id": "bot", "reason": "test"}}),
    );
    assert!(close_reason(&mut bot).contains("kicked"));
    let refusal = invite(&mut admin, "i1", "bot", json!([{"kind": "chat"}]));
    assert_eq!(refusal["kind"], "system/error", "{refusal}");
    assert_eq!(refusal["payload"]["error"], "already_exists");
    assert!(refusal.to_string().contains("configured"), "{refusal}");
    assert!(refusal["payload"].get("token").is_none());
    assert_eq!(
        std::fs::read_to_string(&bot_file).unwrap(),
        "bot-file-token\n"
    );
    // Kicked, bot's token is refused until the operator says otherwise...
    let (_, refused) = open(&gw.addr, Some("bot-file-token"));
    assert_eq!(refused["payload"]["error"], "unknown_token");
    // ... a reload re-applies its entry: its own token, its own capabilities.
    hup(&gw);
    let w = mew_tests::wait::until_ok("bot back after the reload", Duration::from_secs(5), || {
        let (_, w) = open(&gw.addr, Some("bot-file-token"));
        if w["kind"] == "system/welcome" {
            Ok(w)
        } else {
            Err(w)
        }
    });
    assert_eq!(w["payload"]["you"]["id"], "bot", "{w}");
    assert_eq!(
        w["payload"]["you"]["capabilities"],
        json!([{"kind": "chat"}, {"kind": "mcp/request"}])
    );
    kill9(gw);
    let gw = start(&dir);
    let (_, w) = open(&gw.addr, Some("bot-file-token"));
    assert_eq!(w["payload"]["you"]["id"], "bot");
    assert_eq!(
        std::fs::read_to_string(&bot_file).unwrap(),
        "bot-file-token\n"
    );
}

/// One id rule for invitations (WebSocket and HTTP), anonymous joins and HTTP paths: a
/// 100,000-character id, invisible characters and lookalikes of members are refused with
/// `invalid_participant_id`, and nobody else hears of them.
#[test]
fn invitations_and_anonymous_joins_follow_the_id_rule() {
    let dir = Scratch::space("trust", "ids");
    std::fs::write(
        dir.join(".mew/space.yaml"),
        "space: {id: trust-e2e}
gateway: {anonymous_joins: true}
participants:
  admin: {tokens: [admin-token], capabilities: [\"*\"]}
  watcher: {tokens: [watcher-token], capabilities: [chat]}
",
    )
    .unwrap();
    let gw = start(&dir);
    let (mut admin, _) = open(&gw.addr, Some("admin-token"));
    let (mut watcher, _) = open(&gw.addr, Some("watcher-token"));
    let long = "x".repeat(100_000);
    for (n, bad, needle) in [
        ("i1", long.as_str(), "at most 128 bytes"),
        ("i2", "adm\u{200B}in", "U+200B"),
        ("i3", "\u{202E}nimda", "U+202E"),
        ("i4", "adm\u{00AD}in", "U+00AD"),
        ("i5", "\u{FEFF}admin", "U+FEFF"),
        ("i6", "\u{0430}dmin", "looks like participant admin"),
        ("i7", "w\u{0430}tcher", "looks like participant watcher"),
    ] {
        let e = invite(&mut admin, n, bad, json!([{"kind": "chat"}]));
        assert_eq!(e["kind"], "system/error", "{n}");
        assert_eq!(e["payload"]["error"], "invalid_participant_id", "{n}");
        let msg = e["payload"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{n}: {msg}");
        assert!(
            e.to_string().len() < 1_000,
            "{n}: the answer repeats the id"
        );
    }
    // Over HTTP: 400, and the answer says so.
    let body = json!({"kind": "space/invite", "payload": {"participant_id": long}}).to_string();
    let (status, answer) = post(&gw.addr, "admin", "admin-token", &body);
    assert_eq!(status, 400, "{}", &answer[..answer.len().min(300)]);
    assert!(answer.contains("invalid_participant_id") && answer.len() < 1_000);
    assert!(!answer.contains("created"));
    // An HTTP path naming an invalid id.
    let (status, answer) = post(
        &gw.addr,
        "adm%E2%80%8Bin",
        "admin-token",
        r#"{"kind":"chat","payload":{"text":"x"}}"#,
    );
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("invalid_participant_id"), "{answer}");
    // Anonymous joins.
    for (bad, needle) in [
        ("w\u{0430}tcher", "looks like participant watcher"),
        ("watch\u{200B}er", "U+200B"),
        (long.as_str(), "at most 128 bytes"),
    ] {
        let (mut ws, _) = open(&gw.addr, None);
        send(
            &mut ws,
            json!({"type": "join", "space": "trust-e2e", "participantId": bad}),
        );
        let e = read_until(&mut ws, |_| true);
        assert_eq!(e["payload"]["error"], "invalid_participant_id", "{e}");
        assert!(
            e["payload"]["message"].as_str().unwrap().contains(needle),
            "{e}"
        );
    }
    let (mut ws, _) = open(&gw.addr, None);
    send(
        &mut ws,
        json!({"type": "join", "space": "trust-e2e", "participantId": "visitor"}),
    );
    let w = read_until(&mut ws, |_| true);
    assert_eq!(w["payload"]["you"]["id"], "visitor");
    // The watcher heard of the visitor and of nothing refused.
    send(
        &mut admin,
        json!({"protocol": "mew/v0.4", "id": "end", "kind": "chat", "payload": {"text": "end"}}),
    );
    let mut heard = Vec::new();
    loop {
        let v = read_until(&mut watcher, |_| true);
        if v["id"] == "end" {
            break;
        }
        heard.push(v);
    }
    let text = serde_json::to_string(&heard).unwrap();
    assert!(text.contains("visitor"), "{text}");
    for bad in ["xxxxxxxx", "\u{200B}", "\u{0430}", "\u{202E}", "invited"] {
        assert!(!text.contains(bad), "{bad:?} reached the watcher: {text}");
    }
}
