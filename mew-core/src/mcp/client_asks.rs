//! The server's questions and how calls end: server requests answered by the client or put
//! to the owner, `input_required` rounds of the stateless revision, answers, and questions
//! nobody answered.

use super::*;
use crate::mcp::asks::{self as ask_rules, AnswerError, AskAnswer, SAMPLING_REFUSED};
use crate::mcp::stateless::{InputRequired, ResultKind};

impl McpClient {
    /// A request from the server: answered at once (`ping`, `roots/list`, what is refused)
    /// or put to the owner.
    pub(super) fn on_server_request(
        &mut self,
        now: Time,
        id: RpcId,
        method: &str,
        params: Option<Value>,
    ) {
        let ask = match ask_rules::parse_ask(method, params.as_ref()) {
            Ok(Some(Ask::Roots)) if !self.config.asks.roots => {
                return self.respond(&id, Ok(self.own_roots()));
            }
            Ok(Some(ask)) => ask,
            Ok(None) => {
                let outcome = server_requests::answer(method, &self.config.roots);
                return self.respond(&id, outcome);
            }
            Err(e) => return self.respond(&id, Err(e)),
        };
        if let Err(reason) = self.may_ask(&ask) {
            if matches!(ask, Ask::Roots) {
                // Nobody can be asked now: the client's own roots still answer.
                return self.respond(&id, Ok(self.own_roots()));
            }
            self.emit(McpEvent::Declined {
                method: method.to_owned(),
                reason: reason.clone(),
            });
            let err = match ask {
                // Not declared: what the client does not support is "method not found".
                Ask::Elicitation(_) => RpcError::new(
                    jsonrpc::codes::METHOD_NOT_FOUND,
                    format!("Method not found: {method} ({reason})"),
                ),
                Ask::Sampling { .. } => RpcError::new(SAMPLING_REFUSED, reason),
                Ask::Roots => unreachable!("answered above"),
            };
            return self.respond(&id, Err(err));
        }
        let call_id = self.inbound_call;
        let ask_id = self.open_ask(now, ask.clone(), AskOrigin::Request(id));
        self.emit(McpEvent::Asked {
            ask_id,
            call_id,
            round: None,
            ask,
        });
    }

    /// Whether the owner takes questions of this kind, and room for one more.
    fn may_ask(&self, ask: &Ask) -> Result<(), String> {
        let offered = match ask {
            Ask::Elicitation(_) => self.config.asks.elicitation,
            Ask::Sampling { .. } => self.config.asks.sampling,
            Ask::Roots => self.config.asks.roots,
        };
        if !offered {
            return Err(match ask {
                Ask::Elicitation(_) => "this client does not offer elicitation".into(),
                Ask::Sampling { .. } => "sampling is declined: nobody here may answer it".into(),
                Ask::Roots => "roots are not asked of anyone".into(),
            });
        }
        if self.asks.len() >= self.config.asks.max_open {
            return Err(format!(
                "{} questions are already waiting for an answer",
                self.asks.len()
            ));
        }
        Ok(())
    }

    /// The client's own roots, as a `ListRootsResult`.
    fn own_roots(&self) -> Value {
        json!({ "roots": self.config.roots })
    }

    /// A roots question that was not answered with roots is answered with the client's own.
    fn roots_fallback(&self, ask: &Ask, answer: AskAnswer) -> AskAnswer {
        match (ask, answer) {
            (Ask::Roots, a @ AskAnswer::Roots(_)) => a,
            (Ask::Roots, _) => AskAnswer::Roots(self.own_roots()),
            (_, a) => a,
        }
    }

    fn open_ask(&mut self, now: Time, ask: Ask, origin: AskOrigin) -> AskId {
        let ask_id = AskId(self.next_ask);
        self.next_ask += 1;
        let deadline = now + self.config.asks.timeout;
        self.asks.insert(
            ask_id,
            OpenAsk {
                ask,
                origin,
                deadline,
            },
        );
        ask_id
    }

    fn respond(&mut self, id: &RpcId, outcome: Result<Value, RpcError>) {
        let outcome = match &outcome {
            Ok(v) => Ok(v),
            Err(e) => Err(e),
        };
        self.transmit(Msg::Response { id, outcome });
    }

    /// The answer to a call's request arrived.
    pub(super) fn on_call_result(
        &mut self,
        now: Time,
        call: McpCallId,
        outcome: Result<Value, RpcError>,
    ) {
        let Some(state) = self.calls.get_mut(&call) else {
            return;
        };
        state.wire = None;
        let result = match outcome {
            Err(e) => return self.finish_call(call, Err(McpError::Server(e))),
            Ok(v) => v,
        };
        if !self.speaking.is_some_and(ProtocolVersion::is_stateless) {
            return self.finish_call(call, Ok(result));
        }
        match stateless::classify_result(result) {
            Ok(ResultKind::Complete(v)) => self.finish_call(call, Ok(v)),
            Ok(ResultKind::InputRequired(ir)) => self.begin_round(now, call, ir),
            Err(e) => self.finish_call(call, Err(McpError::BadResult(e.to_string()))),
        }
    }

    /// Ends a call and reports it.
    pub(super) fn finish_call(&mut self, call: McpCallId, result: Result<Value, McpError>) {
        let Some(state) = self.calls.remove(&call) else {
            return;
        };
        if let Some(wire) = state.wire {
            self.pending.remove(&wire);
        }
        self.close_call_asks(call, "the call ended");
        self.emit(McpEvent::CallCompleted {
            call_id: call,
            result,
        });
    }

    /// An `input_required` result: roots are answered here unless the owner takes them,
    /// everything else is put to the owner; the request is sent again once every answer is in.
    fn begin_round(&mut self, now: Time, call: McpCallId, ir: InputRequired) {
        let max = self.config.max_input_rounds;
        let round = match self.calls.get_mut(&call) {
            Some(s) => {
                s.round += 1;
                s.round
            }
            None => return,
        };
        if round > max {
            return self.finish_call(call, Err(McpError::TooManyRounds(max)));
        }
        let mut waiting = Waiting {
            request_state: ir.request_state,
            ..Waiting::default()
        };
        let mut asked = Vec::new();
        for (key, req) in ir.requests {
            let refused = match ask_rules::parse_ask(&req.method, Some(&req.params)) {
                Ok(Some(Ask::Roots)) if self.may_ask(&Ask::Roots).is_err() => {
                    waiting.responses.insert(key, self.own_roots());
                    continue;
                }
                Ok(Some(ask)) => match self.may_ask(&ask) {
                    Ok(()) => {
                        let ask_id = self.open_ask(
                            now,
                            ask.clone(),
                            AskOrigin::Input {
                                call,
                                key: key.clone(),
                            },
                        );
                        waiting.open.push(ask_id);
                        asked.push((ask_id, ask));
                        continue;
                    }
                    Err(reason) => McpError::Declined(format!("{} ({reason})", req.method)),
                },
                Ok(None) => McpError::Declined(format!("input of kind {}", req.method)),
                Err(e) => McpError::BadResult(e.message),
            };
            // One question that cannot be answered sinks the round.
            for (ask_id, _) in asked {
                self.asks.remove(&ask_id);
            }
            return self.finish_call(call, Err(refused));
        }
        let done = waiting.open.is_empty();
        if let Some(s) = self.calls.get_mut(&call) {
            s.waiting = Some(waiting);
        }
        for (ask_id, ask) in asked {
            self.emit(McpEvent::Asked {
                ask_id,
                call_id: Some(call),
                round: Some(round),
                ask,
            });
        }
        if done {
            self.retry_call(now, call);
        }
    }

    /// Sends a waiting call again with its answers and the server's state, under a new id.
    fn retry_call(&mut self, now: Time, call: McpCallId) {
        let Some(state) = self.calls.get_mut(&call) else {
            return;
        };
        let Some(w) = state.waiting.take() else {
            return;
        };
        let mut params = match &state.params {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        params.insert("inputResponses".into(), Value::Object(w.responses));
        if let Some(rs) = w.request_state {
            params.insert("requestState".into(), Value::String(rs));
        }
        let (method, timeout) = (state.method.clone(), state.timeout);
        let params = Value::Object(params);
        let wire = self.send_request(now, &method, Some(&params), timeout, Purpose::Call(call));
        if let Some(s) = self.calls.get_mut(&call) {
            s.wire = Some(wire);
        }
    }

    /// Answers a question of the server (see [`McpEvent::Asked`]). An answer that does not
    /// fit the question (content against the requested schema, a sampling result to an
    /// elicitation, ...) is refused and the question stays open.
    pub fn answer(
        &mut self,
        now: Time,
        ask_id: AskId,
        answer: AskAnswer,
    ) -> Result<(), AnswerError> {
        let open = self.asks.get(&ask_id).ok_or(AnswerError::Unknown(ask_id))?;
        let answer = self.roots_fallback(&open.ask, answer);
        let result = ask_rules::answer_result(&open.ask, answer)?;
        let open = self.asks.remove(&ask_id).expect("looked up above");
        self.deliver(now, ask_id, open.origin, result);
        Ok(())
    }

    fn deliver(
        &mut self,
        now: Time,
        ask_id: AskId,
        origin: AskOrigin,
        result: Result<Value, RpcError>,
    ) {
        match origin {
            AskOrigin::Request(id) => {
                if self.is_operational() {
                    self.respond(&id, result);
                }
            }
            AskOrigin::Input { call, key } => {
                let value = match result {
                    Ok(v) => v,
                    // Input responses hold results only: a refusal ends the call.
                    Err(e) => {
                        return self.finish_call(call, Err(McpError::Declined(e.message)));
                    }
                };
                let Some(w) = self.calls.get_mut(&call).and_then(|s| s.waiting.as_mut()) else {
                    return;
                };
                w.open.retain(|a| *a != ask_id);
                w.responses.insert(key, value);
                if w.open.is_empty() {
                    self.retry_call(now, call);
                }
            }
        }
    }

    /// Questions nobody answered in time: an elicitation is cancelled, sampling refused.
    pub(super) fn expire_asks(&mut self, now: Time) {
        let expired: Vec<AskId> = self
            .asks
            .iter()
            .filter(|(_, a)| a.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for ask_id in expired {
            let Some(open) = self.asks.remove(&ask_id) else {
                continue;
            };
            let reason = format!("no answer within {} s", self.config.asks.timeout.as_secs());
            self.emit(McpEvent::AskClosed {
                ask_id,
                reason: reason.clone(),
            });
            let answer = self.roots_fallback(&open.ask, ask_rules::unanswered(&reason));
            let result = ask_rules::answer_result(&open.ask, answer)
                .unwrap_or_else(|_| Ok(json!({ "action": "cancel" })));
            self.deliver(now, ask_id, open.origin, result);
        }
    }

    /// Closes the questions of an `input_required` round of `call`.
    pub(super) fn close_call_asks(&mut self, call: McpCallId, reason: &str) {
        let ids: Vec<AskId> = self
            .asks
            .iter()
            .filter(|(_, a)| matches!(&a.origin, AskOrigin::Input { call: c, .. } if *c == call))
            .map(|(id, _)| *id)
            .collect();
        for ask_id in ids {
            self.asks.remove(&ask_id);
            self.emit(McpEvent::AskClosed {
                ask_id,
                reason: reason.to_owned(),
            });
        }
    }
}
