//! MCP (Model Context Protocol), sans-IO: the client side (what a bridge speaks to an MCP
//! server, over stdio or Streamable HTTP) and, in [`server`], the server side (what a
//! tools-mode agent speaks to an MCP host over stdio).
//!
//! [`McpClient`] owns the protocol: the handshake (`server/discover` for the stateless
//! 2026-07-28 revision, `initialize` for the session revisions up to 2025-11-25, the newest
//! shared one chosen), the paginated `tools/list`, `resources/list` and `prompts/list` (again
//! on every `list_changed`), requests with deadlines, `input_required` rounds, answers to the
//! server's own requests (`ping`, `roots/list`) and its questions put to the owner
//! (elicitation, sampling), and a restart policy for servers that crash or never come up. A
//! driver owns the child process or the HTTP connections, and the clock: it feeds stdout and
//! stderr bytes, spawn results, exits, HTTP answers and ticks, and carries out the
//! [`Output`]s. [`http`] holds the Streamable HTTP rules (headers, what an answer's body is),
//! [`SseParser`] the event stream, [`stateless`] the 2026-07-28 `_meta` and result rules.
//!
//! ```
//! use mew_core::mcp::{McpClient, McpConfig, Output};
//! use mew_core::Time;
//!
//! let mut client = McpClient::new(McpConfig::default());
//! let now = Time::from_unix_millis(0);
//! client.start(now).unwrap();
//! assert_eq!(client.poll_output(), Some(Output::Spawn));
//! client.handle_spawned(now);
//! let Some(Output::Write(line)) = client.poll_output() else { panic!() };
//! assert!(line.contains("\"method\":\"initialize\""));
//! client.handle_stdout(now, br#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}
//! "#);
//! assert_eq!(client.phase(), mew_core::mcp::Phase::Ready);
//! ```

mod asks;
mod client;
mod error;
mod exit;
mod framing;
pub mod http;
pub mod jsonrpc;
mod listing;
pub mod oauth;
mod restart;
pub mod server;
mod server_requests;
mod sse;
pub mod stateless;
mod version;

pub use asks::{
    AnswerError, Ask, AskAnswer, AskId, Elicitation, ElicitationMode, answer_result, parse_ask,
};
pub use client::{
    AskPolicy, McpCallId, McpClient, McpConfig, McpEvent, Output, Phase, ServerDescription,
    StdoutIssue, Transport,
};
pub use error::McpError;
pub use exit::ExitStatus;
pub use framing::{Line, LineBuffer};
pub use jsonrpc::{RpcError, RpcId};
pub use listing::{Catalog, ListKind, Prompt, Resource, Tool};
pub use restart::RestartBackoff;
pub use server::{
    McpServer, ServedTool, ServerCallId, ServerConfig, ServerEvent, ServerInfo, ServerOutput,
};
pub use server_requests::Root;
pub use sse::{SseEvent, SseItem, SseParser};
pub use version::ProtocolVersion;
