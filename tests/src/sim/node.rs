//! The cluster simulation's one door into a [`Node`]: every input goes through [`input`],
//! so a change to the node's entry points is a change to this file only.

use mew_core::Time;
use mew_core::cluster::Node;

/// Something a driver tells a node: the node's own typed input.
pub use mew_core::cluster::NodeInput as Input;

/// Hands one input to the node; the node's number for a new connection or post.
pub fn input(node: &mut Node, now: Time, input: Input<'_>) -> Option<u64> {
    node.handle_input(now, input).local()
}
