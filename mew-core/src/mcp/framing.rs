//! Newline-delimited framing of the stdio transport: one JSON-RPC message per line.
//!
//! Chunks arrive split anywhere; [`LineBuffer`] reassembles them while holding at most
//! `max_line` bytes. A line longer than that is reported once, dropped, and the buffer
//! resynchronises at the next newline, so one runaway line never costs unbounded memory or
//! the messages after it.

use memchr::memchr;

/// What [`LineBuffer::feed`] hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    /// A complete line without its terminator (`\n` or `\r\n`).
    Text(&'a [u8]),
    /// A line grew past the limit; its bytes up to the next newline are dropped.
    Overlong {
        /// The limit it exceeded, in bytes.
        limit: usize,
    },
}

/// Reassembles lines from arbitrarily split chunks, with a bound on line length.
#[derive(Debug)]
pub struct LineBuffer {
    buf: Vec<u8>,
    max_line: usize,
    discarding: bool,
}

/// Capacity kept after a line is consumed; above it the buffer is released so that one large
/// message does not pin that much memory for the life of the process.
const RETAINED_CAPACITY: usize = 64 * 1024;

impl LineBuffer {
    /// A buffer that accepts lines of up to `max_line` bytes (terminator excluded).
    pub fn new(max_line: usize) -> Self {
        LineBuffer {
            buf: Vec::new(),
            max_line,
            discarding: false,
        }
    }

    /// The configured line limit.
    pub fn max_line(&self) -> usize {
        self.max_line
    }

    /// Bytes of an unfinished line currently held.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Forgets any partial line (a new process starts with a clean stream).
    pub fn reset(&mut self) {
        self.clear_buf();
        self.discarding = false;
    }

    /// Feeds a chunk, calling `on_line` for each line it completes, in order. Lines wholly
    /// inside `chunk` are handed out without copying.
    pub fn feed(&mut self, mut chunk: &[u8], mut on_line: impl FnMut(Line<'_>)) {
        while !chunk.is_empty() {
            let Some(nl) = memchr(b'\n', chunk) else {
                if self.discarding {
                    return;
                }
                if self.buf.len() + chunk.len() > self.max_line {
                    self.start_discarding(&mut on_line);
                } else {
                    self.buf.extend_from_slice(chunk);
                }
                return;
            };
            let head = &chunk[..nl];
            chunk = &chunk[nl + 1..];
            if self.discarding {
                self.discarding = false;
                continue;
            }
            if self.buf.is_empty() {
                if head.len() > self.max_line {
                    on_line(Line::Overlong {
                        limit: self.max_line,
                    });
                } else {
                    on_line(Line::Text(strip_cr(head)));
                }
            } else if self.buf.len() + head.len() > self.max_line {
                self.clear_buf();
                on_line(Line::Overlong {
                    limit: self.max_line,
                });
            } else {
                self.buf.extend_from_slice(head);
                on_line(Line::Text(strip_cr(&self.buf)));
                self.clear_buf();
            }
        }
    }

    fn start_discarding(&mut self, on_line: &mut impl FnMut(Line<'_>)) {
        self.clear_buf();
        self.discarding = true;
        on_line(Line::Overlong {
            limit: self.max_line,
        });
    }

    fn clear_buf(&mut self) {
        self.buf.clear();
        if self.buf.capacity() > RETAINED_CAPACITY {
            self.buf = Vec::new();
        }
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(buf: &mut LineBuffer, chunks: &[&[u8]]) -> Vec<Result<String, usize>> {
        let mut out = Vec::new();
        for c in chunks {
            buf.feed(c, |l| {
                out.push(match l {
                    Line::Text(t) => Ok(String::from_utf8_lossy(t).into_owned()),
                    Line::Overlong { limit } => Err(limit),
                })
            });
        }
        out
    }

    #[test]
    fn lines_split_anywhere_reassemble() {
        let text = b"{\"a\":1}\r\n\n{\"b\":2}\n{\"c\"";
        for split in 0..text.len() {
            let mut b = LineBuffer::new(100);
            let got = collect(&mut b, &[&text[..split], &text[split..]]);
            assert_eq!(
                got,
                vec![
                    Ok("{\"a\":1}".into()),
                    Ok(String::new()),
                    Ok("{\"b\":2}".into())
                ],
                "split at {split}"
            );
            assert_eq!(b.pending(), 4);
        }
    }

    #[test]
    fn byte_at_a_time() {
        let mut b = LineBuffer::new(100);
        let text = b"one\ntwo\n";
        let chunks: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(
            collect(&mut b, &chunks),
            vec![Ok("one".into()), Ok("two".into())]
        );
    }

    #[test]
    fn overlong_line_is_reported_once_and_stream_resyncs() {
        let mut b = LineBuffer::new(8);
        let got = collect(&mut b, &[b"0123", b"45678", b"9abc", b"def\nok\n"]);
        assert_eq!(got, vec![Err(8), Ok("ok".into())]);
        assert_eq!(b.pending(), 0);

        // Entirely inside one chunk.
        let got = collect(&mut b, &[b"0123456789\nfine\n"]);
        assert_eq!(got, vec![Err(8), Ok("fine".into())]);

        // Completed by a chunk that pushes the buffered part over.
        let got = collect(&mut b, &[b"01234", b"5678\nx\n"]);
        assert_eq!(got, vec![Err(8), Ok("x".into())]);
    }

    #[test]
    fn line_exactly_at_limit_passes() {
        let mut b = LineBuffer::new(4);
        assert_eq!(collect(&mut b, &[b"ab", b"cd\n"]), vec![Ok("abcd".into())]);
    }

    #[test]
    fn reset_drops_partial_line() {
        let mut b = LineBuffer::new(16);
        collect(&mut b, &[b"partial"]);
        b.reset();
        assert_eq!(collect(&mut b, &[b"new\n"]), vec![Ok("new".into())]);
    }
}
