//! `space/invite` and `space/kick`.
//!
//! An invite registers the invited id with its `initial_capabilities` (which must be covered
//! by the inviter's own, like a grant) and a fresh token. The invite is delivered like any
//! envelope; the token goes only to the inviter, in a `system/invite` envelope
//! (`to: [inviter]`, `correlation_id: [invite id]`, payload `{participant_id, token,
//! capabilities}`). A kick delivers the kick envelope, then closes the participant's
//! connection, announces its leave and refuses its tokens until it is invited again.

use super::config::compile_json_caps;
use super::enforce::{Op, Refusal};
use super::member::{Hold, Member, Origin};
use super::{Gateway, GatewayEvent};
use crate::Time;
use crate::secret::TokenHash;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;

#[derive(Serialize)]
struct InviteToken<'a> {
    participant_id: &'a str,
    token: &'a str,
    capabilities: &'a crate::capability::CapabilitySet,
}

impl Gateway {
    pub(super) fn op_invite(
        &mut self,
        now: Time,
        op: &Op<'_, '_>,
        frame: &Bytes,
        id: Option<&str>,
    ) -> Result<(), Refusal> {
        let payload = op.payload();
        let Some(pid) = payload.get("participant_id").and_then(Value::as_str) else {
            return Err(
                Refusal::new("invalid_envelope", "`payload.participant_id` is required")
                    .about_id(op.id),
            );
        };
        if pid.is_empty() || pid.starts_with("system:") || pid.contains(char::is_whitespace) {
            return Err(Refusal::new(
                "invalid_participant_id",
                format!("`{pid}` is not a valid participant id"),
            )
            .about_id(op.id));
        }
        let existing = self.members.find(pid);
        if let Some(i) = existing
            && !self.members.get(i).removed
        {
            return Err(Refusal::new(
                "participant_id_taken",
                format!("`{pid}` is already a participant"),
            )
            .about_id(op.id));
        }
        if existing.is_none() && self.members.len() >= self.config.gateway.max_participants {
            return Err(Refusal::new(
                "too_many_participants",
                "the space holds as many participants as it may",
            )
            .about_id(op.id));
        }
        let caps = match payload.get("initial_capabilities") {
            None | Some(Value::Null) => self.config.default_capabilities.clone(),
            v => compile_json_caps(v)
                .map_err(|e| Refusal::new("invalid_capability", e).about_id(op.id))?,
        };
        self.check_covered(op, &caps)?;
        let token = self.fresh_token();
        let idx = match existing {
            Some(i) => {
                let m = self.members.get_mut(i);
                m.removed = false;
                m.static_caps = caps.clone();
                m.grants.clear();
                m.hold = Hold::None;
                m.tokens = vec![TokenHash::of(&token)];
                m.recompute_caps();
                self.members.add_token(TokenHash::of(&token), i);
                i
            }
            None => self.members.insert(Member {
                id: Arc::from(pid),
                origin: Origin::Invited,
                tokens: vec![TokenHash::of(&token)],
                static_caps: caps.clone(),
                grants: Vec::new(),
                caps: Arc::new(caps.clone()),
                conn: None,
                virtual_log: None,
                hold: Hold::None,
                bucket: Default::default(),
                removed: false,
            }),
        };
        let _ = idx;
        let inviter = self.members.get(op.member).id.clone();
        self.push_event(GatewayEvent::Invited {
            by: inviter.to_string(),
            participant: pid.to_owned(),
        });
        self.deliver_envelope(now, frame, id, op.member, op.to);
        let tid = self.envelope_id();
        let tframe = super::system::write(
            &tid,
            now,
            Some(&inviter),
            "system/invite",
            Some(op.id),
            InviteToken {
                participant_id: pid,
                token: &token,
                capabilities: &caps,
            },
        );
        // An inviter without a connection (HTTP) finds the token by polling.
        self.gateway_to_member(now, op.member, tframe, &tid);
        Ok(())
    }

    pub(super) fn op_kick(
        &mut self,
        now: Time,
        op: &Op<'_, '_>,
        frame: &Bytes,
        id: Option<&str>,
    ) -> Result<(), Refusal> {
        let payload = op.payload();
        let target = self.named_member(op, &payload, "participant_id")?;
        self.deliver_envelope(now, frame, id, op.member, op.to);
        let reason = payload
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("removed from the space")
            .to_owned();
        self.members.remove_tokens(target);
        let m = self.members.get_mut(target);
        m.removed = true;
        m.grants.clear();
        m.hold = Hold::None;
        m.recompute_caps();
        let who = m.id.clone();
        let conn = m.conn;
        let was_virtual = m.virtual_log.is_some();
        let by = self.members.get(op.member).id.to_string();
        self.push_event(GatewayEvent::Kicked {
            by,
            participant: who.to_string(),
        });
        match conn {
            Some(c) => {
                self.close_conn(now, c, 1008, &format!("kicked: {reason}"), "kicked");
                self.finish_closes(now);
            }
            None if was_virtual => {
                self.rebuild_audience();
                self.close_streams_of(now, &who);
                self.send_presence_leave(now, &who);
            }
            None => {}
        }
        Ok(())
    }
}
