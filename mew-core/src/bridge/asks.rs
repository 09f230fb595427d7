//! The server's questions and notifications, carried to the participant they concern.
//!
//! An elicitation is put to the participant whose call caused it, as MCP itself would put
//! it: an `mcp/request` from the bridge to the caller with method `elicitation/create` and
//! the server's params (`message`, `mode`, `requestedSchema` or `url` and `elicitationId`),
//! its `correlation_id` naming the caller's request. The caller's `mcp/response` carries an
//! MCP `ElicitResult` (`{"action": "accept", "content": {...}}`, `decline` or `cancel`).
//! Accepted content is checked against the requested schema; content that breaks it is not
//! sent to the server: the question is put to the caller again with the reason in
//! `params._meta["mew/rejected"]` (at most [`MAX_REASKS`] times; an answer that still does not
//! fit cancels the question) and stays open until it is answered or its timeout cancels it.
//! An error response (a participant that does not take elicitations answers "method not
//! found") cancels the question. A question of an `input_required` round names its key in the
//! server's `inputRequests` in `params._meta["mew/inputKey"]`.
//!
//! A question whose call is unknown (a 2025 server's request on stdio, or on the HTTP GET
//! stream, names no call) goes to the one participant whose calls the server is serving at
//! that moment: nobody else's call can have caused it. With no call in flight, or calls of
//! several participants, it is not guessed at: it is cancelled at once and the reason
//! reported as [`McpEvent::Declined`]. Sampling goes the same way (`sampling/createMessage`, the answer
//! a `CreateMessageResult`) to the participant named by
//! [`BridgeConfig::sampling_answered_by`](super::BridgeConfig::sampling_answered_by), and
//! is declined with a reason when none is named.
//!
//! `roots/list` goes the way of an elicitation (to the caller, the answer a
//! `ListRootsResult`): the roots that matter are those of whoever caused the call, such as an
//! MCP host at the space's `/mcp`. A caller that cannot answer it (an error response: a MEW
//! participant answers "method not found"), a question with nobody to go to, and one left
//! unanswered until its timeout are answered with the bridge's own roots
//! ([`McpConfig::roots`](crate::mcp::McpConfig::roots)).
//!
//! Progress and log notifications of a call reach its caller as `mcp/request` notifications
//! (`notifications/progress`, `notifications/message`, the server's params unchanged)
//! correlated to the caller's request. A call's progress token is the caller's own
//! (`params._meta.progressToken`), or the id of its request envelope when it gave none. A log
//! line that came with no call stays in the bridge's own log.

use super::Bridge;
use crate::envelope::Kind;
use crate::mcp::{Ask, AskAnswer, AskId, ElicitationMode, McpCallId, McpEvent};
use crate::participant::{Draft, RequestError, RequestId, RequestOptions};
use crate::time::Time;
use serde_json::{Map, Value, json};

/// `_meta` key of a question that came in an `input_required` round: its key in the
/// server's `inputRequests`, so that a participant passing the round on (a host session) can
/// keep it.
pub const META_INPUT_KEY: &str = "mew/inputKey";

/// Times one question is put to its participant again after an answer that broke its
/// schema.
pub const MAX_REASKS: u32 = 3;

/// A question put to a participant, waiting for its response.
#[derive(Debug)]
pub(super) struct Asking {
    pub(super) ask_id: AskId,
    pub(super) ask: Ask,
    /// Who answers.
    pub(super) to: String,
    /// The envelope the question is about (the caller's request).
    pub(super) about: Option<String>,
    pub(super) reasks: u32,
}

impl Bridge {
    /// Where a question or notification about `call` goes: the caller and its request id.
    fn origin(&self, call: Option<McpCallId>) -> Option<(String, String)> {
        let call = self.calls.get(&call?)?;
        self.participant
            .call_origin(*call)
            .map(|(from, id)| (from.to_owned(), id.to_owned()))
    }

    /// The one participant with calls in flight on the server, and its request when it has
    /// exactly one: where a question that names no call goes.
    fn sole_caller(&self) -> Option<(String, Option<String>)> {
        let mut origins = self
            .calls
            .values()
            .filter_map(|c| self.participant.call_origin(*c));
        let (caller, request) = origins.next()?;
        let mut only_one = true;
        for (other, _) in origins {
            if other != caller {
                return None;
            }
            only_one = false;
        }
        Some((caller.to_owned(), only_one.then(|| request.to_owned())))
    }

    /// A progress token for a forwarded call: the caller's own, else its request's id.
    pub(super) fn with_progress_token(
        &self,
        call: crate::participant::CallId,
        params: Option<Value>,
    ) -> Option<Value> {
        let Some((_, request)) = self.participant.call_origin(call) else {
            return params;
        };
        let mut p = match params {
            Some(Value::Object(m)) => m,
            None => Map::new(),
            other => return other,
        };
        let meta = p
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.entry("progressToken")
                .or_insert_with(|| Value::String(request.to_owned()));
        }
        Some(Value::Object(p))
    }

    /// [`McpEvent::Asked`]: puts the question to the participant it concerns, or refuses it.
    pub(super) fn on_asked(
        &mut self,
        now: Time,
        ask_id: AskId,
        call_id: Option<McpCallId>,
        ask: Ask,
    ) {
        let origin = self.origin(call_id);
        let (to, about) = match &ask {
            Ask::Roots => match (origin, self.sole_caller()) {
                (Some((caller, request)), _) => (caller, Some(request)),
                (None, Some((caller, request))) => (caller, request),
                // Nobody to ask: the bridge's own roots answer, as they always may.
                (None, None) => {
                    let _ = self
                        .mcp
                        .answer(now, ask_id, AskAnswer::Refuse(String::new()));
                    return;
                }
            },
            Ask::Elicitation(_) => match (origin, self.sole_caller()) {
                (Some((caller, request)), _) => (caller, Some(request)),
                (None, Some((caller, request))) => (caller, request),
                (None, None) => {
                    return self.refuse(
                        now,
                        ask_id,
                        &ask,
                        "the question names no call of the space, and no single participant's \
                         calls are in flight, so nobody here can answer it",
                    );
                }
            },
            Ask::Sampling { .. } => match self.config.sampling_answered_by.clone() {
                Some(who) => (who, origin.map(|(_, request)| request)),
                None => {
                    return self.refuse(now, ask_id, &ask, "no participant may answer sampling");
                }
            },
        };
        let asking = Asking {
            ask_id,
            ask,
            to,
            about,
            reasks: 0,
        };
        self.put(now, asking, None);
    }

    /// Sends the question (again, with `rejected` saying why the last answer was refused).
    fn put(&mut self, now: Time, asking: Asking, rejected: Option<&str>) {
        let mut params = ask_params(&asking.ask);
        if let Some(key) = self.mcp.input_key(asking.ask_id) {
            let meta = params
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(meta) = meta {
                meta.insert(META_INPUT_KEY.into(), Value::String(key.to_owned()));
            }
        }
        if let Some(reason) = rejected {
            params
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(Value::Object(meta)) = params.get_mut("_meta") {
                meta.insert("mew/rejected".into(), Value::String(reason.to_owned()));
            }
        }
        let payload = json!({"method": asking.ask.method(), "params": params});
        let opts = RequestOptions {
            timeout: Some(self.config.mcp.asks.timeout),
            prefer_proposal: false,
        };
        let to = vec![asking.to.clone()];
        let sent = match &asking.about {
            Some(about) => self
                .participant
                .mcp_request_about(now, to, payload, about, opts),
            None => self.participant.mcp_request(now, to, payload, opts),
        };
        match sent {
            Ok(id) => {
                self.asking.insert(id, asking);
            }
            Err(e) => {
                let reason = format!("could not ask {}: {e}", asking.to);
                self.refuse(now, asking.ask_id, &asking.ask, &reason);
            }
        }
    }

    /// Refuses a question (an elicitation is cancelled, sampling answered with an error),
    /// saying why in [`McpEvent::Declined`].
    fn refuse(&mut self, now: Time, ask_id: AskId, ask: &Ask, reason: &str) {
        // The question may have closed meanwhile; then nothing is owed.
        let _ = self
            .mcp
            .answer(now, ask_id, AskAnswer::Refuse(reason.to_owned()));
        self.out.push_back(super::Output::Mcp(McpEvent::Declined {
            method: ask.method().to_owned(),
            reason: reason.to_owned(),
        }));
    }

    /// The response to one of our requests; `false` when it was not a question of ours.
    pub(super) fn on_answered(
        &mut self,
        now: Time,
        id: &RequestId,
        result: &Result<Value, RequestError>,
    ) -> bool {
        let Some(asking) = self.asking.remove(id) else {
            return false;
        };
        let answer = match result {
            Ok(v) => match read_answer(&asking.ask, v) {
                Ok(a) => a,
                Err(why) => return self.reask(now, asking, &why),
            },
            Err(e) => AskAnswer::Refuse(format!("{} did not answer: {e}", asking.to)),
        };
        match self.mcp.answer(now, asking.ask_id, answer) {
            // Unknown: closed meanwhile (timeout, call ended); nothing is owed.
            Ok(()) | Err(crate::mcp::AnswerError::Unknown(_)) => true,
            Err(e) => self.reask(now, asking, &e.to_string()),
        }
    }

    /// An answer that does not fit: the caller is asked again with the reason, a bounded
    /// number of times; the question stays open until its timeout either way.
    fn reask(&mut self, now: Time, mut asking: Asking, why: &str) -> bool {
        self.out.push_back(super::Output::Mcp(McpEvent::Declined {
            method: asking.ask.method().to_owned(),
            reason: format!("the answer of {} was refused: {why}", asking.to),
        }));
        if asking.reasks < MAX_REASKS {
            asking.reasks += 1;
            self.put(now, asking, Some(why));
        } else {
            // Asked enough: the server hears the question was not answered (an elicitation
            // is cancelled), rather than the call waiting out the question's timeout.
            let reason = format!(
                "{} answered {} times with an answer that does not fit: {why}",
                asking.to,
                MAX_REASKS + 1
            );
            self.refuse(now, asking.ask_id, &asking.ask, &reason);
        }
        true
    }

    /// A question closed without an answer: a late response is ignored.
    pub(super) fn on_ask_closed(&mut self, ask_id: AskId) {
        self.asking.retain(|_, a| a.ask_id != ask_id);
    }

    /// Progress and log lines of a call go to its caller.
    pub(super) fn notify_caller(&mut self, now: Time, e: &McpEvent) {
        let (call, method, params) = match e {
            McpEvent::Progress {
                call_id,
                token,
                progress,
                total,
                message,
            } => {
                let mut p = json!({"progressToken": token, "progress": progress});
                if let Some(t) = total {
                    p["total"] = json!(t);
                }
                if let Some(m) = message {
                    p["message"] = json!(m);
                }
                (*call_id, "notifications/progress", p)
            }
            McpEvent::Log {
                call_id,
                level,
                logger,
                data,
            } => {
                let mut p = json!({"level": level, "data": data});
                if let Some(l) = logger {
                    p["logger"] = json!(l);
                }
                (*call_id, "notifications/message", p)
            }
            _ => return,
        };
        let Some((caller, request)) = self.origin(call) else {
            return;
        };
        let draft = Draft::new(Kind::McpRequest)
            .to([caller])
            .correlation([request])
            .payload(json!({"jsonrpc": "2.0", "method": method, "params": params}));
        // A caller we may not notify simply does not see the progress; the call goes on.
        let _ = self.participant.send(now, draft);
    }
}

/// The question's params as the server sent them (MCP's own shape).
fn ask_params(ask: &Ask) -> Map<String, Value> {
    let v = match ask {
        Ask::Elicitation(e) => match &e.mode {
            ElicitationMode::Form { requested_schema } => json!({
                "mode": "form", "message": e.message, "requestedSchema": requested_schema}),
            ElicitationMode::Url {
                url,
                elicitation_id,
            } => {
                let mut v = json!({"mode": "url", "message": e.message, "url": url});
                if let Some(id) = elicitation_id {
                    v["elicitationId"] = json!(id);
                }
                v
            }
        },
        Ask::Sampling { params } => params.clone(),
        Ask::Roots => json!({}),
    };
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Reads a participant's `result` as the answer to `ask`; `Err` says what is wrong with it.
fn read_answer(ask: &Ask, result: &Value) -> Result<AskAnswer, String> {
    match ask {
        Ask::Sampling { .. } => Ok(AskAnswer::Sampled(result.clone())),
        Ask::Roots => Ok(AskAnswer::Roots(result.clone())),
        Ask::Elicitation(_) => match result.get("action").and_then(Value::as_str) {
            Some("accept") => match result.get("content") {
                None | Some(Value::Null) => Ok(AskAnswer::Accept(None)),
                Some(Value::Object(c)) => Ok(AskAnswer::Accept(Some(c.clone()))),
                Some(_) => Err("`content` is not an object".into()),
            },
            Some("decline") => Ok(AskAnswer::Decline),
            Some("cancel") => Ok(AskAnswer::Cancel),
            _ => Err("`action` is none of accept, decline, cancel".into()),
        },
    }
}
