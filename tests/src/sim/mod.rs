//! Deterministic simulations of one gateway and its clients, all on one [`World`].
//!
//! The seed comes from `MEW_SIM_SEED` when set, else from the test; it is printed when a
//! test panics, so any failure replays exactly with `MEW_SIM_SEED=<seed>`.

pub mod clock;
pub mod gateway;
pub mod net;
pub mod participants;
pub mod world;

pub use clock::Clock;
pub use net::{Endpoint, Net};
pub use world::{Handed, TransmitHook, World, parse, seed_or};

use mew_core::Time;
use serde_json::Value;

/// The world under the name the gateway-level tests use.
pub type Sim = World;

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
