//! Inbound enforcement, one path for WebSocket and HTTP: size and parse limits, identity,
//! the reserved `system/` namespace, holds (pause, shutdown), capabilities, then the
//! gateway-owned operations and delivery.

use super::audit::{Direction, Transport};
use super::config::DeliveryMode;
use super::conn::Phase;
use super::join::JoinToken;
use super::member::Hold;
use super::op::Op;
use super::refusal::Refusal;
use super::system::ErrorPayload;
use super::workflow;
use super::{ConnId, Gateway, GatewayEvent};
use crate::capability::Precheck;
use crate::envelope::{CorrelationIds, RoutingView};
use crate::{PROTOCOL, Time};
use bytes::Bytes;
use serde_json::Value;

/// An accepted envelope's id and timestamp, filled in only for HTTP's answer.
pub(super) struct Accepted {
    pub(super) id: Option<String>,
    pub(super) ts: Option<String>,
    /// What to answer instead of `{id, status: "accepted", timestamp}`.
    pub(super) answer: Option<Value>,
}

impl Gateway {
    /// [`Input::Frame`](super::Input::Frame)'s work.
    pub(super) fn on_frame(&mut self, now: Time, conn: ConnId, frame: Bytes) {
        let Some(c) = self.conns.get_mut(conn) else {
            return;
        };
        c.last_activity = now;
        match c.phase {
            Phase::Closed => {}
            Phase::Pending { .. } => self.pending_frame(now, conn, &frame, JoinToken::InFrame),
            Phase::Joined { member } => {
                if frame.first() == Some(&b'#') {
                    self.stream_data(now, conn, member, frame);
                } else {
                    self.joined_frame(now, conn, member, frame);
                }
            }
        }
        self.finish_closes(now);
    }

    /// [`Input::Join`](super::Input::Join)'s work.
    pub(super) fn on_token_join(
        &mut self,
        now: Time,
        conn: ConnId,
        frame: Bytes,
        bearer: super::Bearer<'_>,
    ) {
        let Some(c) = self.conns.get_mut(conn) else {
            return;
        };
        if matches!(c.phase, Phase::Pending { .. }) {
            c.last_activity = now;
            self.pending_frame(now, conn, &frame, JoinToken::Given(bearer));
            self.finish_closes(now);
        } else {
            self.on_frame(now, conn, frame);
        }
    }

    /// [`Input::Oversize`](super::Input::Oversize)'s work.
    pub(super) fn on_oversize(&mut self, now: Time, conn: ConnId, size: usize) {
        let Some(c) = self.conns.get_mut(conn) else {
            return;
        };
        c.last_activity = now;
        let max = self.config.gateway.limits.max_frame_bytes;
        let r = Refusal::new(
            "frame_too_large",
            format!("frame of {size} bytes exceeds the limit of {max} bytes"),
        );
        match c.phase {
            Phase::Joined { member } => self.refuse_ws(now, conn, member, r, None),
            Phase::Pending { .. } => {
                let (f, _) = self.error_frame(
                    now,
                    None,
                    None,
                    ErrorPayload {
                        error: r.code,
                        attempted_kind: None,
                        your_capabilities: None,
                        extra: None,
                        message: &r.message,
                    },
                );
                self.transmit(now, conn, f);
            }
            Phase::Closed => {}
        }
        self.finish_closes(now);
    }

    fn joined_frame(&mut self, now: Time, conn: ConnId, member: usize, frame: Bytes) {
        self.from_conn = Some(conn);
        let submitted = self.submit(now, member, Transport::WebSocket, Some(conn), frame.clone());
        self.from_conn = None;
        match submitted {
            Ok(_) => {}
            Err(r) if r.code == "invalid_envelope" || r.code == "reserved_kind" => {
                // A join repeated after the header (reference clients do this) is not an
                // envelope; anything else that fails to parse is refused.
                let join = serde_json::from_slice::<Value>(&frame)
                    .ok()
                    .and_then(|v| super::join::parse_join(&v));
                match join {
                    Some(req) => self.rejoin_frame(now, conn, member, req),
                    None => self.refuse_ws(now, conn, member, r, Some(&frame)),
                }
            }
            Err(r) => self.refuse_ws(now, conn, member, r, Some(&frame)),
        }
    }

    /// Sends the `system/error` for a refused frame to its sender only.
    pub(super) fn refuse_ws(
        &mut self,
        now: Time,
        conn: ConnId,
        member: usize,
        r: Refusal,
        frame: Option<&Bytes>,
    ) {
        let m = self.members.get(member);
        let who = m.id.clone();
        let caps = m.caps.clone();
        let violation = r.code == "capability_violation";
        self.stats.refusal(r.code);
        let mut logged = false;
        if self.audit_envelopes {
            let meta = serde_json::json!({ "error": r.code, "reason": r.message });
            let is_json = r.parsed();
            logged = self.audit_refusal(
                now,
                r.correlation.as_deref(),
                frame,
                is_json,
                who.clone(),
                Transport::WebSocket,
                meta,
            );
        }
        let (f, id) = self.error_frame(
            now,
            Some(&who),
            r.correlation.as_deref(),
            ErrorPayload {
                error: r.code,
                attempted_kind: r.attempted_kind.as_deref(),
                your_capabilities: violation.then_some(&caps),
                extra: r.extra.as_deref(),
                message: &r.message,
            },
        );
        self.push_event(GatewayEvent::Refused {
            participant: who.to_string(),
            code: r.code,
        });
        if logged || !self.audit_envelopes {
            self.gateway_send_one(now, conn, f, Some(&id), who, true);
        } else {
            // The refusal was counted, not logged: its error reply is not logged either.
            self.audit_envelopes = false;
            self.gateway_send_one(now, conn, f, Some(&id), who, true);
            self.audit_envelopes = true;
        }
    }

    /// Enforces and, if accepted, carries out one envelope from `member`.
    pub(super) fn submit(
        &mut self,
        now: Time,
        member: usize,
        transport: Transport,
        conn: Option<ConnId>,
        frame: Bytes,
    ) -> Result<Accepted, Refusal> {
        let _ = conn;
        if let Some(rl) = self.config.gateway.rate_limit
            && !self
                .members
                .get_mut(member)
                .bucket
                .take(now, frame.len(), &rl)
        {
            return Err(Refusal::new(
                "rate_limited",
                format!(
                    "over {} envelopes or {} bytes per second: slow down",
                    rl.per_second, rl.bytes_per_second
                ),
            ));
        }
        let limits = self.config.gateway.limits;
        if frame.len() > limits.max_frame_bytes {
            return Err(Refusal::new(
                "frame_too_large",
                format!(
                    "frame of {} bytes exceeds the limit of {} bytes",
                    frame.len(),
                    limits.max_frame_bytes
                ),
            ));
        }
        let view = RoutingView::parse(&frame, &limits)
            .map_err(|e| Refusal::new("invalid_envelope", e.to_string()))?;
        let m = self.members.get(member);
        let sender = m.id.clone();
        let claimed_id = view.id.as_deref();
        if let Some(from) = &view.from
            && **from != *sender
        {
            return Err(Refusal::new(
                "identity_mismatch",
                format!("from is {} but this connection is {sender}", &**from),
            )
            .about(claimed_id));
        }
        let kind: &str = &view.kind;
        if crate::envelope::is_reserved_kind(kind) {
            return Err(Refusal::new(
                "reserved_kind",
                if kind == "system/register" {
                    // The reference's words, which its scripts look for.
                    "system/register is reserved for the gateway. Use capability/grant instead."
                        .to_owned()
                } else {
                    format!("{kind} is reserved for the gateway")
                },
            )
            .about(claimed_id));
        }
        match m.hold {
            Hold::None => {}
            Hold::Paused(_) if super::pause::exempt_while_paused(kind) => {}
            Hold::Paused(_) => {
                return Err(Refusal::new(
                    "participant_paused",
                    "you are paused; only acknowledgements, cancellations, status and responses are accepted until resumed",
                )
                .about(claimed_id));
            }
            Hold::ShutDown if super::pause::exempt_after_shutdown(kind) => {}
            Hold::ShutDown => {
                return Err(Refusal::new(
                    "participant_shutdown",
                    "you were shut down; rejoin the space to send again",
                )
                .about(claimed_id));
            }
        }
        // Kind first; the payload is parsed only when a payload pattern must decide.
        let mut payload: Option<Value> = None;
        let pre = m.caps.precheck(kind);
        let allowed = match pre {
            Precheck::Allowed(_) => true,
            Precheck::Denied => false,
            Precheck::NeedsPayload => {
                payload = view.payload_value();
                m.caps.allows(kind, payload.as_ref())
            }
        };
        if self.audit_capabilities {
            // Which capability matched is looked up again only for the record.
            let matched = match pre {
                Precheck::Allowed(i) => Some(i),
                Precheck::Denied => None,
                Precheck::NeedsPayload => m.caps.first_match_index(kind, payload.as_ref()),
            };
            self.audit_capability(now, claimed_id, member, kind, matched, None);
        }
        if !allowed {
            let mut r = Refusal::new(
                "capability_violation",
                format!("Participant {sender} lacks capability for {kind}"),
            )
            .about(claimed_id);
            r.attempted_kind = Some(kind.to_owned());
            return Err(r);
        }
        // Fill in what the reference's clients omit; only then is the text rewritten.
        let bare_correlation = view
            .correlation_id
            .as_ref()
            .is_some_and(CorrelationIds::is_bare);
        let incomplete = view.from.is_none()
            || view.id.is_none()
            || view.ts.is_none()
            || view.protocol.is_none()
            || bare_correlation;
        let mut filled: Option<(String, String)> = None;
        let out_frame = if incomplete {
            let id = match &view.id {
                Some(i) => i.to_string(),
                None => self.ids.uuid_v4(),
            };
            let ts = match &view.ts {
                Some(t) => t.to_string(),
                None => now.rfc3339(),
            };
            let rewritten = rewrite(&frame, &sender, &id, &ts).ok_or_else(|| {
                Refusal::new("invalid_envelope", "envelope could not be completed")
            })?;
            filled = Some((id, ts));
            rewritten
        } else {
            frame.clone()
        };
        let id: &str = match &filled {
            Some((id, _)) => id,
            None => view.id.as_deref().unwrap_or_default(),
        };
        // For the audit records of the envelope and of every recipient.
        let audit_id = self.audit_envelopes.then_some(id);
        if self.audit_envelopes {
            self.audit_envelope(
                now,
                "received",
                audit_id,
                Some(&out_frame),
                true,
                sender.clone(),
                Direction::Inbound,
                transport,
                None,
            );
        }
        let to = view.to.as_deref();
        let op = Op {
            member,
            id,
            kind,
            to,
            payload: payload.as_ref(),
            view: &view,
        };
        let frames_before = self.stats.frames_out;
        let done = self.dispatch(now, op, out_frame, audit_id);
        let answer = self.http_answer.take();
        done?;
        let frames = self.stats.frames_out - frames_before;
        self.stats.accepted(kind, frames);
        if transport != Transport::Http {
            return Ok(Accepted {
                id: None,
                ts: None,
                answer: None,
            });
        }
        let (id, ts) = match filled {
            Some(f) => f,
            None => (
                view.id.as_deref().unwrap_or_default().to_owned(),
                view.ts.as_deref().unwrap_or_default().to_owned(),
            ),
        };
        Ok(Accepted {
            id: Some(id),
            ts: Some(ts),
            answer,
        })
    }

    /// Carries out an accepted envelope: the gateway-owned kinds, then delivery. `id` is the
    /// envelope's id for audit lines, `None` when they are off.
    fn dispatch(
        &mut self,
        now: Time,
        op: Op<'_, '_>,
        frame: Bytes,
        id: Option<&str>,
    ) -> Result<(), Refusal> {
        match op.kind {
            "capability/grant" => self.op_grant(now, &op, &frame, id),
            "capability/revoke" => self.op_revoke(now, &op, &frame, id),
            "space/invite" => self.op_invite(now, &op, &frame, id),
            "space/kick" => self.op_kick(now, &op, &frame, id),
            "participant/pause" | "participant/resume" | "participant/shutdown" => {
                self.op_control(now, &op, &frame, id)
            }
            "stream/request" => self.op_stream_request(now, &op, &frame, id),
            "stream/close" => self.op_stream_close(now, &op, &frame, id),
            k if let Some(w) = super::streams::WriteOp::of(k) => self.op_stream_write(now, &op, w),
            _ if self.config.gateway.delivery == DeliveryMode::Addressed => {
                let sender = self.members.get(op.member).id.clone();
                let correlation = op.view.correlation_id.as_ref().and_then(|c| c.first());
                match self.workflow.route(op.kind, op.id, &sender, correlation) {
                    workflow::Route::Strict => {
                        self.deliver_envelope(now, &frame, id, op.member, op.to)
                    }
                    workflow::Route::Everyone => {
                        self.deliver_envelope(now, &frame, id, op.member, None)
                    }
                    workflow::Route::AlsoTo(proposer) => {
                        self.deliver_with(now, &frame, id, op.member, op.to, Some(&proposer))
                    }
                }
                Ok(())
            }
            _ => {
                self.deliver_envelope(now, &frame, id, op.member, op.to);
                Ok(())
            }
        }
    }
}

/// Completes an envelope the reference's clients sent partially.
fn rewrite(frame: &[u8], from: &str, id: &str, ts: &str) -> Option<Bytes> {
    let mut v: serde_json::Map<String, Value> = serde_json::from_slice(frame).ok()?;
    v.insert("protocol".into(), Value::String(PROTOCOL.into()));
    v.insert("id".into(), Value::String(id.into()));
    v.insert("ts".into(), Value::String(ts.into()));
    v.insert("from".into(), Value::String(from.into()));
    if let Some(Value::String(c)) = v.get("correlation_id") {
        let c = c.clone();
        v.insert(
            "correlation_id".into(),
            Value::Array(vec![Value::String(c)]),
        );
    }
    serde_json::to_vec(&v).ok().map(Bytes::from)
}
