//! Discovery: protected resource metadata (RFC 9728) and authorization server metadata
//! (RFC 8414, OpenID Connect Discovery), where each is looked for, and what is checked.

use super::url::HttpUrl;
use serde_json::Value;

/// Where protected resource metadata is looked for when the challenge names none: the
/// path-based well-known URL of the MCP endpoint first, then the root one (MCP
/// authorization, "Protected Resource Metadata Discovery").
pub fn resource_metadata_urls(server: &HttpUrl) -> Vec<String> {
    let prefix = "/.well-known/oauth-protected-resource";
    let mut v = Vec::new();
    if !server.trimmed_path().is_empty() {
        v.push(server.well_known(prefix, true));
    }
    v.push(server.well_known(prefix, false));
    v
}

/// Where an authorization server's metadata is looked for, in the MCP specification's
/// order: for an issuer with a path, OAuth with the path inserted, OpenID with the path
/// inserted, OpenID with the path appended; for one without, OAuth then OpenID.
pub fn authorization_server_metadata_urls(issuer: &HttpUrl) -> Vec<String> {
    let oauth = "/.well-known/oauth-authorization-server";
    let openid = "/.well-known/openid-configuration";
    if issuer.trimmed_path().is_empty() {
        vec![
            issuer.well_known(oauth, false),
            issuer.well_known(openid, false),
        ]
    } else {
        vec![
            issuer.well_known(oauth, true),
            issuer.well_known(openid, true),
            format!("{}{openid}", issuer.base()),
        ]
    }
}

/// What a protected resource says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceMetadata {
    /// `resource`: the protected resource's identifier.
    pub resource: String,
    /// `authorization_servers[0]`: the issuer to use.
    pub authorization_server: String,
    /// `scopes_supported`, space-joined, when listed.
    pub scopes_supported: Option<String>,
}

impl ResourceMetadata {
    /// Reads and checks a document fetched for the MCP endpoint `server`: its `resource`
    /// must be the endpoint or contain it (RFC 9728 §3.3), else another resource's
    /// metadata would send our sign-in where it does not belong.
    pub fn parse(body: &Value, server: &HttpUrl) -> Result<ResourceMetadata, String> {
        let resource = body
            .get("resource")
            .and_then(Value::as_str)
            .ok_or("the protected resource metadata has no resource")?;
        let parsed = HttpUrl::parse(resource).ok_or_else(|| {
            format!("the protected resource metadata's resource {resource:?} is not an http(s) URL")
        })?;
        if !server.is_within(&parsed) {
            return Err(format!(
                "the protected resource metadata is for {resource}, not for {}",
                server.base()
            ));
        }
        let authorization_server = body
            .get("authorization_servers")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find_map(Value::as_str))
            .ok_or("the protected resource metadata names no authorization server")?;
        if HttpUrl::parse(authorization_server).is_none() {
            return Err(format!(
                "the authorization server {authorization_server:?} is not an http(s) URL"
            ));
        }
        Ok(ResourceMetadata {
            resource: resource.to_owned(),
            authorization_server: authorization_server.to_owned(),
            scopes_supported: joined(body.get("scopes_supported")),
        })
    }
}

/// What an authorization server says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerMetadata {
    /// `issuer`, equal to the issuer the document was looked up for.
    pub issuer: String,
    /// `authorization_endpoint`.
    pub authorization_endpoint: String,
    /// `token_endpoint`.
    pub token_endpoint: String,
    /// `registration_endpoint` (dynamic client registration), if offered.
    pub registration_endpoint: Option<String>,
    /// `scopes_supported`, space-joined.
    pub scopes_supported: Option<String>,
    /// `token_endpoint_auth_methods_supported` (RFC 8414 default: `client_secret_basic`).
    pub auth_methods: Vec<String>,
    /// `grant_types_supported`, if listed.
    pub grant_types: Option<Vec<String>>,
    /// `client_id_metadata_document_supported`.
    pub cimd_supported: bool,
    /// `authorization_response_iss_parameter_supported` (RFC 9207).
    pub iss_parameter_supported: bool,
}

impl ServerMetadata {
    /// Reads and checks a document looked up for `issuer`: the `issuer` it states must be
    /// that one exactly (RFC 8414 §3.3), the endpoints http(s) URLs, and PKCE with S256
    /// offered (the MCP specification refuses to go on without it).
    pub fn parse(body: &Value, issuer: &str) -> Result<ServerMetadata, String> {
        let stated = body.get("issuer").and_then(Value::as_str).unwrap_or("");
        if stated != issuer {
            return Err(format!(
                "the authorization server metadata states issuer {stated:?}, not {issuer:?}"
            ));
        }
        let endpoint = |k: &str| -> Result<String, String> {
            let v = body
                .get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("the authorization server metadata has no {k}"))?;
            HttpUrl::parse(v).map(|_| v.to_owned()).ok_or_else(|| {
                format!("the authorization server's {k} {v:?} is not an http(s) URL")
            })
        };
        let methods = strings(body.get("code_challenge_methods_supported"));
        if !methods.iter().any(|m| m == "S256") {
            return Err(format!(
                "the authorization server {issuer} does not offer PKCE with S256"
            ));
        }
        let auth_methods = match body.get("token_endpoint_auth_methods_supported") {
            Some(v) => strings(Some(v)),
            None => vec!["client_secret_basic".to_owned()],
        };
        Ok(ServerMetadata {
            issuer: issuer.to_owned(),
            authorization_endpoint: endpoint("authorization_endpoint")?,
            token_endpoint: endpoint("token_endpoint")?,
            registration_endpoint: endpoint("registration_endpoint").ok(),
            scopes_supported: joined(body.get("scopes_supported")),
            auth_methods,
            grant_types: body.get("grant_types_supported").map(|v| strings(Some(v))),
            cimd_supported: body
                .get("client_id_metadata_document_supported")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            iss_parameter_supported: body
                .get("authorization_response_iss_parameter_supported")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }

    /// Whether a scope is listed in `scopes_supported`.
    pub fn lists_scope(&self, scope: &str) -> bool {
        self.scopes_supported
            .as_deref()
            .is_some_and(|s| s.split(' ').any(|x| x == scope))
    }

    /// Whether refresh tokens are granted (listed, or no list given).
    pub fn grants_refresh(&self) -> bool {
        self.grant_types
            .as_ref()
            .is_none_or(|g| g.iter().any(|x| x == "refresh_token"))
    }

    /// Whether the token endpoint takes `method`.
    pub fn takes(&self, method: &str) -> bool {
        self.auth_methods.iter().any(|m| m == method)
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn joined(v: Option<&Value>) -> Option<String> {
    let s = strings(v);
    (!s.is_empty()).then(|| s.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn well_known_orders() {
        let s = HttpUrl::parse("http://h:1/mcp").unwrap();
        assert_eq!(
            resource_metadata_urls(&s),
            vec![
                "http://h:1/.well-known/oauth-protected-resource/mcp",
                "http://h:1/.well-known/oauth-protected-resource"
            ]
        );
        let root = HttpUrl::parse("http://h:1/").unwrap();
        assert_eq!(
            resource_metadata_urls(&root),
            vec!["http://h:1/.well-known/oauth-protected-resource"]
        );
        let i = HttpUrl::parse("http://a:2/tenant1").unwrap();
        assert_eq!(
            authorization_server_metadata_urls(&i),
            vec![
                "http://a:2/.well-known/oauth-authorization-server/tenant1",
                "http://a:2/.well-known/openid-configuration/tenant1",
                "http://a:2/tenant1/.well-known/openid-configuration"
            ]
        );
        let i = HttpUrl::parse("http://a:2").unwrap();
        assert_eq!(
            authorization_server_metadata_urls(&i),
            vec![
                "http://a:2/.well-known/oauth-authorization-server",
                "http://a:2/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn resource_must_cover_the_server() {
        let s = HttpUrl::parse("http://h:1/mcp").unwrap();
        let ok = json!({"resource":"http://h:1/mcp","authorization_servers":["http://a:2"],"scopes_supported":["x","y"]});
        let m = ResourceMetadata::parse(&ok, &s).unwrap();
        assert_eq!(m.authorization_server, "http://a:2");
        assert_eq!(m.scopes_supported.as_deref(), Some("x y"));
        let root = json!({"resource":"http://h:1","authorization_servers":["http://a:2"]});
        assert!(ResourceMetadata::parse(&root, &s).is_ok());
        let evil = json!({"resource":"https://evil.example.com/mcp","authorization_servers":["http://a:2"]});
        let e = ResourceMetadata::parse(&evil, &s).unwrap_err();
        assert!(e.contains("https://evil.example.com/mcp"), "{e}");
        let none = json!({"resource":"http://h:1/mcp","authorization_servers":[]});
        assert!(ResourceMetadata::parse(&none, &s).is_err());
    }

    fn as_doc(issuer: &str) -> Value {
        json!({"issuer": issuer, "authorization_endpoint": "http://a:2/authorize",
               "token_endpoint": "http://a:2/token", "code_challenge_methods_supported": ["S256"]})
    }

    #[test]
    fn issuer_must_match_exactly_and_pkce_be_offered() {
        let m = ServerMetadata::parse(&as_doc("http://a:2"), "http://a:2").unwrap();
        assert_eq!(m.auth_methods, vec!["client_secret_basic"]);
        assert!(m.registration_endpoint.is_none());
        assert!(m.grants_refresh());
        let e = ServerMetadata::parse(&as_doc("https://attacker.example.com"), "http://a:2")
            .unwrap_err();
        assert!(e.contains("attacker"), "{e}");
        assert!(ServerMetadata::parse(&as_doc("http://a:2/"), "http://a:2").is_err());
        let mut no_pkce = as_doc("http://a:2");
        no_pkce["code_challenge_methods_supported"] = json!(["plain"]);
        assert!(
            ServerMetadata::parse(&no_pkce, "http://a:2")
                .unwrap_err()
                .contains("S256")
        );
    }
}
