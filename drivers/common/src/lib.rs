//! Runtime-neutral pieces shared by the MEW drivers.
//!
//! Plain std pieces: HTTP request heads from a bounded buffer, endpoint routing, the server
//! side of the WebSocket handshake, response formatting, configuration and token files, and
//! a buffered log writer on its own thread. And the async parts written once over
//! runtime-neutral channels (`async-channel`, `futures-channel`): the gateway server
//! ([`server`], over the [`host`] of the core task and the [`conn`] loops) and the
//! participant runtime ([`participant`]). A driver for a given async runtime supplies only
//! its hooks: sockets, timers, tasks ([`server::ServerRuntime`], [`participant::Runtime`]).
#![forbid(unsafe_code)]

pub mod agent;
pub mod clock;
pub mod conn;
pub mod durable;
pub mod exit;
pub mod files;
pub mod host;
pub mod http;
pub mod logs;
pub mod metrics;
pub mod participant;
pub mod response;
pub mod route;
pub mod secret;
pub mod server;
pub mod ws;

pub use http::{HeadError, RequestHead, parse_head, percent_decode};
pub use response::Response;
pub use route::{Route, route};
