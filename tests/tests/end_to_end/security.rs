//! Secure remote spaces over real sockets: TLS on the gateway's port (both drivers),
//! certificates made here with rcgen; connection limits behind a trusted proxy.

use crate::e2e;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use e2e::drivers::{AsyncStd, Tokio};
use e2e::{Driver, RunningGateway, WAIT, space};
use futures_util::{SinkExt, StreamExt};
use mew_driver_common::server::ServerOptions;
use mew_driver_common::server::tls::{ServerTls, TlsFiles};
use mew_tests::scratch::Scratch;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

type TlsWs = WebSocketStream<tokio_rustls::client::TlsStream<TcpStream>>;

/// A private CA and a server certificate for `localhost` it signed, written as PEM files.
struct Pki {
    ca: CertificateDer<'static>,
    ca_cert: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
    files: TlsFiles,
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "mew test CA");
        let ca_cert = params.self_signed(&ca_key).unwrap();
        let pki = Pki {
            ca: ca_cert.der().clone(),
            ca_cert,
            ca_key,
            files: TlsFiles {
                cert: dir.join("cert.pem"),
                key: dir.join("key.pem"),
            },
        };
        pki.issue("first");
        pki
    }

    /// Writes a fresh leaf certificate (new key) for localhost, tagged in its CN.
    fn issue(&self, tag: &str) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("mew gateway {tag}"));
        let cert = params.signed_by(&key, &self.ca_cert, &self.ca_key).unwrap();
        std::fs::write(&self.files.cert, cert.pem()).unwrap();
        std::fs::write(&self.files.key, key.serialize_pem()).unwrap();
        cert.der().clone()
    }

    fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    }
}

fn tls_gateway<D: Driver>(dir: &Path, pki: &Pki) -> (RunningGateway, Arc<ServerTls>) {
    let tls = Arc::new(ServerTls::load(pki.files.clone()).unwrap());
    let opts = ServerOptions {
        log_dir: dir.join(".mew/logs"),
        seed: Some(7),
        tls: Some(tls.clone()),
        ..Default::default()
    };
    let gw = D::start_with(space(""), "127.0.0.1:0".parse().unwrap(), opts);
    (gw, tls)
}

/// A TLS connection to `addr`, verified against the test CA for `localhost`; also the
/// certificate the server presented.
async fn tls_connect(
    addr: SocketAddr,
    pki: &Pki,
) -> (
    tokio_rustls::client::TlsStream<TcpStream>,
    CertificateDer<'static>,
) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(pki.client_config());
    let name = ServerName::try_from("localhost").unwrap();
    let tls = tokio::time::timeout(WAIT, connector.connect(name, tcp))
        .await
        .expect("handshake in time")
        .expect("the certificate verifies");
    let presented = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    (tls, presented)
}

/// Joins over wss:// with a bearer token; returns the socket and the welcome.
async fn wss_join(
    addr: SocketAddr,
    pki: &Pki,
    token: &str,
) -> (TlsWs, Value, CertificateDer<'static>) {
    let (tls, presented) = tls_connect(addr, pki).await;
    let mut req = format!("wss://localhost:{}/ws?space=e2e", addr.port())
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::client_async(req, tls).await.unwrap();
    let welcome = next_kind(&mut ws, "system/welcome").await;
    (ws, welcome, presented)
}

async fn next_kind(ws: &mut TlsWs, kind: &str) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["kind"] == kind {
                    return v;
                }
            }
            Ok(Some(Ok(_))) => {}
            other => panic!("no {kind}: {other:?}"),
        }
    }
}

async fn chat(ws: &mut TlsWs, from: &str, text: &str) {
    let env = json!({"protocol": "mew/v0.4", "id": format!("{from}-{text}"),
                     "ts": "2025-01-01T00:00:00.000Z", "from": from, "kind": "chat",
                     "payload": {"text": text}});
    ws.send(Message::text(env.to_string())).await.unwrap();
}

/// Skips envelopes (one's own chats come back under `delivery: all`) until this chat.
async fn expect_chat(ws: &mut TlsWs, text: &str) {
    loop {
        let v = next_kind(ws, "chat").await;
        if v["payload"]["text"] == text {
            return;
        }
    }
}

/// A raw request over any stream; the whole answer as text.
async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut s: S,
    request: &str,
) -> String {
    s.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut buf))
        .await
        .expect("answer in time")
        .ok();
    String::from_utf8_lossy(&buf).into_owned()
}

async fn tls_serves_wss_and_https<D: Driver>(name: &str) {
    let dir = Scratch::new("e2e", name);
    let pki = Pki::new(&dir);
    let (gw, _tls) = tls_gateway::<D>(&dir, &pki);
    let addr = gw.addr;

    // wss://: two participants chat through the TLS port.
    let (mut human, welcome, _) = wss_join(addr, &pki, "human-token").await;
    assert_eq!(welcome["payload"]["you"]["id"], "human");
    let (mut agent, _, _) = wss_join(addr, &pki, "agent-token").await;
    chat(&mut human, "human", "over tls").await;
    expect_chat(&mut agent, "over tls").await;

    // https://: the HTTP API on the same port.
    let (tls, _) = tls_connect(addr, &pki).await;
    let answer = exchange(
        tls,
        "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"connections\""), "{answer}");

    // http:// on the TLS port: a plain-text answer that says what to do, then the end.
    let plain = TcpStream::connect(addr).await.unwrap();
    let answer = exchange(
        plain,
        "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("tls_required"), "{answer}");
    assert!(answer.contains("https:// or wss://"), "{answer}");

    // ws:// on the TLS port: the WebSocket client gets that refusal as its error.
    let err = tokio_tungstenite::connect_async(format!("ws://{addr}/ws?space=e2e"))
        .await
        .expect_err("a plain WebSocket is refused");
    assert!(
        matches!(&err, tokio_tungstenite::tungstenite::Error::Http(r) if r.status() == 400),
        "{err:?}"
    );

    // A client that does not trust the certificate fails its handshake; the server goes on.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let untrusting = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let refused = tokio_rustls::TlsConnector::from(Arc::new(untrusting))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await;
    assert!(refused.is_err());
    chat(&mut agent, "agent", "still here").await;
    expect_chat(&mut human, "still here").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_wss_and_https_on_tokio() {
    tls_serves_wss_and_https::<Tokio>("tls-tokio").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_wss_and_https_on_async_std() {
    tls_serves_wss_and_https::<AsyncStd>("tls-async-std").await;
}

/// A client that takes most of the deadline over its TLS handshake, then sends its request
/// head a byte at a time: one deadline runs from the connection's acceptance to a whole
/// head, so it is answered 408 and closed when that deadline passes (1 s here; 5 s by
/// default), not a second deadline after the handshake.
async fn one_deadline_covers_the_handshake_and_the_head<D: Driver>(name: &str) {
    let dir = Scratch::new("e2e", name);
    let pki = Pki::new(&dir);
    let opts = ServerOptions {
        log_dir: dir.join(".mew/logs"),
        seed: Some(7),
        tls: Some(Arc::new(ServerTls::load(pki.files.clone()).unwrap())),
        head_timeout: std::time::Duration::from_secs(1),
        ..Default::default()
    };
    let gw = D::start_with(space(""), "127.0.0.1:0".parse().unwrap(), opts);
    let start = std::time::Instant::now();
    let tcp = TcpStream::connect(gw.addr).await.unwrap();
    // Silent before the ClientHello: the handshake is slow.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let connector = tokio_rustls::TlsConnector::from(pki.client_config());
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("the handshake completes inside the deadline");
    let shaken = start.elapsed();
    let (mut rd, mut wr) = tokio::io::split(tls);
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        let _ = tokio::time::timeout(WAIT, rd.read_to_end(&mut got)).await;
        (String::from_utf8_lossy(&got).into_owned(), start.elapsed())
    });
    let head = format!(
        "GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: {}\r\n\r\n",
        "a".repeat(200)
    );
    for b in head.as_bytes() {
        if reader.is_finished() || wr.write_all(&[*b]).await.is_err() {
            break;
        }
        let _ = wr.flush().await;
        tokio::time::sleep(std::time::Duration::from_millis(40)).await;
    }
    let (answer, closed) = reader.await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(
        shaken >= std::time::Duration::from_millis(600),
        "{shaken:?}"
    );
    assert!(
        closed >= std::time::Duration::from_millis(950)
            && closed < std::time::Duration::from_millis(1400),
        "closed {closed:?} after the connection (handshake done at {shaken:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_deadline_covers_the_handshake_and_the_head_on_tokio() {
    one_deadline_covers_the_handshake_and_the_head::<Tokio>("deadline-tokio").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_deadline_covers_the_handshake_and_the_head_on_async_std() {
    one_deadline_covers_the_handshake_and_the_head::<AsyncStd>("deadline-async-std").await;
}

/// A certificate replaced on disk and reloaded: new handshakes present the new one, and a
/// conversation over the old one goes on undisturbed.
async fn certificate_reload_keeps_connections<D: Driver>(name: &str) {
    let dir = Scratch::new("e2e", name);
    let pki = Pki::new(&dir);
    let first = pki.files.cert.clone();
    let (gw, tls) = tls_gateway::<D>(&dir, &pki);
    let addr = gw.addr;
    let (mut human, _, old) = wss_join(addr, &pki, "human-token").await;
    let (mut agent, _, _) = wss_join(addr, &pki, "agent-token").await;

    let new = pki.issue("second");
    assert_ne!(old, new);
    tls.reload().unwrap();
    let (mut service, _, presented) = wss_join(addr, &pki, "service-token").await;
    assert_eq!(
        presented, new,
        "a handshake after the reload shows the new certificate"
    );

    chat(&mut human, "human", "after reload").await;
    expect_chat(&mut agent, "after reload").await;
    expect_chat(&mut service, "after reload").await;

    // A broken file keeps the certificate in use.
    std::fs::write(&first, "not a certificate").unwrap();
    let e = tls.reload().unwrap_err();
    assert!(e.to_string().contains("cert.pem"), "{e}");
    let (_, _, presented) = wss_join(addr, &pki, "service-token").await;
    assert_eq!(presented, new);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_reload_keeps_connections_on_tokio() {
    certificate_reload_keeps_connections::<Tokio>("tls-reload-tokio").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_reload_keeps_connections_on_async_std() {
    certificate_reload_keeps_connections::<AsyncStd>("tls-reload-async-std").await;
}

#[test]
fn a_key_that_does_not_match_is_refused_at_start() {
    let dir = Scratch::new("e2e", "tls-mismatch");
    let pki = Pki::new(&dir);
    let other = rcgen::KeyPair::generate().unwrap();
    std::fs::write(&pki.files.key, other.serialize_pem()).unwrap();
    let e = ServerTls::load(pki.files.clone()).unwrap_err();
    assert!(e.to_string().contains("does not match"), "{e}");
    let missing = TlsFiles {
        cert: PathBuf::from("/nonexistent/cert.pem"),
        key: pki.files.key.clone(),
    };
    let e = ServerTls::load(missing).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/cert.pem"), "{e}");
}

/// Opens a WebSocket upgrade (no join) from this machine with an `X-Forwarded-For` header;
/// the socket and the status the gateway answered.
async fn upgrade_forwarded(addr: SocketAddr, forwarded_for: &str) -> (TcpStream, u16) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET /ws?space=e2e HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         X-Forwarded-For: {forwarded_for}\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(WAIT, s.read(&mut byte)).await {
            Ok(Ok(1)) => head.push(byte[0]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&head);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (s, status)
}

fn proxied_gateway(trusted: bool, per_address: usize) -> RunningGateway {
    let proxies = if trusted {
        "trusted_proxies: [127.0.0.1/32]"
    } else {
        ""
    };
    let config = space(&format!(
        "gateway: {{limits: {{max_connections: 6000, max_connections_per_address: {per_address}}}, {proxies}}}"
    ));
    let opts = ServerOptions::default()
        .with_gateway_options(&config.gateway)
        .unwrap();
    let dir = Scratch::new("e2e", "proxy");
    let opts = ServerOptions {
        log_dir: dir.join(".mew/logs"),
        ..opts
    };
    Tokio::start_with(config, "127.0.0.1:0".parse().unwrap(), opts).owning(dir)
}

/// Behind a reverse proxy every connection comes from one address. With the proxy trusted,
/// 5,000 clients (more than the per-address limit of 1,000) connect through it, each
/// counted as the client its `X-Forwarded-For` names; one client is still held to the
/// limit. Untrusted, the header changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_connections_through_one_trusted_proxy() {
    let gw = proxied_gateway(true, 1000);
    let addr = gw.addr;
    let mut open = Vec::with_capacity(5_000);
    for chunk in 0..50u32 {
        let batch: Vec<_> = (0..100u32)
            .map(|i| {
                let n = chunk * 100 + i;
                let client = format!("203.0.{}.{}", n / 250, n % 250 + 1);
                tokio::spawn(async move { upgrade_forwarded(addr, &client).await })
            })
            .collect();
        for b in batch {
            let (s, status) = b.await.unwrap();
            assert_eq!(status, 101, "connection {} refused", open.len());
            open.push(s);
        }
    }
    let (status, health) = e2e::http(addr, "GET", "/health", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(health["connections"], 5_000, "{health}");
    drop(open);

    // One forwarded client is held to the per-address limit.
    let gw = proxied_gateway(true, 20);
    let mut same = Vec::new();
    for _ in 0..20 {
        let (s, status) = upgrade_forwarded(gw.addr, "198.51.100.7").await;
        assert_eq!(status, 101);
        same.push(s);
    }
    let (_s, status) = upgrade_forwarded(gw.addr, "198.51.100.7").await;
    assert_eq!(status, 503, "the 21st connection of one client is refused");
    // A client that puts a fake address before the proxy's entry is still counted as the
    // address the proxy appended.
    let (_s, status) = upgrade_forwarded(gw.addr, "192.0.2.1, 198.51.100.7").await;
    assert_eq!(status, 503);
    let (_s, status) = upgrade_forwarded(gw.addr, "198.51.100.8").await;
    assert_eq!(status, 101);

    // Untrusted: every connection is 127.0.0.1's, whatever the header says.
    let gw = proxied_gateway(false, 20);
    let mut mine = Vec::new();
    for i in 0..20 {
        let (s, status) = upgrade_forwarded(gw.addr, &format!("198.51.100.{i}")).await;
        assert_eq!(status, 101);
        mine.push(s);
    }
    let (_s, status) = upgrade_forwarded(gw.addr, "198.51.100.99").await;
    assert_eq!(status, 503);
}
