//! What a sign-in yields, kept between runs, and how a token endpoint's answer is read.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The state of a sign-in worth keeping: the client identity the authorization server
/// knows us by, and the tokens it issued. The driver keeps it in a private file; `Debug`
/// shows no secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    /// The protected resource (the `resource` indicator) the tokens are for.
    pub resource: String,
    /// The authorization server's issuer.
    pub issuer: String,
    /// Its token endpoint.
    pub token_endpoint: String,
    /// Our client id there.
    pub client_id: String,
    /// Our client secret there, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// How the token endpoint authenticates us: `none`, `client_secret_basic` or
    /// `client_secret_post`.
    pub auth_method: String,
    /// Whether the client id came from dynamic registration (and is ours to reuse with
    /// this issuer only).
    #[serde(default)]
    pub registered: bool,
    /// The access token.
    pub access_token: String,
    /// The refresh token, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// When the access token expires (Unix ms), if said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// The scopes asked for, space-separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stored")
            .field("resource", &self.resource)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("auth_method", &self.auth_method)
            .field("expires_at_ms", &self.expires_at_ms)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// A token endpoint's successful answer.
#[derive(Clone, PartialEq, Eq)]
pub struct Granted {
    /// `access_token`.
    pub access_token: String,
    /// `refresh_token`.
    pub refresh_token: Option<String>,
    /// `expires_in`, seconds.
    pub expires_in: Option<u64>,
    /// `scope`.
    pub scope: Option<String>,
}

impl std::fmt::Debug for Granted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Granted")
            .field("expires_in", &self.expires_in)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// Reads a token endpoint's answer: a JSON body with a `Bearer` `access_token` on 200,
/// else an OAuth error (`error`, `error_description`). The error says what came back
/// without quoting anything that may be a secret.
pub fn parse_token_response(
    status: u16,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Granted, String> {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let Some(json) = json.filter(Value::is_object) else {
        let media = content_type
            .and_then(|c| c.split(';').next())
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .unwrap_or("no content type");
        return Err(format!(
            "the token endpoint answered {status} with {media} instead of JSON"
        ));
    };
    if let Some(err) = json.get("error").and_then(Value::as_str) {
        let desc = json
            .get("error_description")
            .and_then(Value::as_str)
            .map(|d| format!(": {}", d.chars().take(200).collect::<String>()))
            .unwrap_or_default();
        return Err(format!(
            "the token endpoint refused ({status}): {err}{desc}"
        ));
    }
    if !(200..=299).contains(&status) {
        return Err(format!("the token endpoint answered {status}"));
    }
    let access_token = json
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or("the token endpoint's answer has no access_token")?;
    let kind = json.get("token_type").and_then(Value::as_str).unwrap_or("");
    if !kind.eq_ignore_ascii_case("bearer") {
        return Err(format!(
            "the token endpoint issued a {kind:?} token; only Bearer tokens are supported"
        ));
    }
    Ok(Granted {
        access_token: access_token.to_owned(),
        refresh_token: json
            .get("refresh_token")
            .and_then(Value::as_str)
            .map(str::to_owned),
        expires_in: json.get("expires_in").and_then(Value::as_u64),
        scope: json.get("scope").and_then(Value::as_str).map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_answers() {
        let g = parse_token_response(
            200,
            Some("application/json"),
            br#"{"access_token":"at","token_type":"bearer","expires_in":3600,"refresh_token":"rt"}"#,
        )
        .unwrap();
        assert_eq!(g.access_token, "at");
        assert_eq!(g.expires_in, Some(3600));
        assert!(!format!("{g:?}").contains("at\""));
        let e = parse_token_response(200, Some("text/html; charset=utf-8"), b"<html>hi</html>")
            .unwrap_err();
        assert_eq!(
            e,
            "the token endpoint answered 200 with text/html instead of JSON"
        );
        let e = parse_token_response(
            400,
            Some("application/json"),
            br#"{"error":"invalid_grant","error_description":"bad code"}"#,
        )
        .unwrap_err();
        assert_eq!(
            e,
            "the token endpoint refused (400): invalid_grant: bad code"
        );
        let e = parse_token_response(200, None, br#"{"access_token":"x","token_type":"DPoP"}"#)
            .unwrap_err();
        assert!(e.contains("DPoP"), "{e}");
    }
}
