//! Participant controls (spec 3.9): pause with auto-resume, resume, request-status, and
//! forget / compact / clear / restart / shutdown completed by the application.

use super::Participant;
use super::context::Status;
use super::error::{CommandError, RequestError, SendError};
use super::event::{Control, Event, ForgetDirection};
use crate::envelope::{Envelope, Kind};
use crate::time::Time;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

impl Control {
    fn kind(&self) -> Kind {
        match self {
            Control::Pause { .. } => Kind::ParticipantPause,
            Control::Resume => Kind::ParticipantResume,
            Control::RequestStatus { .. } => Kind::ParticipantRequestStatus,
            Control::Forget { .. } => Kind::ParticipantForget,
            Control::Compact { .. } => Kind::ParticipantCompact,
            Control::Clear => Kind::ParticipantClear,
            Control::Restart => Kind::ParticipantRestart,
            Control::Shutdown => Kind::ParticipantShutdown,
        }
    }

    fn payload(&self) -> Option<Value> {
        match self {
            Control::Pause { reason, timeout } => {
                let mut p = json!({ "reason": reason });
                if let Some(t) = timeout {
                    p["timeout_seconds"] = json!(t.as_secs());
                }
                Some(p)
            }
            Control::Resume => Some(json!({})),
            Control::RequestStatus { fields } if fields.is_empty() => Some(json!({})),
            Control::RequestStatus { fields } => Some(json!({ "fields": fields })),
            Control::Forget { direction, entries } => {
                let mut p = json!({"direction": match direction {
                    ForgetDirection::Oldest => "oldest",
                    ForgetDirection::Newest => "newest",
                }});
                if let Some(n) = entries {
                    p["entries"] = json!(n);
                }
                Some(p)
            }
            Control::Compact {
                reason,
                target_tokens,
            } => {
                let mut p = json!({});
                if let Some(r) = reason {
                    p["reason"] = json!(r);
                }
                if let Some(t) = target_tokens {
                    p["target_tokens"] = json!(t);
                }
                Some(p)
            }
            Control::Clear | Control::Restart | Control::Shutdown => None,
        }
    }

    fn parse(env: &Envelope) -> Result<Control, String> {
        let p = env.payload.as_ref();
        let s = |k: &str| p.and_then(|p| p.get(k)).and_then(Value::as_str);
        let n = |k: &str| p.and_then(|p| p.get(k)).and_then(Value::as_u64);
        Ok(match env.kind {
            Kind::ParticipantPause => Control::Pause {
                reason: s("reason").unwrap_or("unspecified").to_owned(),
                timeout: match p.and_then(|p| p.get("timeout_seconds")) {
                    None | Some(Value::Null) => None,
                    Some(v) => match v.as_f64() {
                        Some(secs) if secs.is_finite() && secs >= 0.0 => {
                            Some(Duration::from_secs_f64(secs.min(1e9)))
                        }
                        _ => return Err("timeout_seconds must be a non-negative number".into()),
                    },
                },
            },
            Kind::ParticipantResume => Control::Resume,
            Kind::ParticipantRequestStatus => Control::RequestStatus {
                fields: p
                    .and_then(|p| p.get("fields"))
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .take(64)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            Kind::ParticipantForget => Control::Forget {
                direction: match s("direction") {
                    Some("oldest") => ForgetDirection::Oldest,
                    Some("newest") => ForgetDirection::Newest,
                    _ => return Err("direction must be \"oldest\" or \"newest\"".into()),
                },
                entries: n("entries"),
            },
            Kind::ParticipantCompact => Control::Compact {
                reason: s("reason").map(str::to_owned),
                target_tokens: n("target_tokens"),
            },
            Kind::ParticipantClear => Control::Clear,
            Kind::ParticipantRestart => Control::Restart,
            Kind::ParticipantShutdown => Control::Shutdown,
            _ => return Err("not a control kind".into()),
        })
    }
}

/// How a requested compaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompactOutcome {
    /// Context was reclaimed.
    Done {
        /// Tokens freed.
        freed_tokens: u64,
        /// Messages freed.
        freed_messages: u64,
    },
    /// Nothing to compact.
    Skipped {
        /// Why.
        reason: Option<String>,
    },
}

/// An active pause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseState {
    /// The pause envelope's id.
    pub id: String,
    /// Who paused us.
    pub by: String,
    /// Reason given.
    pub reason: String,
    /// Automatic resume time.
    pub until: Option<Time>,
}

#[derive(Debug, Default)]
pub(super) struct Controls {
    pub(super) pause: Option<PauseState>,
    /// Control id -> (requester, control) awaiting the application.
    pending: BTreeMap<String, (String, Control)>,
}

impl Controls {
    pub(super) fn next_deadline(&self) -> Option<Time> {
        self.pause.as_ref().and_then(|p| p.until)
    }
}

impl Participant {
    /// The active pause, if any.
    pub fn pause_state(&self) -> Option<&PauseState> {
        self.controls.pause.as_ref()
    }

    /// Controls awaiting completion.
    pub fn pending_controls(&self) -> impl Iterator<Item = (&str, &Control)> {
        self.controls
            .pending
            .iter()
            .map(|(k, (_, c))| (k.as_str(), c))
    }

    /// Sends a control envelope to another participant.
    pub fn send_control(
        &mut self,
        now: Time,
        target: &str,
        control: &Control,
    ) -> Result<String, SendError> {
        let env = self.build(
            now,
            control.kind(),
            vec![target.to_owned()],
            Vec::new(),
            None,
            control.payload(),
        );
        let id = env.id.clone();
        self.send_checked(env)?;
        Ok(id)
    }

    pub(super) fn on_control(&mut self, now: Time, env: &Envelope) {
        // Controls act only on their explicit addressees.
        if !self.addressed_to_me(env) || env.from == self.me() {
            return;
        }
        let control = match Control::parse(env) {
            Ok(c) => c,
            Err(reason) => return self.invalid(env, &reason),
        };
        let from = vec![env.from.clone()];
        let corr = vec![env.id.clone()];
        match &control {
            Control::Pause { reason, timeout } => {
                self.controls.pause = Some(PauseState {
                    id: env.id.clone(),
                    by: env.from.clone(),
                    reason: reason.clone(),
                    until: timeout.map(|t| now + t),
                });
                self.send_status(now, Status::Paused, from, corr, None);
            }
            Control::Resume => {
                if self.controls.pause.take().is_some() {
                    self.client.emit(Event::Resumed { automatic: false });
                }
                self.send_status(now, Status::Active, from, corr, None);
            }
            Control::RequestStatus { .. } => {
                let s = self.current_status();
                self.send_status(now, s, from, corr, None);
            }
            Control::Forget { .. }
            | Control::Compact { .. }
            | Control::Clear
            | Control::Restart
            | Control::Shutdown => {
                if self.controls.pending.len() >= self.config.bounds.max_pending_controls {
                    if matches!(control, Control::Compact { .. }) {
                        self.send_compact_done(
                            now,
                            &env.from,
                            &env.id,
                            &CompactOutcome::Skipped {
                                reason: Some("busy".into()),
                            },
                        );
                    }
                    return self.invalid(env, "too many controls pending");
                }
                match &control {
                    Control::Compact { .. } => {
                        self.send_status(now, Status::Compacting, from, corr, None)
                    }
                    Control::Shutdown => {
                        self.send_status(now, Status::ShuttingDown, from, corr, None)
                    }
                    _ => {}
                }
                self.controls
                    .pending
                    .insert(env.id.clone(), (env.from.clone(), control.clone()));
            }
        }
        self.client.emit(Event::Control {
            id: env.id.clone(),
            from: env.from.clone(),
            control,
        });
    }

    fn take_control(
        &mut self,
        id: &str,
        want: fn(&Control) -> bool,
    ) -> Result<(String, Control), CommandError> {
        match self.controls.pending.get(id) {
            None => Err(CommandError::Unknown {
                what: "control",
                id: id.to_owned(),
            }),
            Some((_, c)) if !want(c) => Err(CommandError::WrongState {
                what: "control",
                id: id.to_owned(),
                state: format!("a {}", c.kind()),
            }),
            Some(_) => Ok(self.controls.pending.remove(id).expect("checked above")),
        }
    }

    /// Completes a `participant/forget`: reduces the counters and reports status.
    pub fn complete_forget(
        &mut self,
        now: Time,
        id: &str,
        freed_tokens: u64,
        freed_messages: u64,
    ) -> Result<(), CommandError> {
        let (from, _) = self.take_control(id, |c| matches!(c, Control::Forget { .. }))?;
        self.reduce_context_usage(freed_tokens, freed_messages);
        let s = self.current_status();
        let extra = json!({"freed_tokens": freed_tokens, "freed_messages": freed_messages});
        self.send_status(now, s, vec![from], vec![id.to_owned()], Some(extra));
        Ok(())
    }

    /// Completes a `participant/compact`: sends `participant/compact-done` (also when
    /// skipped) and a `compacted` status.
    pub fn complete_compact(
        &mut self,
        now: Time,
        id: &str,
        outcome: CompactOutcome,
    ) -> Result<(), CommandError> {
        let (from, _) = self.take_control(id, |c| matches!(c, Control::Compact { .. }))?;
        if let CompactOutcome::Done {
            freed_tokens,
            freed_messages,
        } = outcome
        {
            self.reduce_context_usage(freed_tokens, freed_messages);
        }
        self.send_compact_done(now, &from, id, &outcome);
        self.send_status(
            now,
            Status::Compacted,
            vec![from],
            vec![id.to_owned()],
            None,
        );
        Ok(())
    }

    fn send_compact_done(&mut self, now: Time, to: &str, id: &str, outcome: &CompactOutcome) {
        let payload = match outcome {
            CompactOutcome::Done {
                freed_tokens,
                freed_messages,
            } => json!({
                "freed_tokens": freed_tokens,
                "freed_messages": freed_messages,
                "status": "compacted",
            }),
            CompactOutcome::Skipped { reason } => {
                let mut p = json!({"skipped": true, "status": "compacted"});
                if let Some(r) = reason {
                    p["reason"] = json!(r);
                }
                p
            }
        };
        let env = self.build(
            now,
            Kind::ParticipantCompactDone,
            vec![to.to_owned()],
            vec![id.to_owned()],
            None,
            Some(payload),
        );
        self.send_internal(env);
    }

    /// Completes a `participant/clear`: zero usage, `cleared` status.
    pub fn complete_clear(&mut self, now: Time, id: &str) -> Result<(), CommandError> {
        let (from, _) = self.take_control(id, |c| matches!(c, Control::Clear))?;
        self.reset_context_usage();
        self.send_status(now, Status::Cleared, vec![from], vec![id.to_owned()], None);
        Ok(())
    }

    /// Completes a `participant/restart`: ends outstanding requests, calls, chats,
    /// reasoning and owned streams, lifts any pause, zero usage, `restarted` status.
    pub fn complete_restart(&mut self, now: Time, id: &str) -> Result<(), CommandError> {
        let (from, _) = self.take_control(id, |c| matches!(c, Control::Restart))?;
        self.end_outstanding_work(now, "restart");
        self.controls.pause = None;
        self.reset_context_usage();
        self.send_status(
            now,
            Status::Restarted,
            vec![from],
            vec![id.to_owned()],
            None,
        );
        Ok(())
    }

    /// Completes a `participant/shutdown`: ends outstanding work, acknowledges with
    /// `chat/acknowledge`, and closes the connection for good.
    pub fn complete_shutdown(&mut self, now: Time, id: &str) -> Result<(), CommandError> {
        let (from, _) = self.take_control(id, |c| matches!(c, Control::Shutdown))?;
        self.end_outstanding_work(now, "shutdown");
        let env = self.build(
            now,
            Kind::ChatAcknowledge,
            vec![from],
            vec![id.to_owned()],
            None,
            Some(json!({"status": "shutdown"})),
        );
        self.send_internal(env);
        self.client.close(now, "shutdown");
        Ok(())
    }

    fn end_outstanding_work(&mut self, now: Time, why: &str) {
        self.fail_all_requests(now, RequestError::Cancelled(why.to_owned()));
        self.drop_pending_calls(now, why);
        self.chats_clear();
        self.reasoning_clear();
        self.close_owned_streams(now, why);
    }

    pub(super) fn controls_timeout(&mut self, now: Time) {
        let Some(p) = &self.controls.pause else {
            return;
        };
        if p.until.is_some_and(|t| t <= now) {
            let p = self.controls.pause.take().expect("checked above");
            let payload = json!({"reason": "timeout"});
            // The spec asks for a resume envelope documenting the change; a participant not
            // allowed to send one still reports `active` with the status below.
            if self.can_send(&Kind::ParticipantResume, Some(&payload)) {
                let env = self.build(
                    now,
                    Kind::ParticipantResume,
                    vec![p.by.clone()],
                    vec![p.id.clone()],
                    None,
                    Some(payload),
                );
                self.send_internal(env);
            }
            self.send_status(now, Status::Active, vec![p.by], vec![p.id], None);
            self.client.emit(Event::Resumed { automatic: true });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(kind: Kind, payload: Option<Value>) -> Envelope {
        Envelope {
            protocol: "mew/v0.4".into(),
            id: "c".into(),
            ts: None,
            from: "boss".into(),
            to: Some(vec!["me".into()]),
            kind,
            correlation_id: None,
            context: None,
            payload,
        }
    }

    #[test]
    fn parses_and_round_trips_controls() {
        for c in [
            Control::Pause {
                reason: "rate_limit".into(),
                timeout: Some(Duration::from_secs(60)),
            },
            Control::Resume,
            Control::RequestStatus {
                fields: vec!["tokens".into()],
            },
            Control::Forget {
                direction: ForgetDirection::Newest,
                entries: Some(3),
            },
            Control::Compact {
                reason: Some("token_pressure".into()),
                target_tokens: Some(100),
            },
            Control::Clear,
            Control::Restart,
            Control::Shutdown,
        ] {
            assert_eq!(Control::parse(&env(c.kind(), c.payload())), Ok(c));
        }
    }

    #[test]
    fn refuses_bad_control_payloads() {
        assert!(Control::parse(&env(Kind::ParticipantForget, None)).is_err());
        assert!(
            Control::parse(&env(
                Kind::ParticipantPause,
                Some(json!({"timeout_seconds": -5}))
            ))
            .is_err()
        );
        assert!(
            Control::parse(&env(
                Kind::ParticipantPause,
                Some(json!({"timeout_seconds": "soon"}))
            ))
            .is_err()
        );
        assert_eq!(
            Control::parse(&env(
                Kind::ParticipantPause,
                Some(json!({"timeout_seconds": 1e300}))
            ))
            .map(|c| matches!(
                c,
                Control::Pause {
                    timeout: Some(_),
                    ..
                }
            )),
            Ok(true)
        );
        assert!(Control::parse(&env(Kind::Chat, None)).is_err());
    }
}
