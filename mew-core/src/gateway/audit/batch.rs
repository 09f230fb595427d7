//! The audit lines of a space, one buffer per file, until a writer takes them.

use super::format::{ByteSink, Timestamps, delivered_head, delivered_segment};
use super::*;

/// The space's audit lines, formatted as records happen into one buffer per file, for a
/// writer to take in batches ([`super::Gateway::poll_audit`]): a record costs no allocation,
/// and a batch is one write.
#[derive(Debug, Default)]
pub(crate) struct AuditLines {
    ts: Timestamps,
    /// Per file (in [`AuditFile::ALL`] order): the lines, and how many.
    pub(super) files: [(Vec<u8>, u64); 2],
    /// Lines dropped because their file's batch was not taken in time.
    pub(super) dropped: u64,
    head: DeliveredHead,
    /// Per member slot, the end of its `delivered` lines.
    segments: Vec<Option<Segment>>,
}

/// How large a batch may grow when nobody takes it: beyond it, lines are dropped and
/// counted.
pub const AUDIT_BATCH_MAX: usize = 16 * 1024 * 1024;

/// What the `delivered` lines of one envelope share, formatted once per envelope rather
/// than once per recipient: everything before the participant.
#[derive(Debug, Default)]
struct DeliveredHead {
    /// The time and id it is for.
    at: Option<Time>,
    id: Option<Vec<u8>>,
    bytes: Vec<u8>,
}

/// The rest of a member's `delivered` lines, from its participant on: formatted once per
/// member rather than once per line. The `Arc`s it holds name what it was made for (held,
/// so that their addresses identify them).
#[derive(Debug)]
struct Segment {
    who: Arc<str>,
    space: Arc<str>,
    transport: Transport,
    bytes: Box<[u8]>,
}

impl AuditLines {
    pub(super) fn push(&mut self, record: Record<'_>) {
        let (buf, lines) = &mut self.files[record.file() as usize];
        if buf.len() >= AUDIT_BATCH_MAX {
            self.dropped += 1;
            return;
        }
        *lines += 1;
        record.write_line(buf, &mut self.ts);
    }

    /// A `delivered` line for member slot `member` (participant `who` of space `space`): one
    /// per recipient of an envelope, so two copies of parts formatted earlier.
    pub(super) fn push_delivered(
        &mut self,
        at: Time,
        id: Option<&str>,
        member: usize,
        who: &Arc<str>,
        space: &Arc<str>,
        transport: Transport,
    ) {
        self.begin_delivered(at, id);
        self.push_delivered_line(member, who, space, transport);
    }

    /// The head of the `delivered` lines of the envelope `id` at `at` (formatted unless it
    /// is the last one's): what [`AuditLines::push_delivered_line`] writes before a member.
    pub(super) fn begin_delivered(&mut self, at: Time, id: Option<&str>) {
        let h = &mut self.head;
        if h.at != Some(at) || h.id.as_deref() != id.map(str::as_bytes) {
            h.bytes.clear();
            delivered_head(&mut h.bytes, self.ts.get(at), id);
            h.at = Some(at);
            match (&mut h.id, id) {
                (Some(v), Some(id)) => {
                    v.clear();
                    v.extend_from_slice(id.as_bytes());
                }
                (slot, id) => *slot = id.map(|i| i.as_bytes().to_vec()),
            }
        }
    }

    /// A `delivered` line of the envelope [`AuditLines::begin_delivered`] last began.
    pub(super) fn push_delivered_line(
        &mut self,
        member: usize,
        who: &Arc<str>,
        space: &Arc<str>,
        transport: Transport,
    ) {
        let (buf, lines) = &mut self.files[AuditFile::EnvelopeHistory as usize];
        if buf.len() >= AUDIT_BATCH_MAX {
            self.dropped += 1;
            return;
        }
        *lines += 1;
        if self.segments.len() <= member {
            self.segments.resize_with(member + 1, || None);
        }
        let slot = &mut self.segments[member];
        let seg = match slot {
            Some(s)
                if Arc::ptr_eq(&s.who, who)
                    && Arc::ptr_eq(&s.space, space)
                    && s.transport == transport =>
            {
                s
            }
            _ => {
                let mut bytes = Vec::new();
                delivered_segment(&mut bytes, who, space, transport);
                slot.insert(Segment {
                    who: who.clone(),
                    space: space.clone(),
                    transport,
                    bytes: bytes.into_boxed_slice(),
                })
            }
        };
        let head = &self.head.bytes;
        buf.reserve(head.len() + seg.bytes.len());
        buf.extend_from_slice(head);
        buf.extend_from_slice(&seg.bytes);
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
