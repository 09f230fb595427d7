//! What serves a space: the gateway server over a runtime's sockets ([`serve`]), the core
//! task's runtime-neutral half ([`host`]) and a connection's reader and writer ([`conn`]),
//! the frames written straight to a socket ([`frames`]), the HTTP side of the port (request
//! heads, routing, responses, the WebSocket handshake, the web page, `/metrics`), TLS on the
//! port, who a client is behind a proxy, and JWT identities.
//!
//! A driver for an async runtime supplies only [`ServerRuntime`]; the server's entry points
//! are re-exported here from [`serve`].

pub mod conn;
pub mod frames;
pub mod hops;
pub mod host;
pub mod http;
pub mod jwt;
pub mod mcp_front;
pub mod metrics;
pub mod node_inputs;
pub mod oauth;
pub mod proxy;
pub mod response;
pub mod route;
pub mod serve;
pub mod tls;
pub mod ui;
pub mod ui_session;
pub mod ws;

pub use conn::CoreTask;
pub use serve::{GatewayServer, ReloadHandle, ServerOptions, ServerRuntime, ShutdownHandle};
