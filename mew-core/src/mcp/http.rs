//! Streamable HTTP, the part that is protocol: what an exchange carries and what its answer
//! means. Sockets, TLS, redirects, credentials and the endpoint URL are the driver's.
//!
//! Every message the client sends is one POST to the endpoint, with `Content-Type:
//! application/json`, `Accept: application/json, text/event-stream`, the standard headers
//! (`Mcp-Method`, and `Mcp-Name` for `tools/call`, `prompts/get` and `resources/read`) and,
//! once a revision is chosen, `MCP-Protocol-Version`; a `tools/call` also mirrors the
//! arguments its tool marks with `x-mcp-header` into `Mcp-Param-*` headers. The answer to a
//! request is a JSON body or an event stream that ends with the response; notifications and
//! responses are acknowledged with 202. Sessions (2025-11-25 and older) add `Mcp-Session-Id`,
//! a GET stream for the server's own messages, resumption of a broken stream by GET with
//! `Last-Event-ID`, and DELETE at the end.

use base64::Engine as _;
use serde_json::Value;
use std::borrow::Cow;

/// `MCP-Protocol-Version`: the revision in use.
pub const HEADER_PROTOCOL_VERSION: &str = "MCP-Protocol-Version";
/// `Mcp-Session-Id`: the session a 2025 server assigned in its `initialize` answer.
pub const HEADER_SESSION_ID: &str = "Mcp-Session-Id";
/// `Mcp-Method`: the JSON-RPC method of the body.
pub const HEADER_METHOD: &str = "Mcp-Method";
/// `Mcp-Name`: the tool, prompt or resource the body names.
pub const HEADER_NAME: &str = "Mcp-Name";
/// `Last-Event-ID`: where a resumed stream picks up.
pub const HEADER_LAST_EVENT_ID: &str = "Last-Event-ID";
/// Prefix of the headers mirroring `x-mcp-header` arguments.
pub const PARAM_HEADER_PREFIX: &str = "Mcp-Param-";
/// The schema keyword that marks an argument for mirroring.
pub const X_MCP_HEADER: &str = "x-mcp-header";

/// Identifies one HTTP exchange the client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExchangeId(pub u64);

/// The HTTP methods Streamable HTTP uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpMethod {
    /// A message to the server.
    Post,
    /// The server's stream (2025 sessions): opened, or resumed after a break.
    Get,
    /// The end of a session.
    Delete,
}

impl HttpMethod {
    /// The method's name on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Post => "POST",
            HttpMethod::Get => "GET",
            HttpMethod::Delete => "DELETE",
        }
    }
}

/// One exchange for the driver to carry out against the configured endpoint. The driver adds
/// its own headers (configured ones, credentials) and reports the answer with the client's
/// `handle_http_*` inputs, quoting `exchange`.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    /// Which exchange this is.
    pub exchange: ExchangeId,
    /// The method.
    pub method: HttpMethod,
    /// Protocol headers, in order.
    pub headers: Vec<(String, String)>,
    /// The JSON body (POST only).
    pub body: Option<String>,
}

impl HttpRequest {
    /// A header's value (names compare case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }
}

/// The status line and headers of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponseHead {
    /// The status code.
    pub status: u16,
    /// The headers as received.
    pub headers: Vec<(String, String)>,
}

impl HttpResponseHead {
    /// A head with `status` and `headers`.
    pub fn new(status: u16, headers: &[(&str, &str)]) -> Self {
        HttpResponseHead {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    /// A header's value (names compare case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    /// What the body is, by `Content-Type`.
    pub fn body_kind(&self) -> BodyKind {
        body_kind(self.header("content-type"))
    }
}

fn find_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// What an answer's body holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyKind {
    /// One JSON-RPC message (or a batch).
    Json,
    /// An event stream of JSON-RPC messages.
    EventStream,
    /// No `Content-Type`.
    None,
    /// Anything else (an HTML error page, ...), by its media type.
    Other(String),
}

/// Classifies a `Content-Type` value (parameters such as `charset` ignored).
pub fn body_kind(content_type: Option<&str>) -> BodyKind {
    let Some(ct) = content_type else {
        return BodyKind::None;
    };
    let media = ct.split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case("application/json") {
        BodyKind::Json
    } else if media.eq_ignore_ascii_case("text/event-stream") {
        BodyKind::EventStream
    } else {
        BodyKind::Other(media.to_ascii_lowercase())
    }
}

/// The value `Mcp-Name` mirrors: `params.name` of `tools/call` and `prompts/get`,
/// `params.uri` of `resources/read`.
pub fn mcp_name<'a>(method: &str, params: Option<&'a Value>) -> Option<&'a str> {
    let field = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return None,
    };
    params?.get(field)?.as_str()
}

/// `Mcp-Method` and, where the method names something, `Mcp-Name`.
pub fn standard_headers(method: &str, params: Option<&Value>) -> Vec<(String, String)> {
    let mut h = vec![(
        HEADER_METHOD.to_owned(),
        encode_header_value(method).into_owned(),
    )];
    if let Some(name) = mcp_name(method, params) {
        h.push((
            HEADER_NAME.to_owned(),
            encode_header_value(name).into_owned(),
        ));
    }
    h
}

/// Whether a value cannot travel as a plain header value: characters outside printable
/// ASCII, or whitespace at either end (which HTTP would strip).
pub fn needs_base64(value: &str) -> bool {
    value.bytes().any(|b| !(0x20..=0x7e).contains(&b))
        || value.starts_with(' ')
        || value.ends_with(' ')
}

/// A header value as sent: plain when safe, else `=?base64?…?=` over its UTF-8.
pub fn encode_header_value(value: &str) -> Cow<'_, str> {
    if needs_base64(value) {
        let b64 = base64::engine::general_purpose::STANDARD.encode(value.as_bytes());
        Cow::Owned(format!("=?base64?{b64}?="))
    } else {
        Cow::Borrowed(value)
    }
}

/// The `Mcp-Param-*` headers of a `tools/call`: one per property of `input_schema` marked
/// with `x-mcp-header` whose argument is present and not null, in the schema's order.
/// Strings go as they are, numbers in their JSON form, booleans as `true`/`false`.
pub fn param_headers(input_schema: &Value, arguments: Option<&Value>) -> Vec<(String, String)> {
    let (Some(props), Some(args)) = (
        input_schema.get("properties").and_then(Value::as_object),
        arguments.and_then(Value::as_object),
    ) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (prop, schema) in props {
        let Some(header) = schema.get(X_MCP_HEADER).and_then(Value::as_str) else {
            continue;
        };
        let text = match args.get(prop) {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => s.clone(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(Value::Number(n)) => n.to_string(),
            // Not a primitive: the annotation check refuses such tools, and an argument
            // that does not match its schema is the server's to refuse.
            Some(_) => continue,
        };
        out.push((
            format!("{PARAM_HEADER_PREFIX}{header}"),
            encode_header_value(&text).into_owned(),
        ));
    }
    out
}

/// Why a tool's `x-mcp-header` annotations make it unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderAnnotationError {
    /// The annotation is not a string, or is empty.
    #[error("property {0:?}: x-mcp-header must be a non-empty string")]
    Empty(String),
    /// The name holds a character a header name cannot.
    #[error("property {0:?}: x-mcp-header {1:?} is not a valid header name")]
    Charset(String, String),
    /// Two properties map to the same header (names compare case-insensitively).
    #[error("x-mcp-header {0:?} is used by more than one property")]
    Duplicate(String),
    /// The property is not a string, integer or boolean.
    #[error("property {0:?}: x-mcp-header is allowed on string, integer and boolean only")]
    NotPrimitive(String),
}

/// Checks a tool's `x-mcp-header` annotations: each a non-empty header-name token, unique
/// regardless of case, on a `string`, `integer` or `boolean` property. A tool that fails
/// cannot be called correctly over HTTP, so it is left out of the catalog.
pub fn check_header_annotations(input_schema: &Value) -> Result<(), HeaderAnnotationError> {
    let Some(props) = input_schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    let mut seen: Vec<String> = Vec::new();
    for (prop, schema) in props {
        let Some(raw) = schema.get(X_MCP_HEADER) else {
            continue;
        };
        let name = match raw.as_str() {
            Some(s) if !s.is_empty() => s,
            _ => return Err(HeaderAnnotationError::Empty(prop.clone())),
        };
        if !name.bytes().all(is_tchar) {
            return Err(HeaderAnnotationError::Charset(
                prop.clone(),
                name.to_owned(),
            ));
        }
        let primitive = match schema.get("type") {
            Some(Value::String(t)) => matches!(t.as_str(), "string" | "integer" | "boolean"),
            _ => false,
        };
        if !primitive {
            return Err(HeaderAnnotationError::NotPrimitive(prop.clone()));
        }
        let lower = name.to_ascii_lowercase();
        if seen.contains(&lower) {
            return Err(HeaderAnnotationError::Duplicate(name.to_owned()));
        }
        seen.push(lower);
    }
    Ok(())
}

/// RFC 9110 `tchar`: what a header field name may hold.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn body_kinds() {
        assert_eq!(body_kind(Some("application/json")), BodyKind::Json);
        assert_eq!(
            body_kind(Some("Application/JSON; charset=utf-8")),
            BodyKind::Json
        );
        assert_eq!(body_kind(Some("text/event-stream")), BodyKind::EventStream);
        assert_eq!(
            body_kind(Some("text/html; charset=utf-8")),
            BodyKind::Other("text/html".into())
        );
        assert_eq!(body_kind(None), BodyKind::None);
        let head = HttpResponseHead::new(200, &[("content-type", "text/event-stream")]);
        assert_eq!(head.body_kind(), BodyKind::EventStream);
        assert_eq!(head.header("Content-Type"), Some("text/event-stream"));
    }

    /// The conformance suite's `http-standard-headers` scenario: the header mirrors the body's
    /// method exactly, and the name comes from `params.name` or `params.uri`.
    #[test]
    fn standard_headers_mirror_method_and_name() {
        let h = |m: &str, p: Value| standard_headers(m, Some(&p));
        assert_eq!(
            h(
                "tools/call",
                json!({"name":"my-hyphenated-tool","arguments":{}})
            ),
            vec![
                ("Mcp-Method".into(), "tools/call".into()),
                ("Mcp-Name".into(), "my-hyphenated-tool".into())
            ]
        );
        assert_eq!(
            h(
                "resources/read",
                json!({"uri":"file:///path/to/file%20name.txt"})
            )[1],
            ("Mcp-Name".into(), "file:///path/to/file%20name.txt".into())
        );
        assert_eq!(
            h(
                "resources/read",
                json!({"uri":"https://example.com/resource?id=123"})
            )[1]
            .1,
            "https://example.com/resource?id=123"
        );
        assert_eq!(
            h("prompts/get", json!({"name":"test_prompt"}))[1].1,
            "test_prompt"
        );
        assert_eq!(
            h("notifications/initialized", json!({})),
            vec![("Mcp-Method".into(), "notifications/initialized".into())]
        );
        assert_eq!(h("tools/list", json!({})).len(), 1);
    }

    fn custom_headers_tool() -> Value {
        // `test_custom_headers` of the conformance suite's `http-custom-headers` scenario.
        json!({"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "priority":{"type":"integer","x-mcp-header":"Priority"},
            "verbose":{"type":"boolean","x-mcp-header":"Verbose"},
            "debug":{"type":"boolean","x-mcp-header":"Debug"},
            "empty_val":{"type":"string","x-mcp-header":"EmptyVal"},
            "method_val":{"type":"string","x-mcp-header":"Method"},
            "float_val":{"type":"number"},
            "non_ascii_val":{"type":"string","x-mcp-header":"NonAscii"},
            "whitespace_val":{"type":"string","x-mcp-header":"Whitespace"},
            "leading_space_val":{"type":"string","x-mcp-header":"LeadingSpace"},
            "trailing_space_val":{"type":"string","x-mcp-header":"TrailingSpace"},
            "internal_space_val":{"type":"string","x-mcp-header":"InternalSpace"},
            "control_char_val":{"type":"string","x-mcp-header":"ControlChar"},
            "crlf_val":{"type":"string","x-mcp-header":"CrLf"},
            "tab_val":{"type":"string","x-mcp-header":"Tab"},
            "query":{"type":"string"}
        },"required":["region","priority","query"]})
    }

    #[test]
    fn param_headers_mirror_marked_arguments_with_conformance_encoding() {
        let args = json!({
            "region": "us-west1", "priority": 42, "verbose": false, "debug": true,
            "empty_val": "", "method_val": "test-method", "float_val": 2.5,
            "non_ascii_val": "Hello, 世界", "whitespace_val": " padded ",
            "leading_space_val": " us-west1", "trailing_space_val": "us-west1 ",
            "internal_space_val": "us west 1", "control_char_val": "line1\nline2",
            "crlf_val": "line1\r\nline2", "tab_val": "\tindented",
            "query": "SELECT * FROM users"
        });
        let schema = custom_headers_tool();
        assert_eq!(check_header_annotations(&schema), Ok(()));
        let got = param_headers(&schema, Some(&args));
        let want: Vec<(String, String)> = [
            ("Region", "us-west1"),
            ("Priority", "42"),
            ("Verbose", "false"),
            ("Debug", "true"),
            ("EmptyVal", ""),
            ("Method", "test-method"),
            ("NonAscii", "=?base64?SGVsbG8sIOS4lueVjA==?="),
            ("Whitespace", "=?base64?IHBhZGRlZCA=?="),
            ("LeadingSpace", "=?base64?IHVzLXdlc3Qx?="),
            ("TrailingSpace", "=?base64?dXMtd2VzdDEg?="),
            ("InternalSpace", "us west 1"),
            ("ControlChar", "=?base64?bGluZTEKbGluZTI=?="),
            ("CrLf", "=?base64?bGluZTENCmxpbmUy?="),
            ("Tab", "=?base64?CWluZGVudGVk?="),
        ]
        .into_iter()
        .map(|(k, v)| (format!("Mcp-Param-{k}"), v.to_owned()))
        .collect();
        // serde_json keeps object keys sorted, so compare as sets.
        let mut got_sorted = got.clone();
        got_sorted.sort();
        let mut want_sorted = want;
        want_sorted.sort();
        assert_eq!(got_sorted, want_sorted);
        assert!(!got.iter().any(|(k, _)| k == "Mcp-Param-Query"));

        // `test_custom_headers_null`: a null argument sends no header.
        let null_args = json!({"region":"us-east1","priority":1,"verbose":null,"query":"SELECT 1"});
        let got = param_headers(&schema, Some(&null_args));
        assert!(got.iter().all(|(k, _)| k != "Mcp-Param-Verbose"), "{got:?}");
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn invalid_annotations_of_the_conformance_scenario_are_refused() {
        let tool = |props: Value| json!({"type":"object","properties":props});
        let cases = [
            json!({"value":{"type":"string","x-mcp-header":""}}),
            json!({"data":{"type":"object","x-mcp-header":"Data"}}),
            json!({"items":{"type":"array","items":{"type":"string"},"x-mcp-header":"Items"}}),
            json!({"nil":{"type":"null","x-mcp-header":"Nil"}}),
            json!({"field1":{"type":"string","x-mcp-header":"Region"},"field2":{"type":"string","x-mcp-header":"Region"}}),
            json!({"field1":{"type":"string","x-mcp-header":"MyField"},"field2":{"type":"string","x-mcp-header":"myfield"}}),
            json!({"value":{"type":"string","x-mcp-header":"My Field"}}),
            json!({"value":{"type":"string","x-mcp-header":"My:Field"}}),
            json!({"value":{"type":"string","x-mcp-header":"Régión"}}),
            json!({"value":{"type":"string","x-mcp-header":"My\u{1}Field"}}),
            json!({"value":{"type":"string","x-mcp-header":7}}),
        ];
        for props in cases {
            assert!(
                check_header_annotations(&tool(props.clone())).is_err(),
                "{props}"
            );
        }
        let valid = tool(json!({"region":{"type":"string","x-mcp-header":"Region"}}));
        assert_eq!(check_header_annotations(&valid), Ok(()));
        assert_eq!(check_header_annotations(&json!({"type":"object"})), Ok(()));
        assert!(matches!(
            check_header_annotations(&tool(json!({"a":{"type":"string","x-mcp-header":"A"},"b":{"type":"integer","x-mcp-header":"a"}}))),
            Err(HeaderAnnotationError::Duplicate(n)) if n == "a"
        ));
    }
}
