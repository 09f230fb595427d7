//! MEW gateway server and participant runtime on tokio.
//!
//! [`GatewayServer`] serves one space on one port: the WebSocket endpoint (any path with an
//! upgrade; `GET /ws?space=` by the spec) and the HTTP API (`POST`/`GET
//! /participants/{id}/messages`, `GET /participants`, `GET /health`). The space's
//! [`Gateway`](mew_core::gateway::Gateway) core runs in one task; connections feed it and carry
//! out its outputs. [`ParticipantRuntime`] is the async face of the participant core.
//! No protocol rule lives here: this crate moves bytes, arms timers and writes files.
#![forbid(unsafe_code)]

pub mod clock;
mod participant;
mod server;

pub use participant::{
    CallError, EVENT_QUEUE, ParticipantRuntime, SendJsonError, Stopped, Tokio, ToolHandler,
};
pub use server::{GatewayServer, ServerOptions, ShutdownHandle};
