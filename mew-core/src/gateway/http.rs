//! HTTP injection (spec 5.3) through the same enforcement path as WebSocket frames, and the
//! polling endpoint over the bounded history.
//!
//! `POST /participants/{id}/messages`: 401 without a bearer token; 403 when the token is not
//! that participant's; 400 when the body is not a JSON object with a string `kind`; 413 when
//! it is larger than the frame limit; when enforcement refuses it, the `system/error`
//! payload with the status the reference gives (400 for a reserved kind, an invalid id or
//! target, 404 for an unknown stream or participant, 409 for an invite of an existing
//! participant, 403 otherwise, e.g. `capability_violation` with `attempted_kind` and
//! `your_capabilities`), and the same `system/error` goes to the sender (its connection, or
//! its `output_log`); else 200 `{"id","status":"accepted","timestamp"}`, or what the
//! operation answers (an invite: `{"id","status":"created","participant_id","token"}`; a
//! stream request: `{"id","status":"stream_opened","stream_id","timestamp"}`).
//!
//! A participant with an `output_log` and no `auto_connect` is held by the gateway from its
//! first `POST` on, as the reference does: it is welcomed into its `output_log` (with the
//! active streams), announced with a presence `join`, and receives there what it is sent.

use super::audit::Transport;
use super::history::{Since, parse_rfc3339};
use super::system::ErrorPayload;
use super::{Gateway, ParticipantInfo, Time};
use bytes::Bytes;
use serde_json::{Value, json};

/// A 200 answer to an HTTP post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpAccepted {
    /// The envelope's id (assigned when the body had none).
    pub id: String,
    /// Its `ts`.
    pub timestamp: String,
    /// The answer of an operation that has one (an invite's token), instead of the usual.
    pub answer: Option<Value>,
}

impl HttpAccepted {
    /// The response body.
    pub fn body_json(&self) -> String {
        match &self.answer {
            Some(a) => a.to_string(),
            None => json!({"id": self.id, "status": "accepted", "timestamp": self.timestamp})
                .to_string(),
        }
    }
}

/// A refused HTTP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    /// HTTP status code.
    pub status: u16,
    /// JSON response body.
    pub body_json: String,
}

fn http_error(status: u16, code: &str, message: &str) -> HttpError {
    HttpError {
        status,
        body_json: json!({"error": code, "message": message}).to_string(),
    }
}

/// The rule for a request that names a space (`/ws?space=`, `/participants?space=`): a
/// gateway serves one space, and any other is 404 `unknown_space`; naming none is fine.
pub fn check_space(own: &str, asked: Option<&str>) -> Result<(), HttpError> {
    match asked {
        Some(s) if s != own => Err(http_error(
            404,
            "unknown_space",
            &format!("no space {s:?} here"),
        )),
        _ => Ok(()),
    }
}

impl Gateway {
    /// [`Gateway::http_participants_json`]'s work.
    pub(super) fn participants_json(
        &self,
        space: Option<&str>,
        bearer: Option<&str>,
    ) -> Result<String, HttpError> {
        check_space(&self.space_id, space)?;
        let list: Vec<_> = self
            .http_participants(bearer)?
            .into_iter()
            .map(|p| {
                json!({"id": p.id, "capabilities": p.capabilities,
                       "online": p.online, "virtual": p.is_virtual})
            })
            .collect();
        Ok(json!({"space": &*self.space_id, "participants": list}).to_string())
    }

    /// [`Gateway::http_health_json`]'s work.
    pub(super) fn health_json(&self, audit_dropped: u64, restored: Option<&Value>) -> String {
        let h = self.health();
        json!({"status": "ok", "protocol": crate::PROTOCOL, "space": h.space,
               "connections": h.connections,
               "participants_online": h.participants_online,
               "active_streams": h.active_streams, "history": h.history_len,
               "history_bytes": h.history_bytes,
               "audit_dropped": audit_dropped, "restored": restored})
        .to_string()
    }

    fn http_auth(
        &self,
        participant: &str,
        bearer: Option<crate::secret::TokenHash>,
    ) -> Result<usize, HttpError> {
        let Some(token) = bearer else {
            return Err(http_error(
                401,
                "unauthorized",
                "an Authorization: Bearer token is required",
            ));
        };
        if let Err(e) = crate::participant_id::check(participant) {
            return Err(http_error(400, "invalid_participant_id", &e.to_string()));
        }
        match (self.members.by_hash(&token), self.members.find(participant)) {
            (Some(t), Some(p)) if t == p && !self.members.get(p).removed => Ok(p),
            _ => Err(http_error(
                403,
                "forbidden",
                "the token does not authenticate this participant",
            )),
        }
    }

    /// [`Gateway::http_participants`]'s work.
    pub(super) fn participants_visible_to(
        &self,
        bearer: Option<&str>,
    ) -> Result<Vec<ParticipantInfo>, HttpError> {
        let Some(token) = bearer else {
            return Err(http_error(
                401,
                "unauthorized",
                "an Authorization: Bearer token of a participant of this space is required",
            ));
        };
        match self.members.by_token(token) {
            Some(m) if !self.members.get(m).removed => Ok(self.participants()),
            _ => Err(http_error(
                403,
                "forbidden",
                "the token is not a participant's of this space",
            )),
        }
    }

    /// [`Input::Post`](super::Input::Post)'s work.
    pub(super) fn on_post(
        &mut self,
        now: Time,
        participant: &str,
        bearer: super::Bearer<'_>,
        body: &[u8],
    ) -> Result<HttpAccepted, HttpError> {
        // Posts are authenticated by the tokens the space keeps (a judged token is no
        // member's: 403).
        let bearer = match bearer {
            super::Bearer::None => None,
            super::Bearer::Token(t) => Some(crate::secret::TokenHash::of(t)),
            super::Bearer::Hashed(h) => Some(h),
            super::Bearer::Judged(_) => {
                return Err(http_error(
                    403,
                    "forbidden",
                    "the token does not authenticate this participant",
                ));
            }
        };
        let member = self.http_auth(participant, bearer)?;
        self.attach_virtual(now, member);
        let max = self.config.gateway.limits.max_frame_bytes;
        if body.len() > max {
            return Err(http_error(
                413,
                "frame_too_large",
                &format!(
                    "body of {} bytes exceeds the limit of {max} bytes",
                    body.len()
                ),
            ));
        }
        let valid = crate::envelope::check_depth(body, self.config.gateway.limits.max_depth)
            .is_ok()
            && serde_json::from_slice::<Value>(body).ok().is_some_and(|v| {
                v.get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| !k.is_empty())
            });
        if !valid {
            return Err(http_error(
                400,
                "invalid_request",
                "the body must be a JSON object with a non-empty string kind",
            ));
        }
        let frame = Bytes::copy_from_slice(body);
        let result = self.submit(now, member, Transport::Http, None, frame.clone());
        self.finish_closes(now);
        match result {
            Ok(a) => Ok(HttpAccepted {
                id: a.id.unwrap_or_default(),
                timestamp: a.ts.unwrap_or_default(),
                answer: a.answer,
            }),
            Err(r) => {
                self.stats.refusal(r.code);
                let who = self.members.get(member).id.clone();
                if self.audit_envelopes {
                    let _ = self.audit_refusal(
                        now,
                        r.correlation.as_deref(),
                        Some(&frame),
                        r.parsed(),
                        who.clone(),
                        Transport::Http,
                        json!({"error": r.code, "reason": r.message}),
                    );
                }
                let caps = self.members.get(member).caps.clone();
                let violation = r.attempted_kind.is_some();
                let payload = ErrorPayload {
                    error: r.code,
                    attempted_kind: r.attempted_kind.as_deref(),
                    your_capabilities: violation.then_some(&caps),
                    extra: r.extra.as_deref(),
                    message: &r.message,
                };
                let body = serde_json::to_string(&payload).unwrap_or_default();
                // The sender hears of it where it listens, as over WebSocket.
                let (f, id) = self.error_frame(now, Some(&who), r.correlation.as_deref(), payload);
                self.gateway_to_member(now, member, f, &id);
                self.push_event(super::GatewayEvent::Refused {
                    participant: who.to_string(),
                    code: r.code,
                });
                Err(HttpError {
                    status: r.http_status(),
                    body_json: body,
                })
            }
        }
    }

    /// Holds a participant with an `output_log` (and no `auto_connect`, else it is held
    /// from the start) from its first `POST` on: welcomed into its log, announced.
    fn attach_virtual(&mut self, now: Time, member: usize) {
        let m = self.members.get(member);
        if !m.conns.is_empty() || m.virtual_log.is_some() || m.removed {
            return;
        }
        let Some(log) = self
            .config
            .participants
            .iter()
            .find(|p| *p.id == *m.id)
            .and_then(|p| p.output_log.clone())
        else {
            return;
        };
        self.members.get_mut(member).virtual_log = Some(log);
        self.rebuild_audience();
        self.send_welcome(now, member);
        self.send_presence_join(now, member);
    }

    /// [`Gateway::http_messages`]'s work.
    pub(super) fn messages_visible_to(
        &self,
        participant: &str,
        bearer: Option<&str>,
        since: Option<&str>,
    ) -> Result<Vec<Bytes>, HttpError> {
        let member = self.http_auth(participant, bearer.map(crate::secret::TokenHash::of))?;
        let since = match since {
            None | Some("") => Since::Start,
            Some(s) => {
                if let Some(t) = parse_rfc3339(s) {
                    Since::Time(t)
                } else if let Ok(ms) = s.parse::<u64>() {
                    Since::Time(Time::from_unix_millis(ms))
                } else {
                    Since::Id(s)
                }
            }
        };
        Ok(self
            .history
            .visible_since(&self.members.get(member).id, since))
    }
}
