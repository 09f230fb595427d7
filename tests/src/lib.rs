//! Test support: the deterministic simulation harness shared by the scenario tests.
//!
//! [`sim`] drives a [`mew_core::gateway::Gateway`] with a virtual clock and a seeded
//! network; scenario tests live in `tests/tests/`.

pub mod fixtures;
pub mod sim;
