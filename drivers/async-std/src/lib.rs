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
//! Both are the runtime-neutral implementations of `mew-driver-common` with this crate's
//! [`AsyncStd`] hooks; no protocol rule lives here.
#![forbid(unsafe_code)]

mod runtime;

pub use mew_driver_common::client::agent::{
    AgentExit, DataSink, HttpTransport, ModelEndpoint, ModelFuture, ModelTransport,
};
pub use mew_driver_common::client::bridge::{BridgeHandle, BridgeSnapshot};
pub use mew_driver_common::client::participant::{
    CallError, EVENT_QUEUE, SendJsonError, Stopped, ToolHandler,
};
pub use mew_driver_common::clock;
pub use mew_driver_common::server::tls::{ServerTls, TlsFiles};
pub use mew_driver_common::server::{ReloadHandle, ServerOptions, ShutdownHandle};
pub use runtime::{AsyncStd, ServerSock};

/// A bound, not yet serving gateway (see [`mew_driver_common::server::GatewayServer`]).
pub type GatewayServer = mew_driver_common::server::GatewayServer<AsyncStd>;
/// The async handle on a participant, driven on async-std / smol. Clonable; the task stops
/// when every handle is dropped or `close` is called.
pub type ParticipantRuntime = mew_driver_common::client::participant::ParticipantRuntime<AsyncStd>;
/// The events a [`ParticipantRuntime`] hands to the application.
pub type Events = async_channel::Receiver<mew_core::participant::Event>;

/// Runs an agent on async-std (or smol) until it is told to stop (see
/// [`mew_driver_common::client::agent::run_agent`]).
pub async fn run_agent(
    config: mew_core::agent::AgentConfig,
    endpoint: ModelEndpoint,
    transport: std::sync::Arc<dyn ModelTransport>,
    seed: Option<u64>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    on_event: impl FnMut(&mew_core::agent::AgentEvent) + Send,
) -> AgentExit {
    mew_driver_common::client::agent::run_agent::<AsyncStd>(
        config, endpoint, transport, seed, shutdown, on_event,
    )
    .await
}

/// An MCP server's child process on async-std / smol.
pub mod mcp_process {
    pub use mew_driver_common::client::process::{ProcessEvent, ServerCommand};

    /// One MCP server process at a time on async-std / smol (see
    /// [`mew_driver_common::client::process::McpProcess`]).
    pub type McpProcess = mew_driver_common::client::process::McpProcess<crate::AsyncStd>;
}

/// Starts an MCP bridge in the background on the global executor (see
/// [`mew_driver_common::client::bridge::spawn_bridge`]).
pub fn spawn_bridge(
    config: mew_core::bridge::BridgeConfig,
    command: impl Into<mew_driver_common::client::bridge::ServerTarget>,
    seed: Option<u64>,
) -> BridgeHandle {
    mew_driver_common::client::bridge::spawn_bridge::<AsyncStd>(config, command, seed)
}

/// Runs an MCP bridge on async-std (or smol) until it exits; `shutdown` resolving starts a
/// clean stop (see [`mew_driver_common::client::bridge::run_bridge`]).
pub async fn run_bridge(
    config: mew_core::bridge::BridgeConfig,
    command: impl Into<mew_driver_common::client::bridge::ServerTarget>,
    seed: Option<u64>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> mew_core::bridge::Exit {
    mew_driver_common::client::bridge::run_bridge::<AsyncStd>(config, command, seed, shutdown).await
}
