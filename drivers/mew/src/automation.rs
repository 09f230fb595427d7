//! `mew automation suggest`: grants suggested by a space's history of approvals.
//!
//! Reads the space's `envelope-history.jsonl` across rotations, pairs proposals with their
//! fulfilments and rejections, and prints the narrowest capability for each proposer and tool
//! approved at least `--min` times and never rejected (`mew_core::automation`), each checked
//! against every approval and rejection, and against what its approvers could grant.

use std::collections::BTreeMap;
use std::path::PathBuf;

use mew_core::automation::{decisions, suggest};
use mew_core::gateway::SpaceConfig;
use mew_driver_common::exit;
use mew_driver_common::state::files;
use mew_driver_common::state::logs::rotated_files;
use serde_json::json;

use crate::Failure;

/// `mew automation` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Suggest capability grants from the approvals in the space's history.
    #[command(after_help = "Examples:
  mew automation suggest --space-dir my-space
  mew automation suggest --space-dir my-space --min 5 --json | jq '.[].grant'")]
    Suggest {
        /// Folder of the space (holding `.mew/space.yaml` or `space.yaml`).
        #[arg(long, default_value = ".")]
        space_dir: PathBuf,
        /// Approvals needed before a grant is suggested.
        #[arg(long, default_value_t = 3)]
        min: usize,
        /// One JSON array of suggestions, each with the `capability/grant` to send.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `mew automation`; returns what to print.
pub fn run(cmd: Command) -> Result<String, Failure> {
    let Command::Suggest {
        space_dir,
        min,
        json,
    } = cmd;
    let config = [
        space_dir.join(".mew/space.yaml"),
        space_dir.join("space.yaml"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .ok_or_else(|| Failure::new(exit::USAGE, format!("no space in {}", space_dir.display())))?;
    let layout = files::SpaceLayout::for_config(&config);
    let history = layout.log_dir.join("envelope-history.jsonl");
    let mut text = String::new();
    for f in rotated_files(&history) {
        match std::fs::read_to_string(&f) {
            Ok(t) => text.push_str(&t),
            Err(e) => {
                return Err(Failure::new(
                    exit::UNREADABLE,
                    format!("cannot read {}: {e}", f.display()),
                ));
            }
        }
    }
    if text.is_empty() {
        return Err(Failure::new(
            exit::UNREADABLE,
            format!(
                "no history in {} (is envelope_history logging on?)",
                layout.log_dir.display()
            ),
        ));
    }
    let caps: BTreeMap<String, mew_core::CapabilitySet> = std::fs::read_to_string(&config)
        .ok()
        .and_then(|t| SpaceConfig::from_yaml(&t).ok())
        .map(|c| {
            c.participants
                .iter()
                .map(|p| (p.id.clone(), p.capabilities.clone()))
                .collect()
        })
        .unwrap_or_default();
    let d = decisions(text.lines());
    let found = suggest(&d, min, &caps);
    if json {
        let list: Vec<_> = found
            .iter()
            .map(|s| {
                json!({"recipient": s.recipient, "capability": s.capability,
                       "approved": s.approved, "approvers": s.approvers,
                       "first": s.first, "last": s.last,
                       "rejections_checked": s.rejected_checked,
                       "grant": s.grant_envelope()})
            })
            .collect();
        return Ok(serde_json::Value::Array(list).to_string());
    }
    if found.is_empty() {
        return Ok(format!(
            "no suggestion: {} decided proposals, none approved {min} times without a rejection",
            d.len()
        ));
    }
    let mut out = String::new();
    for s in &found {
        out.push_str(&format!(
            "{} could be granted {}\n  evidence: approved {} times by {} ({} to {}); checked against {} rejection(s)\n  send: {}\n",
            s.recipient,
            s.capability,
            s.approved.len(),
            s.approvers.join(", "),
            s.first,
            s.last,
            s.rejected_checked,
            s.grant_envelope()
        ));
    }
    Ok(out.trim_end().to_owned())
}
