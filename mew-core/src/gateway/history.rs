//! The bounded recent history behind `GET /participants/{id}/messages?since=`.

use super::deliver::Seen;
use crate::Time;
use crate::envelope::{Limits, RoutingView};
use bytes::Bytes;
use std::collections::VecDeque;

pub(super) struct Entry {
    pub(super) at: Time,
    pub(super) frame: Bytes,
    pub(super) seen: Seen,
}

/// A ring of the last envelopes delivered in the space: at most `cap` of them and
/// `max_bytes` of their frames (a space of large envelopes keeps fewer).
pub(super) struct History {
    cap: usize,
    max_bytes: usize,
    bytes: usize,
    pub(super) entries: VecDeque<Entry>,
}

impl History {
    pub(super) fn new(cap: usize, max_bytes: usize) -> History {
        History {
            cap,
            max_bytes,
            bytes: 0,
            entries: VecDeque::with_capacity(cap.min(4096)),
        }
    }

    pub(super) fn push(&mut self, at: Time, frame: Bytes, seen: Seen) {
        if self.cap == 0 || frame.len() > self.max_bytes {
            return;
        }
        while self.entries.len() >= self.cap || self.bytes + frame.len() > self.max_bytes {
            match self.entries.pop_front() {
                Some(e) => self.bytes -= e.frame.len(),
                None => break,
            }
        }
        self.bytes += frame.len();
        self.entries.push_back(Entry { at, frame, seen });
    }

    /// Bytes of the frames held.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Envelopes `participant` could see, after `since`.
    pub(super) fn visible_since(&self, participant: &str, since: Since<'_>) -> Vec<Bytes> {
        let start = match since {
            Since::Start => 0,
            // Ids are read from the kept frames on demand, so recording costs no allocation.
            Since::Id(id) => match self.entries.iter().rposition(|e| {
                RoutingView::parse(&e.frame, &Limits::default())
                    .is_ok_and(|v| v.id.as_deref() == Some(id))
            }) {
                Some(p) => p + 1,
                // Unknown id (aged out or never seen): everything still held.
                None => 0,
            },
            Since::Time(t) => self.entries.partition_point(|e| e.at <= t),
        };
        self.entries
            .iter()
            .skip(start)
            .filter(|e| match &e.seen {
                Seen::All => true,
                Seen::Only(who) => who.iter().any(|w| &**w == participant),
            })
            .map(|e| e.frame.clone())
            .collect()
    }
}

/// Where a poll starts.
#[derive(Debug, Clone, Copy)]
pub(super) enum Since<'a> {
    Start,
    Id(&'a str),
    Time(Time),
}

/// Parses RFC 3339 UTC text (`2025-01-09T10:00:00Z`, optional fraction, `Z` or `+00:00`).
pub(super) fn parse_rfc3339(s: &str) -> Option<Time> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        if !t.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        t.parse().ok()
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut ms = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let f = &frac[..digits];
        let padded: String = f.chars().chain("000".chars()).take(3).collect();
        ms = padded.parse().ok()?;
        rest = &frac[digits..];
    }
    if !matches!(rest, "Z" | "z" | "+00:00") {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let total = ((days * 86_400 + h * 3600 + mi * 60 + se) * 1000).checked_add(ms)?;
    u64::try_from(total).ok().map(Time::from_unix_millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn rfc3339_round_trips() {
        for ms in [0u64, 1_736_416_800_123, 951_782_400_000, 4_102_444_799_999] {
            let t = Time::from_unix_millis(ms);
            assert_eq!(parse_rfc3339(&t.rfc3339()), Some(t));
        }
        assert_eq!(
            parse_rfc3339("2025-01-09T10:00:00Z"),
            Some(Time::from_unix_millis(1_736_416_800_000))
        );
        assert_eq!(parse_rfc3339("2025-01-09 10:00:00"), None);
        assert_eq!(parse_rfc3339("garbage"), None);
    }

    #[test]
    fn ring_is_bounded_and_filters() {
        let mut h = History::new(3, 1 << 20);
        for i in 0..5u64 {
            let seen = if i % 2 == 0 {
                Seen::All
            } else {
                Seen::Only(smallvec::smallvec![Arc::from("a")])
            };
            h.push(
                Time::from_unix_millis(i),
                Bytes::from(format!(r#"{{"id":"e{i}","kind":"k","n":{i}}}"#)),
                seen,
            );
        }
        assert_eq!(h.len(), 3);
        let n = |v: Vec<Bytes>| -> Vec<u64> {
            v.iter()
                .map(|b| {
                    serde_json::from_slice::<serde_json::Value>(b).unwrap()["n"]
                        .as_u64()
                        .unwrap()
                })
                .collect()
        };
        assert_eq!(n(h.visible_since("b", Since::Start)), vec![2, 4]);
        assert_eq!(n(h.visible_since("a", Since::Id("e2"))), vec![3, 4]);
        assert_eq!(
            n(h.visible_since("a", Since::Time(Time::from_unix_millis(3)))),
            vec![4]
        );
    }

    #[test]
    fn bytes_bound_the_history_too() {
        let mut h = History::new(100, 100);
        for i in 0..10u8 {
            h.push(Time::ZERO, Bytes::from(vec![b'a' + i; 30]), Seen::All);
        }
        assert_eq!(h.len(), 3, "three 30-byte frames fit in 100 bytes");
        assert_eq!(h.bytes(), 90);
        let kept = h.visible_since("x", Since::Start);
        assert_eq!(kept[0][0], b'h', "the oldest went first");
        // A frame larger than the whole bound is not kept (nor does it empty the ring).
        h.push(Time::ZERO, Bytes::from(vec![b'z'; 101]), Seen::All);
        assert_eq!((h.len(), h.bytes()), (3, 90));
    }
}
