//! A client WebSocket to a gateway, for any runtime: the hook a runtime supplies
//! ([`Runtime`]), opening one within a deadline with a reason a person can act on when it
//! fails ([`open_within`]), reading it ([`read_client`]) and bounding each write
//! ([`write_within`]). Every client-side runtime (participant, agent, bridge) goes through
//! these, so they open, read and give up on sockets the same way.

use std::future::Future;

use futures_util::{Sink, Stream, StreamExt};
use mew_core::participant::Event;
use serde_json::Value;
use tungstenite::client::IntoClientRequest;
use tungstenite::handshake::client::Request;
use tungstenite::http::{HeaderName, HeaderValue};
use tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tungstenite::{Error as WsError, Message};

use crate::clock::Sleep;
use crate::websocket::ws_config;

/// What a participant runtime needs from an async runtime.
pub trait Runtime: Sleep + Send + Sync + Sized + 'static {
    /// A client WebSocket.
    type Ws: Stream<Item = Result<Message, WsError>>
        + Sink<Message, Error = WsError>
        + Send
        + Unpin
        + 'static;
    /// The application's end of the event queue.
    type Events: Send + 'static;
    /// The runtime's end of the event queue.
    type EventSender: Send + 'static;

    /// Runs `fut` in the background.
    fn spawn(fut: impl Future<Output = ()> + Send + 'static);
    /// Opens a client WebSocket (TCP, then the handshake for `req`).
    fn open(
        req: Request,
        config: WebSocketConfig,
    ) -> impl Future<Output = Result<Self::Ws, WsError>> + Send;
    /// A bounded event queue of `capacity`.
    fn event_queue(capacity: usize) -> (Self::EventSender, Self::Events);
    /// Queues an event without waiting; false when the queue is full or closed.
    fn try_send_event(tx: &Self::EventSender, e: Event) -> bool;
    /// The next event; `None` once the runtime stopped and the queue is empty.
    fn recv_event(rx: &mut Self::Events) -> impl Future<Output = Option<Event>> + Send;
}

/// The client handshake request for `url` with extra headers (e.g. `Authorization`).
pub fn client_request(url: &str, headers: &[(String, String)]) -> Result<Request, String> {
    let mut req = url
        .into_client_request()
        .map_err(|e| format!("bad gateway url {url}: {e}"))?;
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| e.to_string())?;
        let value = HeaderValue::from_str(v).map_err(|e| e.to_string())?;
        req.headers_mut().insert(name, value);
    }
    Ok(req)
}

/// The disconnect reason reported for a close frame from the gateway.
pub fn close_reason(frame: Option<&CloseFrame>) -> String {
    match frame {
        Some(f) => format!("closed by gateway ({}): {}", f.code, f.reason),
        None => "closed by gateway".into(),
    }
}

/// What a client connection's reader reports to the task driving the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A text frame (envelope or `#stream#data`).
    Frame(String),
    /// A pong answering our ping.
    Pong,
    /// The connection ended, and why.
    Closed(String),
}

/// Reads one client WebSocket until it ends, handing each event to `deliver`; stops early
/// when `deliver` answers `false` (the driving task is gone). Shared by every client-side
/// runtime (participant, bridge) so they read sockets the same way.
pub async fn read_client<S, F, Fut>(mut stream: S, mut deliver: F)
where
    S: Stream<Item = Result<Message, WsError>> + Unpin,
    F: FnMut(Incoming) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let reason = loop {
        let event = match stream.next().await {
            Some(Ok(Message::Text(t))) => Incoming::Frame(t.as_str().to_owned()),
            Some(Ok(Message::Pong(_))) => Incoming::Pong,
            Some(Ok(Message::Close(f))) => break close_reason(f.as_ref()),
            Some(Ok(_)) => continue,
            Some(Err(e)) => break format!("connection error: {e}"),
            None => break "connection closed".into(),
        };
        if !deliver(event).await {
            return;
        }
    };
    deliver(Incoming::Closed(reason)).await;
}

/// One write on a gateway socket, bounded by `within`: the reason to give the socket up,
/// when it must be (the participant, agent and bridge runtimes all write through this).
pub async fn write_within<S: crate::clock::Sleep, E>(
    within: std::time::Duration,
    write: impl Future<Output = Result<(), E>>,
) -> Result<(), &'static str> {
    match crate::clock::timeout::<S, _>(within, write).await {
        Some(Ok(())) => Ok(()),
        Some(Err(_)) => Err("the connection failed while writing"),
        None => Err("write timeout: the gateway is not reading"),
    }
}

/// Why a client WebSocket did not open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenFailure {
    /// One line for the logs and the core.
    pub reason: String,
    /// Trying again cannot help (the gateway's certificate does not verify).
    pub fatal: bool,
}

/// Opens the WebSocket of a participant, giving up after `within` (the core gives up on the
/// attempt at the same deadline; this frees the socket of a gateway that never answers).
pub async fn open_within<R: Runtime>(
    url: &str,
    headers: &[(String, String)],
    max_frame: usize,
    within: std::time::Duration,
) -> Result<R::Ws, OpenFailure> {
    let retry = |reason: String| OpenFailure {
        reason,
        fatal: false,
    };
    let req = client_request(url, headers).map_err(|e| OpenFailure {
        reason: e,
        fatal: true,
    })?;
    match crate::clock::timeout::<R, _>(within, R::open(req, ws_config(max_frame))).await {
        Some(Ok(ws)) => Ok(ws),
        Some(Err(WsError::Io(e))) => match crate::client::tls::certificate_failure(&e) {
            Some(why) => Err(OpenFailure {
                reason: format!("cannot connect to {url}: {why}"),
                fatal: true,
            }),
            None => Err(retry(format!("cannot connect to {url}: {e}"))),
        },
        Some(Err(WsError::Url(tungstenite::error::UrlError::UnsupportedUrlScheme))) => {
            Err(OpenFailure {
                reason: format!("cannot connect to {url}: {}", scheme_advice(url)),
                fatal: true,
            })
        }
        Some(Err(WsError::Http(resp))) if resp.status() == 404 => Err(OpenFailure {
            reason: format!(
                "cannot connect to {url}: {}",
                not_found_advice(url, resp.body().as_deref())
            ),
            fatal: true,
        }),
        Some(Err(e)) => Err(retry(format!("cannot connect to {url}: {e}"))),
        None => Err(retry(format!(
            "cannot connect to {url}: no answer within {within:?}"
        ))),
    }
}

/// What to write instead of a gateway address with a scheme a WebSocket cannot use.
fn scheme_advice(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let suggested = match scheme.to_ascii_lowercase().as_str() {
        "https" => Some(format!("wss://{rest}")),
        "http" => Some(format!("ws://{rest}")),
        _ => None,
    };
    match suggested {
        Some(s) => {
            format!("a gateway is joined over WebSocket: use ws:// (or wss:// with TLS), e.g. {s}")
        }
        None => {
            "a gateway is joined over WebSocket: its address begins with ws:// (or wss:// with TLS)"
                .into()
        }
    }
}

/// Why a WebSocket upgrade was answered 404: the gateway's own answer names the space it
/// does not serve; any other 404 comes from something that is not a gateway's WebSocket.
fn not_found_advice(url: &str, body: Option<&[u8]>) -> String {
    let answer: Option<Value> = body.and_then(|b| serde_json::from_slice(b).ok());
    let space = url
        .split_once("space=")
        .map(|(_, s)| s.split('&').next().unwrap_or(s))
        .unwrap_or_default();
    if answer
        .as_ref()
        .is_some_and(|a| a["error"] == "unknown_space")
    {
        format!("the gateway there serves no space {space:?} (HTTP 404): check the space id")
    } else {
        "nothing there accepts a MEW WebSocket (HTTP 404): check the host and port of the gateway"
            .into()
    }
}

/// Where a client WebSocket URL points: host, port (80 for `ws://`, 443 for `wss://`), and
/// whether it wants TLS; an `Err` for any other scheme.
pub fn url_target(req: &Request) -> Result<(String, u16, bool), WsError> {
    use tungstenite::error::UrlError;
    let uri = req.uri();
    let tls = match uri.scheme_str() {
        Some("ws") => false,
        Some("wss") => true,
        _ => return Err(WsError::Url(UrlError::UnsupportedUrlScheme)),
    };
    let host = uri.host().ok_or(WsError::Url(UrlError::NoHostName))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    Ok((host, port, tls))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_requests_carry_headers_and_refuse_bad_urls() {
        let req = client_request(
            "ws://127.0.0.1:1/ws?space=s",
            &[("Authorization".into(), "Bearer t".into())],
        )
        .unwrap();
        assert_eq!(req.headers()["authorization"], "Bearer t");
        assert!(client_request("not a url", &[]).is_err());
        assert!(client_request("ws://h/", &[("bad header".into(), "v".into())]).is_err());
        let f = CloseFrame {
            code: 1001.into(),
            reason: "bye".into(),
        };
        assert_eq!(close_reason(Some(&f)), "closed by gateway (1001): bye");
    }

    #[test]
    fn wrong_schemes_and_404s_say_what_to_change() {
        assert!(scheme_advice("http://h:1/ws?space=s").contains("e.g. ws://h:1/ws?space=s"));
        assert!(scheme_advice("https://h/ws").contains("e.g. wss://h/ws"));
        assert!(scheme_advice("ftp://h").contains("begins with ws://"));
        let gw = br#"{"error":"unknown_space","message":"no space \"x\" here"}"#;
        let m = not_found_advice("ws://h:1/ws?space=x&a=b", Some(gw));
        assert!(
            m.contains(r#"no space "x""#) && m.contains("space id"),
            "{m}"
        );
        let m = not_found_advice("ws://h:1/ws?space=x", Some(b"<html>"));
        assert!(m.contains("host and port"), "{m}");
        assert!(not_found_advice("ws://h:1/", None).contains("host and port"));
    }
}
