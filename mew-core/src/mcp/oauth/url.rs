//! The little of URLs OAuth needs: `http(s)://authority/path?query` split apart, the
//! well-known URLs built from them, and `application/x-www-form-urlencoded` both ways.

/// An `http://` or `https://` URL, split (no fragment kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// `http` or `https`, lower case.
    pub scheme: String,
    /// `host[:port]`, host lower case.
    pub authority: String,
    /// The path, `""` when the URL has none.
    pub path: String,
    /// The query without `?`, if any.
    pub query: Option<String>,
}

impl HttpUrl {
    /// Parses `text`; `None` when it is not an absolute `http(s)` URL with a host, or holds
    /// user information (a credential has no place in these URLs).
    pub fn parse(text: &str) -> Option<HttpUrl> {
        let (scheme, rest) = text.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return None;
        }
        let rest = rest.split('#').next().unwrap_or("");
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let authority = &rest[..end];
        if authority.is_empty()
            || authority.contains('@')
            || authority.bytes().any(|b| b <= b' ' || b == b'\\')
        {
            return None;
        }
        let tail = &rest[end..];
        let (path, query) = match tail.split_once('?') {
            Some((p, q)) => (p, Some(q.to_owned())),
            None => (tail, None),
        };
        if path.bytes().any(|b| b <= b' ') {
            return None;
        }
        Some(HttpUrl {
            scheme,
            authority: authority.to_ascii_lowercase(),
            path: path.to_owned(),
            query,
        })
    }

    /// `scheme://authority`.
    pub fn origin(&self) -> String {
        format!("{}://{}", self.scheme, self.authority)
    }

    /// The host, without port or IPv6 brackets.
    pub fn host(&self) -> &str {
        let a = self.authority.as_str();
        if let Some(rest) = a.strip_prefix('[') {
            return rest.split(']').next().unwrap_or(rest);
        }
        a.rsplit_once(':').map_or(a, |(h, _)| h)
    }

    /// The path without a trailing `/` (`""` for the root).
    pub fn trimmed_path(&self) -> &str {
        self.path.trim_end_matches('/')
    }

    /// The URL without query and fragment, path trimmed of a trailing `/`.
    pub fn base(&self) -> String {
        format!("{}{}", self.origin(), self.trimmed_path())
    }

    /// Whether `self` is within `resource`: same origin, and the path equal to or below
    /// the resource's.
    pub fn is_within(&self, resource: &HttpUrl) -> bool {
        if self.origin() != resource.origin() {
            return false;
        }
        let (mine, theirs) = (self.trimmed_path(), resource.trimmed_path());
        theirs.is_empty()
            || mine == theirs
            || mine
                .strip_prefix(theirs)
                .is_some_and(|rest| rest.starts_with('/'))
    }

    /// `scheme://authority{prefix}{path}`: a well-known URL for this one (RFC 8615), with
    /// the path (trimmed) inserted after `prefix`.
    pub fn well_known(&self, prefix: &str, with_path: bool) -> String {
        let path = if with_path { self.trimmed_path() } else { "" };
        format!("{}{prefix}{path}", self.origin())
    }

    /// Whether the host is a loopback name or address.
    pub fn is_loopback(&self) -> bool {
        let h = self.host();
        h == "localhost" || h.starts_with("127.") || h == "::1"
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `k=v&k=v`, each part percent-encoded: a form body or a query.
pub fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Decodes one form component (`+` is a space); `None` when it is not UTF-8 or a `%`
/// escape is broken.
pub fn decode(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The pairs of a query or form body, decoded; broken pairs are skipped.
pub fn parse_form(text: &str) -> Vec<(String, String)> {
    text.split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Some((decode(k)?, decode(v)?))
        })
        .collect()
}

/// `base` with `query` added after its own query, if any.
pub fn with_query(base: &str, query: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}{query}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_builds_well_known_urls() {
        let u = HttpUrl::parse("HTTPS://Auth.Example.com:8443/tenant1/?x=1#f").unwrap();
        assert_eq!(u.scheme, "https");
        assert_eq!(u.authority, "auth.example.com:8443");
        assert_eq!(u.host(), "auth.example.com");
        assert_eq!(u.trimmed_path(), "/tenant1");
        assert_eq!(u.query.as_deref(), Some("x=1"));
        assert_eq!(
            u.well_known("/.well-known/oauth-authorization-server", true),
            "https://auth.example.com:8443/.well-known/oauth-authorization-server/tenant1"
        );
        assert!(HttpUrl::parse("ftp://x/").is_none());
        assert!(HttpUrl::parse("https://user:pw@x/").is_none());
        assert!(HttpUrl::parse("https:///x").is_none());
        assert!(HttpUrl::parse("http://[::1]:80/").unwrap().is_loopback());
    }

    #[test]
    fn within_compares_origin_and_whole_path_segments() {
        let p = |s| HttpUrl::parse(s).unwrap();
        assert!(p("http://h:1/mcp").is_within(&p("http://h:1/mcp")));
        assert!(p("http://h:1/mcp").is_within(&p("http://h:1")));
        assert!(p("http://h:1/mcp/x").is_within(&p("http://h:1/mcp/")));
        assert!(!p("http://h:1/mcpx").is_within(&p("http://h:1/mcp")));
        assert!(!p("http://h:1/mcp").is_within(&p("https://evil.example.com/mcp")));
    }

    #[test]
    fn form_round_trip() {
        let body = form(&[("a b", "c&d=é"), ("redirect_uri", "http://x/cb")]);
        assert_eq!(
            body,
            "a%20b=c%26d%3D%C3%A9&redirect_uri=http%3A%2F%2Fx%2Fcb"
        );
        assert_eq!(
            parse_form(&body),
            vec![
                ("a b".to_owned(), "c&d=é".to_owned()),
                ("redirect_uri".to_owned(), "http://x/cb".to_owned())
            ]
        );
        assert_eq!(parse_form("a=%zz&b=1+2"), vec![("b".into(), "1 2".into())]);
    }
}
