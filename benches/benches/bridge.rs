//! tools/call round trips to server-everything's `echo` tool: directly through the MCP client
//! (a process driver on tokio), and through the space (participant -> gateway -> bridge ->
//! server and back, over loopback WebSockets). The difference is the bridge's added latency.
//!
//! Needs the npm servers: `npm ci` in tests/mcp-servers. Besides criterion's report, prints
//! a summary (sequential round trips per second, median latency, throughput with 16 calls in
//! flight) for both paths.

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use mew_core::bridge::BridgeConfig;
use mew_core::gateway::SpaceConfig;
use mew_core::mcp::{McpCallId, McpClient, McpConfig, McpEvent, Output};
use mew_core::participant::{ParticipantConfig, RequestOptions};
use mew_tokio::mcp_process::{McpProcess, ProcessEvent, ServerCommand};
use mew_tokio::{
    BridgeHandle, GatewayServer, ParticipantRuntime, ServerOptions, clock, spawn_bridge,
};
use serde_json::{Value, json};

const IN_FLIGHT: usize = 16;

fn everything() -> ServerCommand {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../tests/mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    assert!(
        script.is_file(),
        "run `npm ci` in tests/mcp-servers first ({} missing)",
        script.display()
    );
    ServerCommand::new("node", [script.to_string_lossy().into_owned()])
}

fn echo_params() -> Value {
    json!({"name": "echo", "arguments": {"message": "hello mew"}})
}

/// The MCP client and a server process, driven inline.
struct Direct {
    client: McpClient,
    process: McpProcess,
}

impl Direct {
    async fn start() -> Direct {
        let mut d = Direct {
            client: McpClient::new(McpConfig::default()),
            process: McpProcess::new(everything()),
        };
        d.client.start(clock::now()).unwrap();
        d.until(|e| matches!(e, McpEvent::Ready(_))).await;
        d
    }

    /// Carries out outputs; returns whether an event matched.
    fn flush(&mut self, want: &mut impl FnMut(&McpEvent) -> bool) -> bool {
        let mut hit = false;
        while let Some(o) = self.client.poll_output() {
            match o {
                Output::Spawn => {
                    self.process.spawn().unwrap();
                    self.client.handle_spawned(clock::now());
                }
                Output::Write(line) => {
                    self.process.write(line);
                }
                Output::Kill { grace } => self.process.kill(grace),
                Output::Http(_) | Output::HttpAbort(_) => unreachable!("stdio only"),
                Output::Event(e) => hit |= want(&e),
            }
        }
        hit
    }

    async fn until(&mut self, mut want: impl FnMut(&McpEvent) -> bool) {
        loop {
            if self.flush(&mut want) {
                return;
            }
            match self.process.next_event().await {
                ProcessEvent::Stdout(b) => self.client.handle_stdout(clock::now(), &b),
                ProcessEvent::Stderr(b) => self.client.handle_stderr(clock::now(), &b),
                ProcessEvent::Exited(s) => panic!("server exited: {s}"),
            }
        }
    }

    fn send(&mut self) -> McpCallId {
        self.client
            .call(
                clock::now(),
                "tools/call",
                Some(echo_params()),
                Duration::from_secs(30),
            )
            .unwrap()
    }

    async fn echo(&mut self) {
        let id = self.send();
        self.until(
            |e| matches!(e, McpEvent::CallCompleted { call_id, result: Ok(_) } if *call_id == id),
        )
        .await;
    }

    /// `n` calls with [`IN_FLIGHT`] outstanding at a time.
    async fn echo_many(&mut self, n: usize) {
        let mut sent = 0;
        let mut done = 0;
        while done < n {
            while sent < n && sent - done < IN_FLIGHT {
                self.send();
                sent += 1;
            }
            let mut completed = 0;
            self.until(|e| {
                if matches!(e, McpEvent::CallCompleted { .. }) {
                    completed += 1;
                }
                completed > 0
            })
            .await;
            done += completed;
        }
    }
}

/// A gateway, a bridge to server-everything, and a participant that calls through them.
struct Space {
    human: ParticipantRuntime,
    _bridge: BridgeHandle,
}

impl Space {
    async fn start() -> Space {
        let yaml = "space: {id: bench}\nparticipants:\n  human: {tokens: [human-token], capabilities: [{kind: \"*\"}]}\n  every: {type: mcp-bridge, tokens: [every-token], capabilities: [{kind: mcp/response}], mcp_server: {command: node}}\n";
        let mut config = SpaceConfig::from_yaml(yaml).unwrap();
        config.logging = mew_core::gateway::LoggingConfig::OFF;
        config.gateway.rate_limit = None;
        let server = GatewayServer::bind_with(
            "127.0.0.1:0".parse().unwrap(),
            config,
            ServerOptions {
                log_dir: std::env::temp_dir().join("mew-bench-logs"),
                seed: Some(1),
                ..ServerOptions::default()
            },
        )
        .await
        .unwrap();
        let url = format!("ws://{}/ws?space=bench", server.local_addr());
        tokio::spawn(server.serve());
        let participant = |id: &str| ParticipantConfig {
            gateway_url: url.clone(),
            space: "bench".into(),
            token: format!("{id}-token"),
            participant_id: Some(id.into()),
            ..ParticipantConfig::default()
        };
        let bridge = spawn_bridge(
            BridgeConfig {
                participant: participant("every"),
                ..BridgeConfig::default()
            },
            everything(),
            Some(2),
        );
        let mut human_config = participant("human");
        human_config.discovery.auto = false;
        let (human, _events, _) = ParticipantRuntime::connect(human_config, Some(3))
            .await
            .unwrap();
        // Let the bridge join and its server come up.
        loop {
            if human
                .with(|p, _| p.participants().any(|(id, _)| id == "every"))
                .await
                .unwrap()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let s = Space {
            human,
            _bridge: bridge,
        };
        s.echo().await;
        s
    }

    async fn echo(&self) {
        let r = self
            .human
            .mcp_request(
                vec!["every".into()],
                json!({"method": "tools/call", "params": echo_params()}),
                RequestOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(r["content"][0]["text"], "Echo: hello mew");
    }

    async fn echo_many(&self, n: usize) {
        let mut set = tokio::task::JoinSet::new();
        let mut started = 0;
        while started < n.min(IN_FLIGHT) {
            let h = self.human.clone();
            set.spawn(async move { Space::echo_with(&h).await });
            started += 1;
        }
        while set.join_next().await.is_some() {
            if started < n {
                let h = self.human.clone();
                set.spawn(async move { Space::echo_with(&h).await });
                started += 1;
            }
        }
    }

    async fn echo_with(h: &ParticipantRuntime) {
        h.mcp_request(
            vec!["every".into()],
            json!({"method": "tools/call", "params": echo_params()}),
            RequestOptions::default(),
        )
        .await
        .unwrap();
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let mut direct = rt.block_on(Direct::start());
    let space = rt.block_on(Space::start());

    let mut g = c.benchmark_group("bridge_echo");
    g.sample_size(30);
    g.bench_function("direct_mcp_client", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for _ in 0..iters {
                    direct.echo().await;
                }
                t.elapsed()
            })
        })
    });
    g.bench_function("through_gateway_and_bridge", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for _ in 0..iters {
                    space.echo().await;
                }
                t.elapsed()
            })
        })
    });
    g.finish();

    // A plain summary for the README.
    const N: usize = 2000;
    let (d_lat, s_lat) = rt.block_on(async {
        let mut d = Vec::with_capacity(N);
        let mut s = Vec::with_capacity(N);
        for _ in 0..N {
            let t = Instant::now();
            direct.echo().await;
            d.push(t.elapsed());
            let t = Instant::now();
            space.echo().await;
            s.push(t.elapsed());
        }
        (d, s)
    });
    let d_total: Duration = d_lat.iter().sum();
    let s_total: Duration = s_lat.iter().sum();
    let (d_med, s_med) = (median(d_lat), median(s_lat));
    let (d_par, s_par) = rt.block_on(async {
        let t = Instant::now();
        direct.echo_many(N).await;
        let d = t.elapsed();
        let t = Instant::now();
        space.echo_many(N).await;
        (d, t.elapsed())
    });
    let per_s = |n: usize, t: Duration| n as f64 / t.as_secs_f64();
    println!("\nbridge summary ({N} echo calls each):");
    println!(
        "  direct McpClient:      {:>7.0} round trips/s sequential, median {:>6.0} us, {:>7.0}/s with {IN_FLIGHT} in flight",
        per_s(N, d_total),
        d_med.as_secs_f64() * 1e6,
        per_s(N, d_par)
    );
    println!(
        "  gateway + bridge:      {:>7.0} round trips/s sequential, median {:>6.0} us, {:>7.0}/s with {IN_FLIGHT} in flight",
        per_s(N, s_total),
        s_med.as_secs_f64() * 1e6,
        per_s(N, s_par)
    );
    println!(
        "  added by the space:    median {:.0} us per call",
        (s_med.as_secs_f64() - d_med.as_secs_f64()) * 1e6
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
