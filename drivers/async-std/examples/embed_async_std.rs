//! Embedding the async-std driver: a gateway and two participants in one application.
//!
//! `cargo run -p mew-async-std --example embed_async_std`

use std::error::Error;
use std::net::SocketAddr;

use mew_async_std::{GatewayServer, ParticipantRuntime};
use mew_core::gateway::SpaceConfig;
use mew_core::participant::{ParticipantConfig, RequestOptions, ToolSpec};
use serde_json::{Value, json};

const SPACE: &str = r#"
space: {id: demo, name: demo}
logging: {enabled: false}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  calculator: {tokens: [calc-token], capabilities: [{kind: mcp/response}, {kind: chat}]}
"#;

fn participant(addr: SocketAddr, token: &str) -> ParticipantConfig {
    ParticipantConfig {
        gateway_url: format!("ws://{addr}/ws?space=demo"),
        space: "demo".into(),
        token: token.into(),
        ..ParticipantConfig::default()
    }
}

#[async_std::main]
async fn main() -> Result<(), Box<dyn Error>> {
    // The gateway: bind, keep a shutdown handle, serve in a task.
    let server =
        GatewayServer::bind("127.0.0.1:0".parse()?, SpaceConfig::from_yaml(SPACE)?).await?;
    let addr = server.local_addr();
    let stop = server.shutdown_handle();
    let serving = async_std::task::spawn(server.serve());

    // A participant offering a tool.
    let (calc, _calc_events, _) =
        ParticipantRuntime::connect(participant(addr, "calc-token"), None).await?;
    let add = ToolSpec {
        name: "add".into(),
        description: Some("adds a and b".into()),
        input_schema: None,
    };
    calc.register_tool(add, |args: Value| async move {
        let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
        Ok(json!({"content": [{"type": "text", "text": sum.to_string()}]}))
    })
    .await??;

    // A participant calling it.
    let (human, _events, me) =
        ParticipantRuntime::connect(participant(addr, "human-token"), None).await?;
    let call =
        json!({"method": "tools/call", "params": {"name": "add", "arguments": {"a": 2, "b": 3}}});
    let result = human
        .mcp_request(vec!["calculator".into()], call, RequestOptions::default())
        .await?;
    println!(
        "{me} asked calculator: 2 + 3 = {}",
        result["content"][0]["text"].as_str().unwrap_or("?")
    );

    human.close().await;
    calc.close().await;
    stop.shutdown();
    serving.await?;
    Ok(())
}
