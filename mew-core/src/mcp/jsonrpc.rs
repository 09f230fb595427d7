//! JSON-RPC 2.0 messages as MCP's stdio transport carries them.
//!
//! Parsing is tolerant where the specification lets peers differ (a missing `jsonrpc` member,
//! batches) and strict where a mistake would misroute a reply (ids, result versus error).

use serde::Serialize;
use serde_json::{Map, Value};
use std::fmt;

/// Standard JSON-RPC error codes.
pub mod codes {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON sent is not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid method parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal JSON-RPC error.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// MCP's "request timed out" (the TypeScript SDK's `RequestTimeout`).
    pub const REQUEST_TIMEOUT: i64 = -32001;
    /// MCP's "connection closed" (the TypeScript SDK's `ConnectionClosed`).
    pub const CONNECTION_CLOSED: i64 = -32000;
}

/// A request id as a peer sent it: a number or a string, echoed back unchanged.
#[derive(Debug, Clone, PartialEq)]
pub enum RpcId {
    /// A numeric id (kept as JSON so non-integers round-trip exactly).
    Number(serde_json::Number),
    /// A string id.
    String(String),
}

impl RpcId {
    fn from_value(v: Value) -> Option<RpcId> {
        match v {
            Value::Number(n) => Some(RpcId::Number(n)),
            Value::String(s) => Some(RpcId::String(s)),
            _ => None,
        }
    }

    /// The id as an unsigned integer, if it is one (ids this client sends always are).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            RpcId::Number(n) => n.as_u64(),
            RpcId::String(_) => None,
        }
    }
}

impl fmt::Display for RpcId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcId::Number(n) => write!(f, "{n}"),
            RpcId::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl Serialize for RpcId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RpcId::Number(n) => n.serialize(s),
            RpcId::String(v) => v.serialize(s),
        }
    }
}

/// The `error` member of a JSON-RPC response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RpcError {
    /// Error code (see [`codes`]).
    pub code: i64,
    /// Short description.
    pub message: String,
    /// Optional structured detail, passed through untouched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error without `data`.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    fn from_value(v: Value) -> Option<RpcError> {
        let Value::Object(mut m) = v else { return None };
        let code = m.get("code")?.as_i64()?;
        let message = match m.remove("message") {
            Some(Value::String(s)) => s,
            // Some servers omit or mistype it; the code still carries the meaning.
            _ => String::new(),
        };
        Some(RpcError {
            code,
            message,
            data: m.remove("data"),
        })
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code, self.message)
    }
}

/// One JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum RpcMessage {
    /// A call expecting a response.
    Request {
        /// Id to echo in the response.
        id: RpcId,
        /// Method name.
        method: String,
        /// Parameters, if any.
        params: Option<Value>,
    },
    /// A call expecting no response.
    Notification {
        /// Method name.
        method: String,
        /// Parameters, if any.
        params: Option<Value>,
    },
    /// The answer to a request.
    Response {
        /// The request's id.
        id: RpcId,
        /// `result` or `error`.
        outcome: Result<Value, RpcError>,
    },
}

/// Why a line is not a JSON-RPC message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcDecodeError {
    /// The line is not valid JSON (often a log line printed to stdout).
    #[error("not JSON: {0}")]
    NotJson(String),
    /// Valid JSON, but not a JSON-RPC 2.0 message.
    #[error("not a JSON-RPC 2.0 message: {0}")]
    NotJsonRpc(&'static str),
}

/// A decoded line: one message or a batch (each element decoded on its own).
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A single message.
    Single(RpcMessage),
    /// A batch; bad elements do not spoil good ones.
    Batch(Vec<Result<RpcMessage, RpcDecodeError>>),
}

/// Decodes one line of the stdio transport.
pub fn decode(line: &[u8]) -> Result<Decoded, RpcDecodeError> {
    let v: Value =
        serde_json::from_slice(line).map_err(|e| RpcDecodeError::NotJson(e.to_string()))?;
    match v {
        Value::Array(items) if items.is_empty() => Err(RpcDecodeError::NotJsonRpc("empty batch")),
        Value::Array(items) => Ok(Decoded::Batch(
            items.into_iter().map(message_from_value).collect(),
        )),
        other => message_from_value(other).map(Decoded::Single),
    }
}

fn message_from_value(v: Value) -> Result<RpcMessage, RpcDecodeError> {
    let Value::Object(mut m) = v else {
        return Err(RpcDecodeError::NotJsonRpc("not an object"));
    };
    match m.get("jsonrpc") {
        None => {}
        Some(Value::String(s)) if s == "2.0" => {}
        Some(_) => return Err(RpcDecodeError::NotJsonRpc("jsonrpc is not \"2.0\"")),
    }
    let id = match m.remove("id") {
        None | Some(Value::Null) => None,
        Some(v) => Some(RpcId::from_value(v).ok_or(RpcDecodeError::NotJsonRpc(
            "id is neither a number nor a string",
        ))?),
    };
    match m.remove("method") {
        Some(Value::String(method)) => {
            let params = m.remove("params");
            Ok(match id {
                Some(id) => RpcMessage::Request { id, method, params },
                None => RpcMessage::Notification { method, params },
            })
        }
        Some(_) => Err(RpcDecodeError::NotJsonRpc("method is not a string")),
        None => {
            let id = id.ok_or(RpcDecodeError::NotJsonRpc("neither method nor id"))?;
            let outcome = response_outcome(&mut m)?;
            Ok(RpcMessage::Response { id, outcome })
        }
    }
}

fn response_outcome(m: &mut Map<String, Value>) -> Result<Result<Value, RpcError>, RpcDecodeError> {
    if let Some(e) = m.remove("error") {
        return RpcError::from_value(e)
            .map(Err)
            .ok_or(RpcDecodeError::NotJsonRpc("error lacks an integer code"));
    }
    m.remove("result").map(Ok).ok_or(RpcDecodeError::NotJsonRpc(
        "response without result or error",
    ))
}

#[derive(Serialize)]
struct OutRequest<'a> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a Value>,
}

#[derive(Serialize)]
struct OutNotification<'a> {
    jsonrpc: &'static str,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a Value>,
}

#[derive(Serialize)]
struct OutResponse<'a> {
    jsonrpc: &'static str,
    id: &'a RpcId,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RpcError>,
}

fn line(v: &impl Serialize) -> String {
    // serde_json escapes control characters inside strings, so the text never holds a raw
    // newline and one message stays one line. Serialising these shapes cannot fail.
    let mut s = serde_json::to_string(v).expect("JSON-RPC message serialises");
    s.push('\n');
    s
}

/// A request line (newline included).
pub fn request_line(id: u64, method: &str, params: Option<&Value>) -> String {
    line(&OutRequest {
        jsonrpc: "2.0",
        id,
        method,
        params,
    })
}

/// A notification line (newline included).
pub fn notification_line(method: &str, params: Option<&Value>) -> String {
    line(&OutNotification {
        jsonrpc: "2.0",
        method,
        params,
    })
}

/// A response line (newline included).
pub fn response_line(id: &RpcId, outcome: Result<&Value, &RpcError>) -> String {
    let (result, error) = match outcome {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e)),
    };
    line(&OutResponse {
        jsonrpc: "2.0",
        id,
        result,
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn single(line: &str) -> RpcMessage {
        match decode(line.as_bytes()).unwrap() {
            Decoded::Single(m) => m,
            other => panic!("expected one message, got {other:?}"),
        }
    }

    #[test]
    fn decodes_the_three_shapes() {
        assert_eq!(
            single(r#"{"jsonrpc":"2.0","id":0,"method":"roots/list"}"#),
            RpcMessage::Request {
                id: RpcId::Number(0.into()),
                method: "roots/list".into(),
                params: None
            }
        );
        assert_eq!(
            single(r#"{"method":"notifications/tools/list_changed","jsonrpc":"2.0"}"#),
            RpcMessage::Notification {
                method: "notifications/tools/list_changed".into(),
                params: None
            }
        );
        assert_eq!(
            single(r#"{"result":{"a":1},"jsonrpc":"2.0","id":7}"#),
            RpcMessage::Response {
                id: RpcId::Number(7.into()),
                outcome: Ok(json!({"a":1}))
            }
        );
        assert_eq!(
            single(
                r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32601,"message":"nope","data":[1]}}"#
            ),
            RpcMessage::Response {
                id: RpcId::String("x".into()),
                outcome: Err(RpcError {
                    code: -32601,
                    message: "nope".into(),
                    data: Some(json!([1]))
                })
            }
        );
        // A null result is still a result.
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":1,"result":null}"#),
            RpcMessage::Response {
                outcome: Ok(Value::Null),
                ..
            }
        ));
    }

    #[test]
    fn rejects_what_is_not_json_rpc() {
        assert!(matches!(decode(b"hello"), Err(RpcDecodeError::NotJson(_))));
        for bad in [
            "42",
            "[]",
            r#"{"jsonrpc":"1.0","method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0","result":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"message":"no code"}}"#,
            r#"{"jsonrpc":"2.0","method":5}"#,
        ] {
            assert!(
                matches!(decode(bad.as_bytes()), Err(RpcDecodeError::NotJsonRpc(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn batches_decode_element_by_element() {
        let d = decode(br#"[{"jsonrpc":"2.0","method":"a"},7]"#).unwrap();
        let Decoded::Batch(items) = d else { panic!() };
        assert!(items[0].is_ok());
        assert!(items[1].is_err());
    }

    #[test]
    fn encodes_single_lines() {
        let l = request_line(3, "tools/call", Some(&json!({"name":"a\nb"})));
        assert_eq!(l.matches('\n').count(), 1);
        assert!(l.ends_with('\n'));
        assert_eq!(
            serde_json::from_str::<Value>(&l).unwrap(),
            json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"a\nb"}})
        );
        assert_eq!(
            notification_line("notifications/initialized", None),
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
        );
        let id = RpcId::String("s".into());
        assert_eq!(
            response_line(&id, Err(&RpcError::new(-32601, "Method not found"))),
            "{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"error\":{\"code\":-32601,\"message\":\"Method not found\"}}\n"
        );
        assert_eq!(
            response_line(&RpcId::Number(0.into()), Ok(&json!({}))),
            "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}\n"
        );
    }
}
