//! `mew init` and `mew space up/status/down` with the real binary: a `coder` space whose
//! agent (scripted model) proposes a file write that the person fulfils through the real
//! filesystem MCP server; supervision (a killed bridge is restarted), a killed supervisor
//! leaves no process behind, `down` leaves nothing; the reference-layout fixture space too.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use mew_core::participant::{Event, ParticipantConfig};
use mew_tests::model_server::{ModelServer, Turn};
use mew_tests::scratch::Scratch;
use mew_tests::wait::until_true;
use mew_tokio::ParticipantRuntime;
use serde_json::{Value, json};

const MEW: &str = env!("CARGO_BIN_EXE_mew");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn mew(args: &[&str], dir: &Path, model: Option<&ModelServer>) -> Output {
    let mut c = Command::new(MEW);
    c.args(args)
        .arg("--space-dir")
        .arg(dir)
        .env_remove("OPENAI_API_KEY")
        .env("MEW_MODEL", "scripted")
        .stdin(Stdio::null());
    if let Some(m) = model {
        c.env("OPENAI_BASE_URL", &m.base_url);
    }
    c.output().expect("run mew")
}

/// `mew init coder`, with the filesystem server taken from the project's npm folder
/// instead of `npx` (the one edit a user without network would make).
fn coder_space(dir: &Path) {
    let out = Command::new(MEW)
        .args(["init", "coder", "--name", "coder-e2e", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("token") && text.contains("human.token"),
        "{text}"
    );
    let server = repo()
        .join(
            "tests/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js",
        )
        .canonicalize()
        .expect("npm ci in tests/mcp-servers");
    let path = dir.join(".mew/space.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    assert!(!yaml.contains("tokens:"), "tokens never go into space.yaml");
    let yaml = yaml.replace("command: npx", "command: node").replace(
        r#"args: ["-y", "@modelcontextprotocol/server-filesystem", "./workspace"]"#,
        &format!(r#"args: ["{}", "./workspace"]"#, server.display()),
    );
    std::fs::write(&path, yaml).unwrap();
    // On a loaded machine the filesystem server may answer its first `tools/list` seconds
    // after the agent asked (7.5 s once): the template's agent waits for it.
    let agent = std::fs::read_to_string(dir.join(".mew/agent.yaml")).unwrap();
    assert!(agent.contains("discovery_wait_ms: 30000"), "{agent}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.join(".mew/tokens")), 0o700);
        assert_eq!(mode(&dir.join(".mew/tokens/human.token")), 0o600);
    }
}

fn status(dir: &Path) -> Value {
    let out = mew(&["space", "status", "--json"], dir, None);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("status --json ({e}): {out:?}"))
}

fn participant<'a>(status: &'a Value, id: &str) -> &'a Value {
    status["participants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {status}"))
}

/// Whether a process exists and is not a zombie.
fn running(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| !r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Every live process descending from `root`, through /proc.
fn descendants(root: u64) -> Vec<u64> {
    let mut parent_of = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u64>() else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            && let Some(rest) = stat.rsplit(')').next()
        {
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.first() != Some(&"Z") {
                parent_of.push((
                    pid,
                    f.get(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0),
                ));
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out.retain(|p| *p != root);
    out
}

fn kill9(pid: u64) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_up_propose_fulfil_supervise_and_down() {
    let dir = Scratch::new("space", "coder");
    coder_space(&dir);
    let target = dir
        .join("workspace/hello.txt")
        .canonicalize()
        .unwrap_or(dir.canonicalize().unwrap().join("workspace/hello.txt"));
    let model = ModelServer::start(vec![
        Turn::call(
            "c1",
            "filesystem__write_file",
            json!({"path": target.to_string_lossy(), "content": "hello from the agent\n"}),
        ),
        Turn::text("I wrote hello.txt once you approved it."),
    ]);
    let up = mew(
        &["space", "up", "--detach", "--port", "0"],
        &dir,
        Some(&model),
    );
    assert!(up.status.success(), "{up:?}");
    let said = String::from_utf8_lossy(&up.stdout);
    assert!(
        said.contains("space \"coder-e2e\" is up on ws://127.0.0.1:"),
        "{said}"
    );

    // Every process is up and online.
    let st = status(&dir);
    assert_eq!(st["running"], true);
    for id in ["agent", "filesystem"] {
        let p = participant(&st, id);
        assert_eq!(p["online"], true, "{st}");
        assert_eq!(p["process"]["state"], "running", "{st}");
    }
    assert_eq!(participant(&st, "human")["process"], Value::Null);
    // The bridge's MCP revision and transport, as its server negotiated them.
    let mcp = &participant(&st, "filesystem")["mcp"];
    let revision = mcp["protocol"].as_str().unwrap_or_else(|| panic!("{st}"));
    assert!(
        [
            "2024-11-05",
            "2025-03-26",
            "2025-06-18",
            "2025-11-25",
            "2026-07-28"
        ]
        .contains(&revision),
        "{st}"
    );
    assert_eq!(mcp["transport"], "stdio", "{st}");
    assert_eq!(participant(&st, "agent")["mcp"], Value::Null, "{st}");
    let table = mew(&["space", "status"], &dir, None);
    let table = String::from_utf8_lossy(&table.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with("filesystem "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.ends_with(&format!("  {revision} (stdio)")), "{table}");
    let again = mew(
        &["space", "up", "--detach", "--port", "0"],
        &dir,
        Some(&model),
    );
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already running"));

    // The person joins, asks, and approves the agent's proposal to write a file.
    let gateway = st["gateway"].as_str().unwrap().to_owned();
    let token = std::fs::read_to_string(dir.join(".mew/tokens/human.token")).unwrap();
    // The web page's link for the human: printed by `up` and by `connect --web`, its token
    // in the fragment, and the page it names is served.
    let page = format!(
        "{}/ui/?space=coder-e2e#token={}",
        gateway.replacen("ws://", "http://", 1),
        token.trim()
    );
    assert!(said.contains(&format!("  web:   {page}\n")), "{said}");
    let web = mew(&["space", "connect", "--web"], &dir, None);
    assert!(web.status.success(), "{web:?}");
    assert_eq!(String::from_utf8_lossy(&web.stdout).trim(), page);
    let served = ureq::get(page.split('#').next().unwrap()).call().unwrap();
    assert_eq!(
        served.headers()["content-type"].to_str().unwrap(),
        "text/html; charset=utf-8"
    );
    let (human, mut events, _) = ParticipantRuntime::connect(
        ParticipantConfig {
            gateway_url: format!("{gateway}/ws?space=coder-e2e"),
            space: "coder-e2e".into(),
            token: token.trim().into(),
            participant_id: Some("human".into()),
            ..ParticipantConfig::default()
        },
        Some(1),
    )
    .await
    .expect("the human joins");
    // The person's first chat, to everyone and without a mention: the coder template's
    // agent answers every chat of the person.
    human
        .chat("Please write hello.txt", vec![])
        .await
        .unwrap()
        .unwrap();
    let mut answer = None;
    let end = Instant::now() + Duration::from_secs(60);
    while answer.is_none() {
        let left = end.saturating_duration_since(Instant::now());
        let e = tokio::time::timeout(left, events.recv())
            .await
            .expect("timed out waiting for the agent")
            .expect("events end");
        match e {
            Event::ProposalSeen {
                id, from, payload, ..
            } => {
                assert_eq!(from, "agent");
                assert_eq!(payload["params"]["name"], "write_file");
                let r = human.fulfil(id).await.expect("the write runs");
                assert_ne!(r["isError"], true, "{r}");
            }
            Event::Message(env) if env.kind.as_str() == "chat" && env.from == "agent" => {
                answer = env
                    .payload
                    .as_ref()
                    .and_then(|p| p["text"].as_str().map(str::to_owned));
            }
            _ => {}
        }
    }
    assert_eq!(
        answer.as_deref(),
        Some("I wrote hello.txt once you approved it.")
    );
    // No classification call came first: the first request is the task's, with the tools.
    let reqs = model.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert!(
        reqs[0].body["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("workspace/hello.txt")).unwrap(),
        "hello from the agent\n"
    );
    human.close().await;

    // A bridge killed with SIGKILL is restarted; its MCP server does not outlive it.
    let fs = participant(&st, "filesystem")["process"]["pid"]
        .as_u64()
        .unwrap();
    let servers = descendants(fs);
    assert!(!servers.is_empty(), "the bridge runs its MCP server");
    kill9(fs);
    until_true(
        "the bridge to be restarted",
        Duration::from_secs(20),
        || {
            let s = status(&dir);
            let p = participant(&s, "filesystem");
            p["process"]["restarts"] == 1
                && p["process"]["state"] == "running"
                && p["online"] == true
        },
    );
    until_true(
        "the old MCP server to stop",
        Duration::from_secs(10),
        || servers.iter().all(|p| !running(*p)),
    );

    // `down` stops everything and leaves nothing.
    let st = status(&dir);
    let supervisor = st["pid"].as_u64().unwrap();
    let all = descendants(supervisor);
    assert!(all.len() >= 3, "agent, bridge and server: {all:?}");
    let down = mew(&["space", "down"], &dir, None);
    assert!(down.status.success(), "{down:?}");
    assert!(String::from_utf8_lossy(&down.stdout).contains("stopped"));
    assert!(!running(supervisor));
    for p in all {
        assert!(!running(p), "process {p} outlived `mew space down`");
    }
    assert!(!dir.join(".mew/run/space.json").exists());
    let st = mew(&["space", "status", "--json"], &dir, None);
    assert_eq!(st.status.code(), Some(1));
}

#[test]
fn a_killed_supervisor_leaves_no_process_behind() {
    let dir = Scratch::new("space", "orphans");
    coder_space(&dir);
    let model = ModelServer::start(vec![]);
    let up = mew(
        &["space", "up", "--detach", "--port", "0"],
        &dir,
        Some(&model),
    );
    assert!(up.status.success(), "{up:?}");
    let supervisor = status(&dir)["pid"].as_u64().unwrap();
    let all = descendants(supervisor);
    assert!(all.len() >= 3, "agent, bridge and server: {all:?}");
    kill9(supervisor);
    until_true(
        "every process of the space to stop",
        Duration::from_secs(15),
        || all.iter().all(|p| !running(*p)),
    );
    // The run file is stale now: a new `up` takes over, `down` cleans up.
    let up = mew(
        &["space", "up", "--detach", "--port", "0"],
        &dir,
        Some(&model),
    );
    assert!(up.status.success(), "{up:?}");
    let down = mew(&["space", "down"], &dir, None);
    assert!(down.status.success(), "{down:?}");
}

#[test]
fn the_reference_fixture_space_comes_up_and_goes_down() {
    let dir = Scratch::new("space", "reference");
    let copy = Command::new("cp")
        .arg("-r")
        .arg(repo().join("tests/fixtures/reference-space/."))
        .arg(&dir)
        .status()
        .unwrap();
    assert!(copy.success());
    let out = Command::new(MEW)
        .args([
            "space",
            "up",
            "--detach",
            "--port",
            "0",
            "--wait",
            "20",
            "--space-dir",
        ])
        .arg(&dir)
        // The fixture's output_log is relative to the gateway's working directory.
        .current_dir(&dir)
        .env("MEW_MCP_SERVERS", repo().join("tests/mcp-servers"))
        .env("MEW_FIXTURE_DIR", &dir)
        .env("MEW_FIXTURE_GREETING", "hello")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let st = status(&dir);
    let started: Vec<&Value> = st["participants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| !p["process"].is_null())
        .collect();
    assert!(!started.is_empty(), "{st}");
    for p in &started {
        assert_eq!(p["process"]["state"], "running", "{st}");
        assert_eq!(p["online"], true, "{st}");
    }
    let supervisor = st["pid"].as_u64().unwrap();
    let all = descendants(supervisor);
    let down = mew(&["space", "down"], &dir, None);
    assert!(down.status.success(), "{down:?}");
    for p in all {
        assert!(!running(p), "process {p} outlived `mew space down`");
    }
}

/// A bridge is online as soon as it joins, while its MCP server is still starting: `up`
/// waits for the server too, and names the bridge when the wait ends before it is ready.
#[test]
fn up_waits_for_a_bridges_server_not_only_for_its_join() {
    let dir = Scratch::new("space", "slow-bridge");
    std::fs::write(
        dir.join("space.yaml"),
        "space: {id: slow}\nparticipants:\n  human: {tokens: [human-token], capabilities: [{kind: \"*\"}]}\n  slow:\n    type: mcp-bridge\n    auto_start: true\n    tokens: [slow-token]\n    capabilities: [{kind: mcp/response}, {kind: participant/status}]\n    mcp_server: {command: sleep, args: [\"600\"]}\n    bridge_config: {init_timeout: 60000}\n",
    )
    .unwrap();
    let started = Instant::now();
    let up = mew(
        &["space", "up", "--detach", "--port", "0", "--wait", "3"],
        &dir,
        None,
    );
    let err = String::from_utf8_lossy(&up.stderr);
    assert_eq!(up.status.code(), Some(1), "{up:?}");
    assert!(started.elapsed() >= Duration::from_secs(3), "{err}");
    assert!(
        err.contains(
            "mew: slow has not joined, or its MCP server is not ready, after 3s (running)"
        ),
        "{err}"
    );
    assert!(err.contains("mew: slow did not join;"), "{err}");
    // It did join: only its server is not there.
    let st = status(&dir);
    let slow = st["participants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "slow")
        .cloned()
        .unwrap();
    assert_eq!(slow["online"], true, "{st}");
    assert_eq!(slow["process"]["state"], "running", "{st}");
    let down = mew(&["space", "down"], &dir, None);
    assert!(down.status.success(), "{down:?}");
}
