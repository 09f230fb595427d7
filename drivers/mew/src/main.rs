//! The `mew` command-line program.
//!
//! - `mew gateway`: serve a space (the embedded default space when no `--config` is given).
//! - `mew bridge`: an MCP server (stdio command) joins a space as a participant.
//! - `mew client`: join a space, print what is observed, send chat typed on stdin, or send one
//!   envelope with `--send`.
//! - `mew agent`: an LLM agent joins a space and answers its chats with the space's tools.
//! - `mew init`: a space folder from a built-in template.
//! - `mew automation suggest`: grants suggested by a space's history of approvals.
//! - `mew space up|down|status|connect`: a whole space as one thing.
//! - `mew tools`: check a tools-mode agent's definitions, preview a call's prompt.
//! - `mew audit`: read a space's audit logs with filters.
//! - `mew capcheck`: check capability patterns against messages, one JSON line at a time.
//!
//! Exit codes (see `mew_driver_common::exit`): 0 success, 1 runtime failure, 2 usage or
//! configuration error, 3 address in use, 4 unreadable file, 5 gateway unreachable or join
//! refused.

/// `println!` that never panics: a closed stdout (`mew ... | head -1`) ends the program
/// quietly, as it ends any Unix tool (see [`say_line`]).
macro_rules! say {
    () => {
        $crate::say_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::say_line(format_args!($($arg)*))
    };
}

mod agent;
mod audit;
mod automation;
mod autostart;
mod bridge;
mod client;
mod connect;
mod gateway;
#[cfg(unix)]
mod guard;
mod init;
#[cfg(unix)]
mod space;
mod tools;
mod tui;
mod web;

use clap::{Parser, Subcommand};
use mew_driver_common::exit;

#[derive(Parser)]
#[command(
    name = "mew",
    version,
    about = "MEW Protocol (mew/v0.4) gateway and client"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a space: WebSocket endpoint and HTTP API on one port.
    Gateway(gateway::Command),
    /// Join a space as a participant.
    Client(client::Args),
    /// Check capabilities against messages: reads JSON lines `{"capability"|"capabilities",
    /// "message"}` from stdin, prints `true`, `false` or `error: <reason>` per line.
    Capcheck,
    /// Bring an MCP server (any stdio command, after `--`) into a space.
    Bridge(bridge::Args),
    /// Run an LLM agent in a space (OpenAI-compatible chat-completions API).
    Agent(agent::Args),
    /// Read a space's audit logs (across rotations) with filters.
    Audit(audit::Args),
    /// Run a program that stops when its parent dies (used by the space's supervisor).
    #[command(hide = true)]
    Guard {
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
    /// Create a space folder from a built-in template (`coder`, `note-taker`).
    Init(init::Args),
    /// Suggest capability grants from a space's history of approvals.
    #[command(subcommand)]
    Automation(automation::Command),
    /// Start, watch, join and stop a whole space (gateway and its processes).
    #[cfg(unix)]
    #[command(subcommand)]
    Space(space::Command),
    /// Check a tools-mode agent's tool definitions, or preview the prompt of a call.
    #[command(subcommand)]
    Tools(tools::Command),
}

/// A failure with its exit code; printed as one line.
#[derive(Debug)]
pub struct Failure {
    code: i32,
    message: String,
}

impl Failure {
    fn new(code: i32, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

/// Environment variable choosing the log format: `json` (one object per line, for log
/// shippers) or `text` (the default).
pub const LOG_FORMAT_ENV: &str = "MEW_LOG_FORMAT";

fn init_logging(level: &str) -> Result<(), Failure> {
    let format = std::env::var(LOG_FORMAT_ENV).unwrap_or_default();
    init_logging_as(level, &format)
}

fn init_logging_as(level: &str, format: &str) -> Result<(), Failure> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .map_err(|e| Failure::new(exit::USAGE, format!("bad --log-level {level:?}: {e}")))?;
    let fmt = match format {
        "json" => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_writer(std::io::stderr)
            .boxed(),
        "" | "text" => {
            // Colours only on a terminal: started processes log to files.
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            tracing_subscriber::fmt::layer()
                .with_ansi(ansi)
                .with_writer(std::io::stderr)
                .boxed()
        }
        other => {
            return Err(Failure::new(
                exit::USAGE,
                format!("bad log format {other:?}: use text or json"),
            ));
        }
    };
    let registry = tracing_subscriber::registry().with(fmt.with_filter(filter));
    // Exported spans follow the same filter as the log lines.
    #[cfg(feature = "otel")]
    let registry = registry.with(
        telemetry::layer()
            .with_filter(tracing_subscriber::EnvFilter::try_new(level).unwrap_or_default()),
    );
    registry.init();
    Ok(())
}

/// OpenTelemetry export (the `otel` feature): spans go over OTLP/HTTP to
/// `OTEL_EXPORTER_OTLP_ENDPOINT` when it is set, batched on the SDK's thread.
#[cfg(feature = "otel")]
mod telemetry {
    use opentelemetry::trace::TracerProvider as _;
    use std::sync::OnceLock;

    static PROVIDER: OnceLock<opentelemetry_sdk::trace::SdkTracerProvider> = OnceLock::new();

    /// The layer, when an endpoint is configured.
    pub fn layer<S>()
    -> Option<tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT")?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
            .map_err(|e| eprintln!("mew: OpenTelemetry export off: {e}"))
            .ok()?;
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .build();
        let tracer = provider.tracer("mew");
        let _ = PROVIDER.set(provider);
        Some(tracing_opentelemetry::layer().with_tracer(tracer))
    }

    /// Sends what is batched (at exit).
    pub fn flush() {
        if let Some(p) = PROVIDER.get() {
            let _ = p.shutdown();
        }
    }
}

/// Flushes exported telemetry, if any, before the process exits.
fn flush_telemetry() {
    #[cfg(feature = "otel")]
    telemetry::flush();
}

/// Writes one line to stdout. Rust ignores SIGPIPE, so a reader that went away (`| head -1`)
/// shows as a write error, which `println!` turns into a panic: here it ends the program at
/// once, quietly and successfully, as ripgrep and other Rust tools do (the output was
/// wanted no further). Any other write error is reported in one line.
pub fn say_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{args}").and_then(|()| out.flush()) {
        stdout_failed(&e);
    }
}

/// Ends the program after a failed write to stdout (see [`say_line`]).
pub fn stdout_failed(e: &std::io::Error) -> ! {
    flush_telemetry();
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(exit::OK);
    }
    eprintln!("mew: cannot write to stdout: {e}");
    std::process::exit(exit::RUNTIME)
}

/// Prints what a synchronous command produced (or its failure, in one line) and exits.
fn finish(r: Result<String, Failure>) -> ! {
    flush_telemetry();
    match r {
        Ok(out) => {
            say!("{out}");
            std::process::exit(exit::OK)
        }
        Err(f) => {
            eprintln!("mew: {}", f.message);
            std::process::exit(f.code)
        }
    }
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let cli = match cli.command {
        Command::Capcheck => std::process::exit(capcheck()),
        Command::Audit(a) => match audit::run(a) {
            Ok(()) => std::process::exit(exit::OK),
            Err(f) => {
                eprintln!("mew: {}", f.message);
                std::process::exit(f.code);
            }
        },
        #[cfg(unix)]
        Command::Guard { command } => std::process::exit(guard::run(&command)),
        #[cfg(not(unix))]
        Command::Guard { .. } => std::process::exit(exit::USAGE),
        #[cfg(unix)]
        Command::Space(c) => match c {
            space::Command::Down(a) => finish(space::down(a)),
            space::Command::Reload(a) => finish(space::reload(a)),
            space::Command::Status(a) => finish(space::status(a)),
            space::Command::Reset(a) => finish(space::reset(a)),
            space::Command::Connect(a) => finish(space::connect(a)),
            up => Cli {
                command: Command::Space(up),
            },
        },
        Command::Automation(a) => finish(automation::run(a)),
        Command::Init(a) => finish(init::run(a)),
        Command::Tools(t) => finish(tools::run(t)),
        other => Cli { command: other },
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mew: cannot start the runtime: {e}");
            std::process::exit(exit::RUNTIME);
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Gateway(a) => gateway::run(a.args()).await,
            Command::Client(a) => client::run(a).await,
            Command::Capcheck
            | Command::Audit(_)
            | Command::Tools(_)
            | Command::Init(_)
            | Command::Automation(_)
            | Command::Guard { .. } => Ok(()),
            #[cfg(unix)]
            Command::Space(space::Command::Up(a)) => space::up(a).await,
            #[cfg(unix)]
            Command::Space(_) => Ok(()),
            Command::Bridge(a) => bridge::run(a).await,
            Command::Agent(a) => agent::run(a).await,
        }
    });
    // Tasks still blocked on stdin must not hold the process open.
    rt.shutdown_background();
    flush_telemetry();
    match result {
        Ok(()) => std::process::exit(exit::OK),
        Err(f) => {
            eprintln!("mew: {}", f.message);
            std::process::exit(f.code);
        }
    }
}

/// The JSON-lines capability checker (the same as mew-core's `capcheck` example).
fn capcheck() -> i32 {
    use std::io::{BufRead, Write};
    let stdin = std::io::stdin();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for line in stdin.lock().lines() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                eprintln!("mew: cannot read stdin: {e}");
                return exit::RUNTIME;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        if let Err(e) = writeln!(out, "{}", mew_core::capability::check_line(&line)) {
            stdout_failed(&e);
        }
    }
    if let Err(e) = out.flush() {
        stdout_failed(&e);
    }
    exit::OK
}

/// SIGINT and SIGTERM, caught from the moment this is made: from then on neither ends the
/// process by its default action (which would leave started processes and the run file
/// behind, and make a calling `bash -c` give up as if interrupted itself).
pub(crate) struct StopSignals {
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    /// Starts catching them (inside a tokio runtime).
    pub(crate) fn new() -> StopSignals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            StopSignals {
                int: signal(SignalKind::interrupt()).ok(),
                term: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        StopSignals {}
    }

    /// Resolves on the next SIGINT or SIGTERM.
    pub(crate) async fn recv(&mut self) {
        #[cfg(unix)]
        {
            async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            if self.int.is_none() && self.term.is_none() {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
            tokio::select! {
                _ = next(&mut self.int) => {},
                _ = next(&mut self.term) => {},
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
