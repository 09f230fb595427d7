//! Progressive automation (spec 9.4), sans-IO: from a space's history of human decisions on
//! proposals, suggest the narrowest capability grants that would have let the proposer act
//! directly, with the evidence.
//!
//! [`decisions`] reads the audit log's lines (`envelope-history.jsonl`: each `received`
//! record holds its envelope) or plain envelopes (what a participant observed), pairing each
//! `mcp/proposal` with its outcome: fulfilled (an `mcp/request` whose `correlation_id` names
//! it) or rejected (`mcp/reject`). [`suggest`] groups the approved proposals by proposer,
//! addressee, method and tool; a group approved at least `min_approvals` times with no
//! rejection of the same group gets a suggestion. Each argument is kept exact when every
//! approval used the same value, becomes a glob when all values share a prefix (`src/*`),
//! and is left free otherwise; if such a capability would allow a rejected proposal of the
//! same proposer and tool, the free and glob arguments are made exact, and if that still
//! allows one, nothing is suggested. Every suggestion is checked with the capability module:
//! it matches every approved proposal of its group and no rejected one, and when the
//! approvers' capabilities are given, one of them can delegate it (`covers`).

use crate::capability::{Capability, CapabilitySet};
use crate::participant::{grant_envelope, grant_payload};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// What happened to a proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Fulfilled by this participant, at this time.
    Approved {
        /// The fulfiller.
        by: String,
        /// `ts` of the fulfilling request.
        at: String,
    },
    /// Rejected by this participant.
    Rejected {
        /// The rejecter.
        by: String,
        /// `ts` of the rejection.
        at: String,
    },
}

/// One proposal and its outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The proposal's id.
    pub id: String,
    /// Who proposed.
    pub proposer: String,
    /// Its addressees.
    pub to: Vec<String>,
    /// The proposed `mcp/request` payload (`method`, `params`).
    pub payload: Value,
    /// What became of it.
    pub outcome: Outcome,
}

impl Decision {
    fn method(&self) -> &str {
        self.payload["method"].as_str().unwrap_or_default()
    }

    fn tool(&self) -> Option<&str> {
        self.payload["params"]["name"].as_str()
    }

    fn arguments(&self) -> Option<&Map<String, Value>> {
        self.payload["params"]["arguments"].as_object()
    }
}

/// The proposals of a history that were decided, in the order they were made. `lines` are
/// audit records (`{"event":"received","envelope":{...}}`) or bare envelopes; other lines
/// are skipped.
pub fn decisions<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<Decision> {
    let mut proposals: Vec<(String, String, Vec<String>, Value)> = Vec::new();
    let mut outcomes: BTreeMap<String, Outcome> = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    for line in lines {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let env = match v.get("event").and_then(Value::as_str) {
            Some("received") => v.get("envelope").cloned().unwrap_or(Value::Null),
            Some(_) => continue,
            None => v,
        };
        let Some(id) = env["id"].as_str() else {
            continue;
        };
        // A history may show one envelope more than once (several logs, rotations).
        if !seen.insert(id.to_owned()) {
            continue;
        }
        let from = env["from"].as_str().unwrap_or_default().to_owned();
        let at = env["ts"].as_str().unwrap_or_default().to_owned();
        let first_correlation = env["correlation_id"]
            .as_array()
            .and_then(|a| a.first())
            .or(env.get("correlation_id"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        match env["kind"].as_str() {
            Some("mcp/proposal") => {
                let to = env["to"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                proposals.push((id.to_owned(), from, to, env["payload"].clone()));
            }
            Some("mcp/request") => {
                if let Some(p) = first_correlation {
                    outcomes
                        .entry(p)
                        .or_insert(Outcome::Approved { by: from, at });
                }
            }
            Some("mcp/reject") => {
                if let Some(p) = first_correlation {
                    outcomes
                        .entry(p)
                        .or_insert(Outcome::Rejected { by: from, at });
                }
            }
            _ => {}
        }
    }
    proposals
        .into_iter()
        .filter_map(|(id, proposer, to, payload)| {
            let outcome = outcomes.remove(&id)?;
            Some(Decision {
                id,
                proposer,
                to,
                payload,
                outcome,
            })
        })
        .collect()
}

/// A suggested grant, with its evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct Suggestion {
    /// Who would receive it.
    pub recipient: String,
    /// The capability (an `mcp/request` pattern).
    pub capability: Value,
    /// The proposals it is drawn from.
    pub approved: Vec<String>,
    /// Who approved them.
    pub approvers: Vec<String>,
    /// First and last approval times.
    pub first: String,
    /// Last approval time.
    pub last: String,
    /// Rejected proposals of the same proposer and tool it was checked against.
    pub rejected_checked: usize,
}

impl Suggestion {
    /// The `capability/grant` payload that would carry it out.
    pub fn grant_payload(&self) -> Value {
        grant_payload(
            &self.recipient,
            vec![self.capability.clone()],
            &self.reason(),
        )
    }

    /// The whole `capability/grant` envelope (`kind`, `to`, `payload`) that would carry it out.
    pub fn grant_envelope(&self) -> Value {
        grant_envelope(
            &self.recipient,
            vec![self.capability.clone()],
            &self.reason(),
        )
    }

    fn reason(&self) -> String {
        format!(
            "approved {} times by {}",
            self.approved.len(),
            self.approvers.join(", ")
        )
    }
}

/// The narrowest capability that allows exactly one proposed call: its method, and its
/// `params` (tool name and argument values) as they were proposed. This is the grant of
/// "always allow" in a review dialog (the terminal interface and the web page give the same).
pub fn narrowest(payload: &Value) -> Value {
    let mut p = json!({"method": payload["method"]});
    if let Some(params) = payload.get("params").filter(|p| p.is_object()) {
        p["params"] = params.clone();
    }
    json!({"kind": "mcp/request", "payload": p})
}

/// A glob for string values sharing a prefix (`src/a.rs`, `src/b.rs` give `src/*`); `None`
/// when they share none, or a value holds a glob character (it could not be matched
/// literally by a prefix pattern).
fn prefix_glob(values: &[&Value]) -> Option<Value> {
    let strings: Vec<&str> = values.iter().map(|v| v.as_str()).collect::<Option<_>>()?;
    let first = strings.first()?;
    let mut len = first.len();
    for s in &strings[1..] {
        len = len.min(
            first
                .bytes()
                .zip(s.bytes())
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    while !first.is_char_boundary(len) {
        len -= 1;
    }
    let prefix = &first[..len];
    // A prefix with glob syntax, or one that reads as a negation, cannot be extended safely.
    if prefix.is_empty() || prefix.contains(['*', '?', '{', '}']) || prefix.starts_with('!') {
        return None;
    }
    // `*` stops at `/`; `**` crosses it.
    let deep = strings.iter().any(|s| s[len..].contains('/'));
    Some(json!(format!("{prefix}{}", if deep { "**" } else { "*" })))
}

/// The capability for a group, with each argument exact, a prefix glob, or free (`None`).
fn capability(method: &str, tool: Option<&str>, args: &BTreeMap<String, Option<Value>>) -> Value {
    let mut params = Map::new();
    if let Some(t) = tool {
        params.insert("name".into(), json!(t));
    }
    let constrained: Map<String, Value> = args
        .iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
        .collect();
    if !constrained.is_empty() {
        params.insert("arguments".into(), Value::Object(constrained));
    }
    let mut payload = json!({"method": method});
    if !params.is_empty() {
        payload["params"] = Value::Object(params);
    }
    json!({"kind": "mcp/request", "payload": payload})
}

fn allows(cap: &Value, d: &Decision) -> bool {
    Capability::compile(cap.clone()).is_ok_and(|c| c.matches("mcp/request", Some(&d.payload)))
}

/// Suggestions for a history, strongest evidence first. `approver_caps` gives the
/// capabilities of approvers (by id) when known: a suggestion must then be one an approver
/// could grant.
pub fn suggest(
    decisions: &[Decision],
    min_approvals: usize,
    approver_caps: &BTreeMap<String, CapabilitySet>,
) -> Vec<Suggestion> {
    type Key<'a> = (&'a str, &'a [String], &'a str, Option<&'a str>);
    let mut groups: BTreeMap<Key<'_>, Vec<&Decision>> = BTreeMap::new();
    for d in decisions {
        groups
            .entry((d.proposer.as_str(), d.to.as_slice(), d.method(), d.tool()))
            .or_default()
            .push(d);
    }
    let mut out = Vec::new();
    for ((proposer, _, method, tool), members) in &groups {
        let approved: Vec<&Decision> = members
            .iter()
            .copied()
            .filter(|d| matches!(d.outcome, Outcome::Approved { .. }))
            .collect();
        let rejected_same: usize = members.len() - approved.len();
        if approved.len() < min_approvals.max(1) || rejected_same > 0 {
            continue;
        }
        // Rejections of the same proposer and tool, to any addressee: never allowed.
        let rejected: Vec<&Decision> = decisions
            .iter()
            .filter(|d| {
                d.proposer == *proposer
                    && d.method() == *method
                    && d.tool() == *tool
                    && matches!(d.outcome, Outcome::Rejected { .. })
            })
            .collect();
        let keys: std::collections::BTreeSet<&String> = approved
            .iter()
            .filter_map(|d| d.arguments())
            .flat_map(|a| a.keys())
            .collect();
        let values = |k: &str| -> Vec<&Value> {
            approved
                .iter()
                .map(|d| d.arguments().and_then(|a| a.get(k)).unwrap_or(&Value::Null))
                .collect()
        };
        let loose: BTreeMap<String, Option<Value>> = keys
            .iter()
            .map(|k| {
                let vs = values(k);
                let v = if vs.iter().all(|v| *v == vs[0]) && !vs[0].is_null() {
                    Some(vs[0].clone())
                } else {
                    prefix_glob(&vs)
                };
                ((*k).clone(), v)
            })
            .collect();
        let mut cap = capability(method, *tool, &loose);
        if rejected.iter().any(|d| allows(&cap, d)) {
            // Narrow to the values actually approved, where they were all one value; a
            // group that varied where a rejection differs gets no suggestion.
            let exact: BTreeMap<String, Option<Value>> = keys
                .iter()
                .map(|k| {
                    let vs = values(k);
                    let v = (vs.iter().all(|v| *v == vs[0])).then(|| vs[0].clone());
                    ((*k).clone(), v)
                })
                .collect();
            cap = capability(method, *tool, &exact);
            if rejected.iter().any(|d| allows(&cap, d)) {
                continue;
            }
        }
        // Proved, not assumed: every approval allowed, every rejection refused.
        if !approved.iter().all(|d| allows(&cap, d)) {
            continue;
        }
        let mut approvers: Vec<String> = approved
            .iter()
            .filter_map(|d| match &d.outcome {
                Outcome::Approved { by, .. } => Some(by.clone()),
                Outcome::Rejected { .. } => None,
            })
            .collect();
        approvers.sort();
        approvers.dedup();
        if !approver_caps.is_empty() {
            let Ok(compiled) = Capability::compile(cap.clone()) else {
                continue;
            };
            let grantable = approvers
                .iter()
                .any(|a| approver_caps.get(a).is_some_and(|c| c.covers(&compiled)));
            if !grantable {
                continue;
            }
        }
        let times: Vec<&str> = approved
            .iter()
            .filter_map(|d| match &d.outcome {
                Outcome::Approved { at, .. } => Some(at.as_str()),
                Outcome::Rejected { .. } => None,
            })
            .collect();
        out.push(Suggestion {
            recipient: (*proposer).to_owned(),
            capability: cap,
            approved: approved.iter().map(|d| d.id.clone()).collect(),
            approvers,
            first: times.iter().min().copied().unwrap_or_default().to_owned(),
            last: times.iter().max().copied().unwrap_or_default().to_owned(),
            rejected_checked: rejected.len(),
        });
    }
    out.sort_by_key(|s| std::cmp::Reverse(s.approved.len()));
    out
}

#[cfg(test)]
mod tests;
