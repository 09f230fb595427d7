//! Stream data frames: `#<stream_id>#<data>` text frames that carry no envelope (spec 3.10.3).

use thiserror::Error;

/// Longest stream id accepted in a frame. Gateways allocate ids like `stream-42`; the bound
/// keeps a hostile frame from making a lookup key out of megabytes of text.
pub const MAX_STREAM_ID_BYTES: usize = 256;

/// What a text frame holds, decided from its first non-whitespace byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// A JSON envelope (or something to be rejected as one).
    Envelope,
    /// A `#stream_id#data` frame.
    StreamData,
}

impl FrameKind {
    /// Classifies a frame without parsing it: `#` first means stream data.
    pub fn of(bytes: &[u8]) -> FrameKind {
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'#') => FrameKind::StreamData,
            _ => FrameKind::Envelope,
        }
    }
}

/// Why a frame is not a valid stream data frame.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    /// The frame does not start with `#`.
    #[error("a stream frame must start with `#`")]
    MissingPrefix,
    /// No `#` closes the stream id.
    #[error("a stream frame needs a second `#` after the stream id")]
    UnterminatedId,
    /// `##...`: the stream id is empty.
    #[error("the stream id of a stream frame may not be empty")]
    EmptyStreamId,
    /// The stream id is longer than [`MAX_STREAM_ID_BYTES`].
    #[error("stream id of {len} bytes exceeds the limit of {MAX_STREAM_ID_BYTES} bytes")]
    StreamIdTooLong {
        /// The id's length.
        len: usize,
    },
    /// The stream id is not UTF-8 text.
    #[error("the stream id is not valid UTF-8")]
    InvalidUtf8,
    /// A stream id given to [`StreamFrame::new`] contains `#`.
    #[error("a stream id may not contain `#`")]
    HashInStreamId,
}

/// One data frame of an open stream, borrowed from the frame's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamFrame<'a> {
    /// The id `stream/open` assigned; never empty, never contains `#`.
    pub stream_id: &'a str,
    /// Everything after the second `#`, which may itself contain `#`.
    pub data: &'a [u8],
}

impl<'a> StreamFrame<'a> {
    /// A frame to send; fails when `stream_id` could not be parsed back.
    pub fn new(stream_id: &'a str, data: &'a [u8]) -> Result<StreamFrame<'a>, FrameError> {
        check_id(stream_id.as_bytes())?;
        if stream_id.contains('#') {
            return Err(FrameError::HashInStreamId);
        }
        Ok(StreamFrame { stream_id, data })
    }

    /// Parses `#stream_id#data`, after optional leading whitespace.
    pub fn parse(bytes: &'a [u8]) -> Result<StreamFrame<'a>, FrameError> {
        let start = bytes
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(bytes.len());
        let rest = match bytes[start..].split_first() {
            Some((b'#', rest)) => rest,
            _ => return Err(FrameError::MissingPrefix),
        };
        // Only the id is scanned: data can be long and is never looked at.
        let window = &rest[..rest.len().min(MAX_STREAM_ID_BYTES + 1)];
        let Some(end) = memchr::memchr(b'#', window) else {
            return Err(if rest.len() > MAX_STREAM_ID_BYTES {
                // Error path only: find the id's real length for the message.
                let len = memchr::memchr(b'#', rest).unwrap_or(rest.len());
                FrameError::StreamIdTooLong { len }
            } else {
                FrameError::UnterminatedId
            });
        };
        let id = &rest[..end];
        check_id(id)?;
        let stream_id = std::str::from_utf8(id).map_err(|_| FrameError::InvalidUtf8)?;
        Ok(StreamFrame {
            stream_id,
            data: &rest[end + 1..],
        })
    }

    /// The data as text, when it is UTF-8 (it always is in a WebSocket text frame).
    pub fn data_str(&self) -> Option<&'a str> {
        std::str::from_utf8(self.data).ok()
    }

    /// Length of the encoded frame in bytes.
    pub fn encoded_len(&self) -> usize {
        self.stream_id.len() + self.data.len() + 2
    }

    /// Appends the encoded frame to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        out.push(b'#');
        out.extend_from_slice(self.stream_id.as_bytes());
        out.push(b'#');
        out.extend_from_slice(self.data);
    }

    /// The encoded frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out
    }
}

fn check_id(id: &[u8]) -> Result<(), FrameError> {
    if id.is_empty() {
        return Err(FrameError::EmptyStreamId);
    }
    if id.len() > MAX_STREAM_ID_BYTES {
        return Err(FrameError::StreamIdTooLong { len: id.len() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_by_first_non_whitespace_byte() {
        assert_eq!(FrameKind::of(b"#s#x"), FrameKind::StreamData);
        assert_eq!(FrameKind::of(b" \n\t#s#x"), FrameKind::StreamData);
        assert_eq!(FrameKind::of(br#"{"kind":"chat"}"#), FrameKind::Envelope);
        assert_eq!(FrameKind::of(b""), FrameKind::Envelope);
        assert_eq!(FrameKind::of(b"  "), FrameKind::Envelope);
    }

    #[test]
    fn parses_and_keeps_hashes_in_data() {
        let f = StreamFrame::parse(b"#stream-42#a#b##").unwrap();
        assert_eq!(f.stream_id, "stream-42");
        assert_eq!(f.data, b"a#b##");
        assert_eq!(f.data_str(), Some("a#b##"));
        let f = StreamFrame::parse(b"  #s#").unwrap();
        assert_eq!((f.stream_id, f.data), ("s", &b""[..]));
    }

    #[test]
    fn malformed_frames_have_typed_errors() {
        assert_eq!(StreamFrame::parse(b"{}"), Err(FrameError::MissingPrefix));
        assert_eq!(StreamFrame::parse(b""), Err(FrameError::MissingPrefix));
        assert_eq!(StreamFrame::parse(b"#abc"), Err(FrameError::UnterminatedId));
        assert_eq!(
            StreamFrame::parse(b"##data"),
            Err(FrameError::EmptyStreamId)
        );
        assert_eq!(
            StreamFrame::parse(b"#\xff\xfe#data"),
            Err(FrameError::InvalidUtf8)
        );
        let long = format!("#{}#x", "a".repeat(MAX_STREAM_ID_BYTES + 1));
        assert_eq!(
            StreamFrame::parse(long.as_bytes()),
            Err(FrameError::StreamIdTooLong {
                len: MAX_STREAM_ID_BYTES + 1
            })
        );
        let max = format!("#{}#x", "a".repeat(MAX_STREAM_ID_BYTES));
        assert!(StreamFrame::parse(max.as_bytes()).is_ok());
    }

    #[test]
    fn builds_frames_that_parse_back() {
        let f = StreamFrame::new("stream-1", b"{\"x\":\"#\"}").unwrap();
        let bytes = f.encode();
        assert_eq!(bytes, b"#stream-1#{\"x\":\"#\"}");
        assert_eq!(StreamFrame::parse(&bytes).unwrap(), f);
        assert_eq!(
            StreamFrame::new("a#b", b""),
            Err(FrameError::HashInStreamId)
        );
        assert_eq!(StreamFrame::new("", b""), Err(FrameError::EmptyStreamId));
    }
}
