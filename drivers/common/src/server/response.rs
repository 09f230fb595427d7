//! HTTP responses the gateway writes: always a body, a length, and `Connection: close`.

use serde_json::{Value, json};

/// A complete response, ready to serialise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Type` value.
    pub content_type: &'static str,
    /// Body bytes.
    pub body: Vec<u8>,
    /// More headers (the web page's policy, validators, a redirect's `Location`).
    pub headers: Vec<(&'static str, String)>,
}

impl Response {
    /// A JSON body.
    pub fn json(status: u16, body: &Value) -> Response {
        Response {
            status,
            content_type: "application/json",
            body: serde_json::to_vec(body).unwrap_or_default(),
            headers: Vec::new(),
        }
    }

    /// The answer to `POST /participants/{id}/messages`, as the core decided it (a single
    /// gateway, a durable one and a cluster node answer alike).
    pub fn posted(
        result: Result<mew_core::gateway::HttpAccepted, mew_core::gateway::HttpError>,
    ) -> Response {
        match result {
            Ok(ok) => Response::json_bytes(200, ok.body_json().into_bytes()),
            Err(e) => Response::json_bytes(e.status, e.body_json.into_bytes()),
        }
    }

    /// A JSON body already serialised.
    pub fn json_bytes(status: u16, body: Vec<u8>) -> Response {
        Response {
            status,
            content_type: "application/json",
            body,
            headers: Vec::new(),
        }
    }

    /// `{"error": code, "message": message}` with the given status.
    pub fn error(status: u16, code: &str, message: &str) -> Response {
        Response::json(status, &json!({"error": code, "message": message}))
    }

    /// A JSON array built from already-serialised JSON values without re-parsing them.
    pub fn json_array<'a>(status: u16, items: impl IntoIterator<Item = &'a [u8]>) -> Response {
        let mut body = Vec::with_capacity(256);
        body.push(b'[');
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(item);
        }
        body.push(b']');
        Response::json_bytes(status, body)
    }

    /// The wire form: status line, headers, body.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

/// The reason phrase for the statuses this crate produces.
pub fn reason(status: u16) -> &'static str {
    match status {
        101 => "Switching Protocols",
        200 => "OK",
        304 => "Not Modified",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        426 => "Upgrade Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_length_and_close() {
        let r = Response::json(200, &json!({"ok": true}));
        let text = String::from_utf8(r.to_bytes()).unwrap();
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}"
        );
    }

    #[test]
    fn joins_raw_items() {
        let r = Response::json_array(200, [&b"{\"a\":1}"[..], b"{\"b\":2}"]);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v, json!([{"a":1},{"b":2}]));
        assert_eq!(Response::json_array(200, []).body, b"[]");
        let e = Response::error(404, "not_found", "no such endpoint");
        assert_eq!(e.status, 404);
        assert!(
            String::from_utf8(e.to_bytes())
                .unwrap()
                .starts_with("HTTP/1.1 404 Not Found")
        );
    }
}
