//! The audit lines of a space, one buffer per file, until a writer takes them.

use super::format::{ByteSink, Timestamps, delivered_head, delivered_segment};
use super::*;

/// The space's audit lines, one batch per file, for a writer to take
/// ([`super::Gateway::poll_audit`]): a record costs no allocation, and a batch is one write.
///
/// Most records are formatted at once. A `delivered` line, one per recipient of every
/// envelope, is not: it is the envelope's head (formatted once per envelope) and the
/// recipient's end of line (formatted once per member), and the batch holds a reference to
/// both, which the writer expands ([`AuditBatch::pieces`]) as it copies the lines to their
/// file. A recipient costs the core nine bytes instead of a line's copy, and the line is
/// copied once, by the writer, instead of twice.
#[derive(Debug, Default)]
pub(crate) struct AuditLines {
    ts: Timestamps,
    /// Per file (in [`AuditFile::ALL`] order).
    pub(super) files: [Pending; 2],
    /// Lines dropped because their file's batch was not taken in time.
    pub(super) dropped: u64,
    head: DeliveredHead,
    /// Per member slot, the end of its `delivered` lines.
    segments: Vec<Option<Segment>>,
    /// Envelope history batches taken so far: a batch refers only to parts it holds.
    generation: u64,
}

/// The batch of one file being filled: its encoded form (see [`AuditBatch`]).
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub(super) buf: Vec<u8>,
    lines: u64,
    /// Bytes of its lines once expanded.
    text: u64,
    /// Where the length of the open run of formatted lines is, if one is open.
    open: Option<usize>,
}

/// How large a batch may grow when nobody takes it: beyond it, lines are dropped and
/// counted.
pub const AUDIT_BATCH_MAX: usize = 16 * 1024 * 1024;

/// The parts of an encoded batch: a tag, then a little-endian `u32`, then (but for
/// `DELIVERED`) that many bytes.
mod op {
    /// Formatted lines.
    pub(super) const LINES: u8 = 0;
    /// A member's end of line, for the `DELIVERED` after it (no text of its own).
    pub(super) const SEGMENT: u8 = 1;
    /// The head of the `delivered` lines that follow (no text of its own).
    pub(super) const HEAD: u8 = 2;
    /// A `delivered` line: the current head, then the segment at the offset given, whose
    /// length follows as a second `u32`.
    pub(super) const DELIVERED: u8 = 3;
}

/// What the `delivered` lines of one envelope share, formatted once per envelope rather
/// than once per recipient: everything before the participant.
#[derive(Debug, Default)]
struct DeliveredHead {
    /// The time and id it is for.
    at: Option<Time>,
    id: Option<Vec<u8>>,
    bytes: Vec<u8>,
    /// The generation of the batch that holds it, if one does.
    written: Option<u64>,
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
    /// The generation of the batch that holds it, and where its bytes are there.
    written: Option<(u64, u32)>,
}

impl Pending {
    /// Counts one more line, or one more dropped (false) when the batch is full.
    fn admit(&mut self, dropped: &mut u64) -> bool {
        if self.buf.len() >= AUDIT_BATCH_MAX {
            *dropped += 1;
            return false;
        }
        self.lines += 1;
        true
    }

    /// Appends an op with its bytes; returns where the bytes are.
    fn op(&mut self, tag: u8, bytes: &[u8]) -> u32 {
        self.open = None;
        self.buf.push(tag);
        self.buf
            .extend_from_slice(&len32(bytes.len()).to_le_bytes());
        let at = self.buf.len();
        self.buf.extend_from_slice(bytes);
        len32(at)
    }

    /// Formats one line with `write` into the open run of lines (opened if need be).
    fn line(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let at = match self.open {
            Some(at) => at,
            None => {
                self.buf.push(op::LINES);
                self.buf.extend_from_slice(&[0; 4]);
                let at = self.buf.len() - 4;
                self.open = Some(at);
                at
            }
        };
        let before = self.buf.len();
        write(&mut self.buf);
        self.text += (self.buf.len() - before) as u64;
        let run = len32(self.buf.len() - at - 4);
        self.buf[at..at + 4].copy_from_slice(&run.to_le_bytes());
    }
}

/// A batch's lengths and offsets fit in 32 bits: a batch stops growing at
/// [`AUDIT_BATCH_MAX`] (plus one record).
fn len32(n: usize) -> u32 {
    u32::try_from(n).expect("an audit batch is far below 4 GiB")
}

impl AuditLines {
    pub(super) fn push(&mut self, record: Record<'_>) {
        let f = &mut self.files[record.file() as usize];
        if !f.admit(&mut self.dropped) {
            return;
        }
        let ts = &mut self.ts;
        f.line(|buf| record.write_line(buf, ts));
    }

    /// A `delivered` line for member slot `member` (participant `who` of space `space`).
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
            h.written = None;
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
        let f = &mut self.files[AuditFile::EnvelopeHistory as usize];
        if !f.admit(&mut self.dropped) {
            return;
        }
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
                    written: None,
                })
            }
        };
        let generation = self.generation;
        let head = &mut self.head;
        if head.written != Some(generation) {
            f.op(op::HEAD, &head.bytes);
            head.written = Some(generation);
        }
        let at = match seg.written {
            Some((g, at)) if g == generation => at,
            _ => {
                let at = f.op(op::SEGMENT, &seg.bytes);
                seg.written = Some((generation, at));
                at
            }
        };
        f.open = None;
        // One copy of nine bytes: this runs once per recipient of every envelope.
        let [a0, a1, a2, a3] = at.to_le_bytes();
        let [l0, l1, l2, l3] = len32(seg.bytes.len()).to_le_bytes();
        f.buf
            .extend_from_slice(&[op::DELIVERED, a0, a1, a2, a3, l0, l1, l2, l3]);
        f.text += (head.bytes.len() + seg.bytes.len()) as u64;
    }

    pub(super) fn take(
        &mut self,
        file: AuditFile,
        spare: impl FnOnce() -> Vec<u8>,
    ) -> Option<AuditBatch> {
        let f = &mut self.files[file as usize];
        if f.buf.is_empty() {
            return None;
        }
        let mut next = spare();
        next.clear();
        // The next batch is about as large as this one: room for it now is one allocation,
        // where growing into it is a reallocation, and a copy, per doubling. Half as much
        // again, so that a pass a little larger than the last does not grow it either.
        if next.capacity() < f.buf.len() {
            next = Vec::with_capacity((f.buf.len() + f.buf.len() / 2).min(AUDIT_BATCH_MAX));
        }
        f.open = None;
        if file == AuditFile::EnvelopeHistory {
            self.generation += 1;
        }
        Some(AuditBatch {
            file,
            encoded: std::mem::replace(&mut f.buf, next),
            lines: std::mem::take(&mut f.lines),
            text: std::mem::take(&mut f.text),
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

/// Audit lines of one file, taken from the core: in an encoded form that refers to parts
/// the lines share, expanded by [`AuditBatch::pieces`] as they are written.
#[derive(Debug)]
pub struct AuditBatch {
    /// The file they go to.
    pub file: AuditFile,
    /// How many lines.
    pub lines: u64,
    encoded: Vec<u8>,
    text: u64,
}

impl AuditBatch {
    /// A batch of lines already formatted (each ending with its newline).
    pub fn from_lines(file: AuditFile, lines: u64, text: &[u8]) -> AuditBatch {
        let mut p = Pending::default();
        if !text.is_empty() {
            p.line(|buf| buf.extend_from_slice(text));
        }
        AuditBatch {
            file,
            lines,
            encoded: p.buf,
            text: p.text,
        }
    }

    /// The bytes of its lines.
    pub fn text_len(&self) -> u64 {
        self.text
    }

    /// The bytes it holds (what its lines cost in memory until they are written).
    pub fn encoded_len(&self) -> usize {
        self.encoded.len()
    }

    /// Its lines, in pieces whose concatenation they are (each line ends with its newline).
    pub fn pieces(&self) -> AuditPieces<'_> {
        AuditPieces {
            encoded: &self.encoded,
            at: 0,
            head: &[],
            next: None,
        }
    }

    /// Its lines, as one text.
    pub fn to_text(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.text as usize);
        self.pieces().for_each(|p| out.extend_from_slice(p));
        out
    }

    /// Its buffer, for [`super::Gateway::poll_audit`] to fill again.
    pub fn into_buffer(self) -> Vec<u8> {
        self.encoded
    }
}

/// The pieces of an [`AuditBatch`]'s lines, in order.
#[derive(Debug)]
pub struct AuditPieces<'a> {
    encoded: &'a [u8],
    at: usize,
    head: &'a [u8],
    /// The second piece of a `delivered` line.
    next: Option<&'a [u8]>,
}

impl<'a> AuditPieces<'a> {
    fn u32_at(&self, at: usize) -> Option<usize> {
        let b = self.encoded.get(at..at + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }
}

impl<'a> Iterator for AuditPieces<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if let Some(p) = self.next.take() {
            return Some(p);
        }
        // The core wrote the batch; a malformed one (a bug) ends it rather than the writer.
        loop {
            let tag = *self.encoded.get(self.at)?;
            let n = self.u32_at(self.at + 1)?;
            let body = self.at + 5;
            if tag == op::DELIVERED {
                let len = self.u32_at(body)?;
                let seg = self.encoded.get(n..n + len)?;
                self.at = body + 4;
                self.next = Some(seg);
                return Some(self.head);
            }
            let bytes = self.encoded.get(body..body + n)?;
            self.at = body + n;
            match tag {
                op::LINES => return Some(bytes),
                op::HEAD => self.head = bytes,
                op::SEGMENT => {}
                _ => {
                    debug_assert!(false, "an audit batch with op {tag}");
                    return None;
                }
            }
        }
    }
}
