//! MEW gateway server and participant runtime for async-std and smol.
//!
//! Built on the runtime-neutral `futures-io` stack that both runtimes share: sockets from
//! `async-net`, timers from `async-io`, tasks on `async-global-executor` (the executor
//! async-std itself uses), WebSockets from `async-tungstenite`. The same code therefore runs
//! under `async_std::main`, `smol::block_on`, or a plain `futures::executor::block_on`.
//!
//! [`GatewayServer`] serves one space on one port: the WebSocket endpoint (any path with an
//! upgrade; `GET /ws?space=` by the spec) and the HTTP API (`POST`/`GET
//! /participants/{id}/messages`, `GET /participants`, `GET /health`). The space's
//! [`Gateway`](mew_core::gateway::Gateway) core runs in one task; connections feed it and
//! carry out its outputs. [`ParticipantRuntime`] is the async face of the participant core.
//! No protocol rule lives here: this crate moves bytes, arms timers and writes files.
#![forbid(unsafe_code)]

mod runtime;
mod server;

pub use mew_driver_common::clock;
pub use mew_driver_common::participant::{
    CallError, EVENT_QUEUE, SendJsonError, Stopped, ToolHandler,
};
pub use runtime::AsyncStd;
pub use server::{GatewayServer, ServerOptions, ShutdownHandle};

/// The async handle on a participant, driven on async-std / smol.
pub type ParticipantRuntime = mew_driver_common::participant::ParticipantRuntime<AsyncStd>;
/// The events a [`ParticipantRuntime`] hands to the application.
pub type Events = async_channel::Receiver<mew_core::participant::Event>;
