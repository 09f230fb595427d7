//! The MCP bridge end to end: a gateway on loopback, bridges to the real npm servers
//! (tests/mcp-servers), and participants that list and call tools through the space. Every
//! scenario runs twice: the bridge on tokio and on async-std (the gateway and the other
//! participants on tokio).

use std::path::Path;
use std::time::{Duration, Instant};

use mew_core::bridge::{BridgeConfig, Exit};
use mew_core::gateway::SpaceConfig;
use mew_core::mcp::{McpConfig, RestartBackoff};
use mew_core::participant::{Event, ParticipantConfig, RequestError, RequestOptions, Status};
use mew_tests::scratch::Scratch;
use mew_tokio::mcp_process::ServerCommand;
use mew_tokio::{
    BridgeHandle, CallError, GatewayServer, ParticipantRuntime, ServerOptions, ShutdownHandle,
    spawn_bridge,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const SPACE: &str = "bridge-e2e";
const WAIT: Duration = Duration::from_secs(30);

fn server_script(package: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("mcp-servers/node_modules")
        .join(package)
        .join("dist/index.js");
    assert!(
        script.is_file(),
        "MCP test servers are not installed ({} missing): run `npm ci` in tests/mcp-servers",
        script.display()
    );
    script.to_string_lossy().into_owned()
}

fn node(package: &str, args: &[&str]) -> ServerCommand {
    let mut all = vec![server_script(package)];
    all.extend(args.iter().map(|s| s.to_string()));
    ServerCommand::new("node", all)
}

/// A distinct seed per participant: equal seeds would draw equal envelope ids.
fn seed_of(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn space_yaml() -> String {
    let bridge = |id: &str| {
        format!(
            "  {id}:\n    type: mcp-bridge\n    tokens: [{id}-token]\n    capabilities: [{{kind: mcp/response}}, {{kind: participant/status}}, {{kind: chat}}, {{kind: chat/acknowledge}}, {{kind: participant/compact-done}}]\n    mcp_server: {{command: node}}\n"
        )
    };
    let mut y = format!(
        "space: {{id: {SPACE}}}\nparticipants:\n  human: {{tokens: [human-token], capabilities: [{{kind: \"*\"}}]}}\n  agent:\n    tokens: [agent-token]\n    capabilities: [{{kind: mcp/proposal}}, {{kind: mcp/withdraw}}, {{kind: chat}}]\n"
    );
    for id in ["fs", "mem", "every", "broken"] {
        y.push_str(&bridge(id));
    }
    // A bridge that may put its server's questions to its callers.
    y.push_str("  asks:\n    type: mcp-bridge\n    tokens: [asks-token]\n    capabilities: [{kind: mcp/response}, {kind: mcp/request}, {kind: participant/status}]\n    mcp_server: {command: node}\n");
    y
}

/// The runtime the bridge under test runs on.
#[derive(Debug, Clone, Copy)]
enum Driver {
    Tokio,
    AsyncStd,
}

/// Runs scenario `$name` once per driver.
macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tokio() {
                super::$name(super::Driver::Tokio).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn async_std() {
                super::$name(super::Driver::AsyncStd).await
            }
        }
    };
}

struct Gateway {
    driver: Driver,
    addr: std::net::SocketAddr,
    shutdown: ShutdownHandle,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    /// Its logs; removed once [`Gateway::stop`] has awaited the server.
    _dir: Scratch,
}

impl Gateway {
    async fn start_on(addr: std::net::SocketAddr, name: &str, driver: Driver) -> Gateway {
        let config = SpaceConfig::from_yaml(&space_yaml()).unwrap();
        let dir = Scratch::new("bridge-e2e", &format!("gw-{name}"));
        let opts = ServerOptions {
            log_dir: dir.join(".mew/logs"),
            seed: Some(11),
            ..ServerOptions::default()
        };
        let server = GatewayServer::bind_with(addr, config, opts).await.unwrap();
        let addr = server.local_addr();
        let shutdown = server.shutdown_handle();
        let task = tokio::spawn(server.serve());
        Gateway {
            driver,
            addr,
            shutdown,
            task,
            _dir: dir,
        }
    }

    async fn start(name: &str, driver: Driver) -> Gateway {
        Gateway::start_on("127.0.0.1:0".parse().unwrap(), name, driver).await
    }

    fn url(&self) -> String {
        format!("ws://{}/ws?space={SPACE}", self.addr)
    }

    async fn stop(self) {
        self.shutdown.shutdown();
        let _ = self.task.await;
    }

    fn bridge(&self, id: &str, command: ServerCommand, init_timeout: Duration) -> BridgeHandle {
        self.bridge_with(self.bridge_config(id, init_timeout), command)
    }

    fn bridge_with(&self, config: BridgeConfig, command: ServerCommand) -> BridgeHandle {
        let seed = config.participant.participant_id.as_deref().map(seed_of);
        match self.driver {
            Driver::Tokio => spawn_bridge(config, command, seed),
            Driver::AsyncStd => mew_async_std::spawn_bridge(config, command, seed),
        }
    }

    fn bridge_config(&self, id: &str, init_timeout: Duration) -> BridgeConfig {
        BridgeConfig {
            participant: ParticipantConfig {
                gateway_url: self.url(),
                space: SPACE.into(),
                token: format!("{id}-token"),
                participant_id: Some(id.into()),
                ..ParticipantConfig::default()
            },
            mcp: McpConfig {
                init_timeout,
                restart: RestartBackoff {
                    initial_delay: Duration::from_millis(200),
                    ..RestartBackoff::default()
                },
                ..McpConfig::default()
            },
            call_timeout: Duration::from_secs(30),
            ..BridgeConfig::default()
        }
    }

    async fn join(&self, id: &str) -> (ParticipantRuntime, mpsc::Receiver<Event>) {
        let mut config = ParticipantConfig {
            gateway_url: self.url(),
            space: SPACE.into(),
            token: format!("{id}-token"),
            participant_id: Some(id.into()),
            ..ParticipantConfig::default()
        };
        // These participants look at the bridge's tools the way a person's client does.
        config.discovery.auto = true;
        let (rt, events, _) = ParticipantRuntime::connect(config, Some(seed_of(id)))
            .await
            .unwrap_or_else(|e| panic!("{id} could not join: {e}"));
        (rt, events)
    }
}

/// Waits until `who` sees `peer` in the space.
pub(super) async fn sees(who: &ParticipantRuntime, peer: &str) {
    let end = Instant::now() + WAIT;
    loop {
        let peer2 = peer.to_owned();
        let present = who
            .with(move |p, _| p.participants().any(|(id, _)| id == peer2))
            .await
            .unwrap();
        if present {
            return;
        }
        assert!(Instant::now() < end, "{peer} never joined");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(super) async fn request(
    rt: &ParticipantRuntime,
    to: &str,
    method: &str,
    params: Value,
) -> Result<Value, CallError> {
    rt.mcp_request(
        vec![to.into()],
        json!({"method": method, "params": params}),
        RequestOptions {
            timeout: Some(WAIT),
            ..RequestOptions::default()
        },
    )
    .await
}

async fn call_tool(rt: &ParticipantRuntime, to: &str, tool: &str, args: Value) -> Value {
    request(
        rt,
        to,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    )
    .await
    .unwrap_or_else(|e| panic!("{to}/{tool}: {e}"))
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The next event matching `f`, within [`WAIT`].
async fn next_event<T>(
    events: &mut mpsc::Receiver<Event>,
    mut f: impl FnMut(&Event) -> Option<T>,
) -> T {
    tokio::time::timeout(WAIT, async {
        loop {
            let e = events.recv().await.expect("event stream open");
            if let Some(t) = f(&e) {
                return t;
            }
        }
    })
    .await
    .expect("expected event")
}

/// The next envelope of `kind` from `from`.
pub(super) async fn next_envelope(
    events: &mut mpsc::Receiver<Event>,
    from: &str,
    kind: &str,
) -> Value {
    next_event(events, |e| match e {
        Event::Message(env) if env.from == from && env.kind.as_str() == kind => {
            Some(serde_json::from_str::<Value>(&env.to_json()).unwrap())
        }
        _ => None,
    })
    .await
}

fn process_alive(pid: u32) -> bool {
    // A zombie has exited; only a live process counts.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

async fn gone(pid: u32) -> bool {
    let end = Instant::now() + Duration::from_secs(10);
    while process_alive(pid) {
        if Instant::now() > end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

both!(filesystem_read_and_a_write_proposed_then_fulfilled);
async fn filesystem_read_and_a_write_proposed_then_fulfilled(driver: Driver) {
    let gw = Gateway::start("fs", driver).await;
    let root = Scratch::new("bridge-e2e", "fs-root");
    std::fs::write(root.join("hello.txt"), "hello from the test\n").unwrap();
    let bridge = gw.bridge(
        "fs",
        node(
            "@modelcontextprotocol/server-filesystem",
            &[root.to_str().unwrap()],
        ),
        Duration::from_secs(20),
    );
    let (human, mut human_events) = gw.join("human").await;
    let (agent, _agent_events) = gw.join("agent").await;
    sees(&human, "fs").await;

    let tools = request(&human, "fs", "tools/list", json!({}))
        .await
        .unwrap();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"read_text_file") && names.contains(&"write_file"),
        "{names:?}"
    );
    let read_def = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "read_text_file")
        .unwrap();
    assert_eq!(read_def["inputSchema"]["required"], json!(["path"]));

    let path = root.join("hello.txt");
    let read = call_tool(&human, "fs", "read_text_file", json!({"path": path})).await;
    assert_eq!(text_of(&read), "hello from the test\n");

    // The agent may only propose; the human reviews and fulfils.
    let target = root.join("proposed.txt");
    let agent_task = {
        let agent = agent.clone();
        let target = target.clone();
        tokio::spawn(async move {
            call_tool(
                &agent,
                "fs",
                "write_file",
                json!({"path": target, "content": "written through a proposal"}),
            )
            .await
        })
    };
    let proposal = next_event(&mut human_events, |e| match e {
        Event::ProposalSeen {
            id,
            from,
            to,
            payload,
        } if from == "agent" => {
            assert_eq!(to, &vec!["fs".to_owned()]);
            assert_eq!(payload["params"]["name"], "write_file");
            Some(id.clone())
        }
        _ => None,
    })
    .await;
    let fulfilled = human.fulfil(proposal).await.unwrap();
    assert!(!text_of(&fulfilled).is_empty(), "{fulfilled}");
    let agents_view = agent_task.await.unwrap();
    assert_eq!(
        agents_view, fulfilled,
        "the proposer sees the fulfilment's result"
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "written through a proposal"
    );

    // Errors pass through: a tool error stays a result, a method the server lacks is the
    // server's own JSON-RPC error.
    let outside = call_tool(
        &human,
        "fs",
        "read_text_file",
        json!({"path": "/etc/hostname"}),
    )
    .await;
    assert_eq!(outside["isError"], true, "{outside}");
    let prompts = request(&human, "fs", "prompts/list", json!({})).await;
    assert!(
        matches!(&prompts, Err(CallError::Request(RequestError::Rpc { code: -32601, message, .. })) if message == "Method not found"),
        "{prompts:?}"
    );

    // Discovery through the space sees the bridge's tools under participant/tool names.
    let end = Instant::now() + WAIT;
    loop {
        let tools = human.available_tools().await.unwrap();
        if tools.iter().any(|t| t.name == "fs/read_text_file") {
            break;
        }
        assert!(Instant::now() < end, "discovery never found fs tools");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let pid = bridge.server_pid().unwrap();
    bridge.shutdown();
    assert_eq!(bridge.join().await, Exit::Shutdown);
    assert!(gone(pid).await, "server {pid} outlived the bridge");
    gw.stop().await;
}

both!(memory_entities_created_and_read_back);
async fn memory_entities_created_and_read_back(driver: Driver) {
    let gw = Gateway::start("mem", driver).await;
    let dir = Scratch::new("bridge-e2e", "mem");
    let file = dir.join("memory.jsonl");
    let mut cmd = node("@modelcontextprotocol/server-memory", &[]);
    cmd.env.push((
        "MEMORY_FILE_PATH".into(),
        file.to_string_lossy().into_owned(),
    ));
    let bridge = gw.bridge("mem", cmd, Duration::from_secs(20));
    let (human, _events) = gw.join("human").await;
    sees(&human, "mem").await;

    call_tool(
        &human,
        "mem",
        "create_entities",
        json!({"entities": [{"name": "mew-rs", "entityType": "project",
                             "observations": ["bridged into a MEW space"]}]}),
    )
    .await;
    let opened = call_tool(&human, "mem", "open_nodes", json!({"names": ["mew-rs"]})).await;
    assert!(
        text_of(&opened).contains("bridged into a MEW space"),
        "{opened}"
    );

    let resources = request(&human, "mem", "resources/list", json!({}))
        .await
        .unwrap();
    assert!(
        resources["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["uri"] == "memory://knowledge-graph"),
        "{resources}"
    );
    let graph = request(
        &human,
        "mem",
        "resources/read",
        json!({"uri": "memory://knowledge-graph"}),
    )
    .await
    .unwrap();
    assert!(
        graph["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("mew-rs"),
        "{graph}"
    );
    assert!(std::fs::read_to_string(&file).unwrap().contains("mew-rs"));
    bridge.shutdown();
    assert_eq!(bridge.join().await, Exit::Shutdown);
    gw.stop().await;
}

both!(everything_tools_resources_prompts_and_status);
async fn everything_tools_resources_prompts_and_status(driver: Driver) {
    let gw = Gateway::start("every", driver).await;
    let bridge = gw.bridge(
        "every",
        node("@modelcontextprotocol/server-everything", &[]),
        Duration::from_secs(20),
    );
    let (human, mut events) = gw.join("human").await;
    sees(&human, "every").await;

    let echo = call_tool(&human, "every", "echo", json!({"message": "hello mew"})).await;
    assert_eq!(text_of(&echo), "Echo: hello mew");
    let sum = call_tool(&human, "every", "get-sum", json!({"a": 2, "b": 40})).await;
    assert_eq!(text_of(&sum), "The sum of 2 and 40 is 42.");
    let structured = call_tool(
        &human,
        "every",
        "get-structured-content",
        json!({"location": "Chicago"}),
    )
    .await;
    assert!(
        structured["structuredContent"]["temperature"].is_number(),
        "{structured}"
    );

    let tools = request(&human, "every", "tools/list", json!({}))
        .await
        .unwrap();
    let tools = tools["tools"].as_array().unwrap();
    assert!(tools.len() >= 10, "{}", tools.len());
    let def = tools
        .iter()
        .find(|t| t["name"] == "get-structured-content")
        .unwrap();
    assert!(
        def.get("outputSchema").is_some(),
        "definitions are served unabridged: {def}"
    );

    // Arguments the server rejects come back with its code and message.
    let bad = request(
        &human,
        "every",
        "tools/call",
        json!({"name": "get-sum", "arguments": {"a": "x"}}),
    )
    .await;
    match &bad {
        Ok(r) => assert_eq!(r["isError"], true, "{r}"),
        Err(CallError::Request(RequestError::Rpc { code, message, .. })) => {
            assert!(*code < 0 && !message.is_empty(), "{bad:?}")
        }
        Err(e) => panic!("{e}"),
    }

    let resources = request(&human, "every", "resources/list", json!({}))
        .await
        .unwrap();
    let first = resources["resources"][0]["uri"]
        .as_str()
        .unwrap()
        .to_owned();
    let read = request(&human, "every", "resources/read", json!({"uri": first}))
        .await
        .unwrap();
    assert_eq!(read["contents"][0]["uri"], first.as_str());
    let missing = request(
        &human,
        "every",
        "resources/read",
        json!({"uri": "demo://nope"}),
    )
    .await;
    assert!(
        matches!(&missing, Err(CallError::Request(RequestError::Rpc { .. }))),
        "{missing:?}"
    );

    let prompts = request(&human, "every", "prompts/list", json!({}))
        .await
        .unwrap();
    assert!(
        prompts["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "simple-prompt"),
        "{prompts}"
    );
    let got = request(
        &human,
        "every",
        "prompts/get",
        json!({"name": "args-prompt", "arguments": {"city": "Lyon", "state": "Rhone"}}),
    )
    .await
    .unwrap();
    assert_eq!(
        got["messages"][0]["content"]["text"],
        "What's weather in Lyon, Rhone?"
    );

    // participant/request-status is answered with the server's state.
    human
        .send_json(r#"{"kind": "participant/request-status", "to": ["every"], "payload": {}}"#)
        .await
        .unwrap();
    let status = next_envelope(&mut events, "every", "participant/status").await;
    assert_eq!(status["payload"]["status"], Status::Active.as_str());
    assert_eq!(status["payload"]["mcp_server"]["state"], "ready");
    assert!(status["payload"]["mcp_server"]["tools"].as_u64().unwrap() >= 10);
    assert!(status["payload"]["mcp_server"]["server_info"]["name"].is_string());

    bridge.shutdown();
    assert_eq!(bridge.join().await, Exit::Shutdown);
    gw.stop().await;
}

both!(a_killed_server_fails_the_call_in_flight_and_is_restarted);
async fn a_killed_server_fails_the_call_in_flight_and_is_restarted(driver: Driver) {
    let gw = Gateway::start("crash", driver).await;
    let mut bridge = gw.bridge(
        "every",
        node("@modelcontextprotocol/server-everything", &[]),
        Duration::from_secs(20),
    );
    let (human, mut events) = gw.join("human").await;
    sees(&human, "every").await;
    assert_eq!(
        text_of(&call_tool(&human, "every", "echo", json!({"message": "before"})).await),
        "Echo: before"
    );
    let first = bridge.server_pid().unwrap();

    let in_flight = {
        let human = human.clone();
        tokio::spawn(async move {
            request(
                &human,
                "every",
                "tools/call",
                json!({"name": "trigger-long-running-operation", "arguments": {"duration": 30, "steps": 3}}),
            )
            .await
        })
    };
    bridge
        .wait_for(WAIT, |s| s.calls_in_flight == 1)
        .await
        .expect("the call reached the server");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();

    let outcome = tokio::time::timeout(WAIT, in_flight)
        .await
        .unwrap()
        .unwrap();
    match &outcome {
        Err(CallError::Request(RequestError::Rpc { code, message, .. })) => {
            assert_eq!(*code, -32000, "{message}");
            assert!(message.contains("signal 9"), "{message}");
        }
        other => panic!("the caller in flight should get an error: {other:?}"),
    }
    let second = bridge
        .wait_server_pid(Some(first), WAIT)
        .await
        .expect("restarted");
    assert_ne!(second, first);
    assert_eq!(
        text_of(&call_tool(&human, "every", "echo", json!({"message": "after"})).await),
        "Echo: after"
    );
    let tools = request(&human, "every", "tools/list", json!({}))
        .await
        .unwrap();
    assert!(
        tools["tools"].as_array().unwrap().len() >= 10,
        "tools registered again"
    );

    human
        .send_json(r#"{"kind": "participant/request-status", "to": ["every"], "payload": {}}"#)
        .await
        .unwrap();
    let status = next_envelope(&mut events, "every", "participant/status").await;
    assert_eq!(status["payload"]["mcp_server"]["restarts"], 1, "{status}");
    assert_eq!(bridge.snapshot().restarts, 1);
    assert_eq!(status["payload"]["mcp_server"]["state"], "ready");

    bridge.shutdown();
    assert_eq!(bridge.join().await, Exit::Shutdown);
    assert!(gone(second).await);
    gw.stop().await;
}

both!(commands_that_are_not_mcp_servers_fail_clearly_within_the_init_timeout);
async fn commands_that_are_not_mcp_servers_fail_clearly_within_the_init_timeout(driver: Driver) {
    let gw = Gateway::start("broken", driver).await;
    let (human, mut events) = gw.join("human").await;
    let init = Duration::from_millis(1500);

    let started = Instant::now();
    let exit = gw
        .bridge(
            "broken",
            ServerCommand::new("mew-no-such-command", Vec::<String>::new()),
            init,
        )
        .join()
        .await;
    assert!(
        matches!(&exit, Exit::ServerNeverReady(r) if r.contains("could not start") && r.contains("mew-no-such-command") && r.contains("No such file")),
        "{exit:?}"
    );
    assert!(started.elapsed() < init, "{:?}", started.elapsed());

    let started = Instant::now();
    let exit = gw
        .bridge(
            "broken",
            ServerCommand::new("cat", Vec::<String>::new()),
            init,
        )
        .join()
        .await;
    assert!(
        matches!(&exit, Exit::ServerNeverReady(r) if r.contains("not an MCP server")),
        "{exit:?}"
    );
    assert!(started.elapsed() < init, "{:?}", started.elapsed());

    // A silent process: the init timeout, then it is stopped, and the space is told.
    let started = Instant::now();
    let exit = gw
        .bridge("broken", ServerCommand::new("sleep", ["60"]), init)
        .join()
        .await;
    assert!(
        matches!(&exit, Exit::ServerNeverReady(r) if r.contains("did not answer initialize within 1500 ms")),
        "{exit:?}"
    );
    let took = started.elapsed();
    assert!(
        took >= init && took < init + Duration::from_secs(2),
        "{took:?}"
    );
    // Each bridge that got to join told the space why it stopped (the silent one
    // certainly joined; the quick failures may not have).
    loop {
        let status = next_envelope(&mut events, "broken", "participant/status").await;
        assert_eq!(status["payload"]["status"], "error", "{status}");
        assert_eq!(
            status["payload"]["mcp_server"]["state"], "failed",
            "{status}"
        );
        if status["payload"]["error"]
            .as_str()
            .unwrap()
            .contains("did not answer initialize within 1500 ms")
        {
            break;
        }
    }
    let chat = next_envelope(&mut events, "broken", "chat").await;
    assert!(
        chat["payload"]["text"]
            .as_str()
            .unwrap()
            .contains("MCP server"),
        "{chat}"
    );
    drop(human);
    gw.stop().await;
}

/// A door to `to` that holds each connection's first request for `delay` and then passes
/// it on, even when the client has gone meanwhile, as bytes already on their way would be.
async fn slow_door(to: std::net::SocketAddr, delay: Duration) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match client.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                tokio::time::sleep(delay).await;
                let mut gateway = tokio::net::TcpStream::connect(to).await.unwrap();
                gateway.write_all(&head).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut gateway).await;
            });
        }
    });
    addr
}

both!(a_bridge_that_exits_while_joining_does_not_displace_its_successor);
async fn a_bridge_that_exits_while_joining_does_not_displace_its_successor(driver: Driver) {
    let gw = Gateway::start("successor", driver).await;
    let door = slow_door(gw.addr, Duration::from_millis(300)).await;
    let init = Duration::from_millis(1500);

    // Its server cannot start, so it exits while its join is still on the way.
    let mut config = gw.bridge_config("broken", init);
    config.participant.gateway_url = format!("ws://{door}/ws?space={SPACE}");
    let started = Instant::now();
    let exit = gw
        .bridge_with(
            config,
            ServerCommand::new("mew-no-such-command", Vec::<String>::new()),
        )
        .join()
        .await;
    assert!(matches!(&exit, Exit::ServerNeverReady(_)), "{exit:?}");
    // It waited for that join and closed what it opened, within the close's bound.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );

    // Its successor comes at once. Had the first join arrived later, it would have taken
    // the identity from the successor, which then gives up as replaced.
    let exit = gw
        .bridge("broken", ServerCommand::new("sleep", ["60"]), init)
        .join()
        .await;
    assert!(
        matches!(&exit, Exit::ServerNeverReady(r) if r.contains("did not answer initialize")),
        "{exit:?}"
    );
    gw.stop().await;
}

both!(shutdown_control_stops_the_server_and_the_bridge);
async fn shutdown_control_stops_the_server_and_the_bridge(driver: Driver) {
    let gw = Gateway::start("control", driver).await;
    let bridge = gw.bridge(
        "every",
        node("@modelcontextprotocol/server-everything", &[]),
        Duration::from_secs(20),
    );
    let (human, mut events) = gw.join("human").await;
    sees(&human, "every").await;
    call_tool(&human, "every", "echo", json!({"message": "x"})).await;
    let pid = bridge.server_pid().unwrap();
    let sent = human
        .send_json(r#"{"kind": "participant/shutdown", "to": ["every"]}"#)
        .await
        .unwrap();
    let status = next_envelope(&mut events, "every", "participant/status").await;
    assert_eq!(status["payload"]["status"], "shutting_down");
    assert_eq!(status["correlation_id"], json!([sent]));
    assert_eq!(
        tokio::time::timeout(WAIT, bridge.join()).await.unwrap(),
        Exit::Shutdown
    );
    assert!(gone(pid).await, "server {pid} outlived the bridge");
    next_event(&mut events, |e| match e {
        Event::ParticipantLeft { id } if id == "every" => Some(()),
        _ => None,
    })
    .await;
    gw.stop().await;
}

both!(the_server_keeps_running_while_the_gateway_is_away);
async fn the_server_keeps_running_while_the_gateway_is_away(driver: Driver) {
    let gw = Gateway::start("away", driver).await;
    let addr = gw.addr;
    let bridge = gw.bridge(
        "every",
        node("@modelcontextprotocol/server-everything", &[]),
        Duration::from_secs(20),
    );
    let (human, _events) = gw.join("human").await;
    sees(&human, "every").await;
    call_tool(&human, "every", "echo", json!({"message": "x"})).await;
    let pid = bridge.server_pid().unwrap();
    human.close().await;
    gw.stop().await;

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(process_alive(pid));
    let gw = Gateway::start_on(addr, "away-again", driver).await;
    let (human, _events) = gw.join("human").await;
    sees(&human, "every").await;
    assert_eq!(
        text_of(&call_tool(&human, "every", "echo", json!({"message": "again"})).await),
        "Echo: again"
    );
    assert_eq!(bridge.server_pid(), Some(pid), "the same server process");
    bridge.shutdown();
    assert_eq!(bridge.join().await, Exit::Shutdown);
    gw.stop().await;
}

/// The server-everything elicitation tool called through the space over stdio: a 2025
/// server's question on stdio names no call, but the caller's is the only call in flight, so
/// the question is put to the caller, who declines it; the tool reports the decline.
async fn everything_elicitation_over_stdio_goes_to_the_sole_caller(driver: Driver) {
    let gw = Gateway::start("asks", driver).await;
    let bridge = gw.bridge(
        "asks",
        node("@modelcontextprotocol/server-everything", &[]),
        Duration::from_secs(20),
    );
    let (human, mut events) = gw.join("human").await;
    sees(&human, "asks").await;
    human
        .with(|p, _| p.forward_method("elicitation/create"))
        .await
        .unwrap();
    let call = call_tool(&human, "asks", "trigger-elicitation-request", json!({}));
    let answer = async {
        let (call_id, params) = next_event(&mut events, |e| match e {
            Event::Forwarded {
                call_id,
                from,
                method,
                params,
                ..
            } if from == "asks" && method == "elicitation/create" => {
                Some((*call_id, params.clone().unwrap_or_default()))
            }
            _ => None,
        })
        .await;
        assert_eq!(
            params["message"], "Please provide inputs for the following fields:",
            "{params}"
        );
        human
            .with(move |p, now| p.complete_call(now, call_id, Ok(json!({"action": "decline"}))))
            .await
            .unwrap()
            .unwrap();
    };
    let (result, ()) = tokio::join!(call, answer);
    let text = result.to_string();
    assert!(
        text.contains("User declined to provide the requested information"),
        "{text}"
    );
    drop(bridge);
    gw.stop().await;
}
both!(everything_elicitation_over_stdio_goes_to_the_sole_caller);
