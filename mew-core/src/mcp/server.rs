//! The MCP server side, sans-IO: what a tools-mode agent speaks to an MCP host over stdio.
//!
//! [`McpServer`] serves a fixed list of tools. It answers `initialize` (echoing a revision
//! the client offered that it knows, else its newest), `ping`, `tools/list` (paginated with
//! an opaque cursor) and `logging/setLevel` itself; it checks a `tools/call`'s arguments
//! against the tool's schema before anything runs (a violation is a tool error result naming
//! the field and the rule) and hands valid calls to the application as
//! [`ServerEvent::Call`]; `notifications/cancelled` becomes [`ServerEvent::Cancelled`] and
//! the call is never answered, as the MCP specification asks. Several calls may be open at
//! once; the application completes each with [`McpServer::complete`].
//!
//! Choices where MCP is silent: requests other than `initialize` and `ping` before
//! `initialize` get `-32600` (invalid request: JSON-RPC's code for a request that cannot be
//! served as sent); requests are served once `initialize` is answered, without waiting for
//! `notifications/initialized` (clients that pipeline are common); log notifications go out
//! at `warning` and above until the client sets a level.

use super::framing::{Line, LineBuffer};
use super::jsonrpc::{self, Decoded, RpcError, RpcId, RpcMessage, codes};
use super::version::ProtocolVersion;
use crate::schema::Schema;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, VecDeque};

/// Who the server says it is (`serverInfo` and `instructions` of `initialize`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// `instructions`: how to use the server, for the host's model.
    pub instructions: Option<String>,
}

/// One tool as listed.
#[derive(Debug, Clone)]
pub struct ServedTool {
    /// Name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// `inputSchema` as listed (an object schema).
    pub input_schema: Value,
    /// The same schema, compiled for checking calls.
    pub schema: Schema,
}

/// Limits of the server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Who it is.
    pub info: ServerInfo,
    /// Tools per `tools/list` page.
    pub page_size: usize,
    /// Longest line read, in bytes.
    pub max_line: usize,
    /// Calls open at once; more are answered with a tool error.
    pub max_calls: usize,
}

impl ServerConfig {
    /// Defaults: 50 tools per page, 4 MiB lines, 64 open calls.
    pub fn new(info: ServerInfo) -> ServerConfig {
        ServerConfig {
            info,
            page_size: 50,
            max_line: 4 * 1024 * 1024,
            max_calls: 64,
        }
    }
}

/// Handle of a call handed to the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerCallId(pub u64);

/// Log levels of `logging/setLevel`, least severe first.
pub const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// What the server reports to the application.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// `initialize` was answered.
    Initialized {
        /// The revision agreed.
        version: ProtocolVersion,
        /// The client's `clientInfo`, as sent.
        client: Option<Value>,
    },
    /// Run this tool; answer with [`McpServer::complete`].
    Call {
        /// Handle.
        call: ServerCallId,
        /// Tool name.
        tool: String,
        /// Checked arguments.
        arguments: Map<String, Value>,
    },
    /// The client gave up on a call: stop it (its answer will not be sent).
    Cancelled {
        /// The call.
        call: ServerCallId,
        /// The client's reason, if any.
        reason: Option<String>,
    },
    /// A line that could not be served (for the server's own log).
    Issue(String),
}

/// One thing for the driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerOutput {
    /// Write this line (newline included) to stdout.
    Write(String),
    /// Something happened.
    Event(ServerEvent),
}

#[derive(Debug)]
struct OpenCall {
    rpc_id: RpcId,
    progress: Option<Value>,
}

/// The server state machine. See the module documentation.
///
/// | input | what it may queue |
/// |---|---|
/// | [`handle_stdin`](Self::handle_stdin) | `Write` (answers: `initialize`, `tools/list`, `ping`, errors); `Event` (`Initialized`, `Call`, `Cancelled`, `Issue`) |
/// | [`complete`](Self::complete), [`progress`](Self::progress), [`log`](Self::log) | `Write` |
///
/// It keeps no clock and has no timers: a call's deadline is its client's.
#[derive(Debug)]
pub struct McpServer {
    config: ServerConfig,
    tools: Vec<ServedTool>,
    lines: LineBuffer,
    version: Option<ProtocolVersion>,
    level: usize,
    calls: BTreeMap<ServerCallId, OpenCall>,
    next_call: u64,
    out: VecDeque<ServerOutput>,
}

impl McpServer {
    /// A server for `tools` (listed in this order).
    pub fn new(config: ServerConfig, tools: Vec<ServedTool>) -> McpServer {
        McpServer {
            lines: LineBuffer::new(config.max_line),
            config,
            tools,
            version: None,
            level: 3,
            calls: BTreeMap::new(),
            next_call: 0,
            out: VecDeque::new(),
        }
    }

    /// The revision agreed, once `initialize` is answered.
    pub fn version(&self) -> Option<ProtocolVersion> {
        self.version
    }

    /// Calls open.
    pub fn open_calls(&self) -> usize {
        self.calls.len()
    }

    /// Bytes read from stdin. No `now`: the server keeps no clock (it has no timers).
    pub fn handle_stdin(&mut self, bytes: &[u8]) {
        let mut lines = Vec::new();
        self.lines.feed(bytes, |l| {
            lines.push(match l {
                Line::Text(t) => Ok(t.to_vec()),
                Line::Overlong { limit } => Err(limit),
            })
        });
        for l in lines {
            match l {
                Ok(text) if text.iter().all(u8::is_ascii_whitespace) => {}
                Ok(text) => self.handle_line(&text),
                Err(limit) => self.error_without_id(
                    codes::INVALID_REQUEST,
                    &format!("message longer than {limit} bytes"),
                ),
            }
        }
    }

    /// The next output.
    pub fn poll_output(&mut self) -> Option<ServerOutput> {
        self.out.pop_front()
    }

    /// Answers a call with its text; `is_error` marks a tool error result. `false` if the
    /// call is not open (cancelled, or already answered).
    pub fn complete(&mut self, call: ServerCallId, text: &str, is_error: bool) -> bool {
        let Some(open) = self.calls.remove(&call) else {
            return false;
        };
        let result = tool_result(text, is_error);
        self.write(jsonrpc::response_line(&open.rpc_id, Ok(&result)));
        true
    }

    /// Reports progress of a call whose request carried a progress token (others: nothing).
    pub fn progress(&mut self, call: ServerCallId, progress: u64, message: &str) {
        let Some(token) = self.calls.get(&call).and_then(|c| c.progress.clone()) else {
            return;
        };
        let params = json!({"progressToken": token, "progress": progress, "message": message});
        self.write(jsonrpc::notification_line(
            "notifications/progress",
            Some(&params),
        ));
    }

    /// Sends `notifications/message` if `level` is at or above the client's level.
    pub fn log(&mut self, level: &str, data: &str) {
        let Some(rank) = LOG_LEVELS.iter().position(|l| *l == level) else {
            return;
        };
        if rank < self.level || self.version.is_none() {
            return;
        }
        let params = json!({"level": level, "logger": self.config.info.name, "data": data});
        self.write(jsonrpc::notification_line(
            "notifications/message",
            Some(&params),
        ));
    }

    // ---- internals ----

    fn write(&mut self, line: String) {
        self.out.push_back(ServerOutput::Write(line));
    }

    fn issue(&mut self, text: String) {
        self.out
            .push_back(ServerOutput::Event(ServerEvent::Issue(text)));
    }

    fn error_without_id(&mut self, code: i64, message: &str) {
        let line =
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
        self.write(format!("{line}\n"));
        self.issue(message.to_owned());
    }

    fn handle_line(&mut self, line: &[u8]) {
        match jsonrpc::decode(line) {
            Ok(Decoded::Single(m)) => self.handle_message(m),
            Ok(Decoded::Batch(items)) => {
                for item in items {
                    match item {
                        Ok(m) => self.handle_message(m),
                        Err(e) => self.error_without_id(codes::INVALID_REQUEST, &e.to_string()),
                    }
                }
            }
            Err(e @ jsonrpc::RpcDecodeError::NotJson(_)) => {
                self.error_without_id(codes::PARSE_ERROR, &e.to_string())
            }
            Err(e) => self.error_without_id(codes::INVALID_REQUEST, &e.to_string()),
        }
    }

    fn handle_message(&mut self, m: RpcMessage) {
        match m {
            RpcMessage::Request { id, method, params } => {
                let outcome = self.serve(&id, &method, params);
                match outcome {
                    Some(Ok(v)) => self.write(jsonrpc::response_line(&id, Ok(&v))),
                    Some(Err(e)) => self.write(jsonrpc::response_line(&id, Err(&e))),
                    None => {}
                }
            }
            // `notifications/initialized` changes nothing here (see the module notes);
            // other notifications are informational.
            RpcMessage::Notification { method, params } if method == "notifications/cancelled" => {
                let target = params.as_ref().and_then(|p| p.get("requestId")).cloned();
                let reason = params
                    .as_ref()
                    .and_then(|p| p.get("reason"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let found = self
                    .calls
                    .iter()
                    .find(|(_, c)| Some(id_value(&c.rpc_id)) == target)
                    .map(|(k, _)| *k);
                if let Some(call) = found {
                    self.calls.remove(&call);
                    self.out
                        .push_back(ServerOutput::Event(ServerEvent::Cancelled { call, reason }));
                }
            }
            RpcMessage::Notification { .. } => {}
            // We send no requests, so no response is expected; a stray one is ignored.
            RpcMessage::Response { .. } => {}
        }
    }

    /// The answer to a request, or `None` when the answer comes later (a tool call).
    fn serve(
        &mut self,
        id: &RpcId,
        method: &str,
        params: Option<Value>,
    ) -> Option<Result<Value, RpcError>> {
        if method == "initialize" {
            return Some(Ok(self.initialize(params)));
        }
        if method == "ping" {
            return Some(Ok(json!({})));
        }
        if self.version.is_none() {
            return Some(Err(RpcError::new(
                codes::INVALID_REQUEST,
                format!("`{method}` before `initialize`: initialize first"),
            )));
        }
        Some(match method {
            "tools/list" => self.list(params.as_ref()),
            "tools/call" => return self.call(id, params),
            "logging/setLevel" => {
                let level = params
                    .as_ref()
                    .and_then(|p| p.get("level"))
                    .and_then(Value::as_str);
                match level.and_then(|l| LOG_LEVELS.iter().position(|x| *x == l)) {
                    Some(rank) => {
                        self.level = rank;
                        Ok(json!({}))
                    }
                    None => Err(RpcError::new(
                        codes::INVALID_PARAMS,
                        format!("params.level must be one of {}", LOG_LEVELS.join(", ")),
                    )),
                }
            }
            other => Err(RpcError::new(
                codes::METHOD_NOT_FOUND,
                format!("method not found: {other}"),
            )),
        })
    }

    fn initialize(&mut self, params: Option<Value>) -> Value {
        let asked = params
            .as_ref()
            .and_then(|p| p.get("protocolVersion"))
            .and_then(Value::as_str);
        let version = asked
            .and_then(ProtocolVersion::parse_session)
            .unwrap_or(ProtocolVersion::LATEST);
        self.version = Some(version);
        let client = params.as_ref().and_then(|p| p.get("clientInfo")).cloned();
        self.out
            .push_back(ServerOutput::Event(ServerEvent::Initialized {
                version,
                client,
            }));
        let info = &self.config.info;
        let mut result = json!({
            "protocolVersion": version.as_str(),
            "capabilities": {"tools": {"listChanged": false}, "logging": {}},
            "serverInfo": {"name": info.name, "version": info.version},
        });
        if let Some(i) = &info.instructions {
            result["instructions"] = json!(i);
        }
        result
    }

    fn list(&self, params: Option<&Value>) -> Result<Value, RpcError> {
        let start = match params.and_then(|p| p.get("cursor")) {
            None | Some(Value::Null) => 0,
            Some(Value::String(c)) => c
                .strip_prefix("after:")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n <= self.tools.len())
                .ok_or_else(|| RpcError::new(codes::INVALID_PARAMS, "invalid cursor"))?,
            Some(_) => return Err(RpcError::new(codes::INVALID_PARAMS, "invalid cursor")),
        };
        let end = (start + self.config.page_size.max(1)).min(self.tools.len());
        let tools: Vec<Value> = self.tools[start..end]
            .iter()
            .map(|t| {
                let mut v = json!({"name": t.name, "inputSchema": t.input_schema});
                if let Some(d) = &t.description {
                    v["description"] = json!(d);
                }
                v
            })
            .collect();
        let mut result = json!({ "tools": tools });
        if end < self.tools.len() {
            result["nextCursor"] = json!(format!("after:{end}"));
        }
        Ok(result)
    }

    fn call(&mut self, id: &RpcId, params: Option<Value>) -> Option<Result<Value, RpcError>> {
        let bad = |m: &str| Some(Err(RpcError::new(codes::INVALID_PARAMS, m)));
        let Some(Value::Object(mut params)) = params else {
            return bad("params must be an object with `name` and `arguments`");
        };
        let Some(Value::String(name)) = params.remove("name") else {
            return bad("params.name (a string) is required");
        };
        let arguments = match params.remove("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m,
            Some(_) => return bad("params.arguments must be an object"),
        };
        let Some(tool) = self.tools.iter().find(|t| t.name == name) else {
            return bad(&format!("unknown tool: {name}"));
        };
        if self.calls.values().any(|c| c.rpc_id == *id) {
            return Some(Err(RpcError::new(
                codes::INVALID_REQUEST,
                format!("request id {id} is already in use by a running call"),
            )));
        }
        let args = Value::Object(arguments);
        if let Err(v) = tool.schema.validate(&args) {
            let field = if v.path == "/" {
                "the arguments".to_owned()
            } else {
                format!("argument `{}`", v.path.trim_start_matches('/'))
            };
            let text = format!(
                "Invalid arguments: {field} breaks `{}`: {}",
                v.rule, v.message
            );
            return Some(Ok(tool_result(&text, true)));
        }
        if self.calls.len() >= self.config.max_calls {
            let text = format!(
                "{} calls are already running; try again when one ends",
                self.config.max_calls
            );
            return Some(Ok(tool_result(&text, true)));
        }
        let Value::Object(arguments) = args else {
            unreachable!("built as an object above")
        };
        let progress = params
            .get("_meta")
            .and_then(|m| m.get("progressToken"))
            .filter(|t| t.is_string() || t.is_number())
            .cloned();
        self.next_call += 1;
        let call = ServerCallId(self.next_call);
        self.calls.insert(
            call,
            OpenCall {
                rpc_id: id.clone(),
                progress,
            },
        );
        self.out.push_back(ServerOutput::Event(ServerEvent::Call {
            call,
            tool: name,
            arguments,
        }));
        None
    }
}

fn id_value(id: &RpcId) -> Value {
    match id {
        RpcId::Number(n) => Value::Number(n.clone()),
        RpcId::String(s) => Value::String(s.clone()),
    }
}

/// A `tools/call` result holding one text item.
pub fn tool_result(text: &str, is_error: bool) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": is_error})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(n: usize) -> McpServer {
        let schema = json!({
            "type": "object",
            "properties": {"city": {"type": "string", "minLength": 2}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city"]
        });
        let tools = (0..n)
            .map(|i| ServedTool {
                name: format!("tool{i}"),
                description: Some(format!("Tool number {i}")),
                input_schema: schema.clone(),
                schema: Schema::compile(&schema).unwrap(),
            })
            .collect();
        let mut c = ServerConfig::new(ServerInfo {
            name: "Weather desk".into(),
            version: "1.2.0".into(),
            instructions: Some("Ask about weather".into()),
        });
        c.page_size = 2;
        c.max_calls = 2;
        McpServer::new(c, tools)
    }

    fn send(s: &mut McpServer, line: &str) -> (Vec<Value>, Vec<ServerEvent>) {
        s.handle_stdin(format!("{line}\n").as_bytes());
        let (mut lines, mut events) = (Vec::new(), Vec::new());
        while let Some(o) = s.poll_output() {
            match o {
                ServerOutput::Write(l) => {
                    assert!(l.ends_with('\n') && !l[..l.len() - 1].contains('\n'));
                    lines.push(serde_json::from_str(&l).unwrap());
                }
                ServerOutput::Event(e) => events.push(e),
            }
        }
        (lines, events)
    }

    fn init(s: &mut McpServer, version: &str) -> Value {
        let (l, _) = send(
            s,
            &format!(
                r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
            ),
        );
        send(
            s,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        );
        l[0]["result"].clone()
    }

    #[test]
    fn initialize_negotiates_and_describes_the_server() {
        let mut s = server(1);
        let r = init(&mut s, "2025-03-26");
        assert_eq!(r["protocolVersion"], "2025-03-26");
        assert_eq!(
            r["serverInfo"],
            json!({"name": "Weather desk", "version": "1.2.0"})
        );
        assert_eq!(r["instructions"], "Ask about weather");
        assert!(r["capabilities"]["tools"].is_object());
        let mut s = server(1);
        assert_eq!(init(&mut s, "2031-01-01")["protocolVersion"], "2025-11-25");
    }

    #[test]
    fn calls_before_initialize_unknown_methods_and_bad_lines_get_standard_codes() {
        let mut s = server(1);
        let (l, _) = send(&mut s, r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        assert_eq!(l[0]["error"]["code"], -32600);
        let (l, _) = send(&mut s, r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#);
        assert_eq!(l[0]["result"], json!({}));
        init(&mut s, "2025-06-18");
        let (l, _) = send(
            &mut s,
            r#"{"jsonrpc":"2.0","id":3,"method":"resources/list"}"#,
        );
        assert_eq!(l[0]["error"]["code"], -32601);
        assert_eq!(l[0]["id"], 3);
        let (l, ev) = send(&mut s, "{not json");
        assert_eq!(l[0]["error"]["code"], -32700);
        assert!(l[0]["id"].is_null());
        assert!(matches!(&ev[0], ServerEvent::Issue(_)));
        let (l, _) = send(
            &mut s,
            r#"{"jsonrpc":"2.0","id":4,"method":"logging/setLevel","params":{"level":"loud"}}"#,
        );
        assert_eq!(l[0]["error"]["code"], -32602);
        let (l, _) = send(
            &mut s,
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"nope"}}"#,
        );
        assert_eq!(l[0]["error"]["code"], -32602);
        assert!(l[0]["error"]["message"].as_str().unwrap().contains("nope"));
    }

    #[test]
    fn tools_list_pages_with_a_cursor() {
        let mut s = server(5);
        init(&mut s, "2025-11-25");
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        for i in 0..3 {
            let params = match &cursor {
                Some(c) => format!(r#","params":{{"cursor":"{c}"}}"#),
                None => String::new(),
            };
            let (l, _) = send(
                &mut s,
                &format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/list"{params}}}"#),
            );
            let r = &l[0]["result"];
            for t in r["tools"].as_array().unwrap() {
                assert_eq!(t["inputSchema"]["required"], json!(["city"]));
                names.push(t["name"].as_str().unwrap().to_owned());
            }
            cursor = r
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        assert_eq!(names, ["tool0", "tool1", "tool2", "tool3", "tool4"]);
        assert!(cursor.is_none());
        let (l, _) = send(
            &mut s,
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"cursor":"after:99"}}"#,
        );
        assert_eq!(l[0]["error"]["code"], -32602);
    }

    #[test]
    fn calls_are_checked_handed_out_answered_and_cancelled() {
        let mut s = server(1);
        init(&mut s, "2025-11-25");
        let (l, ev) = send(
            &mut s,
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"tool0","arguments":{"city":"X"}}}"#,
        );
        assert!(ev.is_empty());
        assert_eq!(l[0]["result"]["isError"], true);
        let text = l[0]["result"]["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("argument `city`") && text.contains("`minLength`"),
            "{text}"
        );
        let (l, ev) = send(
            &mut s,
            r#"{"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"tool0","arguments":{"city":"Oslo","days":0}}}"#,
        );
        assert!(ev.is_empty());
        assert!(
            l[0]["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("`minimum`")
        );
        let (l, ev) = send(
            &mut s,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"tool0","arguments":{"city":"Oslo"},"_meta":{"progressToken":"p1"}}}"#,
        );
        assert!(l.is_empty());
        let ServerEvent::Call {
            call,
            tool,
            arguments,
        } = &ev[0]
        else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (tool.as_str(), &arguments["city"]),
            ("tool0", &json!("Oslo"))
        );
        let first = *call;
        s.progress(first, 1, "thinking");
        let (_, ev2) = send(
            &mut s,
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"tool0","arguments":{"city":"Rome"}}}"#,
        );
        let ServerEvent::Call { call: second, .. } = ev2[0] else {
            panic!()
        };
        // A duplicate id of a running call, and a third call beyond max_calls.
        let (l, _) = send(
            &mut s,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"tool0","arguments":{"city":"Oslo"}}}"#,
        );
        assert_eq!(l[0]["error"]["code"], -32600);
        let (l, _) = send(
            &mut s,
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"tool0","arguments":{"city":"Oslo"}}}"#,
        );
        assert!(
            l[0]["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("already running")
        );
        // Progress went out with the token; the second call (no token) reports none.
        s.progress(second, 1, "x");
        assert!(s.poll_output().is_none());
        let (_, ev) = send(
            &mut s,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":8,"reason":"user"}}"#,
        );
        assert_eq!(
            ev,
            vec![ServerEvent::Cancelled {
                call: second,
                reason: Some("user".into())
            }]
        );
        assert!(!s.complete(second, "late", false));
        assert!(s.complete(first, "Sunny in Oslo", false));
        let Some(ServerOutput::Write(l)) = s.poll_output() else {
            panic!()
        };
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(
            v["result"],
            json!({"content": [{"type": "text", "text": "Sunny in Oslo"}], "isError": false})
        );
        assert_eq!(s.open_calls(), 0);
    }

    #[test]
    fn progress_and_log_lines() {
        let mut s = server(1);
        init(&mut s, "2025-11-25");
        let (_, ev) = send(
            &mut s,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tool0","arguments":{"city":"Oslo"},"_meta":{"progressToken":42}}}"#,
        );
        let ServerEvent::Call { call, .. } = ev[0] else {
            panic!()
        };
        s.progress(call, 2, "step 2");
        let Some(ServerOutput::Write(l)) = s.poll_output() else {
            panic!()
        };
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["method"], "notifications/progress");
        assert_eq!(
            v["params"],
            json!({"progressToken": 42, "progress": 2, "message": "step 2"})
        );
        s.log("info", "quiet by default");
        assert!(s.poll_output().is_none());
        send(
            &mut s,
            r#"{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"debug"}}"#,
        );
        s.log("info", "now heard");
        let Some(ServerOutput::Write(l)) = s.poll_output() else {
            panic!()
        };
        assert!(l.contains("notifications/message") && l.contains("now heard"));
    }
}
