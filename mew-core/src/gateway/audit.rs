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
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
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
    /// One envelope handed to several recipients: a `delivered` line each.
    Delivered {
        at: Time,
        id: Option<Arc<str>>,
        space_id: Arc<str>,
        transport: Transport,
        recipients: Vec<Arc<str>>,
    },
    Capability {
        at: Time,
        envelope_id: Option<Arc<str>>,
        participant: Arc<str>,
        space_id: Arc<str>,
        allowed: bool,
        required: Arc<str>,
        matched: Option<Capability>,
        granted: Arc<CapabilitySet>,
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
            Inner::Envelope { .. } | Inner::Delivered { .. } => AuditFile::EnvelopeHistory,
            Inner::Capability { .. } => AuditFile::CapabilityDecisions,
        }
    }

    /// `received`, `delivered`, `rejected` or `capability_check`.
    pub fn event(&self) -> &'static str {
        match &*self.0 {
            Inner::Envelope { event, .. } => event,
            Inner::Delivered { .. } => "delivered",
            Inner::Capability { .. } => "capability_check",
        }
    }

    /// The participant the record is about (sender, or the first recipient for `delivered`).
    pub fn participant(&self) -> &str {
        match &*self.0 {
            Inner::Envelope { participant, .. } | Inner::Capability { participant, .. } => {
                participant
            }
            Inner::Delivered { recipients, .. } => recipients.first().map_or("", |r| r),
        }
    }

    /// The participants a `delivered` record names, one line each (the one participant of
    /// any other record).
    pub fn recipients(&self) -> Vec<&str> {
        match &*self.0 {
            Inner::Delivered { recipients, .. } => recipients.iter().map(|r| &**r).collect(),
            _ => vec![self.participant()],
        }
    }

    /// The record as JSON lines (without the last newline), keys in the reference's order:
    /// one line, or one per recipient of a `delivered` record.
    pub fn to_json_line(&self) -> String {
        let mut out = Vec::with_capacity(256);
        self.write_line(&mut out, &mut Timestamps::default());
        out.pop();
        String::from_utf8(out).expect("records are UTF-8")
    }

    /// Appends the record and its newline to `out`.
    ///
    /// The record is exactly one line whatever the input: an embedded envelope is valid JSON
    /// whose raw newlines can only sit between tokens, where they become spaces; every other
    /// string is escaped. Secrets (`token` fields, such as the one of `system/invite`) are
    /// replaced by `"[redacted]"`.
    pub fn write_line(&self, out: &mut Vec<u8>, ts: &mut Timestamps) {
        match &*self.0 {
            Inner::Delivered {
                at,
                id,
                space_id,
                transport,
                recipients,
            } => {
                // The parts every line shares are formatted once.
                let head = out.len();
                out.extend_from_slice(b"{\"timestamp\":\"");
                out.extend_from_slice(ts.get(*at));
                out.extend_from_slice(b"\",\"event\":\"delivered\"");
                if let Some(id) = id {
                    out.extend_from_slice(b",\"id\":");
                    push_str(out, id);
                }
                out.extend_from_slice(b",\"participant\":");
                let head_end = out.len();
                let mut tail = Vec::with_capacity(96);
                tail.extend_from_slice(b",\"space_id\":");
                push_str(&mut tail, space_id);
                tail.extend_from_slice(b",\"direction\":\"outbound\",\"transport\":\"");
                tail.extend_from_slice(transport.as_str().as_bytes());
                tail.extend_from_slice(b"\"}\n");
                for (i, r) in recipients.iter().enumerate() {
                    if i > 0 {
                        out.extend_from_within(head..head_end);
                    }
                    push_str(out, r);
                    out.extend_from_slice(&tail);
                }
                return;
            }
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
                out.extend_from_slice(b"{\"timestamp\":\"");
                out.extend_from_slice(ts.get(*at));
                out.extend_from_slice(b"\",\"event\":");
                push_str(out, event);
                if let Some(id) = id {
                    out.extend_from_slice(b",\"id\":");
                    push_str(out, id);
                }
                if let Some(env) = envelope {
                    out.extend_from_slice(b",\"envelope\":");
                    push_envelope(out, env, *envelope_is_json);
                }
                out.extend_from_slice(b",\"participant\":");
                push_str(out, participant);
                out.extend_from_slice(b",\"space_id\":");
                push_str(out, space_id);
                out.extend_from_slice(match direction {
                    Direction::Inbound => b",\"direction\":\"inbound\"".as_slice(),
                    Direction::Outbound => b",\"direction\":\"outbound\"".as_slice(),
                });
                out.extend_from_slice(b",\"transport\":\"");
                out.extend_from_slice(transport.as_str().as_bytes());
                out.push(b'"');
                if let Some(m) = metadata {
                    out.extend_from_slice(b",\"metadata\":");
                    push_value(out, m);
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
                out.extend_from_slice(b"{\"timestamp\":\"");
                out.extend_from_slice(ts.get(*at));
                out.extend_from_slice(b"\",\"event\":\"capability_check\"");
                if let Some(id) = envelope_id {
                    out.extend_from_slice(b",\"envelope_id\":");
                    push_str(out, id);
                }
                out.extend_from_slice(b",\"participant\":");
                push_str(out, participant);
                out.extend_from_slice(b",\"space_id\":");
                push_str(out, space_id);
                out.extend_from_slice(if *allowed {
                    b",\"result\":\"allowed\"".as_slice()
                } else {
                    b",\"result\":\"denied\"".as_slice()
                });
                out.extend_from_slice(b",\"required_capability\":");
                push_str(out, required);
                if let Some(m) = matched {
                    out.extend_from_slice(b",\"matched_capability\":");
                    let _ = serde_json::to_writer(&mut *out, m.raw());
                }
                out.extend_from_slice(b",\"granted_capabilities\":[");
                for (i, c) in granted.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    let _ = serde_json::to_writer(&mut *out, c.raw());
                }
                out.push(b']');
                if let Some(m) = metadata {
                    out.extend_from_slice(b",\"metadata\":");
                    push_value(out, m);
                }
            }
        }
        out.extend_from_slice(b"}\n");
    }
}

/// Timestamps formatted once per millisecond: a burst of records shares one formatting.
#[derive(Debug, Default)]
pub struct Timestamps {
    at: Option<Time>,
    text: Vec<u8>,
}

impl Timestamps {
    /// `at` as RFC 3339 with milliseconds.
    pub fn get(&mut self, at: Time) -> &[u8] {
        if self.at != Some(at) {
            self.text.clear();
            let _ = write!(ByteSink(&mut self.text), "{at}");
            self.at = Some(at);
        }
        &self.text
    }
}

/// `fmt::Write` into a byte buffer.
struct ByteSink<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for ByteSink<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Keys whose values are secrets: never written to a log.
const SECRET_KEYS: &[&str] = &["token", "tokens", "api_key", "apiKey", "password", "secret"];

fn is_secret(key: &str) -> bool {
    SECRET_KEYS.contains(&key)
}

/// Whether raw JSON text may hold a secret key (a cheap scan before any parsing): every
/// secret key contains one of these, quotes included.
fn may_hold_secret(text: &[u8]) -> bool {
    static NEEDLES: std::sync::LazyLock<Vec<memchr::memmem::Finder<'static>>> =
        std::sync::LazyLock::new(|| {
            SECRET_KEYS
                .iter()
                .map(|k| memchr::memmem::Finder::new(format!("\"{k}\"").as_bytes()).into_owned())
                .collect()
        });
    NEEDLES.iter().any(|f| f.find(text).is_some())
}

fn redact(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if is_secret(k) {
                    *x = Value::String("[redacted]".into());
                } else {
                    redact(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(redact),
        _ => {}
    }
}

/// Metadata (reasons, counts; rare): redacted like envelopes.
fn push_value(out: &mut Vec<u8>, v: &Value) {
    if may_hold_secret(v.to_string().as_bytes()) {
        let mut v = v.clone();
        redact(&mut v);
        let _ = serde_json::to_writer(&mut *out, &v);
    } else {
        let _ = serde_json::to_writer(&mut *out, v);
    }
}

fn push_envelope(out: &mut Vec<u8>, env: &[u8], is_json: bool) {
    // Embedded raw only when it can be: UTF-8 and an object; anything else is a string.
    let trimmed = env.trim_ascii();
    let is_json = is_json
        && trimmed.first() == Some(&b'{')
        && trimmed.last() == Some(&b'}')
        && std::str::from_utf8(trimmed).is_ok();
    if !is_json {
        match std::str::from_utf8(env) {
            Ok(t) if may_hold_secret(t.as_bytes()) => push_str(out, "[redacted: holds a secret]"),
            Ok(t) => push_str(out, t),
            Err(_) => push_str(out, &String::from_utf8_lossy(env)),
        }
        return;
    }
    let text = env.trim_ascii();
    if may_hold_secret(text) {
        match serde_json::from_slice::<Value>(text) {
            Ok(mut v) => {
                redact(&mut v);
                let _ = serde_json::to_writer(&mut *out, &v);
            }
            Err(_) => push_str(out, "[redacted: holds a secret]"),
        }
        return;
    }
    // Valid JSON holds raw line breaks only between tokens (inside strings they must be
    // escaped), so turning them into spaces keeps the value and the record one line.
    if text.iter().any(|b| matches!(b, b'\n' | b'\r')) {
        out.extend(
            text.iter()
                .map(|&b| if matches!(b, b'\n' | b'\r') { b' ' } else { b }),
        );
    } else {
        out.extend_from_slice(text);
    }
}

/// A JSON string literal: quotes, backslashes and every control character escaped.
fn push_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    // Ids and names almost never need escaping: one pass to check, one copy.
    if bytes
        .iter()
        .all(|&b| b >= 0x20 && b != b'"' && b != b'\\' && b != 0x7f)
    {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f | 0x7f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Refusals of one sender logged in full per window; beyond it they are counted, and the
/// count is logged as one record when the window ends (a flood of bad frames costs a few
/// lines, not one each).
pub const REFUSALS_PER_WINDOW: u32 = 10;
/// The window of [`REFUSALS_PER_WINDOW`].
pub const REFUSAL_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);

/// Recipients of one envelope gathered into one `delivered` record.
#[derive(Debug)]
pub(super) struct PendingDelivered {
    at: Time,
    id: Option<Arc<str>>,
    transport: Transport,
    recipients: Vec<Arc<str>>,
}

/// Refusals of one sender in the current window.
#[derive(Debug, Clone)]
pub(super) struct RefusalWindow {
    pub(super) until: Time,
    pub(super) logged: u32,
    pub(super) suppressed: u64,
    pub(super) transport: Transport,
}

impl Gateway {
    /// A `rejected` record, or a count toward the sender's aggregate record; whether the
    /// record was written.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn audit_refusal(
        &mut self,
        now: Time,
        id: Option<Arc<str>>,
        frame: Option<&Bytes>,
        envelope_is_json: bool,
        who: Arc<str>,
        transport: Transport,
        metadata: Value,
    ) -> bool {
        if let Some(w) = self.refusals.get(&who)
            && w.until <= now
        {
            self.flush_refusals_of(&who.clone());
        }
        let w = self.refusals.entry(who.clone()).or_insert(RefusalWindow {
            until: now + REFUSAL_WINDOW,
            logged: 0,
            suppressed: 0,
            transport,
        });
        if w.logged >= REFUSALS_PER_WINDOW {
            w.suppressed += 1;
            return false;
        }
        w.logged += 1;
        self.audit_envelope(
            now,
            "rejected",
            id,
            frame,
            envelope_is_json,
            who,
            Direction::Inbound,
            transport,
            Some(metadata),
        );
        true
    }

    fn flush_refusals_of(&mut self, who: &Arc<str>) {
        let Some(w) = self.refusals.remove(who) else {
            return;
        };
        if w.suppressed > 0 {
            self.audit_envelope(
                w.until,
                "rejected",
                None,
                None,
                false,
                who.clone(),
                Direction::Inbound,
                w.transport,
                Some(serde_json::json!({
                    "error": "repeated_refusals",
                    "suppressed": w.suppressed,
                    "window_ms": REFUSAL_WINDOW.as_millis() as u64,
                    "reason": "further refusals of this sender in the window, counted rather than logged one by one",
                })),
            );
        }
    }

    /// Logs the counts of windows that ended by `now`.
    pub(super) fn flush_refusals(&mut self, now: Time) {
        let ended: Vec<Arc<str>> = self
            .refusals
            .iter()
            .filter(|(_, w)| w.until <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for who in ended {
            self.flush_refusals_of(&who);
        }
    }

    /// When the next refusal window with a count to log ends.
    pub(super) fn next_refusal_flush(&self) -> Option<Time> {
        self.refusals
            .values()
            .filter(|w| w.suppressed > 0)
            .map(|w| w.until)
            .min()
    }

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
        self.flush_delivered();
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

    /// A `delivered` line per recipient, without the envelope (the `received` record holds
    /// it once); recipients of one envelope share one record until another record follows.
    pub(super) fn audit_delivered(
        &mut self,
        at: Time,
        id: Option<Arc<str>>,
        to: Arc<str>,
        transport: Transport,
    ) {
        if let Some(p) = &mut self.pending_delivered
            && p.at == at
            && p.transport == transport
            && match (&p.id, &id) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
                (None, None) => true,
                _ => false,
            }
        {
            p.recipients.push(to);
            return;
        }
        self.flush_delivered();
        self.pending_delivered = Some(PendingDelivered {
            at,
            id,
            transport,
            recipients: vec![to],
        });
    }

    /// Queues the `delivered` record being gathered, if any.
    pub(super) fn flush_delivered(&mut self) {
        if let Some(p) = self.pending_delivered.take() {
            self.out
                .push_back(super::Output::Audit(AuditRecord(Box::new(
                    Inner::Delivered {
                        at: p.at,
                        id: p.id,
                        space_id: self.space_id.clone(),
                        transport: p.transport,
                        recipients: p.recipients,
                    },
                ))));
        }
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
        self.flush_delivered();
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

    fn received(envelope: &'static [u8]) -> AuditRecord {
        AuditRecord(Box::new(Inner::Envelope {
            at: Time::from_unix_millis(1_000),
            event: "received",
            id: Some(Arc::from("x1")),
            envelope: Some(Bytes::from_static(envelope)),
            envelope_is_json: true,
            participant: Arc::from("mallory"),
            space_id: Arc::from("s"),
            direction: Direction::Inbound,
            transport: Transport::WebSocket,
            metadata: None,
        }))
    }

    #[test]
    fn a_pretty_printed_envelope_cannot_forge_a_record() {
        let forged = b"{\"protocol\":\"mew/v0.4\",\"id\":\"x1\",\"kind\":\"chat\",\"payload\":\n{\"timestamp\":\"2020-01-01T00:00:00.000Z\",\"event\":\"delivered\",\"id\":\"forged\",\"participant\":\"admin\"}\r\n}\n";
        let mut out = Vec::new();
        received(forged).write_line(&mut out, &mut Timestamps::default());
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches('\n').count(), 1);
        assert!(text.ends_with('\n'));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["event"], "received");
        assert_eq!(v["envelope"]["payload"]["id"], "forged", "kept, as data");
    }

    #[test]
    fn secrets_are_redacted_and_the_record_kept() {
        let invite = b"{\"protocol\":\"mew/v0.4\",\"id\":\"i\",\"kind\":\"system/invite\",\"payload\":{\"participant_id\":\"bob\",\"token\":\"s3cret-t0ken\"}}";
        let line = received(invite).to_json_line();
        assert!(!line.contains("s3cret-t0ken"), "{line}");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["envelope"]["payload"]["token"], "[redacted]");
        assert_eq!(v["envelope"]["payload"]["participant_id"], "bob");
        // Not JSON, but holding a token: the text is not kept.
        let mut r = received(b"{\"type\":\"join\",\"token\":\"s3cret-t0ken\"");
        if let Inner::Envelope {
            envelope_is_json, ..
        } = &mut *r.0
        {
            *envelope_is_json = false;
        }
        assert!(!r.to_json_line().contains("s3cret"));
    }

    #[test]
    fn control_characters_in_every_field_are_escaped() {
        let r = AuditRecord(Box::new(Inner::Envelope {
            at: Time::from_unix_millis(0),
            event: "rejected",
            id: Some(Arc::from("a\nb\u{0}\u{1b}")),
            envelope: None,
            envelope_is_json: false,
            participant: Arc::from("p\r\n{\"event\":\"x\"}"),
            space_id: Arc::from("s\u{7f}"),
            direction: Direction::Inbound,
            transport: Transport::WebSocket,
            metadata: Some(serde_json::json!({"reason": "line\nbreak"})),
        }));
        let line = r.to_json_line();
        assert!(!line.contains('\n') && !line.contains('\r'), "{line}");
        assert!(line.bytes().all(|b| b >= 0x20 && b != 0x7f), "{line}");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], "a\nb\u{0}\u{1b}");
        assert_eq!(v["participant"], "p\r\n{\"event\":\"x\"}");
        assert_eq!(v["space_id"], "s\u{7f}");
    }

    #[test]
    fn timestamps_are_formatted_once_per_millisecond() {
        let mut ts = Timestamps::default();
        assert_eq!(
            ts.get(Time::from_unix_millis(1_736_416_800_123)),
            b"2025-01-09T10:00:00.123Z"
        );
        let p = ts.get(Time::from_unix_millis(1_736_416_800_123)).as_ptr();
        assert_eq!(
            p,
            ts.get(Time::from_unix_millis(1_736_416_800_123)).as_ptr()
        );
        assert_eq!(
            ts.get(Time::from_unix_millis(0)),
            b"1970-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn bytes_claimed_as_json_that_are_not_stay_one_parseable_line() {
        for raw in [&b"+\xff\x00garbage"[..], b"[1,2]", b"{\"a\":\"\xff\"}"] {
            let mut r = received(b"{}");
            if let Inner::Envelope { envelope, .. } = &mut *r.0 {
                *envelope = Some(Bytes::copy_from_slice(raw));
            }
            let line = r.to_json_line();
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert!(v["envelope"].is_string(), "{line}");
        }
    }
}
