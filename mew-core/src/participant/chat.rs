//! Chat: sending, and the bounded queue of chats addressed to us awaiting acknowledgement.

use super::error::{CommandError, SendError};
use super::event::Event;
use super::{Draft, Participant};
use crate::envelope::{Envelope, Kind};
use crate::time::Time;
use serde_json::{Value, json};
use std::collections::VecDeque;

/// A chat addressed to us, not yet acknowledged or cancelled.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingChat {
    /// Envelope id.
    pub id: String,
    /// Sender.
    pub from: String,
    /// Text.
    pub text: String,
    /// When it arrived.
    pub received_at: Time,
}

#[derive(Debug, Default)]
pub(super) struct Chats {
    pending: VecDeque<PendingChat>,
}

impl Participant {
    /// Sends a chat (broadcast when `to` is empty).
    pub fn chat(&mut self, now: Time, text: &str, to: Vec<String>) -> Result<String, SendError> {
        self.send(
            now,
            Draft::new(Kind::Chat)
                .to(to)
                .payload(json!({"text": text, "format": "plain"})),
        )
    }

    /// Chats awaiting acknowledgement, oldest first.
    pub fn pending_chats(&self) -> impl Iterator<Item = &PendingChat> {
        self.chats.pending.iter()
    }

    fn take_chat(&mut self, id: &str) -> Result<PendingChat, CommandError> {
        let pos = self
            .chats
            .pending
            .iter()
            .position(|c| c.id == id)
            .ok_or_else(|| CommandError::Unknown {
                what: "chat",
                id: id.to_owned(),
            })?;
        Ok(self
            .chats
            .pending
            .remove(pos)
            .expect("position is in range"))
    }

    /// Acknowledges a queued chat (`chat/acknowledge` to its sender).
    pub fn acknowledge_chat(
        &mut self,
        now: Time,
        id: &str,
        status: &str,
    ) -> Result<(), CommandError> {
        let c = self.take_chat(id)?;
        let env = self.build(
            now,
            Kind::ChatAcknowledge,
            vec![c.from],
            vec![c.id],
            None,
            Some(json!({"status": status})),
        );
        self.send_checked(env)?;
        Ok(())
    }

    /// Acknowledges a chat to everyone that we take on (`chat/acknowledge` to its sender,
    /// correlated to it): chats addressed to us are acknowledged with
    /// [`acknowledge_chat`](Self::acknowledge_chat) instead.
    pub fn acknowledge_broadcast(
        &mut self,
        now: Time,
        id: &str,
        from: &str,
        status: &str,
    ) -> Result<(), CommandError> {
        let env = self.build(
            now,
            Kind::ChatAcknowledge,
            vec![from.to_owned()],
            vec![id.to_owned()],
            None,
            Some(json!({"status": status})),
        );
        self.send_checked(env)?;
        Ok(())
    }

    /// Cancels a queued chat (`chat/cancel`).
    pub fn cancel_chat(&mut self, now: Time, id: &str, reason: &str) -> Result<(), CommandError> {
        let c = self.take_chat(id)?;
        let env = self.build(
            now,
            Kind::ChatCancel,
            vec![c.from],
            vec![c.id],
            None,
            Some(json!({"reason": reason})),
        );
        self.send_checked(env)?;
        Ok(())
    }

    /// Cancels every queued chat, one `chat/cancel` each; returns how many.
    pub fn cancel_all_chats(&mut self, now: Time, reason: &str) -> Result<usize, CommandError> {
        let mut n = 0;
        while let Some(id) = self.chats.pending.front().map(|c| c.id.clone()) {
            self.cancel_chat(now, &id, reason)?;
            n += 1;
        }
        Ok(n)
    }

    pub(super) fn chats_clear(&mut self) {
        self.chats.pending.clear();
    }

    pub(super) fn on_chat(&mut self, now: Time, env: &Envelope) {
        if env.from == self.me() {
            return;
        }
        let Some(text) = env
            .payload
            .as_ref()
            .and_then(|p| p.get("text"))
            .and_then(Value::as_str)
        else {
            return self.invalid(env, "chat without payload.text");
        };
        if self.config.context.count_inbound_chat {
            self.record_context_usage(now, (text.len() as u64).div_ceil(4), 1);
        }
        if !self.addressed_to_me(env) {
            return;
        }
        if self.chats.pending.len() >= self.config.bounds.max_pending_chats {
            // The oldest unacknowledged chat is the least likely to still matter.
            self.chats.pending.pop_front();
        }
        self.chats.pending.push_back(PendingChat {
            id: env.id.clone(),
            from: env.from.clone(),
            text: text.to_owned(),
            received_at: now,
        });
        self.client.emit(Event::ChatReceived {
            id: env.id.clone(),
            from: env.from.clone(),
            text: text.to_owned(),
        });
    }

    pub(super) fn on_chat_cancel(&mut self, env: &Envelope) {
        let Some(c) = env.first_correlation() else {
            return;
        };
        // Only the chat's sender can cancel it for us.
        if let Some(pos) = self
            .chats
            .pending
            .iter()
            .position(|p| p.id == c && p.from == env.from)
        {
            let chat = self
                .chats
                .pending
                .remove(pos)
                .expect("position is in range");
            self.client.emit(Event::ChatCancelled {
                id: chat.id,
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
