//! Identities vouched for by someone else: a bearer token the space does not list (a JWT
//! from an identity provider) is handed to an injected [`IdentityVerifier`], which checks
//! its signature and issuer; the rule of what a verified subject may do stays here:
//!
//! - the subject is the participant of that id, with the capabilities of its entry in the
//!   configuration, or, where `auth.jwt.allow_unknown_subjects` is set, a participant of
//!   that id with `defaults.capabilities` (gone again when it leaves);
//! - a join that names another participant than the subject is refused
//!   (`identity_mismatch`): a token for `robot-1` never joins as anyone else;
//! - the token must carry an expiry; a token past it is refused, and a connection that
//!   joined with it is closed when it passes (1008, `token_expired`);
//! - a token not valid yet (a JWT's `nbf`, or an `iat` in the future) is refused
//!   (`invalid_token`); the three times are judged by the core's clock with one leeway,
//!   [`CLOCK_LEEWAY`].

use super::conn::Phase;
use super::member::{Hold, Member, Origin};
use super::refusal::{JoinRefusal, refuse};
use super::{ConnId, Gateway};
use crate::Time;
use std::sync::Arc;

/// What a verifier found a token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The participant id it vouches for (a JWT's `sub`).
    pub subject: String,
    /// When it stops vouching (a JWT's `exp`); `None` is refused.
    pub expires_at: Option<Time>,
    /// When it starts to vouch: a JWT's `nbf`, or its `iat` when that is later (a token
    /// issued in the future is not valid yet either); `None`: from any time.
    pub not_before: Option<Time>,
}

/// How far the gateway's clock may be from the identity provider's when it judges `exp`,
/// `nbf` and `iat`: one leeway for all three, none.
pub const CLOCK_LEEWAY: std::time::Duration = std::time::Duration::ZERO;

/// A verifier's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Not a token of this verifier's kind: it is looked up as an ordinary token.
    NotMine,
    /// Signed by a trusted key, for this space.
    Valid(Identity),
    /// Of this verifier's kind but not acceptable; the reason is shown to the client.
    Invalid(String),
}

/// A verifier's answer about a token of its kind: the identity, or why not. A space kept in
/// a log (durable, or a cluster) has it found where the connection arrives
/// ([`Gateway::judge_token`]) and logs it in place of the token, which never enters the log
/// and which no replica could check again.
pub type Judgement = Result<Identity, String>;

/// Checks bearer tokens issued elsewhere (signatures, issuers, audiences). Supplied by the
/// driver; the core keeps the rule of what a verified subject becomes.
pub trait IdentityVerifier: Send + Sync + std::fmt::Debug {
    /// Checks one token.
    fn verify(&self, token: &str) -> Verdict;
}

impl Gateway {
    /// The member a verified token authenticates and until when, or why not; `None` when
    /// no verifier takes the token (it is then an ordinary token).
    pub(super) fn verified_member(
        &mut self,
        now: Time,
        token: &str,
        claimed: Option<&str>,
    ) -> Option<Result<(usize, Time), JoinRefusal>> {
        let judged = self.on_judge_token(token)?;
        Some(self.judged_member(now, judged, claimed))
    }

    /// [`Gateway::judge_token`]'s work.
    pub(super) fn on_judge_token(&self, token: &str) -> Option<Judgement> {
        match self.verifier.as_ref()?.verify(token) {
            Verdict::NotMine => None,
            Verdict::Invalid(why) => Some(Err(why)),
            Verdict::Valid(i) => Some(Ok(i)),
        }
    }

    /// The member a judged token authenticates and until when, or why not.
    pub(super) fn judged_member(
        &mut self,
        now: Time,
        judged: Judgement,
        claimed: Option<&str>,
    ) -> Result<(usize, Time), JoinRefusal> {
        match judged {
            Ok(identity) => self.identity_member(now, identity, claimed),
            Err(why) => Err(refuse("invalid_token", why)),
        }
    }

    fn identity_member(
        &mut self,
        now: Time,
        identity: Identity,
        claimed: Option<&str>,
    ) -> Result<(usize, Time), JoinRefusal> {
        let Some(expires) = identity.expires_at else {
            return Err(refuse(
                "invalid_token",
                "the token has no expiry (exp); tokens that never expire are refused",
            ));
        };
        if expires + CLOCK_LEEWAY <= now {
            return Err(refuse("token_expired", "the token has expired"));
        }
        if let Some(from) = identity.not_before
            && from > now + CLOCK_LEEWAY
        {
            return Err(refuse(
                "invalid_token",
                "the token is not valid yet (its nbf or iat is later than the gateway's clock)",
            ));
        }
        let subject = identity.subject;
        // Before any message names it: a subject is an id like any other.
        if let Err(e) = crate::participant_id::check(&subject) {
            return Err(refuse(
                "invalid_participant_id",
                format!("the token's subject is not a usable participant id: {e}"),
            ));
        }
        if let Some(p) = claimed
            && p != subject
        {
            return Err(refuse(
                "identity_mismatch",
                format!("the token is for participant `{subject}`, not `{p}`"),
            ));
        }
        if let Some(m) = self.members.find(&subject) {
            if self.members.get(m).removed {
                return Err(refuse(
                    "unknown_token",
                    format!("participant `{subject}` has been removed from the space"),
                ));
            }
            return Ok((m, expires));
        }
        let allowed = self
            .config
            .gateway
            .jwt
            .as_ref()
            .is_some_and(|j| j.allow_unknown_subjects);
        if !allowed {
            return Err(refuse(
                "unknown_subject",
                format!("participant `{subject}` is not a member of this space"),
            ));
        }
        if let Some(mut r) = self.new_id_refusal(&subject) {
            r.message = format!(
                "the token's subject is not a usable participant id: {}",
                r.message
            );
            return Err(r);
        }
        if self.members.len() >= self.config.gateway.max_participants {
            return Err(refuse(
                "too_many_participants",
                "the space holds as many participants as it may",
            ));
        }
        let caps = self.config.default_capabilities.clone();
        let idx = self.members.insert(Member {
            id: Arc::from(subject.as_str()),
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
        });
        Ok((idx, expires))
    }

    /// Joins `conn` as a verified member whose token ends at `expires`.
    pub(super) fn join_verified(&mut self, now: Time, conn: ConnId, member: usize, expires: Time) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.expires = Some(expires);
        }
        self.join_member(now, conn, member);
    }

    /// Connections whose token has expired by `now`.
    pub(super) fn expired_tokens(&self, now: Time) -> Vec<ConnId> {
        self.conns
            .iter()
            .filter(|(_, c)| {
                matches!(c.phase, Phase::Joined { .. }) && c.expires.is_some_and(|e| e <= now)
            })
            .map(|(id, _)| id)
            .collect()
    }
}
