//! Capability grants addressed to us: acknowledged with `capability/grant-ack`. The new
//! capabilities themselves arrive in the updated welcome the gateway sends first.

use super::Participant;
use super::event::Event;
use crate::envelope::{Envelope, Kind};
use crate::time::Time;
use serde_json::{Value, json};

impl Participant {
    pub(super) fn on_grant(&mut self, now: Time, env: &Envelope) {
        let me = self.me();
        if me.is_empty() || env.from == me {
            return;
        }
        let recipient = env
            .payload
            .as_ref()
            .and_then(|p| p.get("recipient"))
            .and_then(Value::as_str);
        if recipient != Some(me) && !self.addressed_to_me(env) {
            return;
        }
        let ack = self.build(
            now,
            Kind::CapabilityGrantAck,
            vec![env.from.clone()],
            vec![env.id.clone()],
            None,
            Some(json!({"status": "accepted"})),
        );
        self.send_internal(ack);
        self.client.emit(Event::Granted {
            grant_id: env.id.clone(),
            from: env.from.clone(),
            capabilities: env
                .payload
                .as_ref()
                .and_then(|p| p.get("capabilities"))
                .cloned()
                .unwrap_or(Value::Null),
        });
    }
}
