//! `capability/grant` and `capability/revoke`.
//!
//! A grant is accepted when the sender's capabilities allow the grant envelope itself (the
//! ordinary enforcement) and every granted capability is covered by the sender's own
//! ([`CapabilitySet::covers`], a sound check: it may refuse a safe grant, never allows an
//! unsafe one). The recipient then gets an updated `system/welcome`, then the grant is
//! delivered. The grant envelope's id is the `grant_id`; who granted what is kept as the
//! grant chain.
//!
//! Revocation takes effect on the recipient's next message. By `grant_id` it removes that
//! grant. By pattern it removes every *runtime* capability equal to or covered by one of the
//! given patterns. Capabilities from the space configuration are never removed by a revoke:
//! the configuration is the baseline an operator controls, and a message must not be able to
//! strip, say, the space owner's own access.

use super::config::compile_json_caps;
use super::member::Grant;
use super::op::Op;
use super::refusal::Refusal;
use super::{Gateway, GatewayEvent};
use crate::Time;
use crate::capability::CapabilitySet;
use bytes::Bytes;
use serde_json::Value;

impl Gateway {
    /// Resolves the member a space operation names (3.6.4: logical name = participant id).
    pub(super) fn named_member(
        &self,
        op: &Op<'_, '_>,
        payload: &Value,
        field: &str,
    ) -> Result<usize, Refusal> {
        let name = payload
            .get(field)
            .and_then(Value::as_str)
            .or_else(|| op.targets().next())
            .ok_or_else(|| {
                Refusal::new("invalid_envelope", format!("payload.{field} is required"))
                    .about_id(op.id)
            })?;
        self.members
            .find(name)
            .filter(|&i| !self.members.get(i).removed)
            .ok_or_else(|| {
                Refusal::new(
                    "unknown_participant",
                    format!("no participant {name} in this space"),
                )
                .about_id(op.id)
            })
    }

    /// Refuses capabilities the sender does not hold itself.
    pub(super) fn check_covered(
        &self,
        op: &Op<'_, '_>,
        caps: &CapabilitySet,
    ) -> Result<(), Refusal> {
        let mine = &self.members.get(op.member).caps;
        for c in caps {
            if !mine.covers(c) {
                return Err(Refusal::new(
                    "grant_exceeds_own_capabilities",
                    format!(
                        "you cannot give {} which your own capabilities do not cover",
                        c.raw()
                    ),
                )
                .about_id(op.id));
            }
        }
        Ok(())
    }

    pub(super) fn op_grant(
        &mut self,
        now: Time,
        op: &Op<'_, '_>,
        frame: &Bytes,
        id: Option<&str>,
    ) -> Result<(), Refusal> {
        let payload = op.payload();
        let recipient = self.named_member(op, &payload, "recipient")?;
        let caps = compile_json_caps(payload.get("capabilities"))
            .map_err(|e| Refusal::new("invalid_capability", e).about_id(op.id))?;
        if caps.is_empty() {
            return Err(Refusal::new(
                "invalid_capability",
                "a grant needs at least one capability",
            )
            .about_id(op.id));
        }
        self.check_covered(op, &caps)?;
        let max = self.config.gateway.max_grants_per_participant;
        let r = self.members.get(recipient);
        if r.grants.len() >= max {
            return Err(Refusal::new(
                "too_many_grants",
                format!("{} already holds {max} grants; revoke some first", r.id),
            )
            .about_id(op.id));
        }
        let granter = self.members.get(op.member).id.clone();
        let r = self.members.get_mut(recipient);
        r.grants.push(Grant {
            grant_id: op.id.to_owned(),
            granter: granter.clone(),
            caps: caps.iter().cloned().collect(),
        });
        r.recompute_caps();
        let participant = r.id.to_string();
        self.push_event(GatewayEvent::Granted {
            by: granter.to_string(),
            participant,
            grant_id: op.id.to_owned(),
        });
        self.send_welcome(now, recipient);
        self.deliver_envelope(now, frame, id, op.member, op.to);
        Ok(())
    }

    pub(super) fn op_revoke(
        &mut self,
        now: Time,
        op: &Op<'_, '_>,
        frame: &Bytes,
        id: Option<&str>,
    ) -> Result<(), Refusal> {
        let payload = op.payload();
        let recipient = self.named_member(op, &payload, "recipient")?;
        let removed = if let Some(gid) = payload.get("grant_id").and_then(Value::as_str) {
            let r = self.members.get_mut(recipient);
            let Some(pos) = r.grants.iter().position(|g| g.grant_id == gid) else {
                return Err(Refusal::new(
                    "unknown_grant",
                    format!("{} holds no grant {gid}", r.id),
                )
                .about_id(op.id));
            };
            r.grants.remove(pos).caps.len()
        } else if payload.get("capabilities").is_some() {
            let patterns = compile_json_caps(payload.get("capabilities"))
                .map_err(|e| Refusal::new("invalid_capability", e).about_id(op.id))?;
            let r = self.members.get_mut(recipient);
            let mut removed = 0;
            for g in &mut r.grants {
                let before = g.caps.len();
                g.caps.retain(|c| {
                    !(patterns.covers(c) || patterns.iter().any(|p| p.raw() == c.raw()))
                });
                removed += before - g.caps.len();
            }
            r.grants.retain(|g| !g.caps.is_empty());
            removed
        } else {
            return Err(Refusal::new(
                "invalid_envelope",
                "a revoke needs payload.grant_id or payload.capabilities",
            )
            .about_id(op.id));
        };
        let r = self.members.get_mut(recipient);
        r.recompute_caps();
        let participant = r.id.to_string();
        let by = self.members.get(op.member).id.to_string();
        self.push_event(GatewayEvent::Revoked {
            by,
            participant,
            removed,
        });
        self.send_welcome(now, recipient);
        self.deliver_envelope(now, frame, id, op.member, op.to);
        Ok(())
    }
}
