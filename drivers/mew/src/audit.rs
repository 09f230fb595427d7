//! `mew audit`: reads a space's envelope history (and, with `--decisions`, its capability
//! decisions) across rotated files, oldest first, with filters; prints one line per record
//! or, with `--json`, the records themselves.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use mew_core::Time;
use mew_core::gateway::AuditFile;
use mew_driver_common::exit;
use mew_driver_common::state::files::SpaceLayout;
use mew_driver_common::state::logs::rotated_files;
use serde_json::Value;

use crate::Failure;

/// Options of `mew audit`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  # who approved what: fulfilments are requests correlated to a proposal
  mew audit --config .mew/space.yaml --kind mcp/request --event received
  # everything one participant sent or received in the last hour, as JSON lines
  mew audit --participant agent --since 1h --json
  # refused capability checks of the space in ./my-space
  mew audit --space-dir my-space --decisions --event capability_check | grep denied")]
pub struct Args {
    /// The log folder (default: found from --space-dir or --config, else .mew/logs or logs
    /// here).
    #[arg(long, conflicts_with_all = ["config", "space_dir"])]
    pub logs: Option<PathBuf>,
    /// The space's `space.yaml`, to find its log folder.
    #[arg(long, alias = "space-config", conflicts_with = "space_dir")]
    pub config: Option<PathBuf>,
    /// The space's folder (as `mew space` takes it), to find its log folder.
    #[arg(long)]
    pub space_dir: Option<PathBuf>,
    /// Only records about this participant (sender, recipient, or the envelope's `from`).
    #[arg(long, short)]
    pub participant: Option<String>,
    /// Only envelopes of this kind (`delivered` records take the kind of their `received` one).
    #[arg(long, short)]
    pub kind: Option<String>,
    /// Only records of this event (received, delivered, rejected, audit_dropped,
    /// capability_check).
    #[arg(long, short)]
    pub event: Option<String>,
    /// Only records at or after this time: RFC 3339 (`2026-11-25T10:00:00Z`) or an age
    /// (`90s`, `10m`, `2h`, `7d`, or combined: `1h30m`).
    #[arg(long)]
    pub since: Option<String>,
    /// Read the capability decisions instead of the envelope history.
    #[arg(long)]
    pub decisions: bool,
    /// Print the matching records as JSON lines.
    #[arg(long)]
    pub json: bool,
}

/// The lower time bound as a timestamp string (records compare as text: same format).
fn since_bound(s: &str, now: Time) -> Result<String, String> {
    let s = s.trim();
    if s.len() >= 10 && s.as_bytes()[4] == b'-' {
        // A date or a UTC time: compared as text against `YYYY-MM-DDTHH:MM:SS.mmmZ`.
        return Ok(s.trim_end_matches('Z').to_owned());
    }
    if s.ends_with(|c: char| c.is_ascii_alphabetic()) {
        let age = humantime::parse_duration(s)
            .map_err(|e| format!("bad --since {s:?}: {e} (expected e.g. 90s, 10m, 2h, 7d)"))?;
        let age = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
        let at = now.as_unix_millis().saturating_sub(age);
        return Ok(Time::from_unix_millis(at).to_string());
    }
    Err(format!(
        "bad --since {s:?}: expected an RFC 3339 UTC time or an age such as 10m"
    ))
}

fn log_dir(args: &Args) -> PathBuf {
    if let Some(d) = &args.logs {
        return d.clone();
    }
    if let Some(c) = &args.config {
        return SpaceLayout::for_config(c).log_dir;
    }
    let dir = args.space_dir.as_deref().unwrap_or(Path::new(""));
    for config in [dir.join(".mew/space.yaml"), dir.join("space.yaml")] {
        if config.is_file() {
            return SpaceLayout::for_config(&config).log_dir;
        }
    }
    if dir.join(".mew/logs").is_dir() {
        dir.join(".mew/logs")
    } else {
        dir.join("logs")
    }
}

/// Most ids whose kind is remembered for `delivered` records.
const MAX_KINDS: usize = 200_000;

struct Filter {
    participant: Option<String>,
    kind: Option<String>,
    event: Option<String>,
    since: Option<String>,
    kinds: HashMap<String, String>,
}

impl Filter {
    fn matches(&mut self, r: &Value) -> bool {
        let event = r["event"].as_str().unwrap_or("");
        let id = r["id"].as_str().or(r["envelope_id"].as_str()).unwrap_or("");
        let env_kind = r["envelope"]["kind"].as_str();
        if let Some(k) = env_kind
            && self.kind.is_some()
            && !id.is_empty()
            && self.kinds.len() < MAX_KINDS
        {
            self.kinds.insert(id.to_owned(), k.to_owned());
        }
        if let Some(e) = &self.event
            && e != event
        {
            return false;
        }
        if let Some(s) = &self.since
            && r["timestamp"].as_str().unwrap_or("") < s.as_str()
        {
            return false;
        }
        if let Some(p) = &self.participant {
            let about = r["participant"].as_str() == Some(p)
                || r["envelope"]["from"].as_str() == Some(p)
                || r["envelope"]["to"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|x| x.as_str() == Some(p)));
            if !about {
                return false;
            }
        }
        if let Some(k) = &self.kind {
            let kind = env_kind
                .or(r["required_capability"].as_str())
                .or_else(|| self.kinds.get(id).map(String::as_str));
            if kind != Some(k.as_str()) {
                return false;
            }
        }
        true
    }
}

/// One readable line per record.
fn human_line(r: &Value) -> String {
    let ts = r["timestamp"].as_str().unwrap_or("?");
    let event = r["event"].as_str().unwrap_or("?");
    let who = r["participant"].as_str().unwrap_or("?");
    match event {
        "capability_check" => format!(
            "{ts}  {event:<16} {who:<16} {} {}",
            r["result"].as_str().unwrap_or("?"),
            r["required_capability"].as_str().unwrap_or("?")
        ),
        "audit_dropped" => format!("{ts}  {event:<16} {} records lost", r["count"]),
        _ => {
            let env = &r["envelope"];
            let mut s = format!("{ts}  {event:<16} {who:<16}");
            if let Some(k) = env["kind"].as_str() {
                s.push_str(&format!(" {k}"));
                if let Some(to) = env["to"].as_array().filter(|t| !t.is_empty()) {
                    let to: Vec<&str> = to.iter().filter_map(Value::as_str).collect();
                    s.push_str(&format!(" -> {}", to.join(",")));
                }
                if let Some(m) = env["payload"]["method"].as_str() {
                    s.push_str(&format!(" {m}"));
                    if let Some(n) = env["payload"]["params"]["name"].as_str() {
                        s.push_str(&format!(" {n}"));
                    }
                }
            }
            if let Some(id) = r["id"].as_str() {
                s.push_str(&format!("  id={id}"));
            }
            if let Some(c) = env["correlation_id"].as_array().and_then(|c| c.first()) {
                s.push_str(&format!(" re={}", c.as_str().unwrap_or("?")));
            }
            if let Some(e) = r["metadata"]["error"].as_str() {
                s.push_str(&format!("  error={e}"));
            }
            if let Some(n) = r["metadata"]["suppressed"].as_u64() {
                s.push_str(&format!(" (+{n} more)"));
            }
            s
        }
    }
}

/// Runs `mew audit`.
pub fn run(args: Args) -> Result<(), Failure> {
    let since = args
        .since
        .as_deref()
        .map(|s| since_bound(s, mew_driver_common::clock::now()))
        .transpose()
        .map_err(|e| Failure::new(exit::USAGE, e))?;
    let dir = log_dir(&args);
    let file = if args.decisions {
        AuditFile::CapabilityDecisions
    } else {
        AuditFile::EnvelopeHistory
    };
    let files = rotated_files(&dir.join(file.file_name()));
    if files.is_empty() {
        return Err(Failure::new(
            exit::UNREADABLE,
            format!(
                "no {} in {} (give --logs or --config)",
                file.file_name(),
                dir.display()
            ),
        ));
    }
    let mut filter = Filter {
        participant: args.participant,
        kind: args.kind,
        event: args.event,
        since,
        kinds: HashMap::new(),
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for path in files {
        let f = std::fs::File::open(&path).map_err(|e| {
            Failure::new(
                exit::UNREADABLE,
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        for line in BufReader::new(f).lines() {
            let Ok(line) = line else { break };
            let Ok(r) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if !filter.matches(&r) {
                continue;
            }
            let text = if args.json { line } else { human_line(&r) };
            if writeln!(out, "{text}").is_err() {
                // A closed pipe (`| head`) ends the listing quietly.
                return Ok(());
            }
        }
    }
    let _ = out.flush();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_accepts_ages_and_times() {
        let now = Time::from_unix_millis(1_736_416_800_000);
        assert_eq!(since_bound("10m", now).unwrap(), "2025-01-09T09:50:00.000Z");
        assert_eq!(since_bound("1d", now).unwrap(), "2025-01-08T10:00:00.000Z");
        assert_eq!(
            since_bound("2025-01-09T10:00:00Z", now).unwrap(),
            "2025-01-09T10:00:00"
        );
        assert_eq!(
            since_bound("1h 30m", now).unwrap(),
            "2025-01-09T08:30:00.000Z"
        );
        assert_eq!(since_bound("90s", now).unwrap(), "2025-01-09T09:58:30.000Z");
        assert!(since_bound("soon", now).is_err());
        assert!(
            since_bound("5x", now)
                .unwrap_err()
                .contains("unknown time unit")
        );
        assert!(since_bound("10", now).is_err());
        // An age older than the epoch is the epoch, not an overflow.
        assert_eq!(
            since_bound("99999999999999d", now).unwrap(),
            "1970-01-01T00:00:00.000Z"
        );
    }
}
