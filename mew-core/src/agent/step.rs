//! One step of a task: the model's reply read, its tool calls sent, their outcomes
//! gathered as observations.

use super::*;
use task::{observation_of, steps_text, truncate};

impl Agent {
    pub(super) fn on_step_reply(&mut self, now: Time, slot: Slot, reply: ModelReply) {
        self.show_reasoning(now, slot, reply.reasoning.as_deref());
        let Some(task) = self.tasks.get_mut(&slot) else {
            return;
        };
        if task.final_call {
            let text = reply.content.unwrap_or_else(|| "(no answer)".into());
            self.finish_answer(now, slot, cut_note(text, reply.truncated));
            return;
        }
        match self.s.format {
            ReasoningFormat::Native => {
                if reply.tool_calls.is_empty() {
                    let text = reply.content.unwrap_or_default();
                    self.finish_answer(now, slot, cut_note(text, reply.truncated));
                    return;
                }
                let labels: Vec<String> = reply
                    .tool_calls
                    .iter()
                    .map(|c| match task.names.resolve(&c.name) {
                        Some((p, t)) => format!("{p}/{t}"),
                        None => c.name.clone(),
                    })
                    .collect();
                let thought = reply
                    .content
                    .clone()
                    .unwrap_or_else(|| format!("Calling {}", labels.join(", ")));
                task.text_calls = reply.text_calls;
                task.messages.push(match reply.text_calls {
                    // Written in text, the calls stay text: the server knows no tool calls.
                    Some(_) => Message::text(
                        Role::Assistant,
                        reply.raw_content.clone().unwrap_or_default(),
                    ),
                    None => Message {
                        role: Role::Assistant,
                        content: reply.content.clone(),
                        tool_calls: reply.tool_calls.clone(),
                        tool_call_id: None,
                    },
                });
                self.thought(now, slot, &thought);
                let mut pending = Vec::new();
                for (c, label) in reply.tool_calls.iter().zip(labels) {
                    let args = serde_json::from_str::<Value>(&c.arguments);
                    pending.push(self.dispatch(now, slot, &c.name, label, &c.id, args));
                }
                self.after_dispatch(now, slot, pending);
            }
            ReasoningFormat::Scratchpad => {
                let text = reply.raw_content.unwrap_or_default();
                task.messages
                    .push(Message::text(Role::Assistant, text.clone()));
                match prompt::parse_scratchpad(&text) {
                    Ok(Scratch::Respond { thought, message }) => {
                        if !thought.is_empty() {
                            self.thought(now, slot, &thought);
                        }
                        self.finish_answer(now, slot, message);
                    }
                    Ok(Scratch::Continue { thought }) => {
                        self.thought(now, slot, &thought);
                        self.observe_text(now, slot, thought, "continue".into(), String::new());
                    }
                    Ok(Scratch::Tool {
                        thought,
                        tool,
                        arguments,
                    }) => {
                        let shown = if thought.is_empty() {
                            format!("Calling {tool}")
                        } else {
                            thought.clone()
                        };
                        self.thought(now, slot, &shown);
                        let n = self.tasks.get(&slot).map_or(0, |t| t.iteration);
                        let p = self.dispatch(
                            now,
                            slot,
                            &tool,
                            tool.clone(),
                            &format!("step-{n}"),
                            Ok(arguments),
                        );
                        self.after_dispatch(now, slot, vec![p]);
                    }
                    Err(reason) => {
                        let obs = format!(
                            "Your reply could not be read: {reason}. Reply with one JSON object as instructed."
                        );
                        self.observe_text(
                            now,
                            slot,
                            String::new(),
                            "(unreadable reply)".into(),
                            obs,
                        );
                    }
                }
            }
        }
    }

    /// Shows the model's private reasoning of a step as a thought (what streaming has not
    /// shown already), unless configured away.
    fn show_reasoning(&mut self, now: Time, slot: Slot, reasoning: Option<&str>) {
        let Some(task) = self.tasks.get_mut(&slot) else {
            return;
        };
        let text = if task.thinking_live {
            std::mem::take(&mut task.thinking)
        } else {
            task.thinking.clear();
            reasoning.unwrap_or_default().to_owned()
        };
        task.thinking_live = false;
        if !text.trim().is_empty() && self.s.model_reasoning == ModelReasoning::Thoughts {
            self.thought(now, slot, text.trim());
        }
    }

    /// Records a step with no tool call (scratchpad) and asks again.
    pub(super) fn observe_text(
        &mut self,
        now: Time,
        slot: Slot,
        thought: String,
        action: String,
        observation: String,
    ) {
        let Some(task) = self.tasks.get_mut(&slot) else {
            return;
        };
        task.steps.push(Step {
            thought,
            action,
            observation: observation.clone(),
        });
        let act = self.act_turn(slot);
        if let Some(task) = self.tasks.get_mut(&slot) {
            task.messages.push(Message::text(Role::User, act));
        }
        self.next_step(now, slot);
    }

    /// The scratchpad turn after the latest step.
    pub(super) fn act_turn(&self, slot: Slot) -> String {
        let Some(task) = self.tasks.get(&slot) else {
            return String::new();
        };
        let steps = steps_text(&task.steps);
        let last = task
            .steps
            .last()
            .map(|s| s.observation.clone())
            .unwrap_or_default();
        let tools: Vec<String> = task.tools.iter().map(|t| t.name.clone()).collect();
        self.s.act.fill(|v| match v {
            "objective" => Some(task.trigger.text.clone()),
            "tools" => Some(tools.join(", ")),
            "observation" => Some(last.clone()),
            "steps" => Some(steps.clone()),
            _ => None,
        })
    }

    pub(super) fn thought(&mut self, now: Time, slot: Slot, text: &str) {
        if let Slot::Run(run) = slot {
            let step = self.tasks.get(&slot).map_or(0, |t| t.iteration);
            self.emit(AgentEvent::RunProgress {
                run,
                step,
                message: text.to_owned(),
            });
            return;
        }
        let Some(ctx) = self.tasks.get(&slot).and_then(|t| t.context.clone()) else {
            return;
        };
        if self.p.reasoning_thought(now, &ctx, text).is_ok()
            && let Some((_, Some(stream))) = &self.stream
        {
            let line = format!("{}\n", text.replace('\n', " "));
            let stream = stream.clone();
            let _ = self.p.send_stream_data(&stream, &line);
        }
    }

    /// Sends one tool call; an immediate failure becomes its observation.
    pub(super) fn dispatch(
        &mut self,
        now: Time,
        slot: Slot,
        name: &str,
        label: String,
        call_id: &str,
        args: Result<Value, serde_json::Error>,
    ) -> PendingTool {
        let mut pending = PendingTool {
            request: None,
            call_id: call_id.to_owned(),
            label,
            name: name.to_owned(),
            observation: None,
        };
        let Some(task) = self.tasks.get(&slot) else {
            return pending;
        };
        let resolved = task
            .names
            .resolve(name)
            .map(|(p, t)| (p.to_owned(), t.to_owned()));
        let Some((participant, tool)) = resolved else {
            // A tool left out of a headless offer because it needs approval: say so.
            let left_out = self.p.available_tools().into_iter().find(|a| {
                toolname::plain(&a.participant, &a.tool.name).as_deref() == Some(name)
                    || name == format!("{}/{}", a.participant, a.tool.name)
            });
            if let Some(a) = left_out
                && self.headless(slot)
            {
                let (p, t) = (a.participant, a.tool.name);
                pending.observation = Some(format!(
                    "Error: calling {p}/{t} needs a person's approval, and none is available here"
                ));
                return pending;
            }
            let known: Vec<String> = task.tools.iter().map(|t| t.name.clone()).collect();
            pending.observation = Some(format!(
                "Error: there is no tool named `{name}`. Available: {}",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ));
            return pending;
        };
        pending.label = format!("{participant}/{tool}");
        let arguments = match args {
            Ok(v @ Value::Object(_)) => v,
            Ok(other) => {
                pending.observation = Some(format!(
                    "Error: the arguments must be a JSON object, not {other}"
                ));
                return pending;
            }
            Err(e) => {
                pending.observation =
                    Some(format!("Error: the arguments are not valid JSON ({e})"));
                return pending;
            }
        };
        // Arguments that break the tool's schema go back to the model at once: no
        // round trip, and no proposal a person would have to refuse.
        let schema = self.tasks.get(&slot).and_then(|task| {
            let name = task.names.name_of(&participant, &tool)?;
            task.tools
                .iter()
                .find(|f| f.name == name)
                .map(|f| &f.parameters)
        });
        if let Some(schema) = schema
            && let Ok(compiled) = crate::schema::Schema::compile(schema)
            && let Err(v) = compiled.validate(&arguments)
        {
            pending.observation = Some(format!(
                "Error: the arguments do not match the schema of {participant}/{tool}: {v}"
            ));
            return pending;
        }
        let payload =
            json!({"method": "tools/call", "params": {"name": tool, "arguments": arguments}});
        if self.headless(slot) && !self.p.can_send(&Kind::McpRequest, Some(&payload)) {
            pending.observation = Some(format!(
                "Error: calling {participant}/{tool} needs a person's approval, and none is available here"
            ));
            return pending;
        }
        match self
            .p
            .mcp_request(now, vec![participant], payload, RequestOptions::default())
        {
            Ok(id) => pending.request = Some(id),
            Err(e) => pending.observation = Some(format!("Error: {e}")),
        }
        pending
    }

    pub(super) fn after_dispatch(&mut self, now: Time, slot: Slot, pending: Vec<PendingTool>) {
        let Some(task) = self.tasks.get_mut(&slot) else {
            return;
        };
        task.phase = Phase::Acting(pending);
        self.maybe_observe(now, slot);
    }

    pub(super) fn on_completed(
        &mut self,
        now: Time,
        id: &RequestId,
        result: &Result<Value, RequestError>,
    ) {
        if self.on_relayed_answer(now, id, result) {
            return;
        }
        let found = self
            .tasks
            .iter_mut()
            .find_map(|(slot, t)| match &mut t.phase {
                Phase::Acting(pending) => pending
                    .iter_mut()
                    .find(|p| p.request.as_ref() == Some(id) && p.observation.is_none())
                    .map(|p| (*slot, p)),
                _ => None,
            });
        let Some((slot, pending)) = found else {
            return;
        };
        pending.observation = Some(match result {
            Ok(v) => observation_of(v),
            Err(e) => format!("Error: {e}"),
        });
        self.maybe_observe(now, slot);
    }

    /// Once every tool call of the step has its observation, records them and asks again.
    pub(super) fn maybe_observe(&mut self, now: Time, slot: Slot) {
        let Some(task) = self.tasks.get_mut(&slot) else {
            return;
        };
        let Phase::Acting(pending) = &task.phase else {
            return;
        };
        if pending.iter().any(|p| p.observation.is_none()) {
            return;
        }
        let Phase::Acting(pending) = std::mem::replace(&mut task.phase, Phase::Thinking) else {
            unreachable!("checked above")
        };
        let thought = task
            .messages
            .last()
            .and_then(|m| m.content.clone())
            .unwrap_or_default();
        let mut in_text = Vec::new();
        for p in pending {
            let mut obs = p.observation.unwrap_or_default();
            truncate(&mut obs, MAX_OBSERVATION);
            task.steps.push(Step {
                thought: thought.clone(),
                action: p.label.clone(),
                observation: obs.clone(),
            });
            if self.s.format == ReasoningFormat::Native {
                match task.text_calls {
                    None => task.messages.push(Message::tool_result(&p.call_id, obs)),
                    Some(form) => in_text.push(text_result(form, &p.name, &obs)),
                }
            }
        }
        if !in_text.is_empty() {
            task.messages
                .push(Message::text(Role::User, in_text.join("\n")));
        }
        if self.s.format == ReasoningFormat::Scratchpad {
            let act = self.act_turn(slot);
            if let Some(task) = self.tasks.get_mut(&slot) {
                task.messages.push(Message::text(Role::User, act));
            }
        }
        self.next_step(now, slot);
    }
}

/// The answer, saying so when the length limit cut it.
fn cut_note(text: String, truncated: bool) -> String {
    if truncated {
        format!("{text}\n\n(The answer was cut short: the model reached its length limit.)")
    } else {
        text
    }
}

/// A tool's result in the form a model that wrote its call in text expects.
fn text_result(form: TextCalls, name: &str, observation: &str) -> String {
    match form {
        TextCalls::Hermes => format!(
            "<tool_response>\n{}\n</tool_response>",
            json!({"name": name, "content": observation})
        ),
        TextCalls::Json => format!("Result of {name}:\n{observation}"),
    }
}
