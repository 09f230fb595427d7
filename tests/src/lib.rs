//! Test support: the deterministic simulation harness shared by the scenario tests.
