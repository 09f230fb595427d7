//! Envelopes: the one message shape of the protocol (spec section 3).
//!
//! [`Envelope`] is the owned, typed model participants work with. [`RoutingView`] is the
//! gateway's cheap borrowed view of the fields it routes on, keeping the original text so it
//! can be forwarded unchanged. Both parse under [`Limits`] and fail with a [`ParseError`]
//! whose message says what was wrong; neither panics on any input.

mod frame;
mod kind;
mod parse;
mod routing;

pub use frame::{FrameError, FrameKind, MAX_STREAM_ID_BYTES, StreamFrame};
pub use kind::{Kind, is_reserved_kind};
pub use parse::{Limits, ParseError, SERDE_MAX_DEPTH, check_depth};
pub use routing::{CorrelationIds, RoutingView, Text};

use crate::Time;

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
    // A visitor rather than an untagged enum, which would buffer the value first.
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Option<Vec<String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string or an array of strings")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(vec![v.to_owned()]))
        }
        fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(vec![v]))
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(1).min(16));
            while let Some(id) = seq.next_element::<String>()? {
                out.push(id);
            }
            Ok(Some(out))
        }
    }
    d.deserialize_any(V)
}

impl Envelope {
    /// An envelope of any kind, including ones this version does not define.
    pub fn with_kind(
        id: impl Into<String>,
        from: impl Into<String>,
        kind: Kind,
        payload: Option<Value>,
        now: Time,
    ) -> Envelope {
        Envelope {
            protocol: crate::PROTOCOL.to_owned(),
            id: id.into(),
            ts: Some(now.rfc3339()),
            from: from.into(),
            to: None,
            kind,
            correlation_id: None,
            context: None,
            payload,
        }
    }

    /// Addresses the envelope to `to` (an empty list is a broadcast).
    pub fn to<I, S>(mut self, to: I) -> Envelope
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.to = Some(to.into_iter().map(Into::into).collect());
        self
    }

    /// Relates the envelope to `ids`.
    pub fn correlate<I, S>(mut self, ids: I) -> Envelope
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.correlation_id = Some(ids.into_iter().map(Into::into).collect());
        self
    }

    /// Places the envelope in a sub-context.
    pub fn in_context(mut self, context: impl Into<String>) -> Envelope {
        self.context = Some(context.into());
        self
    }

    /// Parses and validates one envelope from a text frame's bytes.
    ///
    /// Unknown top-level fields are dropped; being dropped unread, they are not held to
    /// [`Limits::max_depth`] unless a limit below [`SERDE_MAX_DEPTH`] is configured (which
    /// scans the whole frame). Everything the envelope keeps is.
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builds_envelopes() {
        let now = Time::from_unix_millis(1_736_416_800_000);
        let env = Envelope::with_kind(
            "e1",
            "alice",
            Kind::Chat,
            Some(json!({"text": "hi", "format": "markdown"})),
            now,
        )
        .to(["bob"])
        .correlate(["c0"])
        .in_context("r1");
        assert_eq!(
            serde_json::from_str::<Value>(&env.to_json()).unwrap(),
            json!({"protocol": "mew/v0.4", "id": "e1", "ts": "2025-01-09T10:00:00.000Z",
                   "from": "alice", "to": ["bob"], "kind": "chat", "correlation_id": ["c0"],
                   "context": "r1", "payload": {"text": "hi", "format": "markdown"}})
        );
        assert_eq!(
            Envelope::parse(env.to_json().as_bytes(), &Limits::default()).unwrap(),
            env
        );

        let clear = Envelope::with_kind("e2", "o", Kind::ParticipantClear, None, now);
        assert_eq!(clear.kind, Kind::ParticipantClear);
        assert!(!clear.to_json().contains("payload"));

        let other = Envelope::with_kind(
            "e3",
            "o",
            Kind::parse("game/move"),
            Some(json!({"x": 1})),
            now,
        );
        assert_eq!(other.kind.as_str(), "game/move");
        assert_eq!(
            Envelope::parse(other.to_json().as_bytes(), &Limits::default()).unwrap(),
            other
        );
    }

    #[test]
    fn deep_unknown_fields_are_dropped_by_the_envelope_refused_by_the_view() {
        let text = format!(
            r#"{{"protocol":"mew/v0.4","id":"a","from":"x","kind":"chat","x":{}{}}}"#,
            "[".repeat(500),
            "]".repeat(500)
        );
        let env = Envelope::parse(text.as_bytes(), &Limits::default()).unwrap();
        assert!(!env.to_json().contains('['));
        assert_eq!(
            RoutingView::parse(text.as_bytes(), &Limits::default()).unwrap_err(),
            ParseError::TooDeep {
                max: SERDE_MAX_DEPTH
            }
        );
        let strict = Limits {
            max_depth: 64,
            ..Limits::default()
        };
        assert_eq!(
            Envelope::parse(text.as_bytes(), &strict).unwrap_err(),
            ParseError::TooDeep { max: 64 }
        );
    }
}
