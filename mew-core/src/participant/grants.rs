//! Capability grants: giving and revoking them ([`Participant::grant`],
//! [`Participant::revoke`], [`grant_envelope`], [`revoke_envelope`]), and those
//! addressed to us, acknowledged with `capability/grant-ack`. The new capabilities
//! themselves arrive in the updated welcome the gateway sends first.

use super::error::SendError;
use super::event::Event;
use super::{Draft, Participant};
use crate::envelope::{Envelope, Kind};
use crate::time::Time;
use serde_json::{Value, json};

/// The `capability/grant` payload giving `recipient` `capabilities` (each a capability
/// pattern); `reason` is left out when empty. A `capability/revoke` by pattern has the same
/// shape.
pub fn grant_payload(recipient: &str, capabilities: Vec<Value>, reason: &str) -> Value {
    let mut p = json!({"recipient": recipient, "capabilities": capabilities});
    if !reason.is_empty() {
        p["reason"] = json!(reason);
    }
    p
}

/// A whole `capability/grant` as JSON (`kind`, `to`, `payload`), addressed to its recipient,
/// for a driver that sends or shows envelopes as JSON text; [`Participant::grant`] sends the
/// same.
pub fn grant_envelope(recipient: &str, capabilities: Vec<Value>, reason: &str) -> Value {
    json!({"kind": Kind::CapabilityGrant, "to": [recipient],
           "payload": grant_payload(recipient, capabilities, reason)})
}

/// A whole `capability/revoke` by pattern as JSON (`kind`, `to`, `payload`), addressed to
/// its recipient; [`Participant::revoke`] sends the same.
pub fn revoke_envelope(recipient: &str, capabilities: Vec<Value>, reason: &str) -> Value {
    json!({"kind": Kind::CapabilityRevoke, "to": [recipient],
           "payload": grant_payload(recipient, capabilities, reason)})
}

impl Participant {
    /// Revokes from `recipient` what it was granted matching `capabilities` (patterns),
    /// addressed to the recipient; returns the revoke's id.
    pub fn revoke(
        &mut self,
        now: Time,
        recipient: &str,
        capabilities: Vec<Value>,
        reason: &str,
    ) -> Result<String, SendError> {
        self.send_capabilities(now, Kind::CapabilityRevoke, recipient, capabilities, reason)
    }

    /// Grants `recipient` `capabilities` (each a capability pattern), addressed to the
    /// recipient; returns the grant's id. The gateway refuses it unless we may grant.
    pub fn grant(
        &mut self,
        now: Time,
        recipient: &str,
        capabilities: Vec<Value>,
        reason: &str,
    ) -> Result<String, SendError> {
        self.send_capabilities(now, Kind::CapabilityGrant, recipient, capabilities, reason)
    }

    /// A grant or a revoke: the same payload, addressed to its recipient.
    fn send_capabilities(
        &mut self,
        now: Time,
        kind: Kind,
        recipient: &str,
        capabilities: Vec<Value>,
        reason: &str,
    ) -> Result<String, SendError> {
        self.send(
            now,
            Draft::new(kind).to([recipient]).payload(grant_payload(
                recipient,
                capabilities,
                reason,
            )),
        )
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::participant::{Input, Output, ParticipantConfig};

    fn joined(capabilities: Value) -> Participant {
        let mut p = Participant::new(
            ParticipantConfig {
                participant_id: Some("human".into()),
                ..Default::default()
            },
            1,
        );
        let now = Time::from_unix_millis(1_700_000_000_000);
        p.start(now);
        p.handle_input(now, Input::Connected);
        let welcome = json!({
            "protocol": "mew/v0.4", "id": "w1", "from": "system:gateway", "to": ["human"],
            "kind": "system/welcome",
            "payload": {"you": {"id": "human", "capabilities": capabilities}, "participants": []}
        });
        p.handle_input(now, Input::Frame(&welcome.to_string()));
        while p.poll_output().is_some() {}
        p
    }

    fn sent(p: &mut Participant) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(o) = p.poll_output() {
            if let Output::Transmit(t) = o {
                out.push(serde_json::from_str(&t).unwrap());
            }
        }
        out
    }

    #[test]
    fn grant_sends_a_capability_grant_addressed_to_its_recipient() {
        let mut p = joined(json!([{"kind": "*"}]));
        let now = Time::from_unix_millis(1_700_000_001_000);
        let cap = json!({"kind": "mcp/request", "payload": {"method": "tools/call"}});
        let id = p
            .grant(now, "agent", vec![cap.clone()], "trusted for reads")
            .unwrap();
        let sent = sent(&mut p);
        assert_eq!(sent.len(), 1, "{sent:?}");
        let g = &sent[0];
        assert_eq!(g["id"], id.as_str());
        assert_eq!(g["kind"], "capability/grant");
        assert_eq!(g["from"], "human");
        assert_eq!(g["to"], json!(["agent"]));
        assert_eq!(
            g["payload"],
            json!({"recipient": "agent", "capabilities": [cap], "reason": "trusted for reads"})
        );
        // The JSON builder drivers use gives the same kind, addressing and payload.
        let built = grant_envelope("agent", vec![cap], "trusted for reads");
        for field in ["kind", "to", "payload"] {
            assert_eq!(built[field], g[field], "{field}");
        }
        assert_eq!(
            grant_payload("agent", vec![], ""),
            json!({"recipient": "agent", "capabilities": []})
        );
    }

    #[test]
    fn revoke_sends_a_capability_revoke_by_pattern() {
        let mut p = joined(json!([{"kind": "*"}]));
        let now = Time::from_unix_millis(1_700_000_001_000);
        let cap = json!({"kind": "mcp/request"});
        let id = p.revoke(now, "agent", vec![cap.clone()], "").unwrap();
        let sent = sent(&mut p);
        assert_eq!(sent.len(), 1, "{sent:?}");
        let r = &sent[0];
        assert_eq!(r["id"], id.as_str());
        assert_eq!(r["kind"], "capability/revoke");
        assert_eq!(r["to"], json!(["agent"]));
        assert_eq!(
            r["payload"],
            json!({"recipient": "agent", "capabilities": [cap]})
        );
        let built = revoke_envelope("agent", vec![cap], "");
        for field in ["kind", "to", "payload"] {
            assert_eq!(built[field], r[field], "{field}");
        }
    }

    #[test]
    fn grant_without_the_capability_to_grant_is_refused_locally() {
        let mut p = joined(json!([{"kind": "chat"}]));
        let now = Time::from_unix_millis(1_700_000_001_000);
        let err = p
            .grant(now, "agent", vec![json!({"kind": "chat"})], "")
            .unwrap_err();
        assert!(matches!(err, SendError::NotAllowed { .. }), "{err:?}");
        assert!(sent(&mut p).is_empty());
    }
}
