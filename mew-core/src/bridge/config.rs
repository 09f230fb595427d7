//! Settings of a [`Bridge`](super::Bridge).

use crate::mcp::McpConfig;
use crate::participant::ParticipantConfig;
use std::time::Duration;

/// Settings of a bridge: its MEW side, its MCP side and how requests are forwarded.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The participant that joins the space.
    pub participant: ParticipantConfig,
    /// The MCP client that drives the server (`init_timeout`, restart policy, ...).
    pub mcp: McpConfig,
    /// Deadline of each request forwarded to the server, including time spent waiting for
    /// the server to (re)start.
    pub call_timeout: Duration,
    /// Requests held while the server is starting or restarting; more are refused.
    pub max_waiting: usize,
    /// The participant that may answer the server's sampling requests (`sampling:
    /// {answered_by: ID}` in the bridge's configuration); none: sampling is declined with a
    /// reason and not offered to the server.
    pub sampling_answered_by: Option<String>,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            participant: ParticipantConfig::default(),
            mcp: McpConfig::default(),
            call_timeout: Duration::from_secs(60),
            max_waiting: 256,
            sampling_answered_by: None,
        }
    }
}
