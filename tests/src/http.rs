//! One plain HTTP/1.1 exchange with a gateway, as `curl` would make it: for tests that check
//! the HTTP API's status codes and bodies over a real socket.

use std::io::{Read, Write};
use std::net::TcpStream;

/// `method path` with a bearer token and a JSON body; the status code and the body.
pub fn exchange(addr: &str, method: &str, path: &str, token: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("the gateway accepts connections");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("the request is written");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("the answer is read");
    let status = out[9..12].parse().expect("a status line");
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_owned())
}

/// `POST /participants/{who}/messages` with `body` (a partial envelope).
pub fn post(addr: &str, who: &str, token: &str, body: &str) -> (u16, String) {
    exchange(
        addr,
        "POST",
        &format!("/participants/{who}/messages"),
        token,
        body,
    )
}
