//! `mew gateway` (and the reference CLI's spelling, `mew gateway start`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use mew_core::gateway::{LoggingConfig, SpaceConfig};
use mew_core::ids::IdGen;
use mew_driver_common::files::SpaceLayout;
use mew_driver_common::{exit, files, secret};
use mew_tokio::{GatewayServer, ServerOptions, clock};

use crate::Failure;

/// `mew gateway [OPTIONS]` or `mew gateway start [OPTIONS]`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Command {
    #[command(subcommand)]
    start: Option<Start>,
    #[command(flatten)]
    args: Args,
}

#[derive(clap::Subcommand)]
enum Start {
    /// The same as `mew gateway`: the reference CLI's spelling, so an orchestrator written
    /// for it can start this gateway (`mew gateway start --port P --space-config PATH`).
    Start(Args),
}

impl Command {
    /// The options, whichever spelling was used.
    pub fn args(self) -> Args {
        match self.start {
            Some(Start::Start(a)) => a,
            None => self.args,
        }
    }
}

/// Options of `mew gateway`.
#[derive(clap::Args)]
pub struct Args {
    /// A space.yaml (`<space>/.mew/space.yaml` or `<space>/space.yaml`); without it an
    /// embedded default space (human, agent, service) is served and its tokens printed.
    #[arg(long, short, visible_alias = "space-config")]
    pub config: Option<PathBuf>,
    /// Do not start the space's `auto_start` participants (bridges, local processes).
    #[arg(long)]
    pub no_auto_start: bool,
    /// Port to listen on (0 picks a free one).
    #[arg(long, short, default_value_t = 8080)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Log filter (error, warn, info, debug, trace, or a tracing filter).
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Log format: text, or json (one object per line, for log shippers).
    #[arg(long, env = crate::LOG_FORMAT_ENV, default_value = "text")]
    pub log_format: String,
    /// Serve the space as one node of a cluster replicated over this NATS JetStream server
    /// (every node runs the same `--config`; needs `--node-id`; starts no processes).
    #[arg(
        long,
        env = "MEW_CLUSTER",
        value_name = "NATS_URL",
        requires = "node_id"
    )]
    pub cluster: Option<String>,
    /// This node's id in the cluster: unique, and the same across its restarts.
    #[arg(long, env = "MEW_NODE_ID", value_name = "ID")]
    pub node_id: Option<String>,
    /// Seconds of silence after which the other nodes declare this one gone.
    #[arg(long, default_value_t = 5.0, value_name = "SECS")]
    pub node_timeout: f64,
}

/// A gateway serving its space, with the processes it started.
pub struct Running {
    /// Where it listens.
    pub local: SocketAddr,
    /// The space id.
    pub space: String,
    /// The started processes.
    pub processes: crate::autostart::Supervisor,
    handle: mew_tokio::ShutdownHandle,
    serve: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Stops the processes, then the server (flushing its logs).
    pub async fn stop(self) -> Result<(), Failure> {
        tracing::info!("shutting down");
        self.processes.stop().await;
        self.handle.shutdown();
        match self.serve.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Failure::new(
                exit::RUNTIME,
                format!("log write failed: {e}"),
            )),
            Err(e) => Err(Failure::new(
                exit::RUNTIME,
                format!("server task failed: {e}"),
            )),
        }
    }
}

pub async fn run(args: Args) -> Result<(), Failure> {
    crate::init_logging_as(&args.log_level, &args.log_format)?;
    let running = start(&args).await?;
    crate::signal().await;
    running.stop().await
}

/// Serves the space of `args` and starts its processes.
pub async fn start(args: &Args) -> Result<Running, Failure> {
    let seed = clock::os_seed();
    let mut ids = IdGen::new(seed);
    let (config, layout, default_space) = match &args.config {
        Some(path) => {
            let (text, _) = files::read_config(path)
                .map_err(|e| Failure::new(exit::UNREADABLE, e.to_string()))?;
            let base = SpaceLayout::for_config(path).root;
            let mut config = SpaceConfig::from_yaml(&text).map_err(|errs| {
                let lines: Vec<String> = errs
                    .0
                    .iter()
                    .map(|e| {
                        if e.location.is_empty() {
                            e.message.clone()
                        } else {
                            format!("{}: {}", e.location, e.message)
                        }
                    })
                    .collect();
                Failure::new(
                    exit::USAGE,
                    format!("invalid {}: {}", path.display(), lines.join("; ")),
                )
            })?;
            for w in &config.warnings {
                if w.did_you_mean.is_some() {
                    tracing::warn!("{}: {w}", path.display());
                } else {
                    tracing::debug!("{}: {w}", path.display());
                }
            }
            let generated = config.resolve_tokens(
                |var| std::env::var(var).ok(),
                |id| files::read_token_file(&base, id),
                secret::token,
            );
            for g in generated {
                match files::write_token_file(&base, &g.participant, &g.token) {
                    Ok(p) => println!("generated a token for {} in {}", g.participant, p.display()),
                    Err(e) => {
                        return Err(Failure::new(
                            exit::RUNTIME,
                            format!("cannot write the token file for {}: {e}", g.participant),
                        ));
                    }
                }
            }
            // After the token files: as under the reference's `space up`, which writes them
            // before its gateway looks for `.mew/`.
            (config, SpaceLayout::for_config(path), false)
        }
        None => {
            let mut config = SpaceConfig::default_space(&mut secret::OsTokens);
            // A space nobody configured leaves no files behind in the working directory.
            config.logging = LoggingConfig::OFF;
            let layout = SpaceLayout {
                root: PathBuf::from("."),
                config_dir: PathBuf::from("."),
                log_dir: PathBuf::from(".mew/logs"),
            };
            (config, layout, true)
        }
    };
    if args.cluster.is_some() && default_space {
        return Err(Failure::new(
            exit::USAGE,
            "--cluster needs --config: every node must serve the same space.yaml",
        ));
    }
    let cluster = match (&args.cluster, &args.node_id) {
        (Some(url), Some(node)) => {
            let mut opts = mew_cluster::ClusterOptions::new(url, node);
            if !(args.node_timeout.is_finite() && args.node_timeout >= 0.5) {
                return Err(Failure::new(
                    exit::USAGE,
                    "--node-timeout must be at least 0.5",
                ));
            }
            opts.node_timeout = std::time::Duration::from_secs_f64(args.node_timeout);
            opts.heartbeat = (opts.node_timeout / 5).min(std::time::Duration::from_secs(1));
            let node = mew_cluster::connect(opts, config.clone())
                .await
                .map_err(|e| match e {
                    mew_cluster::ClusterError::NodeId(_) => {
                        Failure::new(exit::USAGE, e.to_string())
                    }
                    mew_cluster::ClusterError::Connect { .. } => {
                        Failure::new(exit::CONNECT, e.to_string())
                    }
                    _ => Failure::new(exit::RUNTIME, e.to_string()),
                })?;
            Some(node)
        }
        _ => None,
    };
    // A single node with a space.yaml keeps its state in `<space>/.mew/state/`; a cluster
    // member keeps it in the cluster's log.
    let durable = match config.gateway.durability {
        Some(fsync) if cluster.is_none() && !default_space => {
            let dir = layout.root.join(".mew").join("state");
            let restored = mew_driver_common::durable::open(&dir, config.clone(), fsync)
                .map_err(|e| Failure::new(exit::RUNTIME, e.to_string()))?;
            let r = &restored.report;
            if r.restored() {
                println!(
                    "state restored from {}: {} members, {} grants, {} envelopes of history ({} entries replayed{}{})",
                    dir.display(),
                    r.members,
                    r.grants,
                    r.history,
                    r.replayed,
                    r.snapshot_entry
                        .map(|e| format!(" after a snapshot at entry {e}"))
                        .unwrap_or_default(),
                    r.cut
                        .as_ref()
                        .map(|(n, why)| format!("; a torn tail of {n} bytes cut: {why}"))
                        .unwrap_or_default(),
                );
            }
            Some(restored)
        }
        _ => None,
    };
    let addr = SocketAddr::new(args.bind, args.port);
    let options = ServerOptions {
        log_dir: layout.log_dir.clone(),
        seed: Some(ids.next_u64()),
        ..ServerOptions::default()
    };
    let space = config.id.clone();
    // Cluster nodes start no processes: each would start its own copy of every one.
    let started = if args.no_auto_start || cluster.is_some() {
        Vec::new()
    } else {
        config.participants.clone()
    };
    let tokens: Vec<(String, String, String)> = config
        .participants
        .iter()
        .map(|p| {
            (
                p.id.clone(),
                p.tokens.first().cloned().unwrap_or_default(),
                p.capabilities.to_json().to_string(),
            )
        })
        .collect();
    let server = GatewayServer::bind_with(addr, config, options)
        .await
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                Failure::new(
                    exit::ADDR_IN_USE,
                    format!("cannot listen on {addr}: address in use"),
                )
            } else {
                Failure::new(exit::RUNTIME, format!("cannot listen on {addr}: {e}"))
            }
        })?;
    let local = server.local_addr();
    println!(
        "mew gateway: space {space:?} on ws://{local}/ws?space={space} (HTTP API on http://{local})"
    );
    if default_space {
        println!("embedded default space; tokens for this run:");
        for (id, token, caps) in &tokens {
            println!("  {id:<8} token {token}  capabilities {caps}");
        }
        println!("join with: mew client --gateway ws://{local} --space {space} --token <token>");
    }
    let handle = server.shutdown_handle();
    if let Some(node) = &cluster {
        println!(
            "cluster node {} (log restored to entry {})",
            args.node_id.as_deref().unwrap_or_default(),
            node.applied()
        );
    }
    let core = match (cluster, durable) {
        (Some(node), _) => Some(node.core_task()),
        (None, Some(restored)) => Some(mew_driver_common::durable::core_task::<mew_tokio::Tokio>(
            restored,
        )),
        (None, None) => None,
    };
    let serve = tokio::spawn(server.serve_with(core));
    let cx = crate::autostart::SpaceContext {
        gateway: format!("ws://{local}"),
        port: local.port(),
        space: space.clone(),
        root: layout.root.clone(),
        config_dir: layout.config_dir.clone(),
    };
    let own_exe = std::env::current_exe()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "mew".into());
    let launches = crate::autostart::launches(
        &started,
        &cx,
        &own_exe,
        |k| std::env::var(k).ok(),
        |w| tracing::warn!("{w}"),
    );
    let processes = crate::autostart::Supervisor::start(launches, &layout.log_dir);
    Ok(Running {
        local,
        space,
        processes,
        handle,
        serve,
    })
}
