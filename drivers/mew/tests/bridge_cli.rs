//! `mew bridge` and the gateway's auto-started bridges as processes: exit codes, one-line
//! failures, SIGTERM, and no MCP server left behind.
#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mew_core::gateway::SpaceConfig;
use mew_core::participant::{ParticipantConfig, RequestOptions};
use mew_tests::process::Stopping;
use mew_tests::scratch::Scratch;
use mew_tests::wait::until;
use mew_tokio::{GatewayServer, ParticipantRuntime, ServerOptions};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

const MEW: &str = env!("CARGO_BIN_EXE_mew");
const WAIT: Duration = Duration::from_secs(30);

fn everything_script() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        script.is_file(),
        "MCP test servers are not installed ({} missing): run `npm ci` in tests/mcp-servers",
        script.display()
    );
    script
        .canonicalize()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let end = Instant::now() + within;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("process {} did not exit within {within:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Live processes whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let mut fields = rest.split(' ');
        let state = fields.next();
        let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) && state != Some("Z") {
            out.push(pid);
        }
    }
    out
}

/// Live processes running in `dir`.
fn running_in(dir: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c == dir) && alive(pid) {
            out.push(pid);
        }
    }
    out
}

fn run_failing(args: &[&str], within: Duration) -> (i32, String, Duration) {
    let started = Instant::now();
    let mut child = Stopping(
        Command::new(MEW)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let status = wait_exit(&mut child, within + Duration::from_secs(5));
    let took = started.elapsed();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status.code().unwrap(), err, took)
}

#[test]
/// A start that never worked is a configuration error (exit 2), which `mew space` does not
/// restart.
fn a_command_that_is_not_an_mcp_server_fails_with_one_line() {
    let common = [
        "bridge",
        "--gateway",
        "ws://127.0.0.1:9",
        "--space",
        "s",
        "--token",
        "t",
        "--init-timeout",
        "2000",
        "--log-level",
        "off",
        "--",
    ];
    let with = |cmd: &[&str]| {
        let mut a: Vec<&str> = common.to_vec();
        a.extend_from_slice(cmd);
        run_failing(&a, Duration::from_secs(2))
    };
    let (code, err, took) = with(&["mew-no-such-command", "--flag"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("mew: MCP server failed: could not start MCP server: mew-no-such-command")
            && err.contains("No such file"),
        "{err}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");

    let (code, err, took) = with(&["cat"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.trim_end(),
        "mew: MCP server failed: not an MCP server: it sent our initialize request back (an echo?)"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");

    let (code, err, took) = with(&["sleep", "30"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("did not answer initialize within 2000 ms"),
        "{err}"
    );
    assert!(took < Duration::from_secs(4), "{took:?}");

    // No command at all is a usage error.
    let (code, _, _) = run_failing(&common[..common.len() - 1], Duration::from_secs(1));
    assert_eq!(code, 2);
}

fn gateway_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn echo_through_space(url: &str, space: &str, target: &str) {
    let config = ParticipantConfig {
        gateway_url: url.into(),
        space: space.into(),
        token: "human-token".into(),
        participant_id: Some("human".into()),
        ..ParticipantConfig::default()
    };
    let (human, _events, _) = ParticipantRuntime::connect(config, Some(1)).await.unwrap();
    let end = Instant::now() + WAIT;
    loop {
        let t = target.to_owned();
        if human
            .with(move |p, _| p.participants().any(|(id, _)| id == t))
            .await
            .unwrap()
        {
            break;
        }
        assert!(Instant::now() < end, "{target} never joined");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = human
        .mcp_request(
            vec![target.into()],
            json!({"method": "tools/call", "params": {"name": "echo", "arguments": {"message": "cli"}}}),
            RequestOptions {
                timeout: Some(WAIT),
                ..RequestOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(r["content"][0]["text"], "Echo: cli");
    human.close().await;
}

#[test]
fn sigterm_stops_the_server_and_exits_zero() {
    let dir = Scratch::new("bridge-cli", "sigterm-gw");
    let rt = gateway_runtime();
    let yaml = "space: {id: cli}\nparticipants:\n  human: {tokens: [human-token], capabilities: [{kind: \"*\"}]}\n  every: {type: mcp-bridge, tokens: [every-token], capabilities: [{kind: mcp/response}, {kind: participant/status}], mcp_server: {command: node}}\n";
    let server = rt
        .block_on(GatewayServer::bind_with(
            "127.0.0.1:0".parse().unwrap(),
            SpaceConfig::from_yaml(yaml).unwrap(),
            ServerOptions {
                log_dir: dir.join(".mew/logs"),
                seed: Some(1),
                ..ServerOptions::default()
            },
        ))
        .unwrap();
    let addr = server.local_addr();
    let shutdown = server.shutdown_handle();
    let serving = rt.spawn(server.serve());

    let mut bridge = Stopping(
        Command::new(MEW)
            .args([
                "bridge",
                "-g",
                &format!("ws://{addr}"),
                "-s",
                "cli",
                "-t",
                "every-token",
            ])
            .args([
                "--id",
                "every",
                "--log-level",
                "warn",
                "--",
                "node",
                &everything_script(),
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    rt.block_on(echo_through_space(
        &format!("ws://{addr}/ws?space=cli"),
        "cli",
        "every",
    ));
    let server_pids = until("the MCP server process", WAIT, || {
        let c = children_of(bridge.id());
        (!c.is_empty()).then_some(c)
    });

    kill(Pid::from_raw(bridge.id() as i32), Signal::SIGTERM).unwrap();
    let status = wait_exit(&mut bridge, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{status:?}");
    for pid in server_pids {
        until("the MCP server to be gone", WAIT, || {
            (!alive(pid)).then_some(())
        });
    }
    shutdown.shutdown();
    rt.block_on(serving).unwrap().unwrap();
}

#[test]
fn the_gateway_starts_and_stops_auto_start_bridges() {
    let dir = Scratch::new("bridge-cli", "autostart");
    let server_dir = dir.join("server-cwd");
    std::fs::create_dir_all(&server_dir).unwrap();
    let yaml = format!(
        "space: {{id: auto}}\nparticipants:\n  human: {{tokens: [human-token], capabilities: [{{kind: \"*\"}}]}}\n  every:\n    type: mcp-bridge\n    auto_start: true\n    tokens: [every-token]\n    capabilities: [{{kind: mcp/response}}, {{kind: participant/status}}]\n    mcp_server: {{command: node, args: [{script}], cwd: server-cwd}}\n    bridge_config: {{init_timeout: 20000, max_reconnects: 2}}\n",
        script = everything_script()
    );
    let config = dir.join("space.yaml");
    std::fs::write(&config, yaml).unwrap();
    let mut gateway = Stopping(
        Command::new(MEW)
            .args([
                "gateway",
                "--config",
                config.to_str().unwrap(),
                "--port",
                "0",
                "--log-level",
                "warn",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(gateway.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("gateway printed its address").unwrap();
        if let Some(i) = line.find("ws://") {
            let rest = &line[i..];
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});

    let rt = gateway_runtime();
    rt.block_on(echo_through_space(&url, "auto", "every"));
    let server = running_in(&server_dir);
    assert!(
        !server.is_empty(),
        "the MCP server runs in its configured cwd"
    );
    let bridges = children_of(gateway.id());
    assert_eq!(bridges.len(), 1, "one bridge process: {bridges:?}");

    kill(Pid::from_raw(gateway.id() as i32), Signal::SIGTERM).unwrap();
    let status = wait_exit(&mut gateway, Duration::from_secs(15));
    assert_eq!(status.code(), Some(0), "{status:?}");
    for pid in server.into_iter().chain(bridges) {
        until("no process left behind", WAIT, || {
            (!alive(pid)).then_some(())
        });
    }
    assert!(running_in(&server_dir).is_empty());
}
