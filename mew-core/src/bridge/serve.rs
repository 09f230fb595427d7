//! Requests from the space: answered from the catalog, forwarded to the server, or held
//! until the server is ready.

use super::{Bridge, Lifecycle};
use crate::mcp::{ListKind, McpError, Phase, RpcError};
use crate::participant::{CallId, ToolError};
use crate::time::Time;
use serde_json::{Map, Value};

/// A request held while the server (re)starts.
#[derive(Debug)]
pub(super) struct Waiting {
    pub(super) call: CallId,
    pub(super) method: String,
    pub(super) params: Option<Value>,
    pub(super) explicit: bool,
    pub(super) deadline: Time,
}

fn list_kind(method: &str) -> Option<ListKind> {
    ListKind::ALL.into_iter().find(|k| k.method() == method)
}

/// What a request names: the tool, resource or prompt it is about.
fn target<'a>(method: &str, params: Option<&'a Value>) -> Option<(ListKind, &'a str)> {
    let (kind, key) = match method {
        "tools/call" => (ListKind::Tools, "name"),
        "resources/read" => (ListKind::Resources, "uri"),
        "prompts/get" => (ListKind::Prompts, "name"),
        _ => return None,
    };
    params?.get(key)?.as_str().map(|v| (kind, v))
}

enum Plan {
    /// Answer now.
    Answer(Result<Value, RpcError>),
    /// Send to the server.
    Forward,
    /// Hold until the server is ready.
    Wait,
    /// A broadcast request meant for someone else.
    Decline,
}

impl Bridge {
    pub(super) fn on_request(
        &mut self,
        now: Time,
        call: CallId,
        method: &str,
        params: Option<Value>,
        explicit: bool,
    ) {
        match self.plan(method, params.as_ref(), explicit) {
            Plan::Answer(result) => self.answer(now, call, result),
            Plan::Decline => {
                let _ = self.participant.decline_call(call);
            }
            Plan::Forward => self.forward(now, call, method, params),
            Plan::Wait if self.waiting.len() >= self.config.max_waiting => self.answer(
                now,
                call,
                Err(McpError::TooManyCalls(self.config.max_waiting).to_rpc_error()),
            ),
            Plan::Wait => self.waiting.push_back(Waiting {
                call,
                method: method.to_owned(),
                params,
                explicit,
                deadline: now + self.config.call_timeout,
            }),
        }
    }

    fn plan(&self, method: &str, params: Option<&Value>, explicit: bool) -> Plan {
        if self.lifecycle != Lifecycle::Running {
            return Plan::Answer(Err(McpError::Shutdown.to_rpc_error()));
        }
        let phase = self.mcp.phase();
        match phase {
            Phase::Ready => {}
            // Calls may go out while the initial lists are still running; lists wait.
            Phase::Listing if list_kind(method).is_none() => {}
            Phase::Idle
            | Phase::Spawning
            | Phase::Initializing
            | Phase::Listing
            | Phase::Stopping
            | Phase::Backoff => {
                // Waiting would not help: a person must sign in first.
                return match self.sign_in_error() {
                    Some(e) => Plan::Answer(Err(e.to_rpc_error())),
                    None => Plan::Wait,
                };
            }
            Phase::GaveUp | Phase::Stopped => {
                return Plan::Answer(Err(McpError::NotReady.to_rpc_error()));
            }
        }
        let offers = |kind: ListKind| {
            self.mcp
                .server()
                .is_some_and(|d| d.capabilities.contains_key(kind.field()))
        };
        if let Some(kind) = list_kind(method) {
            // What the server does not offer, it answers itself (typically "method not
            // found"), so the requester sees the server's own error.
            return if offers(kind) {
                Plan::Answer(Ok(self.listing(kind)))
            } else if explicit {
                Plan::Forward
            } else {
                Plan::Decline
            };
        }
        if explicit {
            return Plan::Forward;
        }
        // A broadcast request is ours only if it names something this server offers.
        let catalog = self.mcp.catalog();
        let known = match target(method, params) {
            Some((ListKind::Tools, name)) => catalog.tool(name).is_some(),
            Some((ListKind::Resources, uri)) => catalog.resources.iter().any(|r| r.uri == uri),
            Some((ListKind::Prompts, name)) => catalog.prompts.iter().any(|p| p.name == name),
            None => false,
        };
        if known { Plan::Forward } else { Plan::Decline }
    }

    /// The `*/list` result for `kind`, with the server's definitions as listed.
    fn listing(&self, kind: ListKind) -> Value {
        let c = self.mcp.catalog();
        let items: Vec<Value> = match kind {
            ListKind::Tools => c.tools.iter().map(|t| object(&t.definition)).collect(),
            ListKind::Resources => c.resources.iter().map(|r| object(&r.definition)).collect(),
            ListKind::Prompts => c.prompts.iter().map(|p| object(&p.definition)).collect(),
        };
        let mut m = Map::new();
        m.insert(kind.field().to_owned(), Value::Array(items));
        Value::Object(m)
    }

    fn forward(&mut self, now: Time, call: CallId, method: &str, params: Option<Value>) {
        let params = self.with_progress_token(call, params);
        match self.mcp.call(now, method, params, self.config.call_timeout) {
            Ok(id) => {
                self.calls.insert(id, call);
            }
            Err(e) => self.answer(now, call, Err(e.to_rpc_error())),
        }
    }

    /// Sends the response for `call`, the JSON-RPC error unchanged.
    pub(super) fn answer(&mut self, now: Time, call: CallId, result: Result<Value, RpcError>) {
        let result = result.map_err(|e| ToolError {
            code: e.code,
            message: e.message,
            data: e.data,
        });
        // The participant may have dropped the call already (a restart control); nothing
        // is owed then.
        let _ = self.participant.complete_call(now, call, result);
    }

    /// Sends the held requests the server can take now.
    pub(super) fn release_waiting(&mut self, now: Time) {
        let held = std::mem::take(&mut self.waiting);
        for w in held {
            match self.plan(&w.method, w.params.as_ref(), w.explicit) {
                Plan::Answer(r) => self.answer(now, w.call, r),
                Plan::Forward => self.forward(now, w.call, &w.method, w.params),
                Plan::Decline => {
                    let _ = self.participant.decline_call(w.call);
                }
                Plan::Wait => self.waiting.push_back(w),
            }
        }
    }

    pub(super) fn expire_waiting(&mut self, now: Time) {
        while self.waiting.front().is_some_and(|w| w.deadline <= now) {
            let w = self.waiting.pop_front().expect("checked above");
            let err = McpError::Timeout(self.config.call_timeout).to_rpc_error();
            self.answer(now, w.call, Err(err));
        }
    }

    pub(super) fn fail_waiting(&mut self, now: Time, reason: &McpError) {
        let err = match reason {
            McpError::Shutdown => reason.to_rpc_error(),
            other => {
                let mut e = McpError::NotReady.to_rpc_error();
                e.message = format!("{}: {other}", e.message);
                e
            }
        };
        for w in std::mem::take(&mut self.waiting) {
            self.answer(now, w.call, Err(err.clone()));
        }
    }
}

fn object(m: &Map<String, Value>) -> Value {
    Value::Object(m.clone())
}
