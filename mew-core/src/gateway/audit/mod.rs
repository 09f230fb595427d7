//! Audit records in the reference's JSONL layout. A record borrows what it says from the core
//! and goes at once into a batch per file, which a driver takes with
//! [`Gateway::poll_audit`]: an enabled log costs no allocation per record, a disabled one
//! nothing.
//!
//! `format.rs` writes a record's line (escaping, secrets redacted, timestamps formatted
//! once per millisecond); `batch.rs` keeps the lines per file until a writer takes them,
//! `delivered` lines as references to the parts they share, which the writer expands.

mod batch;
mod format;
#[cfg(test)]
mod tests;

pub(super) use batch::AuditLines;
pub use batch::{AUDIT_BATCH_MAX, AuditBatch, AuditPieces, audit_dropped_line};

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
    /// The transport `n` is the discriminant of.
    fn from_u8(n: u8) -> Option<Transport> {
        [
            Transport::WebSocket,
            Transport::Http,
            Transport::Virtual,
            Transport::Config,
        ]
        .into_iter()
        .find(|t| *t as u8 == n)
    }

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
        let record = Record::Envelope {
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
        };
        match frame {
            // Formatted on the log writer's thread (see `AuditLines`): a `received` line
            // for every envelope, a `delivered` one with its envelope for a broadcast's
            // first recipient.
            Some(f) if metadata.is_none() && batch::Deferred::is_deferrable(event) => self
                .audit
                .push_deferred(record, f, &participant, &self.space_id),
            _ => self.audit.push(record),
        }
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
        let who = &self.members.get(member).id;
        self.audit
            .push_delivered(at, id, member, who, &self.space_id, transport);
    }

    /// Begins the `delivered` lines of one envelope sent to many ([`Gateway::fan_out`]'s
    /// recipients): its head is formatted (or found) once, not once per recipient.
    pub(super) fn audit_delivered_begin(&mut self, at: Time, id: Option<&str>) {
        self.audit.begin_delivered(at, id);
    }

    /// [`Gateway::audit_delivered`] for a recipient of the envelope last begun with
    /// [`Gateway::audit_delivered_begin`].
    pub(super) fn audit_delivered_next(&mut self, at: Time, id: Option<&str>, member: usize) {
        if self.audit_body.is_some() {
            return self.audit_delivered(at, id, member, Transport::WebSocket);
        }
        let who = &self.members.get(member).id;
        self.audit
            .push_delivered_line(member, who, &self.space_id, Transport::WebSocket);
    }

    /// A `capability_check` record: `matched` is the index, in the member's capabilities,
    /// of the one that allowed the envelope (`None`: denied).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn audit_capability(
        &mut self,
        at: Time,
        envelope_id: Option<&str>,
        member: usize,
        kind: &str,
        matched: Option<usize>,
        metadata: Option<Value>,
    ) {
        let m = self.members.get(member);
        if metadata.is_none() {
            // Formatted on the log writer's thread (see `AuditLines`).
            return self.audit.push_decision(
                at,
                envelope_id,
                &m.id,
                &self.space_id,
                kind,
                matched,
                &m.caps,
            );
        }
        self.audit.push(Record::Capability {
            at,
            envelope_id,
            participant: &m.id,
            space_id: &self.space_id,
            allowed: matched.is_some(),
            required: kind,
            matched: matched.and_then(|i| m.caps.iter().nth(i)),
            granted: &m.caps,
            metadata: metadata.as_ref(),
        });
    }

    /// [`Gateway::poll_audit`]'s work.
    pub(super) fn drain_audit(
        &mut self,
        file: AuditFile,
        spare: impl FnOnce() -> Vec<u8>,
    ) -> Option<AuditBatch> {
        self.audit.take(file, spare)
    }

    /// [`Gateway::audit_dropped`]'s work.
    pub(super) fn dropped_audit_lines(&self) -> u64 {
        self.audit.dropped
    }
}
