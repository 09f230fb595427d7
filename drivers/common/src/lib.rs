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
pub mod bridge;
pub mod client_tls;
pub mod clock;
pub mod conn;
pub mod direct;
pub mod durable;
pub mod exit;
pub mod files;
pub mod frames;
pub mod host;
pub mod http;
pub mod jwt;
pub mod link;
pub mod logs;
pub mod metrics;
pub mod node_inputs;
pub mod participant;
pub mod process;
pub mod proxy;
pub mod response;
pub mod route;
pub mod secret;
pub mod server;
pub mod tls;
pub mod token_file;
pub mod ui;
pub mod ui_session;
pub mod ws;

pub use rustls;

pub use http::{HeadError, RequestHead, parse_head, percent_decode};
pub use response::Response;
pub use route::{Route, route};
