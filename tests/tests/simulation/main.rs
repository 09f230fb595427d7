//! Deterministic simulations: the gateway core and participants over a virtual clock and a
//! seeded network (`MEW_SIM_SEED` replays a run).

mod sim_agent;
mod sim_cluster;
mod sim_controls;
mod sim_determinism;
mod sim_discovery;
mod sim_grants;
mod sim_props;
mod sim_reconnect;
mod sim_requests;
mod sim_streams;
mod sim_tools;
