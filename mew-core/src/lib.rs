//! Sans-IO core of the MEW Protocol (`mew/v0.4`).
//!
//! Everything here is pure computation: envelopes, capability patterns, the gateway's space
//! state machine and the participant state machines. Nothing in this crate opens a socket,
//! reads a clock, spawns a thread or draws randomness: callers pass `now` (a [`Time`]) and a
//! seed in, feed frames and ticks, and drain outputs (frames to send, timers, events).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod agent;
pub mod automation;
pub mod backoff;
pub mod bridge;
pub mod capability;
pub mod cluster;
pub mod envelope;
pub mod gateway;
pub mod ids;
pub mod mcp;
pub mod participant;
pub mod schema;
pub mod secret;
pub mod supervise;
pub mod time;
pub mod tools;

pub use capability::{Capability, CapabilityError, CapabilitySet};
pub use envelope::{Envelope, Kind, Limits, ParseError, RoutingView};
pub use time::Time;

/// The protocol identifier every envelope carries.
pub const PROTOCOL: &str = "mew/v0.4";

/// The `from` of envelopes the gateway itself generates.
pub const GATEWAY_ID: &str = "system:gateway";

/// The close reason of a connection another connection of the same participant replaced:
/// the gateway writes it, and a client that reads it does not reconnect.
pub const REPLACED_REASON: &str = "replaced by a new connection";
