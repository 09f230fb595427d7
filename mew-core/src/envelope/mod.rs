//! Envelopes: the one message shape of the protocol (spec section 3).
//!
//! [`Envelope`] is the owned, typed model participants work with. [`RoutingView`] is the
//! gateway's cheap borrowed view of the fields it routes on, keeping the original text so it
//! can be forwarded unchanged. Both parse under [`Limits`] and fail with a [`ParseError`]
//! whose message says what was wrong; neither panics on any input.

mod kind;
mod parse;
mod routing;

pub use kind::{Kind, is_reserved_kind};
pub use parse::{Limits, ParseError, check_depth};
pub use routing::{CorrelationIds, RoutingView, Text};

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// A complete MEW envelope.
///
/// `to: None` means broadcast; `correlation_id` is always a list on the wire this crate
/// writes, and a bare string on input is accepted and normalised into a one-element list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Always `mew/v0.4` for envelopes this crate accepts.
    pub protocol: String,
    /// Globally unique message id.
    pub id: String,
    /// RFC 3339 timestamp; the reference's clients sometimes omit it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<String>,
    /// Sender's participant id.
    pub from: String,
    /// Addressees; `None` (or empty) is a broadcast.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<Vec<String>>,
    /// Message type.
    pub kind: Kind,
    /// Ids of the envelopes this one relates to.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de_correlation"
    )]
    pub correlation_id: Option<Vec<String>>,
    /// Sub-context path (`parent/child`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Kind-specific body; absent for kinds such as `participant/clear`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

fn de_correlation<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<OneOrMany>::deserialize(d)? {
        None => None,
        Some(OneOrMany::One(s)) => Some(vec![s]),
        Some(OneOrMany::Many(v)) => Some(v),
    })
}

impl Envelope {
    /// Parses and validates one envelope from a text frame's bytes.
    pub fn parse(bytes: &[u8], limits: &Limits) -> Result<Envelope, ParseError> {
        parse::parse_envelope(bytes, limits)
    }

    /// Serialises to compact JSON text.
    pub fn to_json(&self) -> String {
        // Serialising a tree of strings and `Value`s cannot fail.
        serde_json::to_string(self).expect("envelope serialises")
    }

    /// Whether `to` is absent or empty.
    pub fn is_broadcast(&self) -> bool {
        self.to.as_ref().is_none_or(|t| t.is_empty())
    }

    /// Whether `participant` is named in `to`, or the envelope is a broadcast.
    pub fn is_for(&self, participant: &str) -> bool {
        self.to
            .as_ref()
            .is_none_or(|t| t.is_empty() || t.iter().any(|p| p == participant))
    }

    /// The first correlation id, the one request/response pairing uses.
    pub fn first_correlation(&self) -> Option<&str> {
        self.correlation_id
            .as_ref()
            .and_then(|c| c.first())
            .map(String::as_str)
    }
}
