//! Live configuration over real sockets: a re-read space.yaml applied to a running gateway
//! while others keep chatting.

use crate::e2e;

use e2e::drivers::{AsyncStd, Tokio};
use e2e::{Driver, RawClient, RunningGateway};
use mew_core::gateway::SpaceConfig;
use mew_driver_common::server::{ReloadHandle, ServerOptions};
use mew_tests::scratch::Scratch;
use serde_json::{Value, json};

const BEFORE: &str = r#"
space: {id: e2e}
logging: {enabled: true}
participants:
  human: {tokens: [human-token], capabilities: ["*"]}
  watcher: {tokens: [watcher-token], capabilities: [chat]}
  agent: {tokens: [agent-token, agent-old], capabilities: [chat]}
  leaver: {tokens: [leaver-token], capabilities: [chat]}
"#;

const AFTER: &str = r#"
space: {id: e2e}
logging: {enabled: true}
participants:
  human: {tokens: [human-token], capabilities: ["*"]}
  watcher: {tokens: [watcher-token], capabilities: [chat, mcp/proposal]}
  agent: {tokens: [agent-token], capabilities: [chat]}
  newbie: {tokens: [newbie-token], capabilities: [chat]}
"#;

/// Starts a gateway on `D` and returns it with a handle that reloads it.
fn start<D: Driver>(dir: &std::path::Path) -> (RunningGateway, ReloadHandle) {
    let opts = ServerOptions {
        log_dir: dir.join(".mew/logs"),
        ..Default::default()
    };
    let gw = D::start_with(
        SpaceConfig::from_yaml(BEFORE).unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        opts,
    );
    let reload = gw.reload.clone().unwrap();
    (gw, reload)
}

async fn refused(gw: &RunningGateway, token: &str) -> String {
    let mut c = RawClient::open(&gw.ws_url("e2e"), Some(token)).await;
    let e = c.next().await;
    assert_eq!(e["kind"], "system/error", "{e}");
    e["payload"]["error"].as_str().unwrap().to_owned()
}

async fn reload_while_others_chat<D: Driver>(name: &str) {
    let dir = Scratch::new("e2e", name);
    let (gw, reload) = start::<D>(&dir);
    let (mut human, _) = RawClient::join(&gw, "human-token").await;
    let (mut watcher, _) = RawClient::join(&gw, "watcher-token").await;
    let (mut agent, _) = RawClient::join(&gw, "agent-old").await;
    let (mut leaver, _) = RawClient::join(&gw, "leaver-token").await;
    assert_eq!(refused(&gw, "newbie-token").await, "unknown_token");

    // Chats before, during and after the reload all reach the watcher, in order.
    let mut ids = Vec::new();
    for i in 0..30 {
        ids.push(
            human
                .send("chat", &[], json!({"text": format!("before {i}")}))
                .await,
        );
    }
    assert!(
        reload
            .reconfigure(SpaceConfig::from_yaml(AFTER).unwrap())
            .await
    );
    for i in 0..30 {
        ids.push(
            human
                .send("chat", &[], json!({"text": format!("after {i}")}))
                .await,
        );
    }
    let mut welcome = None;
    for id in &ids {
        // The watcher's fresh welcome comes in between.
        loop {
            let v = watcher.next().await;
            if v["kind"] == "system/welcome" {
                welcome = Some(v);
                continue;
            }
            if v["kind"] == "chat" && v["id"] == *id {
                break;
            }
            assert!(
                v["kind"] != "chat" || v["from"] != "human",
                "out of order: {v}"
            );
        }
    }
    // The capability change, told the way a grant tells it.
    let welcome: Value = match welcome {
        Some(w) => w,
        None => watcher.expect_kind("system/welcome").await,
    };
    let caps = welcome["payload"]["you"]["capabilities"].to_string();
    assert!(caps.contains("mcp/proposal"), "{caps}");

    // The connection that used a removed token is closed with the reason; so is the
    // removed participant's.
    let close = agent.expect_close().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1008);
    assert!(close.reason.contains("token revoked"), "{}", close.reason);
    let close = leaver.expect_close().await.expect("a close frame");
    assert!(close.reason.contains("removed"), "{}", close.reason);
    assert_eq!(refused(&gw, "agent-old").await, "unknown_token");
    assert_eq!(refused(&gw, "leaver-token").await, "unknown_token");

    // The others and the newcomer carry on.
    let (mut agent, _) = RawClient::join(&gw, "agent-token").await;
    let (mut newbie, _) = RawClient::join(&gw, "newbie-token").await;
    let id = newbie.send("chat", &[], json!({"text": "hello"})).await;
    agent.expect_id(&id).await;
    human.expect_id(&id).await;
    watcher.expect_id(&id).await;

    // A configuration for another space is refused whole: nothing changes.
    let other = AFTER
        .replace("id: e2e", "id: elsewhere")
        .replace("newbie", "other");
    assert!(
        reload
            .reconfigure(SpaceConfig::from_yaml(&other).unwrap())
            .await
    );
    assert_eq!(refused(&gw, "other-token").await, "unknown_token");
    let (_newbie2, _) = RawClient::join(&gw, "newbie-token").await;

    // Every change is in the audit trail.
    drop(gw);
    let history = std::fs::read_to_string(dir.join(".mew/logs/envelope-history.jsonl")).unwrap();
    let changes: Vec<Value> = history
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["event"] == "configuration_changed")
        .collect();
    let said: Vec<(String, String)> = changes
        .iter()
        .map(|c| {
            (
                c["participant"].as_str().unwrap_or_default().to_owned(),
                c["metadata"]["change"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    for want in [
        ("watcher", "capabilities_changed"),
        ("agent", "tokens_revoked"),
        ("newbie", "participant_added"),
        ("leaver", "participant_removed"),
    ] {
        assert!(
            said.contains(&(want.0.to_owned(), want.1.to_owned())),
            "{want:?} in {said:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_while_others_chat_on_tokio() {
    reload_while_others_chat::<Tokio>("reload-tokio").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_while_others_chat_on_async_std() {
    reload_while_others_chat::<AsyncStd>("reload-async-std").await;
}
