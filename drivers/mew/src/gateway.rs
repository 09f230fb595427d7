//! `mew gateway` (and the reference CLI's spelling, `mew gateway start`).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use mew_core::gateway::{LoggingConfig, SpaceConfig};
use mew_core::ids::IdGen;
use mew_driver_common::state::files;
use mew_driver_common::state::files::SpaceLayout;
use mew_driver_common::{exit, secret};
use mew_tokio::{GatewayServer, ServerOptions, ServerTls, TlsFiles, clock};
use std::sync::Arc;

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
    /// The most the space's log stream may hold in JetStream (bytes, or with a suffix: KiB,
    /// MiB, GiB). JetStream reserves it when the stream is made.
    #[arg(long, default_value = "1GiB", value_name = "SIZE", value_parser = parse_size)]
    pub cluster_log_max: u64,
    /// Serve TLS (wss://, https://) with this PEM certificate chain (with --tls-key; takes
    /// the place of `gateway.tls` in space.yaml). SIGHUP re-reads it.
    #[arg(long, value_name = "CERT.pem", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "KEY.pem", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// How long a stopping gateway may take to close its connections and flush its logs.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

/// A gateway serving its space, with the processes it started.
pub struct Running {
    /// Where it listens.
    pub local: SocketAddr,
    /// The space id.
    pub space: String,
    /// The started processes.
    pub processes: crate::autostart::Supervisor,
    /// The TLS settings it serves with, if any.
    pub tls: Option<Arc<ServerTls>>,
    /// The `space.yaml` it serves (none for the embedded default space).
    config_path: Option<PathBuf>,
    reloader: mew_tokio::ReloadHandle,
    handle: mew_tokio::ShutdownHandle,
    serve: tokio::task::JoinHandle<std::io::Result<()>>,
    /// How the server ended, when it ended by itself (its core stopped).
    served: Option<Result<std::io::Result<()>, tokio::task::JoinError>>,
}

impl Running {
    /// Participants online, asked of the gateway inside this process (`token` authorises
    /// the listing).
    pub async fn online(&self, token: Option<&str>) -> Vec<String> {
        let route = mew_driver_common::Route::Participants { space: None };
        let Some(resp) = self.reloader.http(route, token.map(str::to_owned)).await else {
            return Vec::new();
        };
        let v: serde_json::Value = serde_json::from_slice(&resp.body).unwrap_or_default();
        v["participants"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["online"] == true)
            .filter_map(|p| p["id"].as_str().map(str::to_owned))
            .collect()
    }

    /// `wss` or `ws`.
    pub fn ws_scheme(&self) -> &'static str {
        if self.tls.is_some() { "wss" } else { "ws" }
    }

    /// What SIGHUP does: `space.yaml` and the TLS certificate and key are read again and
    /// applied to the running space (connections stay up unless the change concerns them).
    /// A file that does not parse keeps what runs and says why in the log.
    pub async fn reload(&self) {
        if let Some(path) = &self.config_path {
            match load_config(path) {
                Ok(config) => {
                    let _ = self.reloader.reconfigure(config).await;
                }
                Err(f) => tracing::error!(
                    "{} not reloaded (the running configuration stays): {}",
                    path.display(),
                    f.message
                ),
            }
        }
        if let Some(tls) = &self.tls {
            match tls.reload() {
                Ok(()) => tracing::info!(
                    "reloaded the TLS certificate {}",
                    tls.files().cert.display()
                ),
                Err(e) => tracing::error!("TLS certificate not reloaded (the old one stays): {e}"),
            }
        }
    }

    /// Serves until SIGINT or SIGTERM (or until the server stops by itself), reloading on
    /// every SIGHUP.
    pub async fn until_stopped(&mut self) {
        self.until_stopped_with(crate::signal()).await;
    }

    /// Serves until `stop` resolves or the server stops by itself (its core stopped: a
    /// durable space whose disk failed), reloading on every SIGHUP.
    pub async fn until_stopped_with(&mut self, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            if let Ok(mut hup) = signal(SignalKind::hangup()) {
                loop {
                    tokio::select! {
                        _ = &mut stop => return,
                        served = &mut self.serve => {
                            self.served = Some(served);
                            return;
                        }
                        _ = hup.recv() => self.reload().await,
                    }
                }
            }
        }
        tokio::select! {
            _ = &mut stop => {}
            served = &mut self.serve => self.served = Some(served),
        }
    }

    /// Stops the processes, then the server (flushing its logs).
    pub async fn stop(self) -> Result<(), Failure> {
        tracing::info!("shutting down");
        self.processes.stop().await;
        self.handle.shutdown();
        // Bounded: a cluster node whose NATS server went down with it, or a log writer stuck
        // on a dead disk, must not keep a stopped gateway alive.
        let served = match self.served {
            Some(served) => Ok(served),
            None => tokio::time::timeout(STOP_GRACE, self.serve).await,
        };
        let Ok(served) = served else {
            return Err(Failure::new(
                exit::RUNTIME,
                format!(
                    "did not stop within {} s (logs may be incomplete)",
                    STOP_GRACE.as_secs()
                ),
            ));
        };
        match served {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Failure::new(exit::RUNTIME, e.to_string())),
            Err(e) => Err(Failure::new(
                exit::RUNTIME,
                format!("server task failed: {e}"),
            )),
        }
    }
}

/// Reads, checks and settles the tokens of a `space.yaml` (writing the token files of
/// participants that had none), as at start and on every reload.
fn load_config(path: &Path) -> Result<SpaceConfig, Failure> {
    let (text, _) =
        files::read_config(path).map_err(|e| Failure::new(exit::UNREADABLE, e.to_string()))?;
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
            Ok(p) => say!("generated a token for {} in {}", g.participant, p.display()),
            Err(e) => {
                return Err(Failure::new(
                    exit::RUNTIME,
                    format!("cannot write the token file for {}: {e}", g.participant),
                ));
            }
        }
    }
    Ok(config)
}

pub async fn run(args: Args) -> Result<(), Failure> {
    crate::init_logging_as(&args.log_level, &args.log_format)?;
    let mut running = start(&args).await?;
    running.until_stopped().await;
    running.stop().await
}

/// Serves the space of `args` and starts its processes.
pub async fn start(args: &Args) -> Result<Running, Failure> {
    // From here on SIGHUP means "reload" (see `Running::until_stopped`), never the default
    // of ending the process, even before anyone waits for it.
    #[cfg(unix)]
    let _ = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    let seed = clock::os_seed();
    let mut ids = IdGen::new(seed);
    // Started processes run in the space folder, not here: every path they get is absolute.
    let config_path = match &args.config {
        Some(path) => Some(
            std::path::absolute(path)
                .map_err(|e| Failure::new(exit::UNREADABLE, format!("{}: {e}", path.display())))?,
        ),
        None => None,
    };
    let (config, layout, default_space) = match &config_path {
        Some(path) => {
            let config = load_config(path)?;
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
    let identity: Option<Arc<dyn mew_core::gateway::IdentityVerifier>> = match &config.gateway.jwt {
        Some(jwt) => {
            let (v, warning) =
                mew_driver_common::server::jwt::JwtVerifier::new(jwt, &layout.config_dir).map_err(
                    |e| Failure::new(exit::UNREADABLE, format!("gateway.auth.jwt: {e}")),
                )?;
            if let Some(w) = warning {
                tracing::warn!("gateway.auth.jwt: {w}");
            }
            Some(Arc::new(v))
        }
        None => None,
    };
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
            opts.max_log_bytes = args.cluster_log_max;
            let node = mew_cluster::connect(opts, config.clone(), identity.clone())
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
    let tls_files = match (&args.tls_cert, &args.tls_key, &config.gateway.tls) {
        (Some(cert), Some(key), _) => Some(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        }),
        (None, None, Some(t)) => Some(TlsFiles {
            cert: layout.config_dir.join(&t.cert),
            key: layout.config_dir.join(&t.key),
        }),
        _ => None,
    };
    let tls = match tls_files {
        Some(files) => Some(Arc::new(ServerTls::load(files).map_err(|e| {
            Failure::new(exit::UNREADABLE, format!("cannot serve TLS: {e}"))
        })?)),
        None => None,
    };
    // A single node with a space.yaml keeps its state in `<space>/.mew/state/`; a cluster
    // member keeps it in the cluster's log.
    let durable = match config.gateway.durability {
        Some(fsync) if cluster.is_none() && !default_space => {
            let dir = layout.root.join(".mew").join("state");
            let restored = mew_driver_common::state::durable::open(
                &dir,
                config.clone(),
                fsync,
                identity.clone(),
            )
            .map_err(|e| {
                let code = if e.unreadable() {
                    exit::UNREADABLE
                } else {
                    exit::RUNTIME
                };
                Failure::new(code, e.to_string())
            })?;
            let r = &restored.report;
            if r.restored() {
                say!(
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
    // The audit logs and the started processes' logs may hold secrets: their folder is the
    // user's alone, even one made by an earlier version with a looser mode.
    if !default_space
        && layout.log_dir.is_dir()
        && let Err(e) = files::private_dir(&layout.log_dir)
    {
        tracing::warn!("cannot make {} private: {e}", layout.log_dir.display());
    }
    let addr = SocketAddr::new(args.bind, args.port);
    let options = ServerOptions {
        identity,
        log_dir: layout.log_dir.clone(),
        seed: Some(ids.next_u64()),
        tls: tls.clone(),
        ui: Some(crate::web::ASSETS),
        ..ServerOptions::default()
    }
    .with_gateway_options(&config.gateway)
    .map_err(|e| Failure::new(exit::USAGE, format!("invalid gateway.trusted_proxies: {e}")))?;
    let (ws, http) = if tls.is_some() {
        ("wss", "https")
    } else {
        ("ws", "http")
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
    say!(
        "mew gateway: space {space:?} on {ws}://{local}/ws?space={space} (HTTP API on {http}://{local}, web page on {})",
        crate::web::link(&format!("{http}://{local}"), &space, None)
    );
    if default_space {
        say!("embedded default space; tokens for this run:");
        for (id, token, caps) in &tokens {
            say!("  {id:<8} token {token}  capabilities {caps}");
        }
        say!("join with: mew client --gateway {ws}://{local} --space {space} --token <token>");
    }
    let handle = server.shutdown_handle();
    let reloader = server.reload_handle();
    if let Some(node) = &cluster {
        say!(
            "cluster node {} (log restored to entry {})",
            args.node_id.as_deref().unwrap_or_default(),
            node.applied()
        );
    }
    let serve = match (cluster, durable) {
        (Some(node), _) => tokio::spawn(server.serve_with(Some(node.core_task()))),
        (None, Some(restored)) => tokio::spawn(server.serve_durable(restored)),
        (None, None) => tokio::spawn(server.serve()),
    };
    let cx = crate::autostart::SpaceContext {
        gateway: format!("{ws}://{local}"),
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
        tls,
        config_path,
        reloader,
        handle,
        serve,
        served: None,
    })
}

/// A size in bytes: a number, optionally followed by a unit (KiB, MiB, GiB, TiB; K, M, G, T
/// and KB, MB, GB, TB count in 1024s too), at least 1MiB.
fn parse_size(text: &str) -> Result<u64, String> {
    let bytes = parse_size::Config::new()
        .with_binary()
        .parse_size(text.trim())
        .map_err(|e| format!("{text:?} is not a size (e.g. 512MiB, 1GiB): {e}"))?;
    if bytes < 1 << 20 {
        return Err(format!("{text:?}: use at least 1MiB"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_read_with_their_units() {
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("2097152"), Ok(2 << 20));
        assert_eq!(parse_size("1.5 GiB"), Ok(3 << 29));
        assert_eq!(parse_size("2TB"), Ok(2 << 40));
        assert!(parse_size("12").unwrap_err().contains("1MiB"));
        assert!(parse_size("3XB").unwrap_err().contains("not a size"));
        assert!(parse_size("lots").unwrap_err().contains("not a size"));
        assert!(
            parse_size("99999999999GiB")
                .unwrap_err()
                .contains("not a size")
        );
    }
}
