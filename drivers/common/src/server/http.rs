//! HTTP/1.1 request heads: parsed from a bounded buffer, owned afterwards; and how long a
//! connection is kept for more requests.

use std::time::Duration;

use thiserror::Error;

/// The largest request head accepted (request line plus headers).
pub const MAX_HEAD: usize = 16 * 1024;
/// The most headers a request may carry.
pub const MAX_HEADERS: usize = 64;

/// How long a kept-alive connection may wait for its next request head, whole.
pub const KEEP_ALIVE_IDLE: Duration = Duration::from_secs(30);
/// Requests served on one connection at most; the last answer closes it.
pub const KEEP_ALIVE_REQUESTS: usize = 1000;

/// Why a request head was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HeadError {
    /// The head did not end within [`MAX_HEAD`] bytes.
    #[error("request head larger than {MAX_HEAD} bytes")]
    TooLarge,
    /// More than [`MAX_HEADERS`] headers.
    #[error("more than {MAX_HEADERS} headers")]
    TooManyHeaders,
    /// Not HTTP/1.x.
    #[error("malformed request head: {0}")]
    Malformed(String),
    /// `Content-Length` missing where a body is needed, unparsable, or over the limit.
    #[error("bad content-length: {0}")]
    BadLength(String),
    /// `Transfer-Encoding` bodies are not supported.
    #[error("transfer-encoding is not supported")]
    TransferEncoding,
}

impl HeadError {
    /// The HTTP status that answers this error.
    pub fn status(&self) -> u16 {
        match self {
            HeadError::TooLarge | HeadError::TooManyHeaders => 431,
            HeadError::BadLength(m) if m.starts_with("body larger") => 413,
            HeadError::TransferEncoding => 501,
            _ => 400,
        }
    }
}

/// An owned request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Method, e.g. `GET`.
    pub method: String,
    /// Percent-encoded path, without the query.
    pub path: String,
    /// Raw query string (after `?`), if any.
    pub query: Option<String>,
    /// Headers in arrival order; names as sent.
    pub headers: Vec<(String, String)>,
    /// The minor HTTP version: 1 for HTTP/1.1, 0 for HTTP/1.0.
    pub version: u8,
}

/// Parses a request head from the start of `buf`.
///
/// `Ok(None)` means more bytes are needed (and `buf` is still under [`MAX_HEAD`]); on success
/// returns the head and its length, so `buf[len..]` is the start of the body.
pub fn parse_head(buf: &[u8]) -> Result<Option<(RequestHead, usize)>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            if len > MAX_HEAD {
                return Err(HeadError::TooLarge);
            }
            let method = req.method.unwrap_or("").to_owned();
            let target = req.path.unwrap_or("/");
            let (path, query) = match target.split_once('?') {
                Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
                None => (target.to_owned(), None),
            };
            let headers = req
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_owned(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect();
            Ok(Some((
                RequestHead {
                    method,
                    path,
                    query,
                    headers,
                    version: req.version.unwrap_or(1),
                },
                len,
            )))
        }
        Ok(httparse::Status::Partial) => {
            if buf.len() >= MAX_HEAD {
                Err(HeadError::TooLarge)
            } else {
                Ok(None)
            }
        }
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooManyHeaders),
        Err(e) => Err(HeadError::Malformed(e.to_string())),
    }
}

impl RequestHead {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether a comma-separated header (e.g. `Connection`) lists `token`.
    pub fn header_has_token(&self, name: &str, token: &str) -> bool {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    /// Whether the client lets the connection carry another request after this one: by
    /// default in HTTP/1.1 (unless `Connection: close`), only on `Connection: keep-alive`
    /// in HTTP/1.0.
    pub fn keeps_alive(&self) -> bool {
        if self.version >= 1 {
            !self.header_has_token("connection", "close")
        } else {
            self.header_has_token("connection", "keep-alive")
        }
    }

    /// The token of an `Authorization: Bearer <token>` header.
    pub fn bearer(&self) -> Option<&str> {
        let v = self.header("authorization")?.trim();
        let (scheme, rest) = v.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let t = rest.trim();
        (!t.is_empty()).then_some(t)
    }

    /// The percent-decoded value of query parameter `name`.
    pub fn query_param(&self, name: &str) -> Option<String> {
        let q = self.query.as_deref()?;
        q.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k).as_deref() == Some(name)).then(|| percent_decode(v))?
        })
    }

    /// The body length this request announces, refusing chunked bodies and bodies over `max`.
    pub fn content_length(&self, max: usize) -> Result<usize, HeadError> {
        if self.header("transfer-encoding").is_some() {
            return Err(HeadError::TransferEncoding);
        }
        let mut found: Option<usize> = None;
        for (n, v) in &self.headers {
            if n.eq_ignore_ascii_case("content-length") {
                let len: usize = v
                    .trim()
                    .parse()
                    .map_err(|_| HeadError::BadLength(format!("not a number: {v:?}")))?;
                if found.is_some_and(|f| f != len) {
                    return Err(HeadError::BadLength("conflicting values".into()));
                }
                found = Some(len);
            }
        }
        let len = found.unwrap_or(0);
        if len > max {
            return Err(HeadError::BadLength(format!(
                "body larger than {max} bytes ({len})"
            )));
        }
        Ok(len)
    }
}

/// Decodes `%XX` escapes and `+` (as a space, form style). `None` for bad escapes or
/// text that is not UTF-8 afterwards.
pub fn percent_decode(s: &str) -> Option<String> {
    // The crate passes a malformed escape through as text: here it is an error.
    let b = s.as_bytes();
    let malformed = b.iter().enumerate().any(|(i, &c)| {
        c == b'%'
            && !b
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed {
        return None;
    }
    // `+` becomes a space before decoding, so an escaped `%2B` stays a plus sign.
    let spaced = s.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .ok()
        .map(|text| text.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_complete_head_and_reports_its_length() {
        let raw = b"POST /participants/a%20b/messages?x=1 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer tok\r\nContent-Length: 2\r\n\r\n{}";
        let (head, len) = parse_head(raw).unwrap().unwrap();
        assert_eq!(&raw[len..], b"{}");
        assert_eq!(head.method, "POST");
        assert_eq!(head.path, "/participants/a%20b/messages");
        assert_eq!(head.query.as_deref(), Some("x=1"));
        assert_eq!(head.bearer(), Some("tok"));
        assert_eq!(head.content_length(10).unwrap(), 2);
        assert!(head.content_length(1).is_err());
    }

    #[test]
    fn keep_alive_follows_the_version_and_the_connection_header() {
        let keeps = |raw: &[u8]| parse_head(raw).unwrap().unwrap().0.keeps_alive();
        assert!(keeps(b"POST /mcp HTTP/1.1\r\nHost: h\r\n\r\n"));
        assert!(!keeps(
            b"POST /mcp HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n"
        ));
        assert!(!keeps(
            b"POST /mcp HTTP/1.1\r\nConnection: TE, close\r\n\r\n"
        ));
        assert!(!keeps(b"POST /mcp HTTP/1.0\r\nHost: h\r\n\r\n"));
        assert!(keeps(
            b"POST /mcp HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"
        ));
    }

    #[test]
    fn partial_then_too_large() {
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost: x\r\n"), Ok(None));
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_HEAD + 10, b'a');
        assert_eq!(parse_head(&big), Err(HeadError::TooLarge));
    }

    #[test]
    fn garbage_is_malformed() {
        assert!(matches!(
            parse_head(b"\x00\x01\x02 nonsense\r\n\r\n"),
            Err(HeadError::Malformed(_))
        ));
    }

    #[test]
    fn bearer_needs_the_scheme() {
        let h = RequestHead {
            method: "GET".into(),
            path: "/".into(),
            query: None,
            headers: vec![("authorization".into(), "Basic abc".into())],
            version: 1,
        };
        assert_eq!(h.bearer(), None);
        let h = RequestHead {
            headers: vec![("AUTHORIZATION".into(), "bearer  t1 ".into())],
            ..h
        };
        assert_eq!(h.bearer(), Some("t1"));
    }

    #[test]
    fn decodes_query_parameters() {
        let h = RequestHead {
            method: "GET".into(),
            path: "/".into(),
            query: Some("space=my%2Dspace&since=2025-01-01T00%3A00%3A00Z&q".into()),
            headers: vec![],
            version: 1,
        };
        assert_eq!(h.query_param("space").as_deref(), Some("my-space"));
        assert_eq!(
            h.query_param("since").as_deref(),
            Some("2025-01-01T00:00:00Z")
        );
        assert_eq!(h.query_param("q").as_deref(), Some(""));
        assert_eq!(h.query_param("nope"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%ff"), None);
        assert_eq!(percent_decode("a+b").as_deref(), Some("a b"));
        assert_eq!(percent_decode("a%2Bb").as_deref(), Some("a+b"));
        assert_eq!(percent_decode("caf%C3%A9").as_deref(), Some("café"));
        assert_eq!(percent_decode("tail%4"), None);
        assert_eq!(percent_decode("tail%"), None);
    }

    #[test]
    fn refuses_chunked_and_conflicting_lengths() {
        let h = RequestHead {
            method: "POST".into(),
            path: "/".into(),
            query: None,
            headers: vec![("Transfer-Encoding".into(), "chunked".into())],
            version: 1,
        };
        assert_eq!(h.content_length(10), Err(HeadError::TransferEncoding));
        let h = RequestHead {
            headers: vec![
                ("Content-Length".into(), "1".into()),
                ("content-length".into(), "2".into()),
            ],
            ..h
        };
        assert!(h.content_length(10).is_err());
    }
}
