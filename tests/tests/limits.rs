//! Connection limits of the server over real sockets: a crowd of silent clients, too many
//! connections from one address, and a request body that is never sent cannot tie the
//! gateway up.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use mew_tokio::{GatewayServer, ServerOptions};

const SPACE: &str = "space: {id: s}\nlogging: {enabled: false}\nparticipants:\n  human: {tokens: [human-token], capabilities: [{kind: \"*\"}]}\n";

async fn start(opts: ServerOptions) -> (SocketAddr, mew_tokio::ShutdownHandle) {
    let config = mew_core::gateway::SpaceConfig::from_yaml(SPACE).unwrap();
    let server = GatewayServer::bind_with("127.0.0.1:0".parse().unwrap(), config, opts)
        .await
        .unwrap();
    let addr = server.local_addr();
    let h = server.shutdown_handle();
    tokio::spawn(server.serve());
    (addr, h)
}

/// Everything the server sends until it closes (or `within` passes).
fn answer(s: &mut TcpStream, within: Duration) -> String {
    s.set_read_timeout(Some(within)).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn upgrade(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /ws?space=s HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer human-token\r\n\r\n"
    )
    .unwrap();
    let mut buf = [0u8; 12];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"HTTP/1.1 101", "upgraded");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_crowds_and_greedy_addresses_are_refused_at_once() {
    let (addr, stop) = start(ServerOptions {
        head_timeout: Duration::from_millis(500),
        max_unauthenticated: 2,
        max_connections_per_address: 3,
        ..ServerOptions::default()
    })
    .await;
    tokio::task::spawn_blocking(move || {
        // Two clients that say nothing fill the unidentified slots: a third is refused.
        let mut quiet: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(100));
        let mut third = TcpStream::connect(addr).unwrap();
        let t = Instant::now();
        let a = answer(&mut third, Duration::from_secs(2));
        assert!(a.starts_with("HTTP/1.1 503"), "{a}");
        assert!(a.contains("waiting to be identified"), "{a}");
        assert!(t.elapsed() < Duration::from_millis(400));
        // The silent ones are closed at the head deadline, with a 408.
        let t = Instant::now();
        for q in &mut quiet {
            let a = answer(q, Duration::from_secs(3));
            assert!(a.starts_with("HTTP/1.1 408"), "{a}");
        }
        assert!(
            t.elapsed() < Duration::from_millis(1500),
            "{:?}",
            t.elapsed()
        );

        // Three connections from one address are allowed, a fourth is not.
        let open: Vec<TcpStream> = (0..3).map(|_| upgrade(addr)).collect();
        let mut fourth = TcpStream::connect(addr).unwrap();
        let a = answer(&mut fourth, Duration::from_secs(2));
        assert!(a.starts_with("HTTP/1.1 503"), "{a}");
        assert!(a.contains("from this address"), "{a}");
        drop(open);
        std::thread::sleep(Duration::from_millis(200));
        // Freed slots are given back.
        let again = upgrade(addr);
        drop(again);

        // A body announced but never sent, without a token: refused before any body is read.
        let mut s = TcpStream::connect(addr).unwrap();
        write!(
            s,
            "POST /participants/human/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n"
        )
        .unwrap();
        let t = Instant::now();
        let a = answer(&mut s, Duration::from_secs(2));
        assert!(a.starts_with("HTTP/1.1 401"), "{a}");
        assert!(t.elapsed() < Duration::from_millis(400));
    })
    .await
    .unwrap();
    stop.shutdown();
}
