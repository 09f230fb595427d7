//! `mew agent` against the response shapes of real model servers: OpenAI, Ollama, llama.cpp's
//! server and vLLM, each replayed from recorded-shape fixtures
//! (`tests/fixtures/model-servers/<server>`), with and without streaming. Every part but the
//! model is real: `mew gateway` starts the agent, a Rust participant offers `get_weather`
//! (the agent may call it) and `save_note` (the agent must propose it), and a person asks
//! and approves. The agent's whole task passes against each server: it discovers the tools,
//! calls one, proposes the other, and answers, with the model's reasoning shown as thoughts
//! and never in the chat.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mew_core::participant::{Event, ParticipantConfig, ToolSpec};
use mew_tests::model_server::{ModelServer, ServerOptions, Turn};
use mew_tests::process::MewGateway;
use mew_tests::scratch::Scratch;
use mew_tests::wait;
use mew_tokio::ParticipantRuntime;
use serde_json::{Value, json};

const MEW: &str = env!("CARGO_BIN_EXE_mew");
const SPACE: &str = "servers-e2e";
const ANSWER: &str = "Tokyo is 22°C and partly cloudy; I saved a note of it.";
const THINK: &str = "The weather tool answered and the note was saved, so I can answer now.";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixtures(server: &str) -> PathBuf {
    repo().join("tests/fixtures/model-servers").join(server)
}

fn participant(addr: &str, token: &str) -> ParticipantConfig {
    ParticipantConfig {
        gateway_url: format!("ws://{addr}/ws?space={SPACE}"),
        space: SPACE.into(),
        token: token.into(),
        ..ParticipantConfig::default()
    }
}

/// The gateway's folder comes first: bound as `(space, gw)`, the gateway stops before its
/// folder is removed.
fn start(name: &str, stream: bool, model: &ModelServer) -> (Scratch, MewGateway) {
    let dir = Scratch::space("servers", name);
    std::fs::write(
        dir.join(".mew/agent.yaml"),
        format!("name: assistant\nmodel_timeout_ms: 20000\nstream: {stream}\n"),
    )
    .unwrap();
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
"#
    );
    let config = dir.join(".mew/space.yaml");
    std::fs::write(&config, yaml).unwrap();
    let mut cmd = Command::new(MEW);
    cmd.args(["gateway", "--port", "0", "--log-level", "warn", "--config"])
        .arg(&config)
        .current_dir(&dir)
        .env("OPENAI_BASE_URL", &model.base_url)
        .env_remove("OPENAI_API_KEY")
        .env("MEW_MODEL", "local-model")
        .env_remove("MEW_AGENT_CONFIG")
        .stderr(Stdio::inherit());
    let gw = MewGateway::start(cmd);
    (dir, gw)
}

/// The weather service: `get_weather`, and `save_note` whose notes it keeps.
async fn weather_service(addr: &str) -> (ParticipantRuntime, Arc<Mutex<Vec<String>>>) {
    let (rt, _events) = ParticipantRuntime::start(participant(addr, "weather-token"), Some(3));
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
    let notes = Arc::new(Mutex::new(Vec::new()));
    let kept = notes.clone();
    rt.register_tool(
        ToolSpec {
            name: "save_note".into(),
            description: Some("Saves a note".into()),
            input_schema: Some(json!({"type": "object", "required": ["text"],
                "properties": {"text": {"type": "string"}}})),
        },
        move |args: Value| {
            let kept = kept.clone();
            async move {
                kept.lock()
                    .unwrap()
                    .push(args["text"].as_str().unwrap_or("").to_owned());
                Ok(json!({"content": [{"type": "text", "text": "saved"}]}))
            }
        },
    )
    .await
    .unwrap()
    .unwrap();
    (rt, notes)
}

/// The person: records what it sees and approves every proposal.
async fn person(addr: &str) -> (ParticipantRuntime, Arc<Mutex<Vec<Value>>>) {
    let (rt, mut events, _) =
        ParticipantRuntime::connect(participant(addr, "human-token"), Some(7))
            .await
            .expect("the human joins");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (rt2, seen2) = (rt.clone(), seen.clone());
    tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            match e {
                Event::Message(env) => seen2
                    .lock()
                    .unwrap()
                    .push(serde_json::to_value(&*env).unwrap()),
                Event::ProposalSeen { id, .. } => {
                    let rt = rt2.clone();
                    tokio::spawn(async move {
                        let _ = rt.fulfil(id).await;
                    });
                }
                _ => {}
            }
        }
    });
    (rt, seen)
}

async fn until<T>(
    seen: &Mutex<Vec<Value>>,
    what: &str,
    within: Duration,
    f: impl Fn(&[Value]) -> Option<T>,
) -> T {
    wait::until_async(what, within, || f(&seen.lock().unwrap())).await
}

/// The whole task against one server's fixtures; returns the requests the model saw.
async fn whole_task(server: &str, stream: bool, options: ServerOptions) -> Vec<Value> {
    let dir = fixtures(server);
    let model = ModelServer::start_with((1..=3).map(|n| Turn::fixture(&dir, n)).collect(), options);
    let (_space, gw) = start(&format!("{server}-{stream}"), stream, &model);
    let (weather, notes) = weather_service(&gw.addr).await;
    let (human, seen) = person(&gw.addr).await;
    until(
        &seen,
        "the tools of weather-service to be listed",
        Duration::from_secs(30),
        |s| {
            s.iter()
                .any(|e| {
                    e["from"] == "weather-service"
                        && e["to"] == json!(["assistant"])
                        && e["payload"]["result"]["tools"]
                            .as_array()
                            .is_some_and(|t| t.len() == 2)
                })
                .then_some(())
        },
    )
    .await;
    let chat = human
        .chat(
            "What's the weather in Tokyo? Save a note of it.",
            vec!["assistant".into()],
        )
        .await
        .unwrap()
        .unwrap();
    let answer = until(&seen, "the answer", Duration::from_secs(60), |s| {
        s.iter()
            .find(|e| e["kind"] == "chat" && e["from"] == "assistant")
            .cloned()
    })
    .await;
    assert_eq!(answer["payload"]["text"], ANSWER, "{server}");
    assert_eq!(answer["correlation_id"], json!([chat]));
    assert_eq!(*notes.lock().unwrap(), ["Tokyo: 22°C, partly cloudy"]);

    let seen = seen.lock().unwrap().clone();
    // The note was proposed (the agent may not call save_note itself), the weather asked.
    let proposals: Vec<&Value> = seen
        .iter()
        .filter(|e| e["kind"] == "mcp/proposal")
        .collect();
    assert_eq!(proposals.len(), 1, "{server}");
    assert_eq!(proposals[0]["payload"]["params"]["name"], "save_note");
    assert!(seen.iter().any(|e| e["kind"] == "mcp/request"
        && e["from"] == "assistant"
        && e["payload"]["params"]["name"] == "get_weather"));
    // Reasoning is shown as thoughts, never in a chat.
    let thoughts: Vec<&str> = seen
        .iter()
        .filter(|e| e["kind"] == "reasoning/thought" && e["from"] == "assistant")
        .filter_map(|e| e["payload"]["message"].as_str())
        .collect();
    if server != "openai" {
        assert!(
            thoughts.iter().any(|t| t.contains(THINK)),
            "{server}: {thoughts:?}"
        );
    }
    for e in seen.iter().filter(|e| e["kind"] == "chat") {
        let text = e["payload"]["text"].as_str().unwrap_or("");
        assert!(!text.contains("<think>") && !text.contains(THINK), "{text}");
    }

    let reqs: Vec<Value> = model.requests().into_iter().map(|r| r.body).collect();
    let names: Vec<&str> = reqs[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(
        names.contains(&"weather-service__get_weather")
            && names.contains(&"weather-service__save_note"),
        "{names:?}"
    );
    weather.close().await;
    human.close().await;
    drop(gw);
    reqs
}

fn messages(req: &Value) -> &Vec<Value> {
    req["messages"].as_array().unwrap()
}

/// The native form: each result a `tool` message answering its call's id.
fn results_answer_their_calls(reqs: &[Value]) {
    let last = messages(&reqs[2]);
    let calls: Vec<String> = last
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect();
    let results: Vec<&Value> = last.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["tool_call_id"], calls[0]);
    assert_eq!(results[1]["tool_call_id"], calls[1]);
    assert_ne!(calls[0], calls[1]);
    assert_eq!(results[0]["content"], "Tokyo: 22°C, partly cloudy");
    assert_eq!(results[1]["content"], "saved");
}

fn streamed(reqs: &[Value], expected: [bool; 3]) {
    let got: Vec<bool> = reqs.iter().map(|r| r["stream"] == true).collect();
    assert_eq!(got, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai() {
    let reqs = whole_task("openai", false, ServerOptions::default()).await;
    streamed(&reqs, [false; 3]);
    results_answer_their_calls(&reqs);
    assert_eq!(
        messages(&reqs[2])[2]["tool_calls"][0]["id"],
        "call_Qm3xV8bN2kLp9rT5yW1zA4cD"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_streaming() {
    let reqs = whole_task("openai", true, ServerOptions::default()).await;
    streamed(&reqs, [true; 3]);
    results_answer_their_calls(&reqs);
    // Arguments assembled from their fragments.
    assert_eq!(
        messages(&reqs[1])[2]["tool_calls"][0]["function"]["arguments"],
        r#"{"location":"Tokyo"}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama() {
    // Arguments as objects, a call without an id, a `reasoning` field, no usage.
    let reqs = whole_task("ollama", false, ServerOptions::default()).await;
    results_answer_their_calls(&reqs);
    assert_eq!(
        messages(&reqs[1])[2]["tool_calls"][0]["function"]["arguments"],
        r#"{"location":"Tokyo"}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_streaming() {
    let reqs = whole_task("ollama", true, ServerOptions::default()).await;
    streamed(&reqs, [true; 3]);
    results_answer_their_calls(&reqs);
}

/// Tool calls in the text (`<tool_call>`), answered as `<tool_response>`; `<think>` text.
fn hermes_round_trip(reqs: &[Value]) {
    let m = messages(&reqs[1]);
    let assistant = m.iter().find(|m| m["role"] == "assistant").unwrap();
    assert!(
        assistant["content"]
            .as_str()
            .unwrap()
            .contains("<tool_call>")
    );
    assert!(assistant.get("tool_calls").is_none());
    assert!(m.iter().all(|m| m["role"] != "tool"));
    let result = m.last().unwrap();
    assert_eq!(result["role"], "user");
    let text = result["content"].as_str().unwrap();
    assert!(
        text.starts_with("<tool_response>")
            && text.contains("weather-service__get_weather")
            && text.contains("Tokyo: 22°C, partly cloudy"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpp() {
    let reqs = whole_task("llamacpp", false, ServerOptions::default()).await;
    hermes_round_trip(&reqs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpp_streaming() {
    let reqs = whole_task("llamacpp", true, ServerOptions::default()).await;
    streamed(&reqs, [true; 3]);
    hermes_round_trip(&reqs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpp_refusing_to_stream_gets_plain_requests() {
    // llama.cpp's server before tool streaming: 400 for a streamed request with tools.
    let refusal = json!({"error": {"code": 400, "message": "Cannot use tools with stream",
        "type": "invalid_request_error"}})
    .to_string();
    let reqs = whole_task(
        "llamacpp",
        true,
        ServerOptions {
            refuse_stream: Some(refusal),
        },
    )
    .await;
    // The refused request, then the same without streaming, and no more streaming.
    streamed(&reqs[1..], [false; 3]);
    assert_eq!(reqs.len(), 4);
    assert_eq!(reqs[0]["stream"], true);
    assert_eq!(reqs[0]["messages"], reqs[1]["messages"]);
    hermes_round_trip(&reqs[1..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm() {
    let reqs = whole_task("vllm", false, ServerOptions::default()).await;
    results_answer_their_calls(&reqs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_streaming() {
    let reqs = whole_task("vllm", true, ServerOptions::default()).await;
    streamed(&reqs, [true; 3]);
    results_answer_their_calls(&reqs);
    assert_eq!(
        messages(&reqs[2])[2]["tool_calls"][0]["id"],
        "chatcmpl-tool-3f1c2a9b8e7d4c6a"
    );
}
