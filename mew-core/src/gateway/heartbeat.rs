//! Timers: join deadlines, pings, idle timeouts, pause expiry; and the write-progress
//! reports that bound each connection's outbound backlog.

use super::conn::Phase;
use super::system::ErrorPayload;
use super::{ConnId, Gateway, Output};
use crate::Time;

impl Gateway {
    /// A pong (or any sign of life below the message layer) from a connection.
    pub fn handle_pong(&mut self, now: Time, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.last_activity = now;
        }
    }

    /// The driver wrote `frames`/`bytes` of this connection's Transmits to the socket.
    pub fn handle_sent(&mut self, _now: Time, conn: ConnId, frames: usize, bytes: usize) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.queued_frames = c.queued_frames.saturating_sub(frames);
            c.queued_bytes = c.queued_bytes.saturating_sub(bytes);
        }
    }

    /// Runs every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        let idle = self.config.gateway.idle_timeout;
        let interval = self.config.gateway.heartbeat_interval;
        let mut expired = Vec::new();
        let mut idle_out = Vec::new();
        for (id, c) in self.conns.iter() {
            match c.phase {
                Phase::Pending { deadline } if deadline <= now => expired.push(id),
                Phase::Joined { .. } if c.last_activity + idle <= now => idle_out.push(id),
                _ => {}
            }
        }
        for id in expired {
            let (frame, _) = self.error_frame(
                now,
                None,
                None,
                ErrorPayload {
                    error: "join_timeout",
                    attempted_kind: None,
                    your_capabilities: None,
                    extra: None,
                    message: "no join received in time",
                },
            );
            self.transmit(now, id, frame);
            self.push_event(super::GatewayEvent::JoinRefused {
                conn: id,
                code: "join_timeout",
            });
            self.close_conn(now, id, 1008, "join timeout", "join timeout");
        }
        for id in idle_out {
            self.close_conn(now, id, 1001, "idle timeout", "idle timeout");
        }
        for id in self.expired_tokens(now) {
            let (frame, _) = self.error_frame(
                now,
                None,
                None,
                ErrorPayload {
                    error: "token_expired",
                    attempted_kind: None,
                    your_capabilities: None,
                    extra: None,
                    message: "the token this connection joined with has expired; reconnect with a fresh one",
                },
            );
            self.transmit(now, id, frame);
            self.close_conn(now, id, 1008, "token expired", "token expired");
        }
        for id in self.conns.ids() {
            let Some(c) = self.conns.get_mut(id) else {
                continue;
            };
            if c.phase != Phase::Closed && c.next_ping <= now {
                c.next_ping = now + interval;
                self.out.push_back(Output::Ping { conn: id });
            }
        }
        self.expire_pauses(now);
        self.flush_refusals(now);
        self.finish_closes(now);
    }

    /// When `handle_timeout` next has work, if ever.
    pub fn poll_timeout(&self) -> Option<Time> {
        let idle = self.config.gateway.idle_timeout;
        let conns = self.conns.iter().filter_map(|(_, c)| match c.phase {
            Phase::Pending { deadline } => Some(deadline.min(c.next_ping)),
            Phase::Joined { .. } => {
                let t = (c.last_activity + idle).min(c.next_ping);
                Some(c.expires.map_or(t, |e| e.min(t)))
            }
            Phase::Closed => None,
        });
        conns
            .chain(self.next_pause_expiry())
            .chain(self.next_refusal_flush())
            .min()
    }
}
