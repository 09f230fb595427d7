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

use super::member::Hold;
use super::op::Op;
use super::refusal::Refusal;
use super::{Gateway, GatewayEvent};
use crate::Time;
use crate::envelope::Kind;
use bytes::Bytes;
use serde_json::Value;
use std::time::Duration;

/// Whether a paused participant may send `kind` ([`Kind::PAUSE_EXEMPT`]).
pub(super) fn exempt_while_paused(kind: &str) -> bool {
    Kind::known(kind).is_some_and(|k| k.is_pause_exempt())
}

/// Whether a shut-down participant may send `kind` ([`Kind::SHUTDOWN_EXEMPT`]).
pub(super) fn exempt_after_shutdown(kind: &str) -> bool {
    Kind::known(kind).is_some_and(|k| Kind::SHUTDOWN_EXEMPT.contains(&k))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::participant::ParticipantConfig;

    /// A kind a paused participant lets out but the gateway refuses would be lost; one the
    /// gateway accepts but the participant holds back would wait for nothing.
    #[test]
    fn participant_and_gateway_agree_on_what_a_paused_participant_may_send() {
        let participant = ParticipantConfig::default().pause_exempt_kinds;
        for kind in Kind::ALL_KNOWN {
            assert_eq!(
                participant.contains(kind),
                exempt_while_paused(kind.as_str()),
                "{kind}"
            );
        }
        assert!(exempt_while_paused("chat/acknowledge"));
        assert!(!exempt_while_paused("chat"));
        assert!(!exempt_while_paused("mcp/request"));
        assert!(!exempt_while_paused("made/up"));
    }

    #[test]
    fn a_shut_down_participant_may_send_only_what_a_paused_one_may() {
        for kind in Kind::ALL_KNOWN {
            if exempt_after_shutdown(kind.as_str()) {
                assert!(exempt_while_paused(kind.as_str()), "{kind}");
            }
        }
        assert!(exempt_after_shutdown("participant/status"));
        assert!(!exempt_after_shutdown("chat/cancel"));
    }
}
