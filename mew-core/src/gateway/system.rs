//! Envelopes the gateway writes: welcome, presence, errors, stream open/close, invite tokens.
//! Field order follows the spec's examples (serde keeps struct declaration order).

use super::deliver::Seen;
use super::{ConnId, Gateway};
use crate::capability::CapabilitySet;
use crate::{GATEWAY_ID, PROTOCOL, Time};
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;

#[derive(Serialize)]
struct Out<'a, P: Serialize> {
    protocol: &'static str,
    id: &'a str,
    ts: String,
    from: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    to: Option<[&'a str; 1]>,
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    correlation_id: Option<[&'a str; 1]>,
    payload: P,
}

#[derive(Serialize)]
pub(super) struct PInfo<'a> {
    pub(super) id: &'a str,
    pub(super) capabilities: &'a CapabilitySet,
    /// `true` for a participant the configuration marks as a person; absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(super) person: bool,
}

impl<'a> PInfo<'a> {
    pub(super) fn of(m: &'a super::member::Member) -> PInfo<'a> {
        PInfo {
            id: &m.id,
            capabilities: &m.caps,
            person: m.conns.person(),
        }
    }
}

#[derive(Serialize)]
struct Welcome<'a> {
    you: PInfo<'a>,
    participants: Vec<PInfo<'a>>,
    /// Others online the welcome of a crowd leaves out (see `crowd.rs`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    participants_omitted: Option<usize>,
    active_streams: Vec<Value>,
}

#[derive(Serialize)]
pub(super) struct PresenceJoin<'a> {
    pub(super) event: &'static str,
    pub(super) participant: PInfo<'a>,
}

#[derive(Serialize)]
pub(super) struct LeftId<'a> {
    pub(super) id: &'a str,
}

#[derive(Serialize)]
pub(super) struct PresenceLeave<'a> {
    pub(super) event: &'static str,
    pub(super) participant: LeftId<'a>,
}

/// A refusal's `system/error` payload.
#[derive(Serialize)]
pub(super) struct ErrorPayload<'a> {
    pub(super) error: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) attempted_kind: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) your_capabilities: Option<&'a CapabilitySet>,
    /// Fields particular to the error (`stream_id`, `targets`, ...).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(super) extra: Option<&'a serde_json::Map<String, Value>>,
    pub(super) message: &'a str,
}

/// A `system/error` a node writes on its own, outside the space's state (a replicated
/// space's node that could not put an input into the log): `id` is the node's, so the
/// space's ids are untouched.
pub fn node_error(id: &str, now: Time, code: &str, message: &str) -> Bytes {
    write(
        id,
        now,
        None,
        "system/error",
        None,
        ErrorPayload {
            error: code,
            attempted_kind: None,
            your_capabilities: None,
            extra: None,
            message,
        },
    )
}

/// Serialises a gateway envelope; returns its frame and id.
pub(super) fn write<P: Serialize>(
    id: &str,
    now: Time,
    to: Option<&str>,
    kind: &str,
    correlation: Option<&str>,
    payload: P,
) -> Bytes {
    let env = Out {
        protocol: PROTOCOL,
        id,
        ts: now.rfc3339(),
        from: GATEWAY_ID,
        to: to.map(|t| [t]),
        kind,
        correlation_id: correlation.map(|c| [c]),
        payload,
    };
    // Structs of strings and JSON values always serialise.
    Bytes::from(serde_json::to_vec(&env).expect("gateway envelope serialises"))
}

impl Gateway {
    /// Sends `system/welcome` to a member that is online: on each of its connections, or
    /// into its `output_log` when the gateway holds it. A crowd's welcome lists at most
    /// `crowd.size` others (see `crowd.rs`).
    pub(super) fn send_welcome(&mut self, now: Time, member: usize) {
        self.send_welcome_on(now, member, None);
    }

    /// [`send_welcome`](Self::send_welcome), on `only` alone when given (a connection that
    /// just joined: the member's other screens know what it says).
    pub(super) fn send_welcome_on(&mut self, now: Time, member: usize, only: Option<ConnId>) {
        if !self.members.get(member).is_online() {
            return;
        }
        let id = self.envelope_id();
        let m = self.members.get(member);
        let limit = self.config.gateway.crowd.size;
        let participants: Vec<PInfo<'_>> = self
            .members
            .iter()
            .filter(|(i, o)| *i != member && o.is_online())
            .take(limit)
            .map(|(_, o)| PInfo::of(o))
            .collect();
        // The member is online, so among the audience.
        let others = self.audience.len().saturating_sub(1);
        let crowded = others > participants.len();
        let payload = Welcome {
            you: PInfo::of(m),
            participants_omitted: crowded.then(|| others - participants.len()),
            participants,
            active_streams: self.streams.active_json(),
        };
        let frame = write(&id, now, Some(&m.id), "system/welcome", None, payload);
        let who = m.id.clone();
        // A welcome describes the join of the connection it goes to, and is not kept for
        // polling: a storm of joins would otherwise fill the history with welcomes (each
        // listing everyone) and push out every envelope worth polling for.
        if let Some(conn) = only {
            self.gateway_send_one(now, conn, frame, Some(&id), who, false);
        } else if !m.conns.is_empty() {
            self.gateway_send_all(now, member, frame, Some(&id), who, false);
        } else {
            self.gateway_to_member(now, member, frame, &id);
        }
    }

    /// Hands the redirect back from an authorization server to the bridge whose sign-in it
    /// ends: a `system/oauth-callback` envelope to `participant` alone (its connections
    /// only: it is not kept for polling). `payload` holds `state` and, under `secret`, the
    /// code and `iss` (so audit records redact them). Whether the participant was online.
    pub fn deliver_oauth_callback(&mut self, now: Time, participant: &str, payload: Value) -> bool {
        let Some(member) = self.members.find(participant) else {
            return false;
        };
        if !self.members.get(member).is_online() || self.members.get(member).conns.is_empty() {
            return false;
        }
        let id = self.envelope_id();
        let who = self.members.get(member).id.clone();
        let frame = write(&id, now, Some(&who), "system/oauth-callback", None, payload);
        self.gateway_send_all(now, member, frame, Some(&id), who, false);
        true
    }

    /// Builds a `system/error` frame addressed to `to`.
    pub(super) fn error_frame(
        &mut self,
        now: Time,
        to: Option<&str>,
        correlation: Option<&str>,
        payload: ErrorPayload<'_>,
    ) -> (Bytes, String) {
        let id = self.envelope_id();
        let frame = write(&id, now, to, "system/error", correlation, payload);
        (frame, id)
    }

    /// Sends a gateway frame to one member (its connections, or its `output_log` when the
    /// gateway holds it) and records it for polling.
    pub(super) fn gateway_to_member(&mut self, now: Time, member: usize, frame: Bytes, id: &str) {
        let m = self.members.get(member);
        let who = m.id.clone();
        match (m.conns.is_empty(), m.virtual_log.clone()) {
            (false, _) => {
                self.gateway_send_all(now, member, frame, Some(id), who, true);
            }
            (true, Some(path)) if !m.removed => {
                self.history.push(
                    now,
                    frame.clone(),
                    Seen::Only(smallvec::smallvec![who.clone()]),
                );
                if self.audit_envelopes {
                    self.audit_envelope(
                        now,
                        "delivered",
                        Some(id),
                        Some(&frame),
                        true,
                        who,
                        super::audit::Direction::Outbound,
                        super::audit::Transport::Virtual,
                        None,
                    );
                }
                self.append_log(path, &frame);
            }
            // An inviter without a connection (HTTP) finds what it is sent by polling.
            _ => self
                .history
                .push(now, frame, Seen::Only(smallvec::smallvec![who])),
        }
    }

    /// [`gateway_send_one`](Self::gateway_send_one) on each of a member's connections (one
    /// record for polling and one audit record: the participant received it once).
    pub(super) fn gateway_send_all(
        &mut self,
        now: Time,
        member: usize,
        frame: Bytes,
        id: Option<&str>,
        who: Arc<str>,
        keep: bool,
    ) {
        let mut k = 1;
        while let Some(&conn) = self.members.get(member).conns.as_slice().get(k) {
            k += 1;
            self.transmit(now, conn, frame.clone());
        }
        if let Some(first) = self.members.get(member).conns.first() {
            self.gateway_send_one(now, first, frame, id, who, keep);
        }
    }

    /// Sends a gateway frame to one member's connection and, with `keep`, records it for
    /// polling.
    pub(super) fn gateway_send_one(
        &mut self,
        now: Time,
        conn: super::ConnId,
        frame: Bytes,
        id: Option<&str>,
        who: Arc<str>,
        keep: bool,
    ) {
        if keep {
            self.history.push(
                now,
                frame.clone(),
                Seen::Only(smallvec::smallvec![who.clone()]),
            );
        }
        if self.audit_envelopes {
            // The gateway's own envelope has no `received` record: this one carries it
            // (secrets such as an invite's token redacted by the formatter).
            self.audit_envelope(
                now,
                "delivered",
                id,
                Some(&frame),
                true,
                who,
                super::audit::Direction::Outbound,
                super::audit::Transport::WebSocket,
                None,
            );
        }
        self.transmit(now, conn, frame);
    }
}
