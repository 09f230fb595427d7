//! `mew tools`: work on a tools-mode agent's definitions without running it.
//!
//! - `mew tools check --config F`: every problem of the file (tool definitions and agent
//!   settings), one per line with its path; exit 2 if there is any.
//! - `mew tools preview --config F --tool NAME [--arg k=v]...`: the prompt a call with these
//!   arguments would give the agent (absent optional parameters shown as `{name}`).

use std::path::PathBuf;

use mew_core::agent::AgentSettings;
use mew_driver_common::exit;

use crate::Failure;
use crate::agent::{CONFIG_ENV, read_file, tool_set};

/// `mew tools` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Check a configuration; list every problem (exit 2 if any).
    #[command(after_help = "Examples:
  mew tools check --config tools-agent.yaml
  mew tools check --config tools-agent.yaml --json | jq .problems")]
    Check {
        /// The agent configuration (YAML or JSON) with `metadata.tools`.
        #[arg(long, short, env = CONFIG_ENV)]
        config: PathBuf,
        /// Print `{"ok", "tools", "problems"}` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the prompt a call would give the agent.
    #[command(after_help = "Examples:
  mew tools preview --config tools-agent.yaml --tool book_flight \\
    --arg destination='Paris, France' --arg departure_date=2026-12-01")]
    Preview {
        /// The agent configuration (YAML or JSON) with `metadata.tools`.
        #[arg(long, short, env = CONFIG_ENV)]
        config: PathBuf,
        /// The tool.
        #[arg(long)]
        tool: String,
        /// An argument, `key=value` (numbers, booleans and JSON arrays/objects are read as
        /// the parameter's type says).
        #[arg(long = "arg", value_name = "KEY=VALUE")]
        args: Vec<String>,
    },
}

/// Runs `mew tools`; returns what to print.
pub fn run(cmd: Command) -> Result<String, Failure> {
    match cmd {
        Command::Check { config, json } => {
            let file = read_file(&config)?;
            let mut problems = Vec::new();
            let tools = match tool_set(&file) {
                Ok(Some(set)) => set.tools.iter().map(|t| t.name.clone()).collect(),
                Ok(None) => {
                    problems.push("metadata: missing (a tools-mode agent lists its tools under metadata.tools)".to_owned());
                    Vec::new()
                }
                Err(p) => {
                    problems.extend(p);
                    Vec::new()
                }
            };
            if let Err(e) = AgentSettings::from_file(&file) {
                problems.extend(e.0);
            }
            let shown = config.display();
            if json {
                let v = serde_json::json!({"ok": problems.is_empty(), "tools": tools, "problems": problems});
                if problems.is_empty() {
                    return Ok(v.to_string());
                }
                say!("{v}");
                return Err(Failure::new(
                    exit::USAGE,
                    format!("{shown}: {} problem(s)", problems.len()),
                ));
            }
            if problems.is_empty() {
                return Ok(format!(
                    "{shown}: ok, {} tool(s): {}",
                    tools.len(),
                    tools.join(", ")
                ));
            }
            for p in &problems {
                say!("{shown}: {p}");
            }
            Err(Failure::new(
                exit::USAGE,
                format!("{shown}: {} problem(s)", problems.len()),
            ))
        }
        Command::Preview { config, tool, args } => {
            let file = read_file(&config)?;
            let set = match tool_set(&file) {
                Ok(Some(set)) => set,
                Ok(None) => {
                    return Err(Failure::new(
                        exit::USAGE,
                        format!("{}: no metadata.tools", config.display()),
                    ));
                }
                Err(p) => {
                    return Err(Failure::new(
                        exit::USAGE,
                        format!(
                            "{}: {} (see `mew tools check`)",
                            config.display(),
                            p.join("; ")
                        ),
                    ));
                }
            };
            let Some(def) = set.get(&tool) else {
                let names: Vec<&str> = set.tools.iter().map(|t| t.name.as_str()).collect();
                return Err(Failure::new(
                    exit::USAGE,
                    format!("no tool {tool:?} (tools: {})", names.join(", ")),
                ));
            };
            let parsed = def
                .parse_args(args.iter().map(String::as_str))
                .map_err(|e| Failure::new(exit::USAGE, e))?;
            Ok(def.fill(&parsed))
        }
    }
}
