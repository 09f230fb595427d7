//! `mew bridge`: an MCP server (any stdio command) joins a space as a participant.

use std::path::PathBuf;
use std::time::Duration;

use mew_core::bridge::{BridgeConfig, Exit};
use mew_core::mcp::{McpConfig, RestartBackoff, Root};
use mew_driver_common::exit;
use mew_tokio::mcp_process::ServerCommand;

use crate::Failure;

/// Options of `mew bridge`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub connect: crate::connect::ConnectArgs,
    /// How long the MCP server may take to answer `initialize`, in ms.
    #[arg(long, default_value_t = 30_000)]
    pub init_timeout: u64,
    /// Restarts of a crashed MCP server before giving up.
    #[arg(long, default_value_t = 3)]
    pub max_reconnects: u32,
    /// Do not restart a crashed MCP server.
    #[arg(long)]
    pub no_reconnect: bool,
    /// Deadline of each request forwarded to the MCP server, in ms.
    #[arg(long, default_value_t = 60_000)]
    pub call_timeout: u64,
    /// The participant that may answer the server's sampling requests; without it sampling
    /// is declined with a reason.
    #[arg(long)]
    pub sampling_answered_by: Option<String>,
    /// A `file://` URI answered to the server's `roots/list` (repeatable).
    #[arg(long = "root")]
    pub roots: Vec<String>,
    /// Extra environment for the MCP server, KEY=VALUE (repeatable).
    #[arg(long = "env", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Working directory of the MCP server.
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Log filter (error, warn, info, debug, trace, or a tracing filter); the server's
    /// stderr is logged at debug.
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// The MCP server command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// The bridge's configuration from the command line.
pub fn config(args: &Args) -> BridgeConfig {
    BridgeConfig {
        participant: args.connect.participant(),
        mcp: McpConfig {
            init_timeout: Duration::from_millis(args.init_timeout),
            restart: RestartBackoff {
                enabled: !args.no_reconnect,
                max_reconnects: args.max_reconnects,
                ..RestartBackoff::default()
            },
            roots: args
                .roots
                .iter()
                .map(|uri| Root {
                    uri: uri.clone(),
                    name: None,
                })
                .collect(),
            ..McpConfig::default()
        },
        call_timeout: Duration::from_millis(args.call_timeout),
        sampling_answered_by: args.sampling_answered_by.clone(),
        ..BridgeConfig::default()
    }
}

/// The server command from the command line.
pub fn command(args: &Args) -> ServerCommand {
    let (program, rest) = args.command.split_first().expect("clap requires a command");
    // Through the guard, the server stops with the bridge even if the bridge is killed.
    #[cfg(unix)]
    let (program, rest) = match std::env::current_exe() {
        Ok(exe) => crate::guard::wrap(&exe.to_string_lossy(), program, rest),
        Err(_) => (program.clone(), rest.to_vec()),
    };
    #[cfg(not(unix))]
    let (program, rest) = (program.clone(), rest.to_vec());
    ServerCommand {
        program,
        args: rest,
        env: args.env.clone(),
        cwd: args.cwd.clone(),
    }
}

pub async fn run(args: Args) -> Result<(), Failure> {
    crate::init_logging(&args.log_level)?;
    args.connect.tls.install()?;
    let exit = mew_tokio::run_bridge(config(&args), command(&args), None, crate::signal()).await;
    match exit {
        Exit::Shutdown => Ok(()),
        // Starting it again would fail the same way: `mew space` does not restart exit 2.
        Exit::ServerNeverReady(_) => Err(Failure::new(exit::USAGE, exit.to_string())),
        Exit::ServerGaveUp(_) => Err(Failure::new(exit::RUNTIME, exit.to_string())),
        Exit::GatewayGaveUp(_) => Err(Failure::new(exit::CONNECT, exit.to_string())),
    }
}
