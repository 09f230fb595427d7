//! What [`McpClient`] makes of what its server writes: lines decoded, answers matched to
//! the requests they answer, the `initialize` handshake, paged listings and the server's own
//! requests and notifications.

use super::*;

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
            RpcMessage::Request { id, method, .. } => {
                let line = match server_requests::answer(&method, &self.config.roots) {
                    Ok(result) => jsonrpc::response_line(&id, Ok(&result)),
                    Err(e) => jsonrpc::response_line(&id, Err(&e)),
                };
                self.out.push_back(Output::Write(line));
            }
            RpcMessage::Notification { method, params } => {
                match ListKind::from_changed_notification(&method) {
                    // Before the handshake the lists are fetched anyway; a kind the server
                    // did not offer would only earn an error.
                    Some(kind) if self.is_operational() && self.offers(kind) => {
                        self.begin_list(now, kind)
                    }
                    Some(_) => {}
                    None => self.emit(McpEvent::Notification { method, params }),
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
                match p.purpose {
                    Purpose::Call => {
                        self.calls_in_flight -= 1;
                        self.emit(McpEvent::CallCompleted {
                            call_id: McpCallId(n),
                            result: outcome.map_err(McpError::Server),
                        });
                    }
                    Purpose::Initialize => self.on_initialize(now, outcome),
                    Purpose::List(kind) => self.on_list_page(now, kind, outcome),
                }
            }
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
        self.out.push_back(Output::Write(jsonrpc::notification_line(
            "notifications/initialized",
            None,
        )));
        let offered: Vec<ListKind> = ListKind::ALL
            .into_iter()
            .filter(|k| desc.capabilities.contains_key(k.field()))
            .collect();
        for kind in ListKind::ALL {
            if !offered.contains(&kind) {
                // A restarted server may offer less than its predecessor.
                self.catalog.replace(kind, Vec::new());
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
        let Some(pager) = self.lists[slot(kind)].pager.as_mut() else {
            return;
        };
        match pager.on_page(result) {
            Ok(PageOutcome::Next(cursor)) => self.send_list_request(now, kind, Some(cursor)),
            Ok(PageOutcome::Done(items)) => {
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

    fn maybe_ready(&mut self) {
        if matches!(self.state, State::Listing) && !self.initial_lists.iter().any(|&b| b) {
            self.state = State::Ready;
            self.attempts = 0;
            if let Some(desc) = self.server.clone() {
                self.emit(McpEvent::Ready(desc));
            }
        }
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
    let protocol_version =
        ProtocolVersion::parse(&version).ok_or(McpError::UnsupportedProtocolVersion(version))?;
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
