//! `WWW-Authenticate: Bearer ...` (RFC 6750 §3, RFC 9728 §5.1): what a protected resource
//! says when it refuses a request.

/// The parameters of a `Bearer` challenge that matter here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    /// `resource_metadata`: where the protected resource metadata is.
    pub resource_metadata: Option<String>,
    /// `scope`: the scopes the request needs, space-separated.
    pub scope: Option<String>,
    /// `error` (`invalid_token`, `insufficient_scope`, ...).
    pub error: Option<String>,
}

impl Challenge {
    /// The `Bearer` challenge in a `WWW-Authenticate` value (others, such as `Basic` or
    /// `DPoP`, are skipped); an empty one when there is none.
    pub fn parse(header: &str) -> Challenge {
        let mut out = Challenge::default();
        let mut in_bearer = false;
        for (name, value) in tokens(header) {
            match (name, value) {
                (scheme, None) => in_bearer = scheme.eq_ignore_ascii_case("bearer"),
                (k, Some(v)) if in_bearer => {
                    let slot = match k.to_ascii_lowercase().as_str() {
                        "resource_metadata" => &mut out.resource_metadata,
                        "scope" => &mut out.scope,
                        "error" => &mut out.error,
                        _ => continue,
                    };
                    if slot.is_none() && !v.is_empty() {
                        *slot = Some(v);
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// Whether this is a step-up challenge (403 `insufficient_scope`).
    pub fn insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }
}

/// The header as a list of auth-schemes (`(name, None)`) and their parameters.
fn tokens(header: &str) -> Vec<(String, Option<String>)> {
    let b = header.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (b[i] == b' ' || b[i] == b',' || b[i] == b'\t') {
            i += 1;
        }
        let start = i;
        while i < b.len() && !matches!(b[i], b' ' | b',' | b'=' | b'\t') {
            i += 1;
        }
        let name = header[start..i].to_owned();
        if name.is_empty() {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < b.len() && b[j] == b' ' {
            j += 1;
        }
        if j < b.len() && b[j] == b'=' {
            j += 1;
            while j < b.len() && b[j] == b' ' {
                j += 1;
            }
            let mut value = String::new();
            if j < b.len() && b[j] == b'"' {
                j += 1;
                while j < b.len() && b[j] != b'"' {
                    if b[j] == b'\\' && j + 1 < b.len() {
                        j += 1;
                    }
                    let ch = header[j..].chars().next().unwrap_or(' ');
                    value.push(ch);
                    j += ch.len_utf8();
                }
                j += 1;
            } else {
                let s = j;
                while j < b.len() && b[j] != b',' && b[j] != b' ' {
                    j += 1;
                }
                value.push_str(&header[s..j]);
            }
            out.push((name, Some(value)));
            i = j;
        } else {
            out.push((name, None));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bearer_parameters() {
        let c = Challenge::parse(
            r#"Bearer scope="mcp:write", resource_metadata="http://h/.well-known/oauth-protected-resource/mcp", error="insufficient_scope""#,
        );
        assert_eq!(c.scope.as_deref(), Some("mcp:write"));
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("http://h/.well-known/oauth-protected-resource/mcp")
        );
        assert!(c.insufficient_scope());
        let c = Challenge::parse(r#"Bearer error="invalid_token", error_description="a \"b\", c""#);
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
        assert_eq!(c.scope, None);
        assert_eq!(Challenge::parse("Bearer"), Challenge::default());
    }

    #[test]
    fn skips_other_schemes() {
        let c = Challenge::parse(r#"Basic realm="x", scope="no", Bearer scope="yes""#);
        assert_eq!(c.scope.as_deref(), Some("yes"));
        let c = Challenge::parse(r#"Bearer scope=a, DPoP scope="b""#);
        assert_eq!(c.scope.as_deref(), Some("a"));
    }
}
