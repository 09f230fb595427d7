//! An allowed `tools/call` through a space's `/mcp` (host session -> gateway -> bridge ->
//! MCP server over Streamable HTTP and back) against the same call to the server directly,
//! measured from outside: median and p99 round trip, sequential.
//!
//! ```text
//! (cd tests/mcp-conformance/everything-server && PORT=3811 node_modules/.bin/tsx everything-server.ts) &
//! MEW=target/release/mew MEW_BRIDGE_REVISION=2025-11-25 tests/mcp-conformance/serve-space http://localhost:3811/mcp 8931 &
//! MEW_FRONT_DIRECT=http://localhost:3811/mcp MEW_FRONT_SPACE=http://localhost:8931/mcp \
//!   cargo bench -p mew-benches --bench front
//! ```
//!
//! Both are asked the same way: one `initialize` (2025-11-25), then `MEW_FRONT_N` (1000)
//! calls of the fixture's `test_simple_text`, each one POST on a fresh connection (as the
//! gateway closes every HTTP exchange), after 100 unmeasured ones.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn split(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let addr = authority.replace("localhost", "127.0.0.1");
    (addr, format!("/{path}"))
}

fn post(url: &str, session: Option<&str>, body: &str) -> (String, String) {
    let (addr, path) = split(url);
    let mut s = TcpStream::connect(&addr).expect("connect");
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let sid = session.map_or(String::new(), |s| format!("Mcp-Session-Id: {s}\r\n"));
    let host = addr.replace("127.0.0.1", "localhost");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n{sid}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let out = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (head.to_owned(), body.to_owned())
}

fn session(url: &str) -> String {
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#;
    let (head, _) = post(url, None, init);
    let sid = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_owned())
        })
        .expect("a session id");
    post(
        url,
        Some(&sid),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    sid
}

fn run(url: &str, n: usize) -> Vec<Duration> {
    let sid = session(url);
    let call = |i: usize| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"test_simple_text","arguments":{{}}}}}}"#
        );
        let t = Instant::now();
        let (_, answer) = post(url, Some(&sid), &body);
        let d = t.elapsed();
        assert!(answer.contains("simple text response"), "{answer}");
        d
    };
    for i in 0..100 {
        call(i + 1);
    }
    let mut times: Vec<Duration> = (0..n).map(|i| call(i + 1000)).collect();
    times.sort();
    times
}

fn pct(times: &[Duration], p: f64) -> Duration {
    times[((times.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let (Ok(direct), Ok(space)) = (
        std::env::var("MEW_FRONT_DIRECT"),
        std::env::var("MEW_FRONT_SPACE"),
    ) else {
        eprintln!("set MEW_FRONT_DIRECT and MEW_FRONT_SPACE (see the file's documentation)");
        return;
    };
    let n = std::env::var("MEW_FRONT_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let d = run(&direct, n);
    let s = run(&space, n);
    let (dm, dp) = (pct(&d, 0.5), pct(&d, 0.99));
    let (sm, sp) = (pct(&s, 0.5), pct(&s, 0.99));
    println!("direct:          median {dm:?}, p99 {dp:?} ({n} calls)");
    println!("through /mcp:    median {sm:?}, p99 {sp:?} ({n} calls)");
    println!(
        "ratio at the median: {:.2}x",
        sm.as_secs_f64() / dm.as_secs_f64()
    );
}
