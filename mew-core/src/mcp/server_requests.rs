//! Answers to requests the server sends the client.

use super::jsonrpc::{RpcError, codes};
use serde::Serialize;
use serde_json::{Value, json};

/// A filesystem root the client exposes through `roots/list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Root {
    /// A `file://` URI.
    pub uri: String,
    /// A human-readable name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The result (or error) for a server-to-client request. The client declares only the
/// `roots` capability, so `ping` and `roots/list` are all it answers; sampling, elicitation
/// and anything else get "method not found", which servers treat as "not supported".
pub(crate) fn answer(method: &str, roots: &[Root]) -> Result<Value, RpcError> {
    match method {
        "ping" => Ok(json!({})),
        "roots/list" => Ok(json!({ "roots": roots })),
        other => Err(RpcError::new(
            codes::METHOD_NOT_FOUND,
            format!("Method not found: {other}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_ping_roots_and_refuses_the_rest() {
        assert_eq!(answer("ping", &[]), Ok(json!({})));
        let roots = [Root {
            uri: "file:///tmp".into(),
            name: None,
        }];
        assert_eq!(
            answer("roots/list", &roots),
            Ok(json!({"roots":[{"uri":"file:///tmp"}]}))
        );
        assert_eq!(
            answer("sampling/createMessage", &[]).unwrap_err().code,
            codes::METHOD_NOT_FOUND
        );
    }
}
