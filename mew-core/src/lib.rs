//! Sans-IO core of the MEW Protocol (`mew/v0.4`).
//!
//! Everything here is pure computation: envelopes, capability patterns, the gateway's space
//! state machine and the participant state machines. Nothing in this crate opens a socket,
//! reads a clock, spawns a thread or draws randomness: callers pass `now` (a [`Time`]) and a
//! seed in, feed frames and ticks, and drain outputs (frames to send, timers, events).
//!
//! Every state machine here speaks one vocabulary:
//!
//! | call | what it is |
//! |---|---|
//! | `new(config, ..)` | builds the machine (with a `seed` where it draws ids or jitter, and what it depends on: the gateway's token source and identity verifier); nothing happens until an input or `start` |
//! | `start(now)` / `close(now, ..)` | commands: begin, and end for good |
//! | `handle_input(now, Input)` / `handle_*(now, ..)` | inputs: something happened. The gateway ([`gateway::Gateway::handle_input`] with a [`gateway::Input`]), a replicated space's node ([`cluster::Node::handle_input`] with a [`cluster::NodeInput`]) and the participant and the machines around one ([`participant::GatewayInputs::handle_input`] with a [`participant::Input`]: the connection's inputs and time) take them through one typed entry; inputs of another conversation (an agent's model replies, a bridge's server process, the MCP machines) through `handle_*` methods of their own |
//! | other `&mut self` methods taking `now` | commands of the application (`send`, `run`, `call`, ...) |
//! | `poll_output()` | the next thing for the driver to do, in order, until `None` |
//! | `poll_timeout()` + its `Timeout` input (`handle_timeout(now)` where a machine has no input enum) | when the machine next needs a tick, and the tick |
//!
//! `now` comes first, after `&mut self`, wherever time could matter. Inputs without it are
//! those of a machine that keeps no clock ([`mcp::McpServer`]) and those whose time is the
//! log's: a [`cluster::Replica`] applying an entry, and the [`cluster::Node`] around it
//! (whose [`cluster::NodeInput::Entry`] ignores the `now` it is given), which owns the
//! replica and so the space's gateway.
//! Each machine's type has a table of its inputs and the outputs each may queue.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod agent;
pub mod automation;
pub mod backoff;
pub mod bridge;
pub mod capability;
pub mod cluster;
pub mod envelope;
pub mod front;
pub mod gateway;
pub mod ids;
mod json_write;
pub mod mcp;
pub mod participant;
pub mod participant_id;
pub mod schema;
pub mod secret;
pub mod supervise;
pub mod time;
pub mod tools;
pub mod view;

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
