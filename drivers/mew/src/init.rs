//! `mew init [TEMPLATE]`: a space folder from a template embedded in the binary.
//!
//! Writes `<dir>/.mew/space.yaml` (the reference's layout), the template's other files, and
//! one token per participant in `<dir>/.mew/tokens/<id>.token` (0600, folder 0700): tokens
//! never go into `space.yaml`, so the file can be shared and committed.

use std::path::{Path, PathBuf};

use mew_core::gateway::SpaceConfig;
use mew_driver_common::state::files;
use mew_driver_common::{exit, secret};

use crate::Failure;

/// One template: its name, what it is, and its files (path under the space folder, text).
pub struct SpaceTemplate {
    /// Name given to `mew init`.
    pub name: &'static str,
    /// One line about it.
    pub about: &'static str,
    files: &'static [(&'static str, &'static str)],
    /// Folders to create (empty ones included).
    dirs: &'static [&'static str],
}

/// The templates built in.
pub const TEMPLATES: &[SpaceTemplate] = &[
    SpaceTemplate {
        name: "coder",
        about: "a person reviews what a coding agent proposes to do to ./workspace (filesystem MCP server)",
        files: &[
            (
                ".mew/space.yaml",
                include_str!("../templates/coder/space.yaml"),
            ),
            (
                ".mew/agent.yaml",
                include_str!("../templates/coder/agent.yaml"),
            ),
            (
                "workspace/README.md",
                include_str!("../templates/coder/workspace-README.md"),
            ),
        ],
        dirs: &["workspace"],
    },
    SpaceTemplate {
        name: "note-taker",
        about: "a person and an agent keep notes in a knowledge graph (memory MCP server)",
        files: &[
            (
                ".mew/space.yaml",
                include_str!("../templates/note-taker/space.yaml"),
            ),
            (
                ".mew/agent.yaml",
                include_str!("../templates/note-taker/agent.yaml"),
            ),
        ],
        dirs: &[],
    },
];

/// Options of `mew init`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  mew init --list-templates
  mew init coder --dir my-space --name my-space
  cd my-space && OPENAI_BASE_URL=http://localhost:11434/v1 mew space up")]
pub struct Args {
    /// Template to use (see --list-templates).
    #[arg(default_value = "coder")]
    pub template: String,
    /// Folder of the space (created if needed).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Space id (default: the folder's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Overwrite an existing space.yaml (tokens already there are kept).
    #[arg(long)]
    pub force: bool,
    /// List the templates and exit.
    #[arg(long)]
    pub list_templates: bool,
    /// Serve the space over TLS with this PEM certificate chain (written to space.yaml as
    /// `gateway.tls`, with --tls-key; the space then prints wss:// URLs).
    #[arg(long, value_name = "CERT.pem", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "KEY.pem", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// The `gateway.tls` section for `cert` and `key`, as absolute paths (so they hold wherever
/// the space is started from).
fn tls_section(cert: &Path, key: &Path) -> Result<String, Failure> {
    let abs = |p: &Path| {
        std::fs::canonicalize(p).map_err(|e| {
            Failure::new(
                exit::UNREADABLE,
                format!("cannot read {}: {e}", p.display()),
            )
        })
    };
    let (cert, key) = (abs(cert)?, abs(key)?);
    let quote = |p: &Path| serde_json::Value::String(p.to_string_lossy().into_owned());
    Ok(format!(
        "\n# TLS: the gateway serves wss:// and https:// with these files (SIGHUP re-reads them).\ngateway:\n  tls: {{cert: {}, key: {}}}\n",
        quote(&cert),
        quote(&key)
    ))
}

fn space_name(args: &Args) -> String {
    if let Some(n) = &args.name {
        return n.clone();
    }
    let dir = std::fs::canonicalize(&args.dir).unwrap_or_else(|_| args.dir.clone());
    let raw = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "space".into());
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if clean.is_empty() {
        "space".into()
    } else {
        clean
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Runs `mew init`; returns what to print.
pub fn run(args: Args) -> Result<String, Failure> {
    if args.list_templates {
        return Ok(TEMPLATES
            .iter()
            .map(|t| format!("{:<12} {}", t.name, t.about))
            .collect::<Vec<_>>()
            .join("\n"));
    }
    let Some(t) = TEMPLATES.iter().find(|t| t.name == args.template) else {
        let names: Vec<&str> = TEMPLATES.iter().map(|t| t.name).collect();
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "no template {:?} (templates: {})",
                args.template,
                names.join(", ")
            ),
        ));
    };
    let name = space_name(&args);
    if !valid_name(&name) {
        return Err(Failure::new(
            exit::USAGE,
            format!("space name {name:?}: use 1 to 64 letters, digits, `-` or `_`"),
        ));
    }
    let config_path = args.dir.join(".mew/space.yaml");
    if (config_path.exists() || args.dir.join("space.yaml").exists()) && !args.force {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "{} already holds a space; --force overwrites its files (tokens are kept)",
                args.dir.display()
            ),
        ));
    }
    let io = |what: &Path, e: std::io::Error| {
        Failure::new(
            exit::RUNTIME,
            format!("cannot write {}: {e}", what.display()),
        )
    };
    for d in t.dirs {
        let p = args.dir.join(d);
        std::fs::create_dir_all(&p).map_err(|e| io(&p, e))?;
    }
    let mut written = Vec::new();
    for (rel, text) in t.files {
        let p = args.dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        // Files of the workspace a person may have edited are left alone.
        if p.exists() && !rel.starts_with(".mew/") {
            continue;
        }
        let mut text = text.replace("{{name}}", &name);
        if *rel == ".mew/space.yaml"
            && let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key)
        {
            text.push_str(&tls_section(cert, key)?);
        }
        std::fs::write(&p, text).map_err(|e| io(&p, e))?;
        written.push(p);
    }
    let text = std::fs::read_to_string(&config_path).map_err(|e| io(&config_path, e))?;
    let config = SpaceConfig::from_yaml(&text).map_err(|e| {
        Failure::new(
            exit::RUNTIME,
            format!("template {} does not load: {:?}", t.name, e.0),
        )
    })?;
    let mut tokens = Vec::new();
    for p in &config.participants {
        if files::read_token_file(&args.dir, &p.id).is_some() {
            continue;
        }
        let path = files::write_token_file(&args.dir, &p.id, &secret::token())
            .map_err(|e| io(&files::token_path(&args.dir, &p.id), e))?;
        tokens.push(path);
    }
    let mut out = format!(
        "space {name:?} from template {} in {}\n",
        t.name,
        args.dir.display()
    );
    for p in &written {
        out.push_str(&format!("  wrote {}\n", p.display()));
    }
    for p in &tokens {
        out.push_str(&format!("  token {} (0600)\n", p.display()));
    }
    if config.gateway.tls.is_some() {
        out.push_str("  TLS: the space serves wss:// and https://\n");
    }
    let dir = args.dir.display();
    out.push_str(&format!(
        "start it:   OPENAI_BASE_URL=<model API> mew space up --space-dir {dir}\njoin it:    mew space connect --space-dir {dir}\nstop it:    mew space down --space-dir {dir}"
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mew_core::agent::{AgentFile, AgentSettings};

    #[test]
    fn every_template_loads_as_a_space_and_its_agent_configuration() {
        for t in TEMPLATES {
            for (rel, text) in t.files {
                let text = text.replace("{{name}}", "test-space");
                if rel.ends_with("space.yaml") {
                    let c = SpaceConfig::from_yaml(&text)
                        .unwrap_or_else(|e| panic!("{}: {:?}", t.name, e.0));
                    assert_eq!(c.id, "test-space");
                    let ids: Vec<&str> = c.participants.iter().map(|p| p.id.as_str()).collect();
                    assert!(ids.contains(&"human") && ids.contains(&"agent"), "{ids:?}");
                    assert!(
                        !text.contains("tokens:"),
                        "{}: tokens in space.yaml",
                        t.name
                    );
                } else if rel.ends_with("agent.yaml") {
                    let f = AgentFile::from_yaml(&text).unwrap();
                    AgentSettings::from_file(&f).unwrap_or_else(|e| panic!("{}: {e}", t.name));
                }
            }
        }
    }
}
