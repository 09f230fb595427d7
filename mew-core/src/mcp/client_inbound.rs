//! What [`McpClient`] makes of what its server writes: lines decoded, answers matched to
//! the requests they answer, the handshake (`server/discover`, `initialize`), paged listings
//! and the server's own notifications.

use super::*;
use crate::mcp::stateless::UNSUPPORTED_PROTOCOL_VERSION;

impl McpClient {
    pub(super) fn on_line(&mut self, now: Time, line: Line<'_>) {
        let text = match line {
            Line::Overlong { limit } => {
                self.emit(McpEvent::StdoutIssue(StdoutIssue::Overlong { limit }));
                return;
            }
            Line::Text(t) => t,
        };
        if text.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        if std::str::from_utf8(text).is_err() {
            self.emit(McpEvent::StdoutIssue(StdoutIssue::NotUtf8));
            return;
        }
        match jsonrpc::decode(text) {
            Ok(Decoded::Single(m)) => self.on_message(now, m),
            Ok(Decoded::Batch(items)) => {
                for item in items {
                    match item {
                        Ok(m) => self.on_message(now, m),
                        Err(error) => self.undecodable(error, text),
                    }
                }
            }
            Err(error) => self.undecodable(error, text),
        }
    }

    fn undecodable(&mut self, error: RpcDecodeError, text: &[u8]) {
        let snippet: String = String::from_utf8_lossy(text)
            .chars()
            .take(SNIPPET_CHARS)
            .collect();
        self.emit(McpEvent::StdoutIssue(StdoutIssue::Undecodable {
            error,
            snippet,
        }));
    }

    fn on_message(&mut self, now: Time, m: RpcMessage) {
        // Anything arriving while the process is being replaced belongs to the old one.
        if !matches!(
            self.state,
            State::Initializing { .. } | State::Listing | State::Ready
        ) {
            return;
        }
        match m {
            RpcMessage::Request { method, .. }
                if method == "initialize" && matches!(self.state, State::Initializing { .. }) =>
            {
                // Servers never send initialize; a process that does is echoing its input.
                self.abort_server(
                    now,
                    McpError::NotAnMcpServer("sent our initialize request back (an echo?)"),
                    false,
                );
            }
            RpcMessage::Request { id, method, params } => {
                self.on_server_request(now, id, &method, params)
            }
            RpcMessage::Notification { method, params } => {
                match ListKind::from_changed_notification(&method) {
                    // Before the handshake the lists are fetched anyway; a kind the server
                    // did not offer would only earn an error.
                    Some(kind) if self.is_operational() && self.offers(kind) => {
                        self.begin_list(now, kind)
                    }
                    Some(_) => {}
                    None => self.on_notification(method, params),
                }
            }
            RpcMessage::Response { id, outcome } => {
                let p = id
                    .as_u64()
                    .and_then(|n| self.pending.remove(&n).map(|p| (n, p)));
                let Some((n, p)) = p else {
                    self.emit(McpEvent::StdoutIssue(StdoutIssue::UnknownResponse(
                        id.to_string(),
                    )));
                    return;
                };
                self.resumes.retain(|r| r.request != n);
                match p.purpose {
                    Purpose::Call(call) => self.on_call_result(now, call, outcome),
                    Purpose::Discover => self.on_discover(now, outcome),
                    Purpose::Initialize => self.on_initialize(now, outcome),
                    Purpose::List(kind) => self.on_list_page(now, kind, outcome),
                }
            }
        }
    }

    fn on_notification(&mut self, method: String, params: Option<Value>) {
        let p = params.as_ref();
        match method.as_str() {
            "notifications/progress" => {
                let Some(token) = p.and_then(|p| p.get("progressToken")).cloned() else {
                    return self.emit(McpEvent::Notification { method, params });
                };
                let call_id = self
                    .calls
                    .iter()
                    .find(|(_, c)| c.progress_token.as_ref() == Some(&token))
                    .map(|(id, _)| *id);
                let num = |k: &str| p.and_then(|p| p.get(k)).and_then(Value::as_f64);
                self.emit(McpEvent::Progress {
                    call_id,
                    token,
                    progress: num("progress").unwrap_or(0.0),
                    total: num("total"),
                    message: p
                        .and_then(|p| p.get("message"))
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                });
            }
            "notifications/message" => {
                let text = |k: &str| {
                    p.and_then(|p| p.get(k))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                };
                self.emit(McpEvent::Log {
                    call_id: self.inbound_call,
                    level: text("level").unwrap_or_else(|| "info".into()),
                    logger: text("logger"),
                    data: p
                        .and_then(|p| p.get("data"))
                        .cloned()
                        .unwrap_or(Value::Null),
                });
            }
            "notifications/cancelled" => {
                let withdrawn = p.and_then(|p| p.get("requestId")).and_then(|rid| {
                    self.asks.iter().find_map(|(ask_id, a)| match &a.origin {
                        AskOrigin::Request(id) if rpc_id_matches(id, rid) => Some(*ask_id),
                        _ => None,
                    })
                });
                match withdrawn {
                    Some(ask_id) => {
                        self.asks.remove(&ask_id);
                        self.emit(McpEvent::AskClosed {
                            ask_id,
                            reason: "withdrawn by the server".into(),
                        });
                    }
                    None => self.emit(McpEvent::Notification { method, params }),
                }
            }
            _ => self.emit(McpEvent::Notification { method, params }),
        }
    }

    fn on_discover(&mut self, now: Time, outcome: Result<Value, RpcError>) {
        let newest = self.config.protocol_version;
        let supported = match outcome {
            Ok(result) => match stateless::parse_discover(&result) {
                Ok(d) => {
                    self.discover_cache = d.cache;
                    match ProtocolVersion::newest_shared(
                        d.supported_versions.iter().map(String::as_str),
                        newest,
                    ) {
                        Some(v) if v.is_stateless() => {
                            self.speaking = Some(v);
                            let desc = ServerDescription {
                                server_info: d.server_info,
                                capabilities: d.capabilities,
                                protocol_version: v,
                                instructions: d.instructions,
                            };
                            return self.described(now, desc);
                        }
                        _ => d.supported_versions,
                    }
                }
                // Not a discover answer: an older server's idea of an error.
                Err(_) => return self.discover_failed(now),
            },
            Err(e) if e.code == UNSUPPORTED_PROTOCOL_VERSION => {
                let supported = stateless::supported_versions_of_error(e.data.as_ref());
                match ProtocolVersion::newest_shared(supported.iter().map(String::as_str), newest) {
                    // The server names a stateless revision it speaks: ask again in it, once
                    // (a server may refuse the first request of a client for its own
                    // reasons, then accept the same revision).
                    Some(v) if v.is_stateless() && self.discover_tries < 2 => {
                        let State::Initializing { deadline, .. } = self.state else {
                            return;
                        };
                        self.speaking = Some(v);
                        return self.send_discover(now, deadline);
                    }
                    _ => supported,
                }
            }
            Err(_) => return self.discover_failed(now),
        };
        match ProtocolVersion::newest_shared(supported.iter().map(String::as_str), newest) {
            Some(v) if !v.is_stateless() => {
                let State::Initializing { deadline, .. } = self.state else {
                    return;
                };
                self.send_initialize(now, v, deadline);
            }
            _ if supported.is_empty() => self.discover_failed(now),
            _ => self.abort_server(
                now,
                McpError::UnsupportedProtocolVersion(supported.join(", ")),
                true,
            ),
        }
    }

    fn on_initialize(&mut self, now: Time, outcome: Result<Value, RpcError>) {
        let result = match outcome {
            Ok(r) => r,
            Err(e) => return self.abort_server(now, McpError::InitRejected(e), false),
        };
        let desc = match parse_initialize(result) {
            Ok(d) => d,
            Err(e) => {
                let fatal = matches!(e, McpError::UnsupportedProtocolVersion(_));
                return self.abort_server(now, e, fatal);
            }
        };
        self.speaking = Some(desc.protocol_version);
        self.transmit(Msg::Notification {
            method: "notifications/initialized",
            params: None,
        });
        self.open_listen();
        if matches!(self.listen, Listen::Open(_)) {
            self.listen_wait = Some(now + self.config.list_timeout);
        }
        self.described(now, desc);
    }

    /// The handshake is done: list what the server offers.
    fn described(&mut self, now: Time, desc: ServerDescription) {
        let offered: Vec<ListKind> = ListKind::ALL
            .into_iter()
            .filter(|k| desc.capabilities.contains_key(k.field()))
            .collect();
        for kind in ListKind::ALL {
            if !offered.contains(&kind) {
                // A restarted server may offer less than its predecessor.
                self.catalog.replace(kind, Vec::new());
                self.cache_hints[slot(kind)] = None;
            }
        }
        self.server = Some(desc);
        self.state = State::Listing;
        for kind in offered {
            self.initial_lists[slot(kind)] = true;
            self.begin_list(now, kind);
        }
        self.maybe_ready();
    }

    fn offers(&self, kind: ListKind) -> bool {
        self.server
            .as_ref()
            .is_some_and(|d| d.capabilities.contains_key(kind.field()))
    }

    fn begin_list(&mut self, now: Time, kind: ListKind) {
        let s = &mut self.lists[slot(kind)];
        if s.pager.is_some() {
            s.again = true;
            return;
        }
        s.pager = Some(Pager::new(
            kind,
            self.config.max_list_items,
            self.config.max_list_pages,
        ));
        s.again = false;
        self.send_list_request(now, kind, None);
    }

    fn send_list_request(&mut self, now: Time, kind: ListKind, cursor: Option<String>) {
        let params = cursor.map(|c| json!({ "cursor": c }));
        let timeout = self.config.list_timeout;
        self.send_request(
            now,
            kind.method(),
            params.as_ref(),
            timeout,
            Purpose::List(kind),
        );
    }

    fn on_list_page(&mut self, now: Time, kind: ListKind, outcome: Result<Value, RpcError>) {
        let result = match outcome {
            Ok(r) => r,
            Err(e) => return self.list_failed(now, kind, McpError::Server(e)),
        };
        let hint = CacheHint::of(&result);
        let Some(pager) = self.lists[slot(kind)].pager.as_mut() else {
            return;
        };
        match pager.on_page(result) {
            Ok(PageOutcome::Next(cursor)) => self.send_list_request(now, kind, Some(cursor)),
            Ok(PageOutcome::Done(mut items)) => {
                if kind == ListKind::Tools && self.config.transport == Transport::Http {
                    items.retain(|(name, def)| {
                        let Some(schema) = def.get("inputSchema") else {
                            return true;
                        };
                        match http::check_header_annotations(schema) {
                            Ok(()) => true,
                            Err(e) => {
                                self.out.push_back(Output::Event(McpEvent::ToolRefused {
                                    name: name.clone(),
                                    reason: e.to_string(),
                                }));
                                false
                            }
                        }
                    });
                }
                self.cache_hints[slot(kind)] = hint;
                self.catalog.replace(kind, items);
                self.emit(match kind {
                    ListKind::Tools => McpEvent::ToolsChanged(self.catalog.tools.clone()),
                    ListKind::Resources => {
                        McpEvent::ResourcesChanged(self.catalog.resources.clone())
                    }
                    ListKind::Prompts => McpEvent::PromptsChanged(self.catalog.prompts.clone()),
                });
                self.finish_list(now, kind);
            }
            Err(reason) => self.list_failed(
                now,
                kind,
                McpError::BadListResult {
                    method: kind.method(),
                    reason,
                },
            ),
        }
    }

    pub(super) fn list_failed(&mut self, now: Time, kind: ListKind, error: McpError) {
        self.emit(McpEvent::ListFailed { kind, error });
        self.finish_list(now, kind);
    }

    fn finish_list(&mut self, now: Time, kind: ListKind) {
        let s = &mut self.lists[slot(kind)];
        s.pager = None;
        let again = std::mem::take(&mut s.again);
        self.initial_lists[slot(kind)] = false;
        if again {
            self.begin_list(now, kind);
        }
        self.maybe_ready();
    }

    /// The session's first GET stream answered (or failed, or took too long).
    pub(super) fn listen_settled(&mut self) {
        if self.listen_wait.take().is_some() {
            self.maybe_ready();
        }
    }

    fn maybe_ready(&mut self) {
        if matches!(self.state, State::Listing)
            && !self.initial_lists.iter().any(|&b| b)
            && self.listen_wait.is_none()
        {
            self.state = State::Ready;
            self.attempts = 0;
            if let Some(desc) = self.server.clone() {
                self.emit(McpEvent::Ready(desc));
            }
        }
    }
}

/// Whether the id we answered with is the one a `notifications/cancelled` names.
fn rpc_id_matches(id: &RpcId, v: &Value) -> bool {
    match (id, v) {
        (RpcId::Number(n), Value::Number(m)) => n == m,
        (RpcId::String(s), Value::String(t)) => s == t,
        _ => false,
    }
}

fn parse_initialize(result: Value) -> Result<ServerDescription, McpError> {
    let Value::Object(mut r) = result else {
        return Err(McpError::BadInitializeResult("result is not an object"));
    };
    let version = match r.remove("protocolVersion") {
        Some(Value::String(v)) => v,
        _ => return Err(McpError::BadInitializeResult("protocolVersion missing")),
    };
    let protocol_version = ProtocolVersion::parse_session(&version)
        .ok_or(McpError::UnsupportedProtocolVersion(version))?;
    let capabilities = match r.remove("capabilities") {
        Some(Value::Object(c)) => c,
        None | Some(Value::Null) => Map::new(),
        Some(_) => {
            return Err(McpError::BadInitializeResult(
                "capabilities is not an object",
            ));
        }
    };
    let instructions = match r.remove("instructions") {
        Some(Value::String(s)) => Some(s),
        _ => None,
    };
    Ok(ServerDescription {
        server_info: r.remove("serverInfo").unwrap_or(Value::Null),
        capabilities,
        protocol_version,
        instructions,
    })
}
