//! Parsing limits and errors shared by [`Envelope`](super::Envelope) and
//! [`RoutingView`](super::RoutingView).

use super::Envelope;
use thiserror::Error;

/// Bounds applied before and while parsing untrusted bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted frame in bytes (default 1 MiB).
    pub max_frame_bytes: usize,
    /// Deepest accepted JSON nesting (default 128, which is also serde_json's own ceiling).
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_bytes: 1024 * 1024,
            max_depth: 128,
        }
    }
}

/// Why bytes were not accepted as an envelope.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    /// The frame exceeds [`Limits::max_frame_bytes`].
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Size of the offending frame.
        size: usize,
        /// The configured limit.
        max: usize,
    },
    /// JSON nested deeper than [`Limits::max_depth`].
    #[error("JSON nesting deeper than {max} levels")]
    TooDeep {
        /// The configured limit.
        max: usize,
    },
    /// Not valid UTF-8.
    #[error("frame is not valid UTF-8")]
    InvalidUtf8,
    /// Not syntactically valid JSON.
    #[error("invalid JSON at line {line} column {column}: {message}")]
    InvalidJson {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What the JSON parser found.
        message: String,
    },
    /// Valid JSON, but not an object.
    #[error("an envelope must be a JSON object")]
    NotAnObject,
    /// `protocol` present but not `mew/v0.4`.
    #[error("unsupported protocol {found:?}: this peer speaks mew/v0.4")]
    WrongProtocol {
        /// The protocol string received.
        found: String,
    },
    /// A required field is absent.
    #[error("missing required field `{0}`")]
    MissingField(&'static str),
    /// A field has the wrong JSON type.
    #[error("field `{field}` must be {expected}")]
    WrongType {
        /// The field name.
        field: &'static str,
        /// What the field must be, in words.
        expected: &'static str,
    },
}

impl ParseError {
    /// A stable machine-readable code, used in `system/error` payloads.
    pub fn code(&self) -> &'static str {
        match self {
            ParseError::TooLarge { .. } => "frame_too_large",
            ParseError::TooDeep { .. } => "nesting_too_deep",
            ParseError::InvalidUtf8 => "invalid_utf8",
            ParseError::InvalidJson { .. } => "invalid_json",
            ParseError::NotAnObject => "not_an_object",
            ParseError::WrongProtocol { .. } => "wrong_protocol",
            ParseError::MissingField(_) => "missing_field",
            ParseError::WrongType { .. } => "wrong_type",
        }
    }

    pub(crate) fn from_json(e: &serde_json::Error) -> ParseError {
        ParseError::InvalidJson {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        }
    }
}

/// Fails when `bytes` nest arrays/objects deeper than `max`, scanning without allocating.
///
/// Runs before serde so that a configured limit below serde_json's own 128 is honoured and
/// a hostile frame costs one linear pass, not a deep recursion.
pub fn check_depth(bytes: &[u8], max: usize) -> Result<(), ParseError> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return Err(ParseError::TooDeep { max });
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

pub(super) fn precheck<'a>(bytes: &'a [u8], limits: &Limits) -> Result<&'a str, ParseError> {
    if bytes.len() > limits.max_frame_bytes {
        return Err(ParseError::TooLarge {
            size: bytes.len(),
            max: limits.max_frame_bytes,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| ParseError::InvalidUtf8)?;
    check_depth(bytes, limits.max_depth.min(128))?;
    Ok(text)
}

pub(super) fn parse_envelope(bytes: &[u8], limits: &Limits) -> Result<Envelope, ParseError> {
    let text = precheck(bytes, limits)?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| ParseError::from_json(&e))?;
    let obj = value.as_object().ok_or(ParseError::NotAnObject)?;
    // Field-by-field checks give users a precise message instead of serde's generic one.
    let str_field = |name: &'static str, required: bool| -> Result<(), ParseError> {
        match obj.get(name) {
            None | Some(serde_json::Value::Null) if required => Err(ParseError::MissingField(name)),
            None | Some(serde_json::Value::Null) => Ok(()),
            Some(serde_json::Value::String(_)) => Ok(()),
            Some(_) => Err(ParseError::WrongType {
                field: name,
                expected: "a string",
            }),
        }
    };
    str_field("protocol", true)?;
    if let Some(serde_json::Value::String(p)) = obj.get("protocol")
        && p != crate::PROTOCOL
    {
        return Err(ParseError::WrongProtocol { found: p.clone() });
    }
    str_field("id", true)?;
    str_field("from", true)?;
    str_field("kind", true)?;
    str_field("ts", false)?;
    str_field("context", false)?;
    match obj.get("to") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Array(a)) if a.iter().all(|v| v.is_string()) => {}
        Some(_) => {
            return Err(ParseError::WrongType {
                field: "to",
                expected: "an array of participant id strings",
            });
        }
    }
    match obj.get("correlation_id") {
        None | Some(serde_json::Value::Null) | Some(serde_json::Value::String(_)) => {}
        Some(serde_json::Value::Array(a)) if a.iter().all(|v| v.is_string()) => {}
        Some(_) => {
            return Err(ParseError::WrongType {
                field: "correlation_id",
                expected: "a string or an array of strings",
            });
        }
    }
    match obj.get("payload") {
        None | Some(serde_json::Value::Null) | Some(serde_json::Value::Object(_)) => {}
        Some(_) => {
            return Err(ParseError::WrongType {
                field: "payload",
                expected: "an object",
            });
        }
    }
    serde_json::from_value(value).map_err(|e| ParseError::from_json(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Envelope, ParseError> {
        Envelope::parse(s.as_bytes(), &Limits::default())
    }

    #[test]
    fn accepts_minimal_and_normalises_correlation() {
        let e = parse(r#"{"protocol":"mew/v0.4","id":"a","from":"x","kind":"chat","correlation_id":"c1","payload":{"text":"hi"}}"#).unwrap();
        assert_eq!(e.correlation_id, Some(vec!["c1".to_string()]));
        assert!(e.is_broadcast());
        assert!(e.to_json().contains(r#""correlation_id":["c1"]"#));
    }

    #[test]
    fn each_error_is_distinct() {
        let small = Limits {
            max_frame_bytes: 10,
            max_depth: 3,
        };
        assert_eq!(
            Envelope::parse(b"{\"protocol\":1234567}", &small)
                .unwrap_err()
                .code(),
            "frame_too_large"
        );
        assert_eq!(
            Envelope::parse(
                b"[[[[1]]]]",
                &Limits {
                    max_frame_bytes: 100,
                    max_depth: 3
                }
            )
            .unwrap_err()
            .code(),
            "nesting_too_deep"
        );
        assert_eq!(parse("{").unwrap_err().code(), "invalid_json");
        assert_eq!(parse("[1]").unwrap_err().code(), "not_an_object");
        assert_eq!(
            Envelope::parse(&[0xff, 0xfe], &Limits::default()).unwrap_err(),
            ParseError::InvalidUtf8
        );
        assert_eq!(
            parse(r#"{"protocol":"mew/v0.3","id":"a","from":"x","kind":"chat"}"#).unwrap_err(),
            ParseError::WrongProtocol {
                found: "mew/v0.3".into()
            }
        );
        assert_eq!(
            parse(r#"{"protocol":"mew/v0.4","from":"x","kind":"chat"}"#).unwrap_err(),
            ParseError::MissingField("id")
        );
        assert_eq!(
            parse(r#"{"protocol":"mew/v0.4","id":"a","from":"x","kind":"chat","to":"bob"}"#)
                .unwrap_err()
                .code(),
            "wrong_type"
        );
    }

    #[test]
    fn depth_scan_ignores_brackets_in_strings() {
        assert!(check_depth(br#"{"a":"[[[[[[[[[["}"#, 2).is_ok());
        assert!(check_depth(br#"{"a":"\"[[[[","b":[[1]]}"#, 3).is_ok());
        assert!(check_depth(br#"{"b":[[[1]]]}"#, 3).is_err());
    }
}
