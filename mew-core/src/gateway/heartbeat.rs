//! Timers: join deadlines, pings, idle timeouts, token expiry, pause expiry, presence batches.

use super::conn::Phase;
use super::system::ErrorPayload;
use super::{Gateway, Output};
use crate::Time;

impl Gateway {
    /// Lowers the bound under every connection's timers to `at`.
    pub(super) fn arm_conn_timer(&mut self, at: Time) {
        self.conn_timer = Some(self.conn_timer.map_or(at, |t| t.min(at)));
    }

    /// The earliest timer of any connection (a walk over all of them).
    pub(super) fn earliest_conn_timer(&self) -> Option<Time> {
        let idle = self.config.gateway.idle_timeout;
        self.conns
            .iter()
            .filter_map(|(_, c)| match c.phase {
                Phase::Pending { deadline } => Some(deadline.min(c.next_ping)),
                Phase::Joined { .. } => {
                    let t = (c.last_activity + idle).min(c.next_ping);
                    Some(c.expires.map_or(t, |e| e.min(t)))
                }
                Phase::Closed => None,
            })
            .min()
    }

    /// [`Input::Timeout`](super::Input::Timeout)'s work.
    pub(super) fn on_timeout(&mut self, now: Time) {
        let idle = self.config.gateway.idle_timeout;
        let interval = self.config.gateway.heartbeat_interval;
        // Pings due soon go out with those due now: thousands of connections that joined
        // one after another then wake the gateway a few times per interval, not once each.
        // Only when one is due: a wake-up with nothing due changes nothing (replicas of a
        // space wake at different times and must stay alike).
        let ping_due = self
            .conns
            .iter()
            .any(|(_, c)| c.phase != Phase::Closed && c.next_ping <= now);
        let ping_by = if ping_due { now + interval / 8 } else { now };
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
            if c.phase != Phase::Closed && c.next_ping <= ping_by {
                c.next_ping = now + interval;
                self.out.push_back(Output::Ping { conn: id });
            }
        }
        if self.presence_due().is_some_and(|d| d <= now) {
            self.flush_presence(now);
        }
        self.expire_pauses(now);
        self.flush_refusals(now);
        self.finish_closes(now);
        self.conn_timer = self.earliest_conn_timer();
    }

    /// When `Input::Timeout` next has work, if ever.
    ///
    /// A connection's timers count from the bound `Input::Timeout` last computed (or an
    /// earlier one), so the answer may be early, never late: a wake-up with nothing due
    /// does nothing.
    pub(super) fn next_timeout(&self) -> Option<Time> {
        self.conn_timer
            .into_iter()
            .chain(self.presence_due())
            .chain(self.next_pause_expiry())
            .chain(self.next_refusal_flush())
            .min()
    }
}
