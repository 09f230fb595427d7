//! A task's life: taken up, its tools offered, its model calls made, and its end.

use super::*;

impl Agent {
    pub(super) fn start_task(&mut self, now: Time, t: Trigger) {
        // Whoever sent it learns that this agent took it on (a chat to everyone too: others
        // who might answer it see that someone does).
        if self.p.pending_chats().any(|c| c.id == t.id) {
            let _ = self.p.acknowledge_chat(now, &t.id, "received");
        } else {
            let _ = self
                .p
                .acknowledge_broadcast(now, &t.id, &t.from, "received");
        }
        let context = if self.s.reasoning_enabled {
            let first_line: String = t
                .text
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(80)
                .collect();
            self.p
                .reasoning_start(now, &format!("Working on: {first_line}"), Some(&t.id))
                .ok()
        } else {
            None
        };
        if self.s.stream_reasoning && context.is_some() {
            self.stream = self
                .p
                .request_stream(
                    now,
                    json!({"direction": "upload", "description": "reasoning", "encoding": "text"}),
                    Vec::new(),
                )
                .ok()
                .map(|id| (id, None));
        }
        self.emit(AgentEvent::TaskStarted {
            trigger: t.id.clone(),
            from: t.from.clone(),
        });
        self.begin(now, Slot::Chat, t, context);
    }

    /// Sets a task up in `slot` and, unless it must wait for discoveries, asks the model.
    pub(super) fn begin(&mut self, now: Time, slot: Slot, t: Trigger, context: Option<String>) {
        self.hurry_discoveries(now);
        // A run may come (from an MCP host) while the agent is still joining its space:
        // it waits for the welcome and the discoveries it starts, within `discovery_wait`.
        let joining = matches!(
            self.p.state(),
            ClientState::Connecting | ClientState::Connected | ClientState::Joined
        );
        let wait =
            (self.p.discoveries_pending() > 0 || joining) && !self.s.discovery_wait.is_zero();
        self.tasks.insert(
            slot,
            Task {
                trigger: t,
                context,
                iteration: 0,
                messages: Vec::new(),
                steps: Vec::new(),
                names: ToolNames::default(),
                tools: Vec::new(),
                phase: Phase::Discovering {
                    until: now + self.s.discovery_wait,
                },
                final_call: false,
                text_calls: None,
                thinking: String::new(),
                thinking_live: false,
            },
        );
        if !wait {
            self.first_step(now, slot);
        }
    }

    /// Discoveries still waiting for their staggered slot are wanted now.
    pub(super) fn hurry_discoveries(&mut self, now: Time) {
        let scheduled: Vec<String> = self
            .p
            .discovery_statuses()
            .filter(|(_, st)| st.state == participant::DiscoveryState::NotStarted)
            .map(|(id, _)| id.to_owned())
            .collect();
        for id in scheduled {
            let _ = self.p.discover_tools(now, &id);
        }
    }

    /// Tasks waiting in [`Phase::Discovering`].
    pub(super) fn waiting(&self) -> Vec<Slot> {
        self.tasks
            .iter()
            .filter(|(_, t)| matches!(t.phase, Phase::Discovering { .. }))
            .map(|(s, _)| *s)
            .collect()
    }

    /// The tools, the first messages, and the first model call.
    pub(super) fn first_step(&mut self, now: Time, slot: Slot) {
        let mut tools = Vec::new();
        let mut listing = Vec::new();
        let headless = self.headless(slot);
        let offered: Vec<_> = self
            .p
            .available_tools()
            .into_iter()
            // Offered headless, a tool that needs approval could only fail.
            .filter(|t| !headless || self.may_call_directly(&t.participant, &t.tool.name))
            .collect();
        let names = ToolNames::new(
            offered
                .iter()
                .map(|t| (t.participant.as_str(), t.tool.name.as_str())),
        );
        for t in offered {
            let name = names
                .name_of(&t.participant, &t.tool.name)
                .unwrap_or_default()
                .to_owned();
            let label = format!("{}/{}", t.participant, t.tool.name);
            let what = t.tool.description.clone().unwrap_or_default();
            let parameters = t
                .tool
                .input_schema
                .clone()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
            listing.push(match self.s.format {
                ReasoningFormat::Native => format!("- {label}: {what}"),
                ReasoningFormat::Scratchpad => {
                    format!("- {label}: {what}; arguments: {parameters}")
                }
            });
            tools.push(FunctionDef {
                name,
                description: format!(
                    "{what} (tool `{}` of participant `{}`)",
                    t.tool.name, t.participant
                ),
                parameters,
            });
        }
        let tool_list = if listing.is_empty() {
            "(none)".to_owned()
        } else {
            listing.join("\n")
        };
        let (me, name) = (self.me(), self.name());
        let Some(task) = self.tasks.get_mut(&slot) else {
            return;
        };
        let mut system = self.s.system.fill(|v| match v {
            "name" => Some(name.clone()),
            "tools" => Some(tool_list.clone()),
            _ => None,
        });
        if self.s.format == ReasoningFormat::Scratchpad {
            let fmt = Template::parse(SCRATCHPAD_FORMAT, &["tools"]).expect("built-in template");
            system.push_str("\n\n");
            system.push_str(&fmt.fill(|_| Some(tool_list.clone())));
        }
        let mut messages = vec![Message::text(Role::System, system)];
        if slot == Slot::Chat {
            messages.extend(self.history.iter().cloned());
        }
        let user = self.s.reason.fill(|v| match v {
            "input" => Some(task.trigger.text.clone()),
            "tools" => Some(tool_list.clone()),
            "name" => Some(me.clone()),
            "from" => Some(task.trigger.from.clone()),
            _ => None,
        });
        messages.push(Message::text(Role::User, user));
        task.messages = messages;
        task.names = names;
        task.tools = tools;
        task.phase = Phase::Thinking;
        self.next_step(now, slot);
    }

    pub(super) fn headless(&self, slot: Slot) -> bool {
        self.s.headless || matches!(slot, Slot::Run(_))
    }

    /// Whether a `tools/call` of `tool` at `participant` may go as a request (not only as a
    /// proposal).
    pub(super) fn may_call_directly(&self, _participant: &str, tool: &str) -> bool {
        let payload = json!({"method": "tools/call", "params": {"name": tool}});
        self.p.can_send(&Kind::McpRequest, Some(&payload))
    }

    pub(super) fn next_step(&mut self, _now: Time, slot: Slot) {
        let Some(task) = self.tasks.get_mut(&slot) else {
            return;
        };
        task.iteration += 1;
        task.phase = Phase::Thinking;
        let (messages, tools) = if task.iteration > self.s.max_iterations {
            task.final_call = true;
            let steps = steps_text(&task.steps);
            let last = task
                .steps
                .last()
                .map(|s| s.observation.clone())
                .unwrap_or_default();
            let input = task.trigger.text.clone();
            let text = self.s.respond.fill(|v| match v {
                "observation" => Some(last.clone()),
                "input" => Some(input.clone()),
                "steps" => Some(steps.clone()),
                _ => None,
            });
            let mut m = task.messages.clone();
            m.push(Message::text(Role::User, text));
            (m, Vec::new())
        } else {
            let tools = match self.s.format {
                ReasoningFormat::Native => task.tools.clone(),
                ReasoningFormat::Scratchpad => Vec::new(),
            };
            (task.messages.clone(), tools)
        };
        let mut request = self.request(messages, tools);
        request.stream = self.model_stream;
        self.issue(Purpose::Step(slot), request);
    }

    pub(super) fn finish_answer(&mut self, now: Time, slot: Slot, text: String) {
        let text = if text.trim().is_empty() {
            "(the model gave no answer)".to_owned()
        } else {
            text
        };
        self.end_task(now, slot, TaskOutcome::Answered(text), true);
    }

    pub(super) fn on_model_failed(&mut self, now: Time, purpose: Purpose, err: ModelError) {
        self.emit(AgentEvent::ModelFailed(err.clone()));
        match purpose {
            Purpose::Step(slot) => {
                self.end_task(now, slot, TaskOutcome::Failed(err.message), true);
            }
            Purpose::Classify(t) => {
                self.on_classified(now, t, Err(format!("could not classify: {err}")))
            }
            Purpose::Compact(control) => self.finish_compaction(now, control, None),
        }
    }

    /// Ends the current task: withdraws its pending proposals, concludes its reasoning, and
    /// (when `tell`) answers the asker.
    /// Cancels every task (shutdown, restart, the gateway gone).
    pub(super) fn end_all(&mut self, now: Time, reason: &str) {
        let slots: Vec<Slot> = self.tasks.keys().copied().collect();
        for slot in slots {
            self.end_task(now, slot, TaskOutcome::Cancelled(reason.to_owned()), false);
        }
    }

    pub(super) fn end_task(&mut self, now: Time, slot: Slot, outcome: TaskOutcome, tell: bool) {
        let Some(task) = self.tasks.remove(&slot) else {
            return;
        };
        self.calls.retain(|c| c.purpose != Purpose::Step(slot));
        if let Phase::Acting(pending) = &task.phase {
            for p in pending {
                if let Some(id) = &p.request
                    && self.p.is_pending(id)
                {
                    // Only proposals can be withdrawn; a direct request's late answer is
                    // simply not waited for.
                    let _ = self.p.withdraw(now, id, "cancelled");
                }
            }
        }
        let cancelled = matches!(outcome, TaskOutcome::Cancelled(_));
        if let Some(ctx) = &task.context
            && !cancelled
        {
            let message = match &outcome {
                TaskOutcome::Answered(_) => format!("Answered after {} step(s)", task.steps.len()),
                TaskOutcome::Failed(e) => format!("Stopped: {e}"),
                TaskOutcome::Cancelled(r) => format!("Stopped: {r}"),
            };
            let _ = self.p.reasoning_conclusion(now, ctx, &message);
        }
        if let Slot::Run(run) = slot {
            self.emit(AgentEvent::RunFinished { run, outcome });
            return;
        }
        if let Some((_, Some(stream))) = self.stream.take() {
            let _ = self.p.close_stream(now, &stream, "done");
        }
        if tell {
            let text = match &outcome {
                TaskOutcome::Answered(t) => t.clone(),
                TaskOutcome::Failed(e) => format!("I could not complete this: {e}"),
                TaskOutcome::Cancelled(r) => format!("Stopped: {r}."),
            };
            let _ = self.p.send(
                now,
                Draft::new(Kind::Chat)
                    .to([task.trigger.from.clone()])
                    .correlation([task.trigger.id.clone()])
                    .payload(json!({"text": text, "format": "plain"})),
            );
            self.replies
                .entry(task.trigger.from.clone())
                .or_default()
                .push_back(now);
            if let TaskOutcome::Answered(answer) = &outcome
                && self.s.history_length > 0
            {
                self.history
                    .push_back(Message::text(Role::User, task.trigger.text.clone()));
                self.history
                    .push_back(Message::text(Role::Assistant, answer.clone()));
                while self.history.len() > self.s.history_length {
                    self.history.pop_front();
                }
            }
        }
        self.emit(AgentEvent::TaskFinished {
            trigger: task.trigger.id,
            outcome,
        });
    }
}

/// The observation text of a tool result: its text content, or the result as JSON.
pub(super) fn observation_of(v: &Value) -> String {
    let error = v.get("isError").and_then(Value::as_bool) == Some(true);
    let text = match v.get("content").and_then(Value::as_array) {
        Some(items) => {
            let parts: Vec<String> = items
                .iter()
                .map(|i| match i.get("text").and_then(Value::as_str) {
                    Some(t) => t.to_owned(),
                    None => i.to_string(),
                })
                .collect();
            parts.join("\n")
        }
        None => v.to_string(),
    };
    if error {
        format!("Error: {text}")
    } else {
        text
    }
}

pub(super) fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str(" [truncated]");
    }
}

pub(super) fn steps_text(steps: &[Step]) -> String {
    if steps.is_empty() {
        return "(none yet)".into();
    }
    steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "{}. Reasoning: {}\n   Action: {}\n   Observation: {}",
                i + 1,
                s.thought,
                s.action,
                s.observation
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
