//! The inputs of a machine that speaks to a gateway over one connection, and the one
//! forwarding of them for the machines built around a participant.
//!
//! A [`Participant`] takes what its connection does (opened, a frame, a pong, closed,
//! refused for good). An [`Agent`](crate::agent::Agent), a
//! [`ToolsAgent`](crate::tools::ToolsAgent) and a [`Bridge`](crate::bridge::Bridge) each
//! hold a participant (or a machine holding one) and take the same inputs: they implement
//! [`AroundParticipant`] (where their inner machine is, what they do once it took an input)
//! and get [`GatewayInputs`] from it, so the forwarding is written here once and a driver's
//! connection loop takes any of them.

use super::Participant;
use crate::Time;

/// What a machine's gateway connection tells it.
pub trait GatewayInputs {
    /// The socket is open (the machine sends its join and waits for the welcome).
    fn handle_connected(&mut self, now: Time);
    /// A text frame arrived.
    fn handle_frame(&mut self, now: Time, frame: &str);
    /// A pong answered a ping.
    fn handle_pong(&mut self, now: Time);
    /// The connection failed or ended, and why (the machine reconnects per its policy).
    fn handle_disconnected(&mut self, now: Time, reason: &str);
    /// The connection cannot succeed by trying again (the gateway's certificate does not
    /// verify): given up at once.
    fn handle_refused(&mut self, now: Time, reason: &str);
}

impl GatewayInputs for Participant {
    fn handle_connected(&mut self, now: Time) {
        Participant::handle_connected(self, now);
    }
    fn handle_frame(&mut self, now: Time, frame: &str) {
        Participant::handle_frame(self, now, frame);
    }
    fn handle_pong(&mut self, now: Time) {
        Participant::handle_pong(self, now);
    }
    fn handle_disconnected(&mut self, now: Time, reason: &str) {
        Participant::handle_disconnected(self, now, reason);
    }
    fn handle_refused(&mut self, now: Time, reason: &str) {
        Participant::handle_refused(self, now, reason);
    }
}

/// A machine built around an inner machine that speaks to the gateway: each of
/// [`GatewayInputs`] goes to the inner machine, then [`AroundParticipant::after_input`] lets
/// the outer one act on what changed.
pub trait AroundParticipant {
    /// The machine inside (a participant, or a machine around one).
    type Inner: GatewayInputs;
    /// It.
    fn inner(&mut self) -> &mut Self::Inner;
    /// After the inner machine took an input: the outer one takes its events and queues
    /// what follows.
    fn after_input(&mut self, now: Time);
    /// Before a refusal reaches the inner machine (a bridge keeps the reason for its exit).
    fn before_refused(&mut self, _reason: &str) {}
}

impl<T: AroundParticipant> GatewayInputs for T {
    fn handle_connected(&mut self, now: Time) {
        self.inner().handle_connected(now);
        self.after_input(now);
    }
    fn handle_frame(&mut self, now: Time, frame: &str) {
        self.inner().handle_frame(now, frame);
        self.after_input(now);
    }
    fn handle_pong(&mut self, now: Time) {
        self.inner().handle_pong(now);
        self.after_input(now);
    }
    fn handle_disconnected(&mut self, now: Time, reason: &str) {
        self.inner().handle_disconnected(now, reason);
        self.after_input(now);
    }
    fn handle_refused(&mut self, now: Time, reason: &str) {
        self.before_refused(reason);
        self.inner().handle_refused(now, reason);
        self.after_input(now);
    }
}
