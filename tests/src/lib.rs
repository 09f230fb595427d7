//! Test support: the deterministic simulation harness shared by the scenario tests.
//!
//! [`sim`] drives a [`mew_core::gateway::Gateway`] with a virtual clock and a seeded
//! network; scenario tests live in `tests/tests/` (binaries `simulation`, `core`,
//! `end_to_end`). [`model_server`] is a real HTTP server that speaks the chat-completions
//! API and replays scripted turns; [`process`] runs real `mew` gateways; [`wait`] is how
//! every test waits for something.

pub mod fixtures;
pub mod http;
pub mod model_server;
pub mod process;
pub mod sim;
pub mod wait;
