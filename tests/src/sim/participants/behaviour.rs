//! Application-side behaviour for simulated participants: closures that react to the
//! participant's events by calling its commands, now or after a virtual delay.

use mew_core::Time;
use mew_core::participant::{CallId, CompactOutcome, Control, Event, Participant, ToolError};
use serde_json::Value;
use std::time::Duration;

/// Work to run on a participant later.
pub type Deferred = Box<dyn FnOnce(&mut Participant, Time)>;

/// Reacts to one event of its participant.
pub type Behaviour = Box<dyn FnMut(&mut Participant, Time, &Event, &mut Later)>;

/// Actions a behaviour schedules for later.
#[derive(Default)]
pub struct Later {
    items: Vec<(Duration, Deferred)>,
}

impl Later {
    /// Runs `f` on the participant after `d` of virtual time.
    pub fn after(&mut self, d: Duration, f: impl FnOnce(&mut Participant, Time) + 'static) {
        self.items.push((d, Box::new(f)));
    }

    pub(super) fn take(self) -> Vec<(Duration, Deferred)> {
        self.items
    }
}

/// Answers every [`Event::ToolCall`] with `handler(tool, arguments)` at once.
pub fn tool_handler(
    mut handler: impl FnMut(&str, &Value) -> Result<Value, ToolError> + 'static,
) -> Behaviour {
    Box::new(move |p, now, e, _| {
        if let Event::ToolCall {
            call_id,
            tool,
            arguments,
            ..
        } = e
        {
            let r = handler(tool, arguments);
            p.complete_call(now, *call_id, r)
                .expect("the call is pending");
        }
    })
}

/// Answers every [`Event::ToolCall`] with `handler(tool, arguments)` after `delay`.
pub fn slow_tool_handler(
    delay: Duration,
    handler: impl Fn(&str, &Value) -> Result<Value, ToolError> + Clone + 'static,
) -> Behaviour {
    Box::new(move |_, _, e, later| {
        if let Event::ToolCall {
            call_id,
            tool,
            arguments,
            ..
        } = e
        {
            let r = handler(tool, arguments);
            let call: CallId = *call_id;
            later.after(delay, move |p, now| {
                // A restart or shutdown may have ended the call meanwhile.
                let _ = p.complete_call(now, call, r);
            });
        }
    })
}

/// What a reviewer does with a proposal.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Fulfil it (send the proposed request).
    Fulfil,
    /// Reject it with this reason.
    Reject(String),
    /// Leave it alone.
    Ignore,
}

/// Reviews every proposal it sees with `decide(proposer, payload)` after `delay`.
pub fn reviewer(
    delay: Duration,
    mut decide: impl FnMut(&str, &Value) -> Verdict + 'static,
) -> Behaviour {
    Box::new(move |_, _, e, later| {
        if let Event::ProposalSeen {
            id, from, payload, ..
        } = e
        {
            let id = id.clone();
            match decide(from, payload) {
                Verdict::Fulfil => later.after(delay, move |p, now| {
                    let _ = p.fulfil(now, &id);
                }),
                Verdict::Reject(reason) => later.after(delay, move |p, now| {
                    let _ = p.reject(now, &id, &reason);
                }),
                Verdict::Ignore => {}
            }
        }
    })
}

/// Completes every forget, compact, clear, restart and shutdown addressed to the
/// participant after `delay` (compaction frees `freed` tokens).
pub fn control_handler(delay: Duration, freed: u64) -> Behaviour {
    Box::new(move |_, _, e, later| {
        if let Event::Control { id, control, .. } = e {
            let id = id.clone();
            let control = control.clone();
            later.after(delay, move |p, now| {
                let _ = match control {
                    Control::Forget { .. } => p.complete_forget(now, &id, freed, 1),
                    Control::Compact { .. } => p.complete_compact(
                        now,
                        &id,
                        CompactOutcome::Done {
                            freed_tokens: freed,
                            freed_messages: 1,
                        },
                    ),
                    Control::Clear => p.complete_clear(now, &id),
                    Control::Restart => p.complete_restart(now, &id),
                    Control::Shutdown => p.complete_shutdown(now, &id),
                    Control::Pause { .. } | Control::Resume | Control::RequestStatus { .. } => {
                        Ok(())
                    }
                };
            });
        }
    })
}
