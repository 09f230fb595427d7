//! The gateway's queue of outputs. A fan-out (one frame to many connections) is one entry,
//! its frame and its recipients, rather than a [`Output::Transmit`] per recipient: a driver
//! that takes it whole ([`Gateway::poll_fanout`]) frames it once and never clones the
//! frame per recipient, and [`Gateway::poll_output`] still hands it out one `Transmit` per
//! recipient, in order, to everyone else.

use super::{ConnId, Gateway, Output};
use bytes::Bytes;
use std::collections::VecDeque;

/// What [`Gateway::poll_fanout`] takes off the queue.
#[derive(Debug)]
pub enum Polled {
    /// An output, as [`Gateway::poll_output`] gives it.
    Output(Output),
    /// This frame, to each connection now in the buffer passed in (in order): what
    /// [`Gateway::poll_output`] would give as one `Transmit` per connection.
    Fanout(Bytes),
}

/// Recipient buffers kept for the next fan-outs: as many as a pass of the host's fans out
/// (one each; a host takes them back as it frames them), as long as their room together
/// stays under [`SPARE_ROOM`].
const SPARE_LISTS: usize = 128;
/// The connection ids the kept recipient buffers may hold together: 512 KiB. A small
/// space keeps a buffer for every fan-out of a pass, so fanning out allocates nothing;
/// a crowd of 50,000 keeps a few.
const SPARE_ROOM: usize = 1 << 16;

#[derive(Debug, Default)]
pub(super) struct OutQueue {
    q: VecDeque<Queued>,
    spare: Vec<Vec<ConnId>>,
    /// The room of the buffers in `spare`, in connection ids.
    spare_room: usize,
}

#[derive(Debug)]
enum Queued {
    One(Output),
    /// `frame` to `conns[next..]`.
    Fan {
        frame: Bytes,
        conns: Vec<ConnId>,
        next: usize,
    },
}

impl OutQueue {
    pub(super) fn push_back(&mut self, out: Output) {
        self.q.push_back(Queued::One(out));
    }

    pub(super) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// An empty list for a fan-out's recipients ([`OutQueue::push_fan`]).
    pub(super) fn recipients(&mut self) -> Vec<ConnId> {
        let list = self.spare.pop().unwrap_or_default();
        self.spare_room -= list.capacity();
        list
    }

    /// `frame` to each of `conns`, in order.
    pub(super) fn push_fan(&mut self, frame: &Bytes, conns: Vec<ConnId>) {
        match conns[..] {
            [] => self.recycle(conns),
            [conn] => {
                self.push_back(Output::Transmit {
                    conn,
                    frame: frame.clone(),
                });
                self.recycle(conns);
            }
            _ => self.q.push_back(Queued::Fan {
                frame: frame.clone(),
                conns,
                next: 0,
            }),
        }
    }

    fn recycle(&mut self, mut conns: Vec<ConnId>) {
        let room = conns.capacity();
        if self.spare.len() < SPARE_LISTS && room > 0 && self.spare_room + room <= SPARE_ROOM {
            conns.clear();
            self.spare_room += room;
            self.spare.push(conns);
        }
    }

    /// The next output, a fan-out one recipient at a time.
    pub(super) fn pop(&mut self) -> Option<Output> {
        let (conn, frame) = match self.q.front_mut()? {
            Queued::One(_) => match self.q.pop_front() {
                Some(Queued::One(out)) => return Some(out),
                _ => unreachable!("the front was one output"),
            },
            Queued::Fan { frame, conns, next } => {
                let conn = conns[*next];
                *next += 1;
                if *next < conns.len() {
                    return Some(Output::Transmit {
                        conn,
                        frame: frame.clone(),
                    });
                }
                (conn, frame.clone())
            }
        };
        if let Some(Queued::Fan { conns, .. }) = self.q.pop_front() {
            self.recycle(conns);
        }
        Some(Output::Transmit { conn, frame })
    }

    /// The next output, a fan-out whole: its recipients in `conns` (replacing what it held).
    pub(super) fn pop_fanned(&mut self, conns: &mut Vec<ConnId>) -> Option<Polled> {
        match self.q.pop_front()? {
            Queued::One(out) => Some(Polled::Output(out)),
            Queued::Fan {
                frame,
                conns: mut list,
                next,
            } => {
                if next > 0 {
                    // Partly taken one by one: the rest.
                    list.drain(..next);
                }
                std::mem::swap(conns, &mut list);
                self.recycle(list);
                Some(Polled::Fanout(frame))
            }
        }
    }
}

impl Gateway {
    /// [`Gateway::poll_output`], with a fan-out taken whole: one frame for many
    /// connections, which are put in `conns` (its previous contents are dropped). A driver
    /// that frames a message once for all its recipients saves a `Transmit`, and a clone of
    /// the frame, per recipient. Either way of polling may follow the other.
    pub fn poll_fanout(&mut self, conns: &mut Vec<ConnId>) -> Option<Polled> {
        self.out.pop_fanned(conns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transmit(out: Output) -> (ConnId, Bytes) {
        match out {
            Output::Transmit { conn, frame } => (conn, frame),
            other => panic!("not a transmit: {other:?}"),
        }
    }

    #[test]
    fn a_fanout_is_one_entry_taken_whole_or_one_transmit_at_a_time_in_order() {
        let c = |n| ConnId::new(n, 1);
        let (a, b) = (Bytes::from_static(b"a"), Bytes::from_static(b"b"));
        let mut q = OutQueue::default();
        q.push_back(Output::Ping { conn: c(9) });
        let mut list = q.recipients();
        list.extend([c(1), c(2), c(3)]);
        q.push_fan(&a, list);
        let mut list = q.recipients();
        list.push(c(4));
        q.push_fan(&b, list);
        q.push_fan(&a, Vec::new());
        let mut list = q.recipients();
        list.extend([c(5), c(6), c(7)]);
        q.push_fan(&b, list);

        let mut conns = vec![c(99)];
        assert!(matches!(
            q.pop_fanned(&mut conns),
            Some(Polled::Output(Output::Ping { .. }))
        ));
        match q.pop_fanned(&mut conns) {
            Some(Polled::Fanout(f)) => assert_eq!(f, a),
            other => panic!("{other:?}"),
        }
        assert_eq!(conns, [c(1), c(2), c(3)]);
        // A single recipient is a plain transmit; an empty fan-out is nothing.
        assert_eq!(transmit(q.pop().unwrap()), (c(4), b.clone()));
        // One at a time, then the rest whole.
        assert_eq!(transmit(q.pop().unwrap()), (c(5), b.clone()));
        match q.pop_fanned(&mut conns) {
            Some(Polled::Fanout(f)) => assert_eq!(f, b),
            other => panic!("{other:?}"),
        }
        assert_eq!(conns, [c(6), c(7)]);
        assert!(q.is_empty());
        assert!(q.pop().is_none());
        assert!(q.spare.len() <= SPARE_LISTS);
        assert!(!q.spare.is_empty(), "recipient lists are used again");
    }

    #[test]
    fn a_pass_of_fanouts_takes_its_recipient_lists_from_the_spares() {
        let c = |n| ConnId::new(n, 1);
        let f = Bytes::from_static(b"f");
        let mut q = OutQueue::default();
        let fill = |q: &mut OutQueue| {
            for _ in 0..64 {
                let mut list = q.recipients();
                list.extend((0..9).map(c));
                q.push_fan(&f, list);
            }
        };
        let mut conns = Vec::new();
        let mut drain = |q: &mut OutQueue| while q.pop_fanned(&mut conns).is_some() {};
        fill(&mut q);
        drain(&mut q);
        let kept: Vec<*const ConnId> = q.spare.iter().map(|l| l.as_ptr()).collect();
        // The host's own buffer went into the queue once; the 63 others came back.
        assert_eq!(kept.len(), 63);
        fill(&mut q);
        drain(&mut q);
        let mut again: Vec<*const ConnId> = q.spare.iter().map(|l| l.as_ptr()).collect();
        let before = kept.len();
        again.retain(|p| kept.contains(p));
        assert_eq!(
            again.len(),
            before,
            "the second pass reused the first's lists"
        );
        assert_eq!(
            q.spare_room,
            q.spare.iter().map(Vec::capacity).sum::<usize>()
        );
    }

    #[test]
    fn the_spare_lists_of_a_crowd_stay_within_their_room() {
        let mut q = OutQueue::default();
        let f = Bytes::from_static(b"f");
        for _ in 0..8 {
            let mut list = q.recipients();
            list.extend((0..50_000).map(|n| ConnId::new(n, 0)));
            q.push_fan(&f, list);
        }
        while q.pop().is_some() {}
        assert!(q.spare_room <= SPARE_ROOM);
        assert!(q.spare.len() <= 1);
    }

    #[test]
    fn one_at_a_time_a_fanout_is_a_transmit_per_recipient() {
        let c = |n| ConnId::new(n, 0);
        let f = Bytes::from_static(b"f");
        let mut q = OutQueue::default();
        let mut list = q.recipients();
        list.extend([c(1), c(2)]);
        q.push_fan(&f, list);
        q.push_back(Output::Ping { conn: c(1) });
        assert_eq!(transmit(q.pop().unwrap()), (c(1), f.clone()));
        assert_eq!(transmit(q.pop().unwrap()), (c(2), f.clone()));
        assert!(matches!(q.pop(), Some(Output::Ping { .. })));
        assert!(q.pop().is_none());
    }
}
