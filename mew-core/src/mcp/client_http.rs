//! What [`McpClient`] makes of HTTP answers: which response carries what (a JSON body, an
//! event stream, 202 for what needs no answer), sessions, the GET stream and the resumption
//! of a broken response stream.

use super::*;
use crate::mcp::http::{BodyKind, HttpResponseHead};
use crate::mcp::sse::SseItem;

/// Wait before reopening the GET stream when the server gave no `retry`.
const LISTEN_RETRY: Duration = Duration::from_secs(2);
/// Wait before resuming a response stream when the server gave no `retry`.
const RESUME_RETRY: Duration = Duration::from_secs(1);
/// Bytes of an unusable body kept for the error message.
const SNIPPET_BYTES: usize = 256;
/// Longest session id accepted (the specification asks for visible ASCII; no length is
/// given, and it is echoed on every request).
const MAX_SESSION_ID: usize = 1024;
/// JSON texts one `application/json` answer is read as at most.
const MAX_JSON_TEXTS: usize = 64;

/// The JSON texts of an `application/json` answer, in order. MCP asks for the one response
/// there; some servers write the call's notifications first, a line each, in the same body
/// (what an SSE stream would have carried). Such a sequence is read as those messages, up to
/// [`MAX_JSON_TEXTS`]; anything else is one text, and fails or not as such.
fn json_texts(buf: &[u8]) -> Vec<&[u8]> {
    let mut stream = serde_json::Deserializer::from_slice(buf).into_iter::<serde::de::IgnoredAny>();
    let mut texts = Vec::new();
    let mut start = 0;
    while let Some(item) = stream.next() {
        if item.is_err() || texts.len() == MAX_JSON_TEXTS {
            return vec![buf];
        }
        let end = stream.byte_offset();
        texts.push(&buf[start..end]);
        start = end;
    }
    if texts.len() > 1 { texts } else { vec![buf] }
}

impl McpClient {
    /// The head of the answer to `exchange` arrived.
    pub fn handle_http_response(
        &mut self,
        now: Time,
        exchange: ExchangeId,
        head: HttpResponseHead,
    ) {
        let Some(kind) = self.exchanges.get(&exchange).map(|x| x.kind) else {
            return;
        };
        let carried = carried_request(kind);
        if let (Some(r), State::Initializing { request, .. }) = (carried, &self.state)
            && r == *request
            && let Some(sid) = head.header(http::HEADER_SESSION_ID)
            && !sid.is_empty()
            && sid.len() <= MAX_SESSION_ID
            && sid.bytes().all(|b| (0x21..=0x7e).contains(&b))
        {
            self.session_id = Some(sid.to_owned());
        }
        if kind == ExchangeKind::Listen {
            self.listen_settled();
        }
        let status = head.status;
        if status == 401 || status == 403 {
            self.set_body(exchange, Body::Ignore);
            let err = McpError::Unauthorized {
                status,
                challenge: head.header("www-authenticate").map(str::to_owned),
            };
            return self.exchange_failed(now, exchange, kind, err);
        }
        if status == 404
            && self.session_id.is_some()
            && self.is_operational()
            && kind != ExchangeKind::Delete
        {
            // The server forgot the session: every request of it is lost; start anew.
            return self.abort_server(now, McpError::SessionExpired, false);
        }
        if kind == ExchangeKind::Listen
            && (status != 200 || head.body_kind() != BodyKind::EventStream)
        {
            // No GET stream here (405 is the usual answer); the session works without it.
            self.listen = Listen::Off;
            self.exchanges.remove(&exchange);
            self.out.push_back(Output::HttpAbort(exchange));
            return;
        }
        let body = match (status, head.body_kind()) {
            (200..=299, BodyKind::EventStream) => Body::Sse(Box::new(SseParser::new(
                self.config.max_sse_line,
                self.config.max_sse_event,
            ))),
            (_, BodyKind::Json) => Body::Json {
                buf: Vec::new(),
                status,
                overflow: false,
            },
            (200..=299, _) if carried.is_none() || status == 202 || status == 204 => Body::Ignore,
            (_, kind) => Body::Error {
                status,
                snippet: Vec::new(),
                what: match kind {
                    BodyKind::Other(media) if (200..=299).contains(&status) => {
                        format!("answered with {media} instead of JSON or an event stream")
                    }
                    _ => String::new(),
                },
            },
        };
        self.set_body(exchange, body);
    }

    /// Body bytes of the answer to `exchange`, split anywhere.
    pub fn handle_http_body(&mut self, now: Time, exchange: ExchangeId, bytes: &[u8]) {
        let max_body = self.config.max_http_body;
        let Some(x) = self.exchanges.get_mut(&exchange) else {
            return;
        };
        let kind = x.kind;
        match &mut x.body {
            Body::Json { buf, overflow, .. } => {
                if *overflow {
                } else if buf.len() + bytes.len() > max_body {
                    *overflow = true;
                    *buf = Vec::new();
                } else {
                    buf.extend_from_slice(bytes);
                }
            }
            Body::Error { snippet, .. } => {
                let room = SNIPPET_BYTES.saturating_sub(snippet.len());
                snippet.extend_from_slice(&bytes[..room.min(bytes.len())]);
            }
            Body::Sse(parser) => {
                let mut items = Vec::new();
                parser.feed(bytes, |i| items.push(i));
                self.on_sse_items(now, exchange, kind, items);
            }
            Body::Awaiting | Body::Ignore => {}
        }
    }

    /// The answer to `exchange` ended (its body read to the end, or its stream closed).
    pub fn handle_http_end(&mut self, now: Time, exchange: ExchangeId) {
        let Some(x) = self.exchanges.remove(&exchange) else {
            return;
        };
        let carried = carried_request(x.kind);
        match x.body {
            Body::Json {
                buf,
                status,
                overflow,
            } => {
                if overflow {
                    let err = McpError::Http {
                        status,
                        detail: format!("answer larger than {} bytes", self.config.max_http_body),
                    };
                    return self.exchange_failed(now, exchange, x.kind, err);
                }
                self.inbound_call = self.call_of(carried);
                for text in json_texts(&buf) {
                    self.on_line(now, Line::Text(text));
                }
                self.inbound_call = None;
                if let Some(r) = carried
                    && self.pending.contains_key(&r)
                {
                    // Parsed again only on this failure path, to tell garbage from a
                    // well-formed answer to something else.
                    let detail = if !(200..=299).contains(&status) {
                        snippet(&buf)
                    } else if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&buf) {
                        format!("the answer is not valid JSON ({e})")
                    } else {
                        "the answer did not respond to the request".to_owned()
                    };
                    self.request_failed(now, r, McpError::Http { status, detail });
                }
            }
            Body::Sse(parser) => self.stream_ended(now, x.kind, &parser),
            Body::Error {
                status,
                snippet: s,
                what,
            } => {
                let detail = if what.is_empty() { snippet(&s) } else { what };
                self.exchange_failed(now, exchange, x.kind, McpError::Http { status, detail });
            }
            Body::Awaiting => {
                let err = McpError::Transport("the exchange ended without an answer".into());
                self.exchange_failed(now, exchange, x.kind, err);
            }
            Body::Ignore => {}
        }
    }

    /// The exchange failed before or while its answer was read (no connection, reset, ...).
    pub fn handle_http_failed(&mut self, now: Time, exchange: ExchangeId, error: &str) {
        let Some(x) = self.exchanges.remove(&exchange) else {
            return;
        };
        self.exchange_failed(now, exchange, x.kind, McpError::Transport(error.to_owned()));
    }

    /// The exchange came to nothing for a reason of the driver's (authorization): what it
    /// carried fails with `err`.
    pub fn fail_exchange(&mut self, now: Time, exchange: ExchangeId, err: McpError) {
        let Some(x) = self.exchanges.remove(&exchange) else {
            return;
        };
        self.exchange_failed(now, exchange, x.kind, err);
    }

    fn set_body(&mut self, exchange: ExchangeId, body: Body) {
        if let Some(x) = self.exchanges.get_mut(&exchange) {
            x.body = body;
        }
    }

    fn call_of(&self, request: Option<u64>) -> Option<McpCallId> {
        match self.pending.get(&request?)?.purpose {
            Purpose::Call(c) => Some(c),
            _ => None,
        }
    }

    fn on_sse_items(
        &mut self,
        now: Time,
        exchange: ExchangeId,
        kind: ExchangeKind,
        items: Vec<SseItem>,
    ) {
        let carried = carried_request(kind);
        for item in items {
            match item {
                SseItem::Event(e) => {
                    self.inbound_call = self.call_of(carried);
                    self.on_line(now, Line::Text(e.data.as_bytes()));
                    self.inbound_call = None;
                }
                SseItem::LineTooLong { limit } => self.emit(McpEvent::StdoutIssue(
                    StdoutIssue::Http(format!("dropped an event with a line over {limit} bytes")),
                )),
                SseItem::EventTooLarge { limit } => self.emit(McpEvent::StdoutIssue(
                    StdoutIssue::Http(format!("dropped an event over {limit} bytes")),
                )),
            }
        }
        // A response stream has nothing more to say once its request is answered; a
        // resumed GET may be kept open by the server, so close it ourselves.
        if let Some(r) = carried
            && !self.pending.contains_key(&r)
            && self.exchanges.remove(&exchange).is_some()
        {
            self.out.push_back(Output::HttpAbort(exchange));
        }
    }

    /// An event stream closed. A response stream whose request is unanswered is resumed
    /// where the session revision allows it; the GET stream is reopened.
    fn stream_ended(&mut self, now: Time, kind: ExchangeKind, parser: &SseParser) {
        match kind {
            ExchangeKind::Listen => {
                if self.is_operational() {
                    self.listen = Listen::Due(now + parser.retry().unwrap_or(LISTEN_RETRY));
                    self.listen_last_id = parser.last_event_id().map(str::to_owned);
                }
            }
            ExchangeKind::Post { request: Some(r) } | ExchangeKind::Resume { request: r } => {
                let session = self.speaking.is_some_and(|v| !v.is_stateless());
                let Some(p) = self.pending.get_mut(&r) else {
                    return;
                };
                p.exchange = None;
                match parser.last_event_id() {
                    Some(id) if session && p.resumes < self.config.max_resumes => {
                        p.resumes += 1;
                        self.resumes.push(ResumeDue {
                            due: now + parser.retry().unwrap_or(RESUME_RETRY),
                            request: r,
                            last_event_id: id.to_owned(),
                        });
                    }
                    _ => self.request_failed(now, r, McpError::StreamEnded),
                }
            }
            ExchangeKind::Post { request: None } | ExchangeKind::Delete => {}
        }
    }

    /// Opens the GET stream of a session, if wanted and not open.
    pub(super) fn open_listen(&mut self) {
        // The stateless revision has no GET stream.
        if self.config.transport != Transport::Http
            || !self.config.listen
            || self.listen != Listen::Off
            || self.speaking.is_none_or(ProtocolVersion::is_stateless)
        {
            return;
        }
        let mut headers = vec![("Accept".to_owned(), "text/event-stream".to_owned())];
        self.session_headers(&mut headers);
        if let Some(id) = &self.listen_last_id {
            headers.push((http::HEADER_LAST_EVENT_ID.to_owned(), id.clone()));
        }
        let x = self.open_exchange(HttpMethod::Get, headers, None, ExchangeKind::Listen);
        self.listen = Listen::Open(x);
    }

    /// Resumes the response stream of a request still waiting for its response.
    pub(super) fn resume(&mut self, r: ResumeDue) {
        if !self.pending.contains_key(&r.request) {
            return;
        }
        let mut headers = vec![("Accept".to_owned(), "text/event-stream".to_owned())];
        self.session_headers(&mut headers);
        headers.push((http::HEADER_LAST_EVENT_ID.to_owned(), r.last_event_id));
        let x = self.open_exchange(
            HttpMethod::Get,
            headers,
            None,
            ExchangeKind::Resume { request: r.request },
        );
        if let Some(p) = self.pending.get_mut(&r.request) {
            p.exchange = Some(x);
        }
    }

    /// An exchange came to nothing: what it carried fails with `err`.
    fn exchange_failed(
        &mut self,
        now: Time,
        exchange: ExchangeId,
        kind: ExchangeKind,
        err: McpError,
    ) {
        if self.exchanges.remove(&exchange).is_some() {
            self.out.push_back(Output::HttpAbort(exchange));
        }
        match kind {
            ExchangeKind::Post { request: Some(r) } | ExchangeKind::Resume { request: r } => {
                self.request_failed(now, r, err)
            }
            ExchangeKind::Post { request: None } => self.emit(McpEvent::StdoutIssue(
                StdoutIssue::Http(format!("a message to the server was lost: {err}")),
            )),
            ExchangeKind::Listen => {
                if self.is_operational() {
                    self.listen = Listen::Due(now + LISTEN_RETRY);
                }
                self.listen_settled();
            }
            ExchangeKind::Delete => {}
        }
    }

    /// A request failed without a JSON-RPC answer.
    pub(super) fn request_failed(&mut self, now: Time, request: u64, err: McpError) {
        let Some(p) = self.pending.remove(&request) else {
            return;
        };
        self.resumes.retain(|r| r.request != request);
        match p.purpose {
            Purpose::Call(call) => self.finish_call(call, Err(err)),
            Purpose::List(kind) => self.list_failed(now, kind, err),
            Purpose::Discover => match err {
                // Unreachable or unauthorized: no other handshake would fare better.
                McpError::Transport(_) | McpError::Auth(_) | McpError::SignInNeeded { .. } => {
                    self.abort_server(now, err, false)
                }
                McpError::Unauthorized { .. } => self.abort_server(now, err, true),
                // An HTTP error from a server of an older revision, which knows no discover.
                _ => self.discover_failed(now),
            },
            Purpose::Initialize => {
                let fatal = matches!(err, McpError::Unauthorized { .. });
                self.abort_server(now, err, fatal)
            }
        }
    }
}

fn carried_request(kind: ExchangeKind) -> Option<u64> {
    match kind {
        ExchangeKind::Post { request } => request,
        ExchangeKind::Resume { request } => Some(request),
        ExchangeKind::Listen | ExchangeKind::Delete => None,
    }
}

fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(SNIPPET_BYTES)]);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod json_texts_tests {
    use super::{MAX_JSON_TEXTS, json_texts};

    #[test]
    fn a_body_of_several_json_texts_is_read_as_each_and_a_bad_one_as_a_whole() {
        let one = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        assert_eq!(json_texts(one), vec![&one[..]]);
        let two = b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n{\"id\":1}";
        let texts = json_texts(two);
        assert_eq!(texts.len(), 2);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(texts[1]).unwrap(),
            serde_json::json!({"id": 1})
        );
        let broken = b"{\"a\":1}\n{\"b\":";
        assert_eq!(json_texts(broken), vec![&broken[..]]);
        let many = "{}\n".repeat(MAX_JSON_TEXTS + 1);
        assert_eq!(json_texts(many.as_bytes()).len(), 1);
    }
}
