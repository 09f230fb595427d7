//! The async-std driver under smol alone: gateway and participant runtimes run inside
//! `smol::block_on`, with no tokio and no async-std runtime started anywhere in the process.

use std::time::Duration;

use mew_async_std::{GatewayServer, ParticipantRuntime};
use mew_core::gateway::SpaceConfig;
use mew_core::participant::{Event, ParticipantConfig, RequestOptions, ToolSpec};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(5);

fn space() -> SpaceConfig {
    SpaceConfig::from_yaml(
        r#"
space: {id: s, name: s}
logging: {enabled: false}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  service: {tokens: [service-token], capabilities: [{kind: mcp/response}, {kind: chat}]}
"#,
    )
    .unwrap()
}

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    use futures_util::future::{Either, select};
    let timer = async_io::Timer::after(WAIT);
    match select(std::pin::pin!(fut), std::pin::pin!(timer)).await {
        Either::Left((v, _)) => v,
        Either::Right(_) => panic!("{what}: not within {WAIT:?}"),
    }
}

#[test]
fn participants_and_gateway_under_smol() {
    smol::block_on(async {
        let server = GatewayServer::bind("127.0.0.1:0".parse().unwrap(), space())
            .await
            .unwrap();
        let addr = server.local_addr();
        let stop = server.shutdown_handle();
        let serving = smol::spawn(server.serve());
        let cfg = |token: &str| ParticipantConfig {
            gateway_url: format!("ws://{addr}/ws?space=s"),
            space: "s".into(),
            token: token.into(),
            ..ParticipantConfig::default()
        };
        let (service, _sev, sid) = within(
            "service joins",
            ParticipantRuntime::connect(cfg("service-token"), Some(1)),
        )
        .await
        .unwrap();
        assert_eq!(sid, "service");
        service
            .register_tool(
                ToolSpec {
                    name: "echo".into(),
                    description: None,
                    input_schema: None,
                },
                |args: Value| async move {
                    // A timer from the handler: async-io's, which smol drives.
                    async_io::Timer::after(Duration::from_millis(5)).await;
                    Ok(json!({"content":[{"type":"text","text": args["text"]}]}))
                },
            )
            .await
            .unwrap()
            .unwrap();
        let (human, hev, hid) = within(
            "human joins",
            ParticipantRuntime::connect(cfg("human-token"), Some(2)),
        )
        .await
        .unwrap();
        assert_eq!(hid, "human");
        let result = within(
            "tool call answered",
            human.mcp_request(
                vec!["service".into()],
                json!({"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}),
                RequestOptions::default(),
            ),
        )
        .await
        .unwrap();
        assert_eq!(result["content"][0]["text"], "hi");
        // A chat from the service reaches the human's event stream.
        let sent = service
            .chat("hello", vec!["human".into()])
            .await
            .unwrap()
            .unwrap();
        let (from, text) = within("chat seen", async {
            loop {
                match hev.recv().await.expect("runtime alive") {
                    Event::ChatReceived { id, from, text } if id == sent => return (from, text),
                    _ => {}
                }
            }
        })
        .await;
        assert_eq!((from.as_str(), text.as_str()), ("service", "hello"));
        human.close().await;
        service.close().await;
        // A closed runtime refuses commands instead of hanging.
        assert!(human.chat("late", vec![]).await.is_err());
        stop.shutdown();
        within("graceful shutdown", serving).await.unwrap();
    });
}
