//! The recent history the gateway keeps, as this participant may see it
//! (`GET /participants/{id}/messages?since=`, the HTTP API of the gateway the participant
//! joined): fetched after each join, so that a reviewer sees what led to a proposal.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use mew_core::Envelope;
use serde_json::Value;

/// How long the fetch may take, connecting and reading.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The most an answer may hold (the gateway keeps 16 MB of history by default).
const MAX_ANSWER: u64 = 64 * 1024 * 1024;

/// The envelopes `me` may see, oldest first (after `since`, an envelope id, when given);
/// an entry that is no envelope is left out.
pub async fn fetch(
    gateway_url: String,
    token: String,
    me: String,
    since: Option<String>,
) -> Result<Vec<Envelope>, String> {
    let list = tokio::task::spawn_blocking(move || {
        fetch_blocking(&gateway_url, &token, &me, since.as_deref())
    })
    .await
    .map_err(|e| e.to_string())??;
    Ok(list
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect())
}

/// Where the gateway's HTTP API is: TLS or not, host (without brackets), port.
fn endpoint(gateway_url: &str) -> Result<(bool, String, u16), String> {
    let (tls, rest) = if let Some(r) = gateway_url.strip_prefix("wss://") {
        (true, r)
    } else if let Some(r) = gateway_url.strip_prefix("ws://") {
        (false, r)
    } else {
        return Err(format!("not a ws:// or wss:// address: {gateway_url}"));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (h, after) = v6.split_once(']').ok_or("an unclosed [ in the address")?;
            (h, after.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let port = match port {
        Some(p) => p
            .parse()
            .map_err(|_| format!("bad port in {gateway_url}"))?,
        None if tls => 443,
        None => 80,
    };
    if host.is_empty() {
        return Err(format!("no host in {gateway_url}"));
    }
    Ok((tls, host.to_owned(), port))
}

/// `s` as one segment or query value of a URL.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn fetch_blocking(
    gateway_url: &str,
    token: &str,
    me: &str,
    since: Option<&str>,
) -> Result<Vec<Value>, String> {
    let (tls, host, port) = endpoint(gateway_url)?;
    let mut path = format!("/participants/{}/messages", encode(me));
    if let Some(s) = since {
        path.push_str(&format!("?since={}", encode(s)));
    }
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))?;
    let sock = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(TIMEOUT))
        .and_then(|()| sock.set_write_timeout(Some(TIMEOUT)))
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    if tls {
        let config = mew_driver_common::client_tls::current()?;
        let name = mew_driver_common::client_tls::server_name(&host)?;
        let conn = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
        let mut s = rustls::StreamOwned::new(conn, sock);
        s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
        // A peer that closes without TLS's close_notify still gave its whole answer.
        let _ = s.take(MAX_ANSWER).read_to_end(&mut answer);
    } else {
        let mut s = sock;
        s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
        s.take(MAX_ANSWER)
            .read_to_end(&mut answer)
            .map_err(|e| e.to_string())?;
    }
    read_answer(&answer)
}

/// The envelopes of an HTTP answer, or what went wrong.
fn read_answer(answer: &[u8]) -> Result<Vec<Value>, String> {
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the gateway's answer was cut short")?;
    let head = String::from_utf8_lossy(&answer[..split]);
    let body = &answer[split + 4..];
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    if status != "200" {
        let why = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| {
                v["message"]
                    .as_str()
                    .or(v["error"].as_str())
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        return Err(format!("the gateway answered {status} {why}")
            .trim()
            .to_owned());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(list)) => Ok(list),
        _ => Err("the gateway's history is not a list of envelopes".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_endpoint_follows_the_websocket_address() {
        assert_eq!(
            endpoint("ws://127.0.0.1:8080/ws?space=s").unwrap(),
            (false, "127.0.0.1".into(), 8080)
        );
        assert_eq!(
            endpoint("wss://mew.example").unwrap(),
            (true, "mew.example".into(), 443)
        );
        assert_eq!(
            endpoint("ws://[::1]:9/x").unwrap(),
            (false, "::1".into(), 9)
        );
        assert!(endpoint("http://x").is_err());
        assert!(endpoint("ws://:80").is_err());
        assert_eq!(encode("a b/é"), "a%20b%2F%C3%A9");
    }

    #[test]
    fn answers_are_read_or_explained() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n[{\"id\":\"a\"}]";
        assert_eq!(read_answer(ok).unwrap()[0]["id"], "a");
        let denied = b"HTTP/1.1 403 Forbidden\r\n\r\n{\"error\":\"forbidden\"}";
        assert_eq!(
            read_answer(denied).unwrap_err(),
            "the gateway answered 403 forbidden"
        );
        assert!(read_answer(b"HTTP/1.1 200").is_err());
    }
}
