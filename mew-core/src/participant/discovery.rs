//! Discovery of other participants' tools: per-participant state, staggered start,
//! retries with backoff, TTL refresh, and `participant/tool` naming.

use super::Participant;
use super::error::METHOD_NOT_FOUND;
use super::error::{CommandError, RequestError};
use super::event::{DiscoveryState, Event, RequestId};
use super::requests::{Purpose, RequestOptions};
use crate::capability::Precheck;
use crate::envelope::Envelope;
use crate::time::Time;
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};

/// A tool another participant offers.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    /// Name at its owner.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// Input schema.
    pub input_schema: Option<Value>,
    /// MCP annotations (`readOnlyHint`, `destructiveHint`, ...), as listed.
    pub annotations: Option<Value>,
}

/// Discovery status of one participant.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscoveryStatus {
    /// State.
    pub state: DiscoveryState,
    /// Attempts of the current round.
    pub attempts: u32,
    /// Start of the latest attempt.
    pub last_attempt: Option<Time>,
    /// Tools from the latest success (kept while refreshing).
    pub tools: Vec<ToolInfo>,
    /// Time of the latest success.
    pub fetched_at: Option<Time>,
}

/// A discovered tool under its `participant/tool` name.
#[derive(Debug, Clone, PartialEq)]
pub struct AvailableTool {
    /// `participant/tool`.
    pub name: String,
    /// Owner.
    pub participant: String,
    /// The tool.
    pub tool: ToolInfo,
}

#[derive(Debug)]
struct Entry {
    status: DiscoveryStatus,
    next_at: Option<Time>,
    request: Option<RequestId>,
}

#[derive(Debug, Default)]
pub(super) struct Discovery {
    entries: BTreeMap<String, Entry>,
    next_slot: Time,
    was_pending: bool,
    /// Others' `tools/list` requests seen: (envelope id, the participant asked), oldest
    /// first, at most [`MAX_OVERHEARD`].
    overheard: VecDeque<(String, String)>,
}

/// Others' `tools/list` requests remembered while their answers are awaited.
const MAX_OVERHEARD: usize = 64;

impl Discovery {
    pub(super) fn next_action(&self) -> Option<Time> {
        self.entries.values().filter_map(|e| e.next_at).min()
    }

    fn pending(&self) -> usize {
        self.entries
            .values()
            .filter(|e| {
                matches!(
                    e.status.state,
                    DiscoveryState::NotStarted | DiscoveryState::InProgress
                )
            })
            .count()
    }
}

fn parse_tools(v: &Value) -> Option<Vec<ToolInfo>> {
    let list = v.get("tools")?.as_array()?;
    Some(
        list.iter()
            .filter_map(|t| {
                Some(ToolInfo {
                    name: t.get("name")?.as_str()?.to_owned(),
                    description: t
                        .get("description")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    input_schema: t.get("inputSchema").cloned(),
                    annotations: t.get("annotations").cloned(),
                })
            })
            .collect(),
    )
}

impl Participant {
    fn is_tool_candidate(&self, id: &str) -> bool {
        self.others
            .get(id)
            .is_some_and(|c| c.precheck("mcp/response") != Precheck::Denied)
    }

    /// Participants whose discovery has not settled.
    pub fn discoveries_pending(&self) -> usize {
        self.discovery.pending()
    }

    /// Discovery status of one participant.
    pub fn discovery_status(&self, participant: &str) -> Option<&DiscoveryStatus> {
        self.discovery.entries.get(participant).map(|e| &e.status)
    }

    /// Discovery status of every tracked participant.
    pub fn discovery_statuses(&self) -> impl Iterator<Item = (&str, &DiscoveryStatus)> {
        self.discovery
            .entries
            .iter()
            .map(|(k, e)| (k.as_str(), &e.status))
    }

    /// Every discovered tool, named `participant/tool`.
    pub fn available_tools(&self) -> Vec<AvailableTool> {
        self.discovery
            .entries
            .iter()
            .flat_map(|(p, e)| {
                e.status.tools.iter().map(move |t| AvailableTool {
                    name: format!("{p}/{}", t.name),
                    participant: p.clone(),
                    tool: t.clone(),
                })
            })
            .collect()
    }

    /// Calls a discovered tool by its `participant/tool` name (smart routing applies).
    pub fn call_tool(
        &mut self,
        now: Time,
        name: &str,
        arguments: Value,
        opts: RequestOptions,
    ) -> Result<RequestId, RequestError> {
        let known = name.split_once('/').filter(|(p, t)| {
            self.discovery
                .entries
                .get(*p)
                .is_some_and(|e| e.status.tools.iter().any(|x| x.name == *t))
        });
        let Some((p, t)) = known else {
            return Err(RequestError::UnknownTool(name.to_owned()));
        };
        let payload =
            json!({"method": "tools/call", "params": {"name": t, "arguments": arguments}});
        self.mcp_request(now, vec![p.to_owned()], payload, opts)
    }

    /// Starts (or restarts) discovery of one participant now.
    pub fn discover_tools(&mut self, now: Time, participant: &str) -> Result<(), CommandError> {
        if !self.others.contains(participant) {
            return Err(CommandError::Unknown {
                what: "participant",
                id: participant.to_owned(),
            });
        }
        let e = self
            .discovery
            .entries
            .entry(participant.to_owned())
            .or_insert(Entry {
                status: DiscoveryStatus {
                    state: DiscoveryState::NotStarted,
                    attempts: 0,
                    last_attempt: None,
                    tools: Vec::new(),
                    fetched_at: None,
                },
                next_at: None,
                request: None,
            });
        if e.request.is_none() {
            e.status.attempts = 0;
            e.next_at = Some(now);
        }
        self.discovery_check_settled();
        Ok(())
    }

    pub(super) fn discovery_schedule_all(&mut self, now: Time) {
        let ids: Vec<String> = self.others.iter().map(|(id, _)| id.to_owned()).collect();
        for id in ids {
            self.discovery_schedule(now, &id);
        }
    }

    pub(super) fn discovery_schedule(&mut self, now: Time, id: &str) {
        if !self.config.discovery.auto
            || self.discovery.entries.contains_key(id)
            || !self.is_tool_candidate(id)
        {
            return;
        }
        let at = self.discovery.next_slot.max(now);
        self.discovery.next_slot = at + self.config.discovery.stagger;
        self.discovery.entries.insert(
            id.to_owned(),
            Entry {
                status: DiscoveryStatus {
                    state: DiscoveryState::NotStarted,
                    attempts: 0,
                    last_attempt: None,
                    tools: Vec::new(),
                    fetched_at: None,
                },
                next_at: Some(at),
                request: None,
            },
        );
        self.set_discovery_state(id, DiscoveryState::NotStarted);
    }

    pub(super) fn discovery_forget(&mut self, id: &str) {
        if self.discovery.entries.remove(id).is_some() {
            self.discovery_check_settled();
        }
    }

    pub(super) fn discovery_connection_lost(&mut self, _now: Time) {
        // In-flight `tools/list` requests were failed with the other direct requests and
        // are retried by `discovery_result`.
    }

    fn set_discovery_state(&mut self, id: &str, state: DiscoveryState) {
        if let Some(e) = self.discovery.entries.get_mut(id) {
            let changed = e.status.state != state;
            e.status.state = state;
            if changed || state == DiscoveryState::NotStarted {
                self.client.emit(Event::Discovery {
                    participant: id.to_owned(),
                    state,
                });
            }
        }
        self.discovery_check_settled();
    }

    fn discovery_check_settled(&mut self) {
        let pending = self.discovery.pending() > 0;
        if self.discovery.was_pending && !pending {
            self.client.emit(Event::DiscoverySettled);
        }
        self.discovery.was_pending = pending;
    }

    pub(super) fn discovery_timeout(&mut self, now: Time) {
        let due: Vec<String> = self
            .discovery
            .entries
            .iter()
            .filter(|(_, e)| e.next_at.is_some_and(|t| t <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for id in due {
            self.discovery_attempt(now, &id);
        }
    }

    fn discovery_attempt(&mut self, now: Time, id: &str) {
        let Some(e) = self.discovery.entries.get_mut(id) else {
            return;
        };
        e.next_at = None;
        e.status.attempts += 1;
        e.status.last_attempt = Some(now);
        let refreshing = e.status.state == DiscoveryState::Completed;
        let list = json!({"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": {}});
        if self.caps_known && !self.can_send(&crate::envelope::Kind::McpRequest, Some(&list)) {
            // Discovery needs a direct request: a participant that may only propose cannot
            // list tools (proposing a `tools/list` would ask a person to approve reading a
            // catalogue). Spaces grant `mcp/request` for `tools/list` alone to such agents;
            // without it the tools come from others' listings it sees (`overhear`).
            if let Some(e) = self.discovery.entries.get_mut(id) {
                e.status.attempts = 0;
            }
            self.set_discovery_state(id, DiscoveryState::Failed);
            return;
        }
        let sent = self.start_request(
            now,
            vec![id.to_owned()],
            json!({"method": "tools/list", "params": {}}),
            RequestOptions {
                timeout: Some(self.config.discovery.timeout),
                prefer_proposal: false,
            },
            Purpose::Discovery(id.to_owned()),
            None,
        );
        match sent {
            Ok(req) => {
                if let Some(e) = self.discovery.entries.get_mut(id) {
                    e.request = Some(req);
                }
                if !refreshing {
                    self.set_discovery_state(id, DiscoveryState::InProgress);
                }
            }
            Err(err) => self.discovery_result(now, id, Err(err)),
        }
    }

    /// Remembers another participant's `tools/list` request: a participant that may only
    /// propose cannot list tools itself, but under unified delivery it sees others do it.
    pub(super) fn discovery_overhear_request(&mut self, env: &Envelope) {
        if !self.config.discovery.auto || env.from == self.me() {
            return;
        }
        let listing = env
            .payload
            .as_ref()
            .and_then(|p| p.get("method"))
            .is_some_and(|m| m == "tools/list");
        let target = match env.to.as_deref() {
            Some([one]) => one.clone(),
            _ => return,
        };
        if !listing || !self.discovery.entries.contains_key(&target) {
            return;
        }
        let d = &mut self.discovery;
        if d.overheard.len() == MAX_OVERHEARD {
            d.overheard.pop_front();
        }
        d.overheard.push_back((env.id.clone(), target));
    }

    /// Takes the tools of an answer to a `tools/list` request overheard, when this
    /// participant is not asking the same participant itself.
    pub(super) fn discovery_overhear_response(
        &mut self,
        now: Time,
        correlation: &str,
        env: &Envelope,
    ) {
        let Some(pos) = self
            .discovery
            .overheard
            .iter()
            .position(|(id, target)| id == correlation && *target == env.from)
        else {
            return;
        };
        self.discovery.overheard.remove(pos);
        let Some(result) = env.payload.as_ref().and_then(|p| p.get("result")) else {
            return;
        };
        if parse_tools(result).is_none() {
            return;
        }
        let idle = self
            .discovery
            .entries
            .get(&env.from)
            .is_some_and(|e| e.request.is_none());
        if idle {
            self.discovery_result(now, &env.from.clone(), Ok(result.clone()));
        }
    }

    pub(super) fn discovery_result(
        &mut self,
        now: Time,
        id: &str,
        result: Result<Value, RequestError>,
    ) {
        let max = self.config.discovery.max_attempts;
        let (retry_base, ttl) = (self.config.discovery.retry_base, self.config.discovery.ttl);
        let Some(e) = self.discovery.entries.get_mut(id) else {
            return;
        };
        e.request = None;
        let state = match result.map(|v| parse_tools(&v)) {
            Ok(Some(tools)) => {
                e.status.attempts = 0;
                e.status.fetched_at = Some(now);
                e.next_at = Some(now + ttl);
                let none = tools.is_empty();
                e.status.tools = tools;
                if none {
                    DiscoveryState::NoTools
                } else {
                    DiscoveryState::Completed
                }
            }
            Err(RequestError::Rpc { code, .. }) if code == METHOD_NOT_FOUND => {
                e.status.tools.clear();
                e.next_at = None;
                DiscoveryState::NoTools
            }
            Ok(None) | Err(_) => {
                if e.status.attempts < max {
                    e.next_at = Some(now + retry_base.saturating_mul(e.status.attempts));
                    if e.status.state == DiscoveryState::Completed {
                        DiscoveryState::Completed
                    } else {
                        DiscoveryState::InProgress
                    }
                } else {
                    e.next_at = None;
                    e.status.attempts = 0;
                    DiscoveryState::Failed
                }
            }
        };
        self.set_discovery_state(id, state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_lists_parse_leniently() {
        let tools = parse_tools(&json!({"tools": [
            {"name": "add", "description": "sum", "inputSchema": {"type": "object"}},
            {"description": "nameless is skipped"},
            {"name": "bare"}
        ]}))
        .unwrap();
        assert_eq!(tools.len(), 2);
        assert_eq!(tools[0].description.as_deref(), Some("sum"));
        assert_eq!(tools[1].input_schema, None);
        assert_eq!(parse_tools(&json!({"tools": "x"})), None);
        assert_eq!(parse_tools(&json!([])), None);
    }
}
