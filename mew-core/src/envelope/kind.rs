//! The `kind` field: every kind spec section 3 lists, plus an open variant.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

macro_rules! kinds {
    ($($variant:ident => $text:literal,)*) => {
        /// An envelope's `kind`. Unknown kinds are kept verbatim in [`Kind::Other`] and
        /// forwarded like any other: an unfamiliar kind is never an error by itself.
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Kind {
            $(#[doc = concat!("`", $text, "`")] $variant,)*
            /// A kind this version does not define (kept as sent).
            Other(String),
        }

        impl Kind {
            /// The kind's wire text.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Kind::$variant => $text,)*
                    Kind::Other(s) => s,
                }
            }

            /// The wire text of a known kind; `"other"` for a kind this version does not
            /// define (for labels that must not grow with what senders invent).
            pub fn static_str(&self) -> &'static str {
                match self {
                    $(Kind::$variant => $text,)*
                    Kind::Other(_) => "other",
                }
            }

            /// The known kind with this wire text, if there is one (no allocation).
            pub fn known(text: &str) -> Option<Kind> {
                match text {
                    $($text => Some(Kind::$variant),)*
                    _ => None,
                }
            }

            /// Every kind the spec defines, in spec order.
            pub const ALL_KNOWN: &'static [Kind] = &[$(Kind::$variant,)*];
        }
    };
}

kinds! {
    McpRequest => "mcp/request",
    McpResponse => "mcp/response",
    McpProposal => "mcp/proposal",
    McpWithdraw => "mcp/withdraw",
    McpReject => "mcp/reject",
    ReasoningStart => "reasoning/start",
    ReasoningThought => "reasoning/thought",
    ReasoningConclusion => "reasoning/conclusion",
    ReasoningCancel => "reasoning/cancel",
    CapabilityGrant => "capability/grant",
    CapabilityRevoke => "capability/revoke",
    CapabilityGrantAck => "capability/grant-ack",
    SpaceInvite => "space/invite",
    SpaceKick => "space/kick",
    ParticipantPause => "participant/pause",
    ParticipantResume => "participant/resume",
    ParticipantStatus => "participant/status",
    ParticipantRequestStatus => "participant/request-status",
    ParticipantForget => "participant/forget",
    ParticipantCompact => "participant/compact",
    ParticipantCompactDone => "participant/compact-done",
    ParticipantClear => "participant/clear",
    ParticipantRestart => "participant/restart",
    ParticipantShutdown => "participant/shutdown",
    StreamRequest => "stream/request",
    StreamOpen => "stream/open",
    StreamClose => "stream/close",
    Chat => "chat",
    ChatAcknowledge => "chat/acknowledge",
    ChatCancel => "chat/cancel",
    SystemPresence => "system/presence",
    SystemWelcome => "system/welcome",
    SystemError => "system/error",
}

impl Kind {
    /// Parses wire text; unknown text becomes [`Kind::Other`].
    pub fn parse(text: &str) -> Kind {
        Kind::known(text).unwrap_or_else(|| Kind::Other(text.to_owned()))
    }

    /// `system/*` is reserved for the gateway (spec 4.1); participants must not send it.
    pub fn is_reserved(&self) -> bool {
        is_reserved_kind(self.as_str())
    }

    /// Kinds a paused participant may still send (spec 3.9.1): those that finish or
    /// acknowledge work instead of starting it. The gateway enforces this list and a
    /// participant holds back everything else while paused, so the two cannot disagree.
    pub const PAUSE_EXEMPT: &'static [Kind] = &[
        Kind::ChatAcknowledge,
        Kind::ChatCancel,
        Kind::McpWithdraw,
        Kind::McpResponse,
        Kind::ReasoningCancel,
        Kind::CapabilityGrantAck,
        Kind::ParticipantStatus,
        Kind::ParticipantCompactDone,
        Kind::StreamClose,
    ];

    /// Kinds a shut-down participant may still send until it rejoins.
    pub const SHUTDOWN_EXEMPT: &'static [Kind] = &[Kind::ChatAcknowledge, Kind::ParticipantStatus];

    /// Whether a paused participant may still send this kind ([`Kind::PAUSE_EXEMPT`]).
    pub fn is_pause_exempt(&self) -> bool {
        Kind::PAUSE_EXEMPT.contains(self)
    }
}

/// Whether only the gateway may send a kind: the `system/` namespace, and the
/// acknowledgements it writes for invites and stream write access (a participant forging
/// one could hand out a false token or a false list of writers).
pub fn is_reserved_kind(text: &str) -> bool {
    text.starts_with("system/")
        || matches!(
            text,
            "space/invite-ack"
                | "stream/write-granted"
                | "stream/write-revoked"
                | "stream/ownership-transferred"
        )
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for Kind {
    fn from(s: &str) -> Self {
        Kind::parse(s)
    }
}

impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Kind;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a kind string such as \"chat\" or \"mcp/request\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Kind, E> {
                Ok(Kind::parse(v))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_kind_round_trips() {
        for k in Kind::ALL_KNOWN {
            assert_eq!(&Kind::parse(k.as_str()), k);
        }
        assert_eq!(Kind::ALL_KNOWN.len(), 33);
    }

    #[test]
    fn unknown_kinds_are_kept() {
        let k = Kind::parse("game/move");
        assert_eq!(k, Kind::Other("game/move".into()));
        assert_eq!(k.as_str(), "game/move");
        assert!(!k.is_reserved());
        assert!(Kind::parse("system/register").is_reserved());
        assert!(Kind::SystemWelcome.is_reserved());
    }
}
