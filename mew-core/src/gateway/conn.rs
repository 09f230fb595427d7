//! Transport connections: a generation-checked slab, so lookups are O(1) and a stale
//! [`ConnId`] never reaches a newer connection in the same slot.

use super::ConnId;
use crate::Time;

/// Where a connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum Phase {
    /// Waiting for a join until the deadline.
    Pending { deadline: Time },
    /// Authenticated as this member.
    Joined { member: usize },
    /// Told to close; the driver has not reported it closed yet. Frames are ignored.
    Closed,
}

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) phase: Phase,
    pub(super) last_activity: Time,
    pub(super) next_ping: Time,
    /// Frames and bytes handed out in Transmits and not yet reported written.
    pub(super) queued_frames: usize,
    pub(super) queued_bytes: usize,
    /// When the verified token it joined with expires (see `identity.rs`).
    pub(super) expires: Option<Time>,
    /// The digest of the listed token it joined with (a reload that removes the token
    /// closes the connection).
    pub(super) joined_with: Option<crate::secret::TokenHash>,
}

#[derive(Debug, Default)]
pub(super) struct Slot {
    pub(super) generation: u32,
    pub(super) conn: Option<Conn>,
}

/// Connections by id.
#[derive(Debug, Default)]
pub(super) struct Slab {
    pub(super) slots: Vec<Slot>,
    pub(super) free: Vec<u32>,
    pub(super) live: usize,
}

impl Slab {
    pub(super) fn insert(&mut self, conn: Conn) -> ConnId {
        self.live += 1;
        if let Some(slot) = self.free.pop() {
            let s = &mut self.slots[slot as usize];
            s.generation = s.generation.wrapping_add(1);
            s.conn = Some(conn);
            return ConnId::new(slot, s.generation);
        }
        let slot = u32::try_from(self.slots.len()).expect("fewer than 2^32 connections");
        self.slots.push(Slot {
            generation: 0,
            conn: Some(conn),
        });
        ConnId::new(slot, 0)
    }

    pub(super) fn get(&self, id: ConnId) -> Option<&Conn> {
        let s = self.slots.get(id.slot())?;
        if s.generation == id.generation() {
            s.conn.as_ref()
        } else {
            None
        }
    }

    pub(super) fn get_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        let s = self.slots.get_mut(id.slot())?;
        if s.generation == id.generation() {
            s.conn.as_mut()
        } else {
            None
        }
    }

    pub(super) fn remove(&mut self, id: ConnId) -> Option<Conn> {
        let s = self.slots.get_mut(id.slot())?;
        if s.generation != id.generation() {
            return None;
        }
        let c = s.conn.take()?;
        self.live -= 1;
        self.free.push(id.slot() as u32);
        Some(c)
    }

    /// Ids of every connection not yet removed, in slot order.
    pub(super) fn ids(&self) -> Vec<ConnId> {
        self.iter().map(|(id, _)| id).collect()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (ConnId, &Conn)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            s.conn
                .as_ref()
                .map(|c| (ConnId::new(i as u32, s.generation), c))
        })
    }

    pub(super) fn len(&self) -> usize {
        self.live
    }
}
