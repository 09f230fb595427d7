//! `McpClient` against real MCP servers from npm (tests/mcp-servers), driven by a small
//! blocking driver: a child process with piped stdio, a reader thread per stream, real time.

use mew_core::Time;
use mew_core::mcp::{
    ExitStatus, McpCallId, McpClient, McpConfig, McpError, McpEvent, Output, Phase,
    ProtocolVersion, RestartBackoff, Root,
};
use mew_tests::scratch::Scratch;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime};

const WAIT: Duration = Duration::from_secs(20);

fn servers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp-servers")
}

/// The entry script of an installed npm package; fails loudly when `npm ci` was not run.
fn server_script(package: &str) -> String {
    let script = servers_dir()
        .join("node_modules")
        .join(package)
        .join("dist/index.js");
    assert!(
        script.is_file(),
        "MCP test servers are not installed ({} missing): run `npm ci` in tests/mcp-servers",
        script.display()
    );
    script.to_string_lossy().into_owned()
}

fn now() -> Time {
    Time::from_system_time(SystemTime::now())
}

/// What to run.
#[derive(Clone)]
struct ServerCommand {
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl ServerCommand {
    fn new(program: &str, args: &[&str]) -> Self {
        ServerCommand {
            program: program.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
        }
    }

    fn node(package: &str, args: &[&str]) -> Self {
        let mut all = vec![server_script(package)];
        all.extend(args.iter().map(|s| s.to_string()));
        ServerCommand {
            program: "node".into(),
            args: all,
            env: Vec::new(),
        }
    }

    fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
}

enum Io {
    Stdout(u64, Vec<u8>),
    Stderr(u64, Vec<u8>),
    StdoutClosed(u64),
}

/// The blocking test driver.
struct Driver {
    client: McpClient,
    command: ServerCommand,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    generation: u64,
    tx: Sender<Io>,
    rx: Receiver<Io>,
    events: VecDeque<McpEvent>,
    history: Vec<String>,
    spawns: usize,
}

impl Driver {
    fn new(command: ServerCommand, config: McpConfig) -> Self {
        let (tx, rx) = mpsc::channel();
        Driver {
            client: McpClient::new(config),
            command,
            child: None,
            stdin: None,
            generation: 0,
            tx,
            rx,
            events: VecDeque::new(),
            history: Vec::new(),
            spawns: 0,
        }
    }

    /// Starts and waits for the first `Ready`.
    fn started(command: ServerCommand, config: McpConfig) -> Self {
        let mut d = Driver::new(command, config);
        d.client.start(now()).unwrap();
        d.flush();
        d.wait_for("Ready", WAIT, |e| {
            matches!(e, McpEvent::Ready(_)).then_some(())
        });
        d
    }

    fn flush(&mut self) {
        while let Some(out) = self.client.poll_output() {
            match out {
                Output::Spawn => self.spawn(),
                Output::Write(line) => {
                    // A dead child's pipe fails the write; its exit is reported separately.
                    if let Some(stdin) = self.stdin.as_mut() {
                        let _ = stdin.write_all(line.as_bytes());
                    }
                }
                Output::Kill { .. } => {
                    self.stdin = None;
                    if let Some(child) = self.child.as_mut() {
                        let _ = child.kill();
                    }
                }
                Output::Http(_) | Output::HttpAbort(_) => {
                    panic!("a stdio client made an HTTP exchange")
                }
                Output::Event(e) => {
                    self.history
                        .push(format!("{e:?}").chars().take(300).collect());
                    self.events.push_back(e);
                }
            }
        }
    }

    fn spawn(&mut self) {
        self.spawns += 1;
        let spawned = Command::new(&self.command.program)
            .args(&self.command.args)
            .envs(self.command.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match spawned {
            Ok(mut child) => {
                self.generation += 1;
                let generation = self.generation;
                self.stdin = child.stdin.take();
                let out = child.stdout.take().unwrap();
                let err = child.stderr.take().unwrap();
                self.child = Some(child);
                let tx = self.tx.clone();
                std::thread::spawn(move || {
                    let mut r = out;
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n) = r.read(&mut buf) {
                        if n == 0 || tx.send(Io::Stdout(generation, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                    let _ = tx.send(Io::StdoutClosed(generation));
                });
                let tx = self.tx.clone();
                std::thread::spawn(move || {
                    let mut r = err;
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n) = r.read(&mut buf) {
                        if n == 0 || tx.send(Io::Stderr(generation, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                });
                self.client.handle_spawned(now());
            }
            Err(e) => self
                .client
                .handle_spawn_failed(now(), format!("{}: {e}", self.command.program)),
        }
    }

    /// Waits for input or the client's next deadline, whichever comes first, and feeds it.
    fn step(&mut self, max_wait: Duration) {
        let mut wait = max_wait;
        if let Some(at) = self.client.poll_timeout() {
            wait = wait.min(at.saturating_since(now()));
        }
        match self.rx.recv_timeout(wait) {
            Ok(Io::Stdout(g, bytes)) if g == self.generation => {
                self.client.handle_stdout(now(), &bytes)
            }
            Ok(Io::Stderr(g, bytes)) if g == self.generation => {
                self.client.handle_stderr(now(), &bytes)
            }
            Ok(Io::StdoutClosed(g)) if g == self.generation => {
                self.stdin = None;
                if let Some(mut child) = self.child.take() {
                    let status = child.wait().expect("wait for the server");
                    self.client.handle_exited(now(), exit_status(status));
                }
            }
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => unreachable!("the driver holds a sender"),
        }
        if self.client.poll_timeout().is_some_and(|at| at <= now()) {
            self.client.handle_timeout(now());
        }
        self.flush();
    }

    /// Runs until `pick` accepts an event (earlier ones are consumed), or panics with what
    /// happened.
    fn wait_for<T>(
        &mut self,
        what: &str,
        limit: Duration,
        mut pick: impl FnMut(&McpEvent) -> Option<T>,
    ) -> T {
        let end = Instant::now() + limit;
        loop {
            while let Some(e) = self.events.pop_front() {
                if let Some(t) = pick(&e) {
                    return t;
                }
            }
            let left = end.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no {what} within {limit:?}; events so far:\n{}",
                self.history.join("\n")
            );
            self.step(left.min(Duration::from_millis(100)));
        }
    }

    /// Runs until `done` holds for the client.
    fn until(&mut self, what: &str, mut done: impl FnMut(&McpClient) -> bool) {
        let end = Instant::now() + WAIT;
        while !done(&self.client) {
            assert!(
                Instant::now() < end,
                "{what}: not within {WAIT:?}; events so far:\n{}",
                self.history.join("\n")
            );
            self.step(Duration::from_millis(100));
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value, McpError> {
        let id = self
            .client
            .call(now(), method, Some(params), Duration::from_secs(15))
            .expect("call accepted");
        self.flush();
        self.completion(id)
    }

    fn completion(&mut self, id: McpCallId) -> Result<Value, McpError> {
        self.wait_for("call completion", WAIT, |e| match e {
            McpEvent::CallCompleted { call_id, result } if *call_id == id => Some(result.clone()),
            _ => None,
        })
    }

    fn tool(&mut self, name: &str, arguments: Value) -> Value {
        self.call("tools/call", json!({"name": name, "arguments": arguments}))
            .unwrap_or_else(|e| panic!("{name} failed: {e}"))
    }

    fn tool_names(&self) -> Vec<String> {
        self.client
            .catalog()
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn exit_status(s: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    ExitStatus {
        code: s.code(),
        signal: s.signal(),
    }
}

fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .expect("content array")
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn config() -> McpConfig {
    McpConfig {
        init_timeout: Duration::from_secs(15),
        ..McpConfig::default()
    }
}

#[test]
fn filesystem_server_lists_reads_and_writes() {
    let dir = Scratch::new("mcp", "fs");
    std::fs::write(dir.join("hello.txt"), "hello from the test\nline two\n").unwrap();
    let mut d = Driver::started(
        ServerCommand::node(
            "@modelcontextprotocol/server-filesystem",
            &[dir.to_str().unwrap()],
        ),
        config(),
    );
    let names = d.tool_names();
    for expected in [
        "read_text_file",
        "write_file",
        "list_directory",
        "edit_file",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    let server = d.client.server().unwrap();
    assert_eq!(server.server_info["name"], "secure-filesystem-server");
    assert_eq!(server.protocol_version.as_str(), "2025-11-25");

    let read = d.tool(
        "read_text_file",
        json!({"path": dir.join("hello.txt").to_str().unwrap()}),
    );
    assert_eq!(text_of(&read), "hello from the test\nline two\n");

    let target = dir.join("written.txt");
    let wrote = d.tool(
        "write_file",
        json!({"path": target.to_str().unwrap(), "content": "written through MCP\n"}),
    );
    assert_ne!(wrote["isError"], true, "{wrote}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "written through MCP\n"
    );

    let listing = d.tool("list_directory", json!({"path": dir.to_str().unwrap()}));
    let listing = text_of(&listing);
    assert!(
        listing.contains("hello.txt") && listing.contains("written.txt"),
        "{listing}"
    );

    // A tool-level failure is a result with isError, passed through as such.
    let outside = d.tool("read_text_file", json!({"path": "/etc/hostname"}));
    assert_eq!(outside["isError"], true, "{outside}");
    assert!(text_of(&outside).contains("Access denied"), "{outside}");

    // An unknown tool is a tool-level failure in this SDK: a result with isError.
    let unknown = d.tool("no_such_tool", json!({}));
    assert_eq!(unknown["isError"], true, "{unknown}");
    assert!(
        text_of(&unknown).contains("no_such_tool not found"),
        "{unknown}"
    );

    // A protocol-level failure is the server's JSON-RPC error, passed through faithfully.
    let no_prompts = d.call("prompts/list", json!({}));
    assert!(
        matches!(&no_prompts, Err(McpError::Server(e)) if e.code == -32601 && e.message == "Method not found"),
        "{no_prompts:?}"
    );
}

#[test]
fn filesystem_server_takes_its_directory_from_our_roots() {
    let dir = Scratch::new("mcp", "roots");
    let uri = format!("file://{}", dir.display());
    let mut d = Driver::started(
        // No directory argument: the server asks the client with roots/list.
        ServerCommand::node("@modelcontextprotocol/server-filesystem", &[]),
        McpConfig {
            roots: vec![Root {
                uri,
                name: Some("scratch".into()),
            }],
            ..config()
        },
    );
    // The server applies the roots asynchronously after `initialized`; poll briefly.
    let end = Instant::now() + WAIT;
    loop {
        let allowed = text_of(&d.tool("list_allowed_directories", json!({})));
        if allowed.contains(dir.to_str().unwrap()) {
            break;
        }
        assert!(Instant::now() < end, "roots never applied: {allowed}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn memory_server_stores_and_reads_back() {
    let dir = Scratch::new("mcp", "memory");
    let file = dir.join("memory.jsonl");
    let mut d = Driver::started(
        ServerCommand::node("@modelcontextprotocol/server-memory", &[])
            .env("MEMORY_FILE_PATH", file.to_str().unwrap()),
        config(),
    );
    assert!(d.tool_names().iter().any(|n| n == "create_entities"));
    assert!(
        d.client
            .catalog()
            .resources
            .iter()
            .any(|r| r.uri == "memory://knowledge-graph"),
        "{:?}",
        d.client.catalog().resources
    );

    d.tool(
        "create_entities",
        json!({"entities":[{"name":"mew-rs","entityType":"project","observations":["speaks MCP over stdio"]}]}),
    );
    let opened = text_of(&d.tool("open_nodes", json!({"names":["mew-rs"]})));
    assert!(opened.contains("speaks MCP over stdio"), "{opened}");

    let graph = d
        .call("resources/read", json!({"uri":"memory://knowledge-graph"}))
        .unwrap();
    let text = graph["contents"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("mew-rs") && text.contains("speaks MCP over stdio"),
        "{text}"
    );
    assert!(std::fs::read_to_string(&file).unwrap().contains("mew-rs"));
}

#[test]
fn everything_server_tools_resources_and_prompts() {
    let mut d = Driver::started(
        ServerCommand::node("@modelcontextprotocol/server-everything", &[]),
        McpConfig {
            roots: vec![Root {
                uri: "file:///mew/root".into(),
                name: Some("mew".into()),
            }],
            ..config()
        },
    );
    let echo = d.tool("echo", json!({"message": "hello mew"}));
    assert_eq!(text_of(&echo), "Echo: hello mew");
    let sum = d.tool("get-sum", json!({"a": 2, "b": 40}));
    assert_eq!(text_of(&sum), "The sum of 2 and 40 is 42.");

    let def = d
        .client
        .catalog()
        .tool("get-structured-content")
        .cloned()
        .unwrap();
    assert!(def.definition.contains_key("outputSchema"));
    let structured = d.tool("get-structured-content", json!({"location": "Chicago"}));
    let sc = &structured["structuredContent"];
    assert!(
        sc["temperature"].is_number() && sc["conditions"].is_string(),
        "{structured}"
    );

    // The server registers get-roots-list because we declared roots (announcing it with
    // list_changed, which makes the client re-list), and asks us for them.
    d.until("get-roots-list is listed", |c| {
        c.catalog().tool("get-roots-list").is_some()
    });
    let listed = text_of(&d.tool("get-roots-list", json!({})));
    assert!(listed.contains("file:///mew/root"), "{listed}");

    let resources = d.client.catalog().resources.clone();
    assert!(resources.len() >= 7, "{resources:?}");
    let first = &resources[0];
    let read = d.call("resources/read", json!({"uri": first.uri})).unwrap();
    assert_eq!(read["contents"][0]["uri"], first.uri.as_str());
    assert!(!read["contents"][0]["text"].as_str().unwrap().is_empty());
    let missing = d.call("resources/read", json!({"uri": "demo://nope"}));
    assert!(matches!(missing, Err(McpError::Server(_))), "{missing:?}");

    let prompts: Vec<String> = d
        .client
        .catalog()
        .prompts
        .iter()
        .map(|p| p.name.clone())
        .collect();
    assert!(prompts.iter().any(|p| p == "simple-prompt"), "{prompts:?}");
    let got = d
        .call(
            "prompts/get",
            json!({"name": "args-prompt", "arguments": {"city": "Lyon", "state": "Rhone"}}),
        )
        .unwrap();
    assert_eq!(
        got["messages"][0]["content"]["text"],
        "What's weather in Lyon, Rhone?"
    );
}

#[test]
fn paginated_resources_are_followed_to_the_end() {
    // The 2025.11 release pages resources/list ten at a time over 100 resources.
    let d = Driver::started(
        ServerCommand::node("server-everything-2025-11", &[]),
        config(),
    );
    let uris: Vec<&str> = d
        .client
        .catalog()
        .resources
        .iter()
        .map(|r| r.uri.as_str())
        .collect();
    assert_eq!(uris.len(), 100);
    let expected: Vec<String> = (1..=100)
        .map(|i| format!("test://static/resource/{i}"))
        .collect();
    assert_eq!(uris, expected);
}

#[test]
fn a_crash_mid_call_fails_the_call_and_the_server_comes_back() {
    let mut d = Driver::started(
        ServerCommand::node("@modelcontextprotocol/server-everything", &[]),
        McpConfig {
            restart: RestartBackoff {
                initial_delay: Duration::from_millis(200),
                ..RestartBackoff::default()
            },
            ..config()
        },
    );
    let first_pid = d.child.as_ref().unwrap().id();
    let call = d
        .client
        .call(
            now(),
            "tools/call",
            Some(json!({"name":"trigger-long-running-operation","arguments":{"duration":30,"steps":3}})),
            Duration::from_secs(60),
        )
        .unwrap();
    d.flush();
    // Let the server start on it, then kill it from outside.
    let settle = Instant::now() + Duration::from_millis(300);
    while Instant::now() < settle {
        d.step(Duration::from_millis(50));
    }
    d.child.as_mut().unwrap().kill().unwrap();

    let outcome = d.completion(call);
    assert!(
        matches!(
            outcome,
            Err(McpError::ServerExited(ExitStatus {
                signal: Some(9),
                ..
            }))
        ),
        "{outcome:?}"
    );
    let (attempt, delay) = d.wait_for("Restarting", WAIT, |e| match e {
        McpEvent::Restarting { attempt, delay } => Some((*attempt, *delay)),
        _ => None,
    });
    assert_eq!((attempt, delay), (1, Duration::from_millis(200)));
    assert_eq!(d.client.phase(), Phase::Backoff);
    let relisted = d.wait_for("tools re-listed", WAIT, |e| match e {
        McpEvent::ToolsChanged(t) => Some(t.len()),
        _ => None,
    });
    assert!(relisted >= 13);
    d.wait_for("Ready again", WAIT, |e| {
        matches!(e, McpEvent::Ready(_)).then_some(())
    });
    assert_eq!(d.spawns, 2);
    assert_ne!(d.child.as_ref().unwrap().id(), first_pid);
    assert_eq!(
        text_of(&d.tool("echo", json!({"message":"back"}))),
        "Echo: back"
    );
}

/// Starts `command` with a short init timeout and no restarts; returns the failure reported
/// and how long it took.
fn failure_of(command: ServerCommand) -> (McpError, Duration) {
    let started = Instant::now();
    let mut d = Driver::new(
        command,
        McpConfig {
            init_timeout: Duration::from_millis(1500),
            restart: RestartBackoff::never(),
            ..McpConfig::default()
        },
    );
    d.client.start(now()).unwrap();
    d.flush();
    let failed = d.wait_for("Failed", Duration::from_secs(10), |e| match e {
        McpEvent::Failed(err) => Some(err.clone()),
        _ => None,
    });
    let gave_up = d.wait_for("GaveUp", Duration::from_secs(10), |e| match e {
        McpEvent::GaveUp { reason } => Some(reason.clone()),
        _ => None,
    });
    assert_eq!(failed, gave_up);
    assert_eq!(d.client.phase(), Phase::GaveUp);
    (failed, started.elapsed())
}

#[test]
fn commands_that_are_not_mcp_servers_fail_clearly_within_the_init_timeout() {
    let cases = [
        // cat sends our own initialize request back.
        (
            ServerCommand::new("cat", &[]),
            "sent our initialize request back",
        ),
        (
            ServerCommand::new("true", &[]),
            "exited (exit code 0) before completing",
        ),
        (
            ServerCommand::new("sh", &["-c", "echo hello"]),
            "exited (exit code 0) before completing",
        ),
        (
            ServerCommand::new("sleep", &["30"]),
            "did not answer initialize within 1500 ms",
        ),
    ];
    for (command, expected) in cases {
        let name = format!("{} {:?}", command.program, command.args);
        let (err, took) = failure_of(command);
        let msg = err.to_string();
        assert!(msg.contains(expected), "{name}: {msg}");
        assert!(took < Duration::from_secs(5), "{name}: took {took:?}");
        if let McpError::InitTimeout(t) = err {
            assert_eq!(t, Duration::from_millis(1500));
            assert!(took >= Duration::from_millis(1400), "{name}: took {took:?}");
        } else {
            assert!(took < Duration::from_secs(1), "{name}: took {took:?}");
        }
    }
}

#[test]
fn a_missing_command_fails_and_follows_the_restart_policy() {
    let mut d = Driver::new(
        ServerCommand::new("/nonexistent/mcp-server-does-not-exist", &[]),
        McpConfig {
            restart: RestartBackoff {
                max_reconnects: 2,
                initial_delay: Duration::from_millis(50),
                ..RestartBackoff::default()
            },
            ..McpConfig::default()
        },
    );
    d.client.start(now()).unwrap();
    d.flush();
    let reason = d.wait_for("GaveUp", WAIT, |e| match e {
        McpEvent::GaveUp { reason } => Some(reason.clone()),
        _ => None,
    });
    let McpError::SpawnFailed(msg) = &reason else {
        panic!("{reason:?}")
    };
    assert!(
        msg.contains("mcp-server-does-not-exist") && msg.contains("No such file"),
        "{msg}"
    );
    assert_eq!(d.spawns, 3);
    let restarts: Vec<&String> = d
        .history
        .iter()
        .filter(|h| h.starts_with("Restarting"))
        .collect();
    assert_eq!(restarts.len(), 2, "{restarts:?}");
}

#[test]
fn a_2025_server_is_reached_through_initialize_when_2026_is_offered() {
    // server-everything knows no server/discover: the client falls back to initialize and
    // speaks the newest session revision both share.
    let mut d = Driver::started(
        ServerCommand::node("@modelcontextprotocol/server-everything", &[]),
        McpConfig {
            protocol_version: ProtocolVersion::V2026_07_28,
            discover_timeout: Duration::from_secs(5),
            ..config()
        },
    );
    let started = d.client.protocol_version().unwrap();
    assert!(!started.is_stateless(), "{started}");
    assert!(started >= ProtocolVersion::V2025_06_18, "{started}");
    let sum = d.tool("get-sum", json!({"a": 2, "b": 40}));
    assert_eq!(text_of(&sum), "The sum of 2 and 40 is 42.");
}
