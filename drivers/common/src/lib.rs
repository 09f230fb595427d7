//! Runtime-neutral pieces shared by the MEW drivers, grouped by the side they are on.
//!
//! - [`server`]: what serves a space. The gateway server over a runtime's sockets, the core
//!   task's runtime-neutral half ([`server::host`]) and each connection's reader and writer
//!   ([`server::conn`]), frames written straight to the socket, the HTTP side of the port
//!   (request heads, routing, responses, the WebSocket handshake, the web page, `/metrics`),
//!   TLS on the port, proxies, JWT identities, and a node's inputs ([`server::node_inputs`]).
//! - [`state`]: what keeps a space on disk. The durable single node ([`state::durable`]:
//!   recovery, the log's flushing thread, the core task that holds outputs until their
//!   entries are kept), the audit and virtual participants' log writer, appends around the
//!   page cache, where a space's files go.
//! - [`client`]: what joins a space. The participant runtime, the client socket hook and
//!   link every client runtime shares, the agent runtime, the MCP bridge runtime and the MCP
//!   server's child process it drives, TLS for `wss://` gateways, token files.
//! - Shared by the three: the wall clock and entropy handed to the core ([`clock`]), secrets
//!   from the OS ([`secret`]), WebSocket settings ([`websocket`]), and the `mew` program's
//!   exit codes ([`exit`]).
//!
//! The server and the state it serves use each other (the server writes logs and runs a
//! durable space's core task, which runs on the server's host), file by file without a
//! circle; neither uses the client side, and the client side uses neither. The async parts are written once over
//! runtime-neutral channels (`async-channel`, `futures-channel`): a driver for a given async
//! runtime supplies only its hooks: sockets, timers, tasks ([`server::ServerRuntime`],
//! [`client::socket::Runtime`]).
#![forbid(unsafe_code)]

pub mod client;
pub mod clock;
pub mod exit;
pub mod secret;
pub mod server;
pub mod state;
pub mod websocket;

pub use rustls;

pub use server::http::{HeadError, RequestHead, parse_head, percent_decode};
pub use server::response::Response;
pub use server::route::{Route, route};
