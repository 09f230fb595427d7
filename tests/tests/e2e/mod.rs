//! End-to-end support shared by every driver's suite: a [`Driver`] starts a real gateway
//! on loopback; clients here speak raw WebSocket JSON and raw HTTP written from the spec,
//! independent of the participant runtime, so a bug shared by both of our sides cannot hide.
//! `e2e_suite!` instantiates every scenario for one driver.
#![allow(dead_code)]

pub mod drivers;
pub mod scenarios;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use mew_core::gateway::SpaceConfig;
use mew_tests::scratch::Scratch;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};

/// How long a test waits for something that should happen.
pub const WAIT: Duration = Duration::from_secs(5);
/// How long a test waits to be sure something does not happen.
pub const QUIET: Duration = Duration::from_millis(300);

/// A driver under test: its gateway server and its participant runtime.
pub trait Driver {
    /// The participant runtime hooks (the participant scenarios run this runtime).
    type Rt: mew_driver_common::client::socket::Runtime;

    /// Starts a gateway for `config` on `addr` with these options.
    fn start_with(
        config: SpaceConfig,
        addr: SocketAddr,
        opts: mew_driver_common::server::ServerOptions,
    ) -> RunningGateway;

    /// Starts a gateway for `config` on `addr`, audit logs under `base_dir`.
    fn start_on(config: SpaceConfig, base_dir: &Path, addr: SocketAddr) -> RunningGateway {
        let opts = mew_driver_common::server::ServerOptions {
            log_dir: base_dir.join(".mew/logs"),
            seed: Some(7),
            ..Default::default()
        };
        Self::start_with(config, addr, opts)
    }

    /// Starts a gateway for `config` on 127.0.0.1 with a free port.
    fn start(config: SpaceConfig, base_dir: &Path) -> RunningGateway {
        Self::start_on(config, base_dir, "127.0.0.1:0".parse().unwrap())
    }
}

/// One driver's gateway with another driver's participant runtime: interop both ways.
pub struct Mixed<G, P>(std::marker::PhantomData<(G, P)>);

impl<G: Driver, P: Driver> Driver for Mixed<G, P> {
    type Rt = P::Rt;

    fn start_with(
        config: SpaceConfig,
        addr: SocketAddr,
        opts: mew_driver_common::server::ServerOptions,
    ) -> RunningGateway {
        G::start_with(config, addr, opts)
    }
}

/// A gateway running on its own thread and runtime.
pub struct RunningGateway {
    pub addr: SocketAddr,
    /// Applies re-read configurations (drivers started through [`Driver`]).
    pub reload: Option<mew_driver_common::server::ReloadHandle>,
    stop: Option<Box<dyn FnOnce() + Send>>,
    /// The folder it writes in when no test holds it: fields drop after [`Drop::drop`] has
    /// stopped the gateway.
    dir: Option<Scratch>,
}

impl RunningGateway {
    pub fn new(addr: SocketAddr, stop: Box<dyn FnOnce() + Send>) -> Self {
        RunningGateway {
            addr,
            reload: None,
            stop: Some(stop),
            dir: None,
        }
    }

    /// Keeps `dir` (the gateway's logs and state) until the gateway has stopped.
    pub fn owning(mut self, dir: Scratch) -> Self {
        self.dir = Some(dir);
        self
    }

    /// Graceful shutdown; returns when the server has finished (logs flushed).
    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            s();
        }
    }

    pub fn ws_url(&self, space: &str) -> String {
        format!("ws://{}/ws?space={space}", self.addr)
    }
}

impl Drop for RunningGateway {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The space most scenarios use: a human with everything, an agent that may only
/// propose and chat, a service that answers MCP, and `gateway:` options from `extra`.
pub fn space(extra: &str) -> SpaceConfig {
    let yaml = format!(
        r#"
space: {{id: e2e, name: e2e}}
logging: {{enabled: false}}
participants:
  human: {{tokens: [human-token], capabilities: [{{kind: "*"}}]}}
  agent:
    tokens: [agent-token]
    capabilities: [{{kind: mcp/proposal}}, {{kind: mcp/withdraw}}, {{kind: chat}}, {{kind: capability/grant-ack}}, {{kind: participant/status}}]
  service: {{tokens: [service-token], capabilities: [{{kind: mcp/response}}, {{kind: chat}}]}}
{extra}
"#
    );
    SpaceConfig::from_yaml(&yaml).unwrap_or_else(|e| panic!("test space: {e:?}"))
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A WebSocket client that speaks raw JSON frames.
pub struct RawClient {
    pub ws: Ws,
    pub id: String,
    n: u64,
}

impl RawClient {
    /// Opens a socket, with a bearer header when `token` is given; no join is sent.
    pub async fn open(url: &str, token: Option<&str>) -> RawClient {
        let mut req = url.into_client_request().unwrap();
        if let Some(t) = token {
            req.headers_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        let (ws, _) = tokio::time::timeout(WAIT, connect_async(req))
            .await
            .expect("connect in time")
            .expect("connect");
        RawClient {
            ws,
            id: String::new(),
            n: 0,
        }
    }

    /// Joins by header and waits for the welcome; returns the client and the welcome.
    pub async fn join(gw: &RunningGateway, token: &str) -> (RawClient, Value) {
        let mut c = RawClient::open(&gw.ws_url("e2e"), Some(token)).await;
        let w = c.expect_kind("system/welcome").await;
        c.id = w["payload"]["you"]["id"].as_str().unwrap().to_owned();
        (c, w)
    }

    pub async fn send_text(&mut self, text: impl Into<String>) {
        self.ws
            .send(Message::text(text.into()))
            .await
            .expect("send frame");
    }

    /// Sends a complete envelope from this participant; returns its id.
    pub async fn send(&mut self, kind: &str, to: &[&str], payload: Value) -> String {
        self.n += 1;
        let id = format!("{}-{}", self.id, self.n);
        let mut env = json!({"protocol": "mew/v0.4", "id": id, "ts": "2025-01-01T00:00:00.000Z",
                             "from": self.id, "kind": kind, "payload": payload});
        if !to.is_empty() {
            env["to"] = json!(to);
        }
        self.send_text(env.to_string()).await;
        id
    }

    /// The next text frame, or `None` on close / timeout.
    pub async fn next_text_within(&mut self, d: Duration) -> Option<String> {
        loop {
            match tokio::time::timeout(d, self.ws.next()).await {
                Ok(Some(Ok(Message::Text(t)))) => return Some(t.as_str().to_owned()),
                Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) | Err(_) => {
                    return None;
                }
                Ok(Some(Ok(_))) => continue,
            }
        }
    }

    /// The next envelope (JSON text frame), panicking after [`WAIT`].
    pub async fn next(&mut self) -> Value {
        let t = self
            .next_text_within(WAIT)
            .await
            .unwrap_or_else(|| panic!("{}: no frame within {WAIT:?}", self.id));
        serde_json::from_str(&t).unwrap_or_else(|e| panic!("not JSON ({e}): {t}"))
    }

    /// Skips frames until one of this kind.
    pub async fn expect_kind(&mut self, kind: &str) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(t) = self.next_text_within(left).await else {
                panic!("{}: no {kind} within {WAIT:?}", self.id);
            };
            if let Ok(v) = serde_json::from_str::<Value>(&t)
                && v["kind"] == kind
            {
                return v;
            }
        }
    }

    /// Skips frames until the envelope with this id; returns its raw text.
    pub async fn expect_id(&mut self, id: &str) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(t) = self.next_text_within(left).await else {
                panic!("{}: envelope {id} not received", self.id);
            };
            if serde_json::from_str::<Value>(&t).is_ok_and(|v| v["id"] == id) {
                return t;
            }
        }
    }

    /// Asserts nothing matching `pred` arrives within [`QUIET`].
    pub async fn expect_none(&mut self, pred: impl Fn(&Value) -> bool) {
        let deadline = tokio::time::Instant::now() + QUIET;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return;
            }
            match self.next_text_within(left).await {
                None => return,
                Some(t) => {
                    if let Ok(v) = serde_json::from_str::<Value>(&t) {
                        assert!(!pred(&v), "{}: unexpected envelope {t}", self.id);
                    }
                }
            }
        }
    }

    /// Reads until the close frame; returns it (`None` when the socket ended without one).
    pub async fn expect_close(&mut self) -> Option<CloseFrame> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, self.ws.next()).await {
                Ok(Some(Ok(Message::Close(f)))) => return f,
                Ok(Some(Ok(_))) => continue,
                Ok(None) | Ok(Some(Err(_))) => return None,
                Err(_) => panic!("{}: not closed within {WAIT:?}", self.id),
            }
        }
    }
}

/// A raw HTTP/1.1 exchange; returns status and body as JSON (Null when not JSON).
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut buf))
        .await
        .expect("HTTP answer in time")
        .unwrap();
    let text = String::from_utf8(buf).unwrap();
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text}"));
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("content-length");
    assert_eq!(len, body.len(), "content-length matches the body");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// Generates one `#[test]` per scenario for a driver type.
#[macro_export]
macro_rules! e2e_suite {
    ($driver:ty: $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(e2e::scenarios::$name::<$driver>());
            }
        )*
    };
}

/// Every scenario for a driver type.
#[macro_export]
macro_rules! e2e_all {
    ($driver:ty) => {
        e2e_suite!($driver:
            join_by_header,
            join_by_reference_messages,
            welcome_and_presence,
            chat_fan_out,
            long_chat_arrives_whole,
            capability_violation,
            proposal_fulfilled_by_another_participant,
            grant_then_direct_request,
            pause_enforced,
            kick,
            streams_with_frames,
            http_injection_and_polling,
            slow_consumer_is_closed,
            oversize_frame,
            garbage_frames,
            pings_answered_and_close_replied,
            graceful_shutdown,
            audit_and_virtual_logs,
            runtime_reconnects,
            join_timeout,
            heartbeat_and_idle_close,
            agent_answers_with_a_tool,
            silent_gateway_is_given_up_on,
            a_gateway_that_stops_reading_is_given_up_on,
            a_person_at_two_screens,
        );
    };
}
