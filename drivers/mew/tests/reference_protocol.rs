//! The reference's protocol after the seed, observed the way its end-to-end scripts observe
//! it: invitations (scenario 17), `system/register` refused (4), streams the participants
//! negotiate themselves (12), late joiners and streams (15), stream ownership (16) and
//! targeted streams (18). Each test copies a space of `tests/fixtures/reference-post-seed`,
//! starts the real `mew` binary as the reference's orchestrator does, `POST`s partial
//! envelopes with literal tokens, and reads `.mew/logs/envelope-history.jsonl` and the
//! `output_log` files line by line with the scripts' own patterns.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use mew_tests::process::MewGateway;
use mew_tests::scratch::Scratch;
use mew_tests::wait::{self, read_kind};
use regex::Regex;
use serde_json::Value;
use tungstenite::Message;
use tungstenite::client::IntoClientRequest;

const MEW: &str = env!("CARGO_BIN_EXE_mew");

type Ws = tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// A running space: the gateway and the folder it runs in.
struct Space {
    gw: MewGateway,
    /// Declared after `gw`, so dropped after it: the gateway writes here until it stops.
    dir: Scratch,
}

impl Space {
    /// Copies fixture `name` and starts `mew gateway start ... --no-auto-start` in it.
    fn start(name: &str) -> Space {
        let dir = Scratch::new("refproto", name);
        copy_dir(
            &repo().join("tests/fixtures/reference-post-seed").join(name),
            &dir,
        );
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        let config = dir.join(".mew/space.yaml");
        let mut cmd = Command::new(MEW);
        cmd.args(["gateway", "start", "--port", "0", "--log-level", "warn"])
            .arg("--space-config")
            .arg(&config)
            .arg("--no-auto-start")
            .current_dir(&dir)
            .stderr(Stdio::inherit());
        let gw = MewGateway::start(cmd);
        Space { gw, dir }
    }

    fn history(&self) -> PathBuf {
        self.dir.join(".mew/logs/envelope-history.jsonl")
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.join("logs").join(name)
    }

    /// `curl -s -X POST .../participants/{who}/messages -H "Authorization: Bearer {token}"`.
    fn post(&self, who: &str, token: &str, body: &str) -> (u16, String) {
        mew_tests::http::post(&self.gw.addr, who, token, body)
    }

    /// A WebSocket participant joined with its token; its welcome.
    fn join(&self, token: &str) -> (Ws, Value) {
        let mut req = format!("ws://{}/ws", self.gw.addr)
            .into_client_request()
            .unwrap();
        req.headers_mut()
            .insert("Authorization", format!("Bearer {token}").parse().unwrap());
        let (mut ws, _) = tungstenite::connect(req).unwrap();
        if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        }
        let welcome = read_kind(&mut ws, "system/welcome");
        (ws, welcome)
    }
}

/// The next text frame (an envelope or a `#stream#data` frame).
fn next_text(ws: &mut Ws) -> String {
    loop {
        match ws.read().expect("a frame in time") {
            Message::Text(t) => return t.as_str().to_owned(),
            _ => continue,
        }
    }
}

/// Frames received until `stop` is seen (an envelope id), in order.
fn frames_until(ws: &mut Ws, stop: &str) -> Vec<String> {
    let mut frames = Vec::new();
    loop {
        let t = next_text(ws);
        if t.starts_with('#') {
            frames.push(t);
        } else if t.contains(&format!("\"id\":\"{stop}\"")) {
            return frames;
        }
    }
}

fn send(ws: &mut Ws, text: String) {
    ws.send(Message::text(text)).unwrap();
}

/// The scripts' `wait_for_pattern`: `grep -F pattern file`, polled; the matching lines.
fn wait_for_pattern(file: &Path, pattern: &str) -> Vec<String> {
    let what = format!("{pattern} in {}", file.display());
    wait::until_ok(&what, Duration::from_secs(10), || {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let lines: Vec<String> = text
            .lines()
            .filter(|l| l.contains(pattern))
            .map(str::to_owned)
            .collect();
        if lines.is_empty() {
            Err(text)
        } else {
            Ok(lines)
        }
    })
}

fn grep(file: &Path, pattern: &str) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(pattern))
        .map(str::to_owned)
        .collect()
}

/// `sed -n 's/.*"stream_id":"\([^"]*\)".*/\1/p'` on the last `stream/open` line.
fn last_stream_id(history: &Path) -> String {
    let line = wait_for_pattern(history, "\"kind\":\"stream/open\"")
        .pop()
        .unwrap();
    let re = Regex::new(r#".*"stream_id":"([^"]*)".*"#).unwrap();
    re.captures(&line).unwrap()[1].to_owned()
}

#[test]
fn scenario_17_invitations() {
    let sp = Space::start("invite");
    let admin_log = sp.log("admin-output.log");
    let observer_log = sp.log("observer-output.log");
    // Participants the gateway holds are welcomed into their logs when it starts.
    wait_for_pattern(&admin_log, "\"kind\":\"system/welcome\"");

    let (status, body) = sp.post(
        "admin",
        "admin-token",
        r#"{"id":"invite-1","kind":"space/invite","payload":{"participant_id":"new-agent","initial_capabilities":[{"kind":"chat"},{"kind":"mcp/proposal"},{"kind":"mcp/response"}],"reason":"Adding new agent for testing"}}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"token\""), "{body}");
    assert!(body.contains("\"status\":\"created\""), "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let token = answer["token"].as_str().unwrap().to_owned();
    assert!(
        answer["connection_url"]
            .as_str()
            .unwrap()
            .starts_with("ws://")
    );

    // The inviter's acknowledgement carries the token; the observer hears of the invitation
    // without it.
    let acks = wait_for_pattern(&admin_log, "\"kind\":\"space/invite-ack\"");
    assert!(acks[0].contains("\"token\"") && acks[0].contains(&token));
    wait_for_pattern(&observer_log, "\"event\":\"invited\"");
    assert!(grep(&observer_log, "\"token\"").is_empty());
    assert!(grep(&observer_log, "\"kind\":\"space/invite-ack\"").is_empty());
    // The token is in the answer only: no other file of the space holds it (not
    // `.mew/tokens/`, whose files are configured participants' credentials, nor the audit
    // logs or the state).
    assert!(!sp.dir.join(".mew/tokens/new-agent.token").exists());
    let mut folders = vec![sp.dir.to_path_buf()];
    while let Some(d) = folders.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let path = e.path();
            if path.is_dir() {
                folders.push(path);
            } else if path != admin_log {
                // (The inviter's own output log is its inbox: the answer is there.)
                let bytes = std::fs::read(&path).unwrap_or_default();
                let text = String::from_utf8_lossy(&bytes);
                assert!(!text.contains(&token), "{}", path.display());
            }
        }
    }

    // The invited participant posts with its token, within the capabilities it was given.
    let (status, body) = sp.post(
        "new-agent",
        &token,
        r#"{"kind":"chat","payload":{"text":"Hello from newly invited agent!","format":"plain"}}"#,
    );
    assert!(
        status == 200 && body.contains("\"status\":\"accepted\""),
        "{body}"
    );
    let (status, body) = sp.post(
        "new-agent",
        &token,
        r#"{"kind":"mcp/proposal","to":["admin"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test_tool","arguments":{}}}}"#,
    );
    assert!(
        status == 200 && body.contains("\"status\":\"accepted\""),
        "{body}"
    );

    // Refusals, as the script checks them.
    let (status, body) = sp.post(
        "admin",
        "admin-token",
        r#"{"kind":"space/invite","payload":{"participant_id":"new-agent","initial_capabilities":[{"kind":"chat"}],"reason":"Duplicate invite test"}}"#,
    );
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("\"already_exists\""), "{body}");
    for bad in ["../../../etc/passwd", "foo/bar"] {
        let (status, body) = sp.post(
            "admin",
            "admin-token",
            &format!(r#"{{"kind":"space/invite","payload":{{"participant_id":"{bad}","initial_capabilities":[{{"kind":"chat"}}]}}}}"#),
        );
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("invalid characters"), "{body}");
    }
    let (status, body) = sp.post(
        "admin",
        "admin-token",
        r#"{"kind":"space/invite","payload":{"participant_id":"observer","initial_capabilities":[{"kind":"chat"}]}}"#,
    );
    assert_eq!(status, 409);
    assert!(body.contains("\"already_exists\""), "{body}");
    let (status, _) = sp.post("admin", "admin-token", r#"{"kind":"space/invite"}"#);
    assert_eq!(status, 400, "missing payload: 400, not 500");
    // Deliberate difference: an invitation gives no capability the inviter lacks.
    let (status, body) = sp.post(
        "admin",
        "admin-token",
        r#"{"kind":"space/invite","payload":{"participant_id":"root","initial_capabilities":[{"kind":"*"}]}}"#,
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("grant_exceeds_own_capabilities"), "{body}");
    // Every refusal also reached the inviter's log as a system/error.
    wait_for_pattern(&admin_log, "grant_exceeds_own_capabilities");
    let errors = grep(&admin_log, "\"kind\":\"system/error\"");
    assert_eq!(errors.len(), 6, "{errors:#?}");
}

#[test]
fn scenario_4_system_register_and_scenario_12_peer_streams() {
    let sp = Space::start("invite");
    let limited = sp.log("limited-agent-output.log");
    let (status, body) = sp.post(
        "limited-agent",
        "limited-token",
        r#"{"id":"sysreg-1","kind":"system/register","payload":{"capabilities":[]}}"#,
    );
    assert_eq!(status, 400);
    assert!(
        body.contains("system/register is reserved for the gateway"),
        "{body}"
    );
    wait_for_pattern(&limited, "\"kind\":\"system/error\"");
    let lines = wait_for_pattern(&limited, "system/register is reserved for the gateway");
    assert!(
        lines[0].contains("\"correlation_id\":[\"sysreg-1\"]"),
        "{}",
        lines[0]
    );
    // A capability violation over HTTP: the reference's words, no markup.
    let (status, body) = sp.post(
        "limited-agent",
        "limited-token",
        r#"{"id":"call-1","kind":"mcp/request","payload":{"method":"resources/list"}}"#,
    );
    assert_eq!(status, 403);
    assert!(
        body.contains("Participant limited-agent lacks capability for mcp/request"),
        "{body}"
    );
    assert!(!body.contains('`'), "{body}");

    // Scenario 12: the control agent is asked for a stream, which the test client opens
    // and closes itself; the gateway never opened it and forwards both.
    let (mut control, _) = sp.join("control-token");
    let client_log = sp.log("test-client-output.log");
    let post = |body: &str| {
        let (status, b) = sp.post("test-client", "test-token", body);
        assert_eq!(status, 200, "{b}");
    };
    post(
        r#"{"id":"open-1","kind":"stream/open","to":["control-agent"],"correlation_id":["trigger-1"],"payload":{"stream_id":"stream-123","encoding":"text"}}"#,
    );
    assert_eq!(read_kind(&mut control, "stream/open")["id"], "open-1");
    post(
        r#"{"id":"close-1","kind":"stream/close","to":["control-agent"],"correlation_id":["open-1"],"payload":{"reason":"complete"}}"#,
    );
    let close = read_kind(&mut control, "stream/close");
    assert_eq!(close["id"], "close-1");
    assert_eq!(close["payload"]["reason"], "complete");
    wait_for_pattern(&client_log, "\"id\":\"close-1\"");
    assert!(grep(&client_log, "\"kind\":\"system/error\"").is_empty());
    let re = Regex::new(r#""event":"delivered".*"id":"close-1".*"participant":"control-agent""#)
        .unwrap();
    let history = sp.history();
    wait::until_true(
        "close-1 delivered to control-agent",
        Duration::from_secs(10),
        || grep(&history, "close-1").iter().any(|l| re.is_match(l)),
    );
}

#[test]
fn scenario_15_late_joiners_see_active_streams() {
    let sp = Space::start("visibility");
    let history = sp.history();
    let post = |who: &str, token: &str, body: &str| {
        let (status, b) = sp.post(who, token, body);
        assert_eq!(status, 200, "{b}");
        b
    };
    post(
        "client-a",
        "client-a-token",
        r#"{"id":"a-1","kind":"chat","payload":{"text":"Hello, I am client A"}}"#,
    );
    let answer = post(
        "client-a",
        "client-a-token",
        r#"{"id":"req-1","kind":"stream/request","to":["gateway"],"payload":{"direction":"upload","expected_size_bytes":1024,"description":"Test stream","content_type":"text/plain","format":"utf8"}}"#,
    );
    assert!(answer.contains("\"status\":\"stream_opened\""), "{answer}");
    let sid = last_stream_id(&history);
    assert_eq!(sid, "stream-1");
    // client-b was not held until it posted: its first post attaches it, welcomed with
    // the stream.
    assert!(
        !sp.log("client-b.log").exists() || grep(&sp.log("client-b.log"), "welcome").is_empty()
    );
    post(
        "client-b",
        "client-b-token",
        r#"{"id":"b-1","kind":"chat","payload":{"text":"Hello, I am client B"}}"#,
    );
    let welcome = wait_for_pattern(
        &history,
        "\"to\":[\"client-b\"],\"kind\":\"system/welcome\"",
    );
    assert_eq!(welcome.len(), 1, "{welcome:#?}");
    assert!(welcome[0].contains(&format!("\"stream_id\":\"{sid}\"")));
    assert!(
        Regex::new(r#""created":"[0-9]{4}-[0-9]{2}-[0-9]{2}T"#)
            .unwrap()
            .is_match(&welcome[0])
    );
    wait_for_pattern(&sp.log("client-b.log"), "\"id\":\"b-1\"");
    let b_log = std::fs::read_to_string(sp.log("client-b.log")).unwrap();
    let first: Value = serde_json::from_str(b_log.lines().next().unwrap()).unwrap();
    assert_eq!(first["kind"], "system/welcome", "the welcome comes first");
    assert_eq!(
        first["payload"]["active_streams"][0]["description"],
        "Test stream"
    );
    assert_eq!(
        first["payload"]["active_streams"][0]["authorized_writers"][0],
        "client-a"
    );
    // Closed, the stream is gone from the next welcome.
    post(
        "client-a",
        "client-a-token",
        &format!(
            r#"{{"id":"close-1","kind":"stream/close","payload":{{"stream_id":"{sid}","reason":"complete"}}}}"#
        ),
    );
    post(
        "client-c",
        "client-c-token",
        r#"{"id":"c-1","kind":"chat","payload":{"text":"Hello, I am client C"}}"#,
    );
    let welcome_c = wait_for_pattern(
        &history,
        "\"to\":[\"client-c\"],\"kind\":\"system/welcome\"",
    );
    let welcome_c: Vec<_> = welcome_c
        .iter()
        .filter(|l| l.contains("system/welcome"))
        .collect();
    assert!(
        welcome_c[0].contains("\"active_streams\":[]"),
        "{}",
        welcome_c[0]
    );
}

#[test]
fn scenarios_16_and_18_stream_ownership_and_targets() {
    let sp = Space::start("streams");
    let history = sp.history();
    let (mut owner, _) = sp.join("stream-owner-token");
    let (mut writer, _) = sp.join("stream-writer-token");
    let (mut aggregator, _) = sp.join("aggregator-token");
    let (mut verifier, _) = sp.join("verifier-token");
    // The scripts' commands travel as chat from the virtual test controller.
    let (status, _) = sp.post(
        "test-controller",
        "test-controller-token",
        r#"{"id":"cmd-1","kind":"chat","payload":{"text":"cmd:stream-owner:create-stream"}}"#,
    );
    assert_eq!(status, 200);
    assert!(
        wait_for_pattern(
            &sp.log("test-controller.log"),
            "\"kind\":\"system/welcome\""
        )[0]
        .contains("\"you\":{\"id\":\"test-controller\"")
    );
    let env = |id: &str, kind: &str, payload: &str| {
        format!(
            r#"{{"protocol":"mew/v0.4","id":"{id}","kind":"{kind}","to":["gateway"],"payload":{payload}}}"#
        )
    };
    // Scenario 16: the stream names its owner and writers, whatever the request claims.
    send(
        &mut owner,
        env(
            "sr-1",
            "stream/request",
            r#"{"direction":"upload","description":"Character position stream","participantId":"attacker","authorizedWriters":["verifier","attacker"]}"#,
        ),
    );
    let sid = last_stream_id(&history);
    let open = grep(&history, "\"kind\":\"stream/open\"").pop().unwrap();
    assert!(open.contains("\"owner\":\"stream-owner\""), "{open}");
    assert!(
        open.contains("\"authorized_writers\":[\"stream-owner\"]"),
        "{open}"
    );
    for ws in [&mut owner, &mut writer, &mut aggregator, &mut verifier] {
        read_kind(ws, "stream/open");
    }

    send(&mut owner, format!("#{sid}#frame1-owner"));
    send(&mut writer, format!("#{sid}#frame2-unauthorized"));
    let e = read_kind(&mut writer, "system/error");
    assert_eq!(e["payload"]["error"], "unauthorized_stream_write");
    assert_eq!(e["payload"]["stream_id"], sid.as_str());

    send(
        &mut owner,
        env(
            "grant-1",
            "stream/grant-write",
            &format!(
                r#"{{"stream_id":"{sid}","participant_id":"stream-writer","reason":"Player takes control"}}"#
            ),
        ),
    );
    let granted = wait_for_pattern(&history, "\"kind\":\"stream/write-granted\"");
    assert!(
        granted
            .last()
            .unwrap()
            .contains("\"participant_id\":\"stream-writer\"")
    );
    assert_eq!(
        read_kind(&mut writer, "stream/write-granted")["payload"]["authorized_writers"],
        serde_json::json!(["stream-owner", "stream-writer"])
    );
    send(&mut writer, format!("#{sid}#frame3-authorized"));
    send(
        &mut writer,
        r#"{"protocol":"mew/v0.4","id":"mark-1","kind":"chat","payload":{"text":"mark"}}"#.into(),
    );
    assert_eq!(
        frames_until(&mut verifier, "mark-1"),
        vec![
            format!("#{sid}#frame1-owner"),
            format!("#{sid}#frame3-authorized")
        ],
        "the unauthorized frame reached nobody"
    );

    send(
        &mut owner,
        env(
            "revoke-1",
            "stream/revoke-write",
            &format!(
                r#"{{"stream_id":"{sid}","participant_id":"stream-writer","reason":"Player disconnected"}}"#
            ),
        ),
    );
    let revoked = wait_for_pattern(&history, "\"kind\":\"stream/write-revoked\"");
    assert!(
        revoked
            .last()
            .unwrap()
            .contains("\"participant_id\":\"stream-writer\"")
    );
    read_kind(&mut writer, "stream/write-revoked");
    send(&mut writer, format!("#{sid}#frame4-revoked"));
    assert_eq!(
        read_kind(&mut writer, "system/error")["payload"]["error"],
        "unauthorized_stream_write"
    );

    send(
        &mut owner,
        env(
            "transfer-1",
            "stream/transfer-ownership",
            &format!(
                r#"{{"stream_id":"{sid}","new_owner":"stream-writer","reason":"AI agent takes over"}}"#
            ),
        ),
    );
    let t = wait_for_pattern(&history, "\"kind\":\"stream/ownership-transferred\"");
    let t = t.last().unwrap();
    assert!(
        t.contains("\"new_owner\":\"stream-writer\"")
            && t.contains("\"previous_owner\":\"stream-owner\""),
        "{t}"
    );
    read_kind(&mut owner, "stream/ownership-transferred");
    send(&mut writer, format!("#{sid}#frame5-new-owner"));
    send(&mut owner, format!("#{sid}#frame6-old-owner"));
    assert_eq!(
        read_kind(&mut owner, "system/error")["payload"]["error"],
        "unauthorized_stream_write"
    );
    // A late joiner sees the new owner in its welcome.
    drop(verifier);
    let (mut verifier, welcome) = sp.join("verifier-token");
    let st = &welcome["payload"]["active_streams"][0];
    assert_eq!(st["owner"], "stream-writer");
    assert_eq!(
        st["authorized_writers"],
        serde_json::json!(["stream-writer"])
    );

    // Scenario 18: a stream targeted at the aggregator.
    send(
        &mut owner,
        env(
            "sr-t0",
            "stream/request",
            r#"{"direction":"upload","target":["nobody"],"description":"x"}"#,
        ),
    );
    let e = read_kind(&mut owner, "system/error");
    assert_eq!(e["payload"]["error"], "target_not_found");
    assert_eq!(e["payload"]["targets"], serde_json::json!(["nobody"]));
    send(
        &mut owner,
        env(
            "sr-t1",
            "stream/request",
            r#"{"direction":"upload","target":["aggregator"],"description":"positions"}"#,
        ),
    );
    let targeted = wait::until("a second stream", Duration::from_secs(10), || {
        let id = last_stream_id(&history);
        (id != sid).then_some(id)
    });
    let open = grep(&history, "\"kind\":\"stream/open\"").pop().unwrap();
    assert!(open.contains("\"target\":[\"aggregator\"]"), "{open}");
    for ws in [&mut aggregator, &mut verifier] {
        read_kind(ws, "stream/open");
    }
    for n in 1..=3 {
        send(&mut owner, format!("#{targeted}#position-data-{n}"));
    }
    send(
        &mut owner,
        r#"{"protocol":"mew/v0.4","id":"mark-2","kind":"chat","payload":{"text":"mark"}}"#.into(),
    );
    let got = frames_until(&mut aggregator, "mark-2");
    assert!(
        got.ends_with(&[
            format!("#{targeted}#position-data-1"),
            format!("#{targeted}#position-data-2"),
            format!("#{targeted}#position-data-3"),
        ]),
        "{got:?}"
    );
    let leaked = frames_until(&mut verifier, "mark-2");
    assert!(
        leaked.iter().all(|f| !f.contains("position-data")),
        "the observer gets none of a targeted stream's frames: {leaked:?}"
    );
    // The virtual controller is no target either.
    assert!(grep(&sp.log("test-controller.log"), "position-data").is_empty());
}

#[test]
fn a_client_replaced_by_another_of_the_same_participant_stops_and_says_so() {
    let sp = Space::start("streams");
    let client = || {
        Command::new(MEW)
            .args(["client", "--json", "--gateway"])
            .arg(format!("ws://{}", sp.gw.addr))
            .args(["--space", "reference-streams", "--token", "verifier-token"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut first = client();
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().contains("system/welcome"));
    let mut second = client();
    let mut second_lines = BufReader::new(second.stdout.take().unwrap()).lines();
    assert!(
        second_lines
            .next()
            .unwrap()
            .unwrap()
            .contains("system/welcome")
    );
    // The first is closed as replaced and does not come back.
    let status = wait::until(
        "the replaced client to stop",
        Duration::from_secs(10),
        || first.try_wait().unwrap(),
    );
    assert_eq!(status.code(), Some(5));
    let mut err = String::new();
    first
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("replaced by a new connection"), "{err}");
    assert!(err.contains("not reconnecting"), "{err}");
    // The second stays: nothing replaces it in the next second.
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        second.try_wait().unwrap().is_none(),
        "the second client runs on"
    );
    let _ = second.kill();
    let _ = second.wait();
}
