//! Counters for operators (`GET /metrics`): plain integers bumped on paths that run anyway,
//! read by the driver when it is scraped. No allocation per envelope: kinds are counted in
//! a fixed array (the spec's kinds, then one slot for every other kind), refusals by their
//! static reason code.

use crate::envelope::Kind;
use std::collections::BTreeMap;

/// Slots of the per-kind arrays: every known kind, then "other".
pub const KIND_SLOTS: usize = Kind::ALL_KNOWN.len() + 1;

/// The slot of a kind's text.
fn slot(kind: &str) -> usize {
    Kind::known(kind)
        .and_then(|k| Kind::ALL_KNOWN.iter().position(|x| *x == k))
        .unwrap_or(KIND_SLOTS - 1)
}

/// The kind shown for a slot (`other` for the last).
pub fn slot_name(i: usize) -> &'static str {
    Kind::ALL_KNOWN.get(i).map_or("other", Kind::static_str)
}

/// The gateway's counters since it started.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Envelopes accepted, by kind slot.
    pub received: [u64; KIND_SLOTS],
    /// Frames handed out for accepted envelopes (one per recipient), by kind slot.
    pub delivered: [u64; KIND_SLOTS],
    /// Frames handed to connections in all (envelopes, errors, presence, stream data).
    pub frames_out: u64,
    /// Envelopes and frames refused, by reason code.
    pub refused: BTreeMap<&'static str, u64>,
    /// Connections closed as slow consumers (1013).
    pub slow_consumer_closes: u64,
    /// Joins accepted.
    pub joins: u64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            received: [0; KIND_SLOTS],
            delivered: [0; KIND_SLOTS],
            frames_out: 0,
            refused: BTreeMap::new(),
            slow_consumer_closes: 0,
            joins: 0,
        }
    }
}

impl Stats {
    /// Counts an accepted envelope of `kind` and the frames its delivery handed out.
    pub(super) fn accepted(&mut self, kind: &str, frames: u64) {
        let i = slot(kind);
        self.received[i] += 1;
        self.delivered[i] += frames;
    }

    /// `chat` envelopes accepted so far (a durable node asks after every frame).
    pub fn chats_received(&self) -> u64 {
        static CHAT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        self.received[*CHAT.get_or_init(|| slot("chat"))]
    }

    /// Counts a refusal.
    pub(super) fn refusal(&mut self, code: &'static str) {
        *self.refused.entry(code).or_insert(0) += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_land_in_their_slots() {
        let mut s = Stats::default();
        s.accepted("chat", 3);
        s.accepted("chat", 2);
        s.accepted("x-custom/thing", 1);
        let chat = (0..KIND_SLOTS).find(|i| slot_name(*i) == "chat").unwrap();
        assert_eq!((s.received[chat], s.delivered[chat]), (2, 5));
        assert_eq!(s.received[KIND_SLOTS - 1], 1);
        assert_eq!(slot_name(KIND_SLOTS - 1), "other");
    }
}
