//! One entry of a space's log and its bytes on the wire.
//!
//! A record is a one-line JSON head, a newline, then the raw body (a frame's bytes, an HTTP
//! body) unchanged: frames are neither escaped nor re-serialised on their way through the
//! log. The head names the node that published the record, that node's clock reading and,
//! for inputs that may need it, [`crate::secret::TOKEN_ENTROPY`] bytes of entropy drawn by
//! that node.

use crate::Time;
use crate::gateway::{ConnId, Identity, Judgement};
use crate::json_write::{push_str, push_u64};
use crate::secret::{self, TokenHash};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What happened at a node: one input of the space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// The node (re)started: connections it held in an earlier life are gone. `timeout` is
    /// how long it may stay silent before the others declare it gone.
    NodeUp {
        /// Silence after which the node counts as gone.
        timeout: Duration,
    },
    /// The node is alive (published every second or so).
    Beat,
    /// A timer of the space may be due.
    Tick,
    /// A WebSocket completed its handshake at the node, with its bearer token's digest.
    Connect {
        /// The node's own number for the connection, until it learns its [`ConnId`].
        local: u64,
        /// The digest of the `Authorization: Bearer` token.
        token: Option<TokenHash>,
    },
    /// A WebSocket completed its handshake at the node with a bearer token the identity
    /// verifier judged there ([`crate::gateway::Gateway::judge_token`]).
    ConnectJudged {
        /// The node's own number for the connection.
        local: u64,
        /// The judgement (the token itself never enters the log).
        judged: Judgement,
    },
    /// A frame from a connection.
    Frame {
        /// The connection.
        conn: ConnId,
        /// Its bytes, as received.
        frame: Bytes,
    },
    /// A join message with its token taken out (see [`crate::gateway::seal_join`]).
    SealedJoin {
        /// The connection.
        conn: ConnId,
        /// The message without its token.
        frame: Bytes,
        /// The token's digest.
        token: TokenHash,
    },
    /// A join message whose token the identity verifier judged at the node, the token
    /// taken out (see [`crate::gateway::take_join_token`]).
    JudgedJoin {
        /// The connection.
        conn: ConnId,
        /// The message without its token.
        frame: Bytes,
        /// The judgement.
        judged: Judgement,
    },
    /// A frame over the size limit.
    Oversize {
        /// The connection.
        conn: ConnId,
        /// Its announced size.
        size: usize,
    },
    /// A pong: the connection is alive.
    Pong {
        /// The connection.
        conn: ConnId,
    },
    /// The connection ended.
    Closed {
        /// The connection.
        conn: ConnId,
    },
    /// The node's socket for this connection fell too far behind (slow consumer).
    Slow {
        /// The connection.
        conn: ConnId,
    },
    /// `POST /participants/{participant}/messages` at the node.
    Post {
        /// The node's number for the request.
        local: u64,
        /// The participant named in the path.
        participant: String,
        /// The bearer token's digest.
        token: Option<TokenHash>,
        /// The body.
        body: Bytes,
    },
}

/// An [`Entry`] with where and when it arose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The publishing node's id.
    pub node: std::sync::Arc<str>,
    /// The publishing node's clock.
    pub at: Time,
    /// Randomness for the input (the token it may mint), drawn by the publishing node.
    pub entropy: Option<secret::Entropy>,
    /// The input.
    pub entry: Entry,
}

/// Why bytes are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a log record: {0}")]
pub struct DecodeError(String);

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Tag {
    NodeUp,
    Beat,
    Tick,
    Connect,
    ConnectJudged,
    Frame,
    SealedJoin,
    JudgedJoin,
    Oversize,
    Pong,
    Closed,
    Slow,
    Post,
}

/// The head line. Flat with optional fields: cheap to write and read on the hot path.
#[derive(Serialize, Deserialize, Default)]
struct Head {
    t: Option<Tag>,
    n: String,
    at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    e: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    c: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    l: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    k: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    p: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s: Option<u64>,
    /// A judged token's expiry (ms), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    x: Option<u64>,
    /// When a judged token starts to vouch (ms), when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    v: Option<u64>,
    /// Why a judged token was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    r: Option<String>,
}

impl Record {
    /// The record's bytes: the head line, then the body.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Appends the record's bytes to `out` (the same bytes as [`Record::encode`]). The head
    /// is written field by field, in the order of `Head` (its strings escaped as the audit
    /// lines' are, which `serde_json` reads back): this runs once per input of a durable
    /// space, where building and serialising a struct costs more than the rest of the
    /// record.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let (tag, body): (&[u8], &[u8]) = match &self.entry {
            Entry::NodeUp { .. } => (b"node_up", &[]),
            Entry::Beat => (b"beat", &[]),
            Entry::Tick => (b"tick", &[]),
            Entry::Connect { .. } => (b"connect", &[]),
            Entry::ConnectJudged { .. } => (b"connect_judged", &[]),
            Entry::JudgedJoin { frame, .. } => (b"judged_join", frame),
            Entry::Frame { frame, .. } => (b"frame", frame),
            Entry::SealedJoin { frame, .. } => (b"sealed_join", frame),
            Entry::Oversize { .. } => (b"oversize", &[]),
            Entry::Pong { .. } => (b"pong", &[]),
            Entry::Closed { .. } => (b"closed", &[]),
            Entry::Slow { .. } => (b"slow", &[]),
            Entry::Post { body, .. } => (b"post", body),
        };
        out.reserve(64 + self.node.len() + body.len());
        out.extend_from_slice(b"{\"t\":\"");
        out.extend_from_slice(tag);
        out.extend_from_slice(b"\",\"n\":");
        push_str(out, &self.node);
        out.extend_from_slice(b",\"at\":");
        push_u64(out, self.at.as_unix_millis());
        if let Some(e) = &self.entropy {
            out.extend_from_slice(b",\"e\":\"");
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            for b in e {
                out.push(DIGITS[usize::from(b >> 4)]);
                out.push(DIGITS[usize::from(b & 15)]);
            }
            out.push(b'"');
        }
        let (mut c, mut l, mut k, mut p, mut s) = (None, None, None, None, None);
        let mut judged: Option<&Judgement> = None;
        match &self.entry {
            Entry::NodeUp { timeout } => {
                s = Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
            }
            Entry::Beat | Entry::Tick => {}
            Entry::Connect { local, token } => {
                l = Some(*local);
                k = token.as_ref();
            }
            Entry::Frame { conn, .. }
            | Entry::Pong { conn }
            | Entry::Closed { conn }
            | Entry::Slow { conn } => c = Some(conn.as_u64()),
            Entry::SealedJoin { conn, token, .. } => {
                c = Some(conn.as_u64());
                k = Some(token);
            }
            Entry::ConnectJudged { local, judged: j } => {
                l = Some(*local);
                judged = Some(j);
            }
            Entry::JudgedJoin {
                conn, judged: j, ..
            } => {
                c = Some(conn.as_u64());
                judged = Some(j);
            }
            Entry::Oversize { conn, size } => {
                c = Some(conn.as_u64());
                s = Some(*size as u64);
            }
            Entry::Post {
                local,
                participant,
                token,
                ..
            } => {
                l = Some(*local);
                p = Some(participant.as_str());
                k = token.as_ref();
            }
        }
        if let Some(c) = c {
            out.extend_from_slice(b",\"c\":");
            push_u64(out, c);
        }
        if let Some(l) = l {
            out.extend_from_slice(b",\"l\":");
            push_u64(out, l);
        }
        if let Some(k) = k {
            out.extend_from_slice(b",\"k\":\"");
            out.extend_from_slice(k.to_hex().as_bytes());
            out.push(b'"');
        }
        if let Some(p) = p {
            out.extend_from_slice(b",\"p\":");
            push_str(out, p);
        }
        if let Some(s) = s {
            out.extend_from_slice(b",\"s\":");
            push_u64(out, s);
        }
        match judged {
            Some(Ok(identity)) => {
                out.extend_from_slice(b",\"p\":");
                push_str(out, &identity.subject);
                if let Some(x) = identity.expires_at {
                    out.extend_from_slice(b",\"x\":");
                    push_u64(out, x.as_unix_millis());
                }
                if let Some(v) = identity.not_before {
                    out.extend_from_slice(b",\"v\":");
                    push_u64(out, v.as_unix_millis());
                }
            }
            Some(Err(why)) => {
                out.extend_from_slice(b",\"r\":");
                push_str(out, why);
            }
            None => {}
        }
        // The head is JSON without raw newlines (strings are escaped).
        out.extend_from_slice(b"}\n");
        out.extend_from_slice(body);
    }

    /// Reads a record from its bytes; the body shares `bytes`.
    pub fn decode(bytes: Bytes) -> Result<Record, DecodeError> {
        let bad = |m: &str| DecodeError(m.to_owned());
        let nl = memchr::memchr(b'\n', &bytes).ok_or_else(|| bad("no head line"))?;
        let h: Head =
            serde_json::from_slice(&bytes[..nl]).map_err(|e| DecodeError(e.to_string()))?;
        let body = bytes.slice(nl + 1..);
        let conn = || {
            h.c.map(ConnId::from_u64)
                .ok_or_else(|| bad("no connection"))
        };
        let token = |k: &Option<String>| -> Result<Option<TokenHash>, DecodeError> {
            k.as_deref()
                .map(|k| TokenHash::from_hex(k).ok_or_else(|| bad("bad token digest")))
                .transpose()
        };
        let judged = || -> Result<Judgement, DecodeError> {
            match (&h.p, &h.r) {
                (Some(subject), None) => Ok(Ok(Identity {
                    subject: subject.clone(),
                    expires_at: h.x.map(Time::from_unix_millis),
                    not_before: h.v.map(Time::from_unix_millis),
                })),
                (None, Some(why)) => Ok(Err(why.clone())),
                _ => Err(bad("a judged token needs a subject or a reason")),
            }
        };
        let entry = match h.t.ok_or_else(|| bad("no type"))? {
            Tag::NodeUp => Entry::NodeUp {
                timeout: Duration::from_millis(h.s.ok_or_else(|| bad("no timeout"))?),
            },
            Tag::Beat => Entry::Beat,
            Tag::Tick => Entry::Tick,
            Tag::Connect => Entry::Connect {
                local: h.l.ok_or_else(|| bad("no local id"))?,
                token: token(&h.k)?,
            },
            Tag::ConnectJudged => Entry::ConnectJudged {
                local: h.l.ok_or_else(|| bad("no local id"))?,
                judged: judged()?,
            },
            Tag::JudgedJoin => Entry::JudgedJoin {
                conn: conn()?,
                judged: judged()?,
                frame: body,
            },
            Tag::Frame => Entry::Frame {
                conn: conn()?,
                frame: body,
            },
            Tag::SealedJoin => Entry::SealedJoin {
                conn: conn()?,
                frame: body,
                token: token(&h.k)?.ok_or_else(|| bad("no token digest"))?,
            },
            Tag::Oversize => Entry::Oversize {
                conn: conn()?,
                size: usize::try_from(h.s.ok_or_else(|| bad("no size"))?).unwrap_or(usize::MAX),
            },
            Tag::Pong => Entry::Pong { conn: conn()? },
            Tag::Closed => Entry::Closed { conn: conn()? },
            Tag::Slow => Entry::Slow { conn: conn()? },
            Tag::Post => Entry::Post {
                local: h.l.ok_or_else(|| bad("no local id"))?,
                participant: h.p.clone().ok_or_else(|| bad("no participant"))?,
                token: token(&h.k)?,
                body,
            },
        };
        let entropy = match &h.e {
            Some(e) => Some(match secret::unhex::<{ secret::TOKEN_ENTROPY }>(e) {
                Some(e) => e,
                // 16 bytes, as earlier versions drew: read, so that their logs replay.
                // An invitation replayed from one mints another token than the one it
                // answered (its inviter invites again).
                None => {
                    let short = secret::unhex::<16>(e).ok_or_else(|| bad("bad entropy"))?;
                    let mut full = [0u8; secret::TOKEN_ENTROPY];
                    full[..16].copy_from_slice(&short);
                    full
                }
            }),
            None => None,
        };
        Ok(Record {
            node: h.n.into(),
            at: Time::from_unix_millis(h.at),
            entropy,
            entry,
        })
    }
}

/// Encodes records as [`Record::encode_into`] does, keeping the head of the last frame
/// record up to its connection (`{"t":"frame","n":…,"at":…,"c":`): a durable node logs
/// every frame, and a pass's frames share their node and, mostly, their clock reading, so
/// most heads are a copy and one number.
#[derive(Debug, Default)]
pub struct Encoder {
    /// The cached head and what it was made for.
    head: Vec<u8>,
    made_for: Option<(std::sync::Arc<str>, Time)>,
}

impl Encoder {
    /// An encoder with nothing cached.
    pub fn new() -> Encoder {
        Encoder::default()
    }

    /// Appends `rec`'s bytes to `out`: the same bytes as [`Record::encode_into`].
    pub fn encode_into(&mut self, rec: &Record, out: &mut Vec<u8>) {
        let Entry::Frame { conn, frame } = &rec.entry else {
            return rec.encode_into(out);
        };
        if rec.entropy.is_some() {
            return rec.encode_into(out);
        }
        let fresh = self
            .made_for
            .as_ref()
            .is_some_and(|(node, at)| *at == rec.at && **node == *rec.node);
        if !fresh {
            self.head.clear();
            self.head.extend_from_slice(b"{\"t\":\"frame\",\"n\":");
            push_str(&mut self.head, &rec.node);
            self.head.extend_from_slice(b",\"at\":");
            push_u64(&mut self.head, rec.at.as_unix_millis());
            self.head.extend_from_slice(b",\"c\":");
            self.made_for = Some((rec.node.clone(), rec.at));
        }
        out.reserve(self.head.len() + 24 + frame.len());
        out.extend_from_slice(&self.head);
        push_u64(out, conn.as_u64());
        out.extend_from_slice(b"}\n");
        out.extend_from_slice(frame);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_is_read_at_its_size_and_at_the_size_earlier_versions_wrote() {
        let rec = Record {
            node: "a".into(),
            at: Time::from_unix_millis(5),
            entropy: Some([7; secret::TOKEN_ENTROPY]),
            entry: Entry::Beat,
        };
        assert_eq!(Record::decode(Bytes::from(rec.encode())).unwrap(), rec);
        let old = format!(r#"{{"t":"beat","n":"a","at":5,"e":"{}"}}"#, "07".repeat(16));
        let read = Record::decode(Bytes::from(format!("{old}\n"))).unwrap();
        let mut want = [0; secret::TOKEN_ENTROPY];
        want[..16].fill(7);
        assert_eq!(read.entropy, Some(want));
        let bad = format!(r#"{{"t":"beat","n":"a","at":5,"e":"{}"}}"#, "07".repeat(20));
        assert!(Record::decode(Bytes::from(format!("{bad}\n"))).is_err());
    }

    #[test]
    fn the_caching_encoder_writes_what_a_record_writes() {
        let node: std::sync::Arc<str> = "local".into();
        let other: std::sync::Arc<str> = "n\"2".into();
        let frame = |c: u64, body: &'static [u8]| Entry::Frame {
            conn: ConnId::from_u64(c),
            frame: Bytes::from_static(body),
        };
        let mut enc = Encoder::new();
        let mut seen = Vec::new();
        for (node, at, entropy, entry) in [
            (&node, 5, None, frame(1, b"{}")),
            (&node, 5, None, frame(2, b"{\"a\":1}")),
            (&node, 6, None, frame(u64::MAX, b"")),
            (&other, 6, None, frame(3, b"x")),
            (&other, 6, Some([9; 24]), frame(3, b"y")),
            (&other, 6, None, Entry::Beat),
            (&node, 6, None, frame(4, b"z")),
        ] {
            let rec = Record {
                node: node.clone(),
                at: Time::from_unix_millis(at),
                entropy,
                entry,
            };
            let mut out = b"prefix".to_vec();
            enc.encode_into(&rec, &mut out);
            assert_eq!(&out[6..], &rec.encode()[..], "{rec:?}");
            assert_eq!(Record::decode(Bytes::from(out[6..].to_vec())).unwrap(), rec);
            seen.push(out);
        }
        assert_eq!(seen.len(), 7);
    }

    #[test]
    fn records_round_trip_with_bodies_untouched() {
        let body = Bytes::from_static(b"{\"kind\":\"chat\",\n\"payload\":{\"text\":\"a\\nb\"}}");
        let recs = [
            Entry::NodeUp {
                timeout: Duration::from_secs(5),
            },
            Entry::Beat,
            Entry::Connect {
                local: 7,
                token: Some(TokenHash::of("t")),
            },
            Entry::Frame {
                conn: ConnId::from_u64(1 << 32 | 3),
                frame: body.clone(),
            },
            Entry::Post {
                local: 2,
                participant: "p\n".into(),
                token: None,
                body: body.clone(),
            },
            Entry::Post {
                local: u64::MAX,
                participant: "é \"q\" \\".into(),
                token: Some(TokenHash::of("t")),
                body: Bytes::new(),
            },
            Entry::Tick,
            Entry::ConnectJudged {
                local: 3,
                judged: Ok(Identity {
                    subject: "robot \"1\"".into(),
                    expires_at: Some(Time::from_unix_millis(1_800_000_000_000)),
                    not_before: Some(Time::from_unix_millis(1_700_000_000_000)),
                }),
            },
            Entry::ConnectJudged {
                local: 4,
                judged: Ok(Identity {
                    subject: "r".into(),
                    expires_at: None,
                    not_before: None,
                }),
            },
            Entry::JudgedJoin {
                conn: ConnId::from_u64(8),
                frame: body.clone(),
                judged: Err("the token's signature does not verify\n".into()),
            },
            Entry::SealedJoin {
                conn: ConnId::from_u64(9),
                frame: body.clone(),
                token: TokenHash::of("u"),
            },
            Entry::Oversize {
                conn: ConnId::from_u64(0),
                size: 1 << 40,
            },
            Entry::Pong {
                conn: ConnId::from_u64(3),
            },
            Entry::Closed {
                conn: ConnId::from_u64(4),
            },
            Entry::Slow {
                conn: ConnId::from_u64(5),
            },
        ];
        for (i, entry) in recs.into_iter().enumerate() {
            let r = Record {
                node: if i % 2 == 0 {
                    "a".into()
                } else {
                    "n\"1\u{1}".into()
                },
                at: Time::from_unix_millis(5 + i as u64 * 1_000_003),
                entropy: (i % 3 != 0).then_some([7; 24]),
                entry,
            };
            let bytes = r.encode();
            assert_eq!(
                bytes
                    .iter()
                    .position(|&b| b == b'\n')
                    .map(|p| bytes[..p].contains(&b'\n')),
                Some(false)
            );
            // The head is exactly what serde_json writes for it (the format of the logs
            // written before the head was written by hand).
            let nl = bytes.iter().position(|&b| b == b'\n').unwrap();
            let head: Head = serde_json::from_slice(&bytes[..nl]).unwrap();
            assert_eq!(serde_json::to_vec(&head).unwrap(), &bytes[..nl]);
            assert_eq!(Record::decode(Bytes::from(bytes)).unwrap(), r);
        }
        assert!(Record::decode(Bytes::from_static(b"{\"n\":\"a\",\"at\":1}\n")).is_err());
        assert!(Record::decode(Bytes::from_static(b"garbage")).is_err());
    }
}
