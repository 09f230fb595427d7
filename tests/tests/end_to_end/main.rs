//! End to end over real parts: gateways on loopback sockets for both drivers and across
//! them, with TLS, JWT identities and live configuration; real npm MCP servers behind
//! bridges and the MCP client; the blocking example; connection limits; tokens from the OS
//! CSPRNG.

#[macro_use]
#[path = "../e2e/mod.rs"]
mod e2e;

mod blocking_participant;
mod e2e_async_std;
mod e2e_bridge;
mod e2e_bridge_http;
mod e2e_interop;
mod e2e_tokio;
mod identities;
mod limits;
mod mcp_client_real;
mod reload;
mod secrets;
mod security;
mod ui_session;
