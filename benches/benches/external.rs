//! Fan-out measured from outside, the way a user runs a space: the server in a process of
//! its own, the clients in another.
//!
//! `cargo build --release -p mew-cli && cargo bench -p mew-benches --bench external`
//!
//! Each run starts a server as a child process, then a load generator as another child (this
//! program started again): one sender and K-1 receivers, one WebSocket each, the sender
//! sending M chat envelopes of 300 bytes with at most W in flight (sent, not yet seen by
//! every receiver). Servers (`MEW_EXTERNAL_SERVERS`):
//!
//! - `bare`: a bare tokio-tungstenite broadcast server (this program started again): each
//!   text frame cloned into every connection's queue, a batching writer per connection, no
//!   protocol; the reference the others are compared with.
//! - `mew`: `mew gateway --config space.yaml` with the defaults of a space (audit trail on,
//!   durable state with `fsync: always`), `rate_limit: off` for the one sender.
//! - `mew-audit`: the same with `durability: off`; `mew-durable`: with `logging: {enabled:
//!   false}`; `mew-off`: both off.
//!
//! Reported per kind, the median of the interleaved rounds (a round is one run of each kind):
//! messages per second each receiver got (M over the time from the first send to the last
//! receipt), the ratio to the bare server's (of the medians, and its spread over the rounds
//! against the bare run of the same round), the server process's CPU time per input message
//! (all its threads, from `/proc/<pid>/task/*/schedstat`) and the share of a core it used,
//! and the sender -> receiver latency (p50, p99 over every receipt).
//!
//! Environment: `MEW_EXTERNAL_K` (10), `MEW_EXTERNAL_M` (300,000 at K = 10, 40,000 at
//! K = 100, scaled between), `MEW_EXTERNAL_WINDOW` (100), `MEW_EXTERNAL_RUNS` (3),
//! `MEW_EXTERNAL_SERVERS` (`bare,mew,mew-audit,mew-durable,mew-off`), `MEW_BIN` (the `mew`
//! binary; by default `target/release/mew` beside this program; a kind ending in `@b`, such
//! as `mew@b`, runs `MEW_BIN_B` instead, to compare two builds in one run),
//! `MEW_EXTERNAL_HOPS` (set:
//! one message in 64 is traced through the gateway's hops, see
//! `mew_driver_common::server::hops`, and where its time went is printed per kind; the
//! tracing costs a little throughput, so measure the table without it).

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

const ROLE: &str = "MEW_EXTERNAL_ROLE";
/// Bytes of every chat envelope the sender sends.
const MESSAGE_BYTES: usize = 300;

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The clients' and the bare server's socket settings: a 16 KiB read buffer (tungstenite
/// zero-fills it before each read; its 128 KiB default would mostly measure memset).
fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(16 * 1024)
}

// ---------------------------------------------------------------- the bare server

/// The bare broadcast server's process: prints its address, serves until stdin closes.
fn bare_server() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        println!("{}", listener.local_addr().expect("addr"));
        tokio::spawn(support::bare_broadcast(listener, ws_config()));
        tokio::task::spawn_blocking(|| {
            let mut s = String::new();
            let _ = std::io::stdin().read_line(&mut s);
        })
        .await
        .expect("stdin");
    });
}

// ---------------------------------------------------------------- servers as children

/// A server child process and what the load generator needs to reach it.
struct Server {
    child: Child,
    addr: SocketAddr,
    /// Whether clients present tokens and wait for their welcome.
    mew: bool,
    dir: Option<PathBuf>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.mew {
            // A graceful stop, so that the gateway writes out what it traced.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(d) = &self.dir
            && std::env::var_os("MEW_EXTERNAL_LOG").is_some()
        {
            eprint!(
                "{}",
                std::fs::read_to_string(d.join("gateway.out")).unwrap_or_default()
            );
        }
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn start_bare() -> Server {
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .env(ROLE, "bare")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("bare server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("bare server's address");
    Server {
        addr: line.trim().parse().expect("an address"),
        child,
        mew: false,
        dir: None,
    }
}

fn mew_bin(other: bool) -> PathBuf {
    if other {
        return PathBuf::from(std::env::var("MEW_BIN_B").expect("MEW_BIN_B for a kind @b"));
    }
    mew_benches::mew_bin()
}

/// The space file of a kind: participants `p0`..`p{k-1}` with tokens `tok-<i>`, allowed to
/// chat; the space's defaults except for what the kind turns off.
fn space_yaml(kind: &str, k: usize) -> String {
    use std::fmt::Write as _;
    let (audit, durable) = match kind.trim_end_matches("@b") {
        "mew" => (true, true),
        "mew-audit" => (true, false),
        "mew-durable" => (false, true),
        "mew-off" => (false, false),
        other => panic!("unknown server kind {other}"),
    };
    let mut y = String::from("space: {id: bench, name: bench}\n");
    if !audit {
        y.push_str("logging: {enabled: false}\n");
    }
    y.push_str("gateway:\n  rate_limit: off\n");
    if !durable {
        y.push_str("  durability: off\n");
    }
    y.push_str("participants:\n");
    for i in 0..k {
        let _ = writeln!(
            y,
            "  p{i}: {{tokens: [tok-{i}], capabilities: [{{kind: chat}}]}}"
        );
    }
    y
}

fn start_mew(kind: &str, k: usize, round: usize, hops: Option<&PathBuf>) -> Server {
    let dir = std::env::temp_dir().join(format!(
        "mew-external-{}-{kind}-{round}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("space folder");
    std::fs::write(dir.join("space.yaml"), space_yaml(kind, k)).expect("space.yaml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let log = std::fs::File::create(dir.join("gateway.out")).expect("gateway.out");
    // What the gateway logs (`MEW_EXTERNAL_LOG`, a filter such as
    // `warn,mew_driver_common::state=debug`) is printed when it stops.
    let log_level = std::env::var("MEW_EXTERNAL_LOG").unwrap_or_else(|_| "warn".into());
    let mut cmd = Command::new(mew_bin(kind.ends_with("@b")));
    if let Some(h) = hops {
        cmd.env("MEW_HOP_TRACE", h);
    }
    let child = cmd
        .args([
            "gateway",
            "--config",
            "space.yaml",
            "--log-level",
            &log_level,
        ])
        .args(["--port", &port.to_string()])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("mew gateway");
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let server = Server {
        child,
        addr,
        mew: true,
        dir: Some(dir.clone()),
    };
    let t = Instant::now();
    while support::health(addr).is_null() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the gateway did not start: {}",
            std::fs::read_to_string(dir.join("gateway.out")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

// ---------------------------------------------------------------- the load generator

/// CPU time so far of every thread of process `pid` (Linux; zero elsewhere).
fn cpu_of(pid: u32) -> Duration {
    let mut ns = 0u64;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            ns += std::fs::read_to_string(t.path().join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(ns)
}

async fn connect(addr: SocketAddr, token: Option<String>) -> Ws {
    let mut req = format!("ws://{addr}/ws?space=bench")
        .into_client_request()
        .expect("request");
    if let Some(tok) = &token {
        req.headers_mut()
            .insert("authorization", format!("Bearer {tok}").parse().unwrap());
    }
    let (mut ws, _) = connect_async_with_config(req, Some(ws_config()), true)
        .await
        .expect("connect");
    if let MaybeTlsStream::Plain(s) = ws.get_ref() {
        let _ = s.set_nodelay(true);
    }
    if token.is_some() {
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

/// The sequence number of a benchmark envelope (`"id":"m-<seq>"`, or `"id":"hop-<seq>"`
/// when traced), if the frame is one, and whether it is traced.
fn seq_of(text: &str) -> Option<(usize, bool)> {
    let b = text.as_bytes();
    let (at, traced) = match memchr::memmem::find(b, b"\"id\":\"m-") {
        Some(i) => (i + 8, false),
        None => (memchr::memmem::find(b, b"\"id\":\"hop-")? + 10, true),
    };
    let digits = &text[at..];
    let end = digits.find('"')?;
    Some((digits[..end].parse().ok()?, traced))
}

/// Every this many messages one is traced (with `MEW_EXTERNAL_HOPS`).
const TRACE_EVERY: usize = 64;
/// The load generator's stamps in a trace file: sent, received.
const HOP_SENT: u8 = 10;
const HOP_RECEIVED: u8 = 11;

/// A load generator's stamp: sequence number, hop, receiver (0: the sender), nanoseconds.
type Stamp = (usize, u8, usize, u64);

/// Envelope `seq`, padded to [`MESSAGE_BYTES`]; a traced one's id is `hop-<seq>`.
fn envelope(seq: usize, traced: bool) -> String {
    let prefix = if traced { "hop" } else { "m" };
    let head = format!(
        r#"{{"protocol":"mew/v0.4","id":"{prefix}-{seq}","ts":"2025-01-01T00:00:00.000Z","from":"p0","kind":"chat","payload":{{"format":"plain","text":""#
    );
    let tail = r#""}}"#;
    let pad = MESSAGE_BYTES.saturating_sub(head.len() + tail.len());
    let mut s = String::with_capacity(MESSAGE_BYTES);
    s.push_str(&head);
    s.extend(std::iter::repeat_n('x', pad));
    s.push_str(tail);
    s
}

/// The load generator's process: runs one measurement and prints its figures as one JSON
/// line.
fn load() {
    let env = |n: &str| std::env::var(n).unwrap_or_else(|_| panic!("{n} unset"));
    let addr: SocketAddr = env("MEW_EXTERNAL_ADDR").parse().expect("address");
    let pid: u32 = env("MEW_EXTERNAL_PID").parse().expect("pid");
    let mew = env("MEW_EXTERNAL_MEW") == "1";
    let k = support::env_usize("MEW_EXTERNAL_K", 10);
    let m = support::env_usize("MEW_EXTERNAL_M", 0);
    let window = support::env_usize("MEW_EXTERNAL_WINDOW", 100).max(1);
    let trace = std::env::var_os("MEW_EXTERNAL_TRACE").map(PathBuf::from);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let out = rt.block_on(run(addr, pid, mew, k, m, window, trace));
    println!("{out}");
}

async fn run(
    addr: SocketAddr,
    pid: u32,
    mew: bool,
    k: usize,
    m: usize,
    window: usize,
    trace: Option<PathBuf>,
) -> serde_json::Value {
    use mew_driver_common::server::hops::monotonic_ns;
    let traced = |seq: usize| trace.is_some() && seq.is_multiple_of(TRACE_EVERY);
    let stamps: Arc<std::sync::Mutex<Vec<Stamp>>> = Arc::default();
    let token = |i: usize| mew.then(|| format!("tok-{i}"));
    let base = Instant::now();
    let receivers_n = k - 1;
    let sent_at: Arc<Vec<AtomicU64>> = Arc::new((0..m).map(|_| AtomicU64::new(0)).collect());
    let received: Arc<Vec<AtomicU64>> =
        Arc::new((0..receivers_n).map(|_| AtomicU64::new(0)).collect());
    let progress = Arc::new(Notify::new());
    // The count every receiver must reach before the sender may send again, while it
    // waits: a receiver wakes it only as it reaches that count, not for every message (a
    // wake-up of the sender's thread per message read cost the load generator a fifth of
    // its CPU time when a burst arrived while the window was full).
    let need = Arc::new(AtomicUsize::new(usize::MAX));
    let sender = connect(addr, token(0)).await;
    let mut receivers = Vec::with_capacity(receivers_n);
    for i in 1..k {
        receivers.push(connect(addr, token(i)).await);
    }
    // Presence of later joiners reaches earlier ones; let it drain before measuring.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut tasks = Vec::with_capacity(receivers_n);
    for (i, mut ws) in receivers.into_iter().enumerate() {
        let sent_at = sent_at.clone();
        let received = received.clone();
        let progress = progress.clone();
        let stamps = stamps.clone();
        let need = need.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(m);
            let mut n = 0usize;
            while n < m {
                let Some(Ok(msg)) = ws.next().await else {
                    panic!("receiver {i} lost its connection after {n} messages");
                };
                let Message::Text(t) = msg else { continue };
                let Some((seq, traced)) = seq_of(&t) else {
                    continue;
                };
                if traced {
                    let at = monotonic_ns();
                    stamps.lock().unwrap().push((seq, HOP_RECEIVED, i + 1, at));
                }
                let now = base.elapsed().as_nanos() as u64;
                lat.push(now.saturating_sub(sent_at[seq].load(Ordering::Relaxed)));
                n += 1;
                // Sequentially consistent with the sender's `need` and reads of the counts:
                // either it sees this count or this receiver sees its `need`.
                received[i].store(n as u64, Ordering::SeqCst);
                // Counts grow by one: each receiver reaches a given count exactly once.
                if n == need.load(Ordering::SeqCst) {
                    progress.notify_one();
                }
            }
            let _ = ws.close(None).await;
            lat
        }));
    }
    let (mut sink, mut echo) = sender.split();
    // The sender's own copies: read, so it never counts as a slow consumer.
    let drain = tokio::spawn(async move { while let Some(Ok(_)) = echo.next().await {} });
    let start = Instant::now();
    let cpu0 = cpu_of(pid);
    let own0 = cpu_of(std::process::id());
    let mut low = 0usize;
    let mut unflushed = 0;
    for seq in 0..m {
        while seq - low >= window {
            if unflushed > 0 {
                sink.flush().await.expect("flush");
                unflushed = 0;
            }
            // Published before the counts are read: a receiver that reaches it after the
            // read below wakes the sender (a notification before the wait is kept).
            need.store(seq - window + 1, Ordering::SeqCst);
            low = received
                .iter()
                .map(|r| r.load(Ordering::SeqCst) as usize)
                .min()
                .unwrap_or(seq);
            if seq - low >= window {
                progress.notified().await;
            }
        }
        let text = envelope(seq, traced(seq));
        if traced(seq) {
            let at = monotonic_ns();
            stamps.lock().unwrap().push((seq, HOP_SENT, 0, at));
        }
        sent_at[seq].store(base.elapsed().as_nanos() as u64, Ordering::Relaxed);
        sink.feed(Message::text(text)).await.expect("send");
        unflushed += 1;
        if unflushed == 16 {
            sink.flush().await.expect("flush");
            unflushed = 0;
        }
    }
    sink.flush().await.expect("flush");
    let mut lat = Vec::with_capacity(receivers_n * m);
    for t in tasks {
        lat.extend(t.await.expect("receiver"));
    }
    let elapsed = start.elapsed();
    let cpu = cpu_of(pid).saturating_sub(cpu0);
    let own = cpu_of(std::process::id()).saturating_sub(own0);
    drain.abort();
    if let Some(path) = &trace {
        use std::fmt::Write as _;
        let mut text = String::new();
        for (seq, hop, conn, ns) in stamps.lock().unwrap().iter() {
            let _ = writeln!(text, "{seq} {hop} {conn} {ns}");
        }
        std::fs::write(path, text).expect("the load generator's stamps");
    }
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p) as usize];
    serde_json::json!({
        "elapsed_s": elapsed.as_secs_f64(),
        "server_cpu_s": cpu.as_secs_f64(),
        "load_cpu_s": own.as_secs_f64(),
        "p50_ns": pct(0.50),
        "p99_ns": pct(0.99),
    })
}

// ---------------------------------------------------------------- the measurement

struct Outcome {
    /// Messages a second each receiver got.
    rate: f64,
    /// Server CPU per input message.
    cpu_per_msg: Duration,
    /// Share of a core the server used.
    cores: f64,
    /// The load generator's CPU per input message (it shares the machine's cores).
    load_per_msg: Duration,
    p50: Duration,
    p99: Duration,
}

fn measure(server: &Server, k: usize, m: usize, window: usize, trace: Option<&PathBuf>) -> Outcome {
    let mut cmd = Command::new(std::env::current_exe().expect("exe"));
    if let Some(t) = trace {
        cmd.env("MEW_EXTERNAL_TRACE", t);
    }
    let out = cmd
        .env(ROLE, "load")
        .env("MEW_EXTERNAL_ADDR", server.addr.to_string())
        .env("MEW_EXTERNAL_PID", server.child.id().to_string())
        .env("MEW_EXTERNAL_MEW", if server.mew { "1" } else { "0" })
        .env("MEW_EXTERNAL_K", k.to_string())
        .env("MEW_EXTERNAL_M", m.to_string())
        .env("MEW_EXTERNAL_WINDOW", window.to_string())
        .stderr(Stdio::inherit())
        .output()
        .expect("load generator");
    assert!(out.status.success(), "the load generator failed");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("its figures");
    let f = |n: &str| v[n].as_f64().unwrap_or(0.0);
    let elapsed = f("elapsed_s");
    let cpu = f("server_cpu_s");
    Outcome {
        rate: m as f64 / elapsed,
        cpu_per_msg: Duration::from_secs_f64(cpu / m as f64),
        cores: cpu / elapsed,
        load_per_msg: Duration::from_secs_f64(f("load_cpu_s") / m as f64),
        p50: Duration::from_nanos(f("p50_ns") as u64),
        p99: Duration::from_nanos(f("p99_ns") as u64),
    }
}

/// The stages of a message's way, between the stamps of a trace.
const STAGES: [&str; 7] = [
    "client sent -> gateway's reader has it",
    "reader -> core applies it",
    "core applies -> its pass hands it to the writers",
    "handed -> a writer takes it",
    "writer takes -> its write returns",
    "written -> clients have it (means)",
    "in all: sent -> received (mean)",
];

/// The stamps of one traced message.
#[derive(Default)]
struct Stamps {
    sent: Option<u64>,
    read: Option<u64>,
    apply: Option<u64>,
    handed: Option<u64>,
    taken: std::collections::HashMap<u64, u64>,
    written: std::collections::HashMap<u64, u64>,
    received: Vec<u64>,
}

/// Adds the stages of the messages traced in `files` (lines `<seq> <hop> <conn> <ns>`) to
/// `into` (nanoseconds per stage).
fn breakdown(files: &[&PathBuf], into: &mut [Vec<f64>]) {
    let mut by_seq: std::collections::HashMap<u64, Stamps> = Default::default();
    for f in files {
        for line in std::fs::read_to_string(f).unwrap_or_default().lines() {
            let v: Vec<u64> = line
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            let [seq, hop, conn, ns] = v[..] else {
                continue;
            };
            let s = by_seq.entry(seq).or_default();
            let first = |o: &mut Option<u64>| *o = Some(o.map_or(ns, |x| x.min(ns)));
            match hop as u8 {
                0 => first(&mut s.read),
                1 => first(&mut s.apply),
                2 => first(&mut s.handed),
                3 => {
                    s.taken.entry(conn).or_insert(ns);
                }
                4 => {
                    s.written.entry(conn).or_insert(ns);
                }
                HOP_SENT => first(&mut s.sent),
                HOP_RECEIVED => s.received.push(ns),
                _ => {}
            }
        }
    }
    let mean = |v: &mut dyn Iterator<Item = u64>| {
        let (sum, n) = v.fold((0f64, 0usize), |(s, n), x| (s + x as f64, n + 1));
        (n > 0).then(|| sum / n as f64)
    };
    for s in by_seq.values() {
        let (Some(sent), Some(recv)) = (s.sent, mean(&mut s.received.iter().copied())) else {
            continue;
        };
        into[6].push(recv - sent as f64);
        let (Some(read), Some(apply), Some(handed)) = (s.read, s.apply, s.handed) else {
            continue;
        };
        into[0].push(read as f64 - sent as f64);
        into[1].push(apply as f64 - read as f64);
        into[2].push(handed as f64 - apply as f64);
        for (conn, t) in &s.taken {
            into[3].push(*t as f64 - handed as f64);
            if let Some(w) = s.written.get(conn) {
                into[4].push(*w as f64 - *t as f64);
            }
        }
        if let Some(w) = mean(&mut s.written.values().copied()) {
            into[5].push(recv - w);
        }
    }
}

fn print_breakdown(kind: &str, stages: &mut [Vec<f64>]) {
    println!("where a traced message's time goes, {kind} (us: mean / p50 / p99, samples):");
    for (name, v) in STAGES.iter().zip(stages.iter_mut()) {
        if v.is_empty() {
            continue;
        }
        v.sort_by(f64::total_cmp);
        let pct = |p: f64| v[((v.len() - 1) as f64 * p) as usize] / 1e3;
        let mean = v.iter().sum::<f64>() / v.len() as f64 / 1e3;
        println!(
            "  {name:<50} {mean:>8.1} {:>8.1} {:>8.1}  ({})",
            pct(0.5),
            pct(0.99),
            v.len()
        );
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn median<T: Copy>(mut v: Vec<T>, cmp: impl Fn(&T, &T) -> std::cmp::Ordering) -> T {
    v.sort_by(cmp);
    v[v.len() / 2]
}

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("bare") => return bare_server(),
        Ok("load") => return load(),
        _ => {}
    }
    let k = support::env_usize("MEW_EXTERNAL_K", 10).max(2);
    // 300,000 at K = 10 and 40,000 at K = 100.
    let m = support::env_usize(
        "MEW_EXTERNAL_M",
        if k <= 10 {
            300_000
        } else {
            (4_000_000 / k).max(1000)
        },
    );
    let window = support::env_usize("MEW_EXTERNAL_WINDOW", 100).max(1);
    let runs = support::env_usize("MEW_EXTERNAL_RUNS", 3).max(1);
    let kinds = std::env::var("MEW_EXTERNAL_SERVERS")
        .unwrap_or_else(|_| "bare,mew,mew-audit,mew-durable,mew-off".into());
    let kinds: Vec<&str> = kinds
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    println!(
        "external fan-out: K={k} (1 sender, {} receivers), M={m} messages of {MESSAGE_BYTES} bytes, window {window}, {runs} interleaved rounds",
        k - 1
    );
    let hops = std::env::var_os("MEW_EXTERNAL_HOPS").is_some();
    let mut stages: Vec<Vec<Vec<f64>>> = kinds.iter().map(|_| vec![Vec::new(); 7]).collect();
    let mut outcomes: Vec<Vec<Outcome>> = kinds.iter().map(|_| Vec::new()).collect();
    for round in 0..runs {
        let mut line = format!("round {} (load {}):", round + 1, loadavg());
        for (i, kind) in kinds.iter().enumerate() {
            let trace_file = |what: &str| {
                let name = format!("mew-external-{}-{kind}-{round}.{what}", std::process::id());
                hops.then(|| std::env::temp_dir().join(name))
            };
            let (server_trace, client_trace) = (trace_file("server"), trace_file("client"));
            let server = match *kind {
                "bare" => start_bare(),
                other => start_mew(other, k, round, server_trace.as_ref()),
            };
            let o = measure(&server, k, m, window, client_trace.as_ref());
            drop(server);
            if let (Some(s), Some(c)) = (&server_trace, &client_trace) {
                breakdown(&[s, c], &mut stages[i]);
                let _ = std::fs::remove_file(s);
                let _ = std::fs::remove_file(c);
            }
            line.push_str(&format!(" {kind} {:.0}/s", o.rate));
            outcomes[i].push(o);
        }
        println!("{line}");
        let _ = std::io::stdout().flush();
    }
    let bare = kinds.iter().position(|k| *k == "bare");
    let bare_rate =
        bare.map(|b| median(outcomes[b].iter().map(|o| o.rate).collect(), f64::total_cmp));
    println!(
        "{:<12} {:>14} {:>10} {:>24} {:>12} {:>6} {:>10} {:>10} {:>12}",
        "server",
        "msg/s each",
        "vs bare",
        "(rounds: min-median-max)",
        "CPU/msg",
        "cores",
        "p50",
        "p99",
        "load CPU/msg"
    );
    for (i, kind) in kinds.iter().enumerate() {
        let os = &outcomes[i];
        let rate = median(os.iter().map(|o| o.rate).collect(), f64::total_cmp);
        let cpu = median(os.iter().map(|o| o.cpu_per_msg).collect(), Ord::cmp);
        let cores = median(os.iter().map(|o| o.cores).collect(), f64::total_cmp);
        let p50 = median(os.iter().map(|o| o.p50).collect(), Ord::cmp);
        let p99 = median(os.iter().map(|o| o.p99).collect(), Ord::cmp);
        let load = median(os.iter().map(|o| o.load_per_msg).collect(), Ord::cmp);
        let (ratio, spread) = match (bare, bare_rate) {
            (Some(b), Some(br)) => {
                let mut r: Vec<f64> = os
                    .iter()
                    .zip(&outcomes[b])
                    .map(|(o, b)| b.rate / o.rate)
                    .collect();
                r.sort_by(f64::total_cmp);
                // Both: the ratio of the medians, and the rounds' own ratios (each against
                // the bare run of its round, which a drifting machine leaves comparable).
                (
                    format!("{:.2}x", br / rate),
                    format!("{:.2}-{:.2}-{:.2}x", r[0], r[r.len() / 2], r[r.len() - 1]),
                )
            }
            _ => ("-".into(), "-".into()),
        };
        println!(
            "{:<12} {:>14.0} {:>10} {:>24} {:>12.2?} {:>6.2} {:>10.2?} {:>10.2?} {:>12.2?}",
            kind, rate, ratio, spread, cpu, cores, p50, p99, load
        );
    }
    if hops {
        for (kind, st) in kinds.iter().zip(&mut stages) {
            print_breakdown(kind, st);
        }
    }
}
