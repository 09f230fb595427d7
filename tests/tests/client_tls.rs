//! Every kind of client (participant, agent, bridge) over `wss://` on both drivers, against the gateway's own TLS
//! (`ServerOptions::tls`) with a private CA and a server certificate made here with rcgen:
//! participants and bridges verify the certificate against the CA given to them
//! (`MEW_CA_FILE` / `--ca-file`), and refuse, at once and for good, a gateway whose
//! certificate they cannot verify.
//!
//! The client TLS settings are process-wide (`client_tls::install`), so everything runs in
//! one test, the untrusted case first.

mod e2e;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::drivers::Tokio;
use e2e::{Driver, RunningGateway, WAIT, space};
use mew_core::agent::{AgentConfig, AgentEvent, AgentFile, AgentSettings};
use mew_core::bridge::{BridgeConfig, Exit};
use mew_core::participant::{Event, ParticipantConfig, RequestOptions};
use mew_driver_common::client::agent::{AgentExit, HttpTransport, ModelEndpoint, run_agent};
use mew_driver_common::client::bridge::spawn_bridge;
use mew_driver_common::client::participant::ParticipantRuntime;
use mew_driver_common::client::process::{ProcessRuntime, ServerCommand};
use mew_driver_common::client::socket::Runtime;
use mew_driver_common::client::tls::{self as client_tls, ClientTlsOptions};
use mew_driver_common::server::ServerOptions;
use mew_driver_common::server::tls::{ServerTls, TlsFiles};
use mew_tests::scratch::Scratch;
use serde_json::json;

/// Writes a private CA (`ca.pem`) and a certificate for localhost it signed (`cert.pem`,
/// `key.pem`) into `dir`.
fn make_pki(dir: &Path) -> TlsFiles {
    mew_tests::pki::make(dir, &["localhost", "127.0.0.1"]);
    TlsFiles {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    }
}

fn tls_gateway(dir: &Path, files: &TlsFiles) -> RunningGateway {
    let opts = ServerOptions {
        log_dir: dir.join(".mew/logs"),
        seed: Some(7),
        tls: Some(Arc::new(ServerTls::load(files.clone()).unwrap())),
        ..Default::default()
    };
    Tokio::start_with(space(""), "127.0.0.1:0".parse().unwrap(), opts)
}

fn wss(gw: &RunningGateway) -> String {
    format!("wss://localhost:{}/ws?space=e2e", gw.addr.port())
}

fn cfg(gw: &RunningGateway, token: &str) -> ParticipantConfig {
    ParticipantConfig {
        gateway_url: wss(gw),
        space: "e2e".into(),
        token: token.into(),
        ..ParticipantConfig::default()
    }
}

fn mcp_server() -> ServerCommand {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("mcp-servers/node_modules/@modelcontextprotocol/server-memory/dist/index.js");
    assert!(
        script.is_file(),
        "MCP test servers are not installed: run `npm ci` in tests/mcp-servers"
    );
    ServerCommand::new("node", [script.to_string_lossy().into_owned()])
}

fn bridge_config(gw: &RunningGateway) -> BridgeConfig {
    BridgeConfig {
        participant: ParticipantConfig {
            participant_id: Some("service".into()),
            ..cfg(gw, "service-token")
        },
        ..BridgeConfig::default()
    }
}

/// A participant of runtime `R` cannot join: one clear reason, given up without retrying.
async fn participant_refuses<R: Runtime>(gw: &RunningGateway) {
    let started = Instant::now();
    let (rt, mut events) = ParticipantRuntime::<R>::start(cfg(gw, "human-token"), Some(1));
    let mut reasons = Vec::new();
    let gave_up = tokio::time::timeout(WAIT, async {
        loop {
            match R::recv_event(&mut events).await {
                Some(Event::Disconnected { reason }) => reasons.push(reason),
                Some(Event::GaveUp { .. }) => return true,
                Some(Event::Reconnecting { .. }) => return false,
                Some(_) => {}
                None => return false,
            }
        }
    })
    .await;
    assert_eq!(
        gave_up,
        Ok(true),
        "given up at once, not retried: {reasons:?}"
    );
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    let why = &reasons[0];
    assert!(
        why.contains("certificate is not trusted")
            && why.contains("--ca-file")
            && !why.contains('\n'),
        "{why}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    rt.close().await;
}

/// A bridge of runtime `R` exits with the certificate failure, without retrying.
async fn bridge_refuses<R: ProcessRuntime>(gw: &RunningGateway) {
    let started = Instant::now();
    let handle = spawn_bridge::<R>(bridge_config(gw), mcp_server(), Some(2));
    let exit = tokio::time::timeout(WAIT * 2, handle.join())
        .await
        .expect("the bridge exits");
    assert!(
        matches!(&exit, Exit::GatewayGaveUp(r) if r.contains("certificate is not trusted")),
        "{exit:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
}

/// Two participants of runtime `R` chat over wss://.
async fn participants_chat<R: Runtime>(gw: &RunningGateway) {
    let (human, _hev, _) = ParticipantRuntime::<R>::connect(cfg(gw, "human-token"), Some(3))
        .await
        .expect("the human joins over wss");
    let (agent, mut aev, _) = ParticipantRuntime::<R>::connect(cfg(gw, "agent-token"), Some(4))
        .await
        .expect("the agent joins over wss");
    let id = human.chat("over tls", vec![]).await.unwrap().unwrap();
    let seen = tokio::time::timeout(WAIT, async {
        loop {
            match R::recv_event(&mut aev).await {
                Some(Event::Message(env)) if env.id == id => return env.payload,
                Some(_) => {}
                None => return None,
            }
        }
    })
    .await
    .expect("the chat arrives");
    assert_eq!(seen.unwrap()["text"], "over tls");
    agent.close().await;
    human.close().await;
}

/// A bridge of runtime `R` joins over wss:// and answers through the space.
async fn bridge_answers<R: ProcessRuntime>(gw: &RunningGateway) {
    let handle = spawn_bridge::<R>(bridge_config(gw), mcp_server(), Some(5));
    let (human, _events, _) =
        ParticipantRuntime::<mew_tokio::Tokio>::connect(cfg(gw, "human-token"), Some(6))
            .await
            .unwrap();
    let deadline = Instant::now() + WAIT * 3;
    let tools = loop {
        let r = human
            .mcp_request(
                vec!["service".into()],
                json!({"method": "tools/list", "params": {}}),
                // Sent before the bridge has joined, a request goes unanswered: ask again.
                RequestOptions {
                    timeout: Some(Duration::from_secs(2)),
                    ..RequestOptions::default()
                },
            )
            .await;
        match r {
            Ok(v) if v["tools"].as_array().is_some_and(|t| !t.is_empty()) => break v,
            other if Instant::now() > deadline => panic!("no tools over wss: {other:?}"),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    assert!(
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "read_graph"),
        "{tools}"
    );
    human.close().await;
    handle.shutdown();
    assert_eq!(handle.join().await, Exit::Shutdown);
}

fn agent_config(gw: &RunningGateway) -> AgentConfig {
    let file = AgentFile::from_yaml("model: test-model\n").unwrap();
    AgentConfig::new(
        cfg(gw, "agent-token"),
        AgentSettings::from_file(&file).unwrap(),
    )
}

/// Runs an agent of runtime `R` until `stop` resolves; reports its first welcome on `ready`.
async fn agent<R: Runtime>(
    gw: &RunningGateway,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    ready: tokio::sync::mpsc::UnboundedSender<()>,
) -> AgentExit {
    let endpoint = ModelEndpoint {
        base_url: "http://127.0.0.1:9/v1".into(),
        api_key: None,
    };
    run_agent::<R>(
        agent_config(gw),
        endpoint,
        Arc::new(HttpTransport),
        Some(7),
        stop,
        move |e| {
            if let AgentEvent::Participant(Event::Ready { .. }) = e {
                let _ = ready.send(());
            }
        },
    )
    .await
}

/// An agent of runtime `R` that cannot verify the gateway stops at once.
async fn agent_refuses<R: Runtime>(gw: &RunningGateway) {
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let exit = tokio::time::timeout(WAIT, agent::<R>(gw, std::future::pending(), tx))
        .await
        .expect("the agent stops at once");
    assert_eq!(exit, AgentExit::GatewayGaveUp);
}

/// An agent of runtime `R` joins over wss:// and stops cleanly.
async fn agent_joins<R: Runtime>(gw: &RunningGateway) {
    let (tx, mut ready) = tokio::sync::mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let stop = async move {
        let _ = stop_rx.await;
    };
    let run = agent::<R>(gw, stop, tx);
    let watch = async {
        tokio::time::timeout(WAIT, ready.recv())
            .await
            .expect("the agent joins over wss");
        let _ = stop_tx.send(());
    };
    let (exit, ()) = tokio::join!(run, watch);
    assert_eq!(exit, AgentExit::Shutdown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_kind_over_wss_on_both_drivers_and_untrusted_certificates_refused() {
    let dir = Scratch::new("e2e", "client-tls");
    let files = make_pki(&dir);
    let mut gw = tls_gateway(&dir, &files);

    // The system's roots alone: the test CA is unknown.
    client_tls::install(client_tls::client_config(&ClientTlsOptions::default()).unwrap());
    participant_refuses::<mew_tokio::Tokio>(&gw).await;
    participant_refuses::<mew_async_std::AsyncStd>(&gw).await;
    bridge_refuses::<mew_tokio::Tokio>(&gw).await;
    bridge_refuses::<mew_async_std::AsyncStd>(&gw).await;
    agent_refuses::<mew_tokio::Tokio>(&gw).await;
    agent_refuses::<mew_async_std::AsyncStd>(&gw).await;

    // With the CA file, as `--ca-file` / MEW_CA_FILE give it.
    let trusted = ClientTlsOptions {
        ca_file: Some(dir.join("ca.pem")),
        ..Default::default()
    };
    client_tls::install(client_tls::client_config(&trusted).unwrap());
    participants_chat::<mew_tokio::Tokio>(&gw).await;
    participants_chat::<mew_async_std::AsyncStd>(&gw).await;
    bridge_answers::<mew_tokio::Tokio>(&gw).await;
    bridge_answers::<mew_async_std::AsyncStd>(&gw).await;
    agent_joins::<mew_tokio::Tokio>(&gw).await;
    agent_joins::<mew_async_std::AsyncStd>(&gw).await;

    // Verification off: accepted whatever the certificate, as the option's name says.
    let insecure = ClientTlsOptions {
        insecure_skip_verify: true,
        ..Default::default()
    };
    client_tls::install(client_tls::client_config(&insecure).unwrap());
    participants_chat::<mew_async_std::AsyncStd>(&gw).await;
    gw.stop();
}
