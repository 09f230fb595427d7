//! Audit records in the reference's JSONL layout. A record borrows what it says from the core
//! and is formatted at once into a batch per file, which a driver takes with
//! [`Gateway::take_audit`]: an enabled log costs no allocation per record, a disabled one
//! nothing.

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
    EnvelopeHistory = 0,
    /// `capability-decisions.jsonl`.
    CapabilityDecisions = 1,
}

impl AuditFile {
    /// Every audit file.
    pub const ALL: [AuditFile; 2] = [AuditFile::EnvelopeHistory, AuditFile::CapabilityDecisions];

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
    /// The space's configuration (a reload).
    Config,
}

impl Transport {
    fn as_str(self) -> &'static str {
        match self {
            Transport::WebSocket => "websocket",
            Transport::Http => "http",
            Transport::Virtual => "virtual",
            Transport::Config => "config",
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

/// One record, borrowing what it says from the core: formatted at once into
/// [`AuditLines`], never allocated or queued on its own.
#[derive(Debug, Clone, Copy)]
pub(super) enum Record<'a> {
    Envelope {
        at: Time,
        event: &'static str,
        id: Option<&'a str>,
        envelope: Option<&'a [u8]>,
        envelope_is_json: bool,
        participant: &'a str,
        space_id: &'a str,
        direction: Direction,
        transport: Transport,
        metadata: Option<&'a Value>,
    },
    /// One recipient of an envelope (the `received` record holds the envelope once).
    Delivered {
        at: Time,
        id: Option<&'a str>,
        participant: &'a str,
        space_id: &'a str,
        transport: Transport,
    },
    Capability {
        at: Time,
        envelope_id: Option<&'a str>,
        participant: &'a str,
        space_id: &'a str,
        allowed: bool,
        required: &'a str,
        matched: Option<&'a Capability>,
        granted: &'a CapabilitySet,
        metadata: Option<&'a Value>,
    },
}

impl Record<'_> {
    /// The file the record goes to.
    fn file(&self) -> AuditFile {
        match self {
            Record::Envelope { .. } | Record::Delivered { .. } => AuditFile::EnvelopeHistory,
            Record::Capability { .. } => AuditFile::CapabilityDecisions,
        }
    }

    /// Appends the record and its newline to `out`, keys in the reference's order.
    ///
    /// The record is exactly one line whatever the input: an embedded envelope is valid JSON
    /// whose raw newlines can only sit between tokens, where they become spaces; every other
    /// string is escaped. Secrets (`token` fields, such as the one of `system/invite`) are
    /// replaced by `"[redacted]"`.
    fn write_line(&self, out: &mut Vec<u8>, ts: &mut Timestamps) {
        match *self {
            Record::Delivered {
                at,
                id,
                participant,
                space_id,
                transport,
            } => {
                delivered_head(out, ts.get(at), id);
                push_str(out, participant);
                return delivered_tail(out, space_id, transport);
            }
            Record::Envelope {
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
                out.extend_from_slice(ts.get(at));
                out.extend_from_slice(b"\",\"event\":");
                push_str(out, event);
                if let Some(id) = id {
                    out.extend_from_slice(b",\"id\":");
                    push_str(out, id);
                }
                if let Some(env) = envelope {
                    out.extend_from_slice(b",\"envelope\":");
                    push_envelope(out, env, envelope_is_json);
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
            Record::Capability {
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
                out.extend_from_slice(ts.get(at));
                out.extend_from_slice(b"\",\"event\":\"capability_check\"");
                if let Some(id) = envelope_id {
                    out.extend_from_slice(b",\"envelope_id\":");
                    push_str(out, id);
                }
                out.extend_from_slice(b",\"participant\":");
                push_str(out, participant);
                out.extend_from_slice(b",\"space_id\":");
                push_str(out, space_id);
                out.extend_from_slice(if allowed {
                    b",\"result\":\"allowed\"".as_slice()
                } else {
                    b",\"result\":\"denied\"".as_slice()
                });
                out.extend_from_slice(b",\"required_capability\":");
                push_str(out, required);
                if let Some(m) = matched {
                    out.extend_from_slice(b",\"matched_capability\":");
                    out.extend_from_slice(m.json().as_bytes());
                }
                out.extend_from_slice(b",\"granted_capabilities\":[");
                for (i, c) in granted.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(c.json().as_bytes());
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

/// A `delivered` line up to its participant's value.
fn delivered_head(out: &mut Vec<u8>, timestamp: &[u8], id: Option<&str>) {
    out.extend_from_slice(b"{\"timestamp\":\"");
    out.extend_from_slice(timestamp);
    out.extend_from_slice(b"\",\"event\":\"delivered\"");
    if let Some(id) = id {
        out.extend_from_slice(b",\"id\":");
        push_str(out, id);
    }
    out.extend_from_slice(b",\"participant\":");
}

/// A `delivered` line after its participant's value, newline included.
fn delivered_tail(out: &mut Vec<u8>, space_id: &str, transport: Transport) {
    out.extend_from_slice(b",\"space_id\":");
    push_str(out, space_id);
    out.extend_from_slice(b",\"direction\":\"outbound\",\"transport\":\"");
    out.extend_from_slice(transport.as_str().as_bytes());
    out.extend_from_slice(b"\"}\n");
}

/// The space's audit lines, formatted as records happen into one buffer per file, for a
/// writer to take in batches ([`super::Gateway::take_audit`]): a record costs no allocation,
/// and a batch is one write.
#[derive(Debug, Default)]
pub(super) struct AuditLines {
    ts: Timestamps,
    /// Per file (in [`AuditFile::ALL`] order): the lines, and how many.
    files: [(Vec<u8>, u64); 2],
    /// Lines dropped because their file's batch was not taken in time.
    dropped: u64,
    delivered: DeliveredParts,
}

/// How large a batch may grow when nobody takes it: beyond it, lines are dropped and
/// counted.
pub const AUDIT_BATCH_MAX: usize = 16 * 1024 * 1024;

/// What the `delivered` lines of one envelope share: formatted once per envelope rather
/// than once per recipient (by the same two functions as [`Record::write_line`]).
#[derive(Debug, Default)]
struct DeliveredParts {
    /// The time, id and space the parts are for.
    at: Option<Time>,
    id: Option<Vec<u8>>,
    space_id: Vec<u8>,
    transport: Option<Transport>,
    /// Everything before the participant, and everything after it.
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl AuditLines {
    pub(super) fn push(&mut self, record: Record<'_>) {
        let (buf, lines) = &mut self.files[record.file() as usize];
        if buf.len() >= AUDIT_BATCH_MAX {
            self.dropped += 1;
            return;
        }
        *lines += 1;
        let Record::Delivered {
            at,
            id,
            participant,
            space_id,
            transport,
        } = record
        else {
            return record.write_line(buf, &mut self.ts);
        };
        let d = &mut self.delivered;
        if d.at != Some(at) || d.id.as_deref() != id.map(str::as_bytes) {
            d.head.clear();
            delivered_head(&mut d.head, self.ts.get(at), id);
            d.at = Some(at);
            match (&mut d.id, id) {
                (Some(v), Some(id)) => {
                    v.clear();
                    v.extend_from_slice(id.as_bytes());
                }
                (slot, id) => *slot = id.map(|i| i.as_bytes().to_vec()),
            }
        }
        if d.transport != Some(transport) || d.space_id != space_id.as_bytes() {
            d.tail.clear();
            delivered_tail(&mut d.tail, space_id, transport);
            d.transport = Some(transport);
            d.space_id.clear();
            d.space_id.extend_from_slice(space_id.as_bytes());
        }
        buf.extend_from_slice(&d.head);
        push_str(buf, participant);
        buf.extend_from_slice(&d.tail);
    }

    fn take(&mut self, file: AuditFile, spare: impl FnOnce() -> Vec<u8>) -> Option<AuditBatch> {
        let (buf, lines) = &mut self.files[file as usize];
        if buf.is_empty() {
            return None;
        }
        let mut next = spare();
        next.clear();
        Some(AuditBatch {
            file,
            bytes: std::mem::replace(buf, next),
            lines: std::mem::take(lines),
        })
    }
}

/// The `audit_dropped` record a log writer adds to the envelope history once it has room
/// again: `count` lines lost since its last such record, `total` since it started. Newline
/// included.
pub fn audit_dropped_line(at: Time, count: u64, total: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(160);
    out.extend_from_slice(b"{\"timestamp\":\"");
    out.extend_from_slice(Timestamps::default().get(at));
    let _ = write!(
        ByteSink(&mut out),
        "\",\"event\":\"audit_dropped\",\"count\":{count},\"total\":{total},\"reason\":\"the log queue was full\"}}"
    );
    out.push(b'\n');
    out
}

/// Audit lines of one file, each ending with its newline, taken from the core.
#[derive(Debug)]
pub struct AuditBatch {
    /// The file they go to.
    pub file: AuditFile,
    /// The lines.
    pub bytes: Vec<u8>,
    /// How many lines.
    pub lines: u64,
}

/// Timestamps formatted once per millisecond: a burst of records shares one formatting.
#[derive(Debug, Default)]
struct Timestamps {
    at: Option<Time>,
    text: Vec<u8>,
}

impl Timestamps {
    /// `at` as RFC 3339 with milliseconds.
    fn get(&mut self, at: Time) -> &[u8] {
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
/// secret key contains one of these, quotes included. A vectorised search per key beats one
/// automaton for all here: in JSON every quote would be a candidate for the automaton.
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
    if memchr::memchr2(b'\n', b'\r', text).is_some() {
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
        id: Option<&str>,
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
        id: Option<&str>,
        frame: Option<&Bytes>,
        envelope_is_json: bool,
        participant: Arc<str>,
        direction: Direction,
        transport: Transport,
        metadata: Option<Value>,
    ) {
        self.audit.push(Record::Envelope {
            at,
            event,
            id,
            envelope: frame.map(|f| &f[..]),
            envelope_is_json,
            participant: &participant,
            space_id: &self.space_id,
            direction,
            transport,
            metadata: metadata.as_ref(),
        });
    }

    /// A `delivered` line for one recipient, without the envelope (the `received` record
    /// holds it once), or with it for the first recipient of a gateway broadcast.
    pub(super) fn audit_delivered(
        &mut self,
        at: Time,
        id: Option<&str>,
        member: usize,
        transport: Transport,
    ) {
        if let Some(body) = self.audit_body.take() {
            let who = self.members.get(member).id.clone();
            return self.audit_envelope(
                at,
                "delivered",
                id,
                Some(&body),
                true,
                who,
                Direction::Outbound,
                transport,
                None,
            );
        }
        self.audit.push(Record::Delivered {
            at,
            id,
            participant: &self.members.get(member).id,
            space_id: &self.space_id,
            transport,
        });
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn audit_capability(
        &mut self,
        at: Time,
        envelope_id: Option<&str>,
        member: usize,
        kind: &str,
        matched: Option<&Capability>,
        metadata: Option<Value>,
    ) {
        let m = self.members.get(member);
        self.audit.push(Record::Capability {
            at,
            envelope_id,
            participant: &m.id,
            space_id: &self.space_id,
            allowed: matched.is_some(),
            required: kind,
            matched,
            granted: &m.caps,
            metadata: metadata.as_ref(),
        });
    }

    /// [`Gateway::take_audit`]'s work.
    pub(super) fn drain_audit(
        &mut self,
        file: AuditFile,
        spare: impl FnOnce() -> Vec<u8>,
    ) -> Option<AuditBatch> {
        self.audit.take(file, spare)
    }

    /// Audit lines dropped because nobody took them ([`AUDIT_BATCH_MAX`]).
    pub fn audit_dropped(&self) -> u64 {
        self.audit.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record's line, without its newline.
    fn line(r: Record<'_>) -> String {
        let mut out = Vec::new();
        r.write_line(&mut out, &mut Timestamps::default());
        assert_eq!(out.pop(), Some(b'\n'));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lines_escape_and_embed() {
        let r = Record::Envelope {
            at: Time::from_unix_millis(0),
            event: "rejected",
            id: Some("a\"b"),
            envelope: Some(b"not \"json\"\n"),
            envelope_is_json: false,
            participant: "p\u{1}",
            space_id: "s",
            direction: Direction::Inbound,
            transport: Transport::Http,
            metadata: None,
        };
        let line = line(r);
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

    fn received(envelope: &[u8], envelope_is_json: bool) -> Record<'_> {
        Record::Envelope {
            at: Time::from_unix_millis(1_000),
            event: "received",
            id: Some("x1"),
            envelope: Some(envelope),
            envelope_is_json,
            participant: "mallory",
            space_id: "s",
            direction: Direction::Inbound,
            transport: Transport::WebSocket,
            metadata: None,
        }
    }

    #[test]
    fn a_pretty_printed_envelope_cannot_forge_a_record() {
        let forged = b"{\"protocol\":\"mew/v0.4\",\"id\":\"x1\",\"kind\":\"chat\",\"payload\":\n{\"timestamp\":\"2020-01-01T00:00:00.000Z\",\"event\":\"delivered\",\"id\":\"forged\",\"participant\":\"admin\"}\r\n}\n";
        let mut out = Vec::new();
        received(forged, true).write_line(&mut out, &mut Timestamps::default());
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
        let line = line(received(invite, true));
        assert!(!line.contains("s3cret-t0ken"), "{line}");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["envelope"]["payload"]["token"], "[redacted]");
        assert_eq!(v["envelope"]["payload"]["participant_id"], "bob");
        // Not JSON, but holding a token: the text is not kept.
        let r = received(b"{\"type\":\"join\",\"token\":\"s3cret-t0ken\"", false);
        assert!(!super::tests::line(r).contains("s3cret"));
    }

    #[test]
    fn every_secret_key_is_found_and_only_those() {
        for k in SECRET_KEYS {
            let env = format!(r#"{{"kind":"x","payload":{{"{k}":"hush-{k}"}}}}"#);
            let line = line(received(env.as_bytes(), true));
            assert!(!line.contains("hush"), "{k}: {line}");
            assert!(may_hold_secret(env.as_bytes()), "{k}");
        }
        for harmless in [r#"{"tokenizer":1}"#, r#"{"secrets_seen":0}"#] {
            assert!(!may_hold_secret(harmless.as_bytes()), "{harmless}");
        }
        // A value that looks like a key is parsed, and nothing in it is redacted.
        let line = line(received(br#"{"a":"token"}"#, true));
        assert!(line.contains(r#""envelope":{"a":"token"}"#), "{line}");
    }

    #[test]
    fn control_characters_in_every_field_are_escaped() {
        let meta = serde_json::json!({"reason": "line\nbreak"});
        let r = Record::Envelope {
            at: Time::from_unix_millis(0),
            event: "rejected",
            id: Some("a\nb\u{0}\u{1b}"),
            envelope: None,
            envelope_is_json: false,
            participant: "p\r\n{\"event\":\"x\"}",
            space_id: "s\u{7f}",
            direction: Direction::Inbound,
            transport: Transport::WebSocket,
            metadata: Some(&meta),
        };
        let line = line(r);
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
            let line = line(received(raw, true));
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert!(v["envelope"].is_string(), "{line}");
        }
    }
}

#[cfg(test)]
mod batches {
    use super::super::{Gateway, SpaceConfig};
    use super::*;

    fn space() -> (Gateway, Vec<crate::gateway::ConnId>) {
        let cfg = SpaceConfig::from_yaml(
            "space: {id: s}\nlogging: {enabled: true}\ngateway: {rate_limit: off}\nparticipants:\n  a: {tokens: [ta], capabilities: [{kind: chat}]}\n  b: {tokens: [tb]}\n  c: {tokens: [tc]}\n",
        )
        .unwrap();
        let now = Time::from_unix_millis(1_000);
        let mut gw = Gateway::new(cfg, 1);
        let conns = ["ta", "tb", "tc"]
            .iter()
            .map(|t| gw.handle_connected(now, Some(t)))
            .collect();
        while gw.poll_output().is_some() {}
        for file in AuditFile::ALL {
            let _ = gw.take_audit(file, Vec::new);
        }
        (gw, conns)
    }

    #[test]
    fn a_broadcast_is_one_received_line_and_a_delivered_line_per_recipient() {
        let (mut gw, conns) = space();
        let now = Time::from_unix_millis(2_000);
        gw.handle_frame(
            now,
            conns[0],
            Bytes::from_static(
                br#"{"protocol":"mew/v0.4","id":"m1","kind":"chat","payload":{"text":"hi"}}"#,
            ),
        );
        while gw.poll_output().is_some() {}
        let spare = Vec::with_capacity(12_345);
        let batch = gw.take_audit(AuditFile::EnvelopeHistory, || spare).unwrap();
        assert_eq!(batch.file, AuditFile::EnvelopeHistory);
        let text = std::str::from_utf8(&batch.bytes).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(batch.lines, 4);
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0]["event"], "received");
        assert_eq!(lines[0]["envelope"]["payload"]["text"], "hi");
        let mut to: Vec<&str> = lines[1..]
            .iter()
            .map(|l| {
                assert_eq!(l["event"], "delivered");
                assert_eq!(l["id"], "m1");
                assert!(l.get("envelope").is_none(), "small lines");
                l["participant"].as_str().unwrap()
            })
            .collect();
        to.sort_unstable();
        assert_eq!(to, ["a", "b", "c"]);
        // Taken once; the next batch goes into the spare.
        assert!(
            gw.take_audit(AuditFile::EnvelopeHistory, Vec::new)
                .is_none()
        );
        assert_eq!(gw.audit.files[0].0.capacity(), 12_345);
        let decision = gw
            .take_audit(AuditFile::CapabilityDecisions, Vec::new)
            .unwrap();
        assert_eq!(decision.lines, 1);
        let d: Value = serde_json::from_slice(decision.bytes.trim_ascii_end()).unwrap();
        assert_eq!(d["result"], "allowed");
        assert_eq!(d["matched_capability"], serde_json::json!({"kind": "chat"}));
        assert_eq!(
            d["granted_capabilities"],
            serde_json::json!([{"kind": "chat"}])
        );
    }

    #[test]
    fn delivered_lines_from_shared_parts_are_the_records_own_bytes() {
        let mut lines = AuditLines::default();
        let mut want = Vec::new();
        let mut ts = Timestamps::default();
        let ids = [Some("m1"), Some("m1"), Some("m\"2\n"), None, Some("m1")];
        let who = ["a", "b\u{1}", "c"];
        for (n, id) in ids.iter().enumerate() {
            for (i, p) in who.iter().enumerate() {
                let r = Record::Delivered {
                    at: Time::from_unix_millis(1_000 + (n as u64 / 2)),
                    id: *id,
                    participant: p,
                    space_id: if n == 4 { "other\t" } else { "s" },
                    transport: if i == 2 {
                        Transport::Virtual
                    } else {
                        Transport::WebSocket
                    },
                };
                r.write_line(&mut want, &mut ts);
                lines.push(r);
            }
        }
        let batch = lines.take(AuditFile::EnvelopeHistory, Vec::new).unwrap();
        assert_eq!(batch.lines, 15);
        assert_eq!(
            String::from_utf8(batch.bytes).unwrap(),
            String::from_utf8(want).unwrap()
        );
    }

    #[test]
    fn a_batch_nobody_takes_stops_growing_and_counts_what_it_drops() {
        let (mut gw, conns) = space();
        let mut n = 0u64;
        while gw.audit.files[0].0.len() < AUDIT_BATCH_MAX {
            n += 1;
            let f =
                format!(r#"{{"protocol":"mew/v0.4","id":"m{n}","kind":"chat","payload":{{}}}}"#);
            gw.handle_frame(Time::from_unix_millis(2_000), conns[0], Bytes::from(f));
            while let Some(o) = gw.poll_output() {
                if let crate::gateway::Output::Transmit { conn, frame } = o {
                    gw.handle_sent(Time::from_unix_millis(2_000), conn, 1, frame.len());
                }
            }
        }
        let before = gw.audit_dropped();
        assert!(before < 4, "lines dropped only once the batch is full");
        gw.handle_frame(
            Time::from_unix_millis(2_000),
            conns[0],
            Bytes::from_static(
                br#"{"protocol":"mew/v0.4","id":"last","kind":"chat","payload":{}}"#,
            ),
        );
        assert_eq!(
            gw.audit_dropped() - before,
            4,
            "received and three delivered"
        );
        let batch = gw.take_audit(AuditFile::EnvelopeHistory, Vec::new).unwrap();
        assert!(batch.bytes.len() < AUDIT_BATCH_MAX + 4096);
        assert_eq!(batch.lines + gw.audit_dropped(), 4 * (n + 1));
        assert_eq!(
            std::str::from_utf8(&batch.bytes).unwrap().lines().count() as u64,
            batch.lines
        );
    }
}
