//! The Streamable HTTP rules of `/mcp`, the server side: which requests are taken, what a
//! refusal is, and what a POST's body holds. Sockets, streams and session ids are the
//! driver's.
//!
//! - `Host` and `Origin` (DNS rebinding): a request reaching the gateway from the machine
//!   itself must name a loopback host (`localhost`, `127.0.0.1`, `[::1]`) in `Host` and in
//!   `Origin` when it sends one; from elsewhere, an `Origin` must be the `Host` it was sent
//!   to. Refused with 403.
//! - POST: `Content-Type: application/json` (else 415) and an `Accept` that takes both
//!   `application/json` and `text/event-stream` (else 406); the body is one JSON-RPC
//!   message (a batch is refused with 400 and `-32600`, as revisions since 2025-06-18 have
//!   no batches); a body that is not JSON is 400 with `-32700`.
//! - A message that carries no `MCP-Protocol-Version` it may be checked against is taken as
//!   2025-03-26 would be; a header naming a revision not known here is 400; a request of the
//!   stateless revision whose `_meta` names another revision than the header is 400
//!   (`-32020`), and one whose `_meta` lacks the revision or the client's capabilities is
//!   400 (`-32602`).

use crate::mcp::ProtocolVersion;
use crate::mcp::jsonrpc::{self, Decoded, RpcDecodeError, RpcMessage, codes};
use crate::mcp::stateless::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};
use serde_json::{Value, json};

/// `Mcp-Session-Id`.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// `MCP-Protocol-Version`.
pub const VERSION_HEADER: &str = "mcp-protocol-version";
/// The error of a request whose `_meta` revision and header disagree, or that lacks the
/// header.
pub const HEADER_MISMATCH: i64 = -32020;

/// A refusal: the status and a JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// HTTP status.
    pub status: u16,
    /// JSON body (a JSON-RPC error, or `{"error": ...}` when no message was read).
    pub body: Value,
}

impl Refusal {
    fn plain(status: u16, message: &str) -> Refusal {
        Refusal {
            status,
            body: json!({"jsonrpc": "2.0", "id": null, "error": {"code": codes::INVALID_REQUEST, "message": message}}),
        }
    }

    fn rpc(status: u16, id: Value, code: i64, message: &str) -> Refusal {
        Refusal {
            status,
            body: json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        }
    }
}

fn host_name(authority: &str) -> &str {
    let a = authority.trim();
    if let Some(rest) = a.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    a.rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(a, |(h, _)| h)
}

fn is_loopback_name(authority: &str) -> bool {
    let h = host_name(authority).to_ascii_lowercase();
    h == "localhost" || h == "127.0.0.1" || h == "::1"
}

/// Checks `Host` and `Origin`; `local` says the request came from the machine itself.
pub fn check_origin(host: Option<&str>, origin: Option<&str>, local: bool) -> Result<(), Refusal> {
    let refuse = |why: &str| Err(Refusal::plain(403, why));
    let origin_authority = origin.map(|o| o.split_once("://").map_or(o, |(_, a)| a));
    if local {
        if !host.is_some_and(is_loopback_name) {
            return refuse("Host must name this machine (localhost, 127.0.0.1 or [::1])");
        }
        if let Some(a) = origin_authority
            && origin != Some("null")
            && !is_loopback_name(a)
        {
            return refuse("Origin must be a page of this machine");
        }
        return Ok(());
    }
    match (origin_authority, host) {
        (Some(a), Some(h)) if a.eq_ignore_ascii_case(h.trim()) => Ok(()),
        (Some(_), _) => refuse("Origin is not the host this endpoint serves"),
        (None, _) => Ok(()),
    }
}

/// Checks a POST's `Content-Type` and `Accept`.
pub fn check_post_headers(content_type: Option<&str>, accept: Option<&str>) -> Result<(), Refusal> {
    let media = content_type
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase());
    if media.as_deref() != Some("application/json") {
        return Err(Refusal::plain(415, "Content-Type must be application/json"));
    }
    let accept = accept.unwrap_or("").to_ascii_lowercase();
    let takes = |m: &str| {
        accept.split(',').any(|a| {
            let a = a.split(';').next().unwrap_or("").trim();
            a == m || a == "*/*"
        })
    };
    if !(takes("application/json") && takes("text/event-stream")) {
        return Err(Refusal::plain(
            406,
            "Accept must take both application/json and text/event-stream",
        ));
    }
    Ok(())
}

/// Reads a POST's body: one JSON-RPC message.
pub fn read_body(body: &[u8]) -> Result<RpcMessage, Refusal> {
    match jsonrpc::decode(body) {
        Ok(Decoded::Single(m)) => Ok(m),
        Ok(Decoded::Batch(_)) => Err(Refusal::plain(
            400,
            "batches are not taken: send one JSON-RPC message per request",
        )),
        Err(RpcDecodeError::NotJson(e)) => Err(Refusal::rpc(
            400,
            Value::Null,
            codes::PARSE_ERROR,
            &format!("Parse error: {e}"),
        )),
        Err(e) => Err(Refusal::plain(400, &e.to_string())),
    }
}

/// Whether a message is of the stateless revision: it names it in `_meta`, or the header
/// does and it carries no session.
pub fn is_stateless(message: &RpcMessage, header: Option<&str>) -> bool {
    let params = match message {
        RpcMessage::Request { params, .. } | RpcMessage::Notification { params, .. } => {
            params.as_ref()
        }
        RpcMessage::Response { .. } => None,
    };
    let meta = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    let named = meta.or(header);
    named
        .and_then(ProtocolVersion::parse)
        .is_some_and(ProtocolVersion::is_stateless)
        || matches!(message, RpcMessage::Request { method, .. } if method == "server/discover")
}

/// Checks a stateless request's header against its `_meta`.
pub fn check_stateless(message: &RpcMessage, header: Option<&str>) -> Result<(), Refusal> {
    let RpcMessage::Request { id, params, .. } = message else {
        return Ok(());
    };
    let id = match id {
        jsonrpc::RpcId::Number(n) => Value::Number(n.clone()),
        jsonrpc::RpcId::String(s) => Value::String(s.clone()),
    };
    let Some(header) = header else {
        return Err(Refusal::rpc(
            400,
            id,
            HEADER_MISMATCH,
            "Missing MCP-Protocol-Version header",
        ));
    };
    let meta = params.as_ref().and_then(|p| p.get("_meta"));
    let version = meta
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    let caps = meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES));
    let (Some(version), Some(_)) = (version, caps) else {
        return Err(Refusal::rpc(
            400,
            id,
            codes::INVALID_PARAMS,
            "Invalid params: _meta must name the protocol version and the client's capabilities",
        ));
    };
    if version != header {
        return Err(Refusal::rpc(
            400,
            id,
            HEADER_MISMATCH,
            "MCP-Protocol-Version header does not match _meta",
        ));
    }
    if ProtocolVersion::parse(version).is_none_or(|v| !v.is_stateless()) {
        return Err(Refusal {
            status: 400,
            body: json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": crate::mcp::stateless::UNSUPPORTED_PROTOCOL_VERSION,
                "message": format!("unsupported protocol version {version}"),
                "data": {"supported": [ProtocolVersion::NEWEST.as_str()], "requested": version}}}),
        });
    }
    Ok(())
}

/// The error of a request that needs a client capability the request did not declare.
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;

/// The HTTP status of the answer to a stateless request: 404 for "method not found" (the
/// method does not exist at this endpoint), 400 for a missing client capability, else 200.
pub fn stateless_status(answer: &Value) -> u16 {
    match answer.pointer("/error/code").and_then(Value::as_i64) {
        Some(codes::METHOD_NOT_FOUND) => 404,
        Some(MISSING_CLIENT_CAPABILITY) => 400,
        _ => 200,
    }
}

/// Checks a session request's `MCP-Protocol-Version` header, when it sends one.
pub fn check_session_header(header: Option<&str>) -> Result<(), Refusal> {
    match header {
        None => Ok(()),
        Some(h) if ProtocolVersion::parse_session(h).is_some() => Ok(()),
        Some(h) => Err(Refusal::plain(
            400,
            &format!("unsupported MCP-Protocol-Version: {h}"),
        )),
    }
}

/// Where protected resource metadata (RFC 9728) of `/mcp` is served.
pub const PRM_PATH: &str = "/.well-known/oauth-protected-resource";

/// Who a host is: its bearer credential, else on this machine (`local`) the loopback
/// participant's token when the space names one (`gateway.mcp.loopback_as`), else no one (401).
/// The session machine compares it with the one that opened a session; it is checked against
/// the space (a token or a JWT) when a session opens.
pub fn credential<'a>(
    bearer: Option<&'a str>,
    loopback: Option<&'a str>,
    local: bool,
) -> Option<&'a str> {
    bearer.or(loopback.filter(|_| local))
}

/// The endpoint's origin as the host named it (`scheme://host`), from its `Host` (checked
/// against DNS rebinding before): `localhost` when it is missing or not a plain host, so
/// nothing of a request's making reaches a header unquoted.
pub fn origin(tls: bool, host: Option<&str>) -> String {
    let scheme = if tls { "https" } else { "http" };
    let plain = |h: &&str| {
        !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
    };
    format!("{scheme}://{}", host.filter(plain).unwrap_or("localhost"))
}

/// The `WWW-Authenticate` of a 401; with a JWT issuer it names the protected resource
/// metadata by an absolute URL (RFC 9728 makes it a URL: hosts parse it as one).
pub fn challenge(origin: &str, takes_jwts: bool) -> String {
    if takes_jwts {
        format!("Bearer resource_metadata=\"{origin}{PRM_PATH}/mcp\"")
    } else {
        "Bearer".to_owned()
    }
}

/// The protected resource metadata of `/mcp` at `origin`: bearer tokens from `issuer`.
pub fn resource_metadata(origin: &str, issuer: &str) -> Value {
    json!({
        "resource": format!("{origin}/mcp"),
        "authorization_servers": [issuer],
        "bearer_methods_supported": ["header"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebinding_is_refused_and_local_hosts_taken() {
        assert!(check_origin(Some("localhost:3000"), Some("http://localhost:3000"), true).is_ok());
        assert!(check_origin(Some("127.0.0.1:9"), None, true).is_ok());
        assert!(check_origin(Some("[::1]:9"), None, true).is_ok());
        let r = check_origin(
            Some("evil.example.com"),
            Some("http://evil.example.com"),
            true,
        )
        .unwrap_err();
        assert_eq!(r.status, 403);
        assert!(check_origin(Some("localhost:1"), Some("http://evil.example.com"), true).is_err());
        assert!(
            check_origin(
                Some("space.example.com"),
                Some("https://space.example.com"),
                false
            )
            .is_ok()
        );
        assert!(
            check_origin(
                Some("space.example.com"),
                Some("https://evil.example.com"),
                false
            )
            .is_err()
        );
        assert!(check_origin(Some("space.example.com"), None, false).is_ok());
    }

    #[test]
    fn post_headers_and_bodies() {
        assert!(
            check_post_headers(
                Some("application/json"),
                Some("application/json, text/event-stream")
            )
            .is_ok()
        );
        assert_eq!(
            check_post_headers(Some("text/plain"), Some("*/*"))
                .unwrap_err()
                .status,
            415
        );
        assert_eq!(
            check_post_headers(Some("application/json"), Some("application/json"))
                .unwrap_err()
                .status,
            406
        );
        assert_eq!(
            read_body(b"{nope").unwrap_err().body["error"]["code"],
            -32700
        );
        let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#;
        assert_eq!(read_body(batch).unwrap_err().status, 400);
        assert!(matches!(
            read_body(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Ok(RpcMessage::Request { .. })
        ));
    }

    #[test]
    fn stateless_requests_must_agree_with_their_header() {
        let m = read_body(br#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#).unwrap();
        assert!(is_stateless(&m, None));
        assert!(check_stateless(&m, Some("2026-07-28")).is_ok());
        let r = check_stateless(&m, Some("2025-11-25")).unwrap_err();
        assert_eq!(
            (r.status, r.body["error"]["code"].as_i64()),
            (400, Some(-32020))
        );
        assert_eq!(r.body["id"], 3);
        assert_eq!(
            check_stateless(&m, None).unwrap_err().body["error"]["code"],
            -32020
        );
        let bare = read_body(br#"{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#).unwrap();
        assert_eq!(
            check_stateless(&bare, Some("2026-07-28")).unwrap_err().body["error"]["code"],
            -32602
        );
        assert!(check_session_header(Some("2025-11-25")).is_ok());
        assert_eq!(stateless_status(&json!({"error": {"code": -32601}})), 404);
        assert_eq!(stateless_status(&json!({"result": {}})), 200);
        assert!(check_session_header(Some("1999-01-01")).is_err());
    }

    #[test]
    fn a_host_is_its_bearer_else_the_loopback_participant_on_this_machine_only() {
        assert_eq!(credential(Some("t"), Some("desk"), true), Some("t"));
        assert_eq!(credential(None, Some("desk"), true), Some("desk"));
        assert_eq!(credential(None, Some("desk"), false), None);
        assert_eq!(credential(None, None, true), None);
    }

    #[test]
    fn the_challenge_and_the_metadata_name_the_origin_the_host_asked() {
        let o = origin(true, Some("space.example:8443"));
        assert_eq!(o, "https://space.example:8443");
        assert_eq!(origin(false, Some("[::1]:80")), "http://[::1]:80");
        // Nothing a request makes up reaches the header unquoted.
        assert_eq!(origin(false, Some("a\"b")), "http://localhost");
        assert_eq!(origin(false, None), "http://localhost");
        assert_eq!(
            challenge(&o, true),
            "Bearer resource_metadata=\"https://space.example:8443/.well-known/oauth-protected-resource/mcp\""
        );
        assert_eq!(challenge(&o, false), "Bearer");
        let m = resource_metadata(&o, "https://idp.test");
        assert_eq!(m["resource"], "https://space.example:8443/mcp");
        assert_eq!(m["authorization_servers"][0], "https://idp.test");
    }
}
