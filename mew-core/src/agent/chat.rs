//! Which chats become tasks: the strategy's decision, the reply limit, the queue, and
//! the classification call.

use super::*;

impl Agent {
    pub(super) fn consider_chat(&mut self, now: Time, env: &Envelope) {
        let me = self.me();
        let person = self.p.is_person(&env.from);
        match strategy::decide(&self.s, &me, &self.name(), env, person) {
            strategy::Decision::Ignore(None) => {}
            strategy::Decision::Ignore(Some(reason)) => self.emit(AgentEvent::ChatIgnored {
                id: env.id.clone(),
                reason,
            }),
            strategy::Decision::Respond { text, classify } => {
                let recent = self.replies.entry(env.from.clone()).or_default();
                while recent
                    .front()
                    .is_some_and(|t| now.saturating_since(*t) >= Duration::from_secs(60))
                {
                    recent.pop_front();
                }
                if recent.len() >= self.s.chat.max_replies_per_minute as usize {
                    self.emit(AgentEvent::ChatIgnored {
                        id: env.id.clone(),
                        reason: format!("reply limit reached for {}", env.from),
                    });
                    return;
                }
                if self.queue.len() >= self.s.chat.max_queue
                    && let Some(dropped) = self.queue.pop_front()
                {
                    self.emit(AgentEvent::ChatIgnored {
                        id: dropped.id,
                        reason: "queue full; dropped the oldest".into(),
                    });
                }
                self.queue.push_back(Trigger {
                    id: env.id.clone(),
                    from: env.from.clone(),
                    text,
                    classify,
                });
            }
        }
    }

    pub(super) fn classify_request(&self, t: &Trigger) -> ModelRequest {
        let tools: Vec<String> = self
            .p
            .available_tools()
            .into_iter()
            .map(|t| t.name)
            .collect();
        // Its own short prompt (not the task's system prompt), no tools and a small reply
        // budget: the call is made for every chat that is not addressed to the agent.
        let prompt = format!(
            "You are {}, an AI agent with these tools: {}.\nA message was sent in the conversation by {}: {:?}\n\nShould you respond to this message? Consider whether it is a question you can answer, whether it relates to your tools, and whether you can add unique value.\nReturn only a JSON object: {{\"shouldRespond\": boolean, \"confidence\": number between 0 and 1, \"reason\": string}}",
            self.name(),
            if tools.is_empty() {
                "none".into()
            } else {
                tools.join(", ")
            },
            t.from,
            t.text
        );
        let mut request = self.request(vec![Message::text(Role::User, prompt)], Vec::new());
        request.max_tokens = Some(self.s.chat.classify_max_tokens);
        request.temperature = Some(0.0);
        request.stream = false;
        request
    }

    /// The classification's verdict (`None`: the call failed or its answer could not be
    /// read, and the question rule decides).
    pub(super) fn on_classified(
        &mut self,
        now: Time,
        t: Trigger,
        verdict: Result<(bool, f64), String>,
    ) {
        let threshold = self.s.chat.confidence_threshold;
        match verdict {
            Ok((true, c)) if c >= threshold => self.start_task(now, t),
            Ok((yes, c)) => self.emit(AgentEvent::ChatIgnored {
                id: t.id,
                reason: format!(
                    "the model judged it not for this agent (shouldRespond {yes}, confidence {c}, threshold {threshold})"
                ),
            }),
            Err(why) if self.s.chat.respond_to_questions && t.text.contains('?') => {
                let _ = why;
                self.start_task(now, t)
            }
            Err(why) => self.emit(AgentEvent::ChatIgnored {
                id: t.id,
                reason: format!("{why}, and it asks no question"),
            }),
        }
    }
}
