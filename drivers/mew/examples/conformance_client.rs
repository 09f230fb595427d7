//! The MCP conformance suite's client role played by a space: `conformance client --command
//! tests/mcp-conformance/client-adapter` runs this (through that script) with the suite's
//! test server URL as the last argument and the scenario in `MCP_CONFORMANCE_SCENARIO`.
//!
//! It starts `mew gateway` on a scratch space whose `mcp-bridge` participant `server` is the
//! suite's server (`mcp_server: {url: ...}`, started by the gateway), and joins it as `caller`,
//! a participant that also plays the person of the space:
//!
//! - it makes the scenario's calls through the space as `mcp/request` envelopes to the bridge
//!   (`tools/list`, then every listed tool; `resources/read` and `prompts/get` of what is
//!   listed), with the arguments the suite's context names, else sample values (and, for
//!   the schema-preservation scenario, the listed schema echoed back);
//! - it answers the server's questions that the bridge puts to it (`elicitation/create`):
//!   accept, leaving fields that have a default empty (the bridge fills them in) and giving a
//!   sample value for the others;
//! - it follows a sign-in link: when the bridge's `participant/status` carries
//!   `mcp_server.sign_in.url`, it opens the URL (GET, following redirects), as a person's
//!   browser would. A call answered with `sign-in needed` (the server asked for more scope
//!   while it ran) is made again once that sign-in is done, as a person would retry.
//!
//! The bridge names the client ID metadata document the suite expects
//! (`mcp_server.oauth.client_metadata_url`); a client the scenario registered beforehand
//! (`client_id` in its context) goes to a client file (`mcp_server.oauth.client_file`).
//!
//! Everything it starts stops when it ends, even when it is killed (`mew guard`). Its exit
//! code is 0 when every call got an answer, 1 when one failed, 2 when the space could not be
//! set up; what happened is on stderr (and the bridge's log, on failure).
//!
//! Environment: `MEW_BIN` (the `mew` binary; default: `mew` beside this example's folder).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mew_core::envelope::Kind;
use mew_core::participant::{Draft, Event, ParticipantConfig, RequestOptions};
use mew_tokio::ParticipantRuntime;
use serde_json::{Map, Value, json};

const SPACE: &str = "conformance";
/// The bridge's participant id.
const SERVER: &str = "server";
/// The scripted participant's id.
const CALLER: &str = "caller";
/// The whole scenario, from start to the last answer (the suite waits 30 s by default).
const DEADLINE: Duration = Duration::from_secs(25);
/// One call through the space.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// Scenarios whose server serves `tools/list` only (the suite's own client lists and stops).
const LIST_ONLY: &[&str] = &["json-schema-ref-no-deref"];
/// The client ID metadata document the suite's authorization servers expect as `client_id`.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";
/// How often one call is made again after a sign-in it was refused for (a server that asks
/// for ever more scope is refused by the bridge before this).
const SIGN_IN_RETRIES: usize = 3;
/// How long a call waits for the sign-in it was refused for.
const SIGN_IN_WAIT: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!("usage: conformance_client <server-url> (MCP_CONFORMANCE_SCENARIO set)");
        return ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    let mew = mew_bin();
    let dir = scratch_dir();
    let result = Space::start(&mew, &dir, &url, &context).and_then(|space| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("tokio: {e}"))?;
        let outcome = rt.block_on(async {
            tokio::time::timeout(DEADLINE, play(&space.addr, &scenario, &context))
                .await
                .unwrap_or_else(|_| Err(format!("not done within {DEADLINE:?}")))
        });
        drop(space);
        outcome
    });
    let code = match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("{scenario}: {why}");
            let log = dir.join(".mew/logs").join(format!("{SERVER}.log"));
            if let Ok(text) = std::fs::read_to_string(&log) {
                eprintln!("--- the bridge's log ---\n{text}");
            }
            ExitCode::from(1)
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    code
}

/// `MEW_BIN`, else `mew` in the profile folder this example was built into
/// (`target/<profile>/examples/conformance_client` beside `target/<profile>/mew`).
fn mew_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("MEW_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    exe.parent()
        .and_then(Path::parent)
        .map(|d| d.join("mew"))
        .unwrap_or_else(|| PathBuf::from("mew"))
}

fn scratch_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    std::env::temp_dir().join(format!("mew-conformance-{}-{nanos}", std::process::id()))
}

/// The gateway (and through it the bridge), stopped when dropped.
struct Space {
    gateway: Child,
    addr: String,
}

impl Space {
    fn start(mew: &Path, dir: &Path, url: &str, context: &Value) -> Result<Space, String> {
        std::fs::create_dir_all(dir.join(".mew")).map_err(|e| format!("{}: {e}", dir.display()))?;
        // A pre-registered client (`auth/pre-registration`): its credentials in a file, as
        // space.yaml wants them.
        let client_file = match context["client_id"].as_str() {
            Some(id) => {
                let file = dir.join(".mew/client.json");
                let client = json!({"client_id": id, "client_secret": context["client_secret"]});
                write_private(&file, &client.to_string())
                    .map_err(|e| format!("client file: {e}"))?;
                Some(file)
            }
            None => None,
        };
        let config = dir.join(".mew/space.yaml");
        std::fs::write(&config, space_yaml(url, client_file.as_deref()))
            .map_err(|e| format!("space.yaml: {e}"))?;
        // Through the guard the gateway stops when this process dies, however it dies; the
        // gateway stops the bridge it started likewise.
        let mut gateway = Command::new(mew)
            .args(["guard", "--"])
            .arg(mew)
            .args(["gateway", "--port", "0", "--log-level", "warn", "--config"])
            .arg(&config)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", mew.display()))?;
        let stdout = gateway.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if !sent && let Some(rest) = line.split("ws://").nth(1) {
                    let addr = rest.split('/').next().unwrap_or_default().to_owned();
                    sent = tx.send(addr).is_ok();
                }
            }
        });
        let mut space = Space {
            gateway,
            addr: String::new(),
        };
        space.addr = rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| "the gateway did not print its address".to_owned())?;
        Ok(space)
    }
}

impl Drop for Space {
    fn drop(&mut self) {
        // SIGTERM lets the gateway stop the bridge it started; then the kill.
        #[cfg(unix)]
        {
            let pid = nix::unistd::Pid::from_raw(self.gateway.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let end = Instant::now() + Duration::from_secs(5);
            while Instant::now() < end {
                if let Ok(Some(_)) = self.gateway.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.gateway.kill();
        let _ = self.gateway.wait();
    }
}

/// Writes a file only its owner may read (it holds a client secret).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(text.as_bytes())
}

fn space_yaml(url: &str, client_file: Option<&Path>) -> String {
    let quote = |s: &str| serde_json::to_string(s).expect("a string serialises");
    let mut oauth = format!("client_metadata_url: {}", quote(CLIENT_METADATA_URL));
    if let Some(f) = client_file {
        oauth.push_str(&format!(", client_file: {}", quote(&f.to_string_lossy())));
    }
    format!(
        r#"space: {{id: {SPACE}}}
participants:
  {SERVER}:
    type: mcp-bridge
    tokens: [{SERVER}-token]
    auto_start: true
    mcp_server: {{url: {url}, oauth: {{{oauth}}}}}
    bridge_config: {{init_timeout: 15000, reconnect: false}}
    capabilities:
      - kind: mcp/response
      - kind: mcp/request
      - kind: participant/status
      - kind: chat
  {CALLER}:
    tokens: [{CALLER}-token]
    capabilities: [{{kind: "*"}}]
"#,
        url = quote(url)
    )
}

/// The scenario's calls through the space, the questions answered and the sign-in followed
/// meanwhile.
async fn play(addr: &str, scenario: &str, context: &Value) -> Result<(), String> {
    let config = ParticipantConfig {
        gateway_url: format!("ws://{addr}/ws?space={SPACE}"),
        space: SPACE.into(),
        token: format!("{CALLER}-token"),
        participant_id: Some(CALLER.into()),
        ..ParticipantConfig::default()
    };
    let (rt, events, _) = ParticipantRuntime::connect(config, None)
        .await
        .map_err(|e| format!("cannot join the space: {e}"))?;
    rt.with(|p, _| p.forward_method("elicitation/create"))
        .await
        .map_err(|e| e.to_string())?;
    let (gone_tx, gone) = tokio::sync::oneshot::channel();
    let (sign_in_tx, sign_in) = tokio::sync::watch::channel(SignIns::default());
    let person = tokio::spawn(person(rt.clone(), events, gone_tx, sign_in_tx));

    // The bridge joins once the gateway has started it; it holds calls until its server is
    // ready (or signed in to).
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let present = rt
            .with(|p, _| p.participants().any(|(id, _)| id == SERVER))
            .await
            .map_err(|e| e.to_string())?;
        if present {
            break;
        }
        if Instant::now() > end {
            return Err("the bridge never joined the space".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Ask for its status once: a sign-in already pending shows in the answer.
    let _ = rt
        .send(
            Draft::new(Kind::ParticipantRequestStatus)
                .to([SERVER])
                .payload(json!({})),
        )
        .await;

    // A bridge that leaves (its server refused it) answers nothing more: stop at once.
    let failures = tokio::select! {
        f = calls(&rt, scenario, context, sign_in) => f,
        Ok(why) = gone => vec![why],
    };
    person.abort();
    rt.close().await;
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// Every call of the scenario, in order; the failures, described.
async fn calls(
    rt: &ParticipantRuntime,
    scenario: &str,
    context: &Value,
    mut sign_in: tokio::sync::watch::Receiver<SignIns>,
) -> Vec<String> {
    let mut failures = Vec::new();
    let tools = match request(rt, &mut sign_in, "tools/list", json!({})).await {
        Ok(v) => v["tools"].as_array().cloned().unwrap_or_default(),
        Err(e) => return vec![format!("tools/list: {e}")],
    };
    if LIST_ONLY.contains(&scenario) {
        return failures;
    }
    let planned = context["toolCalls"].as_array().cloned().unwrap_or_default();
    let mut called = BTreeSet::new();
    for tool in &tools {
        let Some(name) = tool["name"].as_str() else {
            continue;
        };
        let mut args = planned
            .iter()
            .filter(|c| c["name"] == name)
            .map(|c| c["arguments"].clone())
            .collect::<Vec<_>>();
        if args.is_empty() {
            args.push(match echoed_schema(scenario, name, &tools) {
                Some(schema) => json!({ "schema": schema }),
                None => sample_arguments(&tool["inputSchema"]),
            });
        }
        for arguments in args {
            called.insert(name.to_owned());
            let params = json!({"name": name, "arguments": arguments});
            if let Err(e) = request(rt, &mut sign_in, "tools/call", params).await {
                failures.push(format!("tools/call {name}: {e}"));
            }
        }
    }
    for call in &planned {
        if let Some(name) = call["name"].as_str()
            && !called.contains(name)
        {
            eprintln!("{name}: named by the scenario but not listed by the bridge; not called");
        }
    }
    if let Ok(list) = request(rt, &mut sign_in, "resources/list", json!({})).await {
        for r in list["resources"].as_array().into_iter().flatten() {
            let uri = r["uri"].clone();
            if let Err(e) = request(rt, &mut sign_in, "resources/read", json!({"uri": uri})).await {
                failures.push(format!("resources/read {uri}: {e}"));
            }
        }
    }
    if let Ok(list) = request(rt, &mut sign_in, "prompts/list", json!({})).await {
        for p in list["prompts"].as_array().into_iter().flatten() {
            let name = p["name"].clone();
            let mut arguments = Map::new();
            for a in p["arguments"].as_array().into_iter().flatten() {
                if a["required"] == true
                    && let Some(n) = a["name"].as_str()
                {
                    arguments.insert(n.to_owned(), json!("conformance"));
                }
            }
            let params = json!({"name": name, "arguments": arguments});
            if let Err(e) = request(rt, &mut sign_in, "prompts/get", params).await {
                failures.push(format!("prompts/get {name}: {e}"));
            }
        }
    }
    failures
}

/// A request to the bridge, made again (up to [`SIGN_IN_RETRIES`] times) after each sign-in
/// it is refused for: while a sign-in is pending the bridge answers at once with its link
/// (a server that wants more scope refuses a running call that way too).
async fn request(
    rt: &ParticipantRuntime,
    sign_in: &mut tokio::sync::watch::Receiver<SignIns>,
    method: &str,
    params: Value,
) -> Result<Value, String> {
    let mut retries = 0;
    loop {
        let err = match request_once(rt, method, params.clone()).await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        // `sign-in needed: open <url> to sign in to <host>`
        let Some(url) = err
            .split_once("sign-in needed: open ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .map(str::to_owned)
        else {
            return Err(err);
        };
        if retries == SIGN_IN_RETRIES {
            return Err(err);
        }
        retries += 1;
        let done = tokio::time::timeout(SIGN_IN_WAIT, sign_in.wait_for(|s| s.done.contains(&url)));
        if !matches!(done.await, Ok(Ok(_))) {
            return Err(format!("{err} (the sign-in did not complete)"));
        }
    }
}

async fn request_once(
    rt: &ParticipantRuntime,
    method: &str,
    params: Value,
) -> Result<Value, String> {
    rt.mcp_request(
        vec![SERVER.into()],
        json!({"method": method, "params": params}),
        RequestOptions {
            timeout: Some(CALL_TIMEOUT),
            ..RequestOptions::default()
        },
    )
    .await
    .map_err(|e| e.to_string())
}

/// `json-schema-2020-12-preservation`: its echo tool is given the input schema of its focal
/// tool as the bridge listed it, so that the suite sees what the space saw.
fn echoed_schema(scenario: &str, tool: &str, tools: &[Value]) -> Option<Value> {
    if scenario != "json-schema-2020-12-preservation" || tool != "json_schema_echo" {
        return None;
    }
    tools
        .iter()
        .find(|t| t["name"] == "json_schema_2020_12_tool")
        .map(|t| t["inputSchema"].clone())
}

/// Arguments for a tool from its input schema: two numbers `a` and `b` as the suite's tools
/// take them, and a sample value for every other required property.
fn sample_arguments(schema: &Value) -> Value {
    let mut args = Map::new();
    let props = schema["properties"].as_object();
    for (name, value) in [("a", 2), ("b", 3)] {
        if props.is_some_and(|p| p.contains_key(name)) {
            args.insert(name.into(), json!(value));
        }
    }
    for name in schema["required"].as_array().into_iter().flatten() {
        let Some(name) = name.as_str() else { continue };
        if !args.contains_key(name) {
            args.insert(name.into(), sample_value(&schema["properties"][name]));
        }
    }
    Value::Object(args)
}

/// A value a person would type for a field of this schema.
fn sample_value(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    if let Some(first) = schema["oneOf"].as_array().and_then(|e| e.first()) {
        return first["const"].clone();
    }
    match schema["type"].as_str() {
        Some("boolean") => json!(true),
        Some("integer") => json!(schema["minimum"].as_i64().unwrap_or(1)),
        Some("number") => json!(schema["minimum"].as_f64().unwrap_or(1.0)),
        Some("array") => json!([]),
        Some("object") => json!({}),
        _ => match schema["format"].as_str() {
            Some("email") => json!("person@example.com"),
            Some("uri") => json!("https://example.com/"),
            Some("date") => json!("2026-01-01"),
            Some("date-time") => json!("2026-01-01T00:00:00Z"),
            _ => json!("conformance"),
        },
    }
}

/// The answer of a person to an elicitation: accept, giving a value to each field without a
/// default (the bridge applies the defaults of the fields left empty); a URL-mode one is
/// opened and accepted.
fn answer(params: &Value) -> Value {
    if params["mode"] == "url" {
        if let Some(url) = params["url"].as_str() {
            open(url);
        }
        return json!({"action": "accept"});
    }
    let schema = &params["requestedSchema"];
    let mut content = Map::new();
    for (name, field) in schema["properties"].as_object().into_iter().flatten() {
        if field.get("default").is_none() {
            content.insert(name.clone(), sample_value(field));
        }
    }
    json!({"action": "accept", "content": content})
}

/// Opens a link as a browser would (GET, redirects followed); what happened goes to stderr.
fn open(url: &str) {
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .new_agent();
    match agent.get(url).call() {
        Ok(r) => eprintln!("opened {url}: HTTP {}", r.status()),
        Err(e) => eprintln!("cannot open {url}: {e}"),
    }
}

/// The sign-ins the bridge announced, as the person saw them.
#[derive(Default)]
struct SignIns {
    /// The link of the sign-in the bridge's last status announced, if any.
    pending: Option<String>,
    /// The links whose sign-in completed: a later status of the bridge announced none.
    done: BTreeSet<String>,
}

/// The person of the space: answers the questions put to it and follows sign-in links.
/// `gone` hears when the bridge leaves the space; `sign_ins` the sign-ins seen.
async fn person(
    rt: ParticipantRuntime,
    mut events: tokio::sync::mpsc::Receiver<Event>,
    gone: tokio::sync::oneshot::Sender<String>,
    sign_ins: tokio::sync::watch::Sender<SignIns>,
) {
    let mut gone = Some(gone);
    let opened: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    while let Some(event) = events.recv().await {
        match event {
            Event::Forwarded {
                call_id, params, ..
            } => {
                let result = answer(&params.unwrap_or(Value::Null));
                let _ = rt
                    .with(move |p, now| p.complete_call(now, call_id, Ok(result)))
                    .await;
            }
            Event::Message(env) if env.from == SERVER && env.kind == Kind::ParticipantStatus => {
                let v: Value = serde_json::from_str(&env.to_json()).unwrap_or(Value::Null);
                let Some(server) = v["payload"]["mcp_server"].as_object() else {
                    continue;
                };
                let url = server
                    .get("sign_in")
                    .and_then(|s| s["url"].as_str())
                    .map(str::to_owned);
                sign_ins.send_modify(|s| {
                    if url.is_none()
                        && let Some(done) = s.pending.take()
                    {
                        s.done.insert(done);
                    }
                    s.pending.clone_from(&url);
                });
                let Some(url) = url else { continue };
                // One visit per link: the authorization server's `state` is single use.
                if !opened.lock().expect("not poisoned").insert(url.clone()) {
                    continue;
                }
                tokio::task::spawn_blocking(move || open(&url));
            }
            Event::ParticipantLeft { id } if id == SERVER => {
                if let Some(tx) = gone.take() {
                    let _ = tx.send("the bridge left the space (see its log)".to_owned());
                }
            }
            _ => {}
        }
    }
}
