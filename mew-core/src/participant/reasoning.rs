//! Reasoning transparency: start / thought / conclusion / cancel, with the start's id as
//! the context, and cancellation by others.

use super::Participant;
use super::error::CommandError;
use super::event::Event;
use crate::envelope::{Envelope, Kind};
use crate::time::Time;
use serde_json::{Value, json};
use std::collections::BTreeMap;

#[derive(Debug, Default)]
pub(super) struct Reasoning {
    /// Context id -> cancelled.
    active: BTreeMap<String, bool>,
}

impl Participant {
    /// Starts a reasoning sequence; the returned id is its context.
    pub fn reasoning_start(
        &mut self,
        now: Time,
        message: &str,
        correlation: Option<&str>,
    ) -> Result<String, CommandError> {
        let max = self.config.bounds.max_reasoning_contexts;
        if self.reasoning.active.len() >= max {
            return Err(CommandError::Full {
                what: "reasoning contexts",
                max,
            });
        }
        let env = self.build(
            now,
            Kind::ReasoningStart,
            Vec::new(),
            correlation.map(str::to_owned).into_iter().collect(),
            None,
            Some(json!({"message": message})),
        );
        let id = env.id.clone();
        self.send_checked(env)?;
        self.reasoning.active.insert(id.clone(), false);
        Ok(id)
    }

    fn reasoning_check(&self, context: &str) -> Result<(), CommandError> {
        match self.reasoning.active.get(context) {
            None => Err(CommandError::Unknown {
                what: "reasoning context",
                id: context.to_owned(),
            }),
            Some(true) => Err(CommandError::ReasoningCancelled(context.to_owned())),
            Some(false) => Ok(()),
        }
    }

    fn reasoning_send(
        &mut self,
        now: Time,
        kind: Kind,
        context: &str,
        payload: Value,
    ) -> Result<String, CommandError> {
        let env = self.build(
            now,
            kind,
            Vec::new(),
            Vec::new(),
            Some(context.to_owned()),
            Some(payload),
        );
        let id = env.id.clone();
        self.send_checked(env)?;
        Ok(id)
    }

    /// Shares a thought; refused once the sequence was cancelled or concluded.
    pub fn reasoning_thought(
        &mut self,
        now: Time,
        context: &str,
        message: &str,
    ) -> Result<String, CommandError> {
        self.reasoning_check(context)?;
        self.reasoning_send(
            now,
            Kind::ReasoningThought,
            context,
            json!({"message": message}),
        )
    }

    /// Concludes (and ends) the sequence.
    pub fn reasoning_conclusion(
        &mut self,
        now: Time,
        context: &str,
        message: &str,
    ) -> Result<String, CommandError> {
        self.reasoning_check(context)?;
        let id = self.reasoning_send(
            now,
            Kind::ReasoningConclusion,
            context,
            json!({"message": message}),
        )?;
        self.reasoning.active.remove(context);
        Ok(id)
    }

    /// Cancels (and ends) the sequence.
    pub fn reasoning_cancel(
        &mut self,
        now: Time,
        context: &str,
        reason: &str,
    ) -> Result<String, CommandError> {
        if !self.reasoning.active.contains_key(context) {
            return Err(CommandError::Unknown {
                what: "reasoning context",
                id: context.to_owned(),
            });
        }
        let id = self.reasoning_send(
            now,
            Kind::ReasoningCancel,
            context,
            json!({"reason": reason}),
        )?;
        self.reasoning.active.remove(context);
        Ok(id)
    }

    /// Whether the sequence is active and not cancelled.
    pub fn reasoning_active(&self, context: &str) -> bool {
        self.reasoning.active.get(context) == Some(&false)
    }

    pub(super) fn reasoning_clear(&mut self) {
        self.reasoning.active.clear();
    }

    pub(super) fn on_reasoning_cancel(&mut self, env: &Envelope) {
        if env.from == self.me() {
            return;
        }
        let Some(ctx) = env.context.as_deref() else {
            return;
        };
        if let Some(cancelled) = self.reasoning.active.get_mut(ctx)
            && !*cancelled
        {
            // Kept (as cancelled) so later thoughts get a precise error; evicted on
            // restart or when the application cancels or concludes it.
            *cancelled = true;
            self.client.emit(Event::ReasoningCancelled {
                context: ctx.to_owned(),
                by: env.from.clone(),
                reason: env
                    .payload
                    .as_ref()
                    .and_then(|p| p.get("reason"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            });
        }
    }
}
