//! The space's web page under `/ui/`: static files the program embeds (the gateway serves
//! only what it is given, from memory, by exact path), and one stateless helper endpoint that
//! runs the core's progressive-automation rule for the page.
//!
//! Every file goes out with a strict Content-Security-Policy (scripts, styles and
//! connections from the page's own origin only; no inline code, no frames, no forms posted
//! anywhere), `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer`, an `ETag` and
//! `Cache-Control: no-cache` (a browser keeps the file but asks again, so a new program's page
//! is never mixed with an old one's script).
//!
//! `POST /ui/api/suggest` takes `{"observed": [envelope, ...], "min": N}` (the proposals,
//! fulfilments and rejections a participant saw) and answers `{"suggestions": [...]}` from
//! [`mew_core::automation::suggest`], each with the `capability/grant` payload to send: the
//! same suggestions the terminal interface shows. It reads nothing of the space and needs no
//! token; its body is bounded like every request body.

use mew_core::automation;
use serde_json::{Value, json};

use crate::Response;
use crate::server::http::RequestHead;

/// One embedded file of the page.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// Path under `/ui/` (`index.html`, `app.js`, ...).
    pub path: &'static str,
    /// The file's bytes.
    pub body: &'static [u8],
}

/// The page's Content-Security-Policy. `connect-src 'self'` covers the WebSocket to the same
/// host and port (CSP level 3).
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// Decided proposals the suggestion endpoint considers, at most.
pub const MAX_OBSERVED: usize = 5_000;

/// The prefix every path of the page has.
pub const PREFIX: &str = "/ui/";

/// The `Content-Type` of a file, by its extension.
pub fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, e)| e) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") | Some("mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("json") => "application/json",
        Some("ico") => "image/x-icon",
        _ => "application/octet-stream",
    }
}

/// A strong validator from the bytes (FNV-1a: not a secret, only a change detector).
fn etag(body: &[u8]) -> String {
    let h = body.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("\"{h:016x}-{}\"", body.len())
}

fn with_page_headers(mut r: Response) -> Response {
    r.headers.extend([
        ("Content-Security-Policy", CSP.to_owned()),
        ("X-Content-Type-Options", "nosniff".to_owned()),
        ("Referrer-Policy", "no-referrer".to_owned()),
        ("X-Frame-Options", "DENY".to_owned()),
    ]);
    r
}

/// The answer to a request routed to the page (`path` is the request's path, `/ui` or below
/// `/ui/`); `body` is the request body, already read within the body limit. `None` assets:
/// this server has no page.
pub fn respond(
    assets: Option<&'static [Asset]>,
    head: &RequestHead,
    path: &str,
    body: &[u8],
) -> Response {
    let Some(assets) = assets else {
        return Response::error(404, "not_found", "no such endpoint");
    };
    if path == "/ui" {
        // Relative URLs of the page resolve under /ui/.
        let q = head
            .query
            .as_deref()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        let mut r = Response::error(308, "moved", "the page is at /ui/");
        r.headers.push(("Location", format!("/ui/{q}")));
        return r;
    }
    let Some(name) = path.strip_prefix(PREFIX) else {
        return Response::error(404, "not_found", "no such endpoint");
    };
    if name == "api/suggest" {
        if head.method != "POST" {
            return Response::error(405, "method_not_allowed", "POST a list of envelopes");
        }
        return with_page_headers(suggest(body));
    }
    if head.method != "GET" {
        return Response::error(405, "method_not_allowed", "the page's files are read-only");
    }
    let name = if name.is_empty() { "index.html" } else { name };
    let Some(asset) = assets.iter().find(|a| a.path == name) else {
        return Response::error(404, "not_found", "no such file of the page");
    };
    let tag = etag(asset.body);
    let fresh = head
        .header("if-none-match")
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    let r = Response {
        status: if fresh { 304 } else { 200 },
        content_type: content_type(asset.path),
        body: if fresh {
            Vec::new()
        } else {
            asset.body.to_vec()
        },
        headers: vec![("ETag", tag), ("Cache-Control", "no-cache".to_owned())],
    };
    with_page_headers(r)
}

/// `POST /ui/api/suggest`.
pub fn suggest(body: &[u8]) -> Response {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Response::error(400, "bad_request", "the body is not JSON");
    };
    let Some(observed) = v["observed"].as_array() else {
        return Response::error(
            400,
            "bad_request",
            "expected {\"observed\": [envelope, ...]}",
        );
    };
    if observed.len() > MAX_OBSERVED {
        return Response::error(
            413,
            "too_large",
            &format!("at most {MAX_OBSERVED} envelopes"),
        );
    }
    let min = match &v["min"] {
        Value::Null => 3,
        m => match m.as_u64() {
            Some(n @ 1..=1000) => n as usize,
            _ => return Response::error(400, "bad_request", "min: a number from 1 to 1000"),
        },
    };
    let lines: Vec<String> = observed.iter().map(Value::to_string).collect();
    let decisions = automation::decisions(lines.iter().map(String::as_str));
    let list: Vec<Value> = automation::suggest(&decisions, min, &Default::default())
        .into_iter()
        .map(|s| {
            json!({"recipient": s.recipient, "capability": s.capability,
                   "approved": s.approved, "approvers": s.approvers,
                   "first": s.first, "last": s.last, "grant": s.grant_payload()})
        })
        .collect();
    Response::json(200, &json!({"suggestions": list}))
}

#[cfg(test)]
mod tests {
    use super::*;

    static FILES: &[Asset] = &[
        Asset {
            path: "index.html",
            body: b"<!doctype html><title>t</title>",
        },
        Asset {
            path: "app.js",
            body: b"// @ts-check\n",
        },
    ];

    use crate::server::route::tests::head;

    fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
        r.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn files_with_their_types_policy_and_validators() {
        let h = head("GET", "/ui/", &[]);
        let r = respond(Some(FILES), &h, &h.path, b"");
        assert_eq!(r.status, 200);
        assert_eq!(r.content_type, "text/html; charset=utf-8");
        assert_eq!(r.body, FILES[0].body);
        assert_eq!(header(&r, "content-security-policy"), Some(CSP));
        assert_eq!(header(&r, "x-content-type-options"), Some("nosniff"));
        assert_eq!(header(&r, "cache-control"), Some("no-cache"));
        let tag = header(&r, "etag").unwrap().to_owned();
        let h = head("GET", "/ui/app.js", &[]);
        let js = respond(Some(FILES), &h, &h.path, b"");
        assert_eq!(js.content_type, "text/javascript; charset=utf-8");
        assert_ne!(header(&js, "etag").unwrap(), tag);
        // Unchanged: 304 without a body.
        let h = head("GET", "/ui/index.html", &[("If-None-Match", &tag)]);
        let r = respond(Some(FILES), &h, &h.path, b"");
        assert_eq!((r.status, r.body.len()), (304, 0));
    }

    #[test]
    fn only_known_files_by_exact_name() {
        for p in [
            "/ui/nope.js",
            "/ui/../Cargo.toml",
            "/ui/%2e%2e/x",
            "/ui/app.js/",
        ] {
            let h = head("GET", p, &[]);
            assert_eq!(respond(Some(FILES), &h, &h.path, b"").status, 404, "{p}");
        }
        let h = head("GET", "/ui/", &[]);
        assert_eq!(respond(None, &h, &h.path, b"").status, 404);
        let h = head("PUT", "/ui/app.js", &[]);
        assert_eq!(respond(Some(FILES), &h, &h.path, b"").status, 405);
        let h = head("GET", "/ui?space=s", &[]);
        let r = respond(Some(FILES), &h, &h.path, b"");
        assert_eq!(r.status, 308);
        assert_eq!(header(&r, "location"), Some("/ui/?space=s"));
    }

    #[test]
    fn suggestions_from_observed_envelopes() {
        let mut observed = Vec::new();
        for i in 0..3 {
            let payload = json!({"method": "tools/call",
                                 "params": {"name": "read_file", "arguments": {"path": "/a"}}});
            observed.push(
                json!({"id": format!("p{i}"), "kind": "mcp/proposal", "from": "agent",
                                 "to": ["fs"], "ts": format!("2026-01-01T00:00:0{i}Z"),
                                 "payload": payload}),
            );
            observed.push(
                json!({"id": format!("r{i}"), "kind": "mcp/request", "from": "human",
                                 "to": ["fs"], "correlation_id": [format!("p{i}")],
                                 "ts": format!("2026-01-01T00:00:0{i}Z"), "payload": payload}),
            );
        }
        let body = serde_json::to_vec(&json!({"observed": observed})).unwrap();
        let h = head("POST", "/ui/api/suggest", &[]);
        let r = respond(Some(FILES), &h, &h.path, &body);
        assert_eq!(r.status, 200);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let s = &v["suggestions"][0];
        assert_eq!(s["recipient"], "agent");
        assert_eq!(s["approved"].as_array().unwrap().len(), 3);
        assert_eq!(s["grant"]["capabilities"][0], s["capability"]);
        assert_eq!(
            s["capability"]["payload"]["params"]["arguments"]["path"],
            "/a"
        );
        // Two approvals are not enough.
        let body = serde_json::to_vec(&json!({"observed": observed[..4]})).unwrap();
        let r = suggest(&body);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["suggestions"], json!([]));
        assert_eq!(suggest(b"nope").status, 400);
        assert_eq!(suggest(br#"{"observed": [], "min": 0}"#).status, 400);
        let h = head("GET", "/ui/api/suggest", &[]);
        assert_eq!(respond(Some(FILES), &h, &h.path, b"").status, 405);
    }
}
