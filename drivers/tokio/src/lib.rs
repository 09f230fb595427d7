//! MEW gateway server and participant runtime on tokio.
//!
//! [`GatewayServer`] serves one space on one port: the WebSocket endpoint (any path with an
//! upgrade; `GET /ws?space=` by the spec) and the HTTP API (`POST`/`GET
//! /participants/{id}/messages`, `GET /participants`, `GET /health`). The space's
//! [`Gateway`](mew_core::gateway::Gateway) core runs in one task; connections feed it and carry
//! out its outputs. [`ParticipantRuntime`] is the async face of the participant core.
//! Both are the runtime-neutral implementations of `mew-driver-common` with this crate's
//! [`Tokio`] hooks (sockets, tasks, timers, event queue); no protocol rule lives here.
#![forbid(unsafe_code)]

pub mod clock;
pub mod mcp_process;
mod participant;
mod server;

pub use mew_driver_common::client::agent::{
    AgentExit, DataSink, HttpTransport, ModelEndpoint, ModelFuture, ModelTransport,
};
pub use mew_driver_common::client::bridge::{BridgeHandle, BridgeSnapshot};
pub use mew_driver_common::server::tls::{ServerTls, TlsFiles};
pub use participant::{
    CallError, EVENT_QUEUE, ParticipantRuntime, SendJsonError, Stopped, Tokio, ToolHandler,
};
pub use server::{GatewayServer, ReloadHandle, ServerOptions, ServerSock, ShutdownHandle};

/// Runs an agent on tokio until it is told to stop (see
/// [`mew_driver_common::client::agent::run_agent`]).
pub async fn run_agent(
    config: mew_core::agent::AgentConfig,
    endpoint: ModelEndpoint,
    transport: std::sync::Arc<dyn ModelTransport>,
    seed: Option<u64>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    on_event: impl FnMut(&mew_core::agent::AgentEvent) + Send,
) -> AgentExit {
    mew_driver_common::client::agent::run_agent::<Tokio>(
        config, endpoint, transport, seed, shutdown, on_event,
    )
    .await
}

/// Starts an MCP bridge in the background on the current tokio runtime (see
/// [`mew_driver_common::client::bridge::spawn_bridge`]).
pub fn spawn_bridge(
    config: mew_core::bridge::BridgeConfig,
    command: impl Into<mew_driver_common::client::bridge::ServerTarget>,
    seed: Option<u64>,
) -> BridgeHandle {
    mew_driver_common::client::bridge::spawn_bridge::<Tokio>(config, command, seed)
}

/// Runs an MCP bridge on tokio until it exits; `shutdown` resolving starts a clean stop
/// (see [`mew_driver_common::client::bridge::run_bridge`]).
pub async fn run_bridge(
    config: mew_core::bridge::BridgeConfig,
    command: impl Into<mew_driver_common::client::bridge::ServerTarget>,
    seed: Option<u64>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> mew_core::bridge::Exit {
    mew_driver_common::client::bridge::run_bridge::<Tokio>(config, command, seed, shutdown).await
}
