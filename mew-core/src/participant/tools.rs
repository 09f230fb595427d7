//! Own tools and resources: registry, serving `tools/*` and `resources/*` requests
//! addressed to us, argument validation, and completion of calls by the application.

use super::Participant;
use super::error::{
    CommandError, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, ToolError,
};
use super::event::{CallId, Event};
use crate::envelope::{Envelope, Kind};
use crate::schema::Schema;
use crate::time::Time;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call-{}", self.0)
    }
}

/// A tool this participant offers.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Name (unique per participant).
    pub name: String,
    /// Description shown in `tools/list`.
    pub description: Option<String>,
    /// JSON Schema of the arguments (see [`Schema`] for the subset checked).
    pub input_schema: Option<Value>,
}

/// A resource this participant offers.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceSpec {
    /// URI (unique per participant).
    pub uri: String,
    /// Name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// MIME type.
    pub mime_type: Option<String>,
}

#[derive(Debug)]
struct PendingCall {
    requester: String,
    request_id: String,
    rpc_id: Value,
    /// `Some(uri)` for a resource read.
    resource: Option<String>,
    /// A forwarded request: the application's result is the JSON-RPC `result` as is.
    raw: bool,
}

#[derive(Debug, Default)]
pub(super) struct Tools {
    tools: BTreeMap<String, (ToolSpec, Option<Schema>)>,
    resources: BTreeMap<String, ResourceSpec>,
    calls: BTreeMap<CallId, PendingCall>,
    next_call: u64,
    /// Methods handed to the application as [`Event::Forwarded`] instead of being served here.
    forwarded: BTreeSet<String>,
}

impl Tools {
    fn list(&self) -> Value {
        let tools: Vec<Value> = self
            .tools
            .values()
            .map(|(t, _)| {
                let mut v = json!({
                    "name": t.name,
                    "inputSchema": t.input_schema.clone().unwrap_or_else(|| json!({"type": "object"})),
                });
                if let Some(d) = &t.description {
                    v["description"] = json!(d);
                }
                v
            })
            .collect();
        json!({ "tools": tools })
    }

    fn resource_list(&self) -> Value {
        let list: Vec<Value> = self
            .resources
            .values()
            .map(|r| {
                let mut v = json!({"uri": r.uri, "name": r.name});
                if let Some(d) = &r.description {
                    v["description"] = json!(d);
                }
                if let Some(m) = &r.mime_type {
                    v["mimeType"] = json!(m);
                }
                v
            })
            .collect();
        json!({ "resources": list })
    }
}

fn rpc_error(code: i64, message: impl Into<String>, data: Option<Value>) -> ToolError {
    ToolError {
        code,
        message: message.into(),
        data,
    }
}

impl Participant {
    /// Registers (or replaces) a tool; its schema is compiled now.
    pub fn register_tool(&mut self, spec: ToolSpec) -> Result<(), CommandError> {
        let schema = match &spec.input_schema {
            Some(s) => Some(
                Schema::compile(s).map_err(|reason| CommandError::InvalidTool {
                    name: spec.name.clone(),
                    reason,
                })?,
            ),
            None => None,
        };
        if spec.name.is_empty() {
            return Err(CommandError::InvalidTool {
                name: spec.name,
                reason: "empty name".into(),
            });
        }
        self.tools.tools.insert(spec.name.clone(), (spec, schema));
        Ok(())
    }

    /// Removes a tool; whether it existed.
    pub fn unregister_tool(&mut self, name: &str) -> bool {
        self.tools.tools.remove(name).is_some()
    }

    /// Registers (or replaces) a resource.
    pub fn register_resource(&mut self, spec: ResourceSpec) {
        self.tools.resources.insert(spec.uri.clone(), spec);
    }

    /// Hands `mcp/request`s for `method` (addressed to us, or to everyone) to the application
    /// as [`Event::Forwarded`] instead of serving them from the registry; the application
    /// answers with [`complete_call`](Self::complete_call) (the value is sent as the JSON-RPC
    /// `result` unchanged) or [`decline_call`](Self::decline_call). This is how a participant
    /// fronts another server, e.g. an MCP bridge.
    pub fn forward_method(&mut self, method: impl Into<String>) {
        self.tools.forwarded.insert(method.into());
    }

    /// Stops forwarding `method`; whether it was forwarded.
    pub fn unforward_method(&mut self, method: &str) -> bool {
        self.tools.forwarded.remove(method)
    }

    /// Drops a forwarded request without answering (a broadcast request meant for someone
    /// else).
    pub fn decline_call(&mut self, call: CallId) -> Result<(), CommandError> {
        match self.tools.calls.remove(&call) {
            Some(_) => Ok(()),
            None => Err(CommandError::Unknown {
                what: "call",
                id: call.to_string(),
            }),
        }
    }

    /// Who made a pending call and the id of its request envelope: what a question about
    /// the call (an MCP server's elicitation, its progress) is addressed and correlated to.
    pub fn call_origin(&self, call: CallId) -> Option<(&str, &str)> {
        self.tools
            .calls
            .get(&call)
            .map(|p| (p.requester.as_str(), p.request_id.as_str()))
    }

    /// Our registered tools.
    pub fn tools(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools.tools.values().map(|(t, _)| t)
    }

    /// Calls handed to the application and not yet completed.
    pub fn pending_calls(&self) -> impl Iterator<Item = CallId> + '_ {
        self.tools.calls.keys().copied()
    }

    /// Completes a [`Event::ToolCall`] or [`Event::ResourceRead`]: sends the `mcp/response`.
    ///
    /// A tool result that is an object with `content` is sent as is; anything else is
    /// wrapped as one text content item. A resource result with `contents` is sent as is;
    /// anything else becomes one text entry for the URI.
    pub fn complete_call(
        &mut self,
        now: Time,
        call: CallId,
        result: Result<Value, ToolError>,
    ) -> Result<(), CommandError> {
        let Some(p) = self.tools.calls.remove(&call) else {
            return Err(CommandError::Unknown {
                what: "call",
                id: call.to_string(),
            });
        };
        let result = result.map(|v| match &p.resource {
            _ if p.raw => v,
            None if v.get("content").is_some() => v,
            None => json!({"content": [{"type": "text", "text": as_text(&v)}]}),
            Some(_) if v.get("contents").is_some() => v,
            Some(uri) => json!({"contents": [{"uri": uri, "text": as_text(&v)}]}),
        });
        self.respond(now, &p.requester, &p.request_id, p.rpc_id, result);
        Ok(())
    }

    /// Alias of [`complete_call`](Self::complete_call) for tool calls.
    pub fn complete_tool_call(
        &mut self,
        now: Time,
        call: CallId,
        result: Result<Value, ToolError>,
    ) -> Result<(), CommandError> {
        self.complete_call(now, call, result)
    }

    fn respond(
        &mut self,
        now: Time,
        to: &str,
        request_id: &str,
        rpc_id: Value,
        result: Result<Value, ToolError>,
    ) {
        let payload = match result {
            Ok(r) => json!({"jsonrpc": "2.0", "id": rpc_id, "result": r}),
            Err(e) => {
                let mut err = json!({"code": e.code, "message": e.message});
                if let Some(d) = e.data {
                    err["data"] = d;
                }
                json!({"jsonrpc": "2.0", "id": rpc_id, "error": err})
            }
        };
        let env = self.build(
            now,
            Kind::McpResponse,
            vec![to.to_owned()],
            vec![request_id.to_owned()],
            None,
            Some(payload),
        );
        self.send_internal(env);
    }

    /// Serves an `mcp/request` when `to` is empty or names us (wire-compat.md).
    pub(super) fn serve(&mut self, now: Time, env: &Envelope) {
        let me = self.me();
        if me.is_empty() || env.from == me || !env.is_for(me) {
            return;
        }
        let explicit = self.addressed_to_me(env);
        let payload = env.payload.as_ref();
        let rpc_id = payload
            .and_then(|p| p.get("id"))
            .cloned()
            .unwrap_or(Value::Null);
        let method = payload
            .and_then(|p| p.get("method"))
            .and_then(Value::as_str);
        let params = payload.and_then(|p| p.get("params"));
        let Some(method) = method else {
            if explicit {
                self.respond(
                    now,
                    &env.from,
                    &env.id,
                    rpc_id,
                    Err(rpc_error(INVALID_REQUEST, "missing method", None)),
                );
            }
            return;
        };
        if method.starts_with("notifications/") {
            return;
        }
        if self.tools.forwarded.contains(method) {
            return self.forward(now, env, rpc_id, method, params, explicit);
        }
        let reply = match method {
            "tools/list" => Ok(self.tools.list()),
            "resources/list" => Ok(self.tools.resource_list()),
            "ping" => Ok(json!({})),
            "tools/call" => return self.serve_tool_call(now, env, rpc_id, params),
            "resources/read" => return self.serve_resource_read(now, env, rpc_id, params),
            other => {
                // The application sees every request the layer does not serve; one it
                // wants to answer is registered with `forward_method` instead.
                self.client.emit(Event::McpRequest {
                    id: env.id.clone(),
                    from: env.from.clone(),
                    payload: payload.cloned().unwrap_or(Value::Null),
                });
                // A broadcast request for something we do not serve is somebody else's;
                // one addressed to us gets an answer so the requester does not wait.
                if !explicit {
                    return;
                }
                Err(rpc_error(
                    METHOD_NOT_FOUND,
                    format!("method not found: {other}"),
                    None,
                ))
            }
        };
        self.respond(now, &env.from, &env.id, rpc_id, reply);
    }

    fn call_slot(&mut self) -> Result<CallId, ToolError> {
        if self.tools.calls.len() >= self.config.bounds.max_pending_calls {
            return Err(rpc_error(
                INTERNAL_ERROR,
                "too many calls in progress",
                None,
            ));
        }
        self.tools.next_call += 1;
        Ok(CallId(self.tools.next_call))
    }

    fn forward(
        &mut self,
        now: Time,
        env: &Envelope,
        rpc_id: Value,
        method: &str,
        params: Option<&Value>,
        explicit: bool,
    ) {
        match self.call_slot() {
            Err(e) => self.respond(now, &env.from, &env.id, rpc_id, Err(e)),
            Ok(call_id) => {
                self.tools.calls.insert(
                    call_id,
                    PendingCall {
                        requester: env.from.clone(),
                        request_id: env.id.clone(),
                        rpc_id,
                        resource: None,
                        raw: true,
                    },
                );
                self.client.emit(Event::Forwarded {
                    call_id,
                    from: env.from.clone(),
                    method: method.to_owned(),
                    params: params.cloned(),
                    explicit,
                });
            }
        }
    }

    fn serve_tool_call(
        &mut self,
        now: Time,
        env: &Envelope,
        rpc_id: Value,
        params: Option<&Value>,
    ) {
        let explicit = self.addressed_to_me(env);
        let name = params.and_then(|p| p.get("name")).and_then(Value::as_str);
        let arguments = params
            .and_then(|p| p.get("arguments"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        let checked = match name {
            None => Err(rpc_error(INVALID_PARAMS, "params.name is required", None)),
            Some(n) => match self.tools.tools.get(n) {
                // A broadcast call of a tool we lack is meant for whoever has it.
                None if !explicit => return,
                None => Err(rpc_error(
                    METHOD_NOT_FOUND,
                    format!("unknown tool: {n}"),
                    None,
                )),
                Some((_, Some(schema))) => schema.validate(&arguments).map_err(|v| {
                    rpc_error(
                        INVALID_PARAMS,
                        format!("invalid arguments for {n}: {v}"),
                        Some(json!({"path": v.path, "rule": v.rule, "message": v.message})),
                    )
                }),
                Some((_, None)) => Ok(()),
            },
        };
        let call = checked.and_then(|()| self.call_slot());
        match call {
            Err(e) => self.respond(now, &env.from, &env.id, rpc_id, Err(e)),
            Ok(call_id) => {
                let tool = name.unwrap_or_default().to_owned();
                self.tools.calls.insert(
                    call_id,
                    PendingCall {
                        requester: env.from.clone(),
                        request_id: env.id.clone(),
                        rpc_id,
                        resource: None,
                        raw: false,
                    },
                );
                self.client.emit(Event::ToolCall {
                    call_id,
                    from: env.from.clone(),
                    tool,
                    arguments,
                });
            }
        }
    }

    fn serve_resource_read(
        &mut self,
        now: Time,
        env: &Envelope,
        rpc_id: Value,
        params: Option<&Value>,
    ) {
        let explicit = self.addressed_to_me(env);
        let uri = params.and_then(|p| p.get("uri")).and_then(Value::as_str);
        let checked = match uri {
            None => Err(rpc_error(INVALID_PARAMS, "params.uri is required", None)),
            Some(u) if self.tools.resources.contains_key(u) => Ok(u.to_owned()),
            Some(_) if !explicit => return,
            Some(u) => Err(rpc_error(
                METHOD_NOT_FOUND,
                format!("unknown resource: {u}"),
                None,
            )),
        };
        match checked.and_then(|u| self.call_slot().map(|c| (c, u))) {
            Err(e) => self.respond(now, &env.from, &env.id, rpc_id, Err(e)),
            Ok((call_id, uri)) => {
                self.tools.calls.insert(
                    call_id,
                    PendingCall {
                        requester: env.from.clone(),
                        request_id: env.id.clone(),
                        rpc_id,
                        resource: Some(uri.clone()),
                        raw: false,
                    },
                );
                self.client.emit(Event::ResourceRead {
                    call_id,
                    from: env.from.clone(),
                    uri,
                });
            }
        }
    }

    pub(super) fn drop_pending_calls(&mut self, now: Time, reason: &str) {
        let calls: Vec<CallId> = self.tools.calls.keys().copied().collect();
        for c in calls {
            let _ = self.complete_call(now, c, Err(ToolError::internal(reason)));
        }
    }
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
