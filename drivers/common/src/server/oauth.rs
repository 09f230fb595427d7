//! The gateway's part in a bridge's OAuth sign-in: the redirect lands here
//! (`/oauth/callback`) and is handed to the bridge whose `state` it carries, and a bridge's
//! client ID metadata document is served at `/oauth/client/{id}`.

use mew_core::gateway::Gateway;
use mew_core::mcp::oauth::Callback;
use serde_json::{Value, json};

use crate::server::response::Response;

/// A small HTML page for the person's browser.
pub fn page(status: u16, text: &str) -> Response {
    let escaped = text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    Response {
        status,
        content_type: "text/html; charset=utf-8",
        body: format!(
            "<!doctype html><meta charset=utf-8><title>mew sign-in</title><p>{escaped}</p>\n"
        )
        .into_bytes(),
        headers: vec![("Cache-Control", "no-store".into())],
    }
}

/// The envelope payload for the bridge: `state` in the open, the rest under `secret`.
pub fn callback_payload(cb: &Callback) -> Value {
    let mut secret = cb.to_json();
    if let Some(m) = secret.as_object_mut() {
        m.remove("state");
    }
    json!({"state": cb.state, "secret": secret})
}

/// The client ID metadata document of `participant`: its `client_id` is the URL it is
/// served at, and its one redirect URI this gateway's callback.
pub fn client_document(gateway: &Gateway, participant: &str, host: Option<&str>) -> Response {
    if mew_core::participant_id::check(participant).is_err() {
        return Response::error(404, "not_found", "no such participant");
    }
    let scheme = match gateway.connection_url() {
        Some(u) if u.starts_with("wss://") => "https",
        _ => "http",
    };
    let Some(host) = host.filter(|h| !h.is_empty() && !h.contains(['/', ' ', '@'])) else {
        return Response::error(400, "bad_request", "a Host header is required");
    };
    let base = format!("{scheme}://{host}");
    let doc = json!({
        "client_id": crate::client::oauth::client_document_url(&base, participant),
        "client_name": format!("mew bridge {participant}"),
        "redirect_uris": [crate::client::oauth::callback_url(&base)],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    Response::json(200, &doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_keeps_the_code_under_secret() {
        let cb = Callback::from_query("code=c0de&state=files.abc&iss=http%3A%2F%2Fa");
        let p = callback_payload(&cb);
        assert_eq!(p["state"], "files.abc");
        assert_eq!(p["secret"]["code"], "c0de");
        assert_eq!(p["secret"]["iss"], "http://a");
        assert!(p["secret"].get("state").is_none());
    }

    #[test]
    fn page_escapes() {
        let r = page(200, "<b>x</b>");
        assert!(String::from_utf8(r.body).unwrap().contains("&lt;b&gt;x"));
    }
}
