//! `space/invite` and `space/kick`.
//!
//! An invite ([i7k]) registers the invited id with its `initial_capabilities` (which must be
//! covered by the inviter's own, like a grant: unlike the reference, holding `space/invite`
//! does not let a participant mint one with more than it has) and a fresh token from the
//! token source. The inviter alone gets `space/invite-ack` (`to: [inviter]`,
//! `correlation_id: [invite id]`, payload `{status: "created", participant_id, token,
//! connection_url?}`), and an HTTP `POST` is answered with the same fields; everyone else
//! gets `system/presence` `{event: "invited", participant: {id, capabilities}, invited_by,
//! reason?}`, without the token. The invite envelope itself is not forwarded (the
//! acknowledgement and the presence replace it, as in the reference).
//!
//! The token exists in the answer only: the gateway keeps its digest (in durable state,
//! where the space has it) and no driver writes it to a file, so an invitation's credential
//! is never read as a configured participant's (`.mew/tokens/` holds configured tokens
//! only), and no answer can say `created` for a token that was not kept.
//!
//! Refused, before anyone hears of it: an id that breaks the id rule
//! ([`crate::participant_id`]: `invalid_participant_id`, 400 over HTTP, the message never
//! repeating a long id), an id that `space.yaml` names (`already_exists`, 409: a kick does
//! not free it), an id that is a participant already (`already_exists`), an id that looks
//! like a member's (`invalid_participant_id`).
//!
//! A kick delivers the kick envelope, then closes the participant's connection, announces
//! its leave and refuses its tokens until it is invited again.

use super::config::compile_json_caps;
use super::member::{Hold, Member, Origin};
use super::op::Op;
use super::refusal::Refusal;
use super::system::PInfo;
use super::{Gateway, GatewayEvent};
use crate::Time;
use crate::secret::TokenHash;
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};
use std::sync::Arc;

#[derive(Serialize)]
struct InviteAck<'a> {
    status: &'static str,
    participant_id: &'a str,
    token: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    connection_url: Option<&'a str>,
}

#[derive(Serialize)]
struct PresenceInvited<'a> {
    event: &'static str,
    participant: PInfo<'a>,
    invited_by: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

impl Gateway {
    pub(super) fn op_invite(
        &mut self,
        now: Time,
        op: &Op<'_, '_>,
        _frame: &Bytes,
        _id: Option<&str>,
    ) -> Result<(), Refusal> {
        let payload = op.payload();
        let Some(pid) = payload.get("participant_id").and_then(Value::as_str) else {
            return Err(Refusal::new(
                "invalid_envelope",
                "space/invite requires participant_id in payload",
            )
            .about_id(op.id));
        };
        if let Err(why) = crate::participant_id::check(pid) {
            return Err(Refusal::new("invalid_participant_id", why.to_string()).about_id(op.id));
        }
        // An id space.yaml names is its entry's, kicked or not: an invitation never
        // becomes (or takes the place of) a configured participant.
        if self.config.participant(pid).is_some() {
            return Err(Refusal::new(
                "already_exists",
                format!("Participant {pid} is configured for this space; it cannot be invited"),
            )
            .with("status", "already_exists")
            .with("participant_id", pid)
            .about_id(op.id));
        }
        let existing = self.members.find(pid);
        if let Some(i) = existing
            && !self.members.get(i).removed
        {
            return Err(Refusal::new(
                "already_exists",
                format!("Participant {pid} already exists in this space"),
            )
            .with("status", "already_exists")
            .with("participant_id", pid)
            .about_id(op.id));
        }
        if let Some(m) = self.members.lookalike(pid) {
            return Err(Refusal::new(
                "invalid_participant_id",
                format!("participant_id {pid} looks like participant {}", m.id),
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
        // Only a replica given no entropy with the input has none: every replica refuses
        // alike, where any fallback would mint a token someone could predict.
        let Some(token) = self.fresh_token() else {
            return Err(Refusal::new(
                "internal_error",
                "no randomness for an invitation token; invite again",
            )
            .about_id(op.id));
        };
        let idx = match existing {
            Some(i) => {
                let m = self.members.get_mut(i);
                // A former entry of space.yaml (removed by a reload) is an invitation now:
                // the next reload must not take it for an entry that is gone.
                m.origin = Origin::Invited;
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
                conns: Default::default(),
                virtual_log: None,
                hold: Hold::None,
                bucket: Default::default(),
                removed: false,
            }),
        };
        let inviter = self.members.get(op.member).id.clone();
        self.push_event(GatewayEvent::Invited {
            by: inviter.to_string(),
            participant: pid.to_owned(),
        });
        let url = self.connection_url.clone();
        let ack_id = self.envelope_id();
        let ack = super::system::write(
            &ack_id,
            now,
            Some(&inviter),
            "space/invite-ack",
            Some(op.id),
            InviteAck {
                status: "created",
                participant_id: pid,
                token: &token,
                connection_url: url.as_deref(),
            },
        );
        let mut answer = json!({
            "id": ack_id, "status": "created", "participant_id": pid, "token": token,
        });
        if let Some(u) = &url {
            answer["connection_url"] = json!(u);
        }
        self.http_answer = Some(answer);
        // An inviter without a connection (HTTP) has the token in its answer.
        self.gateway_to_member(now, op.member, ack, &ack_id);
        let presence_id = self.envelope_id();
        let m = self.members.get(idx);
        let presence = super::system::write(
            &presence_id,
            now,
            None,
            "system/presence",
            None,
            PresenceInvited {
                event: "invited",
                participant: PInfo::of(m),
                invited_by: &inviter,
                reason: payload.get("reason").and_then(Value::as_str),
            },
        );
        self.gateway_broadcast(now, presence, &presence_id, Some(op.member));
        self.finish_closes(now);
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
        let conns = m.conns.clone();
        let was_virtual = m.virtual_log.is_some();
        let by = self.members.get(op.member).id.to_string();
        self.push_event(GatewayEvent::Kicked {
            by,
            participant: who.to_string(),
        });
        match conns.first() {
            Some(_) => {
                let why = format!("kicked: {reason}");
                for &c in conns.as_slice() {
                    self.close_conn(now, c, 1008, &why, "kicked");
                }
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
