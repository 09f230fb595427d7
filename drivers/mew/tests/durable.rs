//! Durable single-node spaces with real `mew gateway` processes: what a space was given at
//! run time (a grant, an invitation, its history) survives `kill -9`; a torn or damaged log
//! tail is cut with a warning; damage with whole entries after it, a damaged snapshot, a
//! state file of a newer format, and a state folder that cannot be written, each stop the
//! gateway with one clear line; `mew space reset` starts afresh.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use mew_tests::process::MewGateway;
use mew_tests::scratch::Scratch;
use mew_tests::wait::read_until;
use serde_json::{Value, json};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket, stream::MaybeTlsStream};

const MEW: &str = env!("CARGO_BIN_EXE_mew");

const SPACE: &str = r#"
space: {id: durable-e2e}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  agent: {tokens: [agent-token], capabilities: [{kind: chat}]}
  service: {tokens: [service-token], capabilities: [{kind: "mcp/*"}, {kind: chat}]}
"#;

/// A space folder of its own holding [`SPACE`].
fn space_dir(name: &str) -> Scratch {
    let d = Scratch::space("durable", name);
    std::fs::write(d.join(".mew/space.yaml"), SPACE).unwrap();
    d
}

fn gateway_cmd(dir: &Path) -> Command {
    let mut cmd = Command::new(MEW);
    cmd.args([
        "gateway",
        "--log-level",
        "warn",
        "--config",
        ".mew/space.yaml",
        "--port",
        "0",
        "--no-auto-start",
    ])
    .current_dir(dir)
    .stderr(Stdio::inherit());
    cmd
}

fn start(dir: &Path) -> MewGateway {
    MewGateway::start(gateway_cmd(dir))
}

/// Runs a gateway that must refuse to start; its exit code and stderr (killed after 20 s
/// if it started after all: code `None`).
fn refused(dir: &Path) -> (Option<i32>, String) {
    let mut child = gateway_cmd(dir)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, err)
}

fn kill9(mut g: MewGateway) {
    g.child.kill().unwrap();
    g.child.wait().unwrap();
    std::mem::forget(g);
}

type Ws = WebSocket<MaybeTlsStream<TcpStream>>;

fn join(addr: &str, token: &str) -> Ws {
    let mut req = format!("ws://{addr}/ws?space=durable-e2e")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("Authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, _) = tungstenite::connect(req).unwrap();
    if let MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    }
    let welcome = read_until(&mut ws, |v| v["kind"] == "system/welcome");
    assert_eq!(welcome["kind"], "system/welcome", "{welcome}");
    ws
}

fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).unwrap();
}

fn http(addr: &str, path: &str, token: &str) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").unwrap().1;
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// The agent's chat-only static capabilities refuse `mcp/request`: the grant is what lets
/// it through.
fn agent_may_call(addr: &str, id: &str) -> bool {
    let mut agent = join(addr, "agent-token");
    let mut service = join(addr, "service-token");
    send(
        &mut agent,
        json!({"protocol": "mew/v0.4", "id": id, "kind": "mcp/request", "to": ["service"],
               "payload": {"method": "tools/list"}}),
    );
    let v = read_until(&mut agent, |v| {
        v["kind"] == "system/error" || (v["kind"] == "mcp/request" && v["id"] == id)
    });
    if v["kind"] == "system/error" {
        assert_eq!(v["payload"]["error"], "capability_violation", "{v}");
        return false;
    }
    let got = read_until(&mut service, |v| {
        v["kind"] == "mcp/request" && v["id"] == id
    });
    got["from"] == "agent"
}

/// Grants, invites and chats, then `kill -9`: each acknowledged change is there after the
/// restart, however often it is repeated.
#[test]
fn what_a_space_was_given_survives_kill_9() {
    let dir = space_dir("kill");
    let g = start(&dir);
    assert!(!agent_may_call(&g.addr, "before"));
    let mut human = join(&g.addr, "human-token");
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "g-1", "kind": "capability/grant", "to": ["agent"],
               "payload": {"recipient": "agent", "capabilities": [{"kind": "mcp/request"}]}}),
    );
    // The human observes its own grant (delivery `all`): acknowledged.
    read_until(&mut human, |v| {
        v["kind"] == "capability/grant" && v["id"] == "g-1"
    });
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "i-1", "kind": "space/invite",
               "payload": {"participant_id": "guest", "initial_capabilities": [{"kind": "chat"}]}}),
    );
    let ack = read_until(&mut human, |v| v["kind"] == "space/invite-ack");
    let guest_token = ack["payload"]["token"].as_str().unwrap().to_owned();
    for i in 0..20 {
        send(
            &mut human,
            json!({"protocol": "mew/v0.4", "id": format!("c-{i}"), "kind": "chat",
                   "payload": {"text": format!("chat {i}")}}),
        );
    }
    read_until(&mut human, |v| v["kind"] == "chat" && v["id"] == "c-19");
    // Chats leave before they are written (within 10 ms, what a kill may take); a change
    // is acknowledged once it is written, and it is written after them.
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "g-2", "kind": "capability/grant", "to": ["agent"],
               "payload": {"recipient": "agent", "capabilities": [{"kind": "x-after-chats"}]}}),
    );
    read_until(&mut human, |v| {
        v["kind"] == "capability/grant" && v["id"] == "g-2"
    });
    kill9(g);

    // No invitation token in the state files: only its digest is kept.
    for f in std::fs::read_dir(dir.join(".mew/state")).unwrap() {
        let bytes = std::fs::read(f.unwrap().path()).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(&guest_token),
            "an invitation's token is on disk"
        );
    }

    let g = start(&dir);
    assert!(agent_may_call(&g.addr, "after"), "the grant survived");
    let mut guest = join(&g.addr, &guest_token);
    send(
        &mut guest,
        json!({"protocol": "mew/v0.4", "id": "hello", "kind": "chat", "payload": {"text": "hi"}}),
    );
    read_until(&mut guest, |v| v["kind"] == "chat" && v["id"] == "hello");
    let (status, msgs) = http(&g.addr, "/participants/human/messages", "human-token");
    assert_eq!(status, 200, "{msgs}");
    let texts: Vec<&str> = msgs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["payload"]["text"].as_str())
        .collect();
    assert!(
        texts.contains(&"chat 19") && texts.contains(&"chat 0"),
        "{texts:?}"
    );
    let (_, health) = http(&g.addr, "/health", "human-token");
    // The invitation was followed at once by a snapshot; the chats are replayed after it.
    assert!(
        health["restored"]["snapshot_entry"].as_u64().is_some(),
        "{health}"
    );
    assert!(
        health["restored"]["entries_replayed"].as_u64().unwrap() >= 20,
        "{health}"
    );
    assert_eq!(health["restored"]["grants"], 2, "{health}");

    // A second crash right after the restart loses nothing either.
    kill9(g);
    let g = start(&dir);
    assert!(agent_may_call(&g.addr, "again"));
    drop(g);
}

/// A log whose last entry is torn (cut short) or damaged (a flipped byte) is cut at its
/// last whole entry; the gateway starts and says so.
#[test]
fn a_torn_or_damaged_tail_is_cut_and_the_gateway_starts() {
    let dir = space_dir("torn");
    let g = start(&dir);
    let mut human = join(&g.addr, "human-token");
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "g-1", "kind": "capability/grant", "to": ["agent"],
               "payload": {"recipient": "agent", "capabilities": [{"kind": "mcp/request"}]}}),
    );
    read_until(&mut human, |v| v["kind"] == "capability/grant");
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "last", "kind": "chat", "payload": {"text": "last"}}),
    );
    read_until(&mut human, |v| v["kind"] == "chat");
    // The chat is written once a change after it is acknowledged; that change's entry is
    // the last, the one cut.
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "g-2", "kind": "capability/grant", "to": ["agent"],
               "payload": {"recipient": "agent", "capabilities": [{"kind": "x-last"}]}}),
    );
    read_until(&mut human, |v| {
        v["kind"] == "capability/grant" && v["id"] == "g-2"
    });
    kill9(g);
    let log = dir.join(".mew/state/log");
    let whole = std::fs::read(&log).unwrap();
    // (Logs of earlier versions may end in zeros allocated ahead: the entries end before.)
    let end = whole.iter().rposition(|b| *b != 0).unwrap() + 1;
    assert!(end > 9, "entries are in the log");

    // Truncated mid-entry.
    std::fs::write(&log, &whole[..end - 7]).unwrap();
    let g = start(&dir);
    assert!(
        agent_may_call(&g.addr, "t1"),
        "entries before the cut are kept"
    );
    let (_, health) = http(&g.addr, "/health", "human-token");
    assert!(
        health["restored"]["bytes_cut"].as_u64().unwrap() > 0,
        "{health}"
    );
    kill9(g);

    // A flipped byte in the last entry.
    let mut bytes = std::fs::read(&log).unwrap();
    let n = bytes.iter().rposition(|b| *b != 0).unwrap() + 1;
    bytes[n - 3] ^= 0x55;
    std::fs::write(&log, &bytes).unwrap();
    let g = start(&dir);
    assert!(agent_may_call(&g.addr, "t2"));
    drop(g);
}

/// Where each whole entry of a log file starts, and where it ends.
fn entry_spans(log: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut at = 9;
    let mut spans = Vec::new();
    while at + 16 <= log.len() {
        let len = u32::from_le_bytes(log[at..at + 4].try_into().unwrap()) as usize;
        if len == 0 && log[at..].iter().all(|b| *b == 0) {
            break;
        }
        spans.push(at..at + 16 + len);
        at += 16 + len;
    }
    spans
}

/// A grant, its revocation acknowledged, more changes after it, `kill -9`; then one byte of
/// the revocation's entry flipped. Cutting the log there (as if it were a crash's torn
/// tail) would give the agent its revoked capability back: the gateway refuses to start,
/// with one line naming the file, the byte and `mew space reset`, exit code 4, and leaves
/// the file as it was. A log cut short after the revocation still starts, without the
/// capability. A flipped byte in the snapshot is refused the same way.
#[test]
fn a_damaged_revocation_with_entries_after_it_is_refused_not_cut() {
    let dir = space_dir("damaged");
    let g = start(&dir);
    let mut human = join(&g.addr, "human-token");
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "g-1", "kind": "capability/grant", "to": ["agent"],
               "payload": {"recipient": "agent", "capabilities": [{"kind": "mcp/request"}]}}),
    );
    read_until(&mut human, |v| {
        v["kind"] == "capability/grant" && v["id"] == "g-1"
    });
    assert!(agent_may_call(&g.addr, "granted"));
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "r-1", "kind": "capability/revoke", "to": ["agent"],
               "payload": {"recipient": "agent", "capabilities": [{"kind": "mcp/request"}]}}),
    );
    read_until(&mut human, |v| {
        v["kind"] == "capability/revoke" && v["id"] == "r-1"
    });
    assert!(!agent_may_call(&g.addr, "revoked"));
    for i in 0..3 {
        let id = format!("later-{i}");
        send(
            &mut human,
            json!({"protocol": "mew/v0.4", "id": id, "kind": "capability/grant", "to": ["agent"],
                   "payload": {"recipient": "agent", "capabilities": [{"kind": format!("x-{i}")}]}}),
        );
        read_until(&mut human, |v| {
            v["kind"] == "capability/grant" && v["id"] == id
        });
    }
    kill9(g);

    let log = dir.join(".mew/state/log");
    let intact = std::fs::read(&log).unwrap();
    let spans = entry_spans(&intact);
    let revoke = spans
        .iter()
        .position(|s| has(&intact[s.clone()], br#""id":"r-1""#))
        .expect("the revocation is in the log");
    assert!(
        spans.len() > revoke + 3,
        "whole entries follow the revocation"
    );
    let entry = spans[revoke].clone();
    let mut damaged = intact.clone();
    // A byte of the capability the revocation names.
    let at = entry.start + find(&intact[entry.clone()], b"mcp/request").unwrap() + 2;
    damaged[at] ^= 0x01;
    std::fs::write(&log, &damaged).unwrap();
    let (code, err) = refused(&dir);
    assert_eq!(code, Some(4), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(".mew/state/log: damaged"), "{err}");
    assert!(
        err.contains(&format!("damaged at byte {} ", entry.start)),
        "{err}"
    );
    assert!(err.contains("mew space reset"), "{err}");
    assert_eq!(
        std::fs::read(&log).unwrap(),
        damaged,
        "the log is left alone"
    );

    // A byte of its head (the length: the entry then swallows the next ones).
    let mut damaged = intact.clone();
    damaged[entry.start] ^= 0x40;
    std::fs::write(&log, &damaged).unwrap();
    let (code, err) = refused(&dir);
    assert_eq!(code, Some(4), "{err}");
    assert!(err.contains(&format!("byte {} ", entry.start)), "{err}");

    // Cut short after the revocation (a crash's torn tail): starts, still revoked.
    let cut = spans[revoke + 1].start + 5;
    std::fs::write(&log, &intact[..cut]).unwrap();
    let g = start(&dir);
    assert!(
        !agent_may_call(&g.addr, "after-cut"),
        "the revocation holds"
    );
    let (_, health) = http(&g.addr, "/health", "human-token");
    assert_eq!(health["restored"]["bytes_cut"], 5, "{health}");
    assert_eq!(health["restored"]["grants"], 0, "{health}");

    // An invitation writes a snapshot; a flipped byte in it is refused too.
    let mut human = join(&g.addr, "human-token");
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "i-1", "kind": "space/invite",
               "payload": {"participant_id": "guest", "initial_capabilities": [{"kind": "chat"}]}}),
    );
    read_until(&mut human, |v| v["kind"] == "space/invite-ack");
    drop(human);
    kill9(g);
    let snap = dir.join(".mew/state/snapshot");
    let mut bytes = std::fs::read(&snap).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0x01;
    std::fs::write(&snap, &bytes).unwrap();
    let (code, err) = refused(&dir);
    assert_eq!(code, Some(4), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("snapshot is damaged") && err.contains("mew space reset"),
        "{err}"
    );
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn has(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}

/// Files of a newer format, and a state folder that cannot be written, stop the gateway
/// with one line naming the file and what to do; `mew space reset` starts afresh.
#[test]
fn newer_formats_and_unwritable_state_are_clear_errors_and_reset_starts_afresh() {
    let dir = space_dir("errors");
    let g = start(&dir);
    let mut human = join(&g.addr, "human-token");
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "g-1", "kind": "capability/grant", "to": ["agent"],
               "payload": {"recipient": "agent", "capabilities": [{"kind": "mcp/request"}]}}),
    );
    read_until(&mut human, |v| v["kind"] == "capability/grant");
    drop(human);
    drop(g);
    let log = dir.join(".mew/state/log");
    let saved = std::fs::read(&log).unwrap();
    let mut newer = b"MEWLOG 7\n".to_vec();
    newer.extend_from_slice(&saved[9..]);
    std::fs::write(&log, &newer).unwrap();
    let (code, err) = refused(&dir);
    assert_eq!(code, Some(4), "{err}");
    assert!(
        err.contains("newer version") && err.contains("mew space reset"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    std::fs::write(&log, &saved).unwrap();

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let state = dir.join(".mew/state");
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o400)).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o500)).unwrap();
        // Root writes through permissions: the check then has nothing to show.
        if std::fs::OpenOptions::new().append(true).open(&log).is_err() {
            let (code, err) = refused(&dir);
            assert_ne!(code, Some(0));
            assert!(err.contains("cannot use the space's state"), "{err}");
        } else {
            eprintln!("running as root: a read-only state folder is still writable, not checked");
        }
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    // Reset: without a terminal it needs --yes; then the grant is gone.
    let out = Command::new(MEW)
        .args(["space", "reset", "--space-dir"])
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--yes"));
    assert!(dir.join(".mew/state/log").exists());
    let out = Command::new(MEW)
        .args(["space", "reset", "--yes", "--space-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(!dir.join(".mew/state").exists());
    let g = start(&dir);
    assert!(
        !agent_may_call(&g.addr, "fresh"),
        "the grant went with the reset"
    );
    drop(g);
}

/// `space.yaml` edited while the gateway was down: a snapshot taken under the old file
/// cannot be read under the new one, so it is moved aside (kept, not deleted) and the
/// space starts afresh under the new file, saying so in `/health`.
#[test]
fn an_edited_space_yaml_sets_the_old_state_aside_and_starts() {
    let dir = space_dir("edited");
    let g = start(&dir);
    let mut human = join(&g.addr, "human-token");
    // An invitation is followed at once by a snapshot, which carries the file's fingerprint.
    send(
        &mut human,
        json!({"protocol": "mew/v0.4", "id": "i-1", "kind": "space/invite",
               "payload": {"participant_id": "guest", "initial_capabilities": [{"kind": "chat"}]}}),
    );
    read_until(&mut human, |v| v["kind"] == "space/invite-ack");
    drop(human);
    kill9(g);
    assert!(dir.join(".mew/state/snapshot").exists());
    let edited = SPACE.replace(
        "  agent: {tokens: [agent-token], capabilities: [{kind: chat}]}",
        "  agent: {tokens: [agent-token], capabilities: [{kind: chat}, {kind: mcp/request}]}",
    );
    assert_ne!(edited, SPACE);
    std::fs::write(dir.join(".mew/space.yaml"), edited).unwrap();
    let g = start(&dir);
    assert!(
        agent_may_call(&g.addr, "edited"),
        "the new file's capabilities apply"
    );
    let (_, health) = http(&g.addr, "/health", "human-token");
    let aside = health["restored"]["set_aside"].as_str().unwrap_or_default();
    assert!(aside.ends_with("state.previous"), "{health}");
    assert!(dir.join(".mew/state.previous/snapshot").exists());
    drop(g);
}
