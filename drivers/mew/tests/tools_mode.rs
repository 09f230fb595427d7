//! Tools mode end to end: `mew agent --mcp` served to real MCP clients (the MCP Inspector CLI,
//! the official conformance suite behind supergateway, the project's own bridge, and a
//! JSON-RPC client over the child's stdio), its model a local chat-completions server that
//! replays scripted turns, and in a real space (`mew gateway`) whose participants it uses
//! and serves.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mew_core::participant::{ClientState, ParticipantConfig, RequestOptions, ToolSpec};
use mew_tests::model_server::{ModelServer, Turn, last_user_text};
use mew_tests::process::MewGateway;
use mew_tests::scratch::Scratch;
use mew_tokio::ParticipantRuntime;
use serde_json::{Value, json};

const MEW: &str = env!("CARGO_BIN_EXE_mew");
const SPACE: &str = "tools-e2e";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture() -> PathBuf {
    repo()
        .join("tests/fixtures/tools-agent/tools-agent.yaml")
        .canonicalize()
        .unwrap()
}

/// A tool of the MCP test clients' folder (`npm ci` in tests/mcp-clients).
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

/// The fixture with extra settings prepended (connection, retries).
fn config_with(dir: &Path, extra: &str) -> PathBuf {
    let text = std::fs::read_to_string(fixture()).unwrap();
    let path = dir.join("tools-agent.yaml");
    std::fs::write(&path, format!("{extra}\n{text}")).unwrap();
    path
}

/// `node <inspector> --cli ... -- mew agent --mcp`: its exit code and its JSON output.
fn inspector(config: &Path, model: &ModelServer, args: &[&str]) -> (i32, Value) {
    let out = Command::new(clients_bin("node"))
        .arg(clients_bin("mcp-inspector"))
        .arg("--cli")
        .arg("-e")
        .arg(format!("MEW_AGENT_CONFIG={}", config.display()))
        .arg("-e")
        .arg(format!("OPENAI_BASE_URL={}", model.base_url))
        .args(args)
        .arg("--")
        .args([MEW, "agent", "--mcp", "--log-level", "warn"])
        .stdin(Stdio::null())
        .output()
        .expect("run the inspector");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("inspector output is not JSON ({e}): {stdout}"));
    (out.status.code().unwrap_or(-1), json)
}

fn result_text(v: &Value) -> &str {
    v["content"][0]["text"].as_str().unwrap_or_default()
}

#[test]
fn the_inspector_lists_calls_and_sees_each_invalid_argument_refused() {
    let dir = Scratch::space("tools", "inspector");
    let config = config_with(&dir, "model_retries: 0");
    let model = ModelServer::start(vec![Turn::text("Oslo: sunny, 21°C for three days.")]);

    let (code, listed) = inspector(&config, &model, &["--method", "tools/list"]);
    assert_eq!(code, 0, "{listed}");
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["forecast", "packing_list"]);
    let forecast = &listed["tools"][0];
    assert_eq!(
        forecast["description"],
        "The weather forecast for a city, in plain words."
    );
    assert_eq!(forecast["inputSchema"]["required"], json!(["city"]));
    assert_eq!(forecast["inputSchema"]["properties"]["days"]["maximum"], 7);

    let (code, answer) = inspector(
        &config,
        &model,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "forecast",
            "--tool-arg",
            "city=Oslo",
            "days=3",
        ],
    );
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["isError"], false);
    assert_eq!(result_text(&answer), "Oslo: sunny, 21°C for three days.");
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        last_user_text(&requests[0].body),
        "Give the 3-day forecast for Oslo (units: {units}). Use a weather tool if one is available."
    );

    // Each kind of invalid argument is refused before the model is asked, naming the field
    // and the rule.
    let cases: [(&[&str], &str, &str); 7] = [
        (&["city=X"], "city", "minLength"),
        (&["city=Oslo", "days=9"], "days", "maximum"),
        (&["city=Oslo", "days=0"], "days", "minimum"),
        (&["city=Oslo", "days=2.5"], "days", "type"),
        (&["city=Oslo", "units=kelvin"], "units", "enum"),
        (&["days=2"], "the arguments", "required"),
        (
            &["city=Oslo", "wind=strong"],
            "wind",
            "additionalProperties",
        ),
    ];
    let handles: Vec<_> = cases
        .iter()
        .map(|(args, field, rule)| {
            let (config, model) = (config.clone(), model.clone());
            let mut a = vec![
                "--method",
                "tools/call",
                "--tool-name",
                "forecast",
                "--tool-arg",
            ];
            a.extend_from_slice(args);
            let a: Vec<String> = a.iter().map(|s| s.to_string()).collect();
            let (field, rule) = (field.to_string(), rule.to_string());
            std::thread::spawn(move || {
                let a: Vec<&str> = a.iter().map(String::as_str).collect();
                let (code, out) = inspector(&config, &model, &a);
                (code, out, field, rule)
            })
        })
        .collect();
    for h in handles {
        let (code, out, field, rule) = h.join().unwrap();
        assert_ne!(code, 0, "a tool error is a failure to the inspector: {out}");
        assert_eq!(out["isError"], true, "{out}");
        let text = result_text(&out);
        assert!(
            text.contains(&format!("`{rule}`")) && text.contains(&field),
            "{field}/{rule}: {text}"
        );
    }
    assert_eq!(model.served(), 1, "no invalid call reached the model");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_conformance_suite_passes_through_supergateway() {
    let model = ModelServer::start(vec![]);
    let port = free_port();
    let node = clients_bin("node");
    let server = format!("{MEW} agent --mcp --log-level warn");
    let _gateway = Killed(
        Command::new(&node)
            .arg(clients_bin("supergateway"))
            .args(["--stdio", &server, "--outputTransport", "streamableHttp"])
            .args(["--port", &port.to_string()])
            .env("MEW_AGENT_CONFIG", fixture())
            .env("OPENAI_BASE_URL", &model.base_url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run supergateway"),
    );
    let end = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < end, "supergateway did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    for scenario in [
        "server-initialize",
        "ping",
        "tools-list",
        "logging-set-level",
    ] {
        let out = Command::new(&node)
            .arg(clients_bin("conformance"))
            .args(["server", "--url", &format!("http://127.0.0.1:{port}/mcp")])
            .args(["--scenario", scenario])
            .stdin(Stdio::null())
            .output()
            .expect("run the conformance suite");
        let text = String::from_utf8_lossy(&out.stdout);
        // Every check passed: the scenario's own, and the suite's checks of every message
        // against the schema of the negotiated revision (`wire-schema-valid`).
        let all_passed = text.lines().any(|l| {
            l.strip_prefix("Passed: ")
                .and_then(|rest| rest.split_once(", 0 failed"))
                .and_then(|(counts, _)| counts.split_once('/'))
                .is_some_and(|(n, of)| n == of && n != "0")
        });
        assert!(
            out.status.success() && all_passed && text.contains("wire-schema-valid"),
            "{scenario}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `mew agent --mcp` driven over its own stdio by a JSON-RPC client.
struct StdioClient {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Value>,
    next_id: u64,
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl StdioClient {
    fn start(config: &Path, model: &ModelServer) -> StdioClient {
        let mut child = Command::new(MEW)
            .args(["agent", "--mcp", "--log-level", "warn", "--config"])
            .arg(config)
            .env("OPENAI_BASE_URL", &model.base_url)
            .env_remove("MEW_GATEWAY")
            .env_remove("MEW_SPACE")
            .env_remove("MEW_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run mew agent --mcp");
        let stdin = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout holds a non-JSON line ({e}): {line}"));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let mut c = StdioClient {
            child,
            stdin,
            lines,
            next_id: 0,
        };
        let r = c.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "e2e", "version": "1"}}),
        );
        assert_eq!(r["result"]["protocolVersion"], "2025-06-18");
        c.notify("notifications/initialized", json!({}));
        c
    }

    fn write(&mut self, v: Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.write(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.write(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The first line that satisfies `f`, from `seen` or read next (lines read that do
    /// not are kept in `seen`).
    fn until(&self, within: Duration, seen: &mut Vec<Value>, f: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = seen.iter().position(&f) {
            return seen.remove(i);
        }
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let v = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no matching line; saw {seen:#?}"));
            if f(&v) {
                return v;
            }
            seen.push(v);
        }
    }

    fn response(&self, id: u64, seen: &mut Vec<Value>) -> Value {
        self.until(Duration::from_secs(30), seen, |v| v["id"] == id)
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        self.response(id, &mut Vec::new())
    }
}

fn call(city: &str) -> Value {
    json!({"name": "forecast", "arguments": {"city": city}})
}

#[test]
fn concurrent_calls_keep_apart_a_cancelled_one_goes_unanswered() {
    let dir = Scratch::space("tools", "stdio");
    let config = config_with(&dir, "model_retries: 0");
    // Each call's answer is made from its own prompt; the third is slow enough to cancel.
    let echo = || {
        Turn::computed(|body| {
            let prompt = last_user_text(body);
            let city = prompt
                .split(" for ")
                .nth(1)
                .and_then(|s| s.split(' ').next())
                .unwrap_or("?")
                .to_owned();
            let users = body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "user")
                .count();
            Turn::Text(format!("Forecast for {city} ({users} user message)"))
        })
    };
    let slow = Turn::Slow(
        Duration::from_millis(1500),
        Box::new(Turn::text("too late")),
    );
    let model = ModelServer::start(vec![echo(), echo(), slow, echo()]);
    let mut c = StdioClient::start(&config, &model);

    let a = c.send("tools/call", call("Oslo"));
    let b = c.send("tools/call", call("Rome"));
    let mut seen = Vec::new();
    let ra = c.response(a, &mut seen);
    let rb = c.response(b, &mut seen);
    assert_eq!(
        result_text(&ra["result"]),
        "Forecast for Oslo (1 user message)"
    );
    assert_eq!(
        result_text(&rb["result"]),
        "Forecast for Rome (1 user message)"
    );

    let slow_id = c.send("tools/call", call("Lima"));
    let end = Instant::now() + Duration::from_secs(10);
    while model.requests().len() < 3 {
        assert!(
            Instant::now() < end,
            "the slow call never reached the model"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    c.notify(
        "notifications/cancelled",
        json!({"requestId": slow_id, "reason": "changed my mind"}),
    );
    // The agent still serves: a ping and another call are answered, and by the time the
    // slow reply has come and gone the cancelled call has had no answer.
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));
    let d = c.send("tools/call", call("Kyiv"));
    let mut seen = Vec::new();
    let rd = c.response(d, &mut seen);
    assert_eq!(
        result_text(&rd["result"]),
        "Forecast for Kyiv (1 user message)"
    );
    std::thread::sleep(Duration::from_millis(1800));
    let p = c.request("ping", json!({}));
    assert_eq!(p["result"], json!({}));
    while let Ok(v) = c.lines.try_recv() {
        seen.push(v);
    }
    assert!(
        !seen.iter().any(|v| v["id"] == slow_id),
        "a cancelled call was answered: {seen:#?}"
    );
    assert_eq!(model.served(), 4);

    // Stdin closed: the server exits by itself.
    drop(std::mem::replace(&mut c.stdin, {
        let mut dummy = Command::new("true").stdin(Stdio::piped()).spawn().unwrap();
        let s = dummy.stdin.take().unwrap();
        let _ = dummy.wait();
        s
    }));
    let end = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = c.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < end,
            "mew agent --mcp did not exit when stdin closed"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
}

#[test]
fn a_call_while_the_model_endpoint_fails_is_a_tool_error() {
    let dir = Scratch::space("tools", "failing");
    let config = config_with(&dir, "model_retries: 1");
    let model = ModelServer::start(vec![Turn::Status(503, Some(0)), Turn::Status(503, Some(0))]);
    let mut c = StdioClient::start(&config, &model);
    let r = c.request("tools/call", call("Oslo"));
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = result_text(&r["result"]);
    assert!(
        text.starts_with("The agent could not complete this") && text.contains("503"),
        "{text}"
    );
    assert!(text.contains("after 2 attempts"), "{text}");
    assert_eq!(model.served(), 2);
}

fn participant(addr: &str, token: &str) -> ParticipantConfig {
    ParticipantConfig {
        gateway_url: format!("ws://{addr}/ws?space={SPACE}"),
        space: SPACE.into(),
        token: token.into(),
        ..ParticipantConfig::default()
    }
}

fn space(dir: &Path, extra: &str) -> MewGateway {
    let yaml = format!(
        r#"space: {{id: {SPACE}}}
participants:
  human: {{tokens: [human-token], capabilities: [{{kind: "*"}}]}}
  weather-service:
    tokens: [weather-token]
    capabilities: [{{kind: mcp/response}}, {{kind: chat}}]
  desk:
    tokens: [desk-token]
    capabilities:
      - {{kind: mcp/response}}
      - {{kind: chat}}
      - {{kind: mcp/request, payload: {{method: tools/list}}}}
      - {{kind: mcp/request, payload: {{method: tools/call, params: {{name: get_weather}}}}}}
      - {{kind: mcp/proposal}}
{extra}"#
    );
    let path = dir.join(".mew/space.yaml");
    std::fs::write(&path, yaml).unwrap();
    let mut cmd = Command::new(MEW);
    cmd.args(["gateway", "--port", "0", "--log-level", "warn", "--config"])
        .arg(&path)
        .current_dir(dir)
        .stderr(Stdio::inherit());
    MewGateway::start(cmd)
}

async fn weather_service(addr: &str) -> ParticipantRuntime {
    let (rt, _events) = ParticipantRuntime::start(participant(addr, "weather-token"), Some(3));
    rt.register_tool(
        ToolSpec {
            name: "get_weather".into(),
            description: Some("Current weather of a city".into()),
            input_schema: Some(json!({"type": "object", "required": ["location"],
                "properties": {"location": {"type": "string"}}})),
        },
        |args: Value| async move {
            let city = args["location"].as_str().unwrap_or("?").to_owned();
            Ok(json!({"content": [{"type": "text", "text": format!("{city}: 22°C, partly cloudy")}]}))
        },
    )
    .await
    .unwrap()
    .unwrap();
    // In the space before the agent comes, so that its welcome lists the service.
    let end = Instant::now() + Duration::from_secs(10);
    while rt.with(|p, _| p.state()).await.unwrap() != ClientState::Ready {
        assert!(Instant::now() < end, "the weather service did not join");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rt
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_uses_a_tool_of_the_space_and_the_space_can_call_the_agent() {
    let dir = Scratch::space("tools", "space");
    let gw = space(&dir, "");
    let _weather = weather_service(&gw.addr).await;
    let config = config_with(
        &dir,
        &format!(
            "gateway: ws://{}\nspace: {SPACE}\ntoken: desk-token\nid: desk\nmodel_retries: 0\n",
            gw.addr
        ),
    );
    let model = ModelServer::start(vec![
        Turn::call(
            "c1",
            "weather-service__get_weather",
            json!({"location": "Oslo"}),
        ),
        Turn::text("Oslo: 22°C and partly cloudy today."),
        Turn::text("Pack a raincoat for Bergen."),
    ]);
    let mut c = StdioClient::start(&config, &model);

    // Over MCP, with a progress token: the agent calls the weather service in the space.
    let id = c.send(
        "tools/call",
        json!({"name": "forecast", "arguments": {"city": "Oslo"}, "_meta": {"progressToken": "p"}}),
    );
    let mut seen = Vec::new();
    let r = tokio::task::block_in_place(|| c.response(id, &mut seen));
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(
        result_text(&r["result"]),
        "Oslo: 22°C and partly cloudy today."
    );
    let progress: Vec<&Value> = seen
        .iter()
        .filter(|v| v["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 1, "{seen:#?}");
    assert_eq!(progress[0]["params"]["progressToken"], "p");
    assert_eq!(progress[0]["params"]["progress"], 1);
    assert_eq!(
        progress[0]["params"]["message"],
        "Calling weather-service/get_weather"
    );
    let requests = model.requests();
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["weather-service__get_weather"]);
    let observation = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .clone();
    assert_eq!(observation, "Oslo: 22°C, partly cloudy");

    // The same tools in the space: a person calls `packing_list` on `desk`.
    let (human, _events, _) =
        ParticipantRuntime::connect(participant(&gw.addr, "human-token"), Some(9))
            .await
            .expect("the human joins");
    let answer = human
        .mcp_request(
            vec!["desk".into()],
            json!({"method": "tools/call", "params": {"name": "packing_list",
                   "arguments": {"destination": "Bergen", "nights": 2}}}),
            RequestOptions::default(),
        )
        .await
        .expect("desk answers");
    assert_eq!(answer["isError"], false, "{answer}");
    assert_eq!(result_text(&answer), "Pack a raincoat for Bergen.");
    let last = model.requests();
    assert_eq!(
        last_user_text(&last[2].body),
        "packing_list: list what to pack for 2 nights in Bergen; also {extras}. Write {braces} literally."
    );
    // Checked by the same schema in the space: nights must be at least 1.
    let refused = human
        .mcp_request(
            vec!["desk".into()],
            json!({"method": "tools/call", "params": {"name": "packing_list",
                   "arguments": {"destination": "Bergen", "nights": 0}}}),
            RequestOptions::default(),
        )
        .await
        .expect_err("refused");
    assert!(refused.to_string().contains("minimum"), "{refused}");
    assert_eq!(model.served(), 3);
    drop(c);
    drop(gw);
}

/// One JSON-RPC request to the space's `/mcp` over raw HTTP (on loopback, as `host`): the
/// JSON-RPC response, from a JSON body or an SSE stream.
fn front_post(addr: &str, session: Option<&str>, body: Value) -> (Option<String>, Value) {
    use std::io::Read;
    let body = body.to_string();
    let session_header = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMcp-Protocol-Version: 2025-11-25\r\n"))
        .unwrap_or_default();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{session_header}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    assert!(head.starts_with("HTTP/1.1 200"), "{out}");
    let session = head
        .lines()
        .find_map(|l| l.strip_prefix("Mcp-Session-Id: "))
        .map(|s| s.trim().to_owned());
    let response = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .chain(std::iter::once(body))
        .filter_map(|t| serde_json::from_str::<Value>(t.trim()).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC response in {out}"));
    (session, response)
}

/// Tools mode over HTTP is the space's `/mcp` fronting a tools-mode agent: `mew agent --mcp`
/// joined to a space, and a host at `/mcp` listing its tools and calling one, the agent's
/// model writing the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_at_the_spaces_mcp_endpoint_calls_a_tools_mode_agent() {
    let dir = Scratch::space("tools", "front");
    let gw = space(
        &dir,
        "  host:\n    tokens: [host-token]\n    capabilities: [{kind: mcp/request}]\ngateway:\n  mcp: {loopback_as: host}\n",
    );
    let config = config_with(
        &dir,
        &format!(
            "gateway: ws://{}\nspace: {SPACE}\ntoken: desk-token\nid: desk\nmodel_retries: 0\n",
            gw.addr
        ),
    );
    let model = ModelServer::start(vec![Turn::text("Pack a raincoat for Bergen.")]);
    let c = StdioClient::start(&config, &model);
    let addr = gw.addr.clone();
    tokio::task::block_in_place(|| {
        let (session, init) = front_post(
            &addr,
            None,
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}}),
        );
        assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
        let session = session.expect("a session id");
        // The agent's tools are the host's once it has joined.
        let end = Instant::now() + Duration::from_secs(20);
        let tools = loop {
            let (_, r) = front_post(
                &addr,
                Some(&session),
                json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            );
            let tools = r["result"]["tools"].as_array().cloned().unwrap_or_default();
            if tools.iter().any(|t| t["name"] == "packing_list") {
                break tools;
            }
            assert!(
                Instant::now() < end,
                "the agent's tools are not listed: {r}"
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(names, ["forecast", "packing_list"]);
        let packing = tools.iter().find(|t| t["name"] == "packing_list").unwrap();
        assert_eq!(
            packing["inputSchema"]["required"],
            json!(["destination", "nights"])
        );

        let (_, r) = front_post(
            &addr,
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                "name": "packing_list", "arguments": {"destination": "Bergen", "nights": 2}}}),
        );
        assert_eq!(r["result"]["isError"], false, "{r}");
        assert_eq!(result_text(&r["result"]), "Pack a raincoat for Bergen.");
        assert_eq!(
            last_user_text(&model.requests()[0].body),
            "packing_list: list what to pack for 2 nights in Bergen; also {extras}. Write {braces} literally."
        );
        // The agent's own schema holds at the endpoint too.
        let (_, r) = front_post(
            &addr,
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
                "name": "packing_list", "arguments": {"destination": "Bergen", "nights": 0}}}),
        );
        let refused = r.to_string();
        assert!(refused.contains("minimum"), "{r}");
    });
    assert_eq!(model.served(), 1);
    drop(c);
    drop(gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_brings_mew_agent_mcp_into_a_space() {
    let dir = Scratch::space("tools", "bridge");
    let model = ModelServer::start(vec![Turn::text("Rome: 25°C, clear skies.")]);
    let gw = space(
        &dir,
        &format!(
            r#"  weather-desk:
    type: mcp-bridge
    auto_start: true
    tokens: [weather-desk-token]
    capabilities: [{{kind: mcp/response}}, {{kind: chat}}, {{kind: participant/status}}]
    mcp_server:
      command: {MEW}
      args: [agent, --mcp, --log-level, warn]
      env: {{MEW_AGENT_CONFIG: "{}", OPENAI_BASE_URL: "{}"}}
"#,
            fixture().display(),
            model.base_url
        ),
    );
    let (human, _events, _) =
        ParticipantRuntime::connect(participant(&gw.addr, "human-token"), Some(5))
            .await
            .expect("the human joins");
    // The bridge lists the agent's tools to the space once the agent is up.
    let end = Instant::now() + Duration::from_secs(30);
    let listed = loop {
        let r = human
            .mcp_request(
                vec!["weather-desk".into()],
                json!({"method": "tools/list"}),
                // Asked before the bridge joins, a request is never answered: ask again.
                RequestOptions {
                    timeout: Some(Duration::from_secs(1)),
                    ..RequestOptions::default()
                },
            )
            .await;
        if let Ok(v) = r
            && v["tools"].as_array().is_some_and(|t| !t.is_empty())
        {
            break v;
        }
        assert!(
            Instant::now() < end,
            "the bridged agent never listed its tools"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["forecast", "packing_list"]);
    let answer = human
        .mcp_request(
            vec!["weather-desk".into()],
            json!({"method": "tools/call", "params": {"name": "forecast",
                   "arguments": {"city": "Rome", "days": 2}}}),
            RequestOptions::default(),
        )
        .await
        .expect("the bridged agent answers");
    assert_eq!(result_text(&answer), "Rome: 25°C, clear skies.");
    assert_eq!(
        last_user_text(&model.requests()[0].body),
        "Give the 2-day forecast for Rome (units: {units}). Use a weather tool if one is available."
    );
    drop(gw);
}

#[test]
fn invalid_configurations_are_reported_whole_and_exit_2() {
    let dir = Scratch::space("tools", "invalid");
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        r#"max_iterations: 0
metadata:
  name: Broken desk
  tools:
    - name: forecast
      description: d
      parameters:
        type: object
        properties: {days: {type: integer, minimum: 5, maximum: 1}}
        required: [city]
      prompt: "Forecast for {city}"
    - name: forecast
      description: again
      prompt: x
"#,
    )
    .unwrap();
    let out = Command::new(MEW)
        .args(["tools", "check", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    for expected in [
        "metadata.tools[0].parameters.properties.days.minimum: greater than `maximum`",
        "metadata.tools[0].parameters.required[0]: `city` is not one of the properties",
        "metadata.tools[1].name: `forecast` is defined twice",
        "max_iterations: must be at least 1",
    ] {
        assert!(
            lines.iter().any(|l| l.ends_with(expected)),
            "{expected} not in {stdout}"
        );
    }
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("4 problem(s)"));

    let json_out = Command::new(MEW)
        .args(["tools", "check", "--json", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(json_out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["problems"].as_array().unwrap().len(), 4);

    // The agent refuses to start on the same file, in one line.
    let out = Command::new(MEW)
        .args(["agent", "--mcp", "--config"])
        .arg(&bad)
        .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("defined twice"), "{err}");

    // `--mcp` with no tools to serve.
    let plain = dir.join("plain.yaml");
    std::fs::write(&plain, "model: m\n").unwrap();
    let out = Command::new(MEW)
        .args(["agent", "--mcp", "--config"])
        .arg(&plain)
        .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("metadata.tools"));

    // The good fixture checks clean, and previews a call.
    let out = Command::new(MEW)
        .args(["tools", "check", "--config"])
        .arg(fixture())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok, 2 tool(s): forecast, packing_list"));
    let out = Command::new(MEW)
        .args(["tools", "preview", "--tool", "packing_list", "--config"])
        .arg(fixture())
        .args([
            "--arg",
            "destination=Lisbon",
            "--arg",
            "extras=[\"hat\",\"book\"]",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        "packing_list: list what to pack for {nights} nights in Lisbon; also [\"hat\",\"book\"]. Write {braces} literally."
    );
    let out = Command::new(MEW)
        .args(["tools", "preview", "--tool", "packing_list", "--config"])
        .arg(fixture())
        .args(["--arg", "nights=many"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nights: \"many\" is not an integer"));
}
