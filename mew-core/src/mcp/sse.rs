//! Server-sent events as Streamable HTTP carries them: a bounded, incremental parser.
//!
//! The rules are the WHATWG event-stream ones: lines end in CRLF, LF or CR (split anywhere
//! across chunks); a line starting with `:` is a comment; `field: value` loses one space after
//! the colon; `data` lines join with `\n`; `id` sets the last event id (ignored if it holds a
//! NUL); `retry` takes digits only; a blank line dispatches the event, unless it has no data.
//! A leading byte-order mark is dropped. Bounds: a line longer than `max_line` bytes and an
//! event whose data grows past `max_event` bytes are reported once and skipped up to the next
//! blank line, so a stream that never ends costs at most those two amounts of memory.

use std::time::Duration;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// `id`, if this event set one (the stream's last event id is
    /// [`SseParser::last_event_id`]).
    pub id: Option<String>,
    /// `event`; `message` when absent.
    pub event: String,
    /// `data`, lines joined with `\n`.
    pub data: String,
}

/// What [`SseParser::feed`] hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    /// A complete event with data.
    Event(SseEvent),
    /// A line over the limit; the event it belongs to is dropped.
    LineTooLong {
        /// The limit, in bytes.
        limit: usize,
    },
    /// An event whose data grew over the limit; it is dropped.
    EventTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
}

/// An incremental event-stream parser with bounded memory.
#[derive(Debug)]
pub struct SseParser {
    max_line: usize,
    max_event: usize,
    line: Vec<u8>,
    /// The previous chunk ended in CR: an LF starting the next one belongs to it.
    after_cr: bool,
    /// Nothing read yet: a byte-order mark may still come.
    at_start: bool,
    /// The current line is over the limit; skip to its end.
    skipping_line: bool,
    /// The current event is dropped; skip to the blank line.
    skipping_event: bool,
    data: String,
    has_data: bool,
    event: String,
    id: Option<String>,
    last_event_id: Option<String>,
    retry: Option<Duration>,
}

impl SseParser {
    /// A parser accepting lines of `max_line` bytes and events of `max_event` bytes of data.
    pub fn new(max_line: usize, max_event: usize) -> Self {
        SseParser {
            max_line,
            max_event,
            line: Vec::new(),
            after_cr: false,
            at_start: true,
            skipping_line: false,
            skipping_event: false,
            data: String::new(),
            has_data: false,
            event: String::new(),
            id: None,
            last_event_id: None,
            retry: None,
        }
    }

    /// The last event id the stream set (what `Last-Event-ID` resumes from).
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_event_id.as_deref()
    }

    /// The reconnection delay the stream asked for, if any.
    pub fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// Bytes held for an unfinished line and event.
    pub fn pending(&self) -> usize {
        self.line.len() + self.data.len()
    }

    /// Feeds a chunk, calling `on_item` for every event it completes.
    pub fn feed(&mut self, mut chunk: &[u8], mut on_item: impl FnMut(SseItem)) {
        if self.at_start && !chunk.is_empty() {
            // The mark may arrive split; hold back until three bytes decide it.
            const BOM: &[u8] = b"\xEF\xBB\xBF";
            let have = self.line.len();
            let need = BOM.len() - have;
            let take = need.min(chunk.len());
            if BOM[have..have + take] == chunk[..take] {
                self.line.extend_from_slice(&chunk[..take]);
                chunk = &chunk[take..];
                if self.line.len() < BOM.len() {
                    return;
                }
                self.line.clear();
            } else {
                let held = std::mem::take(&mut self.line);
                self.at_start = false;
                self.feed_bytes(&held, &mut on_item);
            }
            self.at_start = false;
        }
        self.feed_bytes(chunk, &mut on_item);
    }

    fn feed_bytes(&mut self, mut chunk: &[u8], on_item: &mut impl FnMut(SseItem)) {
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while !chunk.is_empty() {
            let Some(end) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') else {
                self.push_partial(chunk, on_item);
                return;
            };
            self.push_partial(&chunk[..end], on_item);
            let cr = chunk[end] == b'\r';
            chunk = &chunk[end + 1..];
            if cr {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            self.end_line(on_item);
        }
    }

    fn push_partial(&mut self, bytes: &[u8], on_item: &mut impl FnMut(SseItem)) {
        if self.skipping_line {
            return;
        }
        if self.line.len() + bytes.len() > self.max_line {
            self.line.clear();
            self.skipping_line = true;
            if !self.skipping_event {
                self.drop_event();
                self.skipping_event = true;
                on_item(SseItem::LineTooLong {
                    limit: self.max_line,
                });
            }
            return;
        }
        self.line.extend_from_slice(bytes);
    }

    fn end_line(&mut self, on_item: &mut impl FnMut(SseItem)) {
        if std::mem::take(&mut self.skipping_line) {
            return;
        }
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            self.dispatch(on_item);
            return;
        }
        if self.skipping_event || line[0] == b':' {
            return;
        }
        let text = String::from_utf8_lossy(&line);
        let (field, value) = match text.find(':') {
            Some(i) => {
                let v = &text[i + 1..];
                (&text[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (&text[..], ""),
        };
        match field {
            "data" => {
                let added = value.len() + usize::from(self.has_data);
                if self.data.len() + added > self.max_event {
                    self.drop_event();
                    self.skipping_event = true;
                    on_item(SseItem::EventTooLarge {
                        limit: self.max_event,
                    });
                    return;
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = value.to_owned(),
            "id" if !value.contains('\0') => {
                self.id = Some(value.to_owned());
                self.last_event_id = Some(value.to_owned());
            }
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse::<u64>() {
                    self.retry = Some(Duration::from_millis(ms));
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, on_item: &mut impl FnMut(SseItem)) {
        if std::mem::take(&mut self.skipping_event) {
            self.drop_event();
            return;
        }
        let data = std::mem::take(&mut self.data);
        let event = std::mem::take(&mut self.event);
        let id = self.id.take();
        if std::mem::take(&mut self.has_data) && !data.is_empty() {
            let event = if event.is_empty() {
                "message".to_owned()
            } else {
                event
            };
            on_item(SseItem::Event(SseEvent { id, event, data }));
        }
    }

    fn drop_event(&mut self) {
        self.data = String::new();
        self.has_data = false;
        self.event.clear();
        self.id = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(p: &mut SseParser, chunks: &[&[u8]]) -> Vec<SseItem> {
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, |i| out.push(i));
        }
        out
    }

    fn ev(id: Option<&str>, event: &str, data: &str) -> SseItem {
        SseItem::Event(SseEvent {
            id: id.map(str::to_owned),
            event: event.into(),
            data: data.into(),
        })
    }

    /// The priming event and the response of the conformance suite's `sse-retry` scenario,
    /// byte for byte.
    const SSE_RETRY: &[u8] = b"id: event-1\nretry: 500\ndata: \n\nevent: message\nid: event-2\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"Reconnection test completed successfully\"}]}}\n\n";

    #[test]
    fn priming_event_sets_id_and_retry_without_dispatching() {
        let mut p = SseParser::new(1024, 4096);
        let got = run(&mut p, &[b"id: event-1\nretry: 500\ndata: \n\n"]);
        assert_eq!(got, vec![]);
        assert_eq!(p.last_event_id(), Some("event-1"));
        assert_eq!(p.retry(), Some(Duration::from_millis(500)));
    }

    #[test]
    fn conformance_stream_split_anywhere_gives_the_same_events() {
        let want = vec![ev(
            Some("event-2"),
            "message",
            r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"Reconnection test completed successfully"}]}}"#,
        )];
        for split in 0..SSE_RETRY.len() {
            let mut p = SseParser::new(1024, 4096);
            let got = run(&mut p, &[&SSE_RETRY[..split], &SSE_RETRY[split..]]);
            assert_eq!(got, want, "split at {split}");
            assert_eq!(p.last_event_id(), Some("event-2"));
            assert_eq!(p.pending(), 0);
        }
        let mut p = SseParser::new(1024, 4096);
        let bytes: Vec<&[u8]> = SSE_RETRY.chunks(1).collect();
        assert_eq!(run(&mut p, &bytes), want);
    }

    #[test]
    fn line_endings_comments_multiline_data_and_bom() {
        let mut p = SseParser::new(1024, 4096);
        let text = b"\xEF\xBB\xBF: keepalive\r\ndata:a\r\ndata: b\r\rdata\revent: x\rid: 7\r\r";
        for split in 0..text.len() {
            let mut p2 = SseParser::new(1024, 4096);
            let got = run(&mut p2, &[&text[..split], &text[split..]]);
            // The second event has an empty data buffer: it only moves the last id.
            assert_eq!(got, vec![ev(None, "message", "a\nb")], "split at {split}");
            assert_eq!(p2.last_event_id(), Some("7"));
        }
        // An empty `data` line still counts: two of them make one newline of data.
        let got = run(&mut p, &[b"data\ndata\n\n"]);
        assert_eq!(got, vec![ev(None, "message", "\n")]);
        // A retry that is not all digits is ignored; an id with NUL too.
        run(&mut p, &[b"retry: 5s\nid: a\0b\ndata: x\n\n"]);
        assert_eq!(p.retry(), None);
        assert_eq!(p.last_event_id(), None);
    }

    #[test]
    fn overlong_line_drops_its_event_and_resyncs() {
        let mut p = SseParser::new(16, 1024);
        let got = run(
            &mut p,
            &[
                b"id: 1\ndata: 0123456789",
                b"abcdefghij\ndata: more\n\n",
                b"data: ok\n\n",
            ],
        );
        assert_eq!(
            got,
            vec![
                SseItem::LineTooLong { limit: 16 },
                ev(None, "message", "ok")
            ]
        );
        assert!(p.pending() < 16);
    }

    #[test]
    fn oversized_event_is_dropped_once_and_memory_stays_bounded() {
        let mut p = SseParser::new(64, 100);
        let mut got = Vec::new();
        p.feed(b"data: start\n", |i| got.push(i));
        for _ in 0..10_000 {
            p.feed(b"data: 0123456789012345678901234567890123456789\n", |i| {
                got.push(i)
            });
            assert!(p.pending() <= 164);
        }
        p.feed(b"\ndata: next\n\n", |i| got.push(i));
        assert_eq!(
            got,
            vec![
                SseItem::EventTooLarge { limit: 100 },
                ev(None, "message", "next")
            ]
        );
    }
}
