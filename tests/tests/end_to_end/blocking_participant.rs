//! The no-runtime example (`drivers/common/examples/blocking_participant.rs`) against a
//! real gateway: it joins, greets, reads chats addressed to it and leaves on "bye".

#[path = "../../../drivers/common/examples/blocking_participant.rs"]
mod blocking;

use std::time::Duration;

use mew_async_std::{GatewayServer, ParticipantRuntime};
use mew_core::gateway::SpaceConfig;
use mew_core::participant::{Event, ParticipantConfig};

fn space() -> SpaceConfig {
    SpaceConfig::from_yaml(
        r#"
space: {id: s, name: s}
logging: {enabled: false}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  agent: {tokens: [agent-token], capabilities: [{kind: chat}]}
"#,
    )
    .unwrap()
}

async fn next_matching(events: &mew_async_std::Events, want: impl Fn(&Event) -> bool) -> Event {
    let wait = async {
        loop {
            let e = events.recv().await.expect("runtime alive");
            if want(&e) {
                return e;
            }
        }
    };
    let limit = async {
        async_io::Timer::after(Duration::from_secs(5)).await;
        panic!("event not seen in time");
    };
    futures_util::future::select(std::pin::pin!(wait), std::pin::pin!(limit))
        .await
        .factor_first()
        .0
}

#[test]
fn blocking_participant_joins_chats_and_leaves() {
    smol::block_on(async {
        let server = GatewayServer::bind("127.0.0.1:0".parse().unwrap(), space())
            .await
            .unwrap();
        let addr = server.local_addr();
        let stop = server.shutdown_handle();
        let serving = smol::spawn(server.serve());
        let url = format!("ws://{addr}/ws?space=s");
        let cfg = |token: &str| ParticipantConfig {
            gateway_url: url.clone(),
            space: "s".into(),
            token: token.into(),
            ..ParticipantConfig::default()
        };
        let (human, events, _) = ParticipantRuntime::connect(cfg("human-token"), Some(1))
            .await
            .unwrap();
        let agent_cfg = cfg("agent-token");
        let agent = std::thread::spawn(move || blocking::run(agent_cfg, "hello, blocking"));
        // Its greeting (a broadcast chat) reaches the human.
        let greeting = next_matching(&events, |e| {
            matches!(e, Event::Message(env) if env.from == "agent" && env.kind.as_str() == "chat")
        })
        .await;
        let Event::Message(env) = greeting else {
            unreachable!()
        };
        assert_eq!(env.payload.as_ref().unwrap()["text"], "hello, blocking");
        for text in ["hi there", "bye"] {
            human
                .chat(text, vec!["agent".into()])
                .await
                .unwrap()
                .unwrap();
        }
        // It closes for good: the gateway reports it gone.
        next_matching(
            &events,
            |e| matches!(e, Event::ParticipantLeft { id } if id == "agent"),
        )
        .await;
        let transcript = agent.join().unwrap().expect("a clean run");
        assert_eq!(transcript.me, "agent");
        assert_eq!(
            transcript.chats,
            vec![
                ("human".to_owned(), "hi there".to_owned()),
                ("human".to_owned(), "bye".to_owned())
            ]
        );
        human.close().await;
        stop.shutdown();
        serving.await.unwrap();
    });
}
