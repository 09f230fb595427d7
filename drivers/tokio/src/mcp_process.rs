//! An MCP server's child process on tokio: the runtime-neutral
//! [`McpProcess`](mew_driver_common::client::process::McpProcess) with tokio's process hook.

pub use mew_driver_common::client::process::{ProcessEvent, ServerCommand};

/// One MCP server process at a time on tokio (see
/// [`mew_driver_common::client::process::McpProcess`]).
pub type McpProcess = mew_driver_common::client::process::McpProcess<crate::Tokio>;
