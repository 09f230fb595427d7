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

pub mod client;
pub mod clock;
pub mod exit;
pub mod secret;
pub mod server;
pub mod state;
pub mod websocket;

/// The client TLS settings at their former path, which the terminal interface still names.
pub use client::tls as client_tls;

pub use rustls;

pub use server::http::{HeadError, RequestHead, parse_head, percent_decode};
pub use server::response::Response;
pub use server::route::{Route, route};
