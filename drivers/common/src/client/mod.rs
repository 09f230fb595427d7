//! What joins a space: the participant runtime ([`participant`]) and the agent and MCP
//! bridge runtimes built on the same gateway connection ([`link`]), the MCP server's child
//! process ([`process`]) or its Streamable HTTP endpoint ([`mcp_http`]), TLS for `wss://` gateways ([`tls`]), and a token re-read from a
//! file before each connection ([`token_file`]).

pub mod agent;
pub mod bridge;
pub mod link;
pub mod mcp_http;
pub mod oauth;
pub mod participant;
pub mod process;
pub mod socket;
pub mod tls;
pub mod token_file;
