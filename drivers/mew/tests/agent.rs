//! `mew agent` end to end, every part real except the hosted model: `mew gateway` starts the
//! agent (`type: agent`) and a bridge to the real npm `server-everything` (`type:
//! mcp-bridge`) from a `space.yaml`; a Rust participant offers `get_weather`; a person
//! (a participant runtime in this test) asks, and approves or rejects proposals; the model
//! is a local HTTP server speaking the chat-completions API that replays scripted turns.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mew_core::participant::{Event, ParticipantConfig, ToolSpec};
use mew_tests::model_server::{ModelServer, Turn};
use mew_tests::process::MewGateway;
use mew_tests::scratch::Scratch;
use mew_tests::wait;
use mew_tokio::ParticipantRuntime;
use serde_json::{Value, json};

const MEW: &str = env!("CARGO_BIN_EXE_mew");
const SPACE: &str = "agent-e2e";
const QUESTION: &str = "What's the weather in Tokyo and what is $85 plus a 15% tip?";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn everything_server() -> String {
    let p = repo().join(
        "tests/mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    assert!(
        p.is_file(),
        "MCP test servers are not installed: run `npm ci` in tests/mcp-servers"
    );
    p.canonicalize().unwrap().to_string_lossy().into_owned()
}

/// The space: the agent may call `get_weather` directly and must propose anything else.
fn write_space(dir: &Path, agent_yaml: &str, extra: &str) -> PathBuf {
    let yaml = format!(
        r#"space: {{id: {SPACE}}}
participants:
  human: {{tokens: [human-token], capabilities: [{{kind: "*"}}]}}
  assistant:
    type: agent
    auto_start: true
    agent_config: agent.yaml
    tokens: [assistant-token]
    capabilities:
      - {{kind: chat}}
      - {{kind: chat/acknowledge}}
      - {{kind: "reasoning/*"}}
      - {{kind: mcp/request, payload: {{method: tools/list}}}}
      - {{kind: mcp/request, payload: {{method: tools/call, params: {{name: get_weather}}}}}}
      - {{kind: mcp/proposal}}
      - {{kind: mcp/withdraw}}
      - {{kind: participant/status}}
  weather-service:
    tokens: [weather-token]
    capabilities: [{{kind: mcp/response}}, {{kind: chat}}]
  calculator:
    type: mcp-bridge
    auto_start: true
    tokens: [calculator-token]
    capabilities: [{{kind: mcp/response}}, {{kind: chat}}, {{kind: participant/status}}]
    mcp_server: {{command: node, args: ["{server}"]}}
{extra}"#,
        server = everything_server()
    );
    std::fs::write(dir.join(".mew/agent.yaml"), agent_yaml).unwrap();
    let path = dir.join(".mew/space.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

type Gateway = MewGateway;

fn start_gateway(dir: &Path, config: &Path, model: &ModelServer) -> Gateway {
    let mut cmd = Command::new(MEW);
    cmd.args(["gateway", "--port", "0", "--log-level", "warn", "--config"])
        .arg(config)
        .current_dir(dir)
        .env("OPENAI_BASE_URL", &model.base_url)
        .env("OPENAI_API_KEY", "sk-test-secret")
        .env("MEW_MODEL", "scripted-model")
        .env_remove("MEW_AGENT_CONFIG")
        .stderr(Stdio::inherit());
    MewGateway::start(cmd)
}

fn participant(addr: &str, token: &str) -> ParticipantConfig {
    ParticipantConfig {
        gateway_url: format!("ws://{addr}/ws?space={SPACE}"),
        space: SPACE.into(),
        token: token.into(),
        ..ParticipantConfig::default()
    }
}

/// What the person does with a proposal.
#[derive(Clone, Copy)]
enum Review {
    Fulfil,
    Reject,
    Ignore,
}

/// A person in the space: records every envelope it sees and reviews proposals.
struct Person {
    rt: ParticipantRuntime,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Person {
    async fn join(addr: &str, review: Review) -> Person {
        let (rt, mut events, _) =
            ParticipantRuntime::connect(participant(addr, "human-token"), Some(7))
                .await
                .expect("the human joins");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (rt2, seen2) = (rt.clone(), seen.clone());
        tokio::spawn(async move {
            while let Some(e) = events.recv().await {
                match e {
                    Event::Message(env) => {
                        seen2
                            .lock()
                            .unwrap()
                            .push(serde_json::to_value(&*env).unwrap());
                    }
                    Event::ProposalSeen { id, .. } => {
                        let rt = rt2.clone();
                        tokio::spawn(async move {
                            match review {
                                Review::Fulfil => {
                                    let _ = rt.fulfil(id).await;
                                }
                                Review::Reject => {
                                    let _ = rt.reject(id, "not this one").await;
                                }
                                Review::Ignore => {}
                            }
                        });
                    }
                    _ => {}
                }
            }
        });
        Person { rt, seen }
    }

    fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }

    async fn until<T>(&self, what: &str, within: Duration, f: impl Fn(&[Value]) -> Option<T>) -> T {
        wait::until_async(what, within, || f(&self.seen())).await
    }

    /// Waits until the assistant has listed the tools of `peers` (their answers seen).
    async fn until_discovered(&self, peers: &[&str]) {
        for peer in peers {
            self.until(
                &format!("the assistant to list {peer}'s tools"),
                Duration::from_secs(30),
                |seen| {
                    seen.iter()
                        .any(|e| {
                            e["from"] == *peer
                                && e["kind"] == "mcp/response"
                                && e["to"] == json!(["assistant"])
                                && e["payload"]["result"]["tools"].is_array()
                        })
                        .then_some(())
                },
            )
            .await;
        }
    }
}

async fn weather_service(addr: &str) -> ParticipantRuntime {
    let (rt, _events) = ParticipantRuntime::start(participant(addr, "weather-token"), Some(3));
    // Registered before the welcome, so the first tools/list already sees it.
    rt.register_tool(
        ToolSpec {
            name: "get_weather".into(),
            description: Some("Current weather of a city".into()),
            input_schema: Some(json!({"type": "object", "required": ["location"],
                "properties": {"location": {"type": "string"}}})),
        },
        |args: Value| async move {
            let city = args["location"].as_str().unwrap_or("?").to_owned();
            Ok(json!({"content": [{"type": "text", "text": format!("{city}: 22°C, partly cloudy")}]}))
        },
    )
    .await
    .unwrap()
    .unwrap();
    rt
}

/// The envelopes of the exchange, without discovery, presence and status traffic, with
/// ids replaced by their order of first appearance and times removed.
fn transcript(seen: &[Value]) -> Vec<Value> {
    let mut ids: Vec<String> = Vec::new();
    let mut name = |id: &str| {
        let i = ids.iter().position(|x| x == id).unwrap_or_else(|| {
            ids.push(id.to_owned());
            ids.len() - 1
        });
        json!(format!("<id-{i}>"))
    };
    seen.iter()
        .filter(|e| {
            let k = e["kind"].as_str().unwrap_or("");
            !k.starts_with("system/")
                && k != "participant/status"
                && e["payload"]["method"] != "tools/list"
                && !e["payload"]["result"]["tools"].is_array()
        })
        .map(|e| {
            let mut e = e.clone();
            let o = e.as_object_mut().unwrap();
            o.remove("ts");
            o.remove("protocol");
            if let Some(id) = o.get("id").and_then(Value::as_str).map(str::to_owned) {
                o.insert("id".into(), name(&id));
            }
            if let Some(c) = o.get("context").and_then(Value::as_str).map(str::to_owned) {
                o.insert("context".into(), name(&c));
            }
            if let Some(Value::Array(cs)) = o.get("correlation_id").cloned() {
                let cs: Vec<Value> = cs.iter().map(|c| name(c.as_str().unwrap_or(""))).collect();
                o.insert("correlation_id".into(), Value::Array(cs));
            }
            // JSON-RPC ids are the sender's counters.
            if let Some(p) = o.get_mut("payload").and_then(Value::as_object_mut)
                && p.contains_key("jsonrpc")
            {
                p.insert("id".into(), json!("<rpc>"));
            }
            e
        })
        .collect()
}

fn tool_names(request: &Value) -> Vec<String> {
    let mut v: Vec<String> = request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weather_and_tip_with_a_real_mcp_server_and_a_person_who_approves() {
    let model = ModelServer::start(vec![
        Turn::call(
            "call_1",
            "weather-service__get_weather",
            json!({"location": "Tokyo"}),
        ),
        Turn::call(
            "call_2",
            "calculator__get-sum",
            json!({"a": 85, "b": 12.75}),
        ),
        Turn::text("Tokyo is 22°C and partly cloudy. With a 15% tip, $85 comes to $97.75."),
    ]);
    let dir = Scratch::space("agent", "weather");
    let config = write_space(&dir, "name: assistant\nmodel_timeout_ms: 20000\n", "");
    let gw = start_gateway(&dir, &config, &model);
    let weather = weather_service(&gw.addr).await;
    let human = Person::join(&gw.addr, Review::Fulfil).await;
    human
        .until_discovered(&["weather-service", "calculator"])
        .await;

    let chat = human
        .rt
        .chat(QUESTION, vec!["assistant".into()])
        .await
        .unwrap()
        .unwrap();
    let answer = human
        .until("the answer", Duration::from_secs(60), |seen| {
            seen.iter()
                .find(|e| e["kind"] == "chat" && e["from"] == "assistant")
                .cloned()
        })
        .await;
    assert_eq!(answer["correlation_id"], json!([chat]));
    assert!(
        answer["payload"]["text"]
            .as_str()
            .unwrap()
            .contains("$97.75")
    );

    // What the model saw.
    let reqs = model.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs.iter().all(|r| r.path == "/v1/chat/completions"));
    assert_eq!(
        reqs[0].authorization.as_deref(),
        Some("Bearer sk-test-secret")
    );
    assert_eq!(reqs[0].body["model"], "scripted-model");
    let names = tool_names(&reqs[0].body);
    assert!(
        names.contains(&"calculator__get-sum".to_owned()),
        "{names:?}"
    );
    assert!(names.contains(&"calculator__echo".to_owned()), "{names:?}");
    assert!(
        names.contains(&"weather-service__get_weather".to_owned()),
        "{names:?}"
    );
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("calculator__") || n.starts_with("weather-service__"))
    );
    let sum = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "calculator__get-sum")
        .unwrap();
    assert_eq!(sum["type"], "function");
    assert!(
        sum["function"]["description"]
            .as_str()
            .unwrap()
            .contains("(tool `get-sum` of participant `calculator`)")
    );
    assert_eq!(
        sum["function"]["parameters"]["properties"]["a"]["type"],
        "number"
    );
    let messages = reqs[2].body["messages"].as_array().unwrap();
    let tool_results: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tool_results.len(), 2);
    assert_eq!(tool_results[0]["tool_call_id"], "call_1");
    assert_eq!(tool_results[0]["content"], "Tokyo: 22°C, partly cloudy");
    assert_eq!(
        tool_results[1]["content"],
        "The sum of 85 and 12.75 is 97.75."
    );

    // The exchange as the person saw it.
    let t = transcript(&human.seen());
    insta::assert_json_snapshot!("weather_and_tip_transcript", t);
    weather.close().await;
    drop(gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_and_a_rate_limit_end_in_a_clear_answer() {
    let model = ModelServer::start(vec![
        Turn::Status(429, Some(1)),
        Turn::call("c1", "calculator__get-sum", json!({"a": 1, "b": 2})),
        Turn::text("I was not allowed to use the calculator."),
        // The next question: the model is broken for good.
        Turn::Status(500, None),
        Turn::Status(500, None),
    ]);
    let dir = Scratch::space("agent", "reject");
    let config = write_space(&dir, "name: assistant\nmodel_retries: 1\n", "");
    let gw = start_gateway(&dir, &config, &model);
    let human = Person::join(&gw.addr, Review::Reject).await;
    human.until_discovered(&["calculator"]).await;
    let started = Instant::now();
    human
        .rt
        .chat("what is 1+2?", vec!["assistant".into()])
        .await
        .unwrap()
        .unwrap();
    let answer = human
        .until("the answer", Duration::from_secs(60), |seen| {
            seen.iter()
                .find(|e| e["kind"] == "chat" && e["from"] == "assistant")
                .cloned()
        })
        .await;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After was honoured"
    );
    assert_eq!(
        answer["payload"]["text"],
        "I was not allowed to use the calculator."
    );
    let reqs = model.requests();
    let tool_msg = reqs[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap();
    let obs = tool_msg["content"].as_str().unwrap();
    assert!(
        obs.starts_with("Error:") && obs.contains("not this one"),
        "{obs}"
    );

    human
        .rt
        .chat("and 2+2?", vec!["assistant".into()])
        .await
        .unwrap()
        .unwrap();
    let second = human
        .until("the second answer", Duration::from_secs(60), |seen| {
            let answers: Vec<&Value> = seen
                .iter()
                .filter(|e| e["kind"] == "chat" && e["from"] == "assistant")
                .collect();
            answers.get(1).map(|v| (*v).clone())
        })
        .await;
    let text = second["payload"]["text"].as_str().unwrap();
    assert!(
        text.starts_with("I could not complete this:") && text.contains("500"),
        "{text}"
    );
    assert_eq!(model.served(), 5);
    drop(gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_agent_fulfils_what_its_auto_fulfil_rule_allows() {
    let model = ModelServer::start(vec![
        Turn::call("c1", "calculator__get-sum", json!({"a": 1, "b": 2})),
        Turn::text("1 + 2 = 3"),
    ]);
    let dir = Scratch::space("agent", "autofulfil");
    std::fs::write(
        dir.join(".mew/trusted.yaml"),
        "auto_respond: false\nauto_fulfil:\n  - {from: assistant, to: calculator, method: tools/call, tool: get-*, read_only: true}\n",
    )
    .unwrap();
    let trusted = "  trusted:\n    type: agent\n    auto_start: true\n    agent_config: trusted.yaml\n    tokens: [trusted-token]\n    capabilities: [{kind: \"mcp/*\"}, {kind: chat}, {kind: participant/status}]\n";
    let config = write_space(&dir, "name: assistant\n", trusted);
    let gw = start_gateway(&dir, &config, &model);
    let human = Person::join(&gw.addr, Review::Ignore).await;
    // The trusted agent must know the tool is read-only before it may fulfil. Whichever
    // agent lists the calculator first, the other learns its tools from that answer, which
    // every participant sees go by.
    human
        .until(
            "an agent to list the calculator",
            Duration::from_secs(30),
            |seen| {
                seen.iter()
                    .any(|e| {
                        e["from"] == "calculator"
                            && (e["to"] == json!(["trusted"]) || e["to"] == json!(["assistant"]))
                            && e["payload"]["result"]["tools"].is_array()
                    })
                    .then_some(())
            },
        )
        .await;
    human
        .rt
        .chat("1+2?", vec!["assistant".into()])
        .await
        .unwrap()
        .unwrap();
    let answer = human
        .until("the answer", Duration::from_secs(60), |seen| {
            seen.iter()
                .find(|e| e["kind"] == "chat" && e["from"] == "assistant")
                .cloned()
        })
        .await;
    assert_eq!(answer["payload"]["text"], "1 + 2 = 3");
    let seen = human.seen();
    let proposal = seen
        .iter()
        .find(|e| e["kind"] == "mcp/proposal" && e["from"] == "assistant")
        .unwrap();
    let fulfilment = seen
        .iter()
        .find(|e| {
            e["kind"] == "mcp/request"
                && e["from"] == "trusted"
                && e["payload"]["method"] == "tools/call"
        })
        .expect("the trusted agent fulfilled the proposal");
    assert_eq!(fulfilment["correlation_id"], json!([proposal["id"]]));
    assert_eq!(
        fulfilment["payload"]["params"],
        proposal["payload"]["params"]
    );
    let reqs = model.requests();
    assert_eq!(reqs.len(), 2, "the trusted agent never called the model");
    let tool = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap();
    assert_eq!(tool["content"], "The sum of 1 and 2 is 3.");
    drop(gw);
}

#[test]
fn without_a_model_endpoint_mew_agent_exits_2_naming_what_to_set() {
    let out = Command::new(MEW)
        .args(["agent", "--gateway", "ws://127.0.0.1:9", "--space", "s"])
        .env("MEW_TOKEN", "t")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("MEW_AGENT_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("OPENAI_BASE_URL") && err.contains("OPENAI_API_KEY"),
        "{err}"
    );
}
