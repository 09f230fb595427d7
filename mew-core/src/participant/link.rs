//! The inputs of a machine that speaks to a gateway over one connection, and the one
//! forwarding of them for the machines built around a participant.
//!
//! A [`Participant`] takes what its connection does (opened, a frame, a pong, closed,
//! refused for good) and the passing of time, as one [`Input`] at a time. An
//! [`Agent`](crate::agent::Agent), a [`ToolsAgent`](crate::tools::ToolsAgent) and a
//! [`Bridge`](crate::bridge::Bridge) each hold a participant (or a machine holding one) and
//! take the same inputs: they implement [`AroundParticipant`] (where their inner machine is,
//! what they do once it took an input, what their own timers do) and get [`GatewayInputs`]
//! from it, so the forwarding is written here once and a driver's connection loop takes
//! any of them.

use super::Participant;
use crate::Time;

/// What happened to a machine's gateway connection, or that time passed: the inputs
/// [`GatewayInputs::handle_input`] takes (the table on [`Participant`] says what each may
/// queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input<'a> {
    /// The socket is open (the machine sends its join and waits for the welcome).
    Connected,
    /// A text frame arrived. Never panics; garbage becomes
    /// [`Event::Malformed`](super::Event::Malformed).
    Frame(&'a str),
    /// A pong answered a ping.
    Pong,
    /// The connection failed or ended, and why (the machine reconnects per its policy).
    Disconnected {
        /// Why.
        reason: &'a str,
    },
    /// The connection cannot succeed by trying again (the gateway's certificate does not
    /// verify): disconnected and given up at once, no reconnect.
    Refused {
        /// Why.
        reason: &'a str,
    },
    /// Fires every timer due at `now` (when `poll_timeout` says; early calls are
    /// harmless).
    Timeout,
}

/// A machine that speaks to a gateway over one connection: its one entry of the
/// connection's inputs and of time.
pub trait GatewayInputs {
    /// Applies one input; drain the machine's `poll_output` afterwards.
    fn handle_input(&mut self, now: Time, input: Input<'_>);
}

impl GatewayInputs for Participant {
    fn handle_input(&mut self, now: Time, input: Input<'_>) {
        Participant::handle_input(self, now, input);
    }
}

/// A machine built around an inner machine that speaks to the gateway: each input of the
/// connection goes to the inner machine, then [`AroundParticipant::after_input`] lets the
/// outer one act on what changed; [`Input::Timeout`] goes to
/// [`AroundParticipant::on_timeout`], which fires the outer machine's timers and the inner
/// one's.
pub trait AroundParticipant {
    /// The machine inside (a participant, or a machine around one).
    type Inner: GatewayInputs;
    /// It.
    fn inner(&mut self) -> &mut Self::Inner;
    /// After the inner machine took an input: the outer one takes its events and queues
    /// what follows.
    fn after_input(&mut self, now: Time);
    /// Time passed: the outer machine's timers, the inner machine's
    /// ([`Input::Timeout`] to it), and what follows.
    fn on_timeout(&mut self, now: Time);
    /// Before a refusal reaches the inner machine (a bridge keeps the reason for its exit).
    fn before_refused(&mut self, _reason: &str) {}
}

impl<T: AroundParticipant> GatewayInputs for T {
    fn handle_input(&mut self, now: Time, input: Input<'_>) {
        match input {
            Input::Timeout => return self.on_timeout(now),
            Input::Refused { reason } => self.before_refused(reason),
            _ => {}
        }
        self.inner().handle_input(now, input);
        self.after_input(now);
    }
}
