//! The audit lines of a space, one buffer per file, until a writer takes them.

use super::format::{ByteSink, Timestamps, delivered_head, delivered_tail, push_str};
use super::*;

/// The space's audit lines, formatted as records happen into one buffer per file, for a
/// writer to take in batches ([`super::Gateway::take_audit`]): a record costs no allocation,
/// and a batch is one write.
#[derive(Debug, Default)]
pub(crate) struct AuditLines {
    ts: Timestamps,
    /// Per file (in [`AuditFile::ALL`] order): the lines, and how many.
    pub(super) files: [(Vec<u8>, u64); 2],
    /// Lines dropped because their file's batch was not taken in time.
    pub(super) dropped: u64,
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

    pub(super) fn take(
        &mut self,
        file: AuditFile,
        spare: impl FnOnce() -> Vec<u8>,
    ) -> Option<AuditBatch> {
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
