//! `mew space up|down|status|connect`: a space (its gateway and every `auto_start`
//! participant) started, watched and stopped as one thing.
//!
//! `up` runs the gateway of `<dir>/.mew/space.yaml` (or `<dir>/space.yaml`) with its
//! supervised processes, waits until each has joined, and keeps `<dir>/.mew/run/space.json`
//! (supervisor pid, port, each process's state) up to date; with `--detach` it runs that in
//! the background (logs in `.mew/logs/space.log`) and returns once the space is up. Every
//! started process runs under `mew guard`, so killing the supervisor, even with SIGKILL,
//! stops them too. `down` stops the supervisor (SIGTERM, then SIGKILL after a grace period,
//! then any process of the space still alive) and removes the run file.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mew_core::gateway::SpaceConfig;
use mew_driver_common::exit;
use mew_driver_common::state::files;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::Failure;
use crate::autostart::{ProcessInfo, ProcessState};

/// `mew space` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Start the space: its gateway and every auto_start participant.
    #[command(after_help = "Examples:
  OPENAI_BASE_URL=http://localhost:11434/v1 mew space up            # foreground; Ctrl-C stops
  mew space up --space-dir my-space --port 0 --detach              # background")]
    Up(UpArgs),
    /// Stop a space started with `mew space up`.
    Down(DirArgs),
    /// Apply the edited space.yaml to the running space (as SIGHUP does): participants
    /// added can join, removed ones and removed tokens are disconnected, capability changes
    /// reach connected participants; the TLS certificate is re-read too.
    Reload(DirArgs),
    /// Show the space's processes, who is online, and the gateway's figures.
    #[command(after_help = "Examples:
  mew space status
  mew space status --json | jq '.participants[] | {id, online}'")]
    Status(StatusArgs),
    /// Join the running space with `mew client` (as its human by default).
    Connect(ConnectArgs),
    /// Forget the space's saved state (`.mew/state/`: runtime grants, invitations, history)
    /// so that its next start begins afresh. Asks for confirmation unless `--yes`.
    #[command(after_help = "Examples:
  mew space reset --space-dir my-space
  mew space reset --space-dir my-space --yes     # scripts: no question asked")]
    Reset(ResetArgs),
}

/// Options of `mew space reset`.
#[derive(clap::Args, Debug)]
pub struct ResetArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
}

/// The folder where a space's gateway keeps its state.
pub fn state_dir(space_dir: &Path) -> PathBuf {
    space_dir.join(".mew").join("state")
}

/// Runs `mew space reset`.
pub fn reset(args: ResetArgs) -> Result<String, Failure> {
    use std::io::{BufRead, IsTerminal, Write};
    let dir = &args.dir.space_dir;
    config_path(dir)?;
    refuse_if_running(dir)?;
    let state = state_dir(dir);
    if !state.exists() {
        return Ok(format!(
            "no saved state in {}; the space already starts afresh",
            state.display()
        ));
    }
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::new(
                exit::USAGE,
                "mew space reset asks for confirmation on a terminal; pass --yes to reset without one",
            ));
        }
        let mut out = std::io::stdout().lock();
        let asked = write!(
            out,
            "This forgets everything the space was given at run time (grants, invitations, \
             history) kept in {}.\nReset? [y/N] ",
            state.display()
        )
        .and_then(|()| out.flush());
        if let Err(e) = asked {
            crate::stdout_failed(&e);
        }
        drop(out);
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        if !matches!(line.trim(), "y" | "Y" | "yes" | "YES") {
            return Err(Failure::new(
                exit::RUNTIME,
                "reset cancelled; nothing changed",
            ));
        }
    }
    mew_driver_common::state::durable::reset(&state).map_err(|e| {
        Failure::new(
            exit::RUNTIME,
            format!("cannot remove {}: {e}", state.display()),
        )
    })?;
    Ok(format!(
        "the space's saved state in {} is gone; its next start begins afresh",
        state.display()
    ))
}

/// The space folder.
#[derive(clap::Args, Debug)]
pub struct DirArgs {
    /// Folder of the space (holding `.mew/space.yaml` or `space.yaml`).
    #[arg(long, default_value = ".")]
    pub space_dir: PathBuf,
}

/// Options of `mew space up`.
#[derive(clap::Args, Debug)]
pub struct UpArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Port of the gateway (0 picks a free one).
    #[arg(long, short, default_value_t = 8080)]
    port: u16,
    /// Run in the background and return once the space is up.
    #[arg(long)]
    detach: bool,
    /// How long to wait for every participant to join, in seconds.
    #[arg(long, default_value_t = 60)]
    wait: u64,
    /// Log filter of the gateway.
    #[arg(long, default_value = "info")]
    log_level: String,
    /// Run as the background supervisor of `--detach` (its output goes to its log).
    #[arg(long, hide = true)]
    supervisor: bool,
}

/// Options of `mew space status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// One JSON object with a `participants` list.
    #[arg(long)]
    json: bool,
}

/// Options of `mew space connect`.
#[derive(clap::Args, Debug)]
pub struct ConnectArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The participant to join as.
    #[arg(long = "as", default_value = HUMAN)]
    id: String,
    /// Print what is observed as JSON lines (the client's --json).
    #[arg(long)]
    json: bool,
    /// Print the link of the space's web page for this participant (its token in the
    /// link's fragment) instead of starting the client.
    #[arg(long, conflicts_with = "json")]
    web: bool,
}

/// `.mew/run/space.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunFile {
    /// The supervisor's pid.
    pub pid: u32,
    /// The gateway's port.
    pub port: u16,
    /// `ws://127.0.0.1:PORT`.
    pub gateway: String,
    /// Space id.
    pub space: String,
    /// Start time (Unix ms).
    pub started_at_ms: u64,
    /// Whether every participant has joined (or given up).
    pub ready: bool,
    /// The supervised processes.
    pub processes: Vec<ProcessInfo>,
    /// The processes that had not joined when the wait ended.
    #[serde(default)]
    pub not_joined: Vec<String>,
}

fn config_path(dir: &Path) -> Result<PathBuf, Failure> {
    for p in [dir.join(".mew/space.yaml"), dir.join("space.yaml")] {
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(Failure::new(
        exit::USAGE,
        format!(
            "no space in {}: expected .mew/space.yaml or space.yaml (create one with `mew init`)",
            dir.display()
        ),
    ))
}

fn run_path(dir: &Path) -> PathBuf {
    dir.join(".mew/run/space.json")
}

fn read_run(dir: &Path) -> Option<RunFile> {
    let text = std::fs::read_to_string(run_path(dir)).ok()?;
    serde_json::from_str(&text).ok()
}

fn write_run(dir: &Path, run: &RunFile) {
    let text = serde_json::to_string_pretty(run).unwrap_or_default();
    if let Err(e) = files::write_private(&run_path(dir), text.as_bytes()) {
        tracing::warn!("cannot write {}: {e}", run_path(dir).display());
    }
}

fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // A zombie still answers kill(0): read its state too.
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok() && !zombie
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Every participant's tokens, resolved as the gateway resolves them (literals with
/// `${VAR}` substituted, token files, `MEW_TOKEN_<ID>`); none are generated here.
fn resolved(dir: &Path, config: &Path) -> Option<SpaceConfig> {
    let text = std::fs::read_to_string(config).ok()?;
    let mut cfg = SpaceConfig::from_yaml(&text).ok()?;
    cfg.resolve_tokens(
        |var| std::env::var(var).ok(),
        |id| files::read_token_file(dir, id),
        String::new,
    );
    Some(cfg)
}

/// The token of `id`.
fn token_of(dir: &Path, config: &Path, id: &str) -> Option<String> {
    let cfg = resolved(dir, config)?;
    let p = cfg.participants.iter().find(|p| p.id == id)?;
    p.tokens.iter().find(|t| !t.is_empty()).cloned()
}

/// A token of any participant, for the gateway's authenticated endpoints.
fn any_token(dir: &Path, config: &Path) -> Option<String> {
    resolved(dir, config)?
        .participants
        .iter()
        .find_map(|p| p.tokens.iter().find(|t| !t.is_empty()).cloned())
}

/// `GET path` of the space's gateway on loopback: over HTTPS when the space serves TLS
/// (`tls_cert`, its certificate, the only one trusted: see
/// [`mew_driver_common::client::tls::pinned_agent`]), else plain HTTP.
fn http_get(port: u16, path: &str, token: Option<&str>, tls_cert: Option<&Path>) -> Option<Value> {
    let timeout = Duration::from_secs(2);
    let (agent, url) = match tls_cert {
        Some(cert) => (
            mew_driver_common::client::tls::pinned_agent(cert, timeout).ok()?,
            format!("https://127.0.0.1:{port}{path}"),
        ),
        None => (
            ureq::Agent::config_builder()
                .timeout_global(Some(timeout))
                .build()
                .into(),
            format!("http://127.0.0.1:{port}{path}"),
        ),
    };
    let mut req = agent.get(url);
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let mut resp = req.call().ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let text = resp.body_mut().read_to_string().ok()?;
    serde_json::from_str(&text).ok()
}

/// The certificate a space serves (`gateway.tls.cert` of its space.yaml), if it serves TLS.
fn space_cert(dir: &Path, config: &Path) -> Option<PathBuf> {
    let tls = resolved(dir, config)?.gateway.tls?;
    Some(
        files::SpaceLayout::for_config(config)
            .config_dir
            .join(tls.cert),
    )
}

/// The participant `mew space connect` joins as by default.
const HUMAN: &str = "human";

/// The web page's link for the space's human (with its token), if it has one; `gateway` is
/// the run file's `ws://` or `wss://` address.
fn human_link(dir: &Path, config: &Path, gateway: &str, space: &str) -> Option<String> {
    let token = token_of(dir, config, HUMAN)?;
    Some(crate::web::link(&page_base(gateway), space, Some(&token)))
}

/// `http(s)://HOST:PORT` of a `ws(s)://HOST:PORT` gateway address.
fn page_base(gateway: &str) -> String {
    match gateway.split_once("://") {
        Some(("wss", rest)) => format!("https://{rest}"),
        Some((_, rest)) => format!("http://{rest}"),
        None => format!("http://{gateway}"),
    }
}

/// Runs `mew space up` in the foreground (also the detached supervisor).
pub async fn up(args: UpArgs) -> Result<(), Failure> {
    // Caught before anything starts, so that Ctrl-C at any moment stops what was started
    // and removes the run file, rather than ending this process by its default action.
    let mut signals = crate::StopSignals::new();
    let dir = args.dir.space_dir.clone();
    let config = config_path(&dir)?;
    refuse_if_running(&dir)?;
    if args.detach {
        return detach(&args, &config, &mut signals).await;
    }
    crate::init_logging(&args.log_level)?;
    let gw = crate::gateway::Args {
        config: Some(config.clone()),
        no_auto_start: false,
        port: args.port,
        bind: std::net::IpAddr::from([127, 0, 0, 1]),
        log_level: args.log_level.clone(),
        log_format: std::env::var(crate::LOG_FORMAT_ENV).unwrap_or_else(|_| "text".into()),
        cluster: None,
        node_id: None,
        node_timeout: 5.0,
        cluster_log_max: mew_cluster::DEFAULT_MAX_LOG_BYTES,
        tls_cert: None,
        tls_key: None,
    };
    let mut running = crate::gateway::start(&gw).await?;
    let port = running.local.port();
    let log_dir = files::SpaceLayout::for_config(&config).log_dir;
    let base = RunFile {
        pid: std::process::id(),
        port,
        gateway: format!("{}://{}", running.ws_scheme(), running.local),
        space: running.space.clone(),
        started_at_ms: unix_ms(),
        ready: false,
        processes: running.processes.processes(),
        not_joined: Vec::new(),
    };
    write_run(&dir, &base);
    let (mut changes, processes) = running.processes.watch();
    let waited: std::sync::Arc<std::sync::Mutex<Option<Vec<String>>>> = Default::default();
    let keeper = {
        let (dir, base, waited) = (dir.clone(), base.clone(), waited.clone());
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                let mut run = base.clone();
                if let Some(not_joined) = waited.lock().ok().and_then(|w| w.clone()) {
                    run.ready = true;
                    run.not_joined = not_joined;
                }
                run.processes = processes();
                write_run(&dir, &run);
            }
        })
    };
    let token = any_token(&dir, &config);
    let deadline = Instant::now() + Duration::from_secs(args.wait);
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let started = Instant::now();
    // Processes (by id and where their output begins) whose log said they are ready.
    let mut ready: std::collections::HashSet<(String, u64)> = Default::default();
    let (procs, not_joined) = loop {
        let procs = running.processes.processes();
        // Asked inside the process: works whether or not the port speaks TLS.
        let on = running.online(token.as_deref()).await;
        // A bridge joins while its MCP server starts: it is up once its log says the server
        // is ready, and one whose server fails is not up, though it was online for a while.
        for p in &procs {
            if p.mcp_bridge
                && on.contains(&p.id)
                && !ready.contains(&(p.id.clone(), p.log_offset))
                && crate::autostart::log_has_from(
                    &log_dir.join(format!("{}.log", p.id)),
                    p.log_offset,
                    mew_driver_common::client::bridge::SERVER_READY_LOG,
                )
            {
                ready.insert((p.id.clone(), p.log_offset));
            }
        }
        let not_joined: Vec<String> = procs
            .iter()
            .filter(|p| {
                !on.contains(&p.id)
                    || (p.mcp_bridge && !ready.contains(&(p.id.clone(), p.log_offset)))
            })
            .map(|p| p.id.clone())
            .collect();
        let waiting: Vec<&str> = procs
            .iter()
            .filter(|p| {
                not_joined.contains(&p.id)
                    && !matches!(p.state, ProcessState::Exited | ProcessState::Failed)
            })
            .map(|p| p.id.as_str())
            .collect();
        if waiting.is_empty() || Instant::now() >= deadline {
            break (procs, not_joined);
        }
        if terminal {
            eprint!(
                "\r\x1b[Kwaiting for {} to join ({}s)",
                waiting.join(", "),
                started.elapsed().as_secs()
            );
        }
        tokio::select! {
            () = signals.recv() => {
                if terminal {
                    eprint!("\r\x1b[K");
                }
                eprintln!(
                    "mew: interrupted while waiting for {} to join; stopping the space",
                    waiting.join(", ")
                );
                keeper.abort();
                let _ = keeper.await;
                let result = running.stop().await;
                let _ = std::fs::remove_file(run_path(&dir));
                return result;
            }
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    };
    if terminal {
        eprint!("\r\x1b[K");
    }
    if let Ok(mut w) = waited.lock() {
        *w = Some(not_joined.clone());
    }
    let mut run = base.clone();
    run.ready = true;
    run.processes = procs.clone();
    run.not_joined = not_joined.clone();
    write_run(&dir, &run);
    let shown = args.dir.space_dir.display();
    say!(
        "space {:?} is up on {}://{}\n  join:  mew space connect --space-dir {shown}\n  state: mew space status --space-dir {shown}\n  reload space.yaml: mew space reload --space-dir {shown}\n  stop:  Ctrl-C, or mew space down --space-dir {shown}",
        running.space,
        running.ws_scheme(),
        running.local
    );
    // The link carries the human's token: for the terminal only, never the supervisor's log.
    if !args.supervisor
        && let Some(link) = human_link(&dir, &config, &base.gateway, &running.space)
    {
        say!("  web:   {link}");
    }
    let failed = report_not_joined(&procs, &not_joined, args.wait, &log_dir);
    // The detached supervisor's caller says this on the terminal, where it is true.
    if !failed.is_empty() && !args.supervisor {
        eprintln!(
            "mew: the rest of the space keeps running; Ctrl-C or `mew space down --space-dir {shown}` stops it"
        );
    }
    running.until_stopped_with(signals.recv()).await;
    keeper.abort();
    let _ = keeper.await;
    let result = running.stop().await;
    let _ = std::fs::remove_file(run_path(&dir));
    result?;
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(
            exit::RUNTIME,
            format!("{} did not join when the space started", failed.join(", ")),
        ))
    }
}

/// Says, on stderr, why each started participant in `not_joined` is not in the space, with
/// the last lines of its log; returns their ids.
fn report_not_joined(
    procs: &[ProcessInfo],
    not_joined: &[String],
    wait: u64,
    log_dir: &Path,
) -> Vec<String> {
    let mut failed = Vec::new();
    for p in procs.iter().filter(|p| not_joined.contains(&p.id)) {
        eprintln!("mew: {}", not_joined_line(p, wait));
        for line in crate::autostart::log_tail_from(
            &log_dir.join(format!("{}.log", p.id)),
            p.log_offset,
            crate::autostart::TAIL_LINES,
        ) {
            eprintln!("  | {line}");
        }
        failed.push(p.id.clone());
    }
    failed
}

/// One line on why a started participant is not in the space.
fn not_joined_line(p: &ProcessInfo, wait: u64) -> String {
    // The first line of the last exit: its status (the log's lines are shown apart).
    let ended = p
        .last_exit
        .as_deref()
        .and_then(|e| e.lines().next())
        .map(|e| e.trim_end_matches("; last output:").to_owned());
    match (&p.state, ended) {
        (ProcessState::Exited | ProcessState::Failed, Some(e)) => {
            format!("{} did not start: {e}", p.id)
        }
        (ProcessState::Exited | ProcessState::Failed, None) => {
            format!("{} did not start", p.id)
        }
        (ProcessState::Restarting, Some(e)) => format!(
            "{} has not joined after {wait}s (restarting after {e}; restarts: {})",
            p.id, p.restarts
        ),
        (_, _) if p.mcp_bridge => format!(
            "{} has not joined, or its MCP server is not ready, after {wait}s (running)",
            p.id
        ),
        (_, _) => format!("{} has not joined after {wait}s (running)", p.id),
    }
}

fn refuse_if_running(dir: &Path) -> Result<(), Failure> {
    if let Some(run) = read_run(dir) {
        if alive(run.pid) {
            return Err(Failure::new(
                exit::RUNTIME,
                format!(
                    "space {:?} is already running in {} (pid {}, {}); `mew space down` stops it",
                    run.space,
                    dir.display(),
                    run.pid,
                    run.gateway
                ),
            ));
        }
        // Left by a supervisor that did not stop cleanly.
        let _ = std::fs::remove_file(run_path(dir));
    }
    Ok(())
}

/// Starts the supervisor in the background and waits until it says the space is up.
async fn detach(
    args: &UpArgs,
    config: &Path,
    signals: &mut crate::StopSignals,
) -> Result<(), Failure> {
    use std::os::unix::process::CommandExt;
    let dir = &args.dir.space_dir;
    let layout = files::SpaceLayout::for_config(config);
    let log_path = layout.log_dir.join("space.log");
    let log = files::open_private_append(&log_path)
        .map_err(|e| Failure::new(exit::RUNTIME, format!("{}: {e}", log_path.display())))?;
    let log_from = log.metadata().map(|m| m.len()).unwrap_or(0);
    let err = log
        .try_clone()
        .map_err(|e| Failure::new(exit::RUNTIME, e.to_string()))?;
    let exe = std::env::current_exe().map_err(|e| Failure::new(exit::RUNTIME, e.to_string()))?;
    let mut child = std::process::Command::new(exe)
        .args(["space", "up", "--supervisor", "--space-dir"])
        // The supervisor starts in the same folder; absolute all the same.
        .arg(std::path::absolute(dir).unwrap_or_else(|_| dir.clone()))
        .args(["--port", &args.port.to_string()])
        .args(["--wait", &args.wait.to_string()])
        .args(["--log-level", &args.log_level])
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err)
        // Its own process group: the terminal's Ctrl-C is not for it.
        .process_group(0)
        .spawn()
        .map_err(|e| Failure::new(exit::RUNTIME, format!("cannot start the supervisor: {e}")))?;
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let started = Instant::now();
    let limit = Duration::from_secs(args.wait + 30);
    let shown = dir.display();
    loop {
        if let Some(run) = read_run(dir).filter(|r| r.pid == child.id() && r.ready) {
            if terminal {
                eprint!("\r\x1b[K");
            }
            for w in log_warnings(&log_path, log_from) {
                eprintln!("mew: warning: {w}");
            }
            say!(
                "space {:?} is up on {} (supervisor pid {}, logs in {})\n  join:  mew space connect --space-dir {shown}\n  state: mew space status --space-dir {shown}\n  stop:  mew space down --space-dir {shown}",
                run.space,
                run.gateway,
                run.pid,
                layout.log_dir.display()
            );
            if let Some(link) = human_link(dir, config, &run.gateway, &run.space) {
                say!("  web:   {link}");
            }
            let failed =
                report_not_joined(&run.processes, &run.not_joined, args.wait, &layout.log_dir);
            if failed.is_empty() {
                return Ok(());
            }
            return Err(Failure::new(
                exit::RUNTIME,
                format!(
                    "{} did not join; the rest of the space is left running (supervisor pid {}): `mew space down --space-dir {shown}` stops it",
                    failed.join(", "),
                    run.pid
                ),
            ));
        }
        if let Ok(Some(status)) = child.try_wait() {
            if terminal {
                eprint!("\r\x1b[K");
            }
            let last = crate::autostart::log_tail_from(&log_path, log_from, 5);
            return Err(Failure::new(
                exit::RUNTIME,
                format!(
                    "the space did not start ({status}); {}: {}",
                    log_path.display(),
                    last.join(" | ")
                ),
            ));
        }
        if started.elapsed() > limit {
            return Err(Failure::new(
                exit::RUNTIME,
                format!(
                    "the space did not come up within {}s; it is left running: see {}, and `mew space down --space-dir {shown}` stops it",
                    limit.as_secs(),
                    log_path.display()
                ),
            ));
        }
        if terminal {
            let waiting = read_run(dir)
                .map(|r| {
                    r.processes
                        .iter()
                        .map(|p| p.id.clone())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_else(|| "the gateway".into());
            eprint!(
                "\r\x1b[Kstarting {waiting} ({}s)",
                started.elapsed().as_secs()
            );
        }
        tokio::select! {
            () = signals.recv() => {
                if terminal {
                    eprint!("\r\x1b[K");
                }
                eprintln!("mew: interrupted; stopping the space");
                stop_supervisor(&mut child).await;
                let _ = std::fs::remove_file(run_path(dir));
                return Ok(());
            }
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// Stops a supervisor this process started: SIGTERM (it stops what it started and removes
/// its run file), SIGKILL after [`DOWN_GRACE`].
async fn stop_supervisor(child: &mut std::process::Child) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let _ = kill(pid, Signal::SIGTERM);
    let end = Instant::now() + DOWN_GRACE;
    while Instant::now() < end {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Most warnings of a start shown on the terminal.
const MAX_WARNINGS: usize = 20;

/// The warnings and errors the supervisor logged since byte `from` of its log (the
/// configuration's near misses, unset variables, ...), each as one line without time and
/// source; not those of started processes, which are reported with their own log.
fn log_warnings(path: &Path, from: u64) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let mut text = Vec::new();
    if f.seek(SeekFrom::Start(from)).is_err() || f.take(256 * 1024).read_to_end(&mut text).is_err()
    {
        return Vec::new();
    }
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(warning_of)
        .take(MAX_WARNINGS)
        .collect()
}

/// The message of a log line at WARN or ERROR (text or JSON format), unless it comes from
/// the supervision of started processes.
fn warning_of(line: &str) -> Option<String> {
    if line.starts_with('{') {
        let v: Value = serde_json::from_str(line).ok()?;
        let level = v["level"].as_str()?;
        let target = v["target"].as_str().unwrap_or_default();
        if !matches!(level, "WARN" | "ERROR") || target.ends_with("autostart") {
            return None;
        }
        return v["fields"]["message"].as_str().map(str::to_owned);
    }
    // A line of another process's output quoted in a message of the supervisor's
    // (indented) is not one of its warnings.
    if line.starts_with(char::is_whitespace) {
        return None;
    }
    let (_, rest) = line
        .split_once(" WARN ")
        .or_else(|| line.split_once(" ERROR "))?;
    let rest = rest.trim_start();
    let (target, message) = rest.split_once(": ")?;
    if target.contains(' ') || target.ends_with("autostart") {
        return None;
    }
    Some(message.to_owned())
}

/// Grace period between SIGTERM and SIGKILL of `mew space down`.
const DOWN_GRACE: Duration = Duration::from_secs(15);

/// Runs `mew space down`.
pub fn down(args: DirArgs) -> Result<String, Failure> {
    use mew_driver_common::client::process::{Stop, signal_group};
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let dir = &args.space_dir;
    let Some(run) = read_run(dir) else {
        return Ok(format!("no space is running in {}", dir.display()));
    };
    let pid = Pid::from_raw(i32::try_from(run.pid).unwrap_or(i32::MAX));
    if alive(run.pid) {
        let _ = kill(pid, Signal::SIGTERM);
        let end = Instant::now() + DOWN_GRACE;
        while alive(run.pid) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        if alive(run.pid) {
            let _ = kill(pid, Signal::SIGKILL);
        }
    }
    // Whatever is left of the space's processes (each leads its own group).
    let mut killed = Vec::new();
    for p in &run.processes {
        if let Some(child) = p.pid.filter(|c| alive(*c)) {
            signal_group(Some(child), Stop::Kill);
            killed.push(p.id.clone());
        }
    }
    let _ = std::fs::remove_file(run_path(dir));
    let mut out = format!("space {:?} stopped", run.space);
    if !killed.is_empty() {
        out.push_str(&format!(" (killed left-over {})", killed.join(", ")));
    }
    Ok(out)
}

/// Runs `mew space reload`: checks the file here first (a file that does not parse is
/// reported and nothing is sent), then sends SIGHUP to the space's supervisor.
pub fn reload(args: DirArgs) -> Result<String, Failure> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let dir = &args.space_dir;
    let config = config_path(dir)?;
    let Some(run) = read_run(dir).filter(|r| alive(r.pid)) else {
        return Err(Failure::new(
            exit::RUNTIME,
            format!("no space is running in {}", dir.display()),
        ));
    };
    let (text, _) =
        files::read_config(&config).map_err(|e| Failure::new(exit::UNREADABLE, e.to_string()))?;
    if let Err(errs) = SpaceConfig::from_yaml(&text) {
        let lines: Vec<String> = errs.0.iter().map(ToString::to_string).collect();
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "{} does not parse; the running space keeps its configuration: {}",
                config.display(),
                lines.join("; ")
            ),
        ));
    }
    let pid = Pid::from_raw(i32::try_from(run.pid).unwrap_or(i32::MAX));
    kill(pid, Signal::SIGHUP).map_err(|e| {
        Failure::new(
            exit::RUNTIME,
            format!("cannot signal the space (pid {}): {e}", run.pid),
        )
    })?;
    Ok(format!(
        "space {:?} (pid {}) is re-reading {}; its log says what changed",
        run.space,
        run.pid,
        config.display()
    ))
}

/// Runs `mew space status`; `Err` (exit 1) when the space is not running.
pub fn status(args: StatusArgs) -> Result<String, Failure> {
    let dir = &args.dir.space_dir;
    let config = config_path(dir)?;
    let run = read_run(dir).filter(|r| alive(r.pid));
    let Some(run) = run else {
        let msg = format!("no space is running in {}", dir.display());
        if args.json {
            say!("{}", json!({"running": false, "participants": []}));
        }
        return Err(Failure::new(exit::RUNTIME, msg));
    };
    let token = any_token(dir, &config);
    let cert = space_cert(dir, &config).filter(|_| run.gateway.starts_with("wss://"));
    let health = http_get(run.port, "/health", None, cert.as_deref());
    let members = http_get(run.port, "/participants", token.as_deref(), cert.as_deref())
        .and_then(|v| v["participants"].as_array().cloned())
        .unwrap_or_default();
    let now = unix_ms();
    let log_dir = files::SpaceLayout::for_config(&config).log_dir;
    let participants: Vec<Value> = members
        .iter()
        .map(|m| {
            let id = m["id"].as_str().unwrap_or_default();
            let process = run.processes.iter().find(|p| p.id == id).map(|p| {
                json!({"state": p.state, "pid": p.pid, "restarts": p.restarts,
                       "uptime_s": p.started_at_ms.filter(|_| p.pid.is_some()).map(|t| now.saturating_sub(t) / 1000),
                       "last_exit": p.last_exit})
            });
            let mcp = run
                .processes
                .iter()
                .find(|p| p.id == id && p.mcp_bridge)
                .and_then(|p| {
                    mcp_in_use(&log_dir.join(format!("{id}.log")), p.log_offset)
                });
            json!({"id": id, "online": m["online"], "process": process, "mcp": mcp})
        })
        .collect();
    let v = json!({
        "running": true, "space": run.space, "gateway": run.gateway, "pid": run.pid,
        "uptime_s": now.saturating_sub(run.started_at_ms) / 1000,
        "health": health, "participants": participants,
    });
    if args.json {
        return Ok(v.to_string());
    }
    let mut out = format!(
        "space {:?} on {} (supervisor pid {}, up {}s)\n",
        run.space, run.gateway, run.pid, v["uptime_s"]
    );
    if let Some(h) = &health {
        out.push_str(&format!(
            "gateway: {} connections, {} online, {} envelopes in history, {} audit records dropped\n",
            h["connections"], h["participants_online"], h["history"], h["audit_dropped"]
        ));
        let r = &h["restored"];
        let fresh = r["snapshot_entry"].is_null() && r["entries_replayed"].as_u64() == Some(0);
        if r.is_object() && fresh {
            out.push_str(&format!(
                "state: kept in {}; new at this start (nothing was saved before)\n",
                r["dir"].as_str().unwrap_or_default()
            ));
        } else if r.is_object() {
            let mut line = format!(
                "state: kept in {}; at start restored {} members, {} grants, {} envelopes of history ({} entries replayed",
                r["dir"].as_str().unwrap_or_default(),
                r["members"],
                r["grants"],
                r["history"],
                r["entries_replayed"]
            );
            if let Some(e) = r["snapshot_entry"].as_u64() {
                line.push_str(&format!(" after a snapshot at entry {e}"));
            }
            if let Some(n) = r["bytes_cut"].as_u64() {
                line.push_str(&format!("; a torn tail of {n} bytes cut"));
            }
            line.push_str(")\n");
            out.push_str(&line);
        } else {
            out.push_str("state: not kept on disk (gateway.durability is off)\n");
        }
    }
    out.push_str(&format!(
        "{:<16} {:<8} {:<11} {:>8} {:>9} {:>8}  {}\n",
        "PARTICIPANT", "ONLINE", "PROCESS", "PID", "RESTARTS", "UPTIME", "MCP"
    ));
    for p in &participants {
        let proc_ = &p["process"];
        let dash = || "-".to_owned();
        out.push_str(&format!(
            "{:<16} {:<8} {:<11} {:>8} {:>9} {:>8}  {}\n",
            p["id"].as_str().unwrap_or_default(),
            if p["online"] == true { "yes" } else { "no" },
            proc_["state"].as_str().map_or_else(dash, str::to_owned),
            proc_["pid"].as_u64().map_or_else(dash, |n| n.to_string()),
            proc_["restarts"]
                .as_u64()
                .map_or_else(dash, |n| n.to_string()),
            proc_["uptime_s"]
                .as_u64()
                .map_or_else(dash, |n| format!("{n}s")),
            match (
                p["mcp"]["protocol"].as_str(),
                p["mcp"]["transport"].as_str()
            ) {
                (Some(v), Some(t)) => format!("{v} ({t})"),
                (Some(v), None) => v.to_owned(),
                _ => dash(),
            },
        ));
    }
    // Why a process is not running, with the last lines of its output.
    for p in &run.processes {
        if matches!(p.state, ProcessState::Running | ProcessState::Starting) {
            continue;
        }
        if let Some(ended) = &p.last_exit {
            let state = serde_json::to_value(&p.state).unwrap_or_default();
            let mut lines = ended.lines();
            out.push_str(&format!(
                "{} {}: {}\n",
                p.id,
                state.as_str().unwrap_or_default(),
                lines.next().unwrap_or_default()
            ));
            for l in lines {
                out.push_str(&format!("  | {l}\n"));
            }
        }
    }
    Ok(out.trim_end().to_owned())
}

/// The MCP revision and transport a bridge's server speaks, from the last "server ready"
/// line its log holds since its process started (the bridge logs it once per server start).
fn mcp_in_use(log: &std::path::Path, from: u64) -> Option<Value> {
    let ready = mew_driver_common::client::bridge::SERVER_READY_LOG;
    let lines = crate::autostart::log_tail_from(log, from, 200);
    let line = lines.iter().rev().find(|l| l.contains(ready))?;
    let field = |name: &str| {
        let at = line.find(&format!("{name}="))? + name.len() + 1;
        let v: String = line[at..]
            .chars()
            .take_while(|c| !c.is_whitespace())
            .filter(|c| *c != '"')
            .collect();
        (!v.is_empty()).then_some(v)
    };
    Some(json!({"protocol": field("protocol")?, "transport": field("transport")}))
}

/// Runs `mew space connect`: becomes `mew client` (the token passed in the environment).
pub fn connect(args: ConnectArgs) -> Result<String, Failure> {
    use std::os::unix::process::CommandExt;
    let dir = &args.dir.space_dir;
    let config = config_path(dir)?;
    let Some(run) = read_run(dir).filter(|r| alive(r.pid)) else {
        return Err(Failure::new(
            exit::CONNECT,
            format!(
                "no space is running in {} (start it with `mew space up`)",
                dir.display()
            ),
        ));
    };
    let Some(token) = token_of(dir, &config, &args.id) else {
        return Err(Failure::new(
            exit::USAGE,
            format!("no token for {:?} in this space", args.id),
        ));
    };
    if args.web {
        return Ok(crate::web::link(
            &page_base(&run.gateway),
            &run.space,
            Some(&token),
        ));
    }
    let exe = std::env::current_exe().map_err(|e| Failure::new(exit::RUNTIME, e.to_string()))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["client", "--gateway", &run.gateway, "--space", &run.space])
        .args(["--id", &args.id])
        .env(crate::connect::TOKEN_ENV, token);
    if args.json {
        cmd.arg("--json");
    }
    let e = cmd.exec();
    Err(Failure::new(
        exit::RUNTIME,
        format!("cannot run mew client: {e}"),
    ))
}
