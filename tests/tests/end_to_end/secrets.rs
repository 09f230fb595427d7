//! Tokens do not come from the generator of ids: the core takes them from an injected
//! source, and the servers inject the operating system's CSPRNG, so a participant that
//! sees ids (even every id of a gateway whose seed is fixed) learns nothing about tokens.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use mew_core::gateway::{Gateway, SpaceConfig};
use mew_core::secret::{Entropy, TOKEN_ENTROPY, TokenSource, token_of};
use mew_tests::scratch::Scratch;
use mew_tests::sim::{Sim, envelope};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const SPACE: &str = "space: {id: s}\nparticipants:\n  human: {tokens: [human-token], capabilities: [{kind: \"*\"}]}\n";

struct Fixed(u8);

impl TokenSource for Fixed {
    fn entropy(&mut self) -> Option<Entropy> {
        self.0 += 1;
        Some([self.0; TOKEN_ENTROPY])
    }
}

#[test]
fn invite_tokens_come_from_the_injected_source() {
    let mut sim = Sim::from_yaml(SPACE);
    let config = SpaceConfig::from_yaml(SPACE).unwrap();
    sim.gw = Gateway::new(config, sim.seed, Box::new(Fixed(0)), None);
    let h = sim.join("human-token");
    sim.send_and_settle(
        h,
        &envelope(
            "inv",
            "human",
            "space/invite",
            None,
            json!({"participant_id": "guest", "initial_capabilities": [{"kind": "chat"}]}),
        ),
    );
    let invite = sim.received_kind(h, "space/invite-ack");
    assert_eq!(invite.len(), 1);
    // 192 bits of the source, as every token the core mints.
    let injected = token_of(&[1; TOKEN_ENTROPY]);
    assert_eq!(injected, "AQEB".repeat(8));
    assert_eq!(invite[0]["payload"]["token"], injected.as_str());
    // The injected token authenticates the guest.
    let g = sim.join(&injected);
    let w = sim.received_kind(g, "system/welcome");
    assert_eq!(w[0]["payload"]["you"]["id"], "guest");
}

/// Joins a fresh gateway with a fixed seed; its welcome id and an invite token.
async fn welcome_id_and_invite_token() -> (String, String) {
    let dir = Scratch::new("secrets", "seed");
    let opts = mew_tokio::ServerOptions {
        log_dir: dir.to_path_buf(),
        seed: Some(5),
        ..Default::default()
    };
    let config = mew_core::gateway::SpaceConfig::from_yaml(SPACE).unwrap();
    let server = mew_tokio::GatewayServer::bind_with("127.0.0.1:0".parse().unwrap(), config, opts)
        .await
        .unwrap();
    let addr = server.local_addr();
    let shutdown = server.shutdown_handle();
    let task = tokio::spawn(server.serve());
    let mut req = format!("ws://{addr}/ws?space=s")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("Authorization", "Bearer human-token".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let welcome = loop {
        let m = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("a frame in time")
            .unwrap()
            .unwrap();
        if let Message::Text(t) = m {
            break serde_json::from_str::<Value>(&t).unwrap();
        }
    };
    assert_eq!(welcome["kind"], "system/welcome");
    ws.send(Message::text(
        json!({"protocol": "mew/v0.4", "id": "inv", "kind": "space/invite",
               "payload": {"participant_id": "guest"}})
        .to_string(),
    ))
    .await
    .unwrap();
    let token = loop {
        let m = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Message::Text(t) = m {
            let v: Value = serde_json::from_str(&t).unwrap();
            if v["kind"] == "space/invite-ack" {
                break v["payload"]["token"].as_str().unwrap().to_owned();
            }
        }
    };
    shutdown.shutdown();
    let _ = task.await;
    (welcome["id"].as_str().unwrap().to_owned(), token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_seed_repeats_the_ids_but_never_the_tokens() {
    let (id_a, token_a) = welcome_id_and_invite_token().await;
    let (id_b, token_b) = welcome_id_and_invite_token().await;
    assert_eq!(id_a, id_b, "the seed fixes the ids");
    assert_ne!(token_a, token_b, "tokens do not follow from the seed");
    // 192 bits from the OS, base64url.
    assert_eq!(token_a.len(), 32);
    assert!(
        token_a
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
}
