//! The person's commands: review decisions, suggestions, controls, and typed lines (a chat
//! or a slash command, parsed here once for every renderer).

use super::{Action, Change, Command, ControlAction, Proposal, View, ViewError};
use serde_json::{Value, json};

/// `/help`: the commands (each renderer adds its keys).
pub const HELP: &[&str] = &[
    "/grant <id> <kind or capability JSON>   /revoke <id> <kind or capability JSON>",
    "/pause /resume /forget /compact /clear /restart /shutdown /status <id>",
    "/kick <id>   /cancel <reasoning context>   /streams   /json <envelope>   /quit",
    "/verbose shows or hides background messages (discovery)",
    "after 3 approvals of the same call shape a grant is suggested",
];

/// The reason given with an "always allow" grant.
pub const ALWAYS_ALLOW_REASON: &str = "always allowed from the review dialog";

impl ControlAction {
    /// The control's name, as in its kind (`participant/<name>`) and its slash command.
    pub fn name(self) -> &'static str {
        match self {
            ControlAction::Pause => "pause",
            ControlAction::Resume => "resume",
            ControlAction::Forget => "forget",
            ControlAction::Compact => "compact",
            ControlAction::Clear => "clear",
            ControlAction::Restart => "restart",
            ControlAction::Shutdown => "shutdown",
        }
    }

    fn parse(name: &str) -> Option<ControlAction> {
        [
            ControlAction::Pause,
            ControlAction::Resume,
            ControlAction::Forget,
            ControlAction::Compact,
            ControlAction::Clear,
            ControlAction::Restart,
            ControlAction::Shutdown,
        ]
        .into_iter()
        .find(|c| c.name() == name)
    }
}

/// The envelope of a control to these participants.
fn control(action: ControlAction, to: Vec<String>) -> Action {
    Action::Send(json!({"kind": format!("participant/{}", action.name()), "to": to, "payload": {}}))
}

impl View {
    /// A command of the person: what the participant must do comes out of
    /// [`View::poll_action`]; a command that cannot be carried out is refused, and nothing
    /// changes.
    pub fn handle_command(&mut self, command: Command) -> Result<(), ViewError> {
        match command {
            Command::Line(line) => return self.line(&line),
            Command::Approve(id) => {
                let p = self.take(&id)?;
                self.actions.push_back(Action::Fulfil { proposal: p.id });
            }
            Command::Reject { proposal, reason } => {
                let p = self.take(&proposal)?;
                let reason = if reason.trim().is_empty() {
                    "rejected".to_owned()
                } else {
                    reason
                };
                self.actions.push_back(Action::Reject {
                    proposal: p.id,
                    reason,
                });
            }
            Command::AlwaysAllow(id) => {
                let p = self.take(&id)?;
                self.actions.push_back(Action::Grant {
                    recipient: p.from,
                    capabilities: vec![p.capability],
                    reason: ALWAYS_ALLOW_REASON.to_owned(),
                });
                self.actions.push_back(Action::Fulfil { proposal: p.id });
            }
            Command::Later(id) => {
                let p = self.take(&id)?;
                self.state.queue.push_back(p);
                self.queue_changed();
            }
            Command::GrantSuggestion(key) => {
                let s = self.take_suggestion(&key)?;
                self.actions.push_back(Action::Grant {
                    recipient: s.recipient,
                    capabilities: vec![s.capability],
                    reason: s.reason,
                });
            }
            Command::DismissSuggestion(key) => {
                self.take_suggestion(&key)?;
            }
            Command::Control { target, action } => {
                self.actions.push_back(control(action, vec![target]));
            }
            Command::Answer {
                question,
                reply,
                values,
            } => return self.answer(&question, reply, &values),
        }
        Ok(())
    }

    /// Takes a proposal out of the review queue.
    fn take(&mut self, id: &str) -> Result<Proposal, ViewError> {
        let at = self
            .state
            .queue
            .iter()
            .position(|p| p.id == id)
            .ok_or_else(|| ViewError::UnknownProposal(id.to_owned()))?;
        let p = self.state.queue.remove(at).expect("position is in range");
        self.queue_changed();
        Ok(p)
    }

    fn take_suggestion(&mut self, key: &str) -> Result<super::Suggestion, ViewError> {
        let at = self
            .state
            .suggestions
            .iter()
            .position(|s| s.key == key)
            .ok_or_else(|| ViewError::UnknownSuggestion(key.to_owned()))?;
        let s = self
            .state
            .suggestions
            .remove(at)
            .expect("position is in range");
        self.changed(|s| Change::Suggestions(s.suggestions.iter().cloned().collect()));
        Ok(s)
    }

    /// A typed line: a chat, or a slash command.
    fn line(&mut self, line: &str) -> Result<(), ViewError> {
        if line.trim().is_empty() {
            return Ok(());
        }
        let Some(rest) = line.strip_prefix('/') else {
            self.actions.push_back(Action::Chat {
                text: line.to_owned(),
            });
            return Ok(());
        };
        let (cmd, args) = rest.split_once(' ').unwrap_or((rest, ""));
        let args = args.trim();
        let to = |ids: &str| -> Vec<String> { ids.split(',').map(str::to_owned).collect() };
        let needs = |usage: &str| -> Result<(), ViewError> {
            if args.is_empty() {
                Err(ViewError::Usage(usage.to_owned()))
            } else {
                Ok(())
            }
        };
        let action = match cmd {
            "quit" | "exit" => Action::Quit,
            "streams" => {
                if self.state.streams.is_empty() {
                    self.note("no open streams");
                }
                let lines: Vec<String> = self
                    .state
                    .streams
                    .iter()
                    .map(|s| format!("stream {} of {}", s.id, s.owner))
                    .collect();
                for l in lines {
                    self.note(l);
                }
                return Ok(());
            }
            "verbose" => {
                self.state.verbose = !self.state.verbose;
                self.changed(|s| Change::Background {
                    count: s.background,
                    verbose: s.verbose,
                });
                self.note(if self.state.verbose {
                    "showing background messages (discovery and other chatter); /verbose hides them"
                } else {
                    "hiding background messages; /verbose shows them"
                });
                return Ok(());
            }
            "help" => {
                for h in HELP {
                    self.note(*h);
                }
                return Ok(());
            }
            "json" => match serde_json::from_str::<Value>(args) {
                Ok(v @ Value::Object(_)) => Action::Send(v),
                _ => {
                    return Err(ViewError::Usage(
                        "/json {\"kind\": ..., \"payload\": ...}".into(),
                    ));
                }
            },
            "grant" | "revoke" => {
                let mut parts = args.splitn(2, ' ');
                let (Some(who), Some(cap)) = (parts.next(), parts.next()) else {
                    return Err(ViewError::Usage(format!(
                        "/{cmd} <participant> <capability JSON or kind>"
                    )));
                };
                let cap =
                    serde_json::from_str::<Value>(cap).unwrap_or_else(|_| json!({"kind": cap}));
                let (recipient, capabilities) = (who.to_owned(), vec![cap]);
                if cmd == "grant" {
                    Action::Grant {
                        recipient,
                        capabilities,
                        reason: String::new(),
                    }
                } else {
                    Action::Revoke {
                        recipient,
                        capabilities,
                        reason: String::new(),
                    }
                }
            }
            "status" => {
                needs("/status <participant>")?;
                Action::Send(
                    json!({"kind": "participant/request-status", "to": to(args), "payload": {}}),
                )
            }
            "kick" => {
                needs("/kick <participant>")?;
                Action::Send(json!({"kind": "space/kick", "to": [],
                    "payload": {"participant_id": args, "reason": "kicked"}}))
            }
            "cancel" => {
                needs("/cancel <reasoning context id>")?;
                Action::Send(json!({"kind": "reasoning/cancel", "context": args,
                    "payload": {"reason": "cancelled"}}))
            }
            other => match ControlAction::parse(other) {
                Some(c) => {
                    needs(&format!("/{other} <participant>"))?;
                    control(c, to(args))
                }
                None => return Err(ViewError::UnknownCommand(other.to_owned())),
            },
        };
        self.actions.push_back(action);
        Ok(())
    }
}
