//! What the participant hands to its driver: [`Output`]s, some of which carry [`Event`]s,
//! and the values those carry (ids of requests and calls, states of reviews and discovery,
//! control requests), which the modules that keep them emit.

use super::error::RequestError;
use crate::envelope::{Envelope, ParseError};
use crate::time::Time;
use serde_json::Value;
use std::time::Duration;

/// Which end of the context `participant/forget` trims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForgetDirection {
    /// Oldest entries first.
    Oldest,
    /// Newest entries first.
    Newest,
}

/// A control request.
#[derive(Debug, Clone, PartialEq)]
pub enum Control {
    /// Stop sending non-exempt envelopes.
    Pause {
        /// Reason.
        reason: String,
        /// Automatic resume after this long.
        timeout: Option<Duration>,
    },
    /// Lift the pause.
    Resume,
    /// Report status.
    RequestStatus {
        /// Requested metrics.
        fields: Vec<String>,
    },
    /// Drop part of the context; complete with `complete_forget`.
    Forget {
        /// Which end.
        direction: ForgetDirection,
        /// How many entries.
        entries: Option<u64>,
    },
    /// Compact; complete with `complete_compact`.
    Compact {
        /// Reason.
        reason: Option<String>,
        /// Desired ceiling.
        target_tokens: Option<u64>,
    },
    /// Wipe the context; complete with `complete_clear`.
    Clear,
    /// Back to baseline; complete with `complete_restart`.
    Restart,
    /// Cease; complete with `complete_shutdown`.
    Shutdown,
}

/// Where discovery of one participant stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryState {
    /// Scheduled, not yet asked.
    NotStarted,
    /// Asked (or waiting to retry).
    InProgress,
    /// Tools known.
    Completed,
    /// Every attempt failed.
    Failed,
    /// The participant answered with no tools (or does not serve `tools/list`).
    NoTools,
}

/// State of a proposal under review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewState {
    /// Nobody acted yet.
    Open,
    /// A fulfilling request was sent (by `by`).
    Fulfilling {
        /// The fulfiller.
        by: String,
    },
    /// A fulfilment got a successful response.
    Fulfilled,
    /// Someone rejected it.
    Rejected {
        /// Rejecter.
        by: String,
        /// Reason code.
        reason: String,
    },
    /// The proposer withdrew it.
    Withdrawn {
        /// Reason code.
        reason: String,
    },
    /// Older than the proposal timeout without an outcome.
    Expired,
}

/// The envelope id of one of our requests or proposals.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub(crate) String);

/// How an MCP operation went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestRoute {
    /// A direct `mcp/request`.
    Request,
    /// An `mcp/proposal` awaiting fulfilment.
    Proposal,
}

/// Handle of a tool call or resource read handed to the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallId(pub u64);

/// One thing for the driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Open a WebSocket to `url` with these HTTP headers; then give `Input::Connected`
    /// (or `Input::Disconnected` on failure).
    Connect {
        /// Gateway URL.
        url: String,
        /// Headers, including `Authorization: Bearer <token>`.
        headers: Vec<(String, String)>,
    },
    /// Send one text frame.
    Transmit(String),
    /// Send a WebSocket ping (reply pongs are reported as `Input::Pong`).
    Ping,
    /// Close the connection; no `Input::Disconnected` is needed for this one.
    Disconnect {
        /// Why.
        reason: String,
    },
    /// Tell the application something.
    Event(Event),
}

/// Why a request was routed the way it was (ADR-WCM debugging aid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteReason {
    /// `mcp/request` is allowed for the exact payload.
    DirectAllowed,
    /// The caller or config prefers proposals and `mcp/proposal` is allowed.
    PreferProposal,
    /// `mcp/request` is not allowed but `mcp/proposal` is.
    DirectNotAllowed,
}

/// Something the application may want to react to.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The socket opened and the join was sent.
    Connected,
    /// The welcome arrived: the participant may act.
    Ready {
        /// Our participant id.
        id: String,
        /// Whether this follows a reconnect.
        reconnected: bool,
    },
    /// The connection was lost.
    Disconnected {
        /// Why.
        reason: String,
    },
    /// A reconnect attempt is scheduled.
    Reconnecting {
        /// 1-based attempt number.
        attempt: u32,
        /// When it starts.
        at: Time,
    },
    /// The gateway closed the connection because another connection joined as the same
    /// participant: the client does not reconnect (two processes with one id would
    /// otherwise replace each other forever). [`Event::GaveUp`] follows.
    Replaced {
        /// The gateway's close reason.
        reason: String,
    },
    /// Reconnection gave up after the maximum number of attempts (or at once after
    /// [`Event::Replaced`]).
    GaveUp {
        /// Attempts made.
        attempts: u32,
    },
    /// An inbound frame was not a valid envelope (and was dropped).
    Malformed {
        /// What was wrong.
        error: ParseError,
    },
    /// A structurally valid envelope whose payload made no sense for its kind.
    Invalid {
        /// The envelope id.
        id: String,
        /// What was wrong.
        reason: String,
    },
    /// Any valid inbound envelope, after the participant has processed it.
    Message(Box<Envelope>),
    /// Our capabilities changed (welcome or updated welcome).
    CapabilitiesChanged {
        /// The new capability list.
        capabilities: Value,
    },
    /// A participant joined.
    ParticipantJoined {
        /// Its id.
        id: String,
    },
    /// A participant left.
    ParticipantLeft {
        /// Its id.
        id: String,
    },
    /// How `mcp_request` routed a request.
    RouteDecision {
        /// The request.
        id: RequestId,
        /// Request or proposal.
        route: RequestRoute,
        /// Why.
        reason: RouteReason,
    },
    /// A request or proposal of ours finished.
    RequestCompleted {
        /// The id `mcp_request` (or `fulfil`, `call_tool`) returned.
        id: RequestId,
        /// The `result` of the response, or why there is none.
        result: Result<Value, RequestError>,
    },
    /// One of our proposals is being fulfilled by someone.
    ProposalFulfilling {
        /// Our proposal.
        id: RequestId,
        /// The fulfiller.
        by: String,
        /// The fulfilling request's envelope id.
        fulfilment_id: String,
    },
    /// Someone else's proposal appeared.
    ProposalSeen {
        /// Proposal envelope id.
        id: String,
        /// The proposer.
        from: String,
        /// The proposal's targets.
        to: Vec<String>,
        /// The proposed MCP payload.
        payload: Value,
    },
    /// A reviewed proposal changed state.
    ProposalStateChanged {
        /// Proposal envelope id.
        id: String,
        /// New state.
        state: ReviewState,
    },
    /// An MCP request for us (addressed or broadcast) whose method the participant does not
    /// serve itself and that no `forward_method` registration claims. An addressed one has
    /// already been answered "method not found"; to answer such requests, register the
    /// method with `forward_method`.
    McpRequest {
        /// Envelope id.
        id: String,
        /// Requester.
        from: String,
        /// The JSON-RPC payload.
        payload: Value,
    },
    /// Run a registered tool; answer with `complete_call`.
    ToolCall {
        /// Handle for `complete_call`.
        call_id: CallId,
        /// Requester.
        from: String,
        /// Tool name.
        tool: String,
        /// Validated arguments.
        arguments: Value,
    },
    /// An `mcp/request` for a method registered with `forward_method`; answer with
    /// `complete_call` (or `decline_call`).
    Forwarded {
        /// Handle for `complete_call`.
        call_id: CallId,
        /// Requester.
        from: String,
        /// The JSON-RPC method.
        method: String,
        /// Its params, as sent.
        params: Option<Value>,
        /// Whether `to` named us (rather than being empty).
        explicit: bool,
    },
    /// Read a registered resource; answer with `complete_call`.
    ResourceRead {
        /// Handle for `complete_call`.
        call_id: CallId,
        /// Requester.
        from: String,
        /// The resource's URI.
        uri: String,
    },
    /// A participant's discovery state changed.
    Discovery {
        /// The participant.
        participant: String,
        /// Its new state.
        state: DiscoveryState,
    },
    /// No discovery is pending any more.
    DiscoverySettled,
    /// A chat addressed to us was queued for acknowledgement.
    ChatReceived {
        /// Envelope id.
        id: String,
        /// Sender.
        from: String,
        /// Text.
        text: String,
    },
    /// A queued chat was cancelled by its sender.
    ChatCancelled {
        /// The chat's envelope id.
        id: String,
        /// Reason given.
        reason: Option<String>,
    },
    /// Another participant cancelled one of our reasoning sequences.
    ReasoningCancelled {
        /// The context (our `reasoning/start` id).
        context: String,
        /// Who cancelled.
        by: String,
        /// Reason given.
        reason: Option<String>,
    },
    /// A control addressed to us; pause, resume and request-status are handled by the
    /// core, the others wait for the matching `complete_*` call.
    Control {
        /// The control envelope's id (handle for completion).
        id: String,
        /// Sender.
        from: String,
        /// What was asked.
        control: Control,
    },
    /// The pause ended.
    Resumed {
        /// Whether it ended by its timeout rather than a `participant/resume`.
        automatic: bool,
    },
    /// Context usage crossed the soft limit; a `near_limit` status was sent.
    NearLimit {
        /// Tokens used.
        tokens: u64,
        /// Context window.
        max_tokens: u64,
    },
    /// A stream we requested opened.
    StreamOpened {
        /// Our `stream/request` id.
        request_id: String,
        /// The gateway's stream id.
        stream_id: String,
    },
    /// A stream closed.
    StreamClosed {
        /// The stream id.
        stream_id: String,
        /// Reason given.
        reason: Option<String>,
    },
    /// A stream data frame (`#id#data`).
    StreamData {
        /// The stream id.
        stream_id: String,
        /// The data after the second `#`.
        data: String,
    },
    /// A capability grant addressed to us was acknowledged.
    Granted {
        /// The grant envelope id.
        grant_id: String,
        /// Granter.
        from: String,
        /// The granted capabilities.
        capabilities: Value,
    },
    /// A `system/error` not tied to one of our requests.
    GatewayError {
        /// The error payload.
        payload: Value,
    },
}
