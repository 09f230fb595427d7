//! The space's web page under `/ui/`: static files the program embeds (the gateway serves
//! only what it is given, from memory, by exact path).
//!
//! Every file goes out with a strict Content-Security-Policy (scripts, styles and
//! connections from the page's own origin only; no inline code, no frames, no forms posted
//! anywhere), `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer`, an `ETag` and
//! `Cache-Control: no-cache` (a browser keeps the file but asks again, so a new program's page
//! is never mixed with an old one's script).
//!
//! The page itself holds no protocol rule: it draws the space's view the gateway serves it on
//! its session ([`crate::server::ui_session`]) and sends the person's commands back.

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
/// `/ui/`). `None` assets: this server has no page.
pub fn respond(assets: Option<&'static [Asset]>, head: &RequestHead, path: &str) -> Response {
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
        let r = respond(Some(FILES), &h, &h.path);
        assert_eq!(r.status, 200);
        assert_eq!(r.content_type, "text/html; charset=utf-8");
        assert_eq!(r.body, FILES[0].body);
        assert_eq!(header(&r, "content-security-policy"), Some(CSP));
        assert_eq!(header(&r, "x-content-type-options"), Some("nosniff"));
        assert_eq!(header(&r, "cache-control"), Some("no-cache"));
        let tag = header(&r, "etag").unwrap().to_owned();
        let h = head("GET", "/ui/app.js", &[]);
        let js = respond(Some(FILES), &h, &h.path);
        assert_eq!(js.content_type, "text/javascript; charset=utf-8");
        assert_ne!(header(&js, "etag").unwrap(), tag);
        // Unchanged: 304 without a body.
        let h = head("GET", "/ui/index.html", &[("If-None-Match", &tag)]);
        let r = respond(Some(FILES), &h, &h.path);
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
            assert_eq!(respond(Some(FILES), &h, &h.path).status, 404, "{p}");
        }
        let h = head("GET", "/ui/", &[]);
        assert_eq!(respond(None, &h, &h.path).status, 404);
        let h = head("PUT", "/ui/app.js", &[]);
        assert_eq!(respond(Some(FILES), &h, &h.path).status, 405);
        let h = head("GET", "/ui?space=s", &[]);
        let r = respond(Some(FILES), &h, &h.path);
        assert_eq!(r.status, 308);
        assert_eq!(header(&r, "location"), Some("/ui/?space=s"));
    }
}
