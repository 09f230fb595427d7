//! The reference implementation's spaces run unchanged: its folder layout, its `type: local`
//! participants, its token rules, and its scripts' habits (partial envelopes `POST`ed with
//! literal tokens, the envelope history and `output_log` files read line by line with
//! regular expressions). The fixture is `tests/fixtures/reference-space`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use mew_tests::http::exchange as http;
use mew_tests::process::MewGateway;
use mew_tests::scratch::Scratch;
use mew_tests::wait::until;
use regex::Regex;
use serde_json::Value;

const MEW: &str = env!("CARGO_BIN_EXE_mew");

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

/// A copy of the fixture space in a fresh folder.
fn fixture_space(name: &str) -> Scratch {
    let dir = Scratch::new("ref", name);
    copy_dir(&repo().join("tests/fixtures/reference-space"), &dir);
    dir
}

type Gateway = MewGateway;

/// Runs `mew <args>` in `cwd` as the reference's orchestrator would, and waits for the
/// address it prints.
fn start(cwd: &Path, args: &[&str]) -> Gateway {
    let mut cmd = Command::new(MEW);
    cmd.args(args)
        .current_dir(cwd)
        .env("MEW_MCP_SERVERS", repo().join("tests/mcp-servers"))
        .env("MEW_FIXTURE_DIR", cwd)
        .env("MEW_FIXTURE_GREETING", "hello")
        .stderr(Stdio::inherit());
    MewGateway::start(cmd)
}

/// POSTs a partial envelope as `who` with `token`; the accepted envelope's id.
fn post(addr: &str, who: &str, token: &str, envelope: &str) -> String {
    let (status, body) = http(
        addr,
        "POST",
        &format!("/participants/{who}/messages"),
        token,
        envelope,
    );
    assert_eq!(status, 200, "{who} with {token}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "accepted", "{body}");
    v["id"].as_str().unwrap().to_owned()
}

/// The lines of a log file, once `pred` holds for one of them.
fn lines_when(path: &Path, what: &str, pred: impl Fn(&str) -> bool) -> Vec<String> {
    until(what, Duration::from_secs(10), || {
        let text = std::fs::read_to_string(path).ok()?;
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        lines.iter().any(|l| pred(l)).then_some(lines)
    })
}

/// What the reference's tools match: one record per line, `event`, `id` and `participant`.
fn record(event: &str, id: &str, participant: &str) -> Regex {
    Regex::new(&format!(
        r#"^\{{"timestamp":"[^"]+","event":"{event}","id":"{}".*"participant":"{}""#,
        regex::escape(id),
        regex::escape(participant)
    ))
    .unwrap()
}

fn online(addr: &str, token: &str) -> Vec<String> {
    let (status, body) = http(addr, "GET", "/participants", token, "");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["participants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["online"] == true)
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn reference_orchestrator_spelling_literal_tokens_and_log_layout() {
    let dir = fixture_space("no-auto");
    let config = dir.join(".mew/space.yaml");
    let gw = start(
        &dir,
        &[
            "gateway",
            "start",
            "--port",
            "0",
            "--log-level",
            "warn",
            "--space-config",
            config.to_str().unwrap(),
            "--no-auto-start",
        ],
    );
    // A watcher on a socket, joined with the agent's literal token although its token file
    // exists: the reference accepts every one of a participant's tokens.
    let mut watcher = Command::new(MEW)
        .args(["client", "--json", "--gateway"])
        .arg(format!("ws://{}", gw.addr))
        .args(["--space", "reference-space", "--id", "agent"])
        .env("MEW_TOKEN", "agent-literal-token")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut watched = BufReader::new(watcher.stdout.take().unwrap()).lines();
    let welcome: Value = serde_json::from_str(&watched.next().unwrap().unwrap()).unwrap();
    assert_eq!(welcome["kind"], "system/welcome");
    assert_eq!(welcome["payload"]["you"]["id"], "agent");
    std::thread::spawn(move || for _ in watched {});
    // Nothing was started: the agent online is the watcher, the bridge is not there.
    let on = online(&gw.addr, "human-literal-token");
    assert!(!on.contains(&"memory".to_owned()), "{on:?}");
    assert!(on.contains(&"observer".to_owned()), "{on:?}");

    // The scripts' habit: a partial envelope with the literal token.
    let chat = post(
        &gw.addr,
        "human",
        "human-literal-token",
        r#"{"kind":"chat","to":["agent"],"payload":{"text":"hello from a script"}}"#,
    );
    // The agent's file token and its literal both authenticate over HTTP too.
    let by_file = post(
        &gw.addr,
        "agent",
        "agent-file-token",
        r#"{"kind":"chat","payload":{"text":"file"}}"#,
    );
    let by_literal = post(
        &gw.addr,
        "agent",
        "agent-literal-token",
        r#"{"kind":"chat","payload":{"text":"literal"}}"#,
    );
    assert_ne!(by_file, by_literal);
    let (status, _) = http(
        &gw.addr,
        "POST",
        "/participants/agent/messages",
        "human-literal-token",
        r#"{"kind":"chat","payload":{"text":"x"}}"#,
    );
    assert_eq!(
        status, 403,
        "another participant's token is not the agent's"
    );

    // The envelope history is where the reference's tools read it, one record per line.
    let history = dir.join(".mew/logs/envelope-history.jsonl");
    let delivered_to_agent = record("delivered", &chat, "agent");
    // The last envelope sent: once its record is written, the earlier ones are too.
    let last = record("received", &by_literal, "agent");
    let lines = lines_when(&history, "the last envelope's record", |l| last.is_match(l));
    assert!(
        lines.iter().any(|l| delivered_to_agent.is_match(l)),
        "{lines:#?}"
    );
    let received = record("received", &chat, "human");
    assert!(lines.iter().any(|l| received.is_match(l)), "{lines:#?}");
    let to_observer = record("delivered", &chat, "observer");
    assert!(lines.iter().any(|l| to_observer.is_match(l)), "{lines:#?}");
    for id in [&by_file, &by_literal] {
        let r = record("received", id, "agent");
        assert!(lines.iter().any(|l| r.is_match(l)), "{id}: {lines:#?}");
    }
    assert!(dir.join(".mew/logs/capability-decisions.jsonl").exists());
    assert!(
        !dir.join(".mew/.mew").exists(),
        "nothing under a nested .mew/.mew"
    );

    // The virtual participant's output_log, relative to the gateway's working directory.
    let observer = dir.join("logs/observer.jsonl");
    let envelope_line = Regex::new(&format!(
        r#""id":"{}".*"kind":"chat"|"kind":"chat".*"id":"{}""#,
        regex::escape(&chat),
        regex::escape(&chat)
    ))
    .unwrap();
    let lines = lines_when(&observer, "the chat in the observer's log", |l| {
        envelope_line.is_match(l)
    });
    let got: Value =
        serde_json::from_str(lines.iter().find(|l| envelope_line.is_match(l)).unwrap()).unwrap();
    assert_eq!(got["payload"]["text"], "hello from a script");
    assert_eq!(got["from"], "human");
    let _ = watcher.kill();
    let _ = watcher.wait();
}

#[test]
fn auto_start_runs_the_local_participant_with_its_file_token() {
    let dir = fixture_space("auto");
    let config = dir.join(".mew/space.yaml");
    let mut gw = start(
        &dir,
        &[
            "gateway",
            "--port",
            "0",
            "--log-level",
            "warn",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    until(
        "the agent and the bridge to join",
        Duration::from_secs(30),
        || {
            let on = online(&gw.addr, "human-literal-token");
            (on.contains(&"agent".to_owned()) && on.contains(&"memory".to_owned())).then_some(())
        },
    );
    let ping = post(
        &gw.addr,
        "human",
        "human-literal-token",
        r#"{"kind":"chat","to":["agent"],"payload":{"text":"ping"}}"#,
    );
    let history = dir.join(".mew/logs/envelope-history.jsonl");
    let answer = Regex::new(&format!(
        r#""event":"received".*"correlation_id":\["{}"\].*"from":"agent"|"event":"received".*"from":"agent".*"correlation_id":\["{}"\]"#,
        regex::escape(&ping),
        regex::escape(&ping)
    ))
    .unwrap();
    let lines = lines_when(&history, "the agent's answer", |l| answer.is_match(l));
    let rec: Value =
        serde_json::from_str(lines.iter().find(|l| answer.is_match(l)).unwrap()).unwrap();
    assert_eq!(
        rec["envelope"]["payload"]["text"], "pong from reference-space (file token, hello)",
        "${{SPACE}} and ${{VAR}} substituted, the file token handed over"
    );
    assert_eq!(rec["envelope"]["to"], serde_json::json!(["human"]));
    // The process's output goes to its own log, private to the user.
    let agent_log = dir.join(".mew/logs/agent.log");
    assert!(agent_log.exists());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&agent_log).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // SIGTERM stops the gateway and every process it started.
    let pid = gw.child.id();
    let started = children_of(pid);
    assert_eq!(started.len(), 2, "the agent and the bridge: {started:?}");
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let status = until("the gateway to exit", Duration::from_secs(20), || {
        gw.child.try_wait().unwrap()
    });
    assert_eq!(status.code(), Some(0));
    for p in started {
        until("no started process left", Duration::from_secs(10), || {
            (!Path::new(&format!("/proc/{p}")).exists()
                || std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")))
            .then_some(())
        });
    }
}

/// The pids whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // The fields after the command name (which may hold spaces) start after ") ".
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        if rest.split(' ').nth(1) == Some(&parent.to_string()) {
            out.push(pid);
        }
    }
    out
}

#[test]
fn space_yaml_beside_an_existing_mew_folder() {
    let dir = Scratch::new("ref", "beside");
    std::fs::create_dir_all(dir.join(".mew/tokens")).unwrap();
    std::fs::write(dir.join(".mew/tokens/human.token"), "human-file-token\n").unwrap();
    std::fs::write(
        dir.join("space.yaml"),
        "space: {id: beside}\nparticipants:\n  human: {tokens: [human-literal], capabilities: [{kind: '*'}]}\n  bot: {capabilities: [{kind: chat}]}\n",
    )
    .unwrap();
    let gw = start(
        &dir,
        &[
            "gateway",
            "start",
            "--port",
            "0",
            "--log-level",
            "warn",
            "--space-config",
            "space.yaml",
        ],
    );
    let a = post(
        &gw.addr,
        "human",
        "human-file-token",
        r#"{"kind":"chat","payload":{"text":"a"}}"#,
    );
    let b = post(
        &gw.addr,
        "human",
        "human-literal",
        r#"{"kind":"chat","payload":{"text":"b"}}"#,
    );
    let history = dir.join(".mew/logs/envelope-history.jsonl");
    let rb = record("received", &b, "human");
    let lines = lines_when(&history, "both envelopes received", |l| rb.is_match(l));
    let ra = record("received", &a, "human");
    assert!(lines.iter().any(|l| ra.is_match(l)), "{lines:#?}");
    assert!(
        !dir.join("logs").exists(),
        "logs go into the existing .mew/"
    );
    // The participant without a token got one, in the reference's place, private.
    let generated = dir.join(".mew/tokens/bot.token");
    let token = std::fs::read_to_string(&generated).unwrap();
    assert!(token.trim().len() >= 32);
    post(
        &gw.addr,
        "bot",
        token.trim(),
        r#"{"kind":"chat","payload":{"text":"c"}}"#,
    );
}
