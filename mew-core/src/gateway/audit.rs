//! Audit records in the reference's JSONL layout. A record holds shared handles (the frame's
//! `Bytes`, `Arc<str>` ids) and is formatted only by [`AuditRecord::to_json_line`], so an
//! enabled log costs little per envelope and a disabled one nothing.

use super::Gateway;
use crate::Time;
use crate::capability::{Capability, CapabilitySet};
use bytes::Bytes;
use serde_json::Value;
use std::fmt::Write as _;
use std::sync::Arc;

/// Which `.mew/logs` file a record belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditFile {
    /// `envelope-history.jsonl`.
    EnvelopeHistory,
    /// `capability-decisions.jsonl`.
    CapabilityDecisions,
}

impl AuditFile {
    /// The file name inside `.mew/logs/`.
    pub fn file_name(self) -> &'static str {
        match self {
            AuditFile::EnvelopeHistory => "envelope-history.jsonl",
            AuditFile::CapabilityDecisions => "capability-decisions.jsonl",
        }
    }
}

/// How an envelope reached or left the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A WebSocket connection.
    WebSocket,
    /// HTTP injection.
    Http,
    /// A virtual participant's log.
    Virtual,
}

impl Transport {
    fn as_str(self) -> &'static str {
        match self {
            Transport::WebSocket => "websocket",
            Transport::Http => "http",
            Transport::Virtual => "virtual",
        }
    }
}

/// `inbound` (from a participant) or `outbound` (to one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From a participant.
    Inbound,
    /// To a participant.
    Outbound,
}

#[derive(Debug, Clone)]
enum Inner {
    Envelope {
        at: Time,
        event: &'static str,
        id: Option<Arc<str>>,
        envelope: Option<Bytes>,
        envelope_is_json: bool,
        participant: Arc<str>,
        space_id: Arc<str>,
        direction: Direction,
        transport: Transport,
        metadata: Option<Value>,
    },
    Capability {
        at: Time,
        envelope_id: Option<Arc<str>>,
        participant: Arc<str>,
        space_id: Arc<str>,
        allowed: bool,
        required: Arc<str>,
        matched: Option<Capability>,
        granted: CapabilitySet,
        metadata: Option<Value>,
    },
}

/// One line of an audit log.
#[derive(Debug, Clone)]
pub struct AuditRecord(Box<Inner>);

impl AuditRecord {
    /// The file the record goes to.
    pub fn file(&self) -> AuditFile {
        match *self.0 {
            Inner::Envelope { .. } => AuditFile::EnvelopeHistory,
            Inner::Capability { .. } => AuditFile::CapabilityDecisions,
        }
    }

    /// `received`, `delivered`, `rejected` or `capability_check`.
    pub fn event(&self) -> &'static str {
        match &*self.0 {
            Inner::Envelope { event, .. } => event,
            Inner::Capability { .. } => "capability_check",
        }
    }

    /// The participant the record is about (sender, or recipient for `delivered`).
    pub fn participant(&self) -> &str {
        match &*self.0 {
            Inner::Envelope { participant, .. } | Inner::Capability { participant, .. } => {
                participant
            }
        }
    }

    /// The record as one JSON line (without the newline), keys in the reference's order.
    pub fn to_json_line(&self) -> String {
        let mut s = String::with_capacity(256);
        let q = |v: &str| serde_json::to_string(v).expect("strings serialise");
        match &*self.0 {
            Inner::Envelope {
                at,
                event,
                id,
                envelope,
                envelope_is_json,
                participant,
                space_id,
                direction,
                transport,
                metadata,
            } => {
                let _ = write!(s, "{{\"timestamp\":\"{at}\",\"event\":\"{event}\"");
                if let Some(id) = id {
                    let _ = write!(s, ",\"id\":{}", q(id));
                }
                if let Some(env) = envelope {
                    s.push_str(",\"envelope\":");
                    match (envelope_is_json, std::str::from_utf8(env)) {
                        (true, Ok(text)) => s.push_str(text.trim()),
                        (_, Ok(text)) => s.push_str(&q(text)),
                        (_, Err(_)) => s.push_str(&q(&String::from_utf8_lossy(env))),
                    }
                }
                let _ = write!(
                    s,
                    ",\"participant\":{},\"space_id\":{},\"direction\":\"{}\",\"transport\":\"{}\"",
                    q(participant),
                    q(space_id),
                    match direction {
                        Direction::Inbound => "inbound",
                        Direction::Outbound => "outbound",
                    },
                    transport.as_str()
                );
                if let Some(m) = metadata {
                    let _ = write!(s, ",\"metadata\":{m}");
                }
            }
            Inner::Capability {
                at,
                envelope_id,
                participant,
                space_id,
                allowed,
                required,
                matched,
                granted,
                metadata,
            } => {
                let _ = write!(s, "{{\"timestamp\":\"{at}\",\"event\":\"capability_check\"");
                if let Some(id) = envelope_id {
                    let _ = write!(s, ",\"envelope_id\":{}", q(id));
                }
                let _ = write!(
                    s,
                    ",\"participant\":{},\"space_id\":{},\"result\":\"{}\",\"required_capability\":{}",
                    q(participant),
                    q(space_id),
                    if *allowed { "allowed" } else { "denied" },
                    q(required)
                );
                if let Some(m) = matched {
                    let _ = write!(s, ",\"matched_capability\":{}", m.raw());
                }
                let _ = write!(s, ",\"granted_capabilities\":{}", granted.to_json());
                if let Some(m) = metadata {
                    let _ = write!(s, ",\"metadata\":{m}");
                }
            }
        }
        s.push('}');
        s
    }
}

impl Gateway {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn audit_envelope(
        &mut self,
        at: Time,
        event: &'static str,
        id: Option<Arc<str>>,
        frame: Option<&Bytes>,
        envelope_is_json: bool,
        participant: Arc<str>,
        direction: Direction,
        transport: Transport,
        metadata: Option<Value>,
    ) {
        self.out
            .push_back(super::Output::Audit(AuditRecord(Box::new(
                Inner::Envelope {
                    at,
                    event,
                    id,
                    envelope: frame.cloned(),
                    envelope_is_json,
                    participant,
                    space_id: self.space_id.clone(),
                    direction,
                    transport,
                    metadata,
                },
            ))));
    }

    pub(super) fn audit_delivered(
        &mut self,
        at: Time,
        id: Option<Arc<str>>,
        frame: &Bytes,
        to: Arc<str>,
        transport: Transport,
    ) {
        self.audit_envelope(
            at,
            "delivered",
            id,
            Some(frame),
            true,
            to,
            Direction::Outbound,
            transport,
            None,
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn audit_capability(
        &mut self,
        at: Time,
        envelope_id: Option<Arc<str>>,
        member: usize,
        kind: &str,
        matched: Option<Capability>,
        metadata: Option<Value>,
    ) {
        let m = self.members.get(member);
        let record = Inner::Capability {
            at,
            envelope_id,
            participant: m.id.clone(),
            space_id: self.space_id.clone(),
            allowed: matched.is_some(),
            required: Arc::from(kind),
            matched,
            granted: m.caps.clone(),
            metadata,
        };
        self.out
            .push_back(super::Output::Audit(AuditRecord(Box::new(record))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_escape_and_embed() {
        let r = AuditRecord(Box::new(Inner::Envelope {
            at: Time::from_unix_millis(0),
            event: "rejected",
            id: Some(Arc::from("a\"b")),
            envelope: Some(Bytes::from_static(b"not \"json\"\n")),
            envelope_is_json: false,
            participant: Arc::from("p\u{1}"),
            space_id: Arc::from("s"),
            direction: Direction::Inbound,
            transport: Transport::Http,
            metadata: None,
        }));
        let line = r.to_json_line();
        assert!(!line.contains('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], "a\"b");
        assert_eq!(v["envelope"], "not \"json\"\n");
        assert_eq!(v["participant"], "p\u{1}");
        assert_eq!(v["transport"], "http");
        assert_eq!(v["timestamp"], "1970-01-01T00:00:00.000Z");
        assert!(v.get("metadata").is_none());
        assert_eq!(r.file().file_name(), "envelope-history.jsonl");
    }
}
