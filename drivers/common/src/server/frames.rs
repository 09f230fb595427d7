//! Server-to-client WebSocket frames written straight to the socket.
//!
//! A server's frames are not masked, so the frame of a broadcast is the same bytes for every
//! recipient: a connection's writer sends each one as a few header bytes of its own and the
//! shared payload, gathered with vectored writes, instead of having the WebSocket layer copy
//! (and buffer) every payload once per recipient. The WebSocket layer (tungstenite) still
//! reads each connection; what it writes by itself (pong answers to a client's pings, the
//! reply to a client's close) goes to the connection's [`ControlFrames`] bytes, which the writer
//! sends between two whole frames.

use std::io::{self, IoSlice};
use std::task::{Context, Poll};

use bytes::Bytes;

/// The socket under a server WebSocket, as the connection's writer uses it. A driver wraps
/// its socket in a type that reads from the socket and writes into a [`ControlFrames`] (the
/// WebSocket layer's own frames), and gives the writer the socket's vectored write.
pub trait RawSocket: Send + Unpin {
    /// Writes some of `bufs` to the socket.
    fn poll_write_vectored(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>>;
    /// Flushes what the socket itself buffers (a TLS layer's records).
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// The frames the WebSocket layer wrote, waiting for the writer.
    fn control(&mut self) -> &mut ControlFrames;
}

/// Frames the WebSocket layer wrote by itself (pongs, a close reply), held until the
/// connection's writer sends them.
#[derive(Debug, Default)]
pub struct ControlFrames {
    bytes: Vec<u8>,
    /// Whether they hold a close frame.
    close: bool,
}

/// Most bytes of frames the WebSocket layer may have waiting: a peer that sends pings and
/// reads nothing cannot grow them further (later pongs are dropped; it is soon closed as a
/// slow consumer anyway).
const CONTROL_MAX: usize = 4 * 1024;

impl ControlFrames {
    /// Takes one write of the WebSocket layer, which is always whole frames (its buffer,
    /// flushed); returns how many bytes it took (all of them: they are never refused).
    pub fn accept(&mut self, buf: &[u8]) -> usize {
        if self.bytes.len() + buf.len() <= CONTROL_MAX {
            self.close |= holds_close(buf);
            self.bytes.extend_from_slice(buf);
        }
        buf.len()
    }

    /// The waiting frames, and whether a close frame is among them.
    fn take(&mut self) -> Option<(Bytes, bool)> {
        if self.bytes.is_empty() {
            return None;
        }
        let close = std::mem::take(&mut self.close);
        Some((Bytes::from(std::mem::take(&mut self.bytes)), close))
    }

    /// Whether frames are waiting.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Whether frames `buf` hold a close frame (opcode 8).
fn holds_close(mut buf: &[u8]) -> bool {
    while let Some((head, len)) = frame_head(buf) {
        if buf[0] & 0x0f == 0x8 {
            return true;
        }
        buf = buf.get(head.saturating_add(len)..).unwrap_or(&[]);
    }
    false
}

/// The length of the header (masking key included) and of the payload of the frame `buf`
/// starts with; `None` when not even its header is there.
fn frame_head(buf: &[u8]) -> Option<(usize, usize)> {
    let second = *buf.get(1)?;
    let (at, len) = match second & 0x7f {
        126 => (
            4,
            usize::from(u16::from_be_bytes([*buf.get(2)?, *buf.get(3)?])),
        ),
        127 => {
            let n: [u8; 8] = buf.get(2..10)?.try_into().ok()?;
            (
                10,
                usize::try_from(u64::from_be_bytes(n)).unwrap_or(usize::MAX),
            )
        }
        n => (2, usize::from(n)),
    };
    let masked = if second & 0x80 != 0 { 4 } else { 0 };
    Some((at + masked, len))
}

/// Text messages longer than this go out in fragments of this size: a client that limits
/// its frame size (as the participant runtime does, to the largest message) still takes
/// long messages, and the frames of a long one are shared slices of it, not copies.
pub const FRAGMENT: usize = 4 * 1024;

/// What one pass over the core's outputs has for one connection: pieces of the pass's
/// frames, framed once for every recipient in one buffer the connections share.
#[derive(Debug)]
pub struct Frames {
    arena: Bytes,
    pieces: Vec<Piece>,
    /// Messages and their payload bytes (what the writer reports written).
    messages: usize,
    bytes: usize,
}

/// One message of a [`Frames`].
#[derive(Debug, Clone)]
pub(crate) enum Piece {
    /// A whole frame, header included, at this range of the pass's buffer.
    Framed(u32, u32),
    /// A longer message, written from its own bytes (in fragments if very long).
    Long(Bytes),
}

impl Frames {
    /// How many messages.
    pub fn messages(&self) -> usize {
        self.messages
    }

    /// Their payload bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The messages' texts (for tests and diagnostics).
    pub fn texts(&self) -> Vec<Bytes> {
        let mut out = Vec::with_capacity(self.messages);
        for p in &self.pieces {
            match p {
                // A run of whole frames: each header says how long its payload is.
                Piece::Framed(s, e) => {
                    let mut f = self.arena.slice(*s as usize..*e as usize);
                    while let Some((head, len)) = frame_head(&f)
                        && let Some(end) = head.checked_add(len).filter(|&e| e <= f.len())
                    {
                        out.push(f.slice(head..end));
                        f = f.slice(end..);
                    }
                }
                Piece::Long(b) => out.push(b.clone()),
            }
        }
        out
    }
}

/// Messages up to this size are framed into the pass's shared buffer; longer ones (a
/// joiner's welcome, a large result) are written from their own bytes, so that a connection
/// that is behind does not keep other connections' large frames alive with the buffer.
const SHARED_MAX: usize = 1024;

/// The frames of one pass over the core's outputs, framed once: a broadcast's frame is
/// written to the pass's buffer once, and each recipient gets its place in the buffer.
#[derive(Debug, Default)]
pub struct PassFrames {
    buf: Vec<u8>,
    /// The last pass's size: the next buffer starts at it rather than growing to it.
    last_len: usize,
    /// The last frame seen (pinned, so its address is not reused) and its piece.
    last: Option<(Bytes, Piece)>,
}

/// A connection's pieces of the current pass: frames that follow each other in the pass's
/// buffer (a broadcast's, one after another) are one piece.
#[derive(Debug, Default)]
pub struct Pending {
    pieces: Vec<Piece>,
    messages: usize,
    bytes: usize,
}

impl Pending {
    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }
}

impl PassFrames {
    /// Adds a text message for a connection; false (and nothing added) when it is not
    /// UTF-8. The core hands the same `Bytes` to every recipient of a broadcast: it is
    /// checked and framed once.
    pub fn push(&mut self, to: &mut Pending, frame: &Bytes) -> bool {
        let piece = match &self.last {
            Some((b, piece)) if b.as_ptr() == frame.as_ptr() && b.len() == frame.len() => {
                piece.clone()
            }
            _ => {
                if std::str::from_utf8(frame).is_err() {
                    return false;
                }
                if self.buf.capacity() == 0 {
                    self.buf.reserve(self.last_len.clamp(1024, 1 << 20));
                }
                let piece = match u32::try_from(self.buf.len() + frame.len() + 10) {
                    Ok(_) if frame.len() <= SHARED_MAX => {
                        let start = self.buf.len();
                        let (head, n) = header(0x81, frame.len());
                        self.buf.extend_from_slice(&head[..usize::from(n)]);
                        self.buf.extend_from_slice(frame);
                        // In range: checked above.
                        Piece::Framed(start as u32, self.buf.len() as u32)
                    }
                    _ => Piece::Long(frame.clone()),
                };
                self.last = Some((frame.clone(), piece.clone()));
                piece
            }
        };
        match (to.pieces.last_mut(), piece) {
            (Some(Piece::Framed(_, end)), Piece::Framed(s, e)) if *end == s => *end = e,
            (_, piece) => to.pieces.push(piece),
        }
        to.messages += 1;
        to.bytes += frame.len();
        true
    }

    /// The pass's buffer, shared from now on: every connection's pending pieces must be
    /// taken with [`PassFrames::take`] before the next [`PassFrames::push`].
    pub fn seal(&mut self) -> Bytes {
        self.last = None;
        self.last_len = self.buf.len();
        Bytes::from(std::mem::take(&mut self.buf))
    }

    /// A connection's pending pieces before the pass is over (a ping or a close must follow
    /// them): its frames copied out, the pass's buffer going on for everyone else.
    pub fn take_now(&self, pending: &mut Pending) -> Frames {
        let mut buf = Vec::new();
        let mut pieces = Vec::with_capacity(pending.pieces.len());
        for p in pending.pieces.drain(..) {
            pieces.push(match p {
                Piece::Framed(s, e) => {
                    let start = buf.len() as u32;
                    buf.extend_from_slice(&self.buf[s as usize..e as usize]);
                    Piece::Framed(start, buf.len() as u32)
                }
                long @ Piece::Long(_) => long,
            });
        }
        Frames {
            arena: Bytes::from(buf),
            messages: std::mem::take(&mut pending.messages),
            bytes: std::mem::take(&mut pending.bytes),
            pieces,
        }
    }

    /// A connection's pending pieces, over the sealed buffer `arena`.
    pub fn take(arena: &Bytes, pending: &mut Pending) -> Frames {
        // The next pass likely has about as many (a few kept: idle connections stay small).
        let next = Vec::with_capacity(pending.pieces.len().min(16));
        let pieces = std::mem::replace(&mut pending.pieces, next);
        Frames {
            arena: arena.clone(),
            messages: std::mem::take(&mut pending.messages),
            bytes: std::mem::take(&mut pending.bytes),
            pieces,
        }
    }
}

/// A frame header: the first byte (FIN and opcode), the payload length, no mask.
fn header(first: u8, len: usize) -> ([u8; 10], u8) {
    let mut head = [0u8; 10];
    head[0] = first;
    let head_len = if len < 126 {
        head[1] = len as u8;
        2
    } else if let Ok(n) = u16::try_from(len) {
        head[1] = 126;
        head[2..4].copy_from_slice(&n.to_be_bytes());
        4
    } else {
        head[1] = 127;
        head[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        10
    };
    (head, head_len)
}

/// Bytes on their way out: a header of their own (possibly empty) and a shared payload.
#[derive(Debug, Clone)]
struct Out {
    head: [u8; 10],
    head_len: u8,
    payload: Bytes,
}

impl Out {
    fn len(&self) -> usize {
        usize::from(self.head_len) + self.payload.len()
    }

    /// The bytes from `offset` on, as at most two slices.
    fn slices(&self, offset: usize) -> [&[u8]; 2] {
        let h = usize::from(self.head_len);
        if offset < h {
            [&self.head[offset..h], &self.payload]
        } else {
            [&[], &self.payload[offset - h..]]
        }
    }
}

/// The frames of one write to a connection, and how far they are written.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    out: Vec<Out>,
    /// Small frames (pings, closes, the WebSocket layer's own) not yet sealed into `out`.
    inline: Vec<u8>,
    /// The first entry of `out` not yet written whole, and how many of its bytes are.
    next: usize,
    offset: usize,
    /// Whether a close frame was queued (nothing may follow it on the wire).
    closes: bool,
}

/// Slices gathered per write call (the kernel takes up to 1024).
const SLICES: usize = 64;

impl Batch {
    /// Whether a close frame was queued: everything after it is dropped.
    pub(crate) fn closes(&self) -> bool {
        self.closes
    }

    /// Queues a frame whose payload is copied.
    fn copy(&mut self, first: u8, payload: &[u8]) {
        let (head, n) = header(first, payload.len());
        self.inline.extend_from_slice(&head[..usize::from(n)]);
        self.inline.extend_from_slice(payload);
    }

    /// Queues a frame whose payload is shared.
    fn share(&mut self, first: u8, payload: Bytes) {
        self.seal();
        let (head, head_len) = header(first, payload.len());
        self.out.push(Out {
            head,
            head_len,
            payload,
        });
    }

    /// Moves the copied frames into `out`, keeping the order.
    fn seal(&mut self) {
        if !self.inline.is_empty() {
            self.out.push(Out {
                head: [0; 10],
                head_len: 0,
                payload: Bytes::from(std::mem::take(&mut self.inline)),
            });
        }
    }

    /// Queues a text message: one frame, or [`FRAGMENT`]-sized fragments of a long one.
    pub(crate) fn push_text(&mut self, text: Bytes) {
        if self.closes {
            return;
        }
        if text.len() <= FRAGMENT {
            return self.share(0x81, text);
        }
        let n = text.len().div_ceil(FRAGMENT);
        for i in 0..n {
            let chunk = text.slice(i * FRAGMENT..((i + 1) * FRAGMENT).min(text.len()));
            let opcode = if i == 0 { 0x1 } else { 0x0 };
            let fin = if i + 1 == n { 0x80 } else { 0 };
            self.share(fin | opcode, chunk);
        }
    }

    /// Queues one pass's frames for the connection: runs of whole frames that follow each
    /// other in the pass's buffer (a broadcast's) go out as one slice of it.
    pub(crate) fn push_frames(&mut self, f: Frames) {
        if self.closes {
            return;
        }
        let mut run: Option<(u32, u32)> = None;
        for p in f.pieces {
            match p {
                Piece::Framed(s, e) => match &mut run {
                    Some((_, end)) if *end == s => *end = e,
                    _ => {
                        if let Some((a, b)) = run.replace((s, e)) {
                            self.share_raw(f.arena.slice(a as usize..b as usize));
                        }
                    }
                },
                Piece::Long(b) => {
                    if let Some((a, e)) = run.take() {
                        self.share_raw(f.arena.slice(a as usize..e as usize));
                    }
                    self.push_text(b);
                }
            }
        }
        if let Some((a, b)) = run {
            self.share_raw(f.arena.slice(a as usize..b as usize));
        }
    }

    /// Queues bytes that are whole frames already.
    fn share_raw(&mut self, bytes: Bytes) {
        self.seal();
        self.out.push(Out {
            head: [0; 10],
            head_len: 0,
            payload: bytes,
        });
    }

    /// Queues a ping with no payload.
    pub(crate) fn push_ping(&mut self) {
        if !self.closes {
            self.copy(0x89, &[]);
        }
    }

    /// Queues a close frame with a status code and a reason (cut to what a control frame
    /// holds); nothing after it is sent.
    pub(crate) fn push_close(&mut self, code: u16, reason: &str) {
        if self.closes {
            return;
        }
        let mut end = reason.len().min(123);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        let mut payload = [0u8; 125];
        payload[..2].copy_from_slice(&code.to_be_bytes());
        payload[2..2 + end].copy_from_slice(&reason.as_bytes()[..end]);
        self.copy(0x88, &payload[..2 + end]);
        self.closes = true;
    }

    /// Queues a close frame without a status code (what a WebSocket layer sends when it
    /// ends a connection with nothing to say).
    pub(crate) fn push_close_empty(&mut self) {
        if !self.closes {
            self.copy(0x88, &[]);
            self.closes = true;
        }
    }

    /// Queues the WebSocket layer's waiting frames, unless a close frame was already
    /// queued (nothing may follow it).
    pub(crate) fn take_control(&mut self, control: &mut ControlFrames) {
        if let Some((bytes, close)) = control.take()
            && !self.closes
        {
            self.inline.extend_from_slice(&bytes);
            self.closes = close;
        }
    }

    /// The traced envelopes not yet written ([`crate::server::hops`]).
    pub(crate) fn traced_ids(&self) -> Vec<u64> {
        let mut ids = Vec::new();
        for o in self.out.iter().skip(self.next) {
            crate::server::hops::traced_ids(&o.payload, &mut ids);
        }
        ids
    }

    /// Whether everything queued is written.
    pub(crate) fn is_empty(&self) -> bool {
        self.next >= self.out.len() && self.inline.is_empty()
    }

    /// Writes some of the batch; `Ready(Ok(()))` once all of it is written.
    pub(crate) fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        sock: &mut impl RawSocket,
    ) -> Poll<io::Result<()>> {
        self.seal();
        while !self.is_empty() {
            let mut slices = [IoSlice::new(&[]); SLICES];
            let mut k = 0;
            let mut offset = self.offset;
            for f in &self.out[self.next..] {
                if k + 2 > SLICES {
                    break;
                }
                for s in f.slices(offset) {
                    if !s.is_empty() {
                        slices[k] = IoSlice::new(s);
                        k += 1;
                    }
                }
                offset = 0;
            }
            let n = match sock.poll_write_vectored(cx, &slices[..k]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            self.advance(n);
        }
        // A TLS layer may keep the last records when the socket was full: they must go too.
        match sock.poll_flush(cx) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        // An idle connection keeps no more than a few entries.
        if self.out.capacity() > 16 {
            self.out = Vec::new();
        }
        self.out.clear();
        (self.next, self.offset) = (0, 0);
        Poll::Ready(Ok(()))
    }

    fn advance(&mut self, mut n: usize) {
        while n > 0 && self.next < self.out.len() {
            let left = self.out[self.next].len() - self.offset;
            if n < left {
                self.offset += n;
                return;
            }
            n -= left;
            self.next += 1;
            self.offset = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tungstenite::protocol::frame::coding::{Data, OpCode};
    use tungstenite::protocol::frame::{Frame, FrameHeader};

    /// A socket that takes at most `chunk` bytes per write, into `written`.
    struct Trickle {
        written: Vec<u8>,
        chunk: usize,
        control: ControlFrames,
    }

    impl RawSocket for Trickle {
        fn poll_write_vectored(
            &mut self,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.chunk - n);
                self.written.extend_from_slice(&b[..take]);
                n += take;
                if n == self.chunk {
                    break;
                }
            }
            Poll::Ready(Ok(n))
        }
        fn poll_flush(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn control(&mut self) -> &mut ControlFrames {
            &mut self.control
        }
    }

    /// Parses `bytes` back into frames with tungstenite's own parser.
    fn parse(mut bytes: &[u8]) -> Vec<Frame> {
        let mut frames = Vec::new();
        while !bytes.is_empty() {
            let mut cur = std::io::Cursor::new(bytes);
            let (header, len) = FrameHeader::parse(&mut cur)
                .expect("header")
                .expect("complete header");
            let at = cur.position() as usize;
            let len = len as usize;
            let payload = bytes[at..at + len].to_vec();
            frames.push(Frame::from_payload(header, payload.into()));
            bytes = &bytes[at + len..];
        }
        frames
    }

    fn write_all(batch: &mut Batch, sock: &mut Trickle) {
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        match batch.poll_write(&mut cx, sock) {
            Poll::Ready(Ok(())) => {}
            other => panic!("not written: {other:?}"),
        }
    }

    #[test]
    fn frames_of_every_length_survive_partial_writes_and_parse_back() {
        // Copied, shared, and shared with 16- and 64-bit lengths.
        let texts: Vec<String> = [
            0usize, 1, 125, 126, 127, 300, 1024, 1025, 4096, 65535, 65536, 70_000,
        ]
        .iter()
        .map(|&n| "x".repeat(n))
        .collect();
        for chunk in [1, 7, 1000, 1 << 20] {
            let mut batch = Batch::default();
            for t in &texts {
                if t.len() <= FRAGMENT {
                    batch.push_text(Bytes::from(t.clone()));
                } else {
                    batch.share(0x81, Bytes::from(t.clone()));
                }
            }
            batch.push_ping();
            batch.push_close(1013, "slow consumer");
            batch.push_text(Bytes::from_static(b"after the close"));
            let mut sock = Trickle {
                written: Vec::new(),
                chunk,
                control: ControlFrames::default(),
            };
            write_all(&mut batch, &mut sock);
            assert!(batch.is_empty());
            let frames = parse(&sock.written);
            assert_eq!(frames.len(), texts.len() + 2, "chunk {chunk}");
            for (f, t) in frames.iter().zip(&texts) {
                assert_eq!(f.header().opcode, OpCode::Data(Data::Text));
                assert!(f.header().is_final);
                assert!(f.header().mask.is_none());
                assert_eq!(f.payload(), t.as_bytes(), "chunk {chunk}");
            }
            let close = &frames[texts.len() + 1];
            assert_eq!(&close.payload()[..2], &1013u16.to_be_bytes());
            assert_eq!(&close.payload()[2..], b"slow consumer");
            assert!(holds_close(&sock.written));
        }
    }

    #[test]
    fn long_messages_go_out_in_fragments_that_add_up_to_them() {
        // Multi-byte characters straddle the fragment boundaries.
        let text: String = "é-ü-€-".repeat(FRAGMENT);
        let mut batch = Batch::default();
        batch.push_text(Bytes::from(text.clone()));
        let mut sock = Trickle {
            written: Vec::new(),
            chunk: 5000,
            control: ControlFrames::default(),
        };
        write_all(&mut batch, &mut sock);
        let frames = parse(&sock.written);
        assert_eq!(frames.len(), text.len().div_ceil(FRAGMENT));
        let mut joined = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            let h = f.header();
            let want = if i == 0 { Data::Text } else { Data::Continue };
            assert_eq!(h.opcode, OpCode::Data(want), "frame {i}");
            assert_eq!(h.is_final, i + 1 == frames.len(), "frame {i}");
            assert!(f.payload().len() <= FRAGMENT);
            joined.extend_from_slice(f.payload());
        }
        assert_eq!(joined, text.as_bytes());
    }

    #[test]
    fn a_pass_frames_each_message_once_and_every_recipient_gets_its_own_in_order() {
        let mut pass = PassFrames::default();
        let mut to = [Pending::default(), Pending::default()];
        let m1 = Bytes::from_static(b"one");
        let m2 = Bytes::from("two ".repeat(100));
        let long = Bytes::from("x".repeat(FRAGMENT * 2 + 5));
        let direct = Bytes::from_static(b"just b");
        for (i, m) in [
            (0, &m1),
            (1, &m1),
            (0, &m2),
            (1, &m2),
            (1, &direct),
            (0, &long),
            (1, &long),
            (0, &m1),
        ] {
            assert!(pass.push(&mut to[i], m));
        }
        let [mut a, mut b] = to;
        assert!(!pass.push(&mut a, &Bytes::from_static(b"\xff\xfe")));
        // m1 and m2 follow each other in the buffer: one piece of a's for both.
        assert_eq!((a.pieces.len(), a.messages), (3, 4));
        // One connection's frames taken before the pass is over (a close follows them).
        let mut c = Pending::default();
        assert!(pass.push(&mut c, &m1) && pass.push(&mut c, &long));
        let early = pass.take_now(&mut c);
        assert!(c.is_empty());
        assert_eq!(early.texts(), vec![m1.clone(), long.clone()]);
        let arena = pass.seal();
        // Each short message once in the buffer; the long one written from its own bytes.
        assert_eq!(
            arena.len(),
            (2 + 3) + (4 + 400) + (2 + 6) + (2 + 3),
            "m1 again after the long one is framed again, nothing else"
        );
        let (fa, fb) = (
            PassFrames::take(&arena, &mut a),
            PassFrames::take(&arena, &mut b),
        );
        assert!(a.is_empty() && b.is_empty());
        assert_eq!(fa.messages(), 4);
        assert_eq!(fa.bytes(), 3 + 400 + long.len() + 3);
        assert_eq!(
            fa.texts(),
            vec![m1.clone(), m2.clone(), long.clone(), m1.clone()]
        );
        assert_eq!(
            fb.texts(),
            vec![m1.clone(), m2.clone(), direct.clone(), long.clone()]
        );
        for (f, want) in [
            (fa, vec![&m1, &m2, &long, &m1]),
            (fb, vec![&m1, &m2, &direct, &long]),
        ] {
            let mut batch = Batch::default();
            batch.push_frames(f);
            // m1 and m2 follow each other in the buffer: one slice for both.
            assert!(batch.out.len() <= 2 + long.len().div_ceil(FRAGMENT));
            let mut sock = Trickle {
                written: Vec::new(),
                chunk: 333,
                control: ControlFrames::default(),
            };
            write_all(&mut batch, &mut sock);
            let mut got: Vec<Vec<u8>> = Vec::new();
            for fr in parse(&sock.written) {
                match fr.header().opcode {
                    OpCode::Data(Data::Continue) => {
                        got.last_mut().unwrap().extend_from_slice(fr.payload())
                    }
                    _ => got.push(fr.payload().to_vec()),
                }
            }
            let want: Vec<Vec<u8>> = want.iter().map(|m| m.to_vec()).collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn nothing_follows_a_close_and_waiting_pongs_stay_bounded() {
        let mut control = ControlFrames::default();
        let pong = [0x8a, 0x00];
        for _ in 0..10_000 {
            control.accept(&pong);
        }
        assert_eq!(control.bytes.len(), CONTROL_MAX);
        assert!(!control.close);
        let mut batch = Batch::default();
        batch.push_close(1000, "");
        batch.take_control(&mut control);
        assert_eq!(batch.inline.len(), 4, "pongs after a close are not sent");

        let mut control = ControlFrames::default();
        control.accept(&[0x8a, 0x01, b'x', 0x88, 0x02, 0x03, 0xe8]);
        assert!(control.close, "a close reply after a pong is seen");
        let mut batch = Batch::default();
        batch.take_control(&mut control);
        assert!(batch.closes);
    }
}
