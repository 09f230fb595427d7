//! Timers: join deadlines, pings, idle timeouts, token expiry, pause expiry.

use super::conn::Phase;
use super::system::ErrorPayload;
use super::{Gateway, Output};
use crate::Time;

impl Gateway {
    /// [`Gateway::handle_timeout`]'s work.
    pub(super) fn on_timeout(&mut self, now: Time) {
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

    /// [`Gateway::poll_timeout`]'s work.
    pub(super) fn next_timeout(&self) -> Option<Time> {
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
