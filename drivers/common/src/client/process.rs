//! Child processes, written once over a runtime's process hook ([`ProcessRuntime`]): the
//! MCP server's process that carries out the MCP client's `Spawn`, `Write` and `Kill`
//! outputs ([`McpProcess`]), and the one process-group helper everything that stops a
//! process uses ([`signal_group`], [`terminate_group`]).
//!
//! A child runs in its own process group, so stopping it reaches whatever it started (`npx`
//! runs the real server as a grandchild): termination sends SIGTERM to the group, then
//! SIGKILL after the grace period; once the leader has exited the rest of the group is
//! killed too, so no process outlives the server. Dropping an [`McpProcess`] kills the group.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures_channel::oneshot;
use futures_io::{AsyncRead, AsyncWrite};
use futures_util::{AsyncReadExt, AsyncWriteExt, FutureExt};
use mew_core::mcp::ExitStatus;

use crate::client::socket::Runtime;
use crate::clock::{self, Sleep};

/// What a runtime supplies to run child processes: spawn with piped stdio, wait, kill.
pub trait ProcessRuntime: Runtime {
    /// A running child; dropping it kills the process.
    type Child: Send + 'static;
    /// The child's stdin.
    type Stdin: AsyncWrite + Send + Unpin + 'static;
    /// The child's stdout.
    type Stdout: AsyncRead + Send + Unpin + 'static;
    /// The child's stderr.
    type Stderr: AsyncRead + Send + Unpin + 'static;

    /// Starts `cmd` with stdin, stdout and stderr piped (its process group is set by the
    /// caller).
    fn spawn_child(cmd: std::process::Command) -> io::Result<Spawned<Self>>;
    /// Waits for the child's exit (cancel-safe: it may be called again).
    fn wait(
        child: &mut Self::Child,
    ) -> impl Future<Output = io::Result<std::process::ExitStatus>> + Send + '_;
    /// Kills the child itself (where process groups are not available).
    fn start_kill(child: &mut Self::Child) -> io::Result<()>;
}

/// A child just started, with its pipes.
pub struct Spawned<R: ProcessRuntime> {
    /// The process.
    pub child: R::Child,
    /// Its id (`None` once it has been reaped).
    pub pid: Option<u32>,
    /// Its stdin.
    pub stdin: R::Stdin,
    /// Its stdout.
    pub stdout: R::Stdout,
    /// Its stderr.
    pub stderr: R::Stderr,
}

/// How [`signal_group`] asks a process group to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: clean up and exit.
    Term,
    /// SIGKILL.
    Kill,
}

/// Signals the process group led by `pid`. A group that is already gone is fine; without
/// process groups (not unix) nothing is sent.
pub fn signal_group(pid: Option<u32>, how: Stop) {
    #[cfg(unix)]
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        use nix::sys::signal::{Signal, killpg};
        use nix::unistd::Pid;
        let sig = match how {
            Stop::Term => Signal::SIGTERM,
            Stop::Kill => Signal::SIGKILL,
        };
        let _ = killpg(Pid::from_raw(pid), sig);
    }
    #[cfg(not(unix))]
    let _ = (pid, how);
}

/// Stops the process group led by `pid`: SIGTERM, then SIGKILL if `exited` has not resolved
/// after `grace`; returns `exited`'s output.
pub async fn terminate_group<S: Sleep, T>(
    pid: Option<u32>,
    grace: Duration,
    exited: impl Future<Output = T>,
) -> T {
    let mut exited = std::pin::pin!(exited);
    signal_group(pid, Stop::Term);
    if let Some(v) = clock::timeout::<S, _>(grace, exited.as_mut()).await {
        return v;
    }
    signal_group(pid, Stop::Kill);
    exited.await
}

/// Puts `cmd` in a process group of its own (unix), so that [`signal_group`] reaches what
/// it starts.
pub fn own_group(cmd: &mut std::process::Command) {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    #[cfg(not(unix))]
    let _ = cmd;
}

/// The exit status of a finished process, as the core counts it.
pub fn exit_status(s: std::process::ExitStatus) -> ExitStatus {
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

type Events = (
    async_channel::Sender<(u64, ProcessEvent)>,
    async_channel::Receiver<(u64, ProcessEvent)>,
);

/// One server process at a time, restarted on request. See the module documentation.
pub struct McpProcess<R: ProcessRuntime> {
    command: ServerCommand,
    /// Counts spawns; events of earlier processes are dropped.
    generation: u64,
    current: Option<Current>,
    events: Events,
    _runtime: std::marker::PhantomData<fn() -> R>,
}

impl<R: ProcessRuntime> std::fmt::Debug for McpProcess<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpProcess")
            .field("command", &self.command)
            .field("pid", &self.pid())
            .finish()
    }
}

struct Current {
    pid: Option<u32>,
    stdin: Option<async_channel::Sender<String>>,
    kill: async_channel::Sender<Duration>,
}

impl<R: ProcessRuntime> McpProcess<R> {
    /// Nothing runs until [`McpProcess::spawn`].
    pub fn new(command: ServerCommand) -> Self {
        McpProcess {
            command,
            generation: 0,
            current: None,
            events: async_channel::bounded(EVENT_QUEUE),
            _runtime: std::marker::PhantomData,
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
            signal_group(old.pid, Stop::Kill);
        }
        let c = &self.command;
        let mut cmd = std::process::Command::new(&c.program);
        // The bridge's own connection and token are not the server's to hold.
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_some_and(crate::secret::is_connection_env) {
                cmd.env_remove(&k);
            }
        }
        cmd.args(&c.args)
            .envs(c.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = &c.cwd {
            cmd.current_dir(dir);
        }
        own_group(&mut cmd);
        let spawned = R::spawn_child(cmd)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", c.program)))?;
        self.generation += 1;
        let generation = self.generation;
        let Spawned {
            child,
            pid,
            stdin,
            stdout,
            stderr,
        } = spawned;

        let (lines_tx, lines_rx) = async_channel::bounded::<String>(STDIN_QUEUE);
        R::spawn(async move {
            let mut stdin = stdin;
            while let Ok(line) = lines_rx.recv().await {
                // A dead server's pipe fails the write; its exit is reported separately.
                if stdin.write_all(line.as_bytes()).await.is_err() {
                    break;
                }
                if lines_rx.is_empty() && stdin.flush().await.is_err() {
                    break;
                }
            }
            let _ = stdin.close().await;
        });

        let tx = self.events.0.clone();
        let (stderr_done_tx, stderr_done) = oneshot::channel::<()>();
        R::spawn(async move {
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

        let (kill_tx, kill_rx) = async_channel::bounded(4);
        let watcher = Watcher::<R> {
            child,
            pid,
            stdout,
            generation,
            tx: self.events.0.clone(),
        };
        R::spawn(watcher.run(stderr_done, kill_rx));
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
            let Ok((generation, event)) = self.events.1.recv().await else {
                // Unreachable: the process keeps a sender.
                return std::future::pending().await;
            };
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

impl<R: ProcessRuntime> Drop for McpProcess<R> {
    fn drop(&mut self) {
        if let Some(c) = self.current.take() {
            signal_group(c.pid, Stop::Kill);
        }
    }
}

/// Owns the child: forwards stdout, carries out kills, reports the exit.
struct Watcher<R: ProcessRuntime> {
    child: R::Child,
    pid: Option<u32>,
    stdout: R::Stdout,
    generation: u64,
    tx: async_channel::Sender<(u64, ProcessEvent)>,
}

enum Step {
    Read(io::Result<usize>),
    Exited(io::Result<std::process::ExitStatus>),
    Kill(Duration),
    /// The owner is gone: no more kill requests.
    Orphaned,
    Escalate,
}

impl<R: ProcessRuntime> Watcher<R> {
    async fn run(
        self,
        stderr_done: oneshot::Receiver<()>,
        kill: async_channel::Receiver<Duration>,
    ) {
        let Watcher {
            mut child,
            pid,
            mut stdout,
            generation,
            tx,
        } = self;
        let mut buf = vec![0u8; READ_CHUNK];
        let mut stdout_open = true;
        let mut escalate: Option<Instant> = None;
        let mut kill_open = true;
        let status = loop {
            let step = {
                let read = async {
                    if stdout_open {
                        stdout.read(&mut buf).await
                    } else {
                        std::future::pending().await
                    }
                };
                let wait = R::wait(&mut child);
                let killed = async {
                    if kill_open {
                        kill.recv().await.ok()
                    } else {
                        std::future::pending().await
                    }
                };
                let timer = async {
                    match escalate {
                        Some(at) => R::sleep(at.saturating_duration_since(Instant::now())).await,
                        None => std::future::pending().await,
                    }
                };
                futures_util::select_biased! {
                    r = read.fuse() => Step::Read(r),
                    s = wait.fuse() => Step::Exited(s),
                    k = killed.fuse() => match k {
                        Some(grace) => Step::Kill(grace),
                        None => Step::Orphaned,
                    },
                    _ = timer.fuse() => Step::Escalate,
                }
            };
            match step {
                Step::Read(Ok(0) | Err(_)) => stdout_open = false,
                Step::Read(Ok(n)) => {
                    let chunk = buf[..n].to_vec();
                    if tx
                        .send((generation, ProcessEvent::Stdout(chunk)))
                        .await
                        .is_err()
                    {
                        // Nobody listens any more: the owner is gone.
                        signal_group(pid, Stop::Kill);
                    }
                }
                Step::Exited(s) => break s,
                Step::Orphaned => kill_open = false,
                Step::Kill(grace) => {
                    signal_group(pid, Stop::Term);
                    if pid.is_none() {
                        let _ = R::start_kill(&mut child);
                    }
                    let at = Instant::now() + grace;
                    escalate = Some(escalate.map_or(at, |e| e.min(at)));
                }
                Step::Escalate => {
                    signal_group(pid, Stop::Kill);
                    let _ = R::start_kill(&mut child);
                    escalate = None;
                }
            }
        };
        // Whatever the server started must not outlive it.
        signal_group(pid, Stop::Kill);
        // Its last words (a crash's stack trace) come before its exit: both pipes are read to
        // the end, or for a short while when something else still holds them.
        let deadline = Instant::now() + DRAIN_AFTER_EXIT;
        if stdout_open {
            let drain = async {
                loop {
                    match stdout.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let chunk = buf[..n].to_vec();
                            let event = (generation, ProcessEvent::Stdout(chunk));
                            if tx.send(event).await.is_err() {
                                break;
                            }
                        }
                    }
                }
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let _ = clock::timeout::<R, _>(left, drain).await;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = clock::timeout::<R, _>(left, stderr_done).await;
        let status = match status {
            Ok(s) => exit_status(s),
            Err(_) => ExitStatus::default(),
        };
        let _ = tx.send((generation, ProcessEvent::Exited(status))).await;
    }
}
