//! Runtime-neutral pieces shared by the MEW drivers.
//!
//! Everything here is plain std (plus `httparse` and `tungstenite`'s handshake helpers): HTTP
//! request heads from a bounded buffer, endpoint routing, the server side of the WebSocket
//! handshake, response formatting, configuration and token files, and a buffered log
//! writer on its own thread. A driver for a given async runtime only moves bytes between
//! sockets and these functions and the core's state machines.
#![forbid(unsafe_code)]

pub mod clock;
pub mod conn;
pub mod exit;
pub mod files;
pub mod host;
pub mod http;
pub mod participant;
pub mod response;
pub mod route;
pub mod ws;

pub use http::{HeadError, RequestHead, parse_head, percent_decode};
pub use response::Response;
pub use route::{Route, route};
