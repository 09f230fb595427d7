//! The simulations' one door into the gateway: every input a simulated driver gives it goes
//! through [`input`], every output it takes comes from [`poll`], so a change to the
//! gateway's entry points is a change to this file only.

use bytes::Bytes;
use mew_core::Time;
use mew_core::gateway::{
    Answer, AuditBatch, Bearer, ConnId, Gateway, Input as GwInput, Output, SpaceConfig,
};

/// Something a driver tells the gateway.
#[derive(Debug, Clone)]
pub enum Input<'a> {
    /// A transport connection opened (with an Authorization bearer when given).
    Connected {
        /// The bearer token, if any.
        bearer: Option<&'a str>,
    },
    /// A text frame arrived on a connection.
    Frame {
        /// Where.
        conn: ConnId,
        /// The frame.
        frame: Bytes,
    },
    /// Frames handed out earlier were written.
    Sent {
        /// Where.
        conn: ConnId,
        /// How many frames.
        frames: usize,
        /// How many bytes.
        bytes: usize,
    },
    /// A pong arrived.
    Pong {
        /// Where.
        conn: ConnId,
    },
    /// The connection is gone.
    Disconnected {
        /// Which.
        conn: ConnId,
    },
    /// The driver saw a frame over the size limit and did not buffer it.
    Oversize {
        /// Where.
        conn: ConnId,
        /// The frame's size.
        size: usize,
    },
    /// `POST /participants/{participant}/messages`.
    Post {
        /// The participant of the path.
        participant: &'a str,
        /// The bearer token, if any.
        bearer: Option<&'a str>,
        /// The body.
        body: &'a [u8],
    },
    /// Time passed.
    Timeout,
    /// The server shuts down.
    Close,
}

/// A gateway for `config`, its ids and invitation tokens drawn from `seed`.
pub fn new(config: SpaceConfig, seed: u64) -> Gateway {
    Gateway::new(config, seed, super::seeded_tokens(seed), None)
}

/// Hands one input to the gateway; what it answers at once (the new connection's id for
/// [`Input::Connected`], the HTTP answer for [`Input::Post`]).
pub fn input(gw: &mut Gateway, now: Time, input: Input<'_>) -> Answer {
    let input = match input {
        Input::Connected { bearer } => GwInput::Connected {
            bearer: Bearer::from(bearer),
        },
        Input::Frame { conn, frame } => GwInput::Frame { conn, frame },
        Input::Sent {
            conn,
            frames,
            bytes,
        } => GwInput::Sent {
            conn,
            frames,
            bytes,
        },
        Input::Pong { conn } => GwInput::Pong { conn },
        Input::Disconnected { conn } => GwInput::Disconnected { conn },
        Input::Oversize { conn, size } => GwInput::Oversize { conn, size },
        Input::Post {
            participant,
            bearer,
            body,
        } => GwInput::Post {
            participant,
            bearer: Bearer::from(bearer),
            body,
        },
        Input::Timeout => GwInput::Timeout,
        Input::Close => GwInput::Close,
    };
    gw.handle_input(now, input)
}

/// The gateway's next output.
pub fn poll(gw: &mut Gateway) -> Option<Output> {
    gw.poll_output()
}

/// When the gateway next wants [`Input::Timeout`].
pub fn poll_timeout(gw: &Gateway) -> Option<Time> {
    gw.poll_timeout()
}

/// The next batch of audit records the gateway has ready, for whichever file.
pub fn take_audit(gw: &mut Gateway) -> Option<AuditBatch> {
    gw.poll_audit(|_| Vec::new())
}
