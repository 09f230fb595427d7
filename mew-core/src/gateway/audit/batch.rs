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
///
/// A record that embeds an envelope the core holds as shared bytes (every `received`
/// line), and a capability decision, are not formatted by the core either: the batch keeps
/// a reference to the bytes (or to the participant's capability set) and the record's few
/// fields, and the line (the secret scan, the redaction, the envelope's copy; the
/// capabilities' JSON) is formatted on the writer's thread, by the same code, when the
/// batch is first read there ([`AuditBatch::text_len`], [`AuditBatch::pieces`]). The
/// space's task then spends on such a record a few dozen bytes of copying instead of the
/// line. The envelopes count toward the batch's bound ([`AUDIT_BATCH_MAX`]) meanwhile.
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
    /// The envelopes its deferred records embed (see [`op::DEFERRED`]), and their bytes.
    frames: Vec<Bytes>,
    frame_bytes: usize,
    /// The capability sets its deferred decisions name (see [`op::DECISION`]).
    caps: Vec<Arc<CapabilitySet>>,
    /// The participants and spaces its deferred records name.
    names: Vec<Arc<str>>,
    /// Its deferred records, and about the bytes of their lines.
    deferred: usize,
    deferred_text: usize,
    lines: u64,
    /// Bytes of its lines once expanded, deferred records left out.
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
    /// An envelope record formatted when the batch is read (see `Deferred`).
    pub(super) const DEFERRED: u8 = 4;
    /// A capability decision formatted when the batch is read (see `Decision`).
    pub(super) const DECISION: u8 = 5;
}

/// The index of `item` in `table`, added unless it is among the last few (a batch names
/// few participants and sets): what a deferred record holds instead of a copy.
fn index_of<T: ?Sized>(table: &mut Vec<Arc<T>>, item: &Arc<T>) -> u32 {
    let from = table.len().saturating_sub(4);
    match table[from..].iter().position(|t| Arc::ptr_eq(t, item)) {
        Some(i) => len32(from + i),
        None => {
            table.push(item.clone());
            len32(table.len() - 1)
        }
    }
}

/// The `u32` at the start of `rest`, moving past it.
fn take_u32(rest: &mut &[u8]) -> Option<u32> {
    let (b, tail) = rest.split_first_chunk::<4>()?;
    *rest = tail;
    Some(u32::from_le_bytes(*b))
}

/// A string field of a deferred record: a `u32` length and its bytes, or the length
/// `u32::MAX` for none.
fn put_field(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => {
            out.extend_from_slice(&len32(b.len()).to_le_bytes());
            out.extend_from_slice(b);
        }
        None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
    }
}

/// The entry of `table` whose index is the `u32` at the start of `rest`, moving past it.
fn take_ref<'t, T>(rest: &mut &[u8], table: &'t [T]) -> Option<&'t T> {
    table.get(take_u32(rest)? as usize)
}

/// Reads what [`put_field`] wrote at the start of `rest`, and moves past it.
fn take_field<'a>(rest: &mut &'a [u8]) -> Option<Option<&'a str>> {
    let n = take_u32(rest)?;
    if n == u32::MAX {
        return Some(None);
    }
    let (b, tail) = rest.split_at_checked(n as usize)?;
    *rest = tail;
    std::str::from_utf8(b).ok().map(Some)
}

/// A capability decision as the batch keeps it until its line is formatted: the
/// participant's capabilities, the participant and the space by reference (indexes into
/// the batch's sets and names), the rest copied. Encoded as: time (`u64`), set,
/// participant and space indexes (`u32` each), the matched capability's index in the set
/// (`u32`, `u32::MAX` for none: denied), then the envelope id and the kind (see
/// [`put_field`]).
struct Decision;

impl Decision {
    fn encode(
        out: &mut Vec<u8>,
        at: Time,
        [set, participant, space]: [u32; 3],
        matched: Option<usize>,
        envelope_id: Option<&str>,
        kind: &str,
    ) {
        out.extend_from_slice(&at.as_unix_millis().to_le_bytes());
        let matched = matched.map_or(u32::MAX, |i| u32::try_from(i).unwrap_or(u32::MAX));
        for n in [set, participant, space, matched] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        put_field(out, envelope_id.map(str::as_bytes));
        put_field(out, Some(kind.as_bytes()));
    }

    /// The record `body` encodes; `None` for a malformed body (a bug).
    fn decode<'a>(
        body: &'a [u8],
        sets: &'a [Arc<CapabilitySet>],
        names: &'a [Arc<str>],
    ) -> Option<Record<'a>> {
        let (at, mut rest) = body.split_first_chunk::<8>()?;
        let set = take_ref(&mut rest, sets)?;
        let participant = take_ref(&mut rest, names)?;
        let space_id = take_ref(&mut rest, names)?;
        let matched = match take_u32(&mut rest)? {
            u32::MAX => None,
            i => Some(set.iter().nth(i as usize)?),
        };
        let envelope_id = take_field(&mut rest)?;
        let required = take_field(&mut rest)??;
        Some(Record::Capability {
            at: Time::from_unix_millis(u64::from_le_bytes(*at)),
            envelope_id,
            participant,
            space_id,
            allowed: matched.is_some(),
            required,
            matched,
            granted: set,
            metadata: None,
        })
    }
}

/// An envelope record as the batch keeps it until its line is formatted, on the writer's
/// thread: the envelope, participant and space by reference (indexes into the batch's
/// frames and names), the id copied. Encoded as: time (`u64`), frame, participant and
/// space indexes (`u32` each), flags (`u8`: 1 the envelope was parsed as JSON, 2
/// outbound, 4 the event is `delivered` rather than `received`), transport (`u8`), then
/// the id (see [`put_field`]).
pub(super) struct Deferred;

impl Deferred {
    /// Whether a record with this event may be deferred (`received` or `delivered`).
    pub(super) fn is_deferrable(event: &str) -> bool {
        matches!(event, "received" | "delivered")
    }

    fn encode(out: &mut Vec<u8>, [frame, participant, space]: [u32; 3], r: &Record<'_>) {
        let Record::Envelope {
            at,
            event,
            id,
            envelope_is_json,
            direction,
            transport,
            ..
        } = *r
        else {
            unreachable!("only envelope records are deferred");
        };
        let flags = u8::from(envelope_is_json)
            | (u8::from(direction == Direction::Outbound) << 1)
            | (u8::from(event == "delivered") << 2);
        out.extend_from_slice(&at.as_unix_millis().to_le_bytes());
        for n in [frame, participant, space] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(&[flags, transport as u8]);
        put_field(out, id.map(str::as_bytes));
    }

    /// The record `body` encodes; `None` for a malformed body (a bug: the line is lost
    /// rather than the writer).
    fn decode<'a>(
        body: &'a [u8],
        frames: &'a [Bytes],
        names: &'a [Arc<str>],
    ) -> Option<Record<'a>> {
        let (at, mut rest) = body.split_first_chunk::<8>()?;
        let frame = take_ref(&mut rest, frames)?;
        let participant = take_ref(&mut rest, names)?;
        let space_id = take_ref(&mut rest, names)?;
        let (&[flags, transport], mut rest) = rest.split_first_chunk::<2>()?;
        let id = take_field(&mut rest)?;
        Some(Record::Envelope {
            at: Time::from_unix_millis(u64::from_le_bytes(*at)),
            event: if flags & 4 != 0 {
                "delivered"
            } else {
                "received"
            },
            id,
            envelope: Some(frame),
            envelope_is_json: flags & 1 != 0,
            participant,
            space_id,
            direction: if flags & 2 != 0 {
                Direction::Outbound
            } else {
                Direction::Inbound
            },
            transport: Transport::from_u8(transport)?,
            metadata: None,
        })
    }
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
    /// Bytes the batch holds: its encoded form and the envelopes it refers to.
    pub(super) fn held(&self) -> usize {
        self.buf.len() + self.frame_bytes
    }

    /// Counts one more line, or one more dropped (false) when the batch is full.
    fn admit(&mut self, dropped: &mut u64) -> bool {
        if self.held() >= AUDIT_BATCH_MAX {
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

    /// An envelope record without metadata whose envelope is `frame`, from `participant`
    /// of `space` (the record's): kept as references to them, formatted when the batch is
    /// read (see [`AuditLines`]).
    pub(super) fn push_deferred(
        &mut self,
        record: Record<'_>,
        frame: &Bytes,
        participant: &Arc<str>,
        space: &Arc<str>,
    ) {
        debug_assert!(matches!(
            record,
            Record::Envelope { envelope: Some(e), metadata: None, participant: p, space_id: s, event, .. }
                if e == &frame[..] && p == &**participant && s == &**space && Deferred::is_deferrable(event)
        ));
        let f = &mut self.files[record.file() as usize];
        if !f.admit(&mut self.dropped) {
            return;
        }
        f.open = None;
        let frame_at = len32(f.frames.len());
        f.frames.push(frame.clone());
        f.frame_bytes += frame.len();
        let refs = [
            frame_at,
            index_of(&mut f.names, participant),
            index_of(&mut f.names, space),
        ];
        f.deferred += 1;
        // About its line: the envelope and a couple of hundred bytes of fields.
        f.deferred_text += frame.len() + 256;
        f.buf.push(op::DEFERRED);
        let at = f.buf.len();
        f.buf.extend_from_slice(&[0; 4]);
        Deferred::encode(&mut f.buf, refs, &record);
        let n = len32(f.buf.len() - at - 4);
        f.buf[at..at + 4].copy_from_slice(&n.to_le_bytes());
    }

    /// A capability decision without metadata: `matched` is the index in `granted` of
    /// the capability that allowed the envelope (`None`: denied). Kept as references to
    /// the set, the participant and the space, formatted when the batch is read (see
    /// [`AuditLines`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_decision(
        &mut self,
        at: Time,
        envelope_id: Option<&str>,
        participant: &Arc<str>,
        space: &Arc<str>,
        kind: &str,
        matched: Option<usize>,
        granted: &Arc<CapabilitySet>,
    ) {
        let f = &mut self.files[AuditFile::CapabilityDecisions as usize];
        if !f.admit(&mut self.dropped) {
            return;
        }
        f.open = None;
        let refs = [
            index_of(&mut f.caps, granted),
            index_of(&mut f.names, participant),
            index_of(&mut f.names, space),
        ];
        f.deferred += 1;
        f.deferred_text += 512;
        f.buf.push(op::DECISION);
        let at_len = f.buf.len();
        f.buf.extend_from_slice(&[0; 4]);
        Decision::encode(&mut f.buf, at, refs, matched, envelope_id, kind);
        let n = len32(f.buf.len() - at_len - 4);
        f.buf[at_len..at_len + 4].copy_from_slice(&n.to_le_bytes());
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
        let frames = if f.frames.is_empty() {
            Vec::new()
        } else {
            // As the encoded buffer: room for about as many as this batch's at once.
            let n = f.frames.len();
            std::mem::replace(&mut f.frames, Vec::with_capacity(n + n / 2))
        };
        f.frame_bytes = 0;
        Some(AuditBatch {
            file,
            encoded: std::mem::replace(&mut f.buf, next),
            frames,
            caps: std::mem::take(&mut f.caps),
            names: std::mem::take(&mut f.names),
            deferred: (
                std::mem::take(&mut f.deferred),
                std::mem::take(&mut f.deferred_text),
            ),
            lines: std::mem::take(&mut f.lines),
            text: std::mem::take(&mut f.text),
            formatted: std::cell::OnceCell::new(),
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
/// the lines share, expanded by [`AuditBatch::pieces`] as they are written. Records the
/// core deferred are formatted the first time the batch is read, on the reader's thread.
#[derive(Debug)]
pub struct AuditBatch {
    /// The file they go to.
    pub file: AuditFile,
    /// How many lines.
    pub lines: u64,
    encoded: Vec<u8>,
    /// The envelopes deferred records embed, and the capability sets deferred decisions
    /// name.
    frames: Vec<Bytes>,
    pub(super) caps: Vec<Arc<CapabilitySet>>,
    /// The participants and spaces deferred records name.
    names: Vec<Arc<str>>,
    /// How many deferred records, and about the bytes of their lines.
    deferred: (usize, usize),
    /// Bytes of the lines formatted by the core.
    text: u64,
    formatted: std::cell::OnceCell<Formatted>,
}

/// The lines of a batch's deferred records, in order, and the length of each.
#[derive(Debug, Default)]
struct Formatted {
    text: Vec<u8>,
    lens: Vec<u32>,
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
            frames: Vec::new(),
            caps: Vec::new(),
            names: Vec::new(),
            deferred: (0, 0),
            text: p.text,
            formatted: std::cell::OnceCell::new(),
        }
    }

    /// The bytes of its lines (formatting its deferred records, the first time).
    pub fn text_len(&self) -> u64 {
        self.text + self.formatted().text.len() as u64
    }

    /// The bytes it holds (what its lines cost in memory until they are written), the
    /// envelopes its deferred records embed included.
    pub fn encoded_len(&self) -> usize {
        self.encoded.len() + self.frames.iter().map(Bytes::len).sum::<usize>()
    }

    /// Its lines, in pieces whose concatenation they are (each line ends with its newline;
    /// its deferred records are formatted the first time).
    pub fn pieces(&self) -> AuditPieces<'_> {
        let f = self.formatted();
        AuditPieces {
            encoded: &self.encoded,
            at: 0,
            head: &[],
            next: None,
            formatted: &f.text,
            lens: &f.lens,
        }
    }

    /// The lines of its deferred records, formatted once.
    fn formatted(&self) -> &Formatted {
        self.formatted.get_or_init(|| {
            let (records, text) = self.deferred;
            if records == 0 {
                return Formatted::default();
            }
            let mut f = Formatted {
                text: Vec::with_capacity(text),
                lens: Vec::with_capacity(records),
            };
            let mut ts = Timestamps::default();
            let mut at = 0;
            while let Some((tag, body, next)) = op_at(&self.encoded, at) {
                at = next;
                let record = match tag {
                    op::DEFERRED => Deferred::decode(body, &self.frames, &self.names),
                    op::DECISION => Decision::decode(body, &self.caps, &self.names),
                    _ => continue,
                };
                let before = f.text.len();
                if let Some(r) = record {
                    r.write_line(&mut f.text, &mut ts);
                } else {
                    debug_assert!(false, "a malformed deferred audit record");
                }
                f.lens.push(len32(f.text.len() - before));
            }
            f
        })
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
    /// The lines of the deferred records not yet given, and their lengths.
    formatted: &'a [u8],
    lens: &'a [u32],
}

/// The little-endian `u32` at `at`, if `bytes` holds one there.
fn u32_at(bytes: &[u8], at: usize) -> Option<usize> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
}

/// The op of an encoded batch at `at`: its tag, what it carries (a `delivered` line's
/// segment; else its bytes) and where the next op starts. `None` past the end, or for a
/// malformed batch (a bug: the batch ends there rather than the writer).
fn op_at(encoded: &[u8], at: usize) -> Option<(u8, &[u8], usize)> {
    let tag = *encoded.get(at)?;
    let n = u32_at(encoded, at + 1)?;
    let body = at + 5;
    if tag == op::DELIVERED {
        let len = u32_at(encoded, body)?;
        return Some((tag, encoded.get(n..n + len)?, body + 4));
    }
    Some((tag, encoded.get(body..body + n)?, body + n))
}

impl<'a> Iterator for AuditPieces<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if let Some(p) = self.next.take() {
            return Some(p);
        }
        loop {
            let (tag, bytes, next) = op_at(self.encoded, self.at)?;
            self.at = next;
            match tag {
                op::DELIVERED => {
                    self.next = Some(bytes);
                    return Some(self.head);
                }
                op::LINES => return Some(bytes),
                op::HEAD => self.head = bytes,
                op::SEGMENT => {}
                op::DEFERRED | op::DECISION => {
                    let (&n, lens) = self.lens.split_first()?;
                    let (line, rest) = self.formatted.split_at_checked(n as usize)?;
                    self.lens = lens;
                    self.formatted = rest;
                    return Some(line);
                }
                _ => {
                    debug_assert!(false, "an audit batch with op {tag}");
                    return None;
                }
            }
        }
    }
}
