//! Errors of the MCP client: what a caller's request or the server's lifecycle can end in.

use super::exit::ExitStatus;
use super::jsonrpc::{RpcError, codes};
use std::time::Duration;

/// Why a call failed or a server could not be (kept) running.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum McpError {
    /// The server answered with a JSON-RPC error; passed through faithfully.
    #[error("MCP server returned error {}: {}", .0.code, .0.message)]
    Server(RpcError),
    /// No response within the call's timeout.
    #[error("MCP request timed out after {} ms", .0.as_millis())]
    Timeout(Duration),
    /// The server process ended while the call was in flight.
    #[error("MCP server exited ({0}) before answering")]
    ServerExited(ExitStatus),
    /// The call was cancelled by the caller.
    #[error("MCP request cancelled")]
    Cancelled,
    /// The client is shutting down.
    #[error("MCP client is shutting down")]
    Shutdown,
    /// A call was made before the handshake finished or while the server is down.
    #[error("MCP server is not ready")]
    NotReady,
    /// [`super::McpClient::start`] was called twice.
    #[error("MCP client already started")]
    AlreadyStarted,
    /// Too many calls in flight.
    #[error("too many MCP requests in flight (limit {0})")]
    TooManyCalls(usize),
    /// The method is the client's own business (`initialize`, `notifications/...`).
    #[error("method {0:?} cannot be called directly")]
    ReservedMethod(String),
    /// The command could not be started (not found, not executable, ...).
    #[error("could not start MCP server: {0}")]
    SpawnFailed(String),
    /// No reply to `initialize` in time.
    #[error(
        "MCP server did not answer initialize within {} ms (is the command an MCP server speaking JSON-RPC on stdio?)",
        .0.as_millis()
    )]
    InitTimeout(Duration),
    /// The server answered `initialize` with an error.
    #[error("MCP server rejected initialize with error {}: {}", .0.code, .0.message)]
    InitRejected(RpcError),
    /// The process answered in a way no MCP server would.
    #[error("not an MCP server: it {0}")]
    NotAnMcpServer(&'static str),
    /// The process ended before completing the handshake.
    #[error(
        "MCP server exited ({0}) before completing the initialize handshake (is the command an MCP server?)"
    )]
    InitExited(ExitStatus),
    /// The server chose a protocol revision this client does not speak.
    #[error("MCP server speaks protocol version {0:?}, which this client does not support")]
    UnsupportedProtocolVersion(String),
    /// The `initialize` result was malformed.
    #[error("malformed initialize result: {0}")]
    BadInitializeResult(&'static str),
    /// The HTTP exchange failed (connection refused, reset, TLS, ...).
    #[error("MCP server unreachable: {0}")]
    Transport(String),
    /// The server answered with an HTTP status and no JSON-RPC answer.
    #[error("MCP server answered HTTP {status}{}", if .detail.is_empty() { String::new() } else { format!(": {}", .detail) })]
    Http {
        /// The status.
        status: u16,
        /// What the body said, shortened (or what was wrong with it).
        detail: String,
    },
    /// The server wants credentials (HTTP 401 or 403).
    #[error("MCP server requires authorization (HTTP {status}{})", .challenge.as_deref().map(|c| format!(", {c}")).unwrap_or_default())]
    Unauthorized {
        /// 401 or 403.
        status: u16,
        /// `WWW-Authenticate`, if sent.
        challenge: Option<String>,
    },
    /// A person must sign in to the server's authorization server first.
    #[error("sign-in needed: open {url} to sign in to {host}")]
    SignInNeeded {
        /// The authorization URL.
        url: String,
        /// The authorization server's host.
        host: String,
    },
    /// Obtaining a token for the server failed (one line).
    #[error("MCP server authorization failed: {0}")]
    Auth(String),
    /// The server forgot the session (HTTP 404 with a session id); a new one is started.
    #[error("MCP session expired")]
    SessionExpired,
    /// The response stream ended before the response.
    #[error("MCP server closed the response stream before answering")]
    StreamEnded,
    /// The server asked for something this client does not give (sampling, an unknown
    /// input request, ...).
    #[error("MCP server asked for {0}, which is declined")]
    Declined(String),
    /// A call took more `input_required` rounds than allowed.
    #[error("MCP server asked for input more than {0} times")]
    TooManyRounds(u32),
    /// A result this client cannot use (unknown `resultType`, malformed `input_required`).
    #[error("unusable MCP result: {0}")]
    BadResult(String),
    /// A list result (`tools/list` ...) was malformed or unbounded.
    #[error("malformed {method} result: {reason}")]
    BadListResult {
        /// The list method.
        method: &'static str,
        /// What was wrong.
        reason: &'static str,
    },
}

impl McpError {
    /// The JSON-RPC error to report for this failure to whoever asked (e.g. in an
    /// `mcp/response`). Server errors pass through unchanged; local failures use the codes the
    /// TypeScript SDK uses for the same conditions.
    pub fn to_rpc_error(&self) -> RpcError {
        match self {
            McpError::Server(e) => e.clone(),
            McpError::Timeout(_) | McpError::InitTimeout(_) => {
                RpcError::new(codes::REQUEST_TIMEOUT, self.to_string())
            }
            McpError::ServerExited(_)
            | McpError::InitExited(_)
            | McpError::Shutdown
            | McpError::Transport(_)
            | McpError::StreamEnded
            | McpError::SessionExpired => RpcError::new(codes::CONNECTION_CLOSED, self.to_string()),
            McpError::ReservedMethod(_) => RpcError::new(codes::INVALID_REQUEST, self.to_string()),
            _ => RpcError::new(codes::INTERNAL_ERROR, self.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_errors_pass_through_and_local_ones_get_codes() {
        let e = RpcError {
            code: -32602,
            message: "bad".into(),
            data: Some(serde_json::json!({"x":1})),
        };
        assert_eq!(McpError::Server(e.clone()).to_rpc_error(), e);
        assert_eq!(
            McpError::Timeout(Duration::from_millis(5))
                .to_rpc_error()
                .code,
            codes::REQUEST_TIMEOUT
        );
        let exited = McpError::ServerExited(ExitStatus::signal(9)).to_rpc_error();
        assert_eq!(exited.code, codes::CONNECTION_CLOSED);
        assert!(exited.message.contains("signal 9"), "{}", exited.message);
    }
}
