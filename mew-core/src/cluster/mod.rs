//! A space replicated over an ordered log, so several gateway nodes serve it at once.
//!
//! The gateway core is deterministic: the same inputs in the same order give the same state
//! and outputs. So each node publishes the inputs that arise at it ([`Record`]s: joins with
//! their token's digest, frames, closes, pongs, ticks, HTTP posts) to the space's log, and
//! every node applies the log, in order, to its own [`Replica`]. Time comes from the records
//! (never moving backwards), tokens from the entropy records carry, so every replica holds
//! the same state. A node carries out only the outputs for the connections it holds.
//!
//! Nodes beat into the log; a replica declares a node gone when the log's time passes its
//! last record by more than the timeout it announced, and closes its connections (their
//! presence leave is seen once, everywhere). A node that restarts announces itself with
//! [`Entry::NodeUp`], which ends whatever it held in its previous life. The log and
//! snapshots' storage belong to the driver. [`Replica`] decides what an entry does;
//! [`Node`] decides what a node puts into the log, what the entries it reads back mean for
//! the sockets it holds, when it beats and when it writes a snapshot.

pub mod journal;
mod node;
mod record;
mod replica;

pub use node::{Node, NodeAnswer, NodeInput, NodeOptions, NodeOutput, Undo};
pub use record::{DecodeError, Encoder, Entry, Record};
pub use replica::{ApplyError, Replica, ReplicaEvent};
