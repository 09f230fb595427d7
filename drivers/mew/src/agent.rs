//! `mew agent`: an LLM agent (SDK layer 3) joins a space and answers its chats, using the
//! tools every participant offers. With `metadata.tools` in its configuration it is a
//! tools-mode agent: it offers those tools in the space, and with `--mcp` serves them to an
//! MCP host on stdio (joining a space too when one is configured).
//!
//! Settings come, highest first, from flags, the environment, then the configuration file
//! (`--config` or `MEW_AGENT_CONFIG`). The API key is read from `OPENAI_API_KEY` (or the
//! file), never from a flag, so that `ps` does not show it.

use std::path::PathBuf;
use std::sync::Arc;

use mew_core::agent::{AgentConfig, AgentEvent, AgentFile, AgentSettings, TaskOutcome};
use mew_core::gateway::substitute;
use mew_core::participant::ParticipantConfig;
use mew_core::tools::ToolSet;
use mew_driver_common::exit;
use mew_tokio::{AgentExit, HttpTransport, ModelEndpoint};

use crate::Failure;
use crate::connect::{GATEWAY_ENV, ID_ENV, SPACE_ENV, TOKEN_ENV, url_for};

/// Environment variable of the agent configuration file.
pub const CONFIG_ENV: &str = "MEW_AGENT_CONFIG";
/// Environment variable of the model API key.
pub const KEY_ENV: &str = "OPENAI_API_KEY";
/// Environment variable of the model API base URL.
pub const BASE_URL_ENV: &str = "OPENAI_BASE_URL";
/// Environment variable of the model name.
pub const MODEL_ENV: &str = "MEW_MODEL";
/// The hosted API used when only a key is given.
pub const OPENAI_BASE: &str = "https://api.openai.com/v1";

/// Options of `mew agent`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  # a local OpenAI-compatible server (Ollama, llama.cpp, vLLM)
  OPENAI_BASE_URL=http://localhost:11434/v1 MEW_MODEL=llama3.1 \\
    mew agent --gateway ws://localhost:8080 --space default --id agent --token $TOKEN
  # a hosted API, settings from a file
  OPENAI_API_KEY=sk-... mew agent --config agent.yaml
  # tools mode: serve the file's metadata.tools to an MCP host on stdio
  OPENAI_BASE_URL=http://localhost:11434/v1 mew agent --mcp --config tools-agent.yaml")]
pub struct Args {
    /// Agent configuration (YAML or JSON): prompts, chat strategy, auto-fulfil rules, ...
    #[arg(long, short, env = CONFIG_ENV)]
    pub config: Option<PathBuf>,
    /// Gateway URL, e.g. ws://127.0.0.1:8080.
    #[arg(long, short, env = GATEWAY_ENV)]
    pub gateway: Option<String>,
    /// Space id.
    #[arg(long, short, env = SPACE_ENV)]
    pub space: Option<String>,
    /// Bearer token (prefer the environment variable, which `ps` does not show). May begin
    /// with `-`, as a token of another implementation can.
    #[arg(long, short, env = TOKEN_ENV, hide_env_values = true, allow_hyphen_values = true)]
    pub token: Option<String>,
    /// Participant id.
    #[arg(long, alias = "participant", env = ID_ENV)]
    pub id: Option<String>,
    /// Model name.
    #[arg(long, env = MODEL_ENV)]
    pub model: Option<String>,
    /// Base URL of an OpenAI-compatible API (`/chat/completions` is appended).
    #[arg(long, env = BASE_URL_ENV)]
    pub base_url: Option<String>,
    /// Serve the configuration's `metadata.tools` as an MCP server on stdin/stdout (logs go
    /// to stderr). A space is joined too when gateway, space and token are all set.
    #[arg(long)]
    pub mcp: bool,
    /// Log filter (error, warn, info, debug, trace, or a tracing filter).
    #[arg(long, default_value = "info")]
    pub log_level: String,
    #[command(flatten)]
    pub tls: crate::connect::TlsArgs,
}

/// Reads an agent configuration file.
pub fn read_file(path: &std::path::Path) -> Result<AgentFile, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::new(
            exit::UNREADABLE,
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    AgentFile::from_yaml(&text)
        .map_err(|e| Failure::new(exit::USAGE, format!("{}: {e}", path.display())))
}

/// The file's tools, if it has a `metadata` section; its problems, each with its path.
pub fn tool_set(file: &AgentFile) -> Result<Option<ToolSet>, Vec<String>> {
    match &file.metadata {
        None => Ok(None),
        Some(m) => ToolSet::load(m)
            .map(Some)
            .map_err(|p| p.iter().map(ToString::to_string).collect()),
    }
}

/// Everything `mew agent` needs, resolved.
#[derive(Debug)]
pub struct Resolved {
    /// The agent's configuration.
    pub config: AgentConfig,
    /// Where its model is.
    pub endpoint: ModelEndpoint,
}

/// Reads the file and merges flags, environment and file; every problem is a usage error.
pub fn resolve(args: &Args, env: impl Fn(&str) -> Option<String>) -> Result<Resolved, Failure> {
    let mut file = match &args.config {
        Some(path) => read_file(path)?,
        None => AgentFile::default(),
    };
    let tools = tool_set(&file).map_err(|p| {
        Failure::new(
            exit::USAGE,
            format!("tool definitions: {} (see `mew tools check`)", p.join("; ")),
        )
    })?;
    if args.mcp && tools.is_none() {
        return Err(Failure::new(
            exit::USAGE,
            "--mcp serves the configuration's metadata.tools, and there are none (see `mew tools check --help`)",
        ));
    }
    // `${NAME}` in the file's connection settings comes from the environment.
    let expand = |v: Option<String>| {
        v.map(|s| substitute(&s, |name| env(name)).0)
            .filter(|s| !s.is_empty())
    };
    let gateway = args.gateway.clone().or(expand(file.gateway.take()));
    let space = args.space.clone().or(expand(file.space.take()));
    let token = args.token.clone().or(expand(file.token.take()));
    let id = args.id.clone().or(expand(file.participant_id.take()));
    let mut missing = Vec::new();
    if gateway.is_none() {
        missing.push(format!("--gateway or {GATEWAY_ENV}"));
    }
    if space.is_none() {
        missing.push(format!("--space or {SPACE_ENV}"));
    }
    if token.is_none() {
        missing.push(format!("--token or {TOKEN_ENV}"));
    }
    // An MCP server may run without a space: all three, or none.
    let join = !(args.mcp && missing.len() == 3);
    if join && !missing.is_empty() {
        return Err(Failure::new(
            exit::USAGE,
            format!("cannot join a space: set {}", missing.join(", ")),
        ));
    }
    let api_key = env(KEY_ENV)
        .filter(|k| !k.is_empty())
        .or(expand(file.api_key.take()));
    let base_url = args.base_url.clone().or(expand(file.base_url.take()));
    let base_url = match (base_url, &api_key) {
        (Some(u), _) => u,
        (None, Some(_)) => OPENAI_BASE.to_owned(),
        (None, None) => {
            return Err(Failure::new(
                exit::USAGE,
                format!(
                    "no model endpoint: set {BASE_URL_ENV} (e.g. http://localhost:11434/v1 for a local server) or {KEY_ENV} (for {OPENAI_BASE}), or base_url in the agent configuration"
                ),
            ));
        }
    };
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err(Failure::new(
            exit::USAGE,
            format!("the model base URL must start with http:// or https://, got {base_url:?}"),
        ));
    }
    if let Some(m) = &args.model {
        file.model = Some(m.clone());
    }
    let settings = AgentSettings::from_file(&file)
        .map_err(|e| Failure::new(exit::USAGE, format!("agent configuration: {e}")))?;
    let mut participant = ParticipantConfig {
        participant_id: id,
        ..ParticipantConfig::default()
    };
    if let (Some(gateway), Some(space), Some(token)) = (gateway, space, token) {
        participant.gateway_url = url_for(&gateway, &space);
        participant.space = space;
        participant.token = token;
    }
    AgentConfig::apply_timeouts(&mut participant, &file);
    let mut config = AgentConfig::new(participant, settings);
    config.tools = tools;
    config.mcp_stdio = args.mcp;
    config.join_space = join;
    Ok(Resolved {
        config,
        endpoint: ModelEndpoint { base_url, api_key },
    })
}

fn log_event(e: &AgentEvent) {
    match e {
        AgentEvent::TaskStarted { trigger, from } => {
            tracing::info!(chat = %trigger, %from, "working on a chat");
        }
        AgentEvent::TaskFinished { trigger, outcome } => match outcome {
            TaskOutcome::Answered(_) => tracing::info!(chat = %trigger, "answered"),
            TaskOutcome::Cancelled(r) => tracing::info!(chat = %trigger, "stopped: {r}"),
            TaskOutcome::Failed(r) => tracing::warn!(chat = %trigger, "failed: {r}"),
        },
        AgentEvent::ChatIgnored { id, reason } => {
            tracing::debug!(chat = %id, "not answered: {reason}")
        }
        AgentEvent::ModelRetry {
            attempt,
            after,
            reason,
        } => tracing::warn!("model call failed ({reason}); retry {attempt} in {after:?}"),
        AgentEvent::ModelFailed(e) => tracing::error!("{}", e.message),
        AgentEvent::AutoFulfilled { proposal, rule } => {
            tracing::info!(%proposal, rule, "fulfilled by an auto_fulfil rule");
        }
        AgentEvent::Participant(p) => tracing::debug!("{p:?}"),
        AgentEvent::RunProgress { run, step, message } => {
            tracing::debug!(%run, step, "{message}")
        }
        AgentEvent::RunFinished { run, outcome } => match outcome {
            TaskOutcome::Answered(_) => tracing::info!(%run, "tool call answered"),
            TaskOutcome::Cancelled(r) => tracing::info!(%run, "tool call stopped: {r}"),
            TaskOutcome::Failed(r) => tracing::warn!(%run, "tool call failed: {r}"),
        },
        AgentEvent::Mcp(e) => match e {
            mew_core::mcp::ServerEvent::Initialized { version, client } => {
                tracing::info!(%version, client = %client.as_ref().map(|c| c.to_string()).unwrap_or_default(), "MCP host connected")
            }
            mew_core::mcp::ServerEvent::Issue(i) => tracing::warn!("MCP: {i}"),
            other => tracing::debug!("MCP: {other:?}"),
        },
        AgentEvent::Exit => tracing::info!("exiting"),
    }
}

/// Runs `mew agent`.
pub async fn run(args: Args) -> Result<(), Failure> {
    crate::init_logging(&args.log_level)?;
    args.tls.install()?;
    let Resolved { config, endpoint } = resolve(&args, |k| std::env::var(k).ok())?;
    tracing::info!(
        gateway = %if config.join_space { config.participant.gateway_url.as_str() } else { "(no space)" },
        model = %config.settings.model,
        endpoint = %endpoint.base_url,
        tools = config.tools.as_ref().map_or(0, |t| t.tools.len()),
        mcp = config.mcp_stdio,
        "agent starting"
    );
    let exit = mew_tokio::run_agent(
        config,
        endpoint,
        Arc::new(HttpTransport),
        None,
        crate::signal(),
        log_event,
    )
    .await;
    match exit {
        AgentExit::Shutdown => Ok(()),
        AgentExit::GatewayGaveUp => Err(Failure::new(
            exit::CONNECT,
            "the gateway could not be reached (or refused the join)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(a: &[&str]) -> Args {
        let mut v = vec!["mew-agent"];
        v.extend_from_slice(a);
        Cli::parse_from(v).args
    }

    #[test]
    fn no_endpoint_names_what_to_set() {
        let a = args(&["-g", "ws://h:1", "-s", "s", "-t", "t"]);
        let e = resolve(&a, |_| None).unwrap_err();
        assert_eq!(e.code, exit::USAGE);
        assert!(
            e.message.contains(BASE_URL_ENV) && e.message.contains(KEY_ENV),
            "{}",
            e.message
        );
        let e = resolve(&args(&[]), |_| None).unwrap_err();
        assert!(
            e.message.contains("--gateway or MEW_GATEWAY"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_key_alone_means_the_hosted_api_and_the_file_fills_the_rest() {
        let dir = std::env::temp_dir().join(format!("mew-agent-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("agent.yaml");
        std::fs::write(
            &path,
            "gateway: ws://h:1\nspace: s\ntoken: ${AGENT_TOKEN}\nid: helper\nmodel: m1\nmax_iterations: 4\n",
        )
        .unwrap();
        let a = args(&["--config", path.to_str().unwrap()]);
        let env = |k: &str| match k {
            "OPENAI_API_KEY" => Some("sk-test".to_owned()),
            "AGENT_TOKEN" => Some("tok".to_owned()),
            _ => None,
        };
        let r = resolve(&a, env).unwrap();
        assert_eq!(r.endpoint.base_url, OPENAI_BASE);
        assert_eq!(r.endpoint.api_key.as_deref(), Some("sk-test"));
        assert_eq!(r.config.participant.token, "tok");
        assert_eq!(
            r.config.participant.participant_id.as_deref(),
            Some("helper")
        );
        assert_eq!(r.config.participant.gateway_url, "ws://h:1/ws?space=s");
        assert_eq!(r.config.settings.model, "m1");
        assert_eq!(r.config.settings.max_iterations, 4);
        // Flags win over the file.
        let a = args(&[
            "--config",
            path.to_str().unwrap(),
            "--model",
            "m2",
            "--id",
            "other",
        ]);
        let r = resolve(&a, env).unwrap();
        assert_eq!(r.config.settings.model, "m2");
        assert_eq!(
            r.config.participant.participant_id.as_deref(),
            Some("other")
        );
        std::fs::write(&path, "max_iterations: 0\n").unwrap();
        let e = resolve(&args(&["--config", path.to_str().unwrap()]), env).unwrap_err();
        assert_eq!(e.code, exit::USAGE);
        let _ = std::fs::remove_dir_all(dir);
    }
}
