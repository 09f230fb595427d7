//! The server side of the WebSocket opening handshake (RFC 6455 section 4.2).

use thiserror::Error;

use crate::server::http::RequestHead;

/// Why an upgrade request was refused (answered with 400, or 426 for a wrong version).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UpgradeError {
    /// Not a GET.
    #[error("websocket upgrade must use GET")]
    NotGet,
    /// `Connection` does not list `upgrade`.
    #[error("missing `Connection: upgrade`")]
    NoConnectionUpgrade,
    /// `Sec-WebSocket-Version` is not 13.
    #[error("unsupported websocket version (need 13)")]
    Version,
    /// `Sec-WebSocket-Key` missing or not 16 bytes of base64.
    #[error("missing or malformed Sec-WebSocket-Key")]
    Key,
}

impl UpgradeError {
    /// The HTTP status that answers this error.
    pub fn status(&self) -> u16 {
        match self {
            UpgradeError::Version => 426,
            _ => 400,
        }
    }
}

/// Checks an upgrade request and returns the `Sec-WebSocket-Accept` value.
pub fn accept_key(head: &RequestHead) -> Result<String, UpgradeError> {
    if head.method != "GET" {
        return Err(UpgradeError::NotGet);
    }
    if !head.header_has_token("connection", "upgrade") {
        return Err(UpgradeError::NoConnectionUpgrade);
    }
    if head.header("sec-websocket-version").map(str::trim) != Some("13") {
        return Err(UpgradeError::Version);
    }
    let key = head
        .header("sec-websocket-key")
        .map(str::trim)
        .ok_or(UpgradeError::Key)?;
    // 16 random bytes in base64 are 24 characters ending in "==".
    let well_formed = key.len() == 24
        && key.ends_with("==")
        && key[..22]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/');
    if !well_formed {
        return Err(UpgradeError::Key);
    }
    Ok(tungstenite::handshake::derive_accept_key(key.as_bytes()))
}

/// The `101 Switching Protocols` response completing the handshake.
pub fn switching_protocols(accept: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(headers: &[(&str, &str)]) -> RequestHead {
        RequestHead {
            method: "GET".into(),
            path: "/ws".into(),
            query: None,
            headers: headers
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            version: 1,
        }
    }

    #[test]
    fn rfc_6455_example_key() {
        let h = head(&[
            ("Upgrade", "websocket"),
            ("Connection", "keep-alive, Upgrade"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ]);
        assert_eq!(accept_key(&h).unwrap(), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        let resp = String::from_utf8(switching_protocols("abc")).unwrap();
        assert!(resp.starts_with("HTTP/1.1 101 "));
        assert!(resp.contains("Sec-WebSocket-Accept: abc\r\n"));
        assert!(resp.ends_with("\r\n\r\n"));
    }

    #[test]
    fn refuses_bad_upgrades() {
        let base = [
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ];
        assert_eq!(
            accept_key(&head(&base[..3])),
            Err(UpgradeError::Key),
            "missing key"
        );
        assert_eq!(
            accept_key(&head(&[base[0], base[2], base[3]])),
            Err(UpgradeError::NoConnectionUpgrade)
        );
        let mut v8 = base;
        v8[2] = ("Sec-WebSocket-Version", "8");
        assert_eq!(accept_key(&head(&v8)), Err(UpgradeError::Version));
        assert_eq!(UpgradeError::Version.status(), 426);
        let mut badkey = base;
        badkey[3] = ("Sec-WebSocket-Key", "short");
        assert_eq!(accept_key(&head(&badkey)), Err(UpgradeError::Key));
        let mut post = head(&base);
        post.method = "POST".into();
        assert_eq!(accept_key(&post), Err(UpgradeError::NotGet));
    }
}
