//! The gateway program starting its `type: mcp-bridge` participants with `auto_start: true`:
//! each runs as `mew bridge ...` (this same executable), and is stopped with the gateway.

use std::path::Path;
use std::time::Duration;

use mew_core::gateway::{ParticipantConfig, ParticipantType};
use tokio::process::{Child, Command};

/// How long a bridge may take to stop its server and leave before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The bridges this gateway started.
#[derive(Debug, Default)]
pub struct Bridges {
    children: Vec<(String, Child)>,
}

/// The environment variable an auto-started bridge reads its token from.
pub const TOKEN_ENV: &str = "MEW_BRIDGE_TOKEN";

/// A bridge's command-line arguments and the environment it runs with.
pub type Launch = (Vec<String>, Vec<(String, String)>);

/// The participants of a space the gateway should start a bridge for.
pub fn auto_started(participants: &[ParticipantConfig]) -> Vec<ParticipantConfig> {
    participants
        .iter()
        .filter(|p| p.kind == ParticipantType::McpBridge && p.auto_start && p.mcp_server.is_some())
        .cloned()
        .collect()
}

/// The `mew bridge` arguments for one participant; `cwd` is taken relative to `base_dir`
/// (the folder of space.yaml).
/// The command line and environment of one auto-started bridge. Secrets (the token and the
/// MCP server's `env`) travel in the environment, never in arguments other users can read
/// with `ps`; the MCP server inherits the bridge's environment.
pub fn bridge_args(
    p: &ParticipantConfig,
    gateway: &str,
    space: &str,
    base_dir: &Path,
) -> Option<Launch> {
    let server = p.mcp_server.as_ref()?;
    let token = p.tokens.first()?;
    let mut env = vec![(TOKEN_ENV.to_string(), token.clone())];
    let cfg = p.bridge_config.clone().unwrap_or_default();
    let mut a: Vec<String> = vec![
        "bridge".into(),
        "--gateway".into(),
        gateway.into(),
        "--space".into(),
        space.into(),
        "--id".into(),
        p.id.clone(),
        "--init-timeout".into(),
        cfg.init_timeout_ms.to_string(),
        "--max-reconnects".into(),
        cfg.max_reconnects.to_string(),
    ];
    if !cfg.reconnect {
        a.push("--no-reconnect".into());
    }
    env.extend(server.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    if let Some(cwd) = &server.cwd {
        a.push("--cwd".into());
        a.push(base_dir.join(cwd).to_string_lossy().into_owned());
    }
    a.push("--".into());
    a.push(server.command.clone());
    a.extend(server.args.iter().cloned());
    Some((a, env))
}

impl Bridges {
    /// Starts a bridge for each participant; failures are logged and skipped.
    pub fn start(
        participants: &[ParticipantConfig],
        gateway: &str,
        space: &str,
        base_dir: &Path,
    ) -> Bridges {
        let mut children = Vec::new();
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(e) => {
                tracing::error!("cannot start bridges: own executable unknown: {e}");
                return Bridges::default();
            }
        };
        for p in participants {
            let Some((args, env)) = bridge_args(p, gateway, space, base_dir) else {
                tracing::error!(participant = %p.id, "cannot start its bridge: no token");
                continue;
            };
            match Command::new(&exe)
                .args(&args)
                .envs(env)
                .stdin(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
            {
                Ok(child) => {
                    tracing::info!(participant = %p.id, pid = child.id(), "bridge started");
                    children.push((p.id.clone(), child));
                }
                Err(e) => tracing::error!(participant = %p.id, "cannot start its bridge: {e}"),
            }
        }
        Bridges { children }
    }

    /// Asks every bridge to stop (SIGTERM: each stops its MCP server), then kills those
    /// still running after the grace period.
    pub async fn stop(self) {
        let mut children = self.children;
        for (_, child) in &mut children {
            terminate(child);
        }
        for (id, child) in &mut children {
            match tokio::time::timeout(STOP_GRACE, child.wait()).await {
                Ok(Ok(status)) => tracing::info!(participant = %id, %status, "bridge stopped"),
                _ => {
                    tracing::warn!(participant = %id, "bridge did not stop in time; killing it");
                    let _ = child.kill().await;
                }
            }
        }
    }
}

fn terminate(child: &mut Child) {
    #[cfg(unix)]
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        return;
    }
    let _ = child.start_kill();
}
