//! A gateway under hostile load, for a fixed time per attack, printing what held.
//!
//! `cargo bench -p mew-benches --bench hostile` (add `-- --quick` for a shorter run). The
//! gateway runs in a child process (this program started again with `MEW_HOSTILE_SERVE`)
//! so that its memory can be read from /proc apart from the clients'. Two probe
//! participants exchange 200 chats a second throughout; each attack reports the probe's
//! p50/p99 latency beside the quiet baseline. The space delivers `addressed` envelopes to
//! their addressees only, so that each attack's own traffic does not reach the probes.
//!
//! Attacks: 10,000 idle joined connections (memory per connection), slowloris (heads sent
//! a byte a second), a flood of oversize and binary frames, a participant flooding chats
//! against the rate limit, a participant that never reads while others chat, and 100
//! reconnects a second.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

#[path = "support/mod.rs"]
mod support;
use support::{health, idle_join, rss_kib};

const IDLE: usize = 10_000;
const JOINERS: usize = 8;
const SERVE_ENV: &str = "MEW_HOSTILE_SERVE";

fn space_yaml() -> String {
    let mut y = String::from(
        "space: {id: h}\nlogging: {enabled: false}\ngateway: {delivery: addressed}\nparticipants:\n  probe-a: {tokens: [probe-a], capabilities: [{kind: chat}]}\n  probe-b: {tokens: [probe-b], capabilities: [{kind: chat}]}\n  flooder: {tokens: [flooder], capabilities: [{kind: chat}]}\n  deaf: {tokens: [deaf], capabilities: [{kind: chat}]}\n  churn: {tokens: [churn], capabilities: [{kind: chat}]}\n",
    );
    for i in 0..IDLE {
        y.push_str(&format!(
            "  idle-{i}: {{tokens: [idle-{i}], capabilities: [{{kind: chat}}]}}\n"
        ));
    }
    y
}

/// The child: serves the space until stdin closes.
fn serve() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let config = mew_core::gateway::SpaceConfig::from_yaml(&space_yaml()).unwrap();
        let opts = mew_tokio::ServerOptions {
            max_connections: IDLE + 2_000,
            max_connections_per_address: IDLE + 2_000,
            ..mew_tokio::ServerOptions::default()
        };
        let server =
            mew_tokio::GatewayServer::bind_with("127.0.0.1:0".parse().unwrap(), config, opts)
                .await
                .unwrap();
        println!("{}", server.local_addr());
        let stop = server.shutdown_handle();
        tokio::spawn(server.serve());
        tokio::task::spawn_blocking(|| {
            let mut s = String::new();
            let _ = std::io::stdin().read_line(&mut s);
        })
        .await
        .unwrap();
        stop.shutdown();
    });
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn join(addr: SocketAddr, token: &str) -> Result<Ws, String> {
    let mut req = format!("ws://{addr}/ws?space=h")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("Authorization", format!("Bearer {token}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req)
        .await
        .map_err(|e| e.to_string())?;
    // The welcome.
    match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
        Ok(Some(Ok(Message::Text(_)))) => Ok(ws),
        other => Err(format!("no welcome: {other:?}")),
    }
}

/// The probes: `probe-a` sends 200 chats a second, `probe-b` records each one's latency.
struct Probe {
    latencies: Arc<std::sync::Mutex<Vec<Duration>>>,
    stop: Arc<AtomicBool>,
}

impl Probe {
    async fn start(addr: SocketAddr) -> Probe {
        let a = join(addr, "probe-a").await.unwrap();
        let b = join(addr, "probe-b").await.unwrap();
        let latencies = Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let epoch = Instant::now();
        {
            let latencies = latencies.clone();
            let (_, mut rx) = b.split();
            tokio::spawn(async move {
                while let Some(Ok(m)) = rx.next().await {
                    if let Message::Text(t) = m
                        && let Some(rest) = t.split("\"t-").nth(1)
                        && let Some(n) = rest.split('"').next().and_then(|n| n.parse::<u64>().ok())
                    {
                        let sent = Duration::from_micros(n);
                        latencies
                            .lock()
                            .unwrap()
                            .push(epoch.elapsed().saturating_sub(sent));
                    }
                }
            });
        }
        {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(5));
                // Probe-a's own copies are read and dropped.
                let (mut tx, mut rx) = a.split();
                loop {
                    tokio::select! {
                        _ = tick.tick() => {
                            if stop.load(Ordering::Relaxed) { break; }
                            let id = format!("t-{}", epoch.elapsed().as_micros());
                            let env = format!(r#"{{"protocol":"mew/v0.4","id":"{id}","kind":"chat","to":["probe-b"],"payload":{{"text":"{id}"}}}}"#);
                            if tx.send(Message::text(env)).await.is_err() { break; }
                        }
                        m = rx.next() => { if m.is_none() { break; } }
                    }
                }
            });
        }
        Probe { latencies, stop }
    }

    /// p50 and p99 of the latencies since the last call, in microseconds, and the count.
    fn take(&self) -> (u64, u64, usize) {
        let mut v = std::mem::take(&mut *self.latencies.lock().unwrap());
        if v.is_empty() {
            return (0, 0, 0);
        }
        v.sort();
        let p = |q: f64| v[((v.len() - 1) as f64 * q) as usize].as_micros() as u64;
        (p(0.5), p(0.99), v.len())
    }
}

fn report(name: &str, probe: &Probe, what: String) {
    let (p50, p99, n) = probe.take();
    println!("| {name} | {what} | {p50} / {p99} us ({n} probes) |");
}

async fn for_a_while(d: Duration) {
    tokio::time::sleep(d).await;
}

fn main() {
    if std::env::var_os(SERVE_ENV).is_some() {
        return serve();
    }
    if std::env::args().any(|a| a == "--bench" || a == "--test")
        && std::env::args().any(|a| a == "--list")
    {
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let phase = if quick {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(5)
    };
    let mut child: Child = Command::new(std::env::current_exe().unwrap())
        .env(SERVE_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: SocketAddr = line.trim().parse().unwrap();
    let pid = child.id();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        println!("| attack | what held | probe latency p50 / p99 |");
        println!("|---|---|---|");
        let probe = Probe::start(addr).await;
        for_a_while(phase).await;
        report("none (baseline)", &probe, "200 chats/s between two probes".into());

        // 10,000 idle joined connections.
        let before = rss_kib(pid);
        let t = Instant::now();
        let idle = Arc::new(tokio::sync::Mutex::new(Vec::with_capacity(IDLE)));
        let failed = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        // Eight joiners at a time: a crowd arriving, not a single burst, so that the
        // presence announcing each join can drain.
        for w in 0..JOINERS {
            let (idle, failed) = (idle.clone(), failed.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = w;
                while i < IDLE {
                    match idle_join(addr, "h", &format!("idle-{i}")).await {
                        Ok(s) => idle.lock().await.push(s),
                        Err(_) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    i += JOINERS;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let joined = idle.lock().await.len();
        // Until the storm's presence has been written out.
        let settle = Instant::now();
        while settle.elapsed() < Duration::from_secs(60) {
            let h = health(addr);
            if h["connections"].as_u64().is_some_and(|c| c as usize >= joined) {
                tokio::time::sleep(Duration::from_secs(2)).await;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let after = rss_kib(pid);
        let online_after = health(addr)["participants_online"].as_u64().unwrap_or(0);
        report(
            "10,000 idle connections",
            &probe,
            format!(
                "{joined} joined in {:.1} s ({} failed, {online_after} online after); gateway RSS {} -> {} MiB, {:.1} KiB per connection",
                t.elapsed().as_secs_f64(),
                failed.load(Ordering::Relaxed),
                before / 1024,
                after / 1024,
                (after.saturating_sub(before)) as f64 / joined.max(1) as f64
            ),
        );
        for h in idle.lock().await.drain(..) {
            h.abort();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        // The join storm's presence traffic may have closed the probes as slow consumers
        // (10,000 presence envelopes each): start them again.
        probe.stop.store(true, Ordering::Relaxed);
        let probe = Probe::start(addr).await;

        // Slowloris: 500 heads sent a byte a second.
        let closed = Arc::new(AtomicU64::new(0));
        let t = Instant::now();
        let slow: Vec<_> = (0..500)
            .map(|_| {
                let closed = closed.clone();
                std::thread::spawn(move || {
                    let Ok(mut s) = TcpStream::connect(addr) else { return };
                    let _ = s.set_read_timeout(Some(Duration::from_millis(10)));
                    for b in b"GET /ws?space=h HTTP/1.1\r\nHost: x\r\n".iter().cycle().take(30) {
                        if s.write_all(&[*b]).is_err() {
                            break;
                        }
                        let mut buf = [0u8; 64];
                        if s.read(&mut buf).is_ok() {
                            break;
                        }
                        std::thread::sleep(Duration::from_secs(1));
                    }
                    closed.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        for h in slow {
            let _ = tokio::task::spawn_blocking(move || h.join()).await;
        }
        report(
            "slowloris: 500 heads at a byte a second",
            &probe,
            format!(
                "all {} closed by the server within {:.1} s (head deadline 5 s; beyond 1,024 pending, 503 at once)",
                closed.load(Ordering::Relaxed),
                t.elapsed().as_secs_f64()
            ),
        );

        // Oversize and binary frames.
        let t = Instant::now();
        let (mut oversize, mut binary) = (0u64, 0u64);
        while t.elapsed() < phase {
            if let Ok(mut ws) = join(addr, "flooder").await {
                let _ = ws.send(Message::Binary(vec![0u8; 2 * 1024 * 1024].into())).await;
                oversize += 1;
                while let Some(Ok(_)) = ws.next().await {}
            }
            if let Ok(ws) = join(addr, "flooder").await {
                let (mut tx, mut rx) = ws.split();
                let reader = tokio::spawn(async move { while let Some(Ok(_)) = rx.next().await {} });
                for _ in 0..5_000 {
                    if tx.feed(Message::Binary(vec![1u8; 64].into())).await.is_err() {
                        break;
                    }
                    binary += 1;
                }
                let _ = tx.close().await;
                let _ = reader.await;
            }
        }
        report(
            "oversize (2 MiB) and binary frames",
            &probe,
            format!("{oversize} oversize frames (each closed 1009), {binary} binary frames refused"),
        );

        // A chat flood against the rate limit.
        let ws = join(addr, "flooder").await.unwrap();
        let (mut tx, mut rx) = ws.split();
        let limited = Arc::new(AtomicU64::new(0));
        let reader = {
            let limited = limited.clone();
            tokio::spawn(async move {
                while let Some(Ok(Message::Text(t))) = rx.next().await {
                    // Its own accepted chats come back to it.
                    if t.contains("\"from\":\"flooder\"") && t.contains("\"kind\":\"chat\"") {
                        limited.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        let t = Instant::now();
        let mut sent = 0u64;
        while t.elapsed() < phase {
            let env = r#"{"protocol":"mew/v0.4","kind":"chat","to":["flooder"],"payload":{"text":"flood"}}"#;
            if tx.send(Message::text(env)).await.is_err() {
                break;
            }
            sent += 1;
        }
        let secs = t.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let accepted = limited.load(Ordering::Relaxed);
        report(
            "chat flood from one participant",
            &probe,
            format!(
                "{:.0} sent/s, {:.0} accepted/s, the rest refused rate_limited (limit 1,000/s, burst 2,000)",
                sent as f64 / secs,
                accepted as f64 / secs
            ),
        );
        let _ = tx.close().await;
        reader.abort();

        // A participant that never reads while others chat.
        let deaf = join(addr, "deaf").await.unwrap();
        let talker = join(addr, "churn").await.unwrap();
        let (mut ttx, mut trx) = talker.split();
        tokio::spawn(async move { while let Some(Ok(_)) = trx.next().await {} });
        let t = Instant::now();
        let big = "x".repeat(8 * 1024);
        let mut closed_after = None;
        let (_dtx, drx) = deaf.split();
        let body = format!(
            r#"{{"protocol":"mew/v0.4","kind":"chat","to":["deaf"],"payload":{{"text":"{big}"}}}}"#
        );
        // The deaf client's socket buffers fill, then its backlog passes the limit.
        let mut n = 0u64;
        while t.elapsed() < phase * 4 && closed_after.is_none() {
            for _ in 0..50 {
                let _ = ttx.feed(Message::text(body.clone())).await;
                n += 1;
            }
            let _ = ttx.flush().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            if !online(addr).contains(&"deaf".to_owned()) {
                closed_after = Some(t.elapsed());
            }
        }
        drop(drx);
        report(
            "a participant that never reads",
            &probe,
            match closed_after {
                Some(d) => format!("closed as a slow consumer (1013) after {:.1} s and {n} chats of 8 KiB", d.as_secs_f64()),
                None => format!("not closed after {n} chats of 8 KiB"),
            },
        );

        // 100 reconnects a second.
        let t = Instant::now();
        let (mut ok, mut bad) = (0u64, 0u64);
        let mut joins = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        while t.elapsed() < phase {
            tick.tick().await;
            let s = Instant::now();
            match join(addr, "churn").await {
                Ok(mut ws) => {
                    ok += 1;
                    joins.push(s.elapsed());
                    let _ = ws.close(None).await;
                }
                Err(_) => bad += 1,
            }
        }
        joins.sort();
        let p = |q: f64| joins.get(((joins.len().max(1) - 1) as f64 * q) as usize).map_or(0, |d| d.as_micros());
        report(
            "reconnect storm",
            &probe,
            format!(
                "{:.0} joins/s, {bad} failed; join p50 {} us, p99 {} us",
                ok as f64 / t.elapsed().as_secs_f64(),
                p(0.5),
                p(0.99)
            ),
        );
        probe.stop.store(true, Ordering::Relaxed);
        let h = health(addr);
        println!("\ngateway after all: {h}");
    });
    drop(child.stdin.take());
    let _ = child.wait();
}

/// Who is online (asked with a probe's token).
fn online(addr: SocketAddr) -> Vec<String> {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return Vec::new();
    };
    let _ = write!(
        s,
        "GET /participants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer probe-a\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let v: serde_json::Value = out
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or_default();
    v["participants"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["online"] == true)
        .filter_map(|p| p["id"].as_str().map(str::to_owned))
        .collect()
}
