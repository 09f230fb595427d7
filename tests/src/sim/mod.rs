//! Deterministic simulations of one gateway and its clients, all on one [`World`], and of a
//! replicated space's nodes on a [`ClusterWorld`] built from the same parts.
//!
//! The seed comes from `MEW_SIM_SEED` when set, else from the test; it is printed when a
//! test panics, so any failure replays exactly with `MEW_SIM_SEED=<seed>`.

pub mod clock;
pub mod cluster;
pub mod gateway;
pub mod net;
pub mod node;
pub mod participants;
pub mod seed;
pub mod world;

pub use clock::Clock;
pub use cluster::{ClusterNode, ClusterWorld};
pub use net::{Endpoint, Net};
pub use seed::{Seed, Trace, seed_or, seeds};
pub use world::{Handed, TransmitHook, World, parse};

use mew_core::Time;
use mew_core::ids::IdGen;
use mew_core::secret::TokenSource;
use serde_json::Value;

/// The world under the name the gateway-level tests use.
pub type Sim = World;

/// The invitation-token source of a simulated gateway: seeded, derived from the
/// simulation's seed, never the generator of ids.
pub fn seeded_tokens(seed: u64) -> Box<dyn TokenSource> {
    Box::new(IdGen::new(seed.rotate_left(29) ^ 0x5EC2_E770_C0FF_EE00))
}

/// The start of simulated time: 2025-01-09T10:00:00Z.
pub const EPOCH: Time = Time::from_unix_millis(1_736_416_800_000);

/// A complete envelope from `from`.
pub fn envelope(id: &str, from: &str, kind: &str, to: Option<&[&str]>, payload: Value) -> Value {
    let mut v = serde_json::json!({
        "protocol": "mew/v0.4",
        "id": id,
        "ts": "2025-01-09T10:00:00.000Z",
        "from": from,
        "kind": kind,
        "payload": payload,
    });
    if let Some(to) = to {
        v["to"] = serde_json::json!(to);
    }
    v
}
