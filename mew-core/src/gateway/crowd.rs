//! Presence in a crowd ([`Crowd`](super::config::Crowd)): beyond `crowd.size` participants
//! online, joins and leaves are gathered for `crowd.batch` and announced together, so that
//! a storm of joins costs each participant one announcement per batch instead of one per
//! join. A batch is one `system/presence` to everyone online:
//!
//! ```json
//! {"event": "batch", "changes": [{"event": "join", "participant": {"id": "a", "capabilities": [...]}},
//!                                {"event": "leave", "participant": {"id": "b"}}],
//!  "omitted": 0, "online": 1500}
//! ```
//!
//! Each change is exactly the payload a single announcement would have carried, in the order
//! the changes happened; at most `crowd.batch_max` are listed and `omitted` counts the rest
//! (whoever needs them all asks `GET /participants`); `online` is the number of participants
//! online when the batch went out. A batch goes to everyone, so a participant may find its
//! own join in one, or a join it already knew from its welcome: changes are to be applied
//! as updates of a set (a join of someone present, a leave of someone absent, change
//! nothing). When the space is no longer a crowd, what is still gathered goes out at once,
//! before the next single announcement, so announcements never overtake each other.

use super::Gateway;
use super::system::{LeftId, PInfo, PresenceJoin, PresenceLeave, write};
use crate::Time;
use crate::capability::CapabilitySet;
use serde::Serialize;
use std::sync::Arc;

/// One join or leave waiting for its batch.
#[derive(Debug, Clone)]
pub(super) enum Change {
    Join {
        id: Arc<str>,
        caps: Arc<CapabilitySet>,
        person: bool,
    },
    Leave {
        id: Arc<str>,
    },
}

/// The joins and leaves gathered for the next batch.
#[derive(Debug, Default)]
pub(super) struct Gathered {
    /// Listed changes, at most `crowd.batch_max`.
    pub(super) changes: Vec<Change>,
    /// Changes beyond those.
    pub(super) omitted: usize,
    /// When the batch goes out (set by its first change).
    pub(super) due: Option<Time>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum ChangeOut<'a> {
    Join(PresenceJoin<'a>),
    Leave(PresenceLeave<'a>),
}

#[derive(Serialize)]
struct Batch<'a> {
    event: &'static str,
    changes: Vec<ChangeOut<'a>>,
    omitted: usize,
    online: usize,
}

impl Gateway {
    /// `system/presence` join for `member`, to every other online member (gathered for a
    /// batch in a crowd).
    pub(super) fn send_presence_join(&mut self, now: Time, member: usize) {
        let m = self.members.get(member);
        let change = Change::Join {
            id: m.id.clone(),
            caps: m.caps.clone(),
            person: m.conns.person(),
        };
        if self.gather_presence(now, change, 0) {
            return;
        }
        let id = self.envelope_id();
        let m = self.members.get(member);
        let payload = PresenceJoin {
            event: "join",
            participant: PInfo::of(m),
        };
        let frame = write(&id, now, None, "system/presence", None, payload);
        self.gateway_broadcast(now, frame, &id, Some(member));
    }

    /// `system/presence` leave for `participant`, to every online member (gathered for a
    /// batch in a crowd).
    pub(super) fn send_presence_leave(&mut self, now: Time, participant: &str) {
        let change = Change::Leave {
            id: Arc::from(participant),
        };
        if self.gather_presence(now, change, 1) {
            return;
        }
        let id = self.envelope_id();
        let payload = PresenceLeave {
            event: "leave",
            participant: LeftId { id: participant },
        };
        let frame = write(&id, now, None, "system/presence", None, payload);
        self.gateway_broadcast(now, frame, &id, None);
    }

    /// Whether the space is a crowd, with `extra` participants counted beside those online
    /// (the one leaving, who is no longer among them).
    pub(super) fn crowded(&self, extra: usize) -> bool {
        self.audience.len() + extra > self.config.gateway.crowd.size
    }

    /// Announces a join or a leave: gathered for the next batch in a crowd, else at once
    /// (after whatever was still gathered). Returns whether it was gathered; if not, the
    /// caller announces it on its own.
    pub(super) fn gather_presence(&mut self, now: Time, change: Change, extra: usize) -> bool {
        if !self.crowded(extra) {
            self.flush_presence(now);
            return false;
        }
        let crowd = self.config.gateway.crowd;
        let g = &mut self.gathered;
        if g.changes.len() < crowd.batch_max {
            g.changes.push(change);
        } else {
            g.omitted += 1;
        }
        g.due.get_or_insert(now + crowd.batch);
        true
    }

    /// When the gathered joins and leaves go out, if any are waiting.
    pub(super) fn presence_due(&self) -> Option<Time> {
        self.gathered.due
    }

    /// Sends the gathered joins and leaves as one batch to everyone online.
    pub(super) fn flush_presence(&mut self, now: Time) {
        if self.gathered.due.is_none() {
            return;
        }
        let g = std::mem::take(&mut self.gathered);
        let changes = g
            .changes
            .iter()
            .map(|c| match c {
                Change::Join { id, caps, person } => ChangeOut::Join(PresenceJoin {
                    event: "join",
                    participant: PInfo {
                        id,
                        capabilities: caps,
                        person: *person,
                    },
                }),
                Change::Leave { id } => ChangeOut::Leave(PresenceLeave {
                    event: "leave",
                    participant: LeftId { id },
                }),
            })
            .collect();
        let payload = Batch {
            event: "batch",
            changes,
            omitted: g.omitted,
            online: self.audience.len(),
        };
        let id = self.envelope_id();
        let frame = write(&id, now, None, "system/presence", None, payload);
        self.gateway_broadcast(now, frame, &id, None);
    }
}
