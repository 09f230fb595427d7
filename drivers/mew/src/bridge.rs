//! `mew bridge`: an MCP server (any stdio command, or a Streamable HTTP endpoint) joins a
//! space as a participant.

use std::path::PathBuf;
use std::time::Duration;

use mew_core::bridge::{BridgeConfig, Exit};
use mew_core::mcp::oauth::{ClientChoice, OAuthConfig};
use mew_core::mcp::{McpConfig, ProtocolVersion, RestartBackoff, Root};
use mew_driver_common::client::bridge::ServerTarget;
use mew_driver_common::client::mcp_http::HttpEndpoint;
use mew_driver_common::client::oauth::{self as oauth_io, OAuthSetup};
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
    /// The newest MCP revision offered to the server (e.g. `2025-11-25` keeps a
    /// Streamable HTTP server on sessions); without it, the newest known.
    #[arg(long, value_parser = parse_revision)]
    pub protocol_version: Option<ProtocolVersion>,
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
    /// The MCP server's Streamable HTTP endpoint (`http://` or `https://`), instead of a
    /// command.
    #[arg(long, conflicts_with_all = ["command", "env", "cwd"])]
    pub url: Option<String>,
    /// A header sent to the `--url` server, NAME=VALUE (repeatable); not for credentials,
    /// which the command line would show to every user of the machine.
    #[arg(long = "header", value_parser = parse_env, requires = "url")]
    pub header: Vec<(String, String)>,
    /// A header whose value is read at start, NAME=TEXT where TEXT holds one `{env:VAR}`
    /// or `{file:PATH}` (e.g. `Authorization=Bearer {env:GITHUB_TOKEN}`), repeatable: the
    /// way to pass a credential.
    #[arg(long = "header-from", value_parser = parse_env, requires = "url")]
    pub header_from: Vec<(String, String)>,
    /// Do not sign in with OAuth when the `--url` server asks for it.
    #[arg(long, requires = "url")]
    pub no_oauth: bool,
    /// A JSON file with the OAuth client registered for this bridge beforehand:
    /// `{"client_id": ..., "client_secret": ...}` (the secret optional).
    #[arg(long, requires = "url")]
    pub oauth_client_file: Option<PathBuf>,
    /// The client ID metadata document to give as `client_id` where the authorization
    /// server takes them (default: the one the gateway serves for this bridge).
    #[arg(long, requires = "url")]
    pub oauth_client_metadata_url: Option<String>,
    /// Where the sign-in's tokens are kept (0600; default `.mew/oauth/<id>.json` under the
    /// current folder, the space's folder when the space starts the bridge).
    #[arg(long, requires = "url")]
    pub oauth_store: Option<PathBuf>,
    /// How long a person has to sign in before the server's start counts as failed, in ms
    /// (the `initialize` wait is at least this long while OAuth is on).
    #[arg(long, default_value_t = 600_000)]
    pub sign_in_timeout: u64,
    /// The MCP server command and its arguments, after `--`.
    #[arg(last = true, required_unless_present = "url", num_args = 1..)]
    pub command: Vec<String>,
}

/// Resolves a `--header-from` value: the text around one `{env:VAR}` or `{file:PATH}` is
/// kept, the reference replaced by the variable's value or the file's content (trailing
/// newline removed). Errors name the variable or file, never a value.
pub fn resolve_header(name: &str, template: &str) -> Result<String, String> {
    let (Some(start), Some(end)) = (template.find('{'), template.rfind('}')) else {
        return Err(format!(
            "--header-from {name}: expected {{env:VAR}} or {{file:PATH}} in the value"
        ));
    };
    if end < start {
        return Err(format!("--header-from {name}: unbalanced braces"));
    }
    let (prefix, reference, suffix) = (
        &template[..start],
        &template[start + 1..end],
        &template[end + 1..],
    );
    let value = if let Some(var) = reference.strip_prefix("env:") {
        std::env::var(var).map_err(|_| format!("header {name}: ${var} is not set"))?
    } else if let Some(path) = reference.strip_prefix("file:") {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("header {name}: cannot read {path}: {e}"))?;
        text.trim_end_matches(['\n', '\r']).to_owned()
    } else {
        return Err(format!(
            "--header-from {name}: expected {{env:VAR}} or {{file:PATH}}, got {{{reference}}}"
        ));
    };
    if value.is_empty() {
        return Err(format!("header {name}: the value read is empty"));
    }
    Ok(format!("{prefix}{value}{suffix}"))
}

fn parse_revision(s: &str) -> Result<ProtocolVersion, String> {
    ProtocolVersion::parse(s).ok_or_else(|| format!("unknown MCP revision {s:?}"))
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// The bridge's configuration from the command line.
pub fn config(args: &Args) -> BridgeConfig {
    // Over HTTP the newest revision is offered first (`server/discover`, then `initialize`).
    let mut base = if args.url.is_some() {
        McpConfig::http()
    } else {
        McpConfig::default()
    };
    if let Some(v) = args.protocol_version {
        base.protocol_version = v;
    }
    let init_timeout = if args.url.is_some() && !args.no_oauth {
        args.init_timeout.max(args.sign_in_timeout)
    } else {
        args.init_timeout
    };
    BridgeConfig {
        participant: args.connect.participant(),
        mcp: McpConfig {
            init_timeout: Duration::from_millis(init_timeout),
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
            ..base
        },
        call_timeout: Duration::from_millis(args.call_timeout),
        sampling_answered_by: args.sampling_answered_by.clone(),
        ..BridgeConfig::default()
    }
}

/// Where the server is, from the command line: the endpoint (its headers resolved) or the
/// command.
pub fn target(args: &Args) -> Result<ServerTarget, String> {
    let Some(url) = &args.url else {
        return Ok(command(args).into());
    };
    let mut headers = args.header.clone();
    for (name, template) in &args.header_from {
        headers.push((name.clone(), resolve_header(name, template)?));
    }
    let endpoint = HttpEndpoint {
        url: url.clone(),
        headers,
        oauth: oauth_setup(args, url)?.map(Box::new),
    };
    endpoint.check()?;
    Ok(endpoint.into())
}

/// The OAuth settings from the command line: the redirect and the client document on the
/// gateway the bridge joins, the client file read now (its values never shown).
pub fn oauth_setup(args: &Args, url: &str) -> Result<Option<OAuthSetup>, String> {
    if args.no_oauth {
        return Ok(None);
    }
    let participant = args.connect.participant();
    let id = participant
        .participant_id
        .clone()
        .unwrap_or_else(|| "bridge".to_owned());
    let base = oauth_io::gateway_base(&participant.gateway_url).ok_or_else(|| {
        format!(
            "cannot tell the gateway's address from {}",
            participant.gateway_url
        )
    })?;
    let client = match &args.oauth_client_file {
        Some(path) => read_client_file(path)?,
        None => ClientChoice::Automatic,
    };
    let store = args.oauth_store.clone().unwrap_or_else(|| {
        PathBuf::from(".mew")
            .join("oauth")
            .join(format!("{id}.json"))
    });
    Ok(Some(OAuthSetup {
        config: OAuthConfig {
            server_url: url.to_owned(),
            redirect_uri: oauth_io::callback_url(&base),
            state_prefix: format!("{id}."),
            client,
            client_metadata_url: Some(
                args.oauth_client_metadata_url
                    .clone()
                    .unwrap_or_else(|| oauth_io::client_document_url(&base, &id)),
            ),
            client_name: format!("mew bridge {id}"),
            ..OAuthConfig::default()
        },
        store,
    }))
}

/// Reads a pre-registered client: `{"client_id": ..., "client_secret": ...}`. Errors name
/// the file, never a value.
pub fn read_client_file(path: &std::path::Path) -> Result<ClientChoice, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the OAuth client file {}: {e}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|_| format!("the OAuth client file {} is not JSON", path.display()))?;
    let s = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .filter(|x| !x.is_empty())
            .map(str::to_owned)
    };
    let client_id = s("client_id")
        .ok_or_else(|| format!("the OAuth client file {} has no client_id", path.display()))?;
    Ok(ClientChoice::Registered {
        client_id,
        client_secret: s("client_secret"),
    })
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
    let target = target(&args).map_err(|e| Failure::new(exit::USAGE, e))?;
    let exit = mew_tokio::run_bridge(config(&args), target, None, crate::signal()).await;
    match exit {
        Exit::Shutdown => Ok(()),
        // Starting it again would fail the same way: `mew space` does not restart exit 2.
        Exit::ServerNeverReady(_) => Err(Failure::new(exit::USAGE, exit.to_string())),
        Exit::ServerGaveUp(_) => Err(Failure::new(exit::RUNTIME, exit.to_string())),
        Exit::GatewayGaveUp(_) => Err(Failure::new(exit::CONNECT, exit.to_string())),
    }
}
