//! Why an envelope ([`Refusal`]) or a join ([`JoinRefusal`]) is not accepted: what the
//! `system/error` answering it says, and the HTTP status of a refused post.

use serde_json::Value;

/// Why an envelope was not accepted.
#[derive(Debug)]
pub(super) struct Refusal {
    pub(super) code: &'static str,
    pub(super) message: String,
    /// The offending envelope's id, when it had one.
    pub(super) correlation: Option<String>,
    /// For `capability_violation`: the kind attempted.
    pub(super) attempted_kind: Option<String>,
    /// More fields of the `system/error` payload (`stream_id`, `targets`, ...).
    pub(super) extra: Option<Box<serde_json::Map<String, Value>>>,
}

impl Refusal {
    /// Whether the refused frame is known to be a JSON envelope (it was parsed before the
    /// refusal): only then is it logged as JSON rather than as text.
    pub(super) fn parsed(&self) -> bool {
        !matches!(
            self.code,
            "invalid_envelope" | "rate_limited" | "frame_too_large"
        )
    }

    pub(super) fn new(code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
            correlation: None,
            attempted_kind: None,
            extra: None,
        }
    }

    /// Adds a field to the `system/error` payload.
    pub(super) fn with(mut self, key: &str, value: impl Into<Value>) -> Refusal {
        self.extra
            .get_or_insert_with(Default::default)
            .insert(key.to_owned(), value.into());
        self
    }

    /// The HTTP status of this refusal when it answers a `POST` (the reference's where it
    /// has one).
    pub(super) fn http_status(&self) -> u16 {
        match self.code {
            "invalid_envelope"
            | "reserved_kind"
            | "invalid_participant_id"
            | "invalid_operation"
            | "target_not_found" => 400,
            "already_exists" => 409,
            "stream_not_found" | "participant_not_found" => 404,
            "frame_too_large" => 413,
            "rate_limited" => 429,
            "internal_error" => 500,
            _ => 403,
        }
    }

    pub(super) fn about(mut self, id: Option<&str>) -> Refusal {
        self.correlation = id.map(str::to_owned);
        self
    }

    /// Names the offending envelope.
    pub(super) fn about_id(self, id: &str) -> Refusal {
        self.about(Some(id))
    }
}

/// Why a join was refused.
pub(super) struct JoinRefusal {
    pub(super) code: &'static str,
    pub(super) message: String,
}

pub(super) fn refuse(code: &'static str, message: impl Into<String>) -> JoinRefusal {
    JoinRefusal {
        code,
        message: message.into(),
    }
}
