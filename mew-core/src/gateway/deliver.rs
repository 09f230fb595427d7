//! Fan-out. The broadcast list is precomputed on membership changes, so delivering to N
//! recipients costs N slab lookups, N `Bytes` clones and N output pushes: no allocation,
//! no formatting and no map lookup per recipient unless audit records are enabled.

use super::audit::Transport;
use super::config::DeliveryMode;
use super::conn::Phase;
use super::{ConnId, Gateway, GatewayEvent, Output};
use crate::Time;
use crate::envelope::Text;
use bytes::Bytes;
use smallvec::SmallVec;
use std::sync::Arc;

/// One online member and how to reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recipient {
    /// On a transport connection.
    Conn { conn: ConnId, member: usize },
    /// On several connections at once (a person at several screens): each gets the frame.
    Many { member: usize },
    /// Held by the gateway; deliveries become log lines.
    Virtual { member: usize },
}

impl Recipient {
    fn member(&self) -> usize {
        match *self {
            Recipient::Conn { member, .. }
            | Recipient::Many { member }
            | Recipient::Virtual { member } => member,
        }
    }

    /// How `member` is reached, if it is online.
    pub(super) fn of(member: usize, m: &super::member::Member) -> Option<Recipient> {
        if m.removed {
            return None;
        }
        match (m.conns.as_slice(), &m.virtual_log) {
            ([conn], _) => Some(Recipient::Conn {
                conn: *conn,
                member,
            }),
            ([], Some(_)) => Some(Recipient::Virtual { member }),
            ([], None) => None,
            _ => Some(Recipient::Many { member }),
        }
    }
}

/// Who may see an envelope kept for polling.
#[derive(Debug, Clone)]
pub(super) enum Seen {
    All,
    Only(SmallVec<[Arc<str>; 2]>),
}

impl Gateway {
    /// Recomputes the broadcast list after a membership change.
    pub(super) fn rebuild_audience(&mut self) {
        self.audience = self.full_audience();
    }

    /// Everyone online, in member order.
    fn full_audience(&self) -> Vec<Recipient> {
        let mut audience = Vec::with_capacity(self.audience.len() + 1);
        for (i, m) in self.members.iter() {
            if let Some(r) = Recipient::of(i, m) {
                audience.push(r);
            }
        }
        audience
    }

    /// Brings one member's place in the broadcast list up to date (kept in member order, as
    /// [`rebuild_audience`](Self::rebuild_audience) makes it): a join or a leave in a
    /// space of thousands moves part of the list instead of walking every member.
    pub(super) fn update_audience(&mut self, member: usize) {
        let want = self
            .members
            .try_get(member)
            .and_then(|m| Recipient::of(member, m));
        match (
            self.audience
                .binary_search_by_key(&member, Recipient::member),
            want,
        ) {
            (Ok(i), Some(r)) => self.audience[i] = r,
            (Ok(i), None) => {
                self.audience.remove(i);
            }
            (Err(i), Some(r)) => self.audience.insert(i, r),
            (Err(_), None) => {}
        }
        debug_assert_eq!(self.audience, self.full_audience(), "member {member}");
    }

    /// Hands a frame to a connection, closing it as a slow consumer when its unwritten
    /// backlog passes the limit. Returns whether the frame was handed out.
    #[inline]
    pub(super) fn transmit(&mut self, now: Time, conn: ConnId, frame: Bytes) -> bool {
        let (max_frames, max_bytes) = self.queue_limits();
        let Some(c) = self.conns.get_mut(conn) else {
            return false;
        };
        if c.phase == Phase::Closed {
            return false;
        }
        c.queued_frames += 1;
        c.queued_bytes += frame.len();
        // One frame alone is never a backlog, however large (frames are bounded separately).
        if c.queued_frames > max_frames || (c.queued_bytes > max_bytes && c.queued_frames > 1) {
            self.close_slow(now, conn);
            return false;
        }
        self.out.push_back(Output::Transmit { conn, frame });
        self.stats.frames_out += 1;
        true
    }

    #[inline]
    fn deliver_one(&mut self, now: Time, r: Recipient, frame: &Bytes, id: Option<&str>) {
        match r {
            Recipient::Conn { conn, member } => {
                if self.transmit(now, conn, frame.clone()) && self.audit_envelopes {
                    self.audit_delivered(now, id, member, Transport::WebSocket);
                }
            }
            Recipient::Many { member } => {
                // Indexed: closing a slow connection leaves the list as it is until the
                // leaves are finished after the delivery.
                let mut sent = false;
                let mut k = 0;
                while let Some(&conn) = self.members.get(member).conns.as_slice().get(k) {
                    k += 1;
                    sent |= self.transmit(now, conn, frame.clone());
                }
                if sent && self.audit_envelopes {
                    self.audit_delivered(now, id, member, Transport::WebSocket);
                }
            }
            Recipient::Virtual { member } => {
                let m = self.members.get(member);
                let Some(path) = m.virtual_log.clone() else {
                    return;
                };
                self.append_log(path, frame);
                if self.audit_envelopes {
                    self.audit_delivered(now, id, member, Transport::Virtual);
                }
            }
        }
    }

    /// What a member sent, to its connections but the one it came on (under `addressed`
    /// delivery, which does not echo a sender: its other screens must still see it).
    #[cold]
    fn echo_to_other_screens(&mut self, now: Time, member: usize, frame: &Bytes, id: Option<&str>) {
        // Only a connection's envelope: a `POST` is not echoed, as before.
        let Some(from) = self.from_conn else {
            return;
        };
        let mut sent = false;
        let mut k = 0;
        while let Some(&conn) = self.members.get(member).conns.as_slice().get(k) {
            k += 1;
            if conn != from {
                sent |= self.transmit(now, conn, frame.clone());
            }
        }
        if sent && self.audit_envelopes {
            self.audit_delivered(now, id, member, Transport::WebSocket);
        }
    }

    /// Appends `frame` and a newline to a virtual participant's `output_log`.
    pub(super) fn append_log(&mut self, path: String, frame: &[u8]) {
        let mut line = Vec::with_capacity(frame.len() + 1);
        line.extend_from_slice(frame);
        line.push(b'\n');
        self.out.push_back(Output::AppendLog {
            path,
            line: Bytes::from(line),
        });
    }

    /// Hands `frame` to everyone online but `except`.
    ///
    /// The common case (a connection) is handled inline: one slab lookup, the backlog
    /// accounting, its place in the fan-out's one output, and its audit line.
    fn fan_out(&mut self, now: Time, frame: &Bytes, id: Option<&str>, except: Option<usize>) {
        let (max_frames, max_bytes) = self.queue_limits();
        let len = frame.len();
        let audit = self.audit_envelopes;
        if audit {
            // Nothing in the loop formats another envelope's lines (closes of slow
            // consumers leave after it), so every recipient's line takes this head.
            self.audit_delivered_begin(now, id);
        }
        // One output for every connection the frame goes to (see `outq`): other outputs
        // the loop queues (closes of slow consumers, other kinds of recipients) are for
        // other connections, so the order each connection sees is kept.
        let mut conns = self.out.recipients();
        let mut i = 0;
        while let Some(&r) = self.audience.get(i) {
            i += 1;
            match r {
                Recipient::Conn { member, .. } if Some(member) == except => {}
                Recipient::Conn { conn, member } => {
                    let Some(c) = self.conns.get_mut(conn) else {
                        continue;
                    };
                    if c.phase == Phase::Closed {
                        continue;
                    }
                    c.queued_frames += 1;
                    c.queued_bytes += len;
                    if c.queued_frames > max_frames
                        || (c.queued_bytes > max_bytes && c.queued_frames > 1)
                    {
                        // Closing rebuilds nothing yet (leaves are finished after the
                        // fan-out), so the audience stays valid for the rest of the loop.
                        self.close_slow(now, conn);
                        continue;
                    }
                    conns.push(conn);
                    self.stats.frames_out += 1;
                    if audit {
                        self.audit_delivered_next(now, id, member);
                    }
                }
                Recipient::Many { member } if Some(member) == except => {
                    self.echo_to_other_screens(now, member, frame, id);
                }
                Recipient::Virtual { member } if Some(member) == except => {}
                _ => self.deliver_one(now, r, frame, id),
            }
        }
        self.out.push_fan(frame, conns);
    }

    /// A gateway message for everyone online (but `except`).
    pub(super) fn gateway_broadcast(
        &mut self,
        now: Time,
        frame: Bytes,
        id: &str,
        except: Option<usize>,
    ) {
        // The id is shared by the recipients' audit records; not built when audit is off.
        let id = self.audit_envelopes.then_some(id);
        self.history.push(now, frame.clone(), Seen::All);
        // A gateway envelope has no `received` record: its first `delivered` record carries
        // the envelope, as the `received` record does for a participant's.
        if self.audit_envelopes {
            self.audit_body = Some(frame.clone());
        }
        self.fan_out(now, &frame, id, except);
        self.audit_body = None;
    }

    /// Delivers an accepted envelope per the space's delivery mode.
    pub(super) fn deliver_envelope(
        &mut self,
        now: Time,
        frame: &Bytes,
        id: Option<&str>,
        sender: usize,
        to: Option<&[Text<'_>]>,
    ) {
        self.deliver_with(now, frame, id, sender, to, None);
    }

    /// [`deliver_envelope`](Self::deliver_envelope), with one more addressee under
    /// `addressed` delivery (the proposer following its proposal, see `workflow`).
    pub(super) fn deliver_with(
        &mut self,
        now: Time,
        frame: &Bytes,
        id: Option<&str>,
        sender: usize,
        to: Option<&[Text<'_>]>,
        also: Option<&str>,
    ) {
        let to = to.filter(|t| !t.is_empty());
        match (self.config.gateway.delivery, to) {
            (DeliveryMode::All, _) => {
                self.history.push(now, frame.clone(), Seen::All);
                self.fan_out(now, frame, id, None);
            }
            (DeliveryMode::Addressed, None) => {
                self.history.push(now, frame.clone(), Seen::All);
                self.fan_out(now, frame, id, Some(sender));
            }
            (DeliveryMode::Addressed, Some(names)) => {
                let mut targets: SmallVec<[usize; 4]> = SmallVec::new();
                for n in names.iter().map(|n| &**n).chain(also) {
                    if let Some(i) = self.members.find(n)
                        && !targets.contains(&i)
                    {
                        targets.push(i);
                    }
                }
                let mut seen: SmallVec<[Arc<str>; 2]> = SmallVec::new();
                seen.push(self.members.get(sender).id.clone());
                for &t in &targets {
                    seen.push(self.members.get(t).id.clone());
                }
                self.history.push(now, frame.clone(), Seen::Only(seen));
                if self.members.get(sender).conns.as_slice().len() > 1 && !targets.contains(&sender)
                {
                    self.echo_to_other_screens(now, sender, frame, id);
                }
                for t in targets {
                    if let Some(r) = Recipient::of(t, self.members.get(t)) {
                        self.deliver_one(now, r, frame, id);
                    }
                }
            }
        }
        self.finish_closes(now);
    }

    /// The backlog limits this gateway enforces itself: none in a replicated space, whose
    /// nodes watch the backlogs of their own sockets (see [`Gateway::backlog_exceeded`]).
    #[inline]
    fn queue_limits(&self) -> (usize, usize) {
        if self.replicated {
            (usize::MAX, usize::MAX)
        } else {
            (
                self.config.gateway.max_queue_frames,
                self.config.gateway.max_queue_bytes,
            )
        }
    }

    /// [`Input::Slow`](super::Input::Slow)'s work.
    pub(super) fn on_slow(&mut self, now: Time, conn: ConnId) {
        if self
            .conns
            .get_mut(conn)
            .is_some_and(|c| c.phase != Phase::Closed)
        {
            self.close_slow(now, conn);
            self.finish_closes(now);
        }
    }

    #[cold]
    fn close_slow(&mut self, now: Time, conn: ConnId) {
        self.stats.slow_consumer_closes += 1;
        self.close_conn(
            now,
            conn,
            1013,
            "slow consumer: outbound queue limit exceeded",
            "slow consumer",
        );
    }

    /// Tells the driver to close a connection and lets its member leave the space.
    pub(super) fn close_conn(
        &mut self,
        now: Time,
        conn: ConnId,
        code: u16,
        reason: &str,
        leave_reason: &str,
    ) {
        let Some(c) = self.conns.get_mut(conn) else {
            return;
        };
        let phase = std::mem::replace(&mut c.phase, Phase::Closed);
        if phase == Phase::Closed {
            return;
        }
        self.out.push_back(Output::Close {
            conn,
            code,
            reason: reason.to_owned(),
        });
        if let Phase::Joined { member } = phase {
            self.pending_leaves
                .push((conn, member, leave_reason.to_owned()));
        }
        let _ = now;
    }

    /// Completes the leaves of connections closed during a fan-out (presence, streams).
    pub(super) fn finish_closes(&mut self, now: Time) {
        while let Some((conn, member, reason)) = self.pending_leaves.pop() {
            self.member_left(now, conn, member, &reason);
        }
    }

    /// A member's connection is gone; with its last one, the member: presence leave, its
    /// streams closed.
    pub(super) fn member_left(&mut self, now: Time, conn: ConnId, member: usize, reason: &str) {
        let Some(m) = self.members.try_get_mut(member) else {
            return;
        };
        if !m.conns.remove(conn) {
            return;
        }
        if !m.conns.is_empty() {
            // Still at another screen: no presence, streams kept.
            self.update_audience(member);
            return;
        }
        let id = m.id.clone();
        let anonymous = m.origin == super::member::Origin::Anonymous;
        self.update_audience(member);
        self.push_event(GatewayEvent::Left {
            conn,
            participant: id.to_string(),
            reason: reason.to_owned(),
        });
        self.close_streams_of(now, &id);
        self.send_presence_leave(now, &id);
        if anonymous {
            self.members.remove(member);
        }
    }
}
