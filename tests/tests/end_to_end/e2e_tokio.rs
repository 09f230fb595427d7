//! The end-to-end suite against the tokio driver.

use crate::e2e;

use e2e::drivers::Tokio;

e2e_all!(Tokio);

/// A log writer stuck for good (its envelope history is a FIFO nobody reads: `open` blocks,
/// as on a hung disk) while chats flow: its queue of 8 batches fills, later batches are
/// dropped and counted, and delivery goes on as before. Once the FIFO is read, the writer
/// says what it lost in an `audit_dropped` record.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_log_writer_drops_and_counts_while_delivery_goes_on() {
    use e2e::{RawClient, RunningGateway, http};
    use mew_tests::scratch::Scratch;
    use serde_json::{Value, json};
    use std::time::{Duration, Instant};

    let dir = Scratch::new("e2e", "stuck-writer");
    let logs = dir.join(".mew/logs");
    std::fs::create_dir_all(&logs).unwrap();
    let fifo = logs.join("envelope-history.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let config = mew_core::gateway::SpaceConfig::from_yaml(
        "space: {id: e2e}\nlogging: {enabled: true}\ngateway: {rate_limit: off}\nparticipants:\n  human: {tokens: [human-token], capabilities: [{kind: \"*\"}]}\n  agent: {tokens: [agent-token], capabilities: [{kind: chat}]}\n",
    )
    .unwrap();
    let opts = mew_tokio::ServerOptions {
        log_dir: logs.clone(),
        log_queue: 8,
        ..Default::default()
    };
    let server = mew_tokio::GatewayServer::bind_with("127.0.0.1:0".parse().unwrap(), config, opts)
        .await
        .unwrap();
    let addr = server.local_addr();
    let shutdown = server.shutdown_handle();
    let serving = tokio::spawn(server.serve());
    let gw = RunningGateway::new(addr, Box::new(|| {}));

    let (mut h, _) = RawClient::join(&gw, "human-token").await;
    let (mut a, _) = RawClient::join(&gw, "agent-token").await;
    let mut took = Vec::new();
    for i in 0..300 {
        let t = Instant::now();
        let id = h
            .send("chat", &[], json!({"text": format!("chat {i}")}))
            .await;
        a.expect_id(&id).await;
        took.push(t.elapsed());
    }
    took.sort_unstable();
    // 300 chats write about 1,200 lines in some 600 batches: far past a queue of 8.
    assert!(
        took[299] < Duration::from_secs(2),
        "a stuck writer must not hold delivery: slowest chat {:?}",
        took[299]
    );
    let (status, health) = http(addr, "GET", "/health", None, None).await;
    assert_eq!(status, 200);
    let dropped = health["audit_dropped"].as_u64().unwrap();
    assert!(dropped >= 300, "drops are counted: {health}");

    // The disk comes back: the FIFO is read, the writer catches up and reports.
    let reader = std::thread::spawn(move || std::fs::read_to_string(&fifo).unwrap());
    shutdown.shutdown();
    serving.await.unwrap().unwrap();
    let history = reader.join().unwrap();
    let lines: Vec<Value> = history
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let reported: u64 = lines
        .iter()
        .filter(|l| l["event"] == "audit_dropped")
        .map(|l| l["count"].as_u64().unwrap())
        .sum();
    assert!(
        reported >= dropped,
        "every drop is reported ({reported} of at least {dropped})"
    );
    assert!(lines.iter().any(|l| l["event"] == "received"), "{history}");
}
