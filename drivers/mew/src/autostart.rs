//! The processes a space starts with its gateway: `type: mcp-bridge` participants (run as
//! `mew bridge ...`, this same executable), `type: agent` participants (run as `mew agent`,
//! with their `agent_config`) and `type: local` (or untyped) participants with a `command`,
//! each with `auto_start: true`. They are supervised by their `restart_policy` and
//! stopped with the gateway.
//!
//! Each process gets its own token only: every `MEW_TOKEN*` variable of the gateway's
//! environment is removed, and its token, the gateway URL, the space and its id are passed
//! as `MEW_TOKEN`, `MEW_GATEWAY`, `MEW_SPACE` and `MEW_PARTICIPANT_ID` (never on the command
//! line, where other users can read it, unless the configuration itself writes `${TOKEN}`
//! there, as the reference's spaces do). The model API key (`OPENAI_API_KEY`) reaches agents
//! and `type: local` processes (the reference's agents), never MCP servers.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mew_core::gateway::{
    HeaderSource, ParticipantEntry, ParticipantType, RestartPolicy, substitute,
};
use mew_core::supervise::{RestartVerdict, Supervision};
use mew_driver_common::client::process::terminate_group;
use mew_driver_common::{clock, exit};
use mew_tokio::Tokio;
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::connect::{GATEWAY_ENV, ID_ENV, SPACE_ENV, TOKEN_ENV};

/// How long a process may take to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Restarts in a row before supervision gives up on a process.
const MAX_RESTARTS: u32 = Supervision::MAX_IN_A_ROW;

/// What the space is, for substituting `${PORT}`, `${SPACE}` and `${TOKEN}`.
#[derive(Debug, Clone)]
pub struct SpaceContext {
    /// `ws://host:port` of the gateway.
    pub gateway: String,
    /// Its port.
    pub port: u16,
    /// Space id.
    pub space: String,
    /// Working directory of started processes (the space folder).
    pub root: PathBuf,
    /// Folder `cwd`s of `mcp_server` are relative to (the folder of `space.yaml`).
    pub config_dir: PathBuf,
}

/// One process to start: program, arguments, environment and how to supervise it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The participant it joins as.
    pub id: String,
    /// Program to run.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment added to the scrubbed inherited one.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub cwd: PathBuf,
    /// When to start it again.
    pub restart: RestartPolicy,
    /// Whether the model API key (`OPENAI_API_KEY`) of the gateway's environment is passed
    /// on: agents need it, MCP servers behind bridges must not hold it.
    pub model_key: bool,
    /// This executable, to start the process through `mew guard` (stopped when the
    /// supervisor dies, even by SIGKILL).
    pub guard: Option<String>,
    /// Exit codes after which the process is not started again whatever its policy: a
    /// usage or configuration error (2) or an unreadable file (4) of `mew bridge` or
    /// `mew agent` fails the same way every time. Empty for other programs, whose codes
    /// mean what their authors chose.
    pub final_codes: Vec<i32>,
    /// Whether it is an MCP bridge, which joins the space while its server is still
    /// starting: it is up once its log says the server is ready.
    pub mcp_bridge: bool,
}

/// The launches of every participant the space starts, in configuration order. `${NAME}`s
/// other than the space's own are looked up with `env`; `warn` receives one line per name
/// with no value.
pub fn launches(
    participants: &[ParticipantEntry],
    cx: &SpaceContext,
    own_exe: &str,
    env: impl Fn(&str) -> Option<String>,
    mut warn: impl FnMut(String),
) -> Vec<Launch> {
    participants
        .iter()
        .filter(|p| p.is_started())
        .filter_map(|p| launch(p, cx, own_exe, &env, &mut warn))
        .collect()
}

fn launch(
    p: &ParticipantEntry,
    cx: &SpaceContext,
    own_exe: &str,
    lookup: &impl Fn(&str) -> Option<String>,
    warn: &mut impl FnMut(String),
) -> Option<Launch> {
    let Some(token) = p.tokens.first() else {
        warn(format!("{}: no token, not started", p.id));
        return None;
    };
    let mut sub = |text: &str| {
        let (out, missing) = substitute(text, |name| match name {
            "PORT" => Some(cx.port.to_string()),
            "SPACE" => Some(cx.space.clone()),
            "TOKEN" => Some(token.clone()),
            "PARTICIPANT_ID" => Some(p.id.clone()),
            "GATEWAY" => Some(cx.gateway.clone()),
            other => lookup(other),
        });
        for name in missing {
            warn(format!(
                "{}: ${{{name}}} is not set; substituted as empty",
                p.id
            ));
        }
        out
    };
    let mut env = vec![
        (GATEWAY_ENV.to_owned(), cx.gateway.clone()),
        (SPACE_ENV.to_owned(), cx.space.clone()),
        (ID_ENV.to_owned(), p.id.clone()),
        (TOKEN_ENV.to_owned(), token.clone()),
    ];
    let (program, args, cwd) = match p.kind {
        ParticipantType::McpBridge => {
            let server = p.mcp_server.as_ref()?;
            let cfg = p.bridge_config.clone().unwrap_or_default();
            let mut a: Vec<String> = vec![
                "bridge".into(),
                "--init-timeout".into(),
                cfg.init_timeout_ms.to_string(),
                "--max-reconnects".into(),
                cfg.max_reconnects.to_string(),
            ];
            if !cfg.reconnect {
                a.push("--no-reconnect".into());
            }
            if let Some(who) = &cfg.sampling_answered_by {
                a.push("--sampling-answered-by".into());
                a.push(who.clone());
            }
            if let Some(v) = &cfg.protocol_version {
                a.push("--protocol-version".into());
                a.push(v.clone());
            }
            for root in &cfg.roots {
                a.push("--root".into());
                a.push(sub(root));
            }
            if let Some(url) = &server.url {
                // Only a variable's name or a file's path goes on the command line: the bridge
                // reads the credential itself (it inherits this environment).
                a.push("--url".into());
                a.push(sub(url));
                for (name, source) in &server.headers {
                    let (flag, value) = match source {
                        HeaderSource::Value(v) => ("--header", sub(v)),
                        HeaderSource::Env { var, prefix } => {
                            ("--header-from", format!("{prefix}{{env:{var}}}"))
                        }
                        HeaderSource::File { path, prefix } => {
                            let path = cx.config_dir.join(sub(path));
                            let path = path.to_string_lossy();
                            ("--header-from", format!("{prefix}{{file:{path}}}"))
                        }
                    };
                    a.push(flag.into());
                    a.push(format!("{name}={value}"));
                }
                let oauth = &server.oauth;
                if !oauth.enabled {
                    a.push("--no-oauth".into());
                }
                if let Some(f) = &oauth.client_file {
                    a.push("--oauth-client-file".into());
                    a.push(cx.config_dir.join(sub(f)).to_string_lossy().into_owned());
                }
                if let Some(u) = &oauth.client_metadata_url {
                    a.push("--oauth-client-metadata-url".into());
                    a.push(sub(u));
                }
                (own_exe.to_owned(), a, cx.root.clone())
            } else {
                // The MCP server inherits the bridge's environment, so its `env` goes there.
                env.extend(server.env.iter().map(|(k, v)| (k.clone(), sub(v))));
                if let Some(dir) = &server.cwd {
                    a.push("--cwd".into());
                    a.push(cx.config_dir.join(sub(dir)).to_string_lossy().into_owned());
                }
                a.push("--".into());
                a.push(sub(&server.command));
                a.extend(server.args.iter().map(|x| sub(x)));
                (own_exe.to_owned(), a, cx.root.clone())
            }
        }
        ParticipantType::Agent => {
            let mut a: Vec<String> = vec!["agent".into()];
            if let Some(path) = &p.agent_config {
                a.push("--config".into());
                a.push(cx.config_dir.join(sub(path)).to_string_lossy().into_owned());
            }
            (own_exe.to_owned(), a, cx.root.clone())
        }
        _ => {
            let command = sub(p.command.as_deref()?);
            let args = p.args.iter().map(|a| sub(a)).collect();
            (command, args, cx.root.clone())
        }
    };
    env.extend(p.env.iter().map(|(k, v)| (k.clone(), sub(v))));
    Some(Launch {
        id: p.id.clone(),
        program,
        args,
        env,
        cwd,
        restart: p.restart_policy,
        model_key: p.kind != ParticipantType::McpBridge,
        guard: cfg!(unix).then(|| own_exe.to_owned()),
        final_codes: match p.kind {
            ParticipantType::McpBridge | ParticipantType::Agent => {
                vec![exit::USAGE, exit::UNREADABLE]
            }
            _ => Vec::new(),
        },
        mcp_bridge: p.kind == ParticipantType::McpBridge,
    })
}

/// What a supervised process is doing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcessState {
    /// Being started.
    Starting,
    /// Running.
    Running,
    /// Exited; started again after a delay.
    Restarting,
    /// Exited and not restarted (its policy, or too many restarts in a row).
    Exited,
    /// Could not be started at all.
    Failed,
}

/// One supervised process, as `mew space status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessInfo {
    /// The participant.
    pub id: String,
    /// The program.
    pub program: String,
    /// State.
    pub state: ProcessState,
    /// Pid of the current process.
    pub pid: Option<u32>,
    /// Restarts so far.
    pub restarts: u32,
    /// When the current process started (Unix ms).
    pub started_at_ms: Option<u64>,
    /// How the last process ended, and its last log lines when it failed.
    pub last_exit: Option<String>,
    /// Where the output of the current (or last) process begins in its log: what an
    /// earlier run wrote before it is not this process's.
    #[serde(default)]
    pub log_offset: u64,
    /// [`Launch::mcp_bridge`]: `mew space up` waits for its server too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mcp_bridge: bool,
}

type States = std::sync::Arc<std::sync::Mutex<Vec<ProcessInfo>>>;

/// The supervised processes of a space.
pub struct Supervisor {
    stop: watch::Sender<bool>,
    tasks: Vec<(String, JoinHandle<()>)>,
    states: States,
    changed: watch::Receiver<u64>,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Updates one process's entry and says so.
fn update(
    states: &States,
    changed: &watch::Sender<u64>,
    id: &str,
    f: impl FnOnce(&mut ProcessInfo),
) {
    if let Ok(mut s) = states.lock()
        && let Some(p) = s.iter_mut().find(|p| p.id == id)
    {
        f(p);
    }
    changed.send_modify(|n| *n += 1);
}

impl Supervisor {
    /// Starts every launch, each under its own supervising task.
    pub fn start(launches: Vec<Launch>, log_dir: &Path) -> Supervisor {
        let (stop, stop_rx) = watch::channel(false);
        let states: States = std::sync::Arc::new(std::sync::Mutex::new(
            launches
                .iter()
                .map(|l| ProcessInfo {
                    id: l.id.clone(),
                    program: l.program.clone(),
                    state: ProcessState::Starting,
                    pid: None,
                    restarts: 0,
                    started_at_ms: None,
                    last_exit: None,
                    log_offset: 0,
                    mcp_bridge: l.mcp_bridge,
                })
                .collect(),
        ));
        let (changed_tx, changed) = watch::channel(0u64);
        let changed_tx = std::sync::Arc::new(changed_tx);
        let tasks = launches
            .into_iter()
            .map(|l| {
                let id = l.id.clone();
                let log = log_dir.join(format!("{}.log", l.id));
                let report = (states.clone(), changed_tx.clone());
                (id, tokio::spawn(supervise(l, log, stop_rx.clone(), report)))
            })
            .collect();
        Supervisor {
            stop,
            tasks,
            states,
            changed,
        }
    }

    /// Every process, in configuration order.
    pub fn processes(&self) -> Vec<ProcessInfo> {
        self.states.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Changes whenever a process starts, exits or is restarted, and a way to read the
    /// processes then (for a task that outlives this borrow).
    pub fn watch(
        &self,
    ) -> (
        watch::Receiver<u64>,
        impl Fn() -> Vec<ProcessInfo> + Send + Sync + 'static,
    ) {
        let states = self.states.clone();
        (self.changed.clone(), move || {
            states.lock().map(|s| s.clone()).unwrap_or_default()
        })
    }

    /// Stops every process (SIGTERM to its process group, SIGKILL after a grace period) and
    /// waits for the supervising tasks.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for (id, t) in self.tasks {
            if t.await.is_err() {
                tracing::warn!(participant = %id, "supervisor task failed");
            }
        }
    }
}

async fn supervise(
    l: Launch,
    log: PathBuf,
    mut stop: watch::Receiver<bool>,
    (states, changed): (States, std::sync::Arc<watch::Sender<u64>>),
) {
    let mut supervision = Supervision::new(l.restart);
    let set = |f: &dyn Fn(&mut ProcessInfo)| update(&states, &changed, &l.id, f);
    loop {
        let log_offset = std::fs::metadata(&log).map_or(0, |m| m.len());
        let mut child = match spawn(&l, &log) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(participant = %l.id, program = %l.program, "cannot start: {e}");
                let why = e.to_string();
                set(&|p| {
                    p.state = ProcessState::Failed;
                    p.pid = None;
                    p.last_exit = Some(format!("cannot start: {why}"));
                });
                return;
            }
        };
        supervision.handle_started(clock::now());
        tracing::info!(participant = %l.id, pid = child.id(), "started");
        let pid = child.id();
        let now = unix_ms();
        let total = supervision.restarts();
        set(&|p| {
            p.state = ProcessState::Running;
            p.pid = pid;
            p.restarts = total;
            p.started_at_ms = Some(now);
            p.log_offset = log_offset;
        });
        let status = tokio::select! {
            s = child.wait() => s,
            _ = stop.changed() => {
                terminate(&mut child).await;
                return;
            }
        };
        let failed = !status.as_ref().is_ok_and(|s| s.success());
        let code = status
            .as_ref()
            .ok()
            .and_then(std::process::ExitStatus::code);
        let settled = code.is_some_and(|c| l.final_codes.contains(&c));
        let mut status_text = match &status {
            Ok(s) => s.to_string(),
            Err(e) => e.to_string(),
        };
        let verdict = if settled {
            status_text.push_str(if code == Some(exit::USAGE) {
                " (a usage or configuration error: not restarted)"
            } else {
                " (a file it needs cannot be read: not restarted)"
            });
            RestartVerdict::Done
        } else {
            supervision.handle_exited(clock::now(), !failed)
        };
        let tail = log_tail_from(&log, log_offset, TAIL_LINES);
        // In the supervisor's own log the quoted lines are set off, so that they are not
        // taken for its own warnings.
        let quoted: String = tail.iter().map(|l| format!("\n  | {l}")).collect();
        let tail = tail.join("\n");
        let ended = if failed {
            format!("{status_text}; last output:\n{tail}")
        } else {
            status_text.clone()
        };
        let (delay, restarts) = match verdict {
            RestartVerdict::Done => {
                set(&|p| {
                    p.state = ProcessState::Exited;
                    p.pid = None;
                    p.last_exit = Some(ended.clone());
                });
                if failed {
                    tracing::warn!(participant = %l.id, status = %status_text, "exited; last output:{quoted}");
                } else {
                    tracing::info!(participant = %l.id, status = %status_text, "exited");
                }
                return;
            }
            RestartVerdict::GaveUp => {
                set(&|p| {
                    p.state = ProcessState::Exited;
                    p.pid = None;
                    p.last_exit = Some(format!(
                        "{ended} (exited {MAX_RESTARTS} times in a row; not restarted again)"
                    ));
                });
                tracing::error!(participant = %l.id, status = %status_text, "exited {MAX_RESTARTS} times in a row; not restarted again; last output:{quoted}");
                return;
            }
            RestartVerdict::Restart { at, in_a_row, .. } => (clock::until(at), in_a_row),
        };
        set(&|p| {
            p.state = ProcessState::Restarting;
            p.pid = None;
            p.last_exit = Some(ended.clone());
        });
        tracing::warn!(participant = %l.id, status = %status_text, "exited; restarting in {delay:?} ({restarts}/{MAX_RESTARTS})");
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.changed() => return,
        }
    }
}

fn spawn(l: &Launch, log: &Path) -> std::io::Result<Child> {
    let out = open_log(log)?;
    let err = out.try_clone()?;
    #[cfg(unix)]
    let (program, args) = match &l.guard {
        Some(exe) => crate::guard::wrap(exe, &l.program, &l.args),
        None => (l.program.clone(), l.args.clone()),
    };
    #[cfg(not(unix))]
    let (program, args) = (l.program.clone(), l.args.clone());
    let mut cmd = Command::new(&program);
    cmd.args(&args)
        .current_dir(&l.cwd)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true);
    // Another participant's token must not reach this process.
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| {
            k.starts_with("MEW_TOKEN") || (!l.model_key && k == crate::agent::KEY_ENV)
        }) {
            cmd.env_remove(&k);
        }
    }
    cmd.envs(l.env.iter().map(|(k, v)| (k, v)));
    #[cfg(unix)]
    cmd.process_group(0);
    cmd.spawn()
}

/// The process's output log, appended to, private to the user running the space (it may
/// hold what the process was given).
fn open_log(path: &Path) -> std::io::Result<std::fs::File> {
    mew_driver_common::state::files::open_private_append(path)
}

/// Lines of a process's log shown when it fails.
pub const TAIL_LINES: usize = 8;
/// Characters of one such line shown at most.
const TAIL_LINE_MAX: usize = 500;

/// The last `n` non-blank lines written to a log at or after byte `from` (each cut to a
/// readable length), for saying why a process failed; none when there is no log.
pub fn log_tail_from(path: &Path, from: u64, n: usize) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    // Only the end matters; a long log is not read whole.
    const END: u64 = 8 * 1024;
    let Ok(mut f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut text = Vec::new();
    if f.seek(SeekFrom::Start(len.saturating_sub(END).max(from)))
        .is_err()
        || f.take(END).read_to_end(&mut text).is_err()
    {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let l = l.trim_end();
            match l.char_indices().nth(TAIL_LINE_MAX) {
                Some((at, _)) => format!("{}…", &l[..at]),
                None => l.to_owned(),
            }
        })
        .collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// Whether a log holds `needle` at or after byte `from` (its first MiB after `from` only:
/// what is awaited is written early in a process's life).
pub fn log_has_from(path: &Path, from: u64, needle: &str) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    const READ_AT_MOST: u64 = 1024 * 1024;
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut text = Vec::new();
    if f.seek(SeekFrom::Start(from)).is_err()
        || f.take(READ_AT_MOST).read_to_end(&mut text).is_err()
    {
        return false;
    }
    String::from_utf8_lossy(&text).contains(needle)
}

/// SIGTERM to the child's process group, SIGKILL after the grace period.
async fn terminate(child: &mut Child) {
    if cfg!(unix) {
        let pid = child.id();
        let _ = terminate_group::<Tokio, _>(pid, STOP_GRACE, child.wait()).await;
    } else {
        let _ = child.kill().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mew_core::gateway::SpaceConfig;

    #[test]
    fn launches_substitute_and_carry_only_their_own_token() {
        let cfg = SpaceConfig::from_yaml(
            r#"
space: {id: sp}
participants:
  agent:
    type: local
    tokens: [agent-token]
    command: "${MEW_TEST_NODE}"
    args: ["agent.js", "--gateway", "ws://localhost:${PORT}", "--space", "${SPACE}", "--missing", "${MEW_TEST_UNSET}"]
    env: {ROLE: "${SPACE}-agent"}
    auto_start: true
    restart_policy: on-failure
  idle: {type: local, command: x, tokens: [t2]}
  files:
    type: mcp-bridge
    tokens: [files-token]
    auto_start: true
    mcp_server: {command: npx, args: [-y, srv, "${SPACE}"], env: {K: v}, cwd: data}
    bridge_config: {init_timeout: 5000, reconnect: false}
  helper:
    type: agent
    tokens: [helper-token]
    auto_start: true
    agent_config: agents/helper.yaml
    env: {MEW_MODEL: small}
"#,
        )
        .unwrap();
        let cx = SpaceContext {
            gateway: "ws://127.0.0.1:9".into(),
            port: 9,
            space: "sp".into(),
            root: "/space".into(),
            config_dir: "/space/.mew".into(),
        };
        let mut warnings = Vec::new();
        let env = |k: &str| (k == "MEW_TEST_NODE").then(|| "node-from-env".to_owned());
        let l = launches(&cfg.participants, &cx, "/bin/mew", env, |w| {
            warnings.push(w)
        });
        assert_eq!(l.len(), 3, "only auto_start participants: {l:?}");
        let agent = &l[0];
        assert_eq!(agent.program, "node-from-env");
        assert_eq!(
            agent.args,
            vec![
                "agent.js",
                "--gateway",
                "ws://localhost:9",
                "--space",
                "sp",
                "--missing",
                ""
            ]
        );
        assert_eq!(agent.restart, RestartPolicy::OnFailure);
        assert!(
            agent
                .env
                .contains(&("MEW_TOKEN".into(), "agent-token".into()))
        );
        assert!(agent.env.contains(&("ROLE".into(), "sp-agent".into())));
        assert!(
            agent
                .env
                .contains(&("MEW_PARTICIPANT_ID".into(), "agent".into()))
        );
        assert_eq!(
            warnings,
            vec!["agent: ${MEW_TEST_UNSET} is not set; substituted as empty"]
        );
        let files = &l[1];
        assert_eq!(files.program, "/bin/mew");
        assert!(
            !files.args.iter().any(|a| a.contains("files-token")),
            "no token in argv"
        );
        assert_eq!(
            files.args,
            vec![
                "bridge",
                "--init-timeout",
                "5000",
                "--max-reconnects",
                "3",
                "--no-reconnect",
                "--cwd",
                "/space/.mew/data",
                "--",
                "npx",
                "-y",
                "srv",
                "sp"
            ]
        );
        assert!(files.env.contains(&("K".into(), "v".into())));
        assert!(!files.model_key && agent.model_key);
        // A usage error or an unreadable file of mew's own programs is final; a local
        // program's codes are its own.
        assert_eq!(files.final_codes, vec![2, 4]);
        assert!(agent.final_codes.is_empty());
        let helper = &l[2];
        assert_eq!(helper.program, "/bin/mew");
        assert_eq!(
            helper.args,
            vec!["agent", "--config", "/space/.mew/agents/helper.yaml"]
        );
        assert!(helper.model_key);
        assert_eq!(helper.final_codes, vec![2, 4]);
        assert!(helper.env.contains(&("MEW_MODEL".into(), "small".into())));
        assert!(
            helper
                .env
                .contains(&("MEW_TOKEN".into(), "helper-token".into()))
        );
        assert!(
            files
                .env
                .contains(&("MEW_TOKEN".into(), "files-token".into()))
        );
    }
}
