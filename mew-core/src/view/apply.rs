//! How each envelope shows: what it adds to the items, the members, the queue, the folds,
//! the streams and the suggestions.

use super::chatter::{self, line_and_body, short, value_text};
use super::{Change, Fold, ItemKind, Proposal, Stream, Suggestion, View, remember};
use crate::envelope::{Envelope, Kind};
use crate::participant::MemberChange;
use serde_json::Value;
use std::collections::BTreeMap;

/// What a proposal asks, in words: `tools/call write_file on files`.
fn what(payload: &Value, to: &[String]) -> String {
    let method = payload["method"].as_str().unwrap_or("?");
    match payload["params"]["name"].as_str() {
        Some(tool) => format!("{method} {tool} on {}", to.join(", ")),
        None => format!("{method} on {}", to.join(", ")),
    }
}

impl Fold {
    fn summarize(&mut self) {
        self.summary = match &self.conclusion {
            Some(c) => format!("{} reasoned in {} step(s): {c}", self.who, self.steps),
            None if self.steps == 0 => format!("{} is thinking…", self.who),
            None => format!(
                "{} is thinking ({} thought(s)): {}",
                self.who, self.steps, self.latest
            ),
        };
    }
}

impl View {
    /// Shows one envelope; `past` for one of the history (told, its live copy awaited).
    pub(super) fn apply(&mut self, env: &Envelope, past: bool) {
        if env.kind != Kind::SystemWelcome && !env.id.is_empty() {
            // A welcome is not kept in the gateway's history: no place to resume from.
            if self.seen.len() >= self.limits.seen.max(1)
                && let Some(old) = self.seen.pop_front()
            {
                self.seen_set.remove(&old);
            }
            if self.seen_set.insert(env.id.clone(), past).is_none() {
                self.seen.push_back(env.id.clone());
            }
            self.last_seen = Some(env.id.clone());
        }
        let from = env.from.as_str();
        let payload = env.payload.as_ref().unwrap_or(&Value::Null);
        match &env.kind {
            Kind::SystemWelcome => self.on_welcome(payload),
            Kind::SystemPresence => self.on_presence(payload, past),
            Kind::Chat => {
                let text = payload["text"].as_str().unwrap_or_default().to_owned();
                self.push(ItemKind::Chat, from, text, Vec::new(), false);
            }
            Kind::McpProposal => self.on_proposal(env, payload),
            Kind::McpWithdraw | Kind::McpReject | Kind::McpRequest => self.on_settling(env),
            Kind::McpResponse => self.on_response(env, payload),
            Kind::ReasoningStart => {
                let mut fold = Fold {
                    context: env.id.clone(),
                    who: from.to_owned(),
                    ..Fold::default()
                };
                fold.summarize();
                // The item first: the oldest item it may push out takes its fold along.
                self.push_item(
                    ItemKind::Reasoning,
                    from,
                    String::new(),
                    Vec::new(),
                    false,
                    Some(env.id.clone()),
                );
                self.state.folds.insert(env.id.clone(), fold);
                self.fold_changed(&env.id);
            }
            Kind::ReasoningThought | Kind::ReasoningConclusion => {
                let text = short(&payload["message"], 200);
                let ctx = env.context.as_deref().unwrap_or_default();
                match self.state.folds.get_mut(ctx) {
                    Some(f) => {
                        if env.kind == Kind::ReasoningThought {
                            f.steps += 1;
                            f.latest = text;
                        } else {
                            f.conclusion = Some(text);
                        }
                        f.summarize();
                        self.fold_changed(ctx);
                    }
                    None => {
                        let line = format!("{from}: {text}");
                        self.push(ItemKind::Thought, from, line, Vec::new(), false);
                    }
                }
            }
            Kind::SystemError => {
                let line = format!(
                    "error: {} {}",
                    payload["error"].as_str().unwrap_or_default(),
                    payload["message"].as_str().unwrap_or_default()
                );
                self.push(ItemKind::Error, from, line, Vec::new(), false);
            }
            Kind::StreamOpen => {
                if let Some(sid) = payload["stream_id"].as_str() {
                    if self.state.streams.len() >= self.limits.streams.max(1) {
                        self.state.streams.remove(0);
                    }
                    self.state.streams.retain(|s| s.id != sid);
                    self.state.streams.push(Stream {
                        id: sid.to_owned(),
                        owner: from.to_owned(),
                    });
                    self.changed(|s| Change::Streams(s.streams.clone()));
                }
            }
            Kind::StreamClose => {
                if let Some(sid) = payload["stream_id"].as_str() {
                    self.state.streams.retain(|s| s.id != sid);
                    self.changed(|s| Change::Streams(s.streams.clone()));
                }
            }
            Kind::ParticipantStatus if !past => self.on_status(from, payload),
            Kind::CapabilityGrant | Kind::CapabilityRevoke => {
                self.note(format!(
                    "{from} {}: {}",
                    env.kind.as_str(),
                    short(payload, 120)
                ));
            }
            _ => {}
        }
    }

    fn fold_changed(&mut self, ctx: &str) {
        if let Some(f) = self.state.folds.get(ctx) {
            let f = f.clone();
            self.changed(|_| Change::Fold(f));
        }
    }

    fn on_welcome(&mut self, payload: &Value) {
        let you = &payload["you"];
        if you["id"].as_str().is_some_and(|y| y != self.state.me) && !self.state.me.is_empty() {
            return; // someone else's welcome
        }
        if let Some(id) = you["id"].as_str() {
            self.state.me = id.to_owned();
        }
        self.mine = you["capabilities"]
            .as_array()
            .into_iter()
            .flatten()
            .map(chatter::capability_label)
            .collect();
        self.me_person = you["person"] == true;
        if let Some(list) = payload["participants"].as_array() {
            let me = self.state.me.clone();
            for change in self.others.welcome(&me, list) {
                if let MemberChange::Left(id) = change {
                    self.tools.remove(&id);
                    self.forget_notice(&id);
                }
            }
        }
        self.refresh_members();
        let status = format!("joined as {}", self.state.me);
        self.set_status(status);
    }

    /// What the live copy of an envelope the history told changes: who is here and their
    /// status (nothing is shown again).
    pub(super) fn take_effect(&mut self, env: &Envelope) {
        let payload = env.payload.as_ref().unwrap_or(&Value::Null);
        match env.kind {
            Kind::SystemPresence => {
                self.follow_presence(payload);
            }
            Kind::ParticipantStatus => self.on_status(&env.from, payload),
            _ => {}
        }
    }

    /// Joins and leaves, by the participant's rule: what each change did.
    fn follow_presence(
        &mut self,
        payload: &Value,
    ) -> Vec<Result<Option<MemberChange>, &'static str>> {
        let me = self.state.me.clone();
        let results = self.others.presence(&me, payload);
        for r in &results {
            if let Ok(Some(MemberChange::Left(id))) = r {
                self.tools.remove(id);
                self.forget_notice(id);
            }
        }
        self.refresh_members();
        results
    }

    /// Joins and leaves, applied unless `past`; a note tells what was announced.
    fn on_presence(&mut self, payload: &Value, past: bool) {
        let results = if past {
            Vec::new()
        } else {
            self.follow_presence(payload)
        };
        if payload["event"] == "batch" {
            // A crowded space's joins and leaves, gathered: one line for all of them.
            let changes = payload["changes"].as_array().map(Vec::as_slice);
            let count = |e: &str| {
                changes
                    .unwrap_or_default()
                    .iter()
                    .filter(|c| c["event"] == e && c["participant"]["id"].is_string())
                    .count()
            };
            let omitted = payload["omitted"].as_u64().unwrap_or(0);
            self.note(format!(
                "{} joined, {} left ({omitted} more not listed; {} online)",
                count("join"),
                count("leave"),
                payload["online"]
            ));
        } else if results.iter().all(Result::is_ok)
            && let Some(pid) = payload["participant"]["id"].as_str()
        {
            let what = if payload["event"] == "leave" {
                "left"
            } else {
                "joined"
            };
            self.note(format!("{pid} {what}"));
        }
    }

    fn on_proposal(&mut self, env: &Envelope, payload: &Value) {
        self.observe(env);
        let to = env.to.clone().unwrap_or_default();
        let p = Proposal {
            id: env.id.clone(),
            from: env.from.clone(),
            what: what(payload, &to),
            to,
            payload: payload.clone(),
            capability: crate::automation::narrowest(payload),
        };
        if self.proposals.len() >= self.limits.proposals.max(1) {
            self.proposals.pop_front();
        }
        self.proposals.push_back(p.clone());
        let args = &payload["params"]["arguments"];
        let head = format!("{} proposes {}", p.from, p.what);
        let (text, body) = if args.is_null() {
            (head, Vec::new())
        } else {
            line_and_body(&format!("{head}:"), &value_text(args))
        };
        self.push(ItemKind::Proposal, &env.from, text, body, false);
        if env.from != self.state.me {
            if self.state.queue.len() >= self.limits.queue.max(1) {
                self.state.queue.pop_front();
            }
            self.state.queue.push_back(p);
            self.queue_changed();
        }
    }

    /// A withdrawal, a rejection or a request: it may settle proposals (which leave the
    /// queue, wherever they were decided) and is told with what it decided.
    fn on_settling(&mut self, env: &Envelope) {
        let correlated: &[String] = env.correlation_id.as_deref().unwrap_or_default();
        if env.kind != Kind::McpWithdraw && !correlated.is_empty() {
            self.observe(env);
            self.refresh_suggestions();
        }
        let before = self.state.queue.len();
        self.state.queue.retain(|p| !correlated.contains(&p.id));
        let closed = self.state.queue.len() < before;
        if closed {
            self.queue_changed();
        }
        let known = correlated
            .iter()
            .find_map(|c| self.proposals.iter().find(|p| &p.id == c))
            .cloned();
        match known {
            // What became of a proposal, whoever decided (this view, another screen of the
            // same person, someone else), with what it was.
            Some(p) => self.decided(env, &p),
            None if closed => self.note(format!("proposal settled by {}", env.from)),
            None if env.kind == Kind::McpRequest && env.from != self.state.me => {
                self.on_request(env);
            }
            None => {}
        }
    }

    /// A proposal's outcome: approved (its fulfilling request, with the arguments it was
    /// called with), rejected (with the reason) or withdrawn.
    fn decided(&mut self, env: &Envelope, p: &Proposal) {
        let from = env.from.as_str();
        let whose = if p.from == from {
            "its".to_owned()
        } else {
            format!("{}'s", p.from)
        };
        let payload = env.payload.as_ref().unwrap_or(&Value::Null);
        if env.kind == Kind::McpRequest {
            let head = format!("proposal approved by {from}: {whose} {}", p.what);
            let args = &payload["params"]["arguments"];
            let (text, body) = if args.is_null() {
                (head, Vec::new())
            } else {
                line_and_body(&format!("{head}:"), &value_text(args))
            };
            self.push(ItemKind::Decision, from, text, body, false);
            return;
        }
        let how = if env.kind == Kind::McpReject {
            "rejected"
        } else {
            "withdrawn"
        };
        let reason = payload["reason"]
            .as_str()
            .map(|r| format!(": {}", short(&Value::from(r), 200)))
            .unwrap_or_default();
        self.note(format!(
            "proposal {how} by {from}{reason} ({whose} {})",
            p.what
        ));
    }

    /// Someone else's request: discovery is background; a tool call shows its arguments.
    fn on_request(&mut self, env: &Envelope) {
        let from = env.from.as_str();
        let payload = env.payload.as_ref().unwrap_or(&Value::Null);
        let method = payload["method"].as_str().unwrap_or("?");
        let to = env.to.as_deref().unwrap_or_default().join(", ");
        let head = format!("{from} calls {} on {to}", short(&payload["method"], 40));
        // A request that fulfils a proposal was asked for by a person: never background.
        if chatter::is_discovery(method) && env.correlation_id.is_none() {
            remember(
                &mut self.background_ids,
                env.id.clone(),
                self.limits.background_ids,
            );
            self.push(ItemKind::Request, from, head, Vec::new(), true);
            return;
        }
        let (text, body) = match payload["params"]["name"].as_str() {
            Some(tool) => line_and_body(
                &format!("{from} calls {tool} on {to}:"),
                &value_text(&payload["params"]["arguments"]),
            ),
            None => (head, Vec::new()),
        };
        self.push(ItemKind::Request, from, text, body, false);
    }

    /// An answer: to background it is background (so is any listing); a long one folds.
    fn on_response(&mut self, env: &Envelope, payload: &Value) {
        let r = &payload["result"];
        let to_background = env
            .correlation_id
            .iter()
            .flatten()
            .any(|c| self.background_ids.contains(c));
        let text = match r["content"].as_array() {
            Some(items) => items
                .iter()
                .map(|i| {
                    i["text"]
                        .as_str()
                        .map_or_else(|| i.to_string(), str::to_owned)
                })
                .collect::<Vec<_>>()
                .join("\n"),
            None if r.is_null() => value_text(&payload["error"]),
            None => value_text(r),
        };
        let head = format!("{} answers:", env.from);
        // A listing is background even when it answers this participant's own discovery.
        if to_background || chatter::is_listing(r) {
            let body = chatter::text_lines(&text);
            self.push(ItemKind::Response, &env.from, head, body, true);
            return;
        }
        let (text, body) = line_and_body(&head, &text);
        self.push(ItemKind::Response, &env.from, text, body, false);
    }

    fn observe(&mut self, env: &Envelope) {
        let line = env.to_json();
        remember(&mut self.observed, line, self.limits.observed);
    }

    /// New suggestions from the decisions seen, each made once.
    fn refresh_suggestions(&mut self) {
        let d = crate::automation::decisions(self.observed.iter().map(String::as_str));
        let found = crate::automation::suggest(&d, self.limits.suggest_after, &BTreeMap::new());
        let mut new = false;
        for s in found {
            let key = format!("{} {}", s.recipient, s.capability);
            if self.suggested.contains(&key) {
                continue;
            }
            remember(&mut self.suggested, key.clone(), self.limits.observed);
            let reason = s.grant_payload()["reason"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let summary = format!(
                "{} was approved {} times by {} ({} to {})",
                s.recipient,
                s.approved.len(),
                s.approvers.join(", "),
                s.first,
                s.last
            );
            if self.state.suggestions.len() >= self.limits.queue.max(1) {
                self.state.suggestions.pop_front();
            }
            self.state.suggestions.push_back(Suggestion {
                key,
                recipient: s.recipient,
                capability: s.capability,
                approved: s.approved,
                approvers: s.approvers,
                first: s.first,
                last: s.last,
                reason,
                summary,
            });
            new = true;
        }
        if new {
            self.changed(|s| Change::Suggestions(s.suggestions.iter().cloned().collect()));
        }
    }
}
