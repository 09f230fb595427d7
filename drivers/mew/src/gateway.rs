//! `mew gateway`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use mew_core::gateway::{LoggingConfig, SpaceConfig};
use mew_core::ids::IdGen;
use mew_driver_common::{exit, files};
use mew_tokio::{GatewayServer, ServerOptions, clock};

use crate::Failure;

/// Options of `mew gateway`.
#[derive(clap::Args)]
pub struct Args {
    /// A space.yaml; without it an embedded default space (human, agent, service) is served
    /// and its tokens printed.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Port to listen on (0 picks a free one).
    #[arg(long, short, default_value_t = 8080)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Log filter (error, warn, info, debug, trace, or a tracing filter).
    #[arg(long, default_value = "info")]
    log_level: String,
}

pub async fn run(args: Args) -> Result<(), Failure> {
    crate::init_logging(&args.log_level)?;
    let seed = clock::os_seed();
    let mut ids = IdGen::new(seed);
    let (config, base_dir, default_space) = match &args.config {
        Some(path) => {
            let (text, base) = files::read_config(path)
                .map_err(|e| Failure::new(exit::UNREADABLE, e.to_string()))?;
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
            let generated = config.resolve_tokens(
                |var| std::env::var(var).ok(),
                |id| files::read_token_file(&base, id),
                &mut ids,
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
            (config, base, false)
        }
        None => {
            let mut config = SpaceConfig::default_space(&mut ids);
            // A space nobody configured leaves no files behind in the working directory.
            config.logging = LoggingConfig::OFF;
            (config, PathBuf::from("."), true)
        }
    };
    let addr = SocketAddr::new(args.bind, args.port);
    let options = ServerOptions {
        base_dir,
        seed: Some(ids.next_u64()),
        ..ServerOptions::default()
    };
    let space = config.id.clone();
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
    let serve = tokio::spawn(server.serve());
    crate::signal().await;
    tracing::info!("shutting down");
    handle.shutdown();
    match serve.await {
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
