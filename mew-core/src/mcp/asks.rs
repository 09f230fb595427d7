//! A server's questions to the client's owner: elicitation (form or URL mode) and sampling,
//! whether sent as a server request (2025 revisions) or inside an `input_required` result
//! (2026-07-28), and the answers that go back.

use super::jsonrpc::{RpcError, codes};
use crate::schema::Schema;
use serde_json::{Map, Value, json};

/// Identifies an open question, for [`super::McpClient::answer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AskId(pub u64);

/// What the server asks.
#[derive(Debug, Clone, PartialEq)]
pub enum Ask {
    /// `elicitation/create`: information from a person.
    Elicitation(Elicitation),
    /// `sampling/createMessage`: a model completion, passed on unread.
    Sampling {
        /// The request's params.
        params: Value,
    },
    /// `roots/list`: the roots of whoever caused the call. Handed to the owner only when
    /// [`AskPolicy::roots`](super::AskPolicy::roots) is on; a refusal, or no answer in time,
    /// is answered with the client's own roots.
    Roots,
}

/// An elicitation request.
#[derive(Debug, Clone, PartialEq)]
pub struct Elicitation {
    /// What to tell the person.
    pub message: String,
    /// A form to fill in, or a page to open.
    pub mode: ElicitationMode,
}

/// The two kinds of elicitation.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitationMode {
    /// Fill in a form whose fields `requested_schema` (a flat object schema) describes.
    Form {
        /// The schema of the answer.
        requested_schema: Value,
    },
    /// Open `url` (the answer itself happens out of band).
    Url {
        /// The page.
        url: String,
        /// The server's id of this elicitation.
        elicitation_id: Option<String>,
    },
}

/// The owner's answer to an [`Ask`].
#[derive(Debug, Clone, PartialEq)]
pub enum AskAnswer {
    /// Elicitation accepted; `content` is the form's values (none for URL mode). Omitted
    /// fields take the schema's defaults, and the result must satisfy the schema.
    Accept(Option<Map<String, Value>>),
    /// Elicitation declined by the person.
    Decline,
    /// Elicitation dismissed without a choice.
    Cancel,
    /// Sampling answered with this `CreateMessageResult`.
    Sampled(Value),
    /// Refused (sampling, or anything that cannot be answered), with a reason the server sees.
    Refuse(String),
    /// Roots answered with this `ListRootsResult` (`{"roots": [{"uri": ...}, ...]}`).
    Roots(Value),
}

/// Why an answer does not fit its question; the question stays open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// No open question has this id.
    #[error("no open question {0:?}")]
    Unknown(AskId),
    /// The answer is of the wrong kind (e.g. `Sampled` for an elicitation).
    #[error("this answer does not fit a {0} request")]
    WrongKind(&'static str),
    /// The form's content breaks the requested schema.
    #[error("the answer does not match the requested schema: {0}")]
    Invalid(String),
}

/// The JSON-RPC code a refused sampling request gets (what the MCP SDKs send for "user
/// rejected sampling request").
pub const SAMPLING_REFUSED: i64 = -1;

/// Reads a server request as a question for the owner. `Ok(None)`: not a question (`ping`,
/// ... are answered without asking anyone); `Err`: a malformed question,
/// answered with that error at once.
pub fn parse_ask(method: &str, params: Option<&Value>) -> Result<Option<Ask>, RpcError> {
    match method {
        "elicitation/create" => parse_elicitation(params).map(|e| Some(Ask::Elicitation(e))),
        "sampling/createMessage" => Ok(Some(Ask::Sampling {
            params: params.cloned().unwrap_or_else(|| json!({})),
        })),
        "roots/list" => Ok(Some(Ask::Roots)),
        _ => Ok(None),
    }
}

fn invalid(msg: &str) -> RpcError {
    RpcError::new(codes::INVALID_PARAMS, format!("invalid elicitation: {msg}"))
}

fn parse_elicitation(params: Option<&Value>) -> Result<Elicitation, RpcError> {
    let p = params
        .and_then(Value::as_object)
        .ok_or_else(|| invalid("params missing"))?;
    let message = p
        .get("message")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("message missing"))?
        .to_owned();
    let mode = match p.get("mode").and_then(Value::as_str).unwrap_or("form") {
        "form" => {
            let schema = p
                .get("requestedSchema")
                .cloned()
                .ok_or_else(|| invalid("requestedSchema missing"))?;
            if schema.get("type").and_then(Value::as_str) != Some("object") {
                return Err(invalid("requestedSchema is not an object schema"));
            }
            // A schema that cannot be checked could not hold its answer to account.
            Schema::compile(&schema).map_err(|e| invalid(&format!("requestedSchema: {e}")))?;
            ElicitationMode::Form {
                requested_schema: schema,
            }
        }
        "url" => ElicitationMode::Url {
            url: p
                .get("url")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("url missing"))?
                .to_owned(),
            elicitation_id: p
                .get("elicitationId")
                .and_then(Value::as_str)
                .map(str::to_owned),
        },
        other => return Err(invalid(&format!("unknown mode {other:?}"))),
    };
    Ok(Elicitation { message, mode })
}

/// The wire answer to `ask`: a result, or the error to send. `Err(AnswerError)` when the
/// answer does not fit, which leaves the question open.
pub fn answer_result(ask: &Ask, answer: AskAnswer) -> Result<Result<Value, RpcError>, AnswerError> {
    match (ask, answer) {
        (Ask::Elicitation(e), AskAnswer::Accept(content)) => match &e.mode {
            ElicitationMode::Form { requested_schema } => {
                let mut content = content.unwrap_or_default();
                Schema::fill_defaults(requested_schema, &mut content);
                let content = Value::Object(content);
                // Compiled once already when the question arrived.
                let schema = Schema::compile(requested_schema)
                    .map_err(|e| AnswerError::Invalid(e.to_string()))?;
                schema
                    .validate(&content)
                    .map_err(|v| AnswerError::Invalid(v.to_string()))?;
                Ok(Ok(json!({"action":"accept","content":content})))
            }
            ElicitationMode::Url { .. } => Ok(Ok(json!({"action":"accept"}))),
        },
        (Ask::Elicitation(_), AskAnswer::Decline) => Ok(Ok(json!({"action":"decline"}))),
        (Ask::Elicitation(_), AskAnswer::Cancel | AskAnswer::Refuse(_)) => {
            Ok(Ok(json!({"action":"cancel"})))
        }
        (Ask::Elicitation(_), AskAnswer::Sampled(_) | AskAnswer::Roots(_)) => {
            Err(AnswerError::WrongKind("elicitation"))
        }
        (Ask::Sampling { .. }, AskAnswer::Sampled(v)) => {
            if !v.is_object() {
                return Err(AnswerError::Invalid(
                    "a sampling result is an object".into(),
                ));
            }
            Ok(Ok(v))
        }
        (Ask::Sampling { .. }, AskAnswer::Refuse(reason)) => {
            Ok(Err(RpcError::new(SAMPLING_REFUSED, reason)))
        }
        (Ask::Sampling { .. }, AskAnswer::Decline | AskAnswer::Cancel) => Ok(Err(RpcError::new(
            SAMPLING_REFUSED,
            "sampling request declined",
        ))),
        (Ask::Sampling { .. }, AskAnswer::Accept(_) | AskAnswer::Roots(_)) => {
            Err(AnswerError::WrongKind("sampling"))
        }
        (Ask::Roots, AskAnswer::Roots(v)) => {
            let roots = v
                .get("roots")
                .and_then(Value::as_array)
                .ok_or_else(|| AnswerError::Invalid("a roots result has a `roots` array".into()))?;
            if let Some(bad) = roots
                .iter()
                .find(|r| r.get("uri").and_then(Value::as_str).is_none())
            {
                return Err(AnswerError::Invalid(format!(
                    "a root without a `uri`: {bad}"
                )));
            }
            Ok(Ok(v))
        }
        // The client answers with its own roots instead (see `McpClient::answer`).
        (Ask::Roots, _) => Err(AnswerError::WrongKind("roots")),
    }
}

/// The answer given when nobody answers in time: an elicitation is cancelled, sampling
/// refused.
pub(crate) fn unanswered(reason: &str) -> AskAnswer {
    AskAnswer::Refuse(reason.to_owned())
}

impl Ask {
    /// The request method this question came as.
    pub fn method(&self) -> &'static str {
        match self {
            Ask::Elicitation(_) => "elicitation/create",
            Ask::Sampling { .. } => "sampling/createMessage",
            Ask::Roots => "roots/list",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The elicitation of the conformance suite's `elicitation-sep1034-client-defaults`
    /// scenario: every field optional, each with a default.
    fn defaults_request() -> Value {
        json!({
            "message": "Test client default value handling - please accept with defaults",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "name": {"type":"string","description":"User name","default":"John Doe"},
                    "age": {"type":"integer","description":"User age","default":30},
                    "score": {"type":"number","description":"User score","default":95.5},
                    "status": {"type":"string","description":"User status","enum":["active","inactive","pending"],"default":"active"},
                    "verified": {"type":"boolean","description":"Verification status","default":true}
                },
                "required": []
            }
        })
    }

    #[test]
    fn accepting_an_empty_form_applies_the_defaults() {
        let ask = parse_ask("elicitation/create", Some(&defaults_request()))
            .unwrap()
            .unwrap();
        let Ask::Elicitation(e) = &ask else { panic!() };
        assert!(e.message.starts_with("Test client default"));
        let r = answer_result(&ask, AskAnswer::Accept(None))
            .unwrap()
            .unwrap();
        assert_eq!(
            r,
            json!({"action":"accept","content":{
                "name":"John Doe","age":30,"score":95.5,"status":"active","verified":true}})
        );
        // Given values win over defaults.
        let mut c = Map::new();
        c.insert("age".into(), json!(41));
        let r = answer_result(&ask, AskAnswer::Accept(Some(c)))
            .unwrap()
            .unwrap();
        assert_eq!(r["content"]["age"], 41);
        assert_eq!(r["content"]["name"], "John Doe");
    }

    #[test]
    fn answers_breaking_the_schema_are_refused_and_name_the_rule() {
        let ask = parse_ask("elicitation/create", Some(&defaults_request()))
            .unwrap()
            .unwrap();
        let mut c = Map::new();
        c.insert("status".into(), json!("asleep"));
        let err = answer_result(&ask, AskAnswer::Accept(Some(c))).unwrap_err();
        assert!(
            matches!(&err, AnswerError::Invalid(m) if m.contains("/status") && m.contains("enum")),
            "{err}"
        );
        let mut c = Map::new();
        c.insert("age".into(), json!("thirty"));
        assert!(answer_result(&ask, AskAnswer::Accept(Some(c))).is_err());
        assert_eq!(
            answer_result(&ask, AskAnswer::Sampled(json!({}))),
            Err(AnswerError::WrongKind("elicitation"))
        );
    }

    #[test]
    fn decline_cancel_and_url_mode() {
        let ask = parse_ask(
            "elicitation/create",
            Some(&json!({"mode":"url","message":"Sign in","url":"https://x.example/a","elicitationId":"e1"})),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            ask,
            Ask::Elicitation(Elicitation {
                message: "Sign in".into(),
                mode: ElicitationMode::Url {
                    url: "https://x.example/a".into(),
                    elicitation_id: Some("e1".into())
                }
            })
        );
        assert_eq!(
            answer_result(&ask, AskAnswer::Accept(None)),
            Ok(Ok(json!({"action":"accept"})))
        );
        assert_eq!(
            answer_result(&ask, AskAnswer::Decline),
            Ok(Ok(json!({"action":"decline"})))
        );
        assert_eq!(
            answer_result(&ask, AskAnswer::Cancel),
            Ok(Ok(json!({"action":"cancel"})))
        );
    }

    #[test]
    fn sampling_is_refused_with_a_reason_or_answered() {
        let ask = parse_ask("sampling/createMessage", Some(&json!({"messages":[]})))
            .unwrap()
            .unwrap();
        let refused = answer_result(&ask, unanswered("no participant may answer sampling"))
            .unwrap()
            .unwrap_err();
        assert_eq!(refused.code, SAMPLING_REFUSED);
        assert_eq!(refused.message, "no participant may answer sampling");
        let r = json!({"role":"assistant","content":{"type":"text","text":"hi"},"model":"m"});
        assert_eq!(
            answer_result(&ask, AskAnswer::Sampled(r.clone())),
            Ok(Ok(r))
        );
    }

    #[test]
    fn malformed_elicitations_and_non_questions() {
        assert_eq!(parse_ask("ping", None), Ok(None));
        assert_eq!(parse_ask("roots/list", None), Ok(Some(Ask::Roots)));
        for bad in [
            json!({}),
            json!({"message":"m"}),
            json!({"message":"m","requestedSchema":{"type":"string"}}),
            json!({"message":"m","mode":"url"}),
            json!({"message":"m","mode":"telepathy"}),
            json!({"message":"m","requestedSchema":{"type":"object","properties":{"a":{"pattern":"("}}}}),
        ] {
            let e = parse_ask("elicitation/create", Some(&bad)).unwrap_err();
            assert_eq!(e.code, codes::INVALID_PARAMS, "{bad}");
        }
    }
}
