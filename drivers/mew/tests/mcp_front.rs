//! The space as an MCP server (`/mcp`), judged by the official conformance suite: its
//! fixture (`tests/mcp-conformance/everything-server`) is bridged into a space by
//! `tests/mcp-conformance/serve-space`, and every scored scenario of a revision's
//! requirements that passes against the fixture directly, in the same run, must pass
//! through the space too.

#![cfg(unix)]

use mew_tests::scratch::Scratch;
use mew_tests::tmux::Tmux;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MEW: &str = env!("CARGO_BIN_EXE_mew");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn clients_bin(name: &str) -> PathBuf {
    let p = repo()
        .join("tests/mcp-clients/node_modules/.bin")
        .join(name);
    assert!(
        p.exists(),
        "MCP test clients are not installed: run `npm ci` in tests/mcp-clients"
    );
    p
}

/// PATH with the clients' Node first (the fixture's `tsx` runs on it).
fn node_path() -> String {
    let bin = clients_bin("node");
    let dir = std::fs::canonicalize(&bin)
        .unwrap()
        .parent()
        .unwrap()
        .to_owned();
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A process group, ended with SIGTERM (then SIGKILL) when dropped.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, killpg};
        use nix::unistd::Pid;
        let pg = Pid::from_raw(self.0.id() as i32);
        let _ = killpg(pg, Signal::SIGTERM);
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.0.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = killpg(pg, Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

/// The conformance fixture on a free port; its `/mcp` URL.
fn fixture() -> (Group, String) {
    let dir = repo().join("tests/mcp-conformance/everything-server");
    let tsx = dir.join("node_modules/.bin/tsx");
    assert!(
        tsx.exists(),
        "the conformance fixture is not installed: run `npm ci` in {}",
        dir.display()
    );
    let port = free_port();
    let child = Command::new(tsx)
        .arg("everything-server.ts")
        .current_dir(&dir)
        .env("PORT", port.to_string())
        .env("PATH", node_path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("run the fixture");
    let end = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < end, "the fixture did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    (Group(child), format!("http://localhost:{port}/mcp"))
}

/// `serve-space FIXTURE_URL PORT`, the bridge offering `revision`; the `/mcp` URL it printed.
fn serve_space(fixture: &str, revision: &str) -> (Group, String) {
    let port = free_port();
    let mut child = Command::new(repo().join("tests/mcp-conformance/serve-space"))
        .args([fixture, &port.to_string()])
        .env("MEW", MEW)
        .env("MEW_BRIDGE_REVISION", revision)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("run serve-space");
    let out = child.stdout.take().unwrap();
    let group = Group(child);
    let mut lines = BufReader::new(out).lines();
    let url = lines
        .find_map(|l| l.ok().filter(|l| l.starts_with("http://")))
        .expect("serve-space printed its URL");
    assert_eq!(url, format!("http://localhost:{port}/mcp"));
    (group, url)
}

/// One run of the suite: the scored scenarios that passed, and those that failed.
#[derive(Debug)]
struct Run {
    passed: BTreeSet<String>,
    failed: BTreeSet<String>,
}

fn conformance(url: &str, revision: &str) -> Run {
    let out = Command::new(clients_bin("node"))
        .arg(clients_bin("conformance"))
        .args(["server", "--url", url, "--requirements", revision])
        .stdin(Stdio::null())
        .output()
        .expect("run the conformance suite");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    parse(&text)
}

/// Reads the suite's summary: `✓ name: ...` / `✗ name: ...` lines, less those listed under
/// `Not scored`.
fn parse(text: &str) -> Run {
    let (scored, unscored) = text.split_once("Not scored").unwrap_or((text, ""));
    let name = |l: &str| l.split(':').next().unwrap_or("").trim().to_owned();
    let not_scored: BTreeSet<String> = unscored
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("✓ ").or_else(|| l.strip_prefix("✗ "))?;
            Some(l.split(' ').next().unwrap_or("").to_owned())
        })
        .collect();
    let mut run = Run {
        passed: BTreeSet::new(),
        failed: BTreeSet::new(),
    };
    for l in scored.lines() {
        if let Some(rest) = l.strip_prefix("✓ ") {
            run.passed.insert(name(rest));
        } else if let Some(rest) = l.strip_prefix("✗ ") {
            run.failed.insert(name(rest));
        }
    }
    run.passed.retain(|n| !not_scored.contains(n));
    run.failed.retain(|n| !not_scored.contains(n));
    run
}

fn compare(revision: &str, must_pass: &[&str]) {
    let (_fixture, fixture_url) = fixture();
    let (_space, space_url) = serve_space(&fixture_url, revision);
    let direct = conformance(&fixture_url, revision);
    let through = conformance(&space_url, revision);
    eprintln!(
        "{revision}: direct {} passed / {} failed; through the space {} passed / {} failed",
        direct.passed.len(),
        direct.failed.len(),
        through.passed.len(),
        through.failed.len()
    );
    eprintln!("{revision}: failing directly: {:?}", direct.failed);
    eprintln!(
        "{revision}: failing through the space: {:?}",
        through.failed
    );
    // Some scenarios fail against the fixture itself (its tools reject a call without
    // `arguments`); what matters is that the suite ran and nothing it passes is lost.
    assert!(
        direct.passed.len() + direct.failed.len() >= must_pass.len(),
        "the suite did not run against the fixture: {direct:?}"
    );
    for name in must_pass {
        assert!(
            through.passed.contains(*name),
            "{name} does not pass through the space ({revision}): {through:?}"
        );
    }
    let lost: Vec<&String> = direct.passed.difference(&through.passed).collect();
    assert!(
        lost.is_empty(),
        "{revision}: passing directly but not through the space: {lost:?}"
    );
}

/// The 2025-11-25 requirements: sessions, SSE streams, logging, progress, sampling and
/// elicitation put to the host, subscriptions, DNS rebinding.
#[test]
fn conformance_2025_11_25_passes_through_the_space_as_directly() {
    compare(
        "2025-11-25",
        &[
            "server-initialize",
            "logging-set-level",
            "ping",
            "completion-complete",
            "tools-list",
            "tools-call-simple-text",
            "tools-call-image",
            "tools-call-audio",
            "tools-call-embedded-resource",
            "tools-call-mixed-content",
            "tools-call-with-logging",
            "tools-call-error",
            "tools-call-with-progress",
            "tools-call-sampling",
            "tools-call-elicitation",
            "elicitation-sep1034-defaults",
            "server-sse-multiple-streams",
            "elicitation-sep1330-enums",
            "resources-list",
            "resources-read-text",
            "resources-read-binary",
            "resources-templates-read",
            "resources-subscribe",
            "resources-unsubscribe",
            "prompts-list",
            "prompts-get-simple",
            "prompts-get-with-args",
            "prompts-get-embedded-resource",
            "prompts-get-with-image",
            "dns-rebinding-protection",
        ],
    );
}

/// The stateless 2026-07-28 requirements.
#[test]
fn conformance_2026_07_28_passes_through_the_space_as_directly() {
    compare(
        "2026-07-28",
        &[
            "completion-complete",
            "tools-list",
            "resources-list",
            "resources-read-text",
            "resources-read-binary",
            "resources-templates-read",
            "sep-2164-resource-not-found",
            "prompts-list",
            "prompts-get-simple",
            "prompts-get-with-args",
            "prompts-get-embedded-resource",
            "prompts-get-with-image",
            "dns-rebinding-protection",
            "caching",
            "tools-call-simple-text",
            "tools-call-with-progress",
            "input-required-result-basic-elicitation",
            "input-required-result-basic-sampling",
            "input-required-result-request-state",
            "input-required-result-multi-round",
            "input-required-result-missing-input-response",
            "input-required-result-non-tool-request",
            "input-required-result-result-type",
            "input-required-result-unsupported-methods",
            "input-required-result-tampered-state",
            "input-required-result-capability-check",
            "input-required-result-ignore-extra-params",
            "input-required-result-validate-input",
            "input-required-result-basic-list-roots",
            "input-required-result-multiple-input-requests",
            "server-stateless",
        ],
    );
}

#[test]
fn the_summary_parser_leaves_unscored_scenarios_out() {
    let text = "✓ ping: 2 passed, 0 failed\n✗ tools-list: 1 passed, 1 failed\n✓ json-schema-2020-12: 8 passed\n\nTotal: 11 passed, 1 failed\n\nNot scored for 2025-11-25: 1 scenario(s) run.\n  ✓ json-schema-2020-12 (pending)\n";
    let run = parse(text);
    assert_eq!(run.passed, BTreeSet::from(["ping".to_owned()]));
    assert_eq!(run.failed, BTreeSet::from(["tools-list".to_owned()]));
}

/// A bridged server whose tools change at runtime (tests/mcp-servers/changing-tools.mjs, on
/// the official SDK): once it says so, a host at `/mcp` hears
/// `notifications/tools/list_changed` on its GET stream and lists the new tool, and calls it.
#[test]
fn a_bridged_servers_tool_list_change_reaches_the_host() {
    use std::io::{Read, Write};
    let dir = Scratch::new("front", "changing");
    let server = repo().join("tests/mcp-servers/changing-tools.mjs");
    let yaml = format!(
        r#"space: {{id: front}}
participants:
  human: {{tokens: [human-token], person: true, capabilities: [{{kind: "*"}}]}}
  desk:
    tokens: [desk-token]
    capabilities: [{{kind: mcp/request}}, {{kind: mcp/response}}]
  grower:
    type: mcp-bridge
    auto_start: true
    tokens: [grower-token]
    capabilities: [{{kind: mcp/response}}, {{kind: mcp/request}}, {{kind: participant/status}}]
    mcp_server: {{command: node, args: ["{server}"]}}
gateway:
  durability: off
  mcp: {{loopback_as: desk}}
"#,
        server = server.display()
    );
    let gw = gateway_of(&dir, &yaml);
    let addr = gw.addr.clone();
    let tools = |session: &str| -> Vec<String> {
        let (status, _, body) = post(
            &addr,
            &format!("Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-11-25\r\n"),
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        );
        assert_eq!(status, 200, "{body}");
        let json = body
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap_or(&body);
        let v: serde_json::Value = serde_json::from_str(json).expect("a tools/list result");
        v["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let (status, head, body) = post(&addr, "", INIT);
    assert_eq!(status, 200, "{body}");
    let session = session_of(&head);
    let headers = format!("Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-11-25\r\n");
    post(
        &addr,
        &headers,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    // The bridge lists its server's tools once it has joined.
    let end = Instant::now() + Duration::from_secs(30);
    while tools(&session) != ["grow"] {
        assert!(
            Instant::now() < end,
            "grow is not listed: {:?}",
            tools(&session)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    write!(
        stream,
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n{headers}\r\n"
    )
    .unwrap();
    let mut seen = String::new();
    let mut read_for = |stream: &mut std::net::TcpStream, wait: Duration| {
        let end = Instant::now() + wait;
        let mut buf = [0u8; 4096];
        while Instant::now() < end && !seen.contains("list_changed") {
            if let Ok(n) = stream.read(&mut buf) {
                seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
        seen.clone()
    };
    let before = read_for(&mut stream, Duration::from_secs(1));
    assert!(before.starts_with("HTTP/1.1 200"), "{before}");
    assert!(!before.contains("list_changed"), "{before}");

    let (status, _, body) = post(
        &addr,
        &headers,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"grow","arguments":{}}}"#,
    );
    assert_eq!(status, 200);
    assert!(body.contains("grew a tool"), "{body}");
    let after = read_for(&mut stream, Duration::from_secs(20));
    assert!(
        after.contains(r#"data: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#),
        "{after}"
    );
    assert_eq!(tools(&session), ["grow", "grown"]);
    let (status, _, body) = post(
        &addr,
        &headers,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"grown","arguments":{}}}"#,
    );
    assert_eq!(status, 200);
    assert!(body.contains("grown and answering"), "{body}");
}

// ---- a space with a bridged server, hosts at its /mcp -------------------------------------

/// A gateway serving a space where `desk` may call `echo` and list tools, may only propose
/// anything else, and hosts on this machine are `desk`; `every` bridges the npm
/// server-everything over stdio; `human` is a person. Its folder comes first: bound as
/// `(dir, gw)`, the gateway is dropped (stopped) before its folder is removed.
fn space(name: &str) -> (Scratch, mew_tests::process::MewGateway) {
    let dir = Scratch::new("front", name);
    let yaml = space_yaml(
        "  max_frame_bytes: 65536\n  mcp: {loopback_as: desk, max_sessions: 40, proposal_timeout_ms: 60000, idle_timeout_ms: 3000}\n",
    );
    let gw = gateway_of(&dir, &yaml);
    wait_online(&gw.addr, "every");
    (dir, gw)
}

/// The space of [`space`], its `gateway:` section's settings (after `durability: off`)
/// `gateway`, indented by two.
fn space_yaml(gateway: &str) -> String {
    let server = repo().join(
        "tests/mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    assert!(server.exists(), "run `npm ci` in tests/mcp-servers");
    format!(
        r#"space: {{id: front}}
participants:
  human: {{tokens: [human-token], person: true, capabilities: [{{kind: "*"}}]}}
  desk:
    tokens: [desk-token]
    connections: 16
    capabilities:
      - {{kind: mcp/request, payload: {{method: "tools/list"}}}}
      - {{kind: mcp/request, payload: {{method: "tools/call", params: {{name: "echo"}}}}}}
      - {{kind: mcp/proposal}}
      - {{kind: mcp/response}}
  outsider: {{tokens: [outsider-token], capabilities: [{{kind: chat}}]}}
  every:
    type: mcp-bridge
    auto_start: true
    tokens: [every-token]
    capabilities: [{{kind: mcp/response}}, {{kind: mcp/request}}, {{kind: participant/status}}]
    mcp_server: {{command: node, args: ["{server}"]}}
gateway:
  durability: off
{gateway}"#,
        server = server.display()
    )
}

/// Waits until `id` is online in the space (`/participants` lists every configured
/// participant, online or not): a bridge is in once its server answered it.
fn wait_online(addr: &str, id: &str) {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = mew_tests::http::exchange(addr, "GET", "/participants", "human-token", "");
        let online = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| {
                v["participants"]
                    .as_array()?
                    .iter()
                    .find(|p| p["id"] == id)
                    .map(|p| p["online"] == true)
            })
            .unwrap_or(false);
        if online {
            return;
        }
        assert!(Instant::now() < end, "{id} did not join: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `mew gateway` serving `yaml` (written to `dir/space.yaml`), with the tests' Node first on
/// `PATH` for the servers it starts.
fn gateway_of(dir: &Path, yaml: &str) -> mew_tests::process::MewGateway {
    mew_tests::process::MewGateway::start(gateway_cmd(dir, yaml))
}

/// The command of [`gateway_of`], to add to.
fn gateway_cmd(dir: &Path, yaml: &str) -> Command {
    let path = dir.join("space.yaml");
    std::fs::write(&path, yaml).unwrap();
    let mut cmd = Command::new(MEW);
    cmd.args(["gateway", "--config"])
        .arg(&path)
        .args(["--port", "0", "--log-level", "warn"])
        .env("PATH", node_path())
        .current_dir(dir);
    cmd
}

/// One raw exchange with `/mcp`: status, headers and body.
fn raw(addr: &str, request: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out).into_owned();
    let status = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (status, head.to_owned(), body.to_owned())
}

fn post(addr: &str, headers: &str, body: &str) -> (u16, String, String) {
    raw(
        addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

fn session_of(head: &str) -> String {
    head.lines()
        .find_map(|l| l.strip_prefix("Mcp-Session-Id: "))
        .expect("a session id")
        .trim()
        .to_owned()
}

/// The MCP Inspector CLI as the host: its exit code and its JSON output.
fn inspector(addr: &str, args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(clients_bin("node"))
        .arg(clients_bin("mcp-inspector"))
        .arg("--cli")
        .arg(format!("http://{addr}/mcp"))
        .args(["--transport", "http"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the inspector");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = serde_json::from_str(&stdout).unwrap_or_else(|_| {
        serde_json::Value::String(format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)))
    });
    (out.status.code().unwrap_or(-1), json)
}

/// The person, through the HTTP API: the newest proposal `desk` made (other than `not`), once
/// it is there.
fn proposal(addr: &str, not: Option<&serde_json::Value>) -> serde_json::Value {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = mew_tests::http::exchange(
            addr,
            "GET",
            "/participants/human/messages",
            "human-token",
            "",
        );
        let list: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap_or_default();
        if let Some(p) = list
            .into_iter()
            .rev()
            .find(|e| e["kind"] == "mcp/proposal" && e["from"] == "desk" && Some(&e["id"]) != not)
        {
            return p;
        }
        assert!(Instant::now() < end, "no proposal seen: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_inspector_calls_an_allowed_tool_and_a_proposed_one_approved_then_rejected() {
    let (_dir, gw) = space("inspector");
    let addr = gw.addr.clone();

    let (code, listed) = inspector(&addr, &["--method", "tools/list"]);
    assert_eq!(code, 0, "{listed}");
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"get-sum"),
        "{names:?}"
    );

    // Allowed: straight through the bridge.
    let (code, out) = inspector(
        &addr,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "echo",
            "--tool-arg",
            "message=hello space",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["content"][0]["text"], "Echo: hello space");

    // Only proposable: the host waits while the person approves (fulfils it as proposed).
    let approve = std::thread::spawn({
        let addr = addr.clone();
        move || {
            let p = proposal(&addr, None);
            let body = serde_json::json!({"kind": "mcp/request", "to": ["every"],
                "correlation_id": [p["id"]], "payload": p["payload"]});
            (
                mew_tests::http::post(&addr, "human", "human-token", &body.to_string()),
                p["id"].clone(),
            )
        }
    });
    let (code, out) = inspector(
        &addr,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "get-sum",
            "--tool-arg",
            "a=2",
            "b=3",
        ],
    );
    let ((status, posted), approved) = approve.join().unwrap();
    assert_eq!(status, 200, "{posted}");
    assert_eq!(code, 0, "{out}");
    assert!(
        out["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains('5'),
        "{out}"
    );

    // Rejected with a reason: the host's call ends with it.
    let reject = std::thread::spawn({
        let addr = addr.clone();
        move || {
            let p = proposal(&addr, Some(&approved));
            let body = serde_json::json!({"kind": "mcp/reject", "to": ["desk"],
                "correlation_id": [p["id"]], "payload": {"reason": "not during the audit"}});
            mew_tests::http::post(&addr, "human", "human-token", &body.to_string())
        }
    });
    let (code, out) = inspector(
        &addr,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "get-sum",
            "--tool-arg",
            "a=4",
            "b=4",
        ],
    );
    let _ = reject.join().unwrap();
    assert_ne!(code, 0, "a rejected call is a failure to the host: {out}");
    assert!(out.to_string().contains("not during the audit"), "{out}");
}

#[test]
fn bad_input_is_answered_per_the_spec_and_the_space_is_unharmed() {
    let (_dir, gw) = space("bad-input");
    let addr = gw.addr.clone();
    // Malformed JSON, a batch, an oversized body, an unknown session, a request before
    // initialize without a session.
    let (s, _, b) = post(&addr, "", "{nope");
    assert_eq!(s, 400);
    assert!(b.contains("-32700"), "{b}");
    let (s, _, _) = post(&addr, "", &format!("[{INIT}]"));
    assert_eq!(s, 400);
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":"{}"}}}}"#,
        "a".repeat(70_000)
    );
    let (s, _, _) = post(&addr, "", &big);
    assert_eq!(s, 413);
    let (s, _, _) = post(
        &addr,
        "Mcp-Session-Id: nope\r\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    );
    assert_eq!(s, 404);
    let (s, _, _) = post(
        &addr,
        "",
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    );
    assert_eq!(s, 400);
    // DNS rebinding: another site's Host and Origin.
    let (s, _, _) = raw(
        &addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: evil.example.com\r\nOrigin: http://evil.example.com\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{INIT}",
            INIT.len()
        ),
    );
    assert_eq!(s, 403);
    // A token of no participant.
    let (s, _, _) = post(&addr, "Authorization: Bearer wrong\r\n", INIT);
    assert_eq!(s, 403);
    // A participant the space knows but that may do nothing MCP: in, and refused by name.
    let (s, head, _) = post(&addr, "Authorization: Bearer outsider-token\r\n", INIT);
    assert_eq!(s, 200);
    let sid = session_of(&head);
    let (s, _, b) = post(
        &addr,
        &format!("Authorization: Bearer outsider-token\r\nMcp-Session-Id: {sid}\r\n"),
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"message":"x"}}}"#,
    );
    assert_eq!(s, 200);
    assert!(b.contains("-32602") || b.contains("-32003"), "{b}");
    // Another credential cannot use the session.
    let (s, _, _) = post(
        &addr,
        &format!("Mcp-Session-Id: {sid}\r\n"),
        r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#,
    );
    assert_eq!(s, 403);
    // Nor read its stream or end it: knowing the id is not enough.
    let other = |method: &str, auth: &str| {
        raw(
            &addr,
            &format!(
                "{method} /mcp HTTP/1.1\r\nHost: {addr}\r\n{auth}Mcp-Session-Id: {sid}\r\nAccept: text/event-stream\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            ),
        )
        .0
    };
    assert_eq!(other("GET", ""), 403);
    assert_eq!(other("DELETE", ""), 403);
    assert_eq!(other("DELETE", "Authorization: Bearer wrong\r\n"), 403);
    // Its own credential's DELETE ends it.
    assert_eq!(
        other("DELETE", "Authorization: Bearer outsider-token\r\n"),
        200
    );
    assert_eq!(
        other("DELETE", "Authorization: Bearer outsider-token\r\n"),
        404
    );

    // Many hosts at once: each is admitted or told the space is full (503), none hangs.
    let hosts: Vec<_> = (0..200)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || post(&addr, "", INIT).0)
        })
        .collect();
    let statuses: Vec<u16> = hosts.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 503),
        "{statuses:?}"
    );
    assert!(
        statuses.contains(&503),
        "the session bound held: {statuses:?}"
    );
    // The space still serves; the crowd's idle sessions end and new hosts come in again.
    let (s, _) = mew_tests::http::exchange(&addr, "GET", "/health", "", "");
    assert_eq!(s, 200);
    std::thread::sleep(Duration::from_secs(4));
    let (code, out) = inspector(
        &addr,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "echo",
            "--tool-arg",
            "message=still here",
        ],
    );
    assert_eq!(code, 0, "{out}");
}

/// The gateway's resident memory, in KiB.
fn rss_kib(gw: &mew_tests::process::MewGateway) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", gw.child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[test]
fn a_host_that_never_reads_its_streams_harms_no_one() {
    use std::io::Write;
    let (_dir, gw) = space("no-reader");
    let addr = gw.addr.clone();
    let (s, head, _) = post(&addr, "", INIT);
    assert_eq!(s, 200);
    let sid = session_of(&head);
    let (s, _, _) = post(
        &addr,
        &format!("Mcp-Session-Id: {sid}\r\n"),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(s, 202);
    // The first listing has the bridged server's tools.
    let (s, _, b) = post(
        &addr,
        &format!("Mcp-Session-Id: {sid}\r\n"),
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    );
    assert!(s == 200 && b.contains("get-sum"), "{s} {b}");
    // The standalone stream and a call answered as an event stream (a proposal with a
    // progress token: progress while it waits), neither ever read.
    let mut get = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        get,
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {sid}\r\n\r\n"
    )
    .unwrap();
    let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get-sum","arguments":{"a":1,"b":2},"_meta":{"progressToken":"p"}}}"#;
    let mut sse = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        sse,
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {sid}\r\nContent-Length: {}\r\n\r\n{call}",
        call.len()
    )
    .unwrap();
    let first = proposal(&addr, None);
    // Other hosts and a WebSocket participant are served promptly meanwhile.
    let t = Instant::now();
    let (code, out) = inspector(
        &addr,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "echo",
            "--tool-arg",
            "message=beside a host that does not read",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.to_string().contains("beside a host that does not read"),
        "{out}"
    );
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    let (s, body) = mew_tests::http::exchange(&addr, "GET", "/participants", "human-token", "");
    assert_eq!(s, 200);
    assert!(body.contains("\"every\""), "{body}");
    // A WebSocket participant chats and hears itself promptly.
    {
        use tungstenite::client::IntoClientRequest;
        let mut req = format!("ws://{addr}/ws?space=front")
            .into_client_request()
            .unwrap();
        req.headers_mut()
            .insert("Authorization", "Bearer human-token".parse().unwrap());
        let (mut ws, _) = tungstenite::connect(req).unwrap();
        if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        let t = Instant::now();
        let chat = serde_json::json!({"protocol": "mew/v0.4", "id": "beside-the-reader",
            "kind": "chat", "payload": {"text": "still served"}});
        ws.send(tungstenite::Message::text(chat.to_string()))
            .unwrap();
        mew_tests::wait::read_until(&mut ws, |v| v["id"] == "beside-the-reader");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }
    // The person rejects the unread call: its session goes on, the space too.
    let reject = serde_json::json!({"kind": "mcp/reject", "to": ["desk"],
        "correlation_id": [first["id"]], "payload": {"reason": "nobody reads it"}});
    let (s, _) = mew_tests::http::post(&addr, "human", "human-token", &reject.to_string());
    assert!(s < 300, "{s}");
    let (s, _, b) = post(
        &addr,
        &format!("Mcp-Session-Id: {sid}\r\n"),
        r#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#,
    );
    assert_eq!(s, 200, "{b}");
    drop((get, sse));
}

#[test]
fn a_host_whose_participant_is_removed_by_a_reload_mid_call_is_told_why() {
    let (dir, gw) = space("reload");
    let addr = gw.addr.clone();
    let config = dir.join("space.yaml");
    let original = std::fs::read_to_string(&config).unwrap();
    let visitor = "  visitor:\n    tokens: [visitor-token]\n    capabilities:\n      - {kind: mcp/request, payload: {method: \"tools/list\"}}\n      - {kind: mcp/proposal}\n      - {kind: mcp/response}\n";
    let with_visitor = original.replace("  every:\n", &format!("{visitor}  every:\n"));
    assert_ne!(with_visitor, original);
    let hup = || {
        let done = Command::new("kill")
            .args(["-HUP", &gw.child.id().to_string()])
            .status()
            .unwrap();
        assert!(done.success());
    };
    std::fs::write(&config, &with_visitor).unwrap();
    hup();
    let auth = "Authorization: Bearer visitor-token\r\n";
    let end = Instant::now() + Duration::from_secs(10);
    let sid = loop {
        let (s, head, b) = post(&addr, auth, INIT);
        if s == 200 {
            break session_of(&head);
        }
        assert!(
            Instant::now() < end,
            "the reload did not admit visitor: {s} {b}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let with_sid = format!("{auth}Mcp-Session-Id: {sid}\r\n");
    // The first listing has the bridged server's tools.
    let (s, _, b) = post(
        &addr,
        &with_sid,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    );
    assert!(s == 200 && b.contains("get-sum"), "{s} {b}");
    // A call waiting for a person when visitor is removed.
    let call = std::thread::spawn({
        let (addr, with_sid) = (addr.clone(), with_sid.clone());
        move || {
            post(
                &addr,
                &with_sid,
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get-sum","arguments":{"a":1,"b":2}}}"#,
            )
        }
    });
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = mew_tests::http::exchange(
            &addr,
            "GET",
            "/participants/human/messages",
            "human-token",
            "",
        );
        if body.contains("\"mcp/proposal\"") && body.contains("\"from\":\"visitor\"") {
            break;
        }
        assert!(Instant::now() < end, "no proposal of visitor: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(&config, &original).unwrap();
    hup();
    let t = Instant::now();
    let (s, _, b) = call.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(s, 200, "{b}");
    assert!(b.contains("\"error\"") && b.contains("\"id\":3"), "{b}");
    assert!(b.contains("removed"), "the reason reaches the host: {b}");
    // The session is gone; the space serves the others.
    let (s, _, b) = post(
        &addr,
        &with_sid,
        r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#,
    );
    assert_eq!(s, 404, "{b}");
    let (code, out) = inspector(
        &addr,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "echo",
            "--tool-arg",
            "message=after the reload",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.to_string().contains("after the reload"), "{out}");
}

#[test]
fn a_thousand_hosts_at_once_are_each_answered_and_the_space_recovers() {
    let (_dir, gw) = space("thousand");
    let addr = gw.addr.clone();
    let before = rss_kib(&gw);
    let t = Instant::now();
    let hosts: Vec<_> = (0..1000)
        .map(|_| {
            let addr = addr.clone();
            std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    let (s, _, b) = post(&addr, "", INIT);
                    (s, b)
                })
                .unwrap()
        })
        .collect();
    let answers: Vec<(u16, String)> = hosts.into_iter().map(|h| h.join().unwrap()).collect();
    let took = t.elapsed();
    let admitted = answers.iter().filter(|(s, _)| *s == 200).count();
    for (s, b) in &answers {
        match s {
            200 => assert!(b.contains("serverInfo"), "{b}"),
            503 => assert!(
                [
                    "too many MCP sessions",
                    "admit",
                    "closed the host's new session"
                ]
                .iter()
                .any(|why| b.contains(why)),
                "{b}"
            ),
            _ => panic!("a host got {s}: {b}"),
        }
    }
    // At most 40 at once; a place frees when a session ends (desk has 16 connections: a new
    // one replaces the oldest), so more than 40 may be admitted over the run.
    assert!(admitted > 0 && admitted < 1000, "{admitted} admitted");
    assert!(took < Duration::from_secs(30), "{took:?}");
    let grown = rss_kib(&gw).saturating_sub(before);
    assert!(grown < 100 * 1024, "the gateway grew by {grown} KiB");
    // The space still serves; once the crowd's sessions are idle, new hosts come in.
    let (s, _) = mew_tests::http::exchange(&addr, "GET", "/health", "", "");
    assert_eq!(s, 200);
    std::thread::sleep(Duration::from_secs(4));
    let (s, head, _) = post(&addr, "", INIT);
    assert_eq!(s, 200, "{head}");
    eprintln!(
        "1000 hosts: {admitted} admitted, all answered in {took:?}, the gateway grew by {grown} KiB"
    );
}

/// A host program's run: its exit code and the JSON it printed.
fn host_output(name: &str, mut cmd: Command) -> (i32, serde_json::Value) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run the {name} host: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
        panic!(
            "the {name} host printed no JSON: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), json)
}

/// The Python `mcp` SDK's client as the host (`pip install mcp`, as tests/run.sh does), with
/// `env` set.
fn python_host(
    url: &str,
    tool: &str,
    args: serde_json::Value,
    env: &[(&str, &Path)],
) -> (i32, serde_json::Value) {
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("tests/fixtures/mcp-front/python_host.py"))
        .args([url, tool, &args.to_string()]);
    cmd.envs(env.iter().copied());
    host_output("Python", cmd)
}

/// A host's three calls: `echo` allowed; `get-sum` proposed and approved by a person while
/// the host waits (the result reaches it); `get-sum` proposed and rejected with a reason
/// (the reason reaches it as `-32004`, with no result).
fn allowed_approved_rejected(
    addr: &str,
    host: impl Fn(&str, serde_json::Value) -> (i32, serde_json::Value),
) {
    let (code, out) = host("echo", serde_json::json!({"message": "from the host"}));
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["content"][0]["text"], "Echo: from the host");

    let approve = std::thread::spawn({
        let addr = addr.to_owned();
        move || {
            let p = proposal(&addr, None);
            assert_eq!(p["payload"]["params"]["name"], "get-sum", "{p}");
            let body = serde_json::json!({"kind": "mcp/request", "to": ["every"],
                "correlation_id": [p["id"]], "payload": p["payload"]});
            mew_tests::http::post(&addr, "human", "human-token", &body.to_string());
            p["id"].clone()
        }
    });
    let (code, out) = host("get-sum", serde_json::json!({"a": 19, "b": 23}));
    let approved = approve.join().unwrap();
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["content"][0]["text"], "The sum of 19 and 23 is 42.");

    let reject = std::thread::spawn({
        let addr = addr.to_owned();
        move || {
            let p = proposal(&addr, Some(&approved));
            let body = serde_json::json!({"kind": "mcp/reject", "to": ["desk"],
                "correlation_id": [p["id"]], "payload": {"reason": "not with these numbers"}});
            mew_tests::http::post(&addr, "human", "human-token", &body.to_string())
        }
    });
    let (code, out) = host("get-sum", serde_json::json!({"a": 6, "b": 7}));
    let _ = reject.join().unwrap();
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["code"], -32004, "{out}");
    let message = out["error"].as_str().unwrap_or("");
    assert!(message.contains("not with these numbers"), "{out}");
    assert!(
        out.get("content").is_none(),
        "no result came with it: {out}"
    );
}

#[test]
fn the_python_sdk_calls_an_allowed_tool_and_a_proposed_one_approved_then_rejected() {
    let (_dir, gw) = space("python");
    let url = format!("http://{}/mcp", gw.addr);
    allowed_approved_rejected(&gw.addr, |tool, args| python_host(&url, tool, args, &[]));
}

/// Reads one answer from a kept connection (`buf` holds bytes read past the last one):
/// status, head, body. The answer must have a length.
fn read_answer(s: &mut std::net::TcpStream, buf: &mut Vec<u8>) -> (u16, String, String) {
    use std::io::Read;
    let mut more = |buf: &mut Vec<u8>| {
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).expect("an answer");
        assert!(n > 0, "the connection closed before its answer");
        buf.extend_from_slice(&chunk[..n]);
    };
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        more(buf);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("an answer with a length")
        .trim()
        .parse()
        .unwrap();
    while buf.len() < end + 4 + len {
        more(buf);
    }
    let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
    buf.drain(..end + 4 + len);
    let status = head.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head, body)
}

fn mcp_request(addr: &str, sid: Option<&str>, extra: &str, body: &str) -> String {
    let sid = sid.map_or(String::new(), |s| format!("Mcp-Session-Id: {s}\r\n"));
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n{sid}{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[test]
fn a_host_keeps_its_connection_for_its_next_requests_within_the_bounds() {
    use std::io::{Read, Write};
    let (_dir, gw) = space("keep-alive");
    let addr = gw.addr.clone();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = Vec::new();
    s.write_all(mcp_request(&addr, None, "", INIT).as_bytes())
        .unwrap();
    let (status, head, _) = read_answer(&mut s, &mut buf);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("Connection: keep-alive"), "{head}");
    assert!(head.contains("Keep-Alive: timeout=30"), "{head}");
    let sid = session_of(&head);
    // Two requests in one write (pipelined): both answered, in order, on this connection.
    let two = format!(
        "{}{}",
        mcp_request(
            &addr,
            Some(&sid),
            "",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#
        ),
        mcp_request(
            &addr,
            Some(&sid),
            "",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#
        )
    );
    s.write_all(two.as_bytes()).unwrap();
    let (status, head, _) = read_answer(&mut s, &mut buf);
    assert_eq!(status, 202, "{head}");
    let (status, head, body) = read_answer(&mut s, &mut buf);
    assert_eq!(status, 200, "{head}");
    // The first listing has the bridged server's tools.
    assert!(body.contains("\"echo\""), "{body}");
    let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"message":"kept"}}}"#;
    s.write_all(mcp_request(&addr, Some(&sid), "", call).as_bytes())
        .unwrap();
    let (status, head, body) = read_answer(&mut s, &mut buf);
    assert_eq!(status, 200, "{head}");
    assert!(body.contains("Echo: kept"), "{body}");
    // An answer before the body was read (here: the body is too large) ends the connection,
    // as the body's bytes would otherwise be read as the next request.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"ping","params":{{"x":"{}"}}}}"#,
        "a".repeat(70_000)
    );
    let mut refused = std::net::TcpStream::connect(&addr).unwrap();
    refused
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    refused
        .write_all(&mcp_request(&addr, Some(&sid), "", &big).as_bytes()[..1000])
        .unwrap();
    let mut rest = Vec::new();
    let (status, head, _) = read_answer(&mut refused, &mut rest);
    assert_eq!(status, 413, "{head}");
    assert!(head.contains("Connection: close"), "{head}");
    // A host that says `Connection: close` gets its answer and the end of the connection.
    let ping = r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#;
    s.write_all(mcp_request(&addr, Some(&sid), "Connection: close\r\n", ping).as_bytes())
        .unwrap();
    let (status, head, _) = read_answer(&mut s, &mut buf);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("Connection: close"), "{head}");
    assert_eq!(
        s.read(&mut [0u8; 16]).unwrap(),
        0,
        "closed after the answer"
    );
    // One connection carries at most KEEP_ALIVE_REQUESTS (1000) requests: the last answer
    // says so and the connection ends.
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = Vec::new();
    for i in 1..=1000 {
        s.write_all(mcp_request(&addr, Some(&sid), "", ping).as_bytes())
            .unwrap();
        let (status, head, _) = read_answer(&mut s, &mut buf);
        assert_eq!(status, 200, "request {i}: {head}");
        assert_eq!(head.contains("Connection: close"), i == 1000, "request {i}");
    }
    assert_eq!(
        s.read(&mut [0u8; 16]).unwrap(),
        0,
        "closed after the 1000th"
    );
}

// ---- the TypeScript SDK as a host, a person in the terminal, https -------------------------

/// The TypeScript SDK's client (`@modelcontextprotocol/client`, tests/mcp-clients/ts-host.mjs)
/// as the host, with `env` set.
fn ts_host(
    url: &str,
    tool: &str,
    args: serde_json::Value,
    env: &[(&str, &Path)],
) -> (i32, serde_json::Value) {
    let mut cmd = Command::new(clients_bin("node"));
    cmd.arg(repo().join("tests/mcp-clients/ts-host.mjs"))
        .args([url, tool, &args.to_string()]);
    cmd.envs(env.iter().copied());
    host_output("TypeScript", cmd)
}

#[test]
fn the_typescript_sdk_calls_an_allowed_tool_and_a_proposed_one_approved_then_rejected() {
    let (_dir, gw) = space("typescript");
    let url = format!("http://{}/mcp", gw.addr);
    allowed_approved_rejected(&gw.addr, |tool, args| ts_host(&url, tool, args, &[]));
}

/// The person approves in `mew client` (the terminal interface) while the TypeScript host's
/// call waits, and the host gets the tool's result; the next call the person rejects with a
/// reason typed there, and the host's call ends with -32004 and that reason.
#[test]
fn a_person_approves_and_rejects_in_the_terminal_while_the_host_waits() {
    let (_dir, gw) = space("terminal");
    let addr = gw.addr.clone();
    let url = format!("http://{addr}/mcp");
    let tmux = Tmux::new(format!("mew-front-tui-{}", std::process::id()), "ui");
    let client = format!("{MEW} client --gateway ws://{addr} --space front");
    tmux.start(120, 40, &["MEW_TOKEN=human-token"], &[&client]);
    tmux.until("joined as human");

    let host = std::thread::spawn({
        let url = url.clone();
        move || ts_host(&url, "get-sum", serde_json::json!({"a": 30, "b": 12}), &[])
    });
    let s = tmux.until("y approve once");
    assert!(
        s.contains("desk proposes tools/call get-sum on every"),
        "{s}"
    );
    assert!(s.contains("\"a\": 30"), "{s}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(!host.is_finished(), "the host waits for the person");
    tmux.keys(&["y"]);
    let (code, out) = host.join().unwrap();
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["content"][0]["text"], "The sum of 30 and 12 is 42.");
    tmux.until("The sum of 30 and 12 is 42.");

    let host = std::thread::spawn({
        let url = url.clone();
        move || ts_host(&url, "get-sum", serde_json::json!({"a": 1, "b": 2}), &[])
    });
    let s = tmux.until("\"a\": 1,");
    assert!(s.contains("y approve once"), "{s}");
    tmux.keys(&["n"]);
    tmux.until("reason:");
    tmux.keys(&["-l", "use the calculator on the desk"]);
    tmux.keys(&["Enter"]);
    let (code, out) = host.join().unwrap();
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["code"], -32004, "{out}");
    assert!(
        out["error"]
            .as_str()
            .unwrap_or("")
            .contains("use the calculator on the desk"),
        "{out}"
    );
    tmux.keys(&["C-c"]);
}

/// GET `url` with Node's fetch trusting `ca`: status and body.
fn node_get(url: &str, token: &str, ca: &Path) -> (u16, String) {
    let out = Command::new(clients_bin("node"))
        .args([
            "-e",
            "fetch(process.argv[1], {headers: process.argv[2] ? {authorization: 'Bearer ' + process.argv[2]} : {}})\
             .then(async r => console.log(r.status + ' ' + await r.text()))",
            url,
            token,
        ])
        .env("NODE_EXTRA_CA_CERTS", ca)
        .stdin(Stdio::null())
        .output()
        .expect("run node");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let (status, body) = text.split_once(' ').unwrap_or(("0", ""));
    (status.parse().unwrap_or(0), body.to_owned())
}

/// The space of `space()` served over TLS with a JWT issuer: the TypeScript and the Python
/// hosts call over https trusting the test CA, and the protected resource metadata names the
/// https resource.
#[test]
fn hosts_call_over_https_and_the_metadata_names_an_https_resource() {
    let dir = Scratch::new("front", "https");
    mew_tests::pki::make(&dir, &["localhost", "127.0.0.1"]);
    // A real key of the issuer: the metadata is served once the space takes its JWTs.
    mew_tests::pki::es256_jwks(&dir.join("jwks.json"));
    let yaml = space_yaml(
        "  tls: {cert: cert.pem, key: key.pem}\n  auth:\n    jwt: {issuer: \"https://idp.test\", audience: mew-mcp, jwks_file: jwks.json}\n  mcp: {loopback_as: desk}\n",
    );
    let mut cmd = gateway_cmd(&dir, &yaml);
    // The bridge the space starts joins over wss and trusts the test CA (inherited).
    cmd.env("MEW_CA_FILE", dir.join("ca.pem"));
    let gw = mew_tests::process::MewGateway::start(cmd);
    let addr = gw.addr.clone();
    let port = addr.rsplit(':').next().unwrap();
    let base = format!("https://localhost:{port}");
    let ca = dir.join("ca.pem");

    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = node_get(&format!("{base}/participants"), "human-token", &ca);
        if body.contains(r#""id":"every","online":true"#) {
            break;
        }
        assert!(Instant::now() < end, "the bridge did not join: {body}");
        std::thread::sleep(Duration::from_millis(200));
    }

    let url = format!("{base}/mcp");
    let (code, out) = ts_host(
        &url,
        "echo",
        serde_json::json!({"message": "over tls"}),
        &[("NODE_EXTRA_CA_CERTS", &ca)],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["content"][0]["text"], "Echo: over tls");
    // Without the CA the host refuses the certificate.
    let bare = Command::new(clients_bin("node"))
        .arg(repo().join("tests/mcp-clients/ts-host.mjs"))
        .args([&url, "echo", r#"{"message":"x"}"#])
        .env_remove("NODE_EXTRA_CA_CERTS")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ne!(bare.status.code(), Some(0));

    let (code, result) = python_host(
        &url,
        "echo",
        serde_json::json!({"message": "python over tls"}),
        &[("SSL_CERT_FILE", &ca)],
    );
    assert_eq!(code, 0, "{result}");
    assert_eq!(result["content"][0]["text"], "Echo: python over tls");

    let (status, body) = node_get(
        &format!("{base}/.well-known/oauth-protected-resource/mcp"),
        "",
        &ca,
    );
    assert_eq!(status, 200, "{body}");
    let prm: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(prm["resource"], format!("{base}/mcp"), "{prm}");
    assert_eq!(
        prm["authorization_servers"],
        serde_json::json!(["https://idp.test"])
    );
}

/// A host without credentials at a space taking JWTs is told where the protected resource
/// metadata is by an absolute URL (RFC 9728: hosts parse it as a URL), and the document there
/// names the endpoint by the same origin.
#[test]
fn the_challenge_names_the_resource_metadata_by_an_absolute_url() {
    let dir = Scratch::new("front", "challenge");
    mew_tests::pki::es256_jwks(&dir.join("jwks.json"));
    let yaml = r#"space: {id: front}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
gateway:
  durability: off
  auth:
    jwt: {issuer: "https://idp.test", audience: mew-mcp, jwks_file: jwks.json}
"#;
    let gw = gateway_of(&dir, yaml);
    let (status, head, _) = post(&gw.addr, "", INIT);
    assert_eq!(status, 401, "{head}");
    let challenge = head
        .lines()
        .find_map(|l| l.strip_prefix("WWW-Authenticate: "))
        .unwrap_or_else(|| panic!("no challenge: {head}"));
    let url = format!(
        "http://{}/.well-known/oauth-protected-resource/mcp",
        gw.addr
    );
    assert_eq!(challenge, format!("Bearer resource_metadata=\"{url}\""));
    let (status, body) = mew_tests::http::exchange(
        &gw.addr,
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        "",
        "",
    );
    assert_eq!(status, 200, "{body}");
    let prm: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(prm["resource"], format!("http://{}/mcp", gw.addr), "{prm}");
    assert_eq!(prm["authorization_servers"][0], "https://idp.test", "{prm}");
}
