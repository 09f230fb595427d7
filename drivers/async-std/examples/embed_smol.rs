//! The async-std driver under smol: the same crate, no async-std runtime involved.
//!
//! `cargo run -p mew-async-std --example embed_smol`

use std::error::Error;

use mew_async_std::{GatewayServer, ParticipantRuntime};
use mew_core::gateway::SpaceConfig;
use mew_core::participant::{Event, ParticipantConfig};

const SPACE: &str = r#"
space: {id: demo, name: demo}
logging: {enabled: false}
participants:
  alice: {tokens: [alice-token], capabilities: [{kind: "*"}]}
  bob: {tokens: [bob-token], capabilities: [{kind: chat}]}
"#;

fn main() -> Result<(), Box<dyn Error>> {
    smol::block_on(async {
        let server =
            GatewayServer::bind("127.0.0.1:0".parse()?, SpaceConfig::from_yaml(SPACE)?).await?;
        let addr = server.local_addr();
        let stop = server.shutdown_handle();
        let serving = smol::spawn(server.serve());
        let config = |token: &str| ParticipantConfig {
            gateway_url: format!("ws://{addr}/ws?space=demo"),
            space: "demo".into(),
            token: token.into(),
            ..ParticipantConfig::default()
        };
        let (alice, _, _) = ParticipantRuntime::connect(config("alice-token"), None).await?;
        let (bob, bob_events, _) = ParticipantRuntime::connect(config("bob-token"), None).await?;
        alice.chat("hello bob", vec!["bob".into()]).await??;
        // The event stream is an async-channel receiver: it works under any executor.
        while let Ok(event) = bob_events.recv().await {
            if let Event::ChatReceived { from, text, .. } = event {
                println!("bob got a chat from {from}: {text}");
                break;
            }
        }
        alice.close().await;
        bob.close().await;
        stop.shutdown();
        serving.await?;
        Ok(())
    })
}
