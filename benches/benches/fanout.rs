//! End-to-end fan-out over real loopback WebSockets.
//!
//! Starts a server on 127.0.0.1:0, connects K receivers and one sender, and sends M chat
//! envelopes from the sender with at most W in flight (sent, but not yet seen by every
//! receiver). Reports messages delivered per second at the receivers and sender -> receiver
//! latency (p50, p99). Server kinds: `ceiling`, a minimal tokio-tungstenite broadcast server
//! with no protocol logic (the best any WebSocket broadcast on this machine can do), and
//! `gateway`, the mew gateway through the tokio driver (audit logging off), `gateway-log`, the
//! same with audit logging on (envelope history and capability decisions written to a
//! temporary folder), `async-std`, the same gateway through the async-std / smol driver, and
//! `durable` / `durable-100ms`, the gateway keeping its space in a state folder
//! (`gateway.durability` with `fsync: always` / `{every_ms: 100}`), and
//! `cluster-1` / `cluster-3`, the space replicated over a NATS JetStream log (a
//! `nats-server -js` child process) by one or three gateway nodes in this process, the
//! sender on the first node and the receivers spread over the nodes. Every kind receives the
//! same frames, so the ratio between them is the cost of the protocol and the driver (and,
//! for the cluster kinds, of the log).
//!
//! Environment: `MEW_FANOUT_K` (10), `MEW_FANOUT_M` (20000), `MEW_FANOUT_WINDOW` (256),
//! `MEW_FANOUT_SERVERS` (`ceiling,gateway,gateway-log,async-std`), `MEW_FANOUT_RUNS` (5,
//! interleaved; the median run of each kind is reported), `MEW_FANOUT_RATE` (envelopes a
//! second the sender offers, open loop, so that every kind carries the same load; unset or
//! 0: as fast as the window allows). `CPU/msg` is the CPU time of the whole process (server
//! and clients, all threads, from `/proc/self/task/*/schedstat`) per envelope sent, `server
//! CPU` that of the server's threads alone: servers run on a runtime of their own, clients on
//! another, as in separate processes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async_with_config};

#[path = "support/mod.rs"]
mod support;

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The socket settings of the benchmark's clients and of the ceiling server: the same
/// 16 KiB read buffer as the gateway (tungstenite zero-fills its read buffer before each
/// read, so its 128 KiB default would mostly measure memset).
fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(16 * 1024)
}

/// A running server to measure and what clients need to join it.
struct Server {
    /// Where client `i` connects: `addrs[i % addrs.len()]`.
    addrs: Vec<SocketAddr>,
    /// Token per client (index 0 is the sender); `None` for servers without identity.
    tokens: Vec<Option<String>>,
    /// Whether a client waits for a `system/welcome` before it counts as joined.
    welcome: bool,
    stop: Box<dyn FnOnce() + Send>,
}

// ---------------------------------------------------------------- ceiling server

async fn start_ceiling() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(support::bare_broadcast(listener, ws_config()));
    Server {
        addrs: vec![addr],
        tokens: Vec::new(),
        welcome: false,
        stop: Box::new(move || task.abort()),
    }
}

// ---------------------------------------------------------------- mew gateway

/// A space where `p0`..`p{k}` may chat, and their tokens.
fn bench_space(k: usize, logging: bool) -> (mew_core::gateway::SpaceConfig, Vec<Option<String>>) {
    use std::fmt::Write as _;
    let mut yaml = format!(
        "space: {{id: bench, name: bench}}\nlogging: {{enabled: {logging}}}\ngateway: {{rate_limit: off}}\nparticipants:\n"
    );
    let mut tokens = Vec::new();
    for i in 0..=k {
        let _ = writeln!(
            yaml,
            "  p{i}: {{tokens: [tok-{i}], capabilities: [{{kind: chat}}]}}"
        );
        tokens.push(Some(format!("tok-{i}")));
    }
    let config = mew_core::gateway::SpaceConfig::from_yaml(&yaml).expect("bench space config");
    (config, tokens)
}

async fn start_gateway(k: usize, logging: bool) -> Server {
    let (config, tokens) = bench_space(k, logging);
    let log_dir = std::env::temp_dir().join(format!("mew-fanout-logs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&log_dir);
    let opts = mew_tokio::ServerOptions {
        log_dir: log_dir.clone(),
        ..Default::default()
    };
    let server = mew_tokio::GatewayServer::bind_with("127.0.0.1:0".parse().unwrap(), config, opts)
        .await
        .expect("bind gateway");
    let addr = server.local_addr();
    let shutdown = server.shutdown_handle();
    let task = tokio::spawn(server.serve());
    Server {
        addrs: vec![addr],
        tokens,
        welcome: true,
        stop: Box::new(move || {
            shutdown.shutdown();
            task.abort();
            let _ = std::fs::remove_dir_all(&log_dir);
        }),
    }
}

/// The gateway keeping its space on disk (`gateway.durability`), its state folder on the
/// temporary folder's disk.
async fn start_durable(k: usize, fsync: mew_core::gateway::Fsync) -> Server {
    let (config, tokens) = bench_space(k, false);
    let dir = std::env::temp_dir().join(format!("mew-fanout-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let restored =
        mew_driver_common::state::durable::open(&dir, config.clone(), fsync, None).expect("state");
    let server = mew_tokio::GatewayServer::bind("127.0.0.1:0".parse().unwrap(), config)
        .await
        .expect("bind gateway");
    let addr = server.local_addr();
    let shutdown = server.shutdown_handle();
    let task = tokio::spawn(server.serve_durable(restored));
    Server {
        addrs: vec![addr],
        tokens,
        welcome: true,
        stop: Box::new(move || {
            shutdown.shutdown();
            task.abort();
            let _ = std::fs::remove_dir_all(&dir);
        }),
    }
}

/// The same gateway through the async-std / smol driver: its tasks run on the global
/// executor (async-std's), its sockets on the async-io reactor.
async fn start_gateway_async_std(k: usize) -> Server {
    let (config, tokens) = bench_space(k, false);
    let server = mew_async_std::GatewayServer::bind("127.0.0.1:0".parse().unwrap(), config)
        .await
        .expect("bind gateway");
    let addr = server.local_addr();
    let shutdown = server.shutdown_handle();
    let task = async_global_executor::spawn(server.serve());
    Server {
        addrs: vec![addr],
        tokens,
        welcome: true,
        stop: Box::new(move || {
            shutdown.shutdown();
            task.detach();
        }),
    }
}

/// A `nats-server -js` on a free port with a fresh store, and `nodes` gateway nodes.
async fn start_cluster(k: usize, nodes: usize) -> Server {
    let (config, tokens) = bench_space(k, false);
    let nats = support::Nats::start();
    let url = nats.url.clone();
    let mut addrs = Vec::new();
    let mut stops = Vec::new();
    for n in 0..nodes {
        let node = mew_cluster::connect(
            mew_cluster::ClusterOptions::new(&url, &format!("n{n}")),
            config.clone(),
            None,
        )
        .await
        .expect("join the cluster");
        let server = mew_tokio::GatewayServer::bind("127.0.0.1:0".parse().unwrap(), config.clone())
            .await
            .expect("bind gateway");
        addrs.push(server.local_addr());
        let shutdown = server.shutdown_handle();
        let task = tokio::spawn(server.serve_with(Some(node.core_task())));
        stops.push((shutdown, task));
    }
    // The sender (client 0) is on the first node; receivers go round the nodes.
    Server {
        addrs,
        tokens,
        welcome: true,
        stop: Box::new(move || {
            for (shutdown, task) in stops {
                shutdown.shutdown();
                task.abort();
            }
            drop(nats);
        }),
    }
}

// ---------------------------------------------------------------- clients

async fn connect(server: &Server, index: usize) -> Ws {
    let url = format!(
        "ws://{}/ws?space=bench",
        server.addrs[index % server.addrs.len()]
    );
    let mut req = url.into_client_request().expect("request");
    if let Some(Some(tok)) = server.tokens.get(index) {
        req.headers_mut()
            .insert("authorization", format!("Bearer {tok}").parse().unwrap());
    }
    let (mut ws, _) = connect_async_with_config(req, Some(ws_config()), true)
        .await
        .expect("connect");
    if let MaybeTlsStream::Plain(s) = ws.get_ref() {
        let _ = s.set_nodelay(true);
    }
    if server.welcome {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) if t.contains("\"system/welcome\"") => break,
                Some(Ok(_)) => continue,
                other => panic!("no welcome: {other:?}"),
            }
        }
    }
    ws
}

/// The sequence number of a benchmark envelope (`"id":"m-<seq>"`), if the frame is one.
fn seq_of(text: &str) -> Option<usize> {
    let at = memchr::memmem::find(text.as_bytes(), b"\"id\":\"m-")? + 8;
    let digits = &text[at..];
    let end = digits.find('"')?;
    digits[..end].parse().ok()
}

/// The name of the clients' runtime threads: every other thread's CPU is the server's.
const CLIENT_THREADS: &str = "fanout-cli";

/// CPU time so far of every thread of this process (Linux; zero elsewhere): (all, the
/// server's). The server's threads are all but the clients' runtime and the main thread,
/// which only waits: its runtime, the log writer, async-std's executor.
fn process_cpu() -> (Duration, Duration) {
    let (mut all, mut server) = (0u64, 0u64);
    let me = std::process::id().to_string();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            let ns = std::fs::read_to_string(t.path().join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0);
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            all += ns;
            if !comm.starts_with(CLIENT_THREADS) && t.file_name().to_str() != Some(&me) {
                server += ns;
            }
        }
    }
    (Duration::from_nanos(all), Duration::from_nanos(server))
}

struct Outcome {
    cpu: Duration,
    server_cpu: Duration,
    delivered: usize,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
}

/// Starts a server of `kind`; its tasks run on the runtime this is called on.
async fn start(kind: &str, k: usize) -> Server {
    match kind {
        "ceiling" => start_ceiling().await,
        "gateway" => start_gateway(k, false).await,
        "gateway-log" => start_gateway(k, true).await,
        "async-std" => start_gateway_async_std(k).await,
        "durable" => start_durable(k, mew_core::gateway::Fsync::Always).await,
        "durable-100ms" => start_durable(k, mew_core::gateway::Fsync::EveryMs(100)).await,
        "cluster-1" => start_cluster(k, 1).await,
        "cluster-3" => start_cluster(k, 3).await,
        other => panic!("unknown server kind {other}"),
    }
}

async fn run_once(server: Server, k: usize, m: usize, window: usize, rate: Option<f64>) -> Outcome {
    let base = Instant::now();
    let sent_at: Arc<Vec<AtomicU64>> = Arc::new((0..m).map(|_| AtomicU64::new(0)).collect());
    let received: Arc<Vec<AtomicU64>> = Arc::new((0..k).map(|_| AtomicU64::new(0)).collect());
    let progress = Arc::new(Notify::new());

    let sender = connect(&server, 0).await;
    let mut receivers = Vec::with_capacity(k);
    for i in 0..k {
        receivers.push(connect(&server, i + 1).await);
    }
    // Presence of later joiners reaches earlier ones; let it drain before measuring.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut tasks = Vec::with_capacity(k);
    for (i, mut ws) in receivers.into_iter().enumerate() {
        let sent_at = sent_at.clone();
        let received = received.clone();
        let progress = progress.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(m);
            let mut n = 0usize;
            while n < m {
                let Some(Ok(msg)) = ws.next().await else {
                    panic!("receiver {i} lost its connection after {n} messages");
                };
                let Message::Text(t) = msg else { continue };
                let Some(seq) = seq_of(&t) else { continue };
                let now = base.elapsed().as_nanos() as u64;
                lat.push(now.saturating_sub(sent_at[seq].load(Ordering::Relaxed)));
                n += 1;
                received[i].store(n as u64, Ordering::Release);
                progress.notify_one();
            }
            let _ = ws.close(None).await;
            lat
        }));
    }

    let (mut sink, mut echo) = sender.split();
    // The gateway echoes to the sender too; drain it so the sender is never a slow consumer.
    let drain = tokio::spawn(async move { while let Some(Ok(_)) = echo.next().await {} });
    let start = Instant::now();
    let cpu0 = process_cpu();
    let mut low = 0usize;
    for seq in 0..m {
        if let Some(rate) = rate {
            // Open loop: the same offered load for every kind, whatever its throughput.
            tokio::time::sleep_until((start + Duration::from_secs_f64(seq as f64 / rate)).into())
                .await;
        }
        while seq - low >= window {
            low = received
                .iter()
                .map(|r| r.load(Ordering::Acquire) as usize)
                .min()
                .unwrap_or(seq);
            if seq - low >= window {
                progress.notified().await;
            }
        }
        let text = format!(
            r#"{{"protocol":"mew/v0.4","id":"m-{seq}","ts":"2025-01-01T00:00:00.000Z","from":"p0","kind":"chat","payload":{{"text":"hello from the fan-out benchmark","format":"plain"}}}}"#
        );
        sent_at[seq].store(base.elapsed().as_nanos() as u64, Ordering::Relaxed);
        sink.feed(Message::text(text)).await.expect("send");
        if rate.is_some() || seq + 1 == m || seq % 16 == 15 {
            sink.flush().await.expect("flush");
        }
    }
    sink.flush().await.expect("flush");
    let mut lat = Vec::with_capacity(k * m);
    for t in tasks {
        lat.extend(t.await.expect("receiver"));
    }
    let elapsed = start.elapsed();
    let cpu1 = process_cpu();
    drain.abort();
    (server.stop)();
    lat.sort_unstable();
    let pct = |p: f64| Duration::from_nanos(lat[((lat.len() as f64 - 1.0) * p) as usize]);
    Outcome {
        cpu: cpu1.0.saturating_sub(cpu0.0),
        server_cpu: cpu1.1.saturating_sub(cpu0.1),
        delivered: lat.len(),
        elapsed,
        p50: pct(0.50),
        p99: pct(0.99),
    }
}

fn main() {
    let k = support::env_usize("MEW_FANOUT_K", 10);
    let m = support::env_usize("MEW_FANOUT_M", 20_000);
    let window = support::env_usize("MEW_FANOUT_WINDOW", 256).max(1);
    let runs = support::env_usize("MEW_FANOUT_RUNS", 5).max(1);
    let rate = Some(support::env_usize("MEW_FANOUT_RATE", 0) as f64).filter(|r| *r > 0.0);
    let kinds = std::env::var("MEW_FANOUT_SERVERS")
        .unwrap_or_else(|_| "ceiling,gateway,gateway-log,async-std".into());
    // Servers and clients run on runtimes of their own (two worker threads each), so that
    // the server's CPU can be told from the clients' by thread.
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("fanout-srv")
        .enable_all()
        .build()
        .expect("runtime");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(CLIENT_THREADS)
        .enable_all()
        .build()
        .expect("runtime");
    let pace = rate.map_or(String::new(), |r| format!(", {r} envelopes/s offered"));
    println!(
        "fan-out: K={k} receivers, M={m} envelopes, window {window}{pace}, median of {runs} runs"
    );
    println!(
        "{:<12} {:>14} {:>12} {:>12} {:>10} {:>10} {:>12}",
        "server", "delivered/s", "p50", "p99", "vs ceiling", "CPU/msg", "server CPU"
    );
    let kinds: Vec<&str> = kinds
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    // Runs of the kinds are interleaved so that load from elsewhere on the machine falls
    // on all of them alike.
    let mut outcomes: Vec<Vec<Outcome>> = kinds.iter().map(|_| Vec::new()).collect();
    for _ in 0..runs {
        for (i, kind) in kinds.iter().enumerate() {
            let server = server_rt.block_on(start(kind, k));
            outcomes[i].push(rt.block_on(run_once(server, k, m, window, rate)));
        }
    }
    // Per round (runs of every kind side by side), each kind's time and server CPU against
    // the ceiling's in the same round: their spread over the rounds.
    let ceiling_runs = kinds.iter().position(|k| *k == "ceiling").map(|i| {
        outcomes[i]
            .iter()
            .map(|o| (o.elapsed, o.server_cpu))
            .collect::<Vec<_>>()
    });
    let spreads: Vec<Option<String>> = outcomes
        .iter()
        .map(|runs| {
            let c = ceiling_runs.as_ref()?;
            let ratios = |f: &dyn Fn(&Outcome, &(Duration, Duration)) -> f64| {
                let mut v: Vec<f64> = runs.iter().zip(c).map(|(o, c)| f(o, c)).collect();
                v.sort_by(f64::total_cmp);
                format!("{:.2}-{:.2}x", v[0], v[v.len() - 1])
            };
            Some(format!(
                "time {}, server CPU {}",
                ratios(&|o, c| o.elapsed.as_secs_f64() / c.0.as_secs_f64()),
                ratios(&|o, c| o.server_cpu.as_secs_f64() / c.1.as_secs_f64().max(1e-9)),
            ))
        })
        .collect();
    let mut ceiling_rate = None;
    let mut rates = Vec::new();
    for (kind, mut runs) in kinds.iter().zip(outcomes) {
        runs.sort_by_key(|o| o.elapsed);
        let o = &runs[runs.len() / 2];
        let rate = o.delivered as f64 / o.elapsed.as_secs_f64();
        if *kind == "ceiling" {
            ceiling_rate = Some(rate);
        }
        rates.push((*kind, rate));
        let ratio = ceiling_rate
            .map(|c| format!("{:.2}x", c / rate))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<12} {:>14.0} {:>12.2?} {:>12.2?} {:>10} {:>10.2?} {:>12.2?}",
            kind,
            rate,
            o.p50,
            o.p99,
            ratio,
            o.cpu / m as u32,
            o.server_cpu / m as u32
        );
    }
    if runs > 1 {
        println!("spread over the {runs} rounds, against the ceiling's run of the same round:");
        for (kind, spread) in kinds.iter().zip(&spreads) {
            if let Some(s) = spread
                && *kind != "ceiling"
            {
                println!("  {kind:<12} {s}");
            }
        }
    }
    let rate_of = |k: &str| rates.iter().find(|(n, _)| *n == k).map(|(_, r)| *r);
    if let (Some(t), Some(a)) = (rate_of("gateway"), rate_of("async-std")) {
        println!(
            "async-std driver / tokio driver, time for the same work: {:.2}x",
            t / a
        );
    }
}
