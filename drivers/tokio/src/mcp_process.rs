//! An MCP server's child process on tokio: what carries out the MCP client's `Spawn`,
//! `Write` and `Kill` outputs and reports stdout, stderr and the exit back.
//!
//! The child runs in its own process group, so stopping it reaches whatever it started
//! (`npx` runs the real server as a grandchild): termination sends SIGTERM to the group,
//! then SIGKILL after the grace period; once the leader has exited the rest of the group is
//! killed too, so no process outlives the server. Dropping an [`McpProcess`] kills the group.

use std::io;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use mew_core::mcp::ExitStatus;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::mpsc;

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerCommand {
    /// The program (looked up in `PATH`).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables (the rest is inherited).
    pub env: Vec<(String, String)>,
    /// Working directory (default: inherited).
    pub cwd: Option<PathBuf>,
}

impl ServerCommand {
    /// `program args...` with the inherited environment and directory.
    pub fn new<S: Into<String>>(
        program: impl Into<String>,
        args: impl IntoIterator<Item = S>,
    ) -> Self {
        ServerCommand {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            cwd: None,
        }
    }
}

/// Something the running process did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEvent {
    /// Bytes on stdout.
    Stdout(Vec<u8>),
    /// Bytes on stderr.
    Stderr(Vec<u8>),
    /// The process exited; its stdout and stderr have been read to the end (or for a short
    /// while, when something else it started still holds them).
    Exited(ExitStatus),
}

/// Lines waiting to be written to stdin; a server that stops reading holds them here, and
/// beyond this lines are dropped (their requests then time out in the client).
const STDIN_QUEUE: usize = 4096;
/// Chunks read ahead of the consumer, per process.
const EVENT_QUEUE: usize = 256;
const READ_CHUNK: usize = 64 * 1024;
/// How long stdout is drained after the process exited.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(250);

/// One server process at a time, restarted on request. See the module documentation.
#[derive(Debug)]
pub struct McpProcess {
    command: ServerCommand,
    /// Counts spawns; events of earlier processes are dropped.
    generation: u64,
    current: Option<Current>,
    events_tx: mpsc::Sender<(u64, ProcessEvent)>,
    events_rx: mpsc::Receiver<(u64, ProcessEvent)>,
}

#[derive(Debug)]
struct Current {
    pid: Option<u32>,
    stdin: Option<mpsc::Sender<String>>,
    kill: mpsc::Sender<Duration>,
}

impl McpProcess {
    /// Nothing runs until [`McpProcess::spawn`].
    pub fn new(command: ServerCommand) -> Self {
        let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
        McpProcess {
            command,
            generation: 0,
            current: None,
            events_tx,
            events_rx,
        }
    }

    /// The command.
    pub fn command(&self) -> &ServerCommand {
        &self.command
    }

    /// The running process's id.
    pub fn pid(&self) -> Option<u32> {
        self.current.as_ref().and_then(|c| c.pid)
    }

    /// Whether a process is running (spawned and its exit not yet returned by
    /// [`McpProcess::next_event`]).
    pub fn is_running(&self) -> bool {
        self.current.is_some()
    }

    /// Starts the server. A process still running from before is killed first.
    pub fn spawn(&mut self) -> io::Result<u32> {
        if let Some(old) = self.current.take() {
            kill_group(old.pid, true);
        }
        let c = &self.command;
        let mut cmd = Command::new(&c.program);
        // The bridge's own connection and token are not the server's to hold.
        for (k, _) in std::env::vars_os() {
            if k.to_str()
                .is_some_and(mew_driver_common::secret::is_connection_env)
            {
                cmd.env_remove(&k);
            }
        }
        cmd.args(&c.args)
            .envs(c.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(dir) = &c.cwd {
            cmd.current_dir(dir);
        }
        #[cfg(unix)]
        cmd.process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", c.program)))?;
        self.generation += 1;
        let generation = self.generation;
        let pid = child.id();
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");

        let (lines_tx, mut lines_rx) = mpsc::channel::<String>(STDIN_QUEUE);
        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(line) = lines_rx.recv().await {
                // A dead server's pipe fails the write; its exit is reported separately.
                if stdin.write_all(line.as_bytes()).await.is_err() {
                    break;
                }
                if lines_rx.is_empty() && stdin.flush().await.is_err() {
                    break;
                }
            }
        });

        let tx = self.events_tx.clone();
        let (stderr_done_tx, stderr_done) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _done = stderr_done_tx;
            let mut stderr = stderr;
            let mut buf = vec![0u8; READ_CHUNK];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let chunk = buf[..n].to_vec();
                if tx
                    .send((generation, ProcessEvent::Stderr(chunk)))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });

        let (kill_tx, kill_rx) = mpsc::channel(4);
        tokio::spawn(watch(
            child,
            pid,
            stdout,
            stderr_done,
            kill_rx,
            generation,
            self.events_tx.clone(),
        ));
        self.current = Some(Current {
            pid,
            stdin: Some(lines_tx),
            kill: kill_tx,
        });
        Ok(pid.unwrap_or(0))
    }

    /// Writes one line (newline included) to stdin. Returns whether it was queued.
    pub fn write(&mut self, line: String) -> bool {
        match self.current.as_ref().and_then(|c| c.stdin.as_ref()) {
            Some(tx) => tx.try_send(line).is_ok(),
            None => false,
        }
    }

    /// Closes stdin and sends SIGTERM to the process group, then SIGKILL if it still runs
    /// after `grace`. The exit is reported by [`McpProcess::next_event`].
    pub fn kill(&mut self, grace: Duration) {
        if let Some(c) = self.current.as_mut() {
            c.stdin = None;
            let _ = c.kill.try_send(grace);
        }
    }

    /// The next event of the current process; pending while none runs.
    pub async fn next_event(&mut self) -> ProcessEvent {
        loop {
            let (generation, event) = self
                .events_rx
                .recv()
                .await
                .expect("the process keeps a sender");
            if generation != self.generation || self.current.is_none() {
                continue;
            }
            if matches!(event, ProcessEvent::Exited(_)) {
                self.current = None;
            }
            return event;
        }
    }
}

impl Drop for McpProcess {
    fn drop(&mut self) {
        if let Some(c) = self.current.take() {
            kill_group(c.pid, true);
        }
    }
}

/// Owns the child: forwards stdout, carries out kills, reports the exit.
async fn watch(
    mut child: Child,
    pid: Option<u32>,
    mut stdout: ChildStdout,
    stderr_done: tokio::sync::oneshot::Receiver<()>,
    mut kill: mpsc::Receiver<Duration>,
    generation: u64,
    tx: mpsc::Sender<(u64, ProcessEvent)>,
) {
    let mut buf = vec![0u8; READ_CHUNK];
    let mut stdout_open = true;
    let mut escalate: Option<tokio::time::Instant> = None;
    let status = loop {
        tokio::select! {
            read = stdout.read(&mut buf), if stdout_open => match read {
                Ok(0) | Err(_) => stdout_open = false,
                Ok(n) => {
                    if tx.send((generation, ProcessEvent::Stdout(buf[..n].to_vec()))).await.is_err() {
                        // Nobody listens any more: the owner is gone.
                        kill_group(pid, true);
                    }
                }
            },
            status = child.wait() => break status,
            Some(grace) = kill.recv() => {
                kill_group(pid, false);
                if pid.is_none() {
                    let _ = child.start_kill();
                }
                let at = tokio::time::Instant::now() + grace;
                escalate = Some(escalate.map_or(at, |e| e.min(at)));
            }
            _ = async {
                match escalate {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                kill_group(pid, true);
                let _ = child.start_kill();
                escalate = None;
            }
        }
    };
    // Whatever the server started must not outlive it.
    kill_group(pid, true);
    // Its last words (a crash's stack trace) come before its exit: both pipes are read to
    // the end, or for a short while when something else still holds them.
    let deadline = tokio::time::Instant::now() + DRAIN_AFTER_EXIT;
    if stdout_open {
        let drain = async {
            loop {
                match stdout.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let chunk = buf[..n].to_vec();
                        if tx
                            .send((generation, ProcessEvent::Stdout(chunk)))
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                }
            }
        };
        let _ = tokio::time::timeout_at(deadline, drain).await;
    }
    let _ = tokio::time::timeout_at(deadline, stderr_done).await;
    let status = match status {
        Ok(s) => exit_status(s),
        Err(_) => ExitStatus::default(),
    };
    let _ = tx.send((generation, ProcessEvent::Exited(status))).await;
}

fn exit_status(s: std::process::ExitStatus) -> ExitStatus {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = s.signal() {
            return ExitStatus::signal(sig);
        }
    }
    match s.code() {
        Some(c) => ExitStatus::code(c),
        None => ExitStatus::default(),
    }
}

/// Signals the process group led by `pid` (SIGKILL when `hard`, else SIGTERM). A group
/// that is already gone is fine.
fn kill_group(pid: Option<u32>, hard: bool) {
    #[cfg(unix)]
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        use nix::sys::signal::{Signal, killpg};
        use nix::unistd::Pid;
        let sig = if hard {
            Signal::SIGKILL
        } else {
            Signal::SIGTERM
        };
        let _ = killpg(Pid::from_raw(pid), sig);
    }
    #[cfg(not(unix))]
    let _ = (pid, hard);
}
