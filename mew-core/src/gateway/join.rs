//! Connections and identity: bearer header at connect, the reference's first-message joins
//! (`{"type":"join",…}` and `system/join`), anonymous joins, replacement connections.
//!
//! A join's `space` field is not checked: one gateway serves one space, and reference
//! clients name it inconsistently (id or display name). Requested capabilities are ignored.

use super::conn::{Conn, Phase};
use super::member::{Hold, Member, Origin};
use super::refusal::{JoinRefusal, refuse};
use super::system::ErrorPayload;
use super::{Bearer, ConnId, Gateway, GatewayEvent};
use crate::Time;
use crate::envelope::check_depth;
use crate::secret::TokenHash;
use bytes::Bytes;
use serde_json::Value;
use std::sync::Arc;

/// What a join message carried.
#[derive(Debug, Default)]
pub(super) struct JoinRequest {
    pub(super) token: Option<TokenHash>,
    /// The token itself, for a verifier of tokens issued elsewhere (never kept).
    pub(super) raw_token: Option<String>,
    pub(super) participant: Option<String>,
    pub(super) envelope_id: Option<String>,
}

/// Recognises a join message: `{"type":"join",…}` or a `system/join` envelope.
pub(super) fn parse_join(v: &Value) -> Option<JoinRequest> {
    let obj = v.as_object()?;
    let s = |o: &serde_json::Map<String, Value>, k: &str| {
        o.get(k).and_then(Value::as_str).map(str::to_owned)
    };
    if obj.get("type").and_then(Value::as_str) == Some("join") && !obj.contains_key("kind") {
        return Some(JoinRequest {
            token: s(obj, "token").map(|t| TokenHash::of(&t)),
            raw_token: s(obj, "token"),
            participant: s(obj, "participantId")
                .or_else(|| s(obj, "participant_id"))
                .or_else(|| s(obj, "participant")),
            envelope_id: None,
        });
    }
    if obj.get("kind").and_then(Value::as_str) == Some("system/join") {
        let p = obj.get("payload").and_then(Value::as_object);
        let empty = serde_json::Map::new();
        let p = p.unwrap_or(&empty);
        let raw = s(p, "token").or_else(|| s(obj, "token"));
        return Some(JoinRequest {
            token: raw.as_deref().map(TokenHash::of),
            raw_token: raw,
            participant: s(p, "participant")
                .or_else(|| s(p, "participantId"))
                .or_else(|| s(p, "participant_id"))
                .or_else(|| s(obj, "from")),
            envelope_id: s(obj, "id"),
        });
    }
    None
}

/// Whether applying this frame may draw randomness (an invitation mints a token): a
/// replicated space's log carries entropy only with such frames. Conservative, without
/// parsing: any frame that names `space/invite` or holds an escape (by which a JSON string
/// could spell it otherwise) may.
pub fn may_need_entropy(frame: &[u8]) -> bool {
    // Built once: building a finder costs more than searching a chat.
    static INVITE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"space/invite"));
    memchr::memchr(b'\\', frame).is_some() || INVITE.find(frame).is_some()
}

/// Takes the token out of a join message: the message without it and the token's digest,
/// or `None` when `frame` is not a join carrying a token. A replicated space logs joins this
/// way (and applies them as [`Input::Join`](super::Input::Join)), so its log holds no token.
pub fn seal_join(frame: &[u8]) -> Option<(Bytes, TokenHash)> {
    take_join_token(frame).map(|(frame, token)| (frame, TokenHash::of(&token)))
}

/// A join message without its token, and the token; `None` when `frame` is not a join
/// carrying a token. What [`seal_join`] digests, and what a node has judged
/// ([`Gateway::judge_token`]) before it logs a join with a token issued elsewhere.
pub fn take_join_token(frame: &[u8]) -> Option<(Bytes, String)> {
    let mut v: Value = serde_json::from_slice(frame).ok()?;
    let token = parse_join(&v)?.raw_token?;
    let obj = v.as_object_mut()?;
    obj.remove("token");
    if let Some(p) = obj.get_mut("payload").and_then(Value::as_object_mut) {
        p.remove("token");
    }
    Some((Bytes::from(serde_json::to_vec(&v).ok()?), token))
}

/// Where a join message's token is.
pub(super) enum JoinToken<'a> {
    /// Still in the message.
    InFrame,
    /// Taken out of it ([`Input::Join`](super::Input::Join)).
    Given(Bearer<'a>),
}

/// A bearer token resolved: judged by the identity verifier, or to be looked up by digest.
pub(super) enum Resolved {
    None,
    Hashed(TokenHash),
    Judged(super::identity::Judgement),
}

impl Gateway {
    /// Whether a join may create a participant of this id (an anonymous join, an unknown
    /// JWT subject): the id rule ([`crate::participant_id`]) and no member that looks like
    /// it. An id that is a member already is the caller's to handle.
    pub(super) fn new_id_refusal(&self, id: &str) -> Option<JoinRefusal> {
        if let Err(e) = crate::participant_id::check(id) {
            return Some(refuse("invalid_participant_id", e.to_string()));
        }
        self.members.lookalike(id).map(|m| {
            refuse(
                "invalid_participant_id",
                format!("participant id {id} looks like participant {}", m.id),
            )
        })
    }

    /// [`Input::Connected`](super::Input::Connected)'s work.
    pub(super) fn on_connected(&mut self, now: Time, bearer: Bearer<'_>) -> ConnId {
        let conn = self.new_conn(now);
        match self.resolve(bearer) {
            Resolved::None => {}
            Resolved::Judged(judged) => match self.judged_member(now, judged, None) {
                Ok((member, expires)) => self.join_verified(now, conn, member, expires),
                Err(r) => self.refuse_join(now, conn, None, r),
            },
            Resolved::Hashed(token) => match self.members.by_hash(&token) {
                Some(m) if !self.members.get(m).removed => {
                    if let Some(c) = self.conns.get_mut(conn) {
                        c.joined_with = Some(token);
                    }
                    self.join_member(now, conn, m);
                }
                _ => self.refuse_join(
                    now,
                    conn,
                    None,
                    refuse(
                        "unknown_token",
                        "the bearer token is not valid for this space",
                    ),
                ),
            },
        }
        self.finish_closes(now);
        conn
    }

    /// What a bearer token comes to: a token the identity verifier takes is judged, any
    /// other is looked up by its digest.
    pub(super) fn resolve(&self, bearer: Bearer<'_>) -> Resolved {
        match bearer {
            Bearer::None => Resolved::None,
            Bearer::Token(t) => match self.on_judge_token(t) {
                Some(judged) => Resolved::Judged(judged),
                None => Resolved::Hashed(TokenHash::of(t)),
            },
            Bearer::Hashed(h) => Resolved::Hashed(h),
            Bearer::Judged(j) => Resolved::Judged(j),
        }
    }

    fn new_conn(&mut self, now: Time) -> ConnId {
        let opts = &self.config.gateway;
        let deadline = now + opts.join_timeout;
        let next_ping = now + opts.heartbeat_interval;
        let id = self.conns.insert(Conn {
            phase: Phase::Pending { deadline },
            last_activity: now,
            next_ping,
            queued_frames: 0,
            queued_bytes: 0,
            expires: None,
            joined_with: None,
        });
        self.arm_conn_timer(deadline.min(next_ping));
        id
    }

    /// A frame on a connection that has not joined: it must be a join.
    pub(super) fn pending_frame(
        &mut self,
        now: Time,
        conn: ConnId,
        frame: &Bytes,
        token: JoinToken<'_>,
    ) {
        let parsed = self.parse_small_json(frame);
        let Some(mut req) = parsed.as_ref().and_then(parse_join) else {
            self.refuse_join(
                now,
                conn,
                None,
                refuse(
                    "join_required",
                    "the first message must be a join (or connect with an Authorization header)",
                ),
            );
            return;
        };
        let verified = match token {
            JoinToken::InFrame => req
                .raw_token
                .take()
                .and_then(|raw| self.verified_member(now, &raw, req.participant.as_deref())),
            JoinToken::Given(bearer) => {
                req.token = None;
                req.raw_token = None;
                match self.resolve(bearer) {
                    Resolved::None => None,
                    Resolved::Hashed(hash) => {
                        req.token = Some(hash);
                        None
                    }
                    Resolved::Judged(judged) => {
                        Some(self.judged_member(now, judged, req.participant.as_deref()))
                    }
                }
            }
        };
        if let Some(verified) = verified {
            match verified {
                Ok((member, expires)) => self.join_verified(now, conn, member, expires),
                Err(r) => self.refuse_join(now, conn, req.envelope_id.as_deref(), r),
            }
            return;
        }
        match self.authenticate(&req) {
            Ok(member) => {
                if let Some(c) = self.conns.get_mut(conn) {
                    c.joined_with = req.token;
                }
                self.join_member(now, conn, member);
            }
            Err(r) => self.refuse_join(now, conn, req.envelope_id.as_deref(), r),
        }
    }

    /// A join on a connection that already joined: a no-op for the same participant.
    pub(super) fn rejoin_frame(
        &mut self,
        now: Time,
        conn: ConnId,
        member: usize,
        req: JoinRequest,
    ) {
        let me = self.members.get(member);
        let same_id = req.participant.as_deref().is_none_or(|p| p == &*me.id);
        let verified_same = req.raw_token.as_deref().is_some_and(|t| {
            self.verifier.as_ref().is_some_and(
                |v| matches!(v.verify(t), super::Verdict::Valid(i) if i.subject == *me.id),
            )
        });
        let same_token = verified_same
            || req
                .token
                .as_ref()
                .is_none_or(|t| self.members.by_hash(t) == Some(member) || me.tokens.is_empty());
        if same_id && same_token {
            return;
        }
        let id = me.id.clone();
        let (frame, _) = self.error_frame(
            now,
            Some(&id),
            req.envelope_id.as_deref(),
            ErrorPayload {
                error: "identity_mismatch",
                attempted_kind: None,
                your_capabilities: None,
                extra: None,
                message: "this connection is already joined as another participant; a connection never changes identity",
            },
        );
        self.push_event(GatewayEvent::Refused {
            participant: id.to_string(),
            code: "identity_mismatch",
        });
        self.transmit(now, conn, frame);
    }

    fn parse_small_json(&self, frame: &[u8]) -> Option<Value> {
        let limits = &self.config.gateway.limits;
        if frame.len() > limits.max_frame_bytes || check_depth(frame, limits.max_depth).is_err() {
            return None;
        }
        serde_json::from_slice(frame).ok()
    }

    /// Maps a join request to a member: token decides; anonymous ids when allowed.
    fn authenticate(&mut self, req: &JoinRequest) -> Result<usize, JoinRefusal> {
        if let Some(token) = &req.token
            && let Some(m) = self.members.by_hash(token)
        {
            let member = self.members.get(m);
            if member.removed {
                return Err(refuse("unknown_token", "this token has been revoked"));
            }
            if let Some(p) = &req.participant
                && p != &*member.id
            {
                let message = if crate::participant_id::check(p).is_ok() {
                    format!("the token does not belong to participant {p}")
                } else {
                    "the token does not belong to the participant the join names".to_owned()
                };
                return Err(refuse("identity_mismatch", message));
            }
            return Ok(m);
        }
        if !self.config.gateway.anonymous_joins {
            return Err(match &req.token {
                Some(_) => refuse("unknown_token", "the token is not valid for this space"),
                None => refuse("authentication_required", "a join needs a token"),
            });
        }
        let Some(p) = req.participant.as_deref() else {
            return Err(refuse(
                "invalid_participant_id",
                "an anonymous join needs a participantId",
            ));
        };
        if let Err(e) = crate::participant_id::check(p) {
            return Err(refuse("invalid_participant_id", e.to_string()));
        }
        if self.members.len() >= self.config.gateway.max_participants {
            return Err(refuse(
                "too_many_participants",
                "the space holds as many participants as it may",
            ));
        }
        if self.members.find(p).is_some() {
            return Err(refuse(
                "participant_id_taken",
                format!("participant id {p} is already taken"),
            ));
        }
        if let Some(r) = self.new_id_refusal(p) {
            return Err(r);
        }
        let caps = self.config.default_capabilities.clone();
        Ok(self.members.insert(Member {
            id: Arc::from(p),
            origin: Origin::Anonymous,
            tokens: Vec::new(),
            static_caps: caps.clone(),
            grants: Vec::new(),
            caps: Arc::new(caps),
            conns: Default::default(),
            virtual_log: None,
            hold: Hold::None,
            bucket: Default::default(),
            removed: false,
        }))
    }

    fn refuse_join(&mut self, now: Time, conn: ConnId, correlation: Option<&str>, r: JoinRefusal) {
        let (frame, _) = self.error_frame(
            now,
            None,
            correlation,
            ErrorPayload {
                error: r.code,
                attempted_kind: None,
                your_capabilities: None,
                extra: None,
                message: &r.message,
            },
        );
        self.transmit(now, conn, frame);
        self.push_event(GatewayEvent::JoinRefused { conn, code: r.code });
        self.close_conn(now, conn, 1008, &r.message, "join refused");
    }

    /// Binds a connection to a member: welcome to it, presence to the others.
    pub(super) fn join_member(&mut self, now: Time, conn: ConnId, member: usize) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.phase = Phase::Joined { member };
            let idle = c.last_activity + self.config.gateway.idle_timeout;
            let at = c.expires.map_or(idle, |e| e.min(idle));
            self.arm_conn_timer(at);
        }
        let m = self.members.get_mut(member);
        let was_online = !m.conns.is_empty();
        let displaced = m.conns.add(conn);
        // Rejoining ends a shutdown.
        if m.hold == Hold::ShutDown {
            m.hold = Hold::None;
        }
        let id = m.id.to_string();
        let replaced = !displaced.is_empty();
        for old in displaced {
            // The participant never left: no presence, streams kept.
            if let Some(c) = self.conns.get_mut(old) {
                c.phase = Phase::Closed;
            }
            self.out.push_back(super::Output::Close {
                conn: old,
                code: 1000,
                reason: crate::REPLACED_REASON.into(),
            });
            self.push_event(GatewayEvent::Replaced {
                old,
                new: conn,
                participant: id.clone(),
            });
        }
        self.update_audience(member);
        if !replaced {
            self.push_event(GatewayEvent::Joined {
                conn,
                participant: id,
            });
        }
        self.send_welcome_on(now, member, Some(conn));
        // A replacement, or another screen of a participant already present: no presence.
        if !was_online {
            self.send_presence_join(now, member);
        }
    }

    /// [`Input::Disconnected`](super::Input::Disconnected)'s work.
    pub(super) fn on_disconnected(&mut self, now: Time, conn: ConnId) {
        let Some(c) = self.conns.remove(conn) else {
            return;
        };
        if let Phase::Joined { member } = c.phase {
            self.member_left(now, conn, member, "connection closed");
        }
        self.finish_closes(now);
    }
}

#[cfg(test)]
mod tests {
    use super::may_need_entropy;

    #[test]
    fn entropy_goes_with_every_spelling_of_an_invitation_and_not_with_a_plain_chat() {
        let chat = br#"{"protocol":"mew/v0.4","id":"c1","kind":"chat","payload":{"text":"hi"}}"#;
        assert!(!may_need_entropy(chat));
        for invite in [
            &br#"{"protocol":"mew/v0.4","id":"i1","kind":"space/invite","payload":{}}"#[..],
            br#"{"protocol":"mew/v0.4","id":"i1","kind":"space\/invite","payload":{}}"#,
            br#"{"protocol":"mew/v0.4","id":"i1","kind":"\u0073pace/invite","payload":{}}"#,
        ] {
            // Each is an invitation to a JSON reader.
            let v: serde_json::Value = serde_json::from_slice(invite).unwrap();
            assert_eq!(v["kind"], "space/invite");
            assert!(
                may_need_entropy(invite),
                "{}",
                String::from_utf8_lossy(invite)
            );
        }
        // A chat quoting something is given entropy it will not use: harmless.
        assert!(may_need_entropy(
            br#"{"kind":"chat","payload":{"text":"say \"hi\""}}"#
        ));
    }
}
