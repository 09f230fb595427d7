//! `participant/pause`, `participant/resume` and `participant/shutdown`, enforced.
//!
//! They apply to the participants named in `to` (a broadcast control envelope is delivered
//! but holds no one). A paused participant's outbound is refused with `participant_paused`
//! until `participant/resume` or the pause's `timeout_seconds` elapse, except for kinds that
//! finish or acknowledge work instead of starting it: `chat/acknowledge`, `chat/cancel`,
//! `capability/grant-ack`, `participant/status`, `participant/compact-done`,
//! `mcp/withdraw`, `mcp/response` (answers to requests accepted before the pause),
//! `reasoning/cancel` and `stream/close`. After `participant/shutdown` only
//! `chat/acknowledge` and `participant/status` are accepted until the participant rejoins.

use super::enforce::{Op, Refusal};
use super::member::Hold;
use super::{Gateway, GatewayEvent};
use crate::Time;
use bytes::Bytes;
use serde_json::Value;
use std::time::Duration;

/// Kinds a paused participant may still send.
pub const EXEMPT_WHILE_PAUSED: &[&str] = &[
    "chat/acknowledge",
    "chat/cancel",
    "capability/grant-ack",
    "participant/status",
    "participant/compact-done",
    "mcp/withdraw",
    "mcp/response",
    "reasoning/cancel",
    "stream/close",
];

/// Kinds a shut-down participant may still send.
pub const EXEMPT_AFTER_SHUTDOWN: &[&str] = &["chat/acknowledge", "participant/status"];

pub(super) fn exempt_while_paused(kind: &str) -> bool {
    EXEMPT_WHILE_PAUSED.contains(&kind)
}

pub(super) fn exempt_after_shutdown(kind: &str) -> bool {
    EXEMPT_AFTER_SHUTDOWN.contains(&kind)
}

impl Gateway {
    pub(super) fn op_control(
        &mut self,
        now: Time,
        op: &Op<'_, '_>,
        frame: &Bytes,
        id: Option<&str>,
    ) -> Result<(), Refusal> {
        let payload = if op.kind == "participant/pause" {
            op.payload()
        } else {
            Value::Null
        };
        self.deliver_envelope(now, frame, id, op.member, op.to);
        let targets: Vec<usize> = op
            .targets()
            .filter_map(|t| self.members.find(t))
            .filter(|&i| !self.members.get(i).removed)
            .collect();
        for t in targets {
            let m = self.members.get_mut(t);
            let participant = m.id.to_string();
            match op.kind {
                "participant/pause" => {
                    let until = payload
                        .get("timeout_seconds")
                        .and_then(Value::as_f64)
                        .filter(|s| s.is_finite() && *s >= 0.0)
                        .map(|s| now + Duration::from_millis((s * 1000.0).min(1e15) as u64));
                    if m.hold != Hold::ShutDown {
                        m.hold = Hold::Paused(until);
                        self.timed_pauses |= until.is_some();
                        self.push_event(GatewayEvent::Paused { participant, until });
                    }
                }
                "participant/resume" => {
                    if matches!(m.hold, Hold::Paused(_)) {
                        m.hold = Hold::None;
                        self.push_event(GatewayEvent::Resumed { participant });
                    }
                }
                _ => {
                    m.hold = Hold::ShutDown;
                    self.push_event(GatewayEvent::ShutDown { participant });
                }
            }
        }
        Ok(())
    }

    /// Ends pauses whose timeout passed.
    pub(super) fn expire_pauses(&mut self, now: Time) {
        for i in self.members.indices() {
            let m = self.members.get_mut(i);
            if let Hold::Paused(Some(until)) = m.hold
                && until <= now
            {
                m.hold = Hold::None;
                let participant = m.id.to_string();
                self.push_event(GatewayEvent::Resumed { participant });
            }
        }
        self.timed_pauses = self.any_timed_pause();
    }

    /// Whether a member is paused until a time (a walk over all of them).
    pub(super) fn any_timed_pause(&self) -> bool {
        self.members
            .iter()
            .any(|(_, m)| matches!(m.hold, Hold::Paused(Some(_))))
    }

    /// The earliest pause expiry.
    pub(super) fn next_pause_expiry(&self) -> Option<Time> {
        // Not a walk over every member after every input when nobody is paused.
        if !self.timed_pauses {
            return None;
        }
        self.members
            .iter()
            .filter_map(|(_, m)| match m.hold {
                Hold::Paused(Some(t)) => Some(t),
                _ => None,
            })
            .min()
    }
}
