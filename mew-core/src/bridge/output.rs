//! What a [`Bridge`](super::Bridge) hands to its driver.

use crate::mcp::{McpEvent, Output as McpOutput};
use crate::participant::{Event as ParticipantEvent, Output as ParticipantOutput};
use std::fmt;

/// One thing for the driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A gateway-side action: `Connect`, `Transmit`, `Ping` or `Disconnect` (never `Event`;
    /// those come as [`Output::Participant`]).
    Gateway(ParticipantOutput),
    /// A server-side action: `Spawn`, `Write` or `Kill` (never `Event`; those come as
    /// [`Output::Mcp`]).
    Server(McpOutput),
    /// Something the participant reported, after the bridge acted on it (for logs).
    Participant(ParticipantEvent),
    /// Something the MCP client reported, after the bridge acted on it (for logs).
    Mcp(McpEvent),
    /// An HTTP fetch of the OAuth flow (metadata, registration, token endpoint); answer with
    /// [`super::Bridge::handle_oauth_fetch`].
    OAuthFetch(crate::mcp::oauth::Fetch),
    /// Keep these tokens privately for the next run (and never log them).
    OAuthSave(crate::mcp::oauth::Stored),
    /// What happened to the server's authorization (for logs).
    Auth(super::AuthEvent),
    /// The bridge is done: every output before this one should still be carried out (the
    /// last frames flushed, the server's exit awaited), then the process should exit.
    Exit(Exit),
}

/// Why the bridge finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// Shut down on request (`participant/shutdown`, or [`super::Bridge::close`]).
    Shutdown,
    /// The MCP server never completed its first start (a command that does not exist, a
    /// program that is not an MCP server, no `initialize` answer in time): a configuration
    /// error, which starting the bridge again would only repeat.
    ServerNeverReady(String),
    /// The MCP server, ready once, could not be kept running.
    ServerGaveUp(String),
    /// The gateway could not be reached again after the connection was lost.
    GatewayGaveUp(String),
}

impl Exit {
    /// Whether this is a failure (the process should exit non-zero).
    pub fn is_error(&self) -> bool {
        !matches!(self, Exit::Shutdown)
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Shutdown => f.write_str("shut down"),
            Exit::ServerNeverReady(r) | Exit::ServerGaveUp(r) => {
                write!(f, "MCP server failed: {r}")
            }
            Exit::GatewayGaveUp(r) => write!(f, "gateway unreachable: {r}"),
        }
    }
}
