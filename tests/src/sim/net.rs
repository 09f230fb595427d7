//! The simulated network between clients and the gateway: per-connection FIFO links with
//! seeded latency, and per-connection records of everything the gateway sent.

use bytes::Bytes;
use mew_core::Time;
use mew_core::gateway::ConnId;
use mew_core::ids::IdGen;
use std::collections::BTreeMap;

/// What a simulated client saw on its connection.
#[derive(Debug, Default, Clone)]
pub struct Endpoint {
    /// Frames received, in order.
    pub inbox: Vec<Bytes>,
    /// Pings received.
    pub pings: usize,
    /// Close code and reason, once the gateway closed it.
    pub closed: Option<(u16, String)>,
    /// Whether the connection is over (either side closed it) and the gateway knows.
    pub ended: bool,
    /// Whether the simulated driver reports frames written as soon as they are handed out
    /// (`false` models a peer that stopped reading).
    pub drains: bool,
}

/// A frame on its way to the gateway.
#[derive(Debug, Clone)]
pub struct InFlight {
    /// When it arrives.
    pub at: Time,
    /// Tie-breaker keeping send order.
    pub seq: u64,
    /// From which connection.
    pub conn: ConnId,
    /// The frame.
    pub frame: Bytes,
}

/// Links with latency drawn from a seeded generator; each link stays FIFO.
#[derive(Debug)]
pub struct Net {
    rng: IdGen,
    /// Latency is drawn from `0..=max_latency_ms`.
    pub max_latency_ms: u64,
    seq: u64,
    last_arrival: BTreeMap<ConnId, Time>,
    in_flight: Vec<InFlight>,
    /// Every connection's endpoint.
    pub endpoints: BTreeMap<ConnId, Endpoint>,
}

impl Net {
    /// A network whose latencies are fixed by `seed`.
    pub fn new(seed: u64, max_latency_ms: u64) -> Net {
        Net {
            rng: IdGen::new(seed ^ 0x0005_EED0_F4E7),
            max_latency_ms,
            seq: 0,
            last_arrival: BTreeMap::new(),
            in_flight: Vec::new(),
            endpoints: BTreeMap::new(),
        }
    }

    /// Queues a frame from a client, to arrive after a seeded delay but never before the
    /// link's previous frame.
    pub fn send(&mut self, now: Time, conn: ConnId, frame: Bytes) {
        let delay = if self.max_latency_ms == 0 {
            0
        } else {
            self.rng.below(self.max_latency_ms + 1)
        };
        let mut at = Time::from_unix_millis(now.as_unix_millis() + delay);
        if let Some(&last) = self.last_arrival.get(&conn) {
            at = at.max(last);
        }
        self.last_arrival.insert(conn, at);
        self.seq += 1;
        self.in_flight.push(InFlight {
            at,
            seq: self.seq,
            conn,
            frame,
        });
    }

    /// When the next frame arrives.
    pub fn next_arrival(&self) -> Option<Time> {
        self.in_flight.iter().map(|f| f.at).min()
    }

    /// Takes the earliest frame due at or before `now`.
    pub fn pop_due(&mut self, now: Time) -> Option<InFlight> {
        let pos = self
            .in_flight
            .iter()
            .enumerate()
            .filter(|(_, f)| f.at <= now)
            .min_by_key(|(_, f)| (f.at, f.seq))
            .map(|(i, _)| i)?;
        Some(self.in_flight.remove(pos))
    }

    /// Whether frames are still travelling.
    pub fn busy(&self) -> bool {
        !self.in_flight.is_empty()
    }
}
