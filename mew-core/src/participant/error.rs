//! Typed errors: refusals of application commands and failures of requests.

use crate::envelope::Kind;
use serde_json::Value;
use thiserror::Error;

/// JSON-RPC: the request is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC: unknown method (also used for an unknown tool or resource).
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC: invalid parameters (schema violations).
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: internal error.
pub const INTERNAL_ERROR: i64 = -32603;

/// Why an envelope could not be sent.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SendError {
    /// Not ready and the not-ready policy refuses.
    #[error("not connected to the space")]
    NotReady,
    /// Not ready and the not-ready queue is full.
    #[error("not-ready queue is full ({max} envelopes)")]
    QueueFull {
        /// The queue's bound.
        max: usize,
    },
    /// Paused by a `participant/pause`; only exempt kinds may be sent.
    #[error("paused ({reason}): {kind} is not allowed until resumed")]
    Paused {
        /// Kind that was refused.
        kind: Kind,
        /// Reason given by the pause.
        reason: String,
    },
    /// The welcome's capabilities do not allow this message.
    #[error("capabilities do not allow {kind}; held: {held}")]
    NotAllowed {
        /// Kind that was refused.
        kind: Kind,
        /// The capabilities held, as JSON.
        held: Value,
    },
    /// `system/*` kinds belong to the gateway.
    #[error("{0} is reserved for the gateway")]
    Reserved(Kind),
    /// The participant was shut down.
    #[error("participant is shut down")]
    ShutDown,
}

/// Why an MCP request or proposal did not produce a result.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum RequestError {
    /// The target answered with a JSON-RPC error.
    #[error("JSON-RPC error {code}: {message}")]
    Rpc {
        /// JSON-RPC error code.
        code: i64,
        /// Error message.
        message: String,
        /// Optional error data.
        data: Option<Value>,
    },
    /// Neither `mcp/request` nor `mcp/proposal` is allowed for this payload.
    #[error("no capability for mcp/request or mcp/proposal with this payload; held: {held}")]
    NoCapability {
        /// The capabilities held, as JSON.
        held: Value,
    },
    /// The envelope could not be sent.
    #[error(transparent)]
    Send(#[from] SendError),
    /// No answer before the deadline.
    #[error("timed out")]
    Timeout,
    /// The connection was lost while the request was in flight. Requests are not re-sent
    /// after a reconnect: the target may already have acted on them.
    #[error("disconnected while the request was pending")]
    Disconnected,
    /// The proposal was rejected (fail fast on the first rejection).
    #[error("proposal rejected by {by}: {reason}")]
    Rejected {
        /// Participant that rejected it.
        by: String,
        /// Reason code given.
        reason: String,
    },
    /// The proposal was withdrawn by this participant.
    #[error("proposal withdrawn: {reason}")]
    Withdrawn {
        /// Reason given.
        reason: String,
    },
    /// The gateway refused the envelope (`system/error`).
    #[error("gateway refused the envelope: {error}")]
    Gateway {
        /// `payload.error` of the `system/error`.
        error: String,
        /// The whole payload.
        detail: Value,
    },
    /// A proposal must name who should fulfil it, and none was given.
    #[error("a proposal must name its target (`to`)")]
    NoTarget,
    /// The payload given to `mcp_request` is not a JSON object.
    #[error("invalid MCP payload: {0}")]
    InvalidPayload(String),
    /// The response carried neither `result` nor `error`.
    #[error("malformed response: {0}")]
    MalformedResponse(String),
    /// Too many requests pending.
    #[error("too many pending requests ({max})")]
    TooManyPending {
        /// The bound.
        max: usize,
    },
    /// The participant restarted or shut down, ending outstanding work.
    #[error("cancelled: {0}")]
    Cancelled(String),
    /// The command named an unknown item or one in the wrong state.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// No tool of that name is known (for `participant/tool` calls).
    #[error("unknown tool {0}")]
    UnknownTool(String),
}

/// A tool or resource handler's failure, sent back as a JSON-RPC error.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("tool error {code}: {message}")]
pub struct ToolError {
    /// JSON-RPC code (-32603 internal by default).
    pub code: i64,
    /// Message.
    pub message: String,
    /// Optional data.
    pub data: Option<Value>,
}

impl ToolError {
    /// An internal error (-32603) with this message.
    pub fn internal(message: impl Into<String>) -> ToolError {
        ToolError {
            code: INTERNAL_ERROR,
            message: message.into(),
            data: None,
        }
    }
}

/// Misuse of the participant's command API (unknown ids, wrong state).
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CommandError {
    /// No such id is known (never seen, already settled, or evicted).
    #[error("unknown {what} {id}")]
    Unknown {
        /// What kind of id.
        what: &'static str,
        /// The id.
        id: String,
    },
    /// The item is in a state that does not allow this command.
    #[error("{what} {id} is {state}")]
    WrongState {
        /// What kind of id.
        what: &'static str,
        /// The id.
        id: String,
        /// Its current state.
        state: String,
    },
    /// A tool with this name is already registered, or its schema is invalid.
    #[error("invalid tool {name}: {reason}")]
    InvalidTool {
        /// Tool name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The reasoning sequence was cancelled; no more thoughts may be sent.
    #[error("reasoning {0} was cancelled")]
    ReasoningCancelled(String),
    /// The stream is not owned by this participant.
    #[error("stream {0} is not owned by this participant")]
    NotStreamOwner(String),
    /// A table reached its bound.
    #[error("too many {what} ({max})")]
    Full {
        /// What table.
        what: &'static str,
        /// The bound.
        max: usize,
    },
    /// A payload the spec constrains was given a value it does not allow.
    #[error("invalid {field}: {reason}")]
    InvalidPayload {
        /// The field.
        field: &'static str,
        /// What is allowed.
        reason: String,
    },
    /// The envelope could not be sent.
    #[error(transparent)]
    Send(#[from] SendError),
}
