//! Test support: the deterministic simulation harness shared by the scenario tests.
//!
//! [`sim`] drives a [`mew_core::gateway::Gateway`] with a virtual clock and a seeded
//! network; scenario tests live in `tests/tests/` (binaries `simulation`, `core`,
//! `end_to_end`). [`model_server`] is a real HTTP server that speaks the chat-completions
//! API and replays scripted turns; [`process`] runs real `mew` gateways; [`wait`] is how
//! every test waits for something; [`pki`] makes a private CA and a certificate; [`scratch`] is a
//! test's own temporary folder. Those, and [`fixtures`], need the default `io`
//! feature; without it the crate is [`sim`] alone, for the fuzz targets.

#[cfg(feature = "io")]
pub mod fixtures;
#[cfg(feature = "io")]
pub mod http;
#[cfg(feature = "io")]
pub mod model_server;
#[cfg(feature = "io")]
pub mod pki;
#[cfg(feature = "io")]
pub mod process;
#[cfg(feature = "io")]
pub mod scratch;
pub mod sim;
#[cfg(feature = "io")]
pub mod tmux;
#[cfg(feature = "io")]
pub mod wait;
