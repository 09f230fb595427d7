//! Context accounting and `participant/status` telemetry.

use super::Participant;
use super::config::ContextConfig;
use super::error::SendError;
use super::event::Event;
use crate::envelope::Kind;
use crate::time::Time;
use serde_json::{Value, json};

/// Usage counters reported in `participant/status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextUsage {
    /// Tokens in the context.
    pub tokens: u64,
    /// Size of the context window (0: unknown).
    pub max_tokens: u64,
    /// Envelopes retained in the context.
    pub messages_in_context: u64,
}

/// Status strings of `participant/status` (wire-compat.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Working normally.
    Active,
    /// Paused by a `participant/pause`.
    Paused,
    /// Usage crossed the soft limit.
    NearLimit,
    /// Compaction in progress.
    Compacting,
    /// Compaction done.
    Compacted,
    /// Context cleared.
    Cleared,
    /// Restarted.
    Restarted,
    /// Shutting down.
    ShuttingDown,
}

impl Status {
    /// Wire text.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Paused => "paused",
            Status::NearLimit => "near_limit",
            Status::Compacting => "compacting",
            Status::Compacted => "compacted",
            Status::Cleared => "cleared",
            Status::Restarted => "restarted",
            Status::ShuttingDown => "shutting_down",
        }
    }
}

#[derive(Debug)]
pub(super) struct Context {
    usage: ContextUsage,
    last_proactive: Option<Time>,
    /// Fields added to every status payload (see `set_status_extra`).
    extra: serde_json::Map<String, Value>,
}

impl Context {
    pub(super) fn new(cfg: &ContextConfig) -> Context {
        Context {
            usage: ContextUsage {
                max_tokens: cfg.max_tokens,
                ..Default::default()
            },
            last_proactive: None,
            extra: serde_json::Map::new(),
        }
    }
}

impl Participant {
    /// Current usage counters.
    pub fn context_usage(&self) -> ContextUsage {
        self.context.usage
    }

    /// Adds to the usage counters (and may send a proactive `near_limit` status).
    pub fn record_context_usage(&mut self, now: Time, tokens: u64, messages: u64) {
        let u = &mut self.context.usage;
        u.tokens = u.tokens.saturating_add(tokens);
        u.messages_in_context = u.messages_in_context.saturating_add(messages);
        self.check_soft_limit(now);
    }

    /// Sets the usage counters (after the application trimmed its context, say).
    pub fn set_context_usage(&mut self, now: Time, tokens: u64, messages: u64) {
        self.context.usage.tokens = tokens;
        self.context.usage.messages_in_context = messages;
        self.check_soft_limit(now);
    }

    pub(super) fn reduce_context_usage(&mut self, tokens: u64, messages: u64) {
        let u = &mut self.context.usage;
        u.tokens = u.tokens.saturating_sub(tokens);
        u.messages_in_context = u.messages_in_context.saturating_sub(messages);
    }

    pub(super) fn reset_context_usage(&mut self) {
        self.context.usage.tokens = 0;
        self.context.usage.messages_in_context = 0;
    }

    /// The current status: paused or active.
    pub fn current_status(&self) -> Status {
        if self.controls.pause.is_some() {
            Status::Paused
        } else {
            Status::Active
        }
    }

    /// A `participant/status` payload; always has `messages_in_context`.
    pub fn status_payload(&self, status: Status) -> Value {
        let u = self.context.usage;
        let mut v = json!({
            "tokens": u.tokens,
            "max_tokens": u.max_tokens,
            "messages_in_context": u.messages_in_context,
            "status": status.as_str(),
        });
        if let Some(p) = v.as_object_mut() {
            for (k, x) in &self.context.extra {
                p.entry(k.as_str()).or_insert_with(|| x.clone());
            }
        }
        v
    }

    /// Sets a field added to every `participant/status` this participant sends (e.g. the
    /// state of a server it fronts); `None` removes it. The standard fields win over these.
    pub fn set_status_extra(&mut self, key: &str, value: Option<Value>) {
        match value {
            Some(v) => {
                self.context.extra.insert(key.to_owned(), v);
            }
            None => {
                self.context.extra.remove(key);
            }
        }
    }

    /// Broadcasts a `participant/status` (current status when `None`).
    pub fn report_status(
        &mut self,
        now: Time,
        status: Option<Status>,
    ) -> Result<String, SendError> {
        let status = status.unwrap_or_else(|| self.current_status());
        let payload = self.status_payload(status);
        let env = self.build(
            now,
            Kind::ParticipantStatus,
            Vec::new(),
            Vec::new(),
            None,
            Some(payload),
        );
        let id = env.id.clone();
        self.client.send(env)?;
        Ok(id)
    }

    pub(super) fn send_status(
        &mut self,
        now: Time,
        status: Status,
        to: Vec<String>,
        correlation: Vec<String>,
        extra: Option<Value>,
    ) {
        let mut payload = self.status_payload(status);
        if let (Some(Value::Object(extra)), Some(p)) = (extra, payload.as_object_mut()) {
            p.extend(extra);
        }
        if !self.can_send(&Kind::ParticipantStatus, Some(&payload)) {
            // The gateway would refuse the answer: say why nobody got one, once per ask,
            // instead of sending it to be refused.
            let asker = to.first().map_or("the space", String::as_str);
            self.client.emit(Event::Invalid {
                id: correlation.first().cloned().unwrap_or_default(),
                reason: format!(
                    "cannot answer {asker} with participant/status: this participant's capabilities do not include participant/status"
                ),
            });
            return;
        }
        let env = self.build(
            now,
            Kind::ParticipantStatus,
            to,
            correlation,
            None,
            Some(payload),
        );
        self.send_internal(env);
    }

    fn check_soft_limit(&mut self, now: Time) {
        let u = self.context.usage;
        let cfg = &self.config.context;
        if u.max_tokens == 0 || (u.tokens as f64) < cfg.soft_limit * u.max_tokens as f64 {
            return;
        }
        if self
            .context
            .last_proactive
            .is_some_and(|t| now.saturating_since(t) < cfg.status_cooldown)
        {
            return;
        }
        self.context.last_proactive = Some(now);
        self.send_status(now, Status::NearLimit, Vec::new(), Vec::new(), None);
        self.client.emit(Event::NearLimit {
            tokens: u.tokens,
            max_tokens: u.max_tokens,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_strings_match_the_reference() {
        let all = [
            (Status::Active, "active"),
            (Status::Paused, "paused"),
            (Status::NearLimit, "near_limit"),
            (Status::Compacting, "compacting"),
            (Status::Compacted, "compacted"),
            (Status::Cleared, "cleared"),
            (Status::Restarted, "restarted"),
            (Status::ShuttingDown, "shutting_down"),
        ];
        for (s, text) in all {
            assert_eq!(s.as_str(), text);
        }
    }
}
