//! Proposals of others, controls, and the conversation history (compaction).

use super::*;

impl Agent {
    // ---- proposals of others ----

    pub(super) fn consider_fulfil(
        &mut self,
        now: Time,
        id: &str,
        from: &str,
        to: &[String],
        payload: &Value,
    ) {
        let me = self.me();
        if from == me {
            return;
        }
        let read_only = |target: &str, tool: &str| {
            self.p.discovery_status(target).is_some_and(|s| {
                s.tools.iter().any(|t| {
                    t.name == tool
                        && t.annotations
                            .as_ref()
                            .and_then(|a| a.get("readOnlyHint"))
                            .and_then(Value::as_bool)
                            == Some(true)
                })
            })
        };
        let Some(rule) = fulfil::matching(&self.s.auto_fulfil, from, to, payload, read_only) else {
            return;
        };
        if self.p.fulfil(now, id).is_ok() {
            self.emit(AgentEvent::AutoFulfilled {
                proposal: id.to_owned(),
                rule,
            });
        }
    }

    // ---- controls and context ----

    pub(super) fn on_control(&mut self, now: Time, id: &str, control: &Control) {
        match control {
            Control::Forget { direction, entries } => {
                let n = entries
                    .map_or(self.history.len(), |e| e as usize)
                    .min(self.history.len());
                let mut freed = 0;
                for _ in 0..n {
                    let m = match direction {
                        ForgetDirection::Oldest => self.history.pop_front(),
                        ForgetDirection::Newest => self.history.pop_back(),
                    };
                    freed += m.map_or(0, |m| m.estimate_tokens());
                }
                let _ = self.p.complete_forget(now, id, freed, n as u64);
            }
            Control::Clear => {
                self.history.clear();
                self.context_tokens = 0;
                let _ = self.p.complete_clear(now, id);
            }
            Control::Compact { .. } => {
                if !self.chat_side_busy() {
                    self.start_compaction(now, Some(id.to_owned()));
                } else if self.compact_requests.len() < 16 {
                    self.compact_requests.push_back(id.to_owned());
                } else {
                    let _ = self.p.complete_compact(
                        now,
                        id,
                        CompactOutcome::Skipped {
                            reason: Some("too many compactions waiting".into()),
                        },
                    );
                }
            }
            Control::Restart => {
                self.end_all(now, "restart");
                self.calls.clear();
                self.queue.clear();
                self.history.clear();
                self.compact_requests.clear();
                let _ = self.p.complete_restart(now, id);
            }
            Control::Shutdown => {
                self.end_all(now, "shutdown");
                self.queue.clear();
                let _ = self.p.complete_shutdown(now, id);
                if !self.exited {
                    self.exited = true;
                    self.emit(AgentEvent::Exit);
                }
            }
            Control::Pause { .. } | Control::Resume | Control::RequestStatus { .. } => {}
        }
    }

    pub(super) fn needs_compaction(&self) -> bool {
        self.s.context_window > 0
            && !self.history.is_empty()
            && self.context_tokens as f64 >= (1.0 - HEADROOM) * self.s.context_window as f64
    }

    pub(super) fn start_compaction(&mut self, now: Time, control: Option<String>) {
        if self.history.is_empty() {
            if let Some(id) = control {
                let _ = self.p.complete_compact(
                    now,
                    &id,
                    CompactOutcome::Skipped {
                        reason: Some("no conversation history".into()),
                    },
                );
            }
            return;
        }
        let _ = self.p.report_status(now, Some(Status::Compacting));
        let transcript: Vec<String> = self
            .history
            .iter()
            .map(|m| {
                format!(
                    "{}: {}",
                    match m.role {
                        Role::User => "user",
                        _ => "assistant",
                    },
                    m.content.as_deref().unwrap_or("")
                )
            })
            .collect();
        let request = self.request(
            vec![
                Message::text(
                    Role::System,
                    "Summarise the conversation below in a few sentences, keeping names, facts and open questions.",
                ),
                Message::text(Role::User, transcript.join("\n")),
            ],
            Vec::new(),
        );
        self.issue(Purpose::Compact(control), request);
    }

    pub(super) fn finish_compaction(
        &mut self,
        now: Time,
        control: Option<String>,
        summary: Option<String>,
    ) {
        let before: u64 = self.history.iter().map(Message::estimate_tokens).sum();
        let messages = self.history.len() as u64;
        let outcome = match summary.filter(|s| !s.trim().is_empty()) {
            Some(s) => {
                self.history.clear();
                let m = Message::text(
                    Role::System,
                    format!("Summary of the earlier conversation: {s}"),
                );
                let after = m.estimate_tokens();
                self.history.push_back(m);
                self.context_tokens = self
                    .context_tokens
                    .saturating_sub(before.saturating_sub(after));
                CompactOutcome::Done {
                    freed_tokens: before.saturating_sub(after),
                    freed_messages: messages.saturating_sub(1),
                }
            }
            None => {
                // Without a summary, the oldest half goes: headroom matters more than recall.
                let n = self.history.len() / 2;
                self.history.drain(..n);
                self.context_tokens /= 2;
                CompactOutcome::Done {
                    freed_tokens: before / 2,
                    freed_messages: n as u64,
                }
            }
        };
        match control {
            Some(id) => {
                let _ = self.p.complete_compact(now, &id, outcome);
            }
            None => {
                self.p
                    .set_context_usage(now, self.context_tokens, self.history.len() as u64);
                let _ = self.p.report_status(now, Some(Status::Compacted));
            }
        }
    }
}
