//! Typed payloads: one struct per kind spec section 3 defines, with the spec's field names.
//!
//! An [`Envelope`](super::Envelope) keeps its payload as raw JSON so unknown kinds and extra
//! fields are forwarded untouched; [`Envelope::typed_payload`](super::Envelope::typed_payload)
//! reads it into these types on demand. Optional fields are `Option` and are left out when
//! `None`. Capability lists stay raw JSON (`Vec<Value>`): compiling them is the receiver's call.
//! Where the spec allows additional fields (`stream/request`, `participant/status`, the
//! vendor hints of the control kinds) they are kept in an `extra` map.

use super::Kind;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use thiserror::Error;

/// Fields a payload carries beyond the ones its struct names.
pub type Extra = BTreeMap<String, Value>;

/// A payload struct bound to the one kind it is the body of.
pub trait KindPayload: Serialize + DeserializeOwned {
    /// The envelope kind this payload belongs to.
    const KIND: Kind;
}

/// Why an envelope's payload does not fit the typed payload of its kind.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PayloadError {
    /// A field is missing or has the wrong type or value.
    #[error("invalid `{kind}` payload: `{field}`: {message}")]
    Field {
        /// The envelope kind.
        kind: String,
        /// Dotted path of the offending field, starting at `payload`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The fields are well typed on their own but break a rule that spans several of them.
    #[error("invalid `{kind}` payload: {message}")]
    Rule {
        /// The envelope kind.
        kind: String,
        /// The rule that was broken.
        message: &'static str,
    },
}

impl PayloadError {
    /// The kind whose payload was rejected.
    pub fn kind(&self) -> &str {
        match self {
            PayloadError::Field { kind, .. } | PayloadError::Rule { kind, .. } => kind,
        }
    }
}

/// A JSON-RPC id: a number or a string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JsonRpcId {
    /// Numeric id, kept exactly as sent.
    Number(serde_json::Number),
    /// String id.
    String(String),
}

/// `mcp/request`: a JSON-RPC request or notification (spec 3.1.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpRequest {
    /// `"2.0"` when sent; MEW does not require it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jsonrpc: Option<String>,
    /// Request id; absent for notifications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<JsonRpcId>,
    /// The MCP method, e.g. `tools/call`.
    pub method: String,
    /// Method parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

/// `mcp/proposal`: the same body as a request, to be fulfilled by someone else (spec 3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpProposal {
    /// `"2.0"` when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jsonrpc: Option<String>,
    /// Request id, if the proposer chose one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<JsonRpcId>,
    /// The MCP method proposed.
    pub method: String,
    /// Method parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

impl From<McpProposal> for McpRequest {
    /// The request that fulfils a proposal carries the proposal's body.
    fn from(p: McpProposal) -> Self {
        McpRequest {
            jsonrpc: p.jsonrpc,
            id: p.id,
            method: p.method,
            params: p.params,
        }
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonRpcError {
    /// JSON-RPC error code, e.g. -32601.
    pub code: i64,
    /// Short description.
    pub message: String,
    /// Extra detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// `mcp/response`: a JSON-RPC response (spec 3.1.2); `result` or `error`, never both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpResponse {
    /// `"2.0"` when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jsonrpc: Option<String>,
    /// The id of the request answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<JsonRpcId>,
    /// The successful result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<JsonRpcError>,
}

/// Declares a payload struct whose only field is an optional `reason`.
macro_rules! reason_only {
    ($($(#[$doc:meta])* $name:ident,)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
        pub struct $name {
            /// Why; the spec suggests codes such as `timeout` or `superseded`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub reason: Option<String>,
        }
    )*};
}

reason_only! {
    /// `mcp/withdraw`: the proposer takes its proposal back (spec 3.3.1).
    McpWithdraw,
    /// `mcp/reject`: a participant declines a proposal (spec 3.3.2).
    McpReject,
    /// `chat/cancel`: an earlier chat message no longer needs attention (spec 3.4.2).
    ChatCancel,
    /// `reasoning/cancel`: a reasoning sequence ends without conclusion (spec 3.5.5).
    ReasoningCancel,
    /// `stream/close`: a stream ends (spec 3.10.4).
    StreamClose,
}

/// `chat`: a chat message (spec 3.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chat {
    /// The message content.
    pub text: String,
    /// `plain` (the default) or `markdown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
}

/// `chat/acknowledge`: receipt of a chat message (spec 3.4.1).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ChatAcknowledge {
    /// E.g. `received` or `read`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// `reasoning/start`: opens a reasoning sequence (spec 3.5.2).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ReasoningStart {
    /// What the reasoning is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `reasoning/thought`: one step of reasoning (spec 3.5.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasoningThought {
    /// The thought.
    pub message: String,
}

/// `reasoning/conclusion`: closes a reasoning sequence (spec 3.5.4).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ReasoningConclusion {
    /// The summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `capability/grant` (spec 3.6.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapabilityGrant {
    /// Participant receiving the capabilities.
    pub recipient: String,
    /// Capability patterns, uncompiled.
    pub capabilities: Vec<Value>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `capability/revoke` by grant id or by pattern (spec 3.6.2); at least one of the two.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapabilityRevoke {
    /// Participant losing the capabilities.
    pub recipient: String,
    /// Id of the grant envelope to undo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
    /// Patterns whose matching capabilities are removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<Value>>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `capability/grant-ack` (spec 3.6.3).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CapabilityGrantAck {
    /// E.g. `accepted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// `space/invite` (spec 3.6.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpaceInvite {
    /// Id of the invited participant.
    pub participant_id: String,
    /// Address to send the invitation to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// Capabilities the participant will have on joining.
    pub initial_capabilities: Vec<Value>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `space/kick` (spec 3.6.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceKick {
    /// Id of the participant removed.
    pub participant_id: String,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `system/presence` event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PresenceEvent {
    /// A participant joined.
    Join,
    /// A participant left.
    Leave,
}

/// A participant as presence and welcome messages describe it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParticipantInfo {
    /// Participant id.
    pub id: String,
    /// Its capabilities (absent on `leave`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<Value>>,
}

/// `system/presence` (spec 3.7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemPresence {
    /// `join` or `leave`.
    pub event: PresenceEvent,
    /// Who.
    pub participant: ParticipantInfo,
}

/// Direction of a stream's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamDirection {
    /// The requester sends.
    Upload,
    /// The requester receives.
    Download,
}

/// A stream listed in a welcome's `active_streams` (spec 3.8.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActiveStream {
    /// The stream's id.
    pub stream_id: String,
    /// Participant that requested it.
    pub owner: String,
    /// Data direction.
    pub direction: StreamDirection,
    /// When it was opened (RFC 3339).
    pub created: String,
    /// Size hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_size_bytes: Option<u64>,
    /// Human-readable purpose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type or format identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// Schema or encoding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Application key-value pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Every other field of the original `stream/request`, preserved.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `system/welcome` (spec 3.8.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemWelcome {
    /// The joiner itself, with its authoritative capabilities.
    pub you: ParticipantInfo,
    /// The other participants.
    pub participants: Vec<ParticipantInfo>,
    /// Streams open in the space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_streams: Option<Vec<ActiveStream>>,
}

/// `system/error` (spec 3.8.2): the capability violation shape, plus room for other errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemError {
    /// Machine-readable code, e.g. `capability_violation` or `invalid_json`.
    pub error: String,
    /// Human-readable explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The kind that was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempted_kind: Option<String>,
    /// The sender's capabilities, to show why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub your_capabilities: Option<Vec<Value>>,
    /// Further detail.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `participant/pause` (spec 3.9.1).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ParticipantPause {
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Resume on one's own after this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
}

/// Declares a payload struct with no standard fields, keeping vendor hints.
macro_rules! hints_only {
    ($($(#[$doc:meta])* $name:ident,)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
        pub struct $name {
            /// Implementation-specific hints.
            #[serde(flatten)]
            pub extra: Extra,
        }
    )*};
}

hints_only! {
    /// `participant/resume` (spec 3.9.2).
    ParticipantResume,
    /// `participant/clear` (spec 3.9.8); usually sent without a payload.
    ParticipantClear,
    /// `participant/restart` (spec 3.9.9).
    ParticipantRestart,
    /// `participant/shutdown` (spec 3.9.10).
    ParticipantShutdown,
}

/// `participant/request-status` (spec 3.9.3).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ParticipantRequestStatus {
    /// The metrics wanted; all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<String>>,
}

/// `participant/status` (spec 3.9.4); further metrics go in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParticipantStatus {
    /// Tokens in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Token ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Envelopes retained in the active context (required by the spec).
    pub messages_in_context: u64,
    /// State word such as `active` or `compacting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Additional snake_case metrics.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Which end of its context a participant trims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForgetDirection {
    /// Drop the oldest data.
    Oldest,
    /// Drop the newest data.
    Newest,
}

/// `participant/forget` (spec 3.9.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParticipantForget {
    /// `oldest` or `newest`.
    pub direction: ForgetDirection,
    /// How many entries to drop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<u64>,
}

/// `participant/compact` (spec 3.9.6).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ParticipantCompact {
    /// Operator context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Desired ceiling after compaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_tokens: Option<u64>,
}

/// `participant/compact-done` (spec 3.9.7).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ParticipantCompactDone {
    /// Tokens reclaimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freed_tokens: Option<u64>,
    /// Messages reclaimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freed_messages: Option<u64>,
    /// E.g. `compacted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Set when nothing was compacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<bool>,
    /// Why it was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `stream/request` (spec 3.10.1); every field is preserved, unknown ones in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamRequest {
    /// `upload` or `download`.
    pub direction: StreamDirection,
    /// Size hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_size_bytes: Option<u64>,
    /// Human-readable purpose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type or format identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// Schema or encoding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Application key-value pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Custom fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `stream/open` (spec 3.10.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamOpen {
    /// Identifier used in `#stream_id#data` frames.
    pub stream_id: String,
    /// E.g. `binary`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    /// Other metadata such as `compression`.
    #[serde(flatten)]
    pub extra: Extra,
}

macro_rules! payloads {
    ($($variant:ident($ty:ty),)*) => {
        /// The typed payload of an envelope, by kind.
        #[derive(Debug, Clone, PartialEq)]
        #[allow(missing_docs)]
        pub enum Payload {
            $($variant($ty),)*
            /// The body of a kind this version does not define, as sent (`Null` when absent).
            Other(Value),
        }

        $(
            impl KindPayload for $ty {
                const KIND: Kind = Kind::$variant;
            }
            impl From<$ty> for Payload {
                fn from(p: $ty) -> Payload {
                    Payload::$variant(p)
                }
            }
        )*

        impl Payload {
            /// Reads `body` as the payload of `kind`; an absent body reads as `{}`.
            pub fn from_value(kind: &Kind, body: Option<&Value>) -> Result<Payload, PayloadError> {
                let empty = Value::Object(Map::new());
                let body = body.unwrap_or(&empty);
                Ok(match kind {
                    $(Kind::$variant => Payload::$variant(read(kind, body)?),)*
                    Kind::Other(_) => Payload::Other(body.clone()),
                })
            }

            /// The kind this payload belongs to; `None` for [`Payload::Other`].
            pub fn kind(&self) -> Option<Kind> {
                match self {
                    $(Payload::$variant(_) => Some(Kind::$variant),)*
                    Payload::Other(_) => None,
                }
            }

            /// The payload as JSON.
            pub fn to_value(&self) -> Value {
                match self {
                    $(Payload::$variant(p) => to_value(p),)*
                    Payload::Other(v) => v.clone(),
                }
            }
        }
    };
}

payloads! {
    McpRequest(McpRequest),
    McpResponse(McpResponse),
    McpProposal(McpProposal),
    McpWithdraw(McpWithdraw),
    McpReject(McpReject),
    ReasoningStart(ReasoningStart),
    ReasoningThought(ReasoningThought),
    ReasoningConclusion(ReasoningConclusion),
    ReasoningCancel(ReasoningCancel),
    CapabilityGrant(CapabilityGrant),
    CapabilityRevoke(CapabilityRevoke),
    CapabilityGrantAck(CapabilityGrantAck),
    SpaceInvite(SpaceInvite),
    SpaceKick(SpaceKick),
    ParticipantPause(ParticipantPause),
    ParticipantResume(ParticipantResume),
    ParticipantStatus(ParticipantStatus),
    ParticipantRequestStatus(ParticipantRequestStatus),
    ParticipantForget(ParticipantForget),
    ParticipantCompact(ParticipantCompact),
    ParticipantCompactDone(ParticipantCompactDone),
    ParticipantClear(ParticipantClear),
    ParticipantRestart(ParticipantRestart),
    ParticipantShutdown(ParticipantShutdown),
    StreamRequest(StreamRequest),
    StreamOpen(StreamOpen),
    StreamClose(StreamClose),
    Chat(Chat),
    ChatAcknowledge(ChatAcknowledge),
    ChatCancel(ChatCancel),
    SystemPresence(SystemPresence),
    SystemWelcome(SystemWelcome),
    SystemError(SystemError),
}

/// Serialises a payload struct; these hold only strings, numbers, maps and `Value`s.
pub(super) fn to_value<P: Serialize>(p: &P) -> Value {
    serde_json::to_value(p).expect("payload structs serialise to JSON")
}

fn read<P: DeserializeOwned + Checked>(kind: &Kind, body: &Value) -> Result<P, PayloadError> {
    // serde would read an array as a struct's fields in order; the spec wants an object.
    if !body.is_object() {
        return Err(PayloadError::Field {
            kind: kind.as_str().to_owned(),
            field: "payload".to_owned(),
            message: "the payload must be a JSON object".to_owned(),
        });
    }
    let p: P = serde_path_to_error::deserialize(body).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let mut field = if path == "." {
            "payload".to_owned()
        } else {
            format!("payload.{path}")
        };
        // serde reports a missing field against its parent; name the field itself.
        if let Some(rest) = inner.strip_prefix("missing field `")
            && let Some(name) = rest.split('`').next()
        {
            field.push('.');
            field.push_str(name);
        }
        PayloadError::Field {
            kind: kind.as_str().to_owned(),
            field,
            message: inner,
        }
    })?;
    p.check().map_err(|message| PayloadError::Rule {
        kind: kind.as_str().to_owned(),
        message,
    })?;
    Ok(p)
}

/// Rules spanning several fields, checked after the fields themselves.
trait Checked {
    fn check(&self) -> Result<(), &'static str> {
        Ok(())
    }
}

impl Checked for McpResponse {
    fn check(&self) -> Result<(), &'static str> {
        if self.result.is_some() && self.error.is_some() {
            return Err("a response carries `result` or `error`, not both");
        }
        Ok(())
    }
}

impl Checked for CapabilityRevoke {
    fn check(&self) -> Result<(), &'static str> {
        if self.grant_id.is_none() && self.capabilities.is_none() {
            return Err("a revoke names a `grant_id` or `capabilities`");
        }
        Ok(())
    }
}

macro_rules! unchecked {
    ($($ty:ty),*) => {$(impl Checked for $ty {})*};
}

unchecked!(
    McpRequest,
    McpProposal,
    McpWithdraw,
    McpReject,
    ReasoningStart,
    ReasoningThought,
    ReasoningConclusion,
    ReasoningCancel,
    CapabilityGrant,
    CapabilityGrantAck,
    SpaceInvite,
    SpaceKick,
    ParticipantPause,
    ParticipantResume,
    ParticipantStatus,
    ParticipantRequestStatus,
    ParticipantForget,
    ParticipantCompact,
    ParticipantCompactDone,
    ParticipantClear,
    ParticipantRestart,
    ParticipantShutdown,
    StreamRequest,
    StreamOpen,
    StreamClose,
    Chat,
    ChatAcknowledge,
    ChatCancel,
    SystemPresence,
    SystemWelcome,
    SystemError
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn typed(kind: &str, body: Value) -> Result<Payload, PayloadError> {
        Payload::from_value(&Kind::parse(kind), Some(&body))
    }

    #[test]
    fn errors_name_kind_and_field() {
        let e = typed("chat", json!({"format": "plain"})).unwrap_err();
        assert_eq!(e.kind(), "chat");
        assert!(matches!(&e, PayloadError::Field { field, .. } if field == "payload.text"));
        let e = typed(
            "system/presence",
            json!({"event": "join", "participant": {"id": 7}}),
        )
        .unwrap_err();
        assert!(
            matches!(&e, PayloadError::Field { field, .. } if field == "payload.participant.id"),
            "{e}"
        );
        let e = typed("participant/forget", json!({"direction": "sideways"})).unwrap_err();
        assert!(matches!(&e, PayloadError::Field { field, .. } if field == "payload.direction"));
        assert!(e.to_string().contains("participant/forget"));
        let e = typed("chat", json!(["hi"])).unwrap_err();
        assert!(matches!(&e, PayloadError::Field { field, .. } if field == "payload"));
    }

    #[test]
    fn cross_field_rules() {
        let e = typed(
            "mcp/response",
            json!({"result": {}, "error": {"code": 1, "message": "x"}}),
        )
        .unwrap_err();
        assert!(matches!(e, PayloadError::Rule { .. }));
        let e = typed("capability/revoke", json!({"recipient": "a"})).unwrap_err();
        assert!(matches!(e, PayloadError::Rule { .. }));
        assert!(
            typed(
                "capability/revoke",
                json!({"recipient": "a", "grant_id": "g"})
            )
            .is_ok()
        );
    }

    #[test]
    fn extra_fields_preserved_where_allowed() {
        let body = json!({"direction": "upload", "x_custom": [1, 2], "format": "jsonl"});
        let Payload::StreamRequest(r) = typed("stream/request", body.clone()).unwrap() else {
            panic!("wrong variant")
        };
        assert_eq!(r.extra["x_custom"], json!([1, 2]));
        assert_eq!(to_value(&r), body);
        let body = json!({"messages_in_context": 3, "latency_ms": 350});
        let p = typed("participant/status", body.clone()).unwrap();
        assert_eq!(p.to_value(), body);
        // Absent payload is fine where nothing is required, an error where something is.
        assert!(Payload::from_value(&Kind::ParticipantClear, None).is_ok());
        assert!(Payload::from_value(&Kind::ParticipantStatus, None).is_err());
    }

    #[test]
    fn jsonrpc_ids_keep_their_type() {
        let Payload::McpRequest(r) = typed(
            "mcp/request",
            json!({"jsonrpc": "2.0", "id": 42, "method": "tools/list"}),
        )
        .unwrap() else {
            panic!("wrong variant")
        };
        assert_eq!(r.id, Some(JsonRpcId::Number(42.into())));
        let Payload::McpProposal(p) =
            typed("mcp/proposal", json!({"id": "a", "method": "m"})).unwrap()
        else {
            panic!("wrong variant")
        };
        assert_eq!(p.id, Some(JsonRpcId::String("a".into())));
        assert!(typed("mcp/request", json!({"id": [1], "method": "m"})).is_err());
    }

    #[test]
    fn unknown_kinds_are_other() {
        let p = typed("game/move", json!({"x": 1})).unwrap();
        assert_eq!(p, Payload::Other(json!({"x": 1})));
        assert_eq!(p.kind(), None);
        assert_eq!(
            Payload::from(Chat {
                text: "t".into(),
                format: None
            })
            .kind(),
            Some(Kind::Chat)
        );
    }
}
