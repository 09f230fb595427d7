//! The MCP bridge over Streamable HTTP end to end: a gateway on loopback, a bridge to the
//! real `@modelcontextprotocol/server-everything` in its `streamableHttp` mode
//! (tests/mcp-servers), and a participant calling its tools through the space; then servers
//! that are not there, answer HTML, or die in the middle of a stream; and the server's
//! questions (elicitation) put to the participant whose call caused them; and a server over
//! the official TypeScript SDK (`@modelcontextprotocol/server` 2.x) that speaks only
//! 2026-07-28 and refuses `initialize`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mew_core::bridge::{BridgeConfig, Exit};
use mew_core::gateway::SpaceConfig;
use mew_core::mcp::{McpConfig, RestartBackoff};
use mew_core::participant::{Event, ParticipantConfig};
use mew_driver_common::client::mcp_http::{HttpEndpoint, HttpLimits};
use mew_tests::scratch::Scratch;
use mew_tokio::{GatewayServer, ParticipantRuntime, ServerOptions, ShutdownHandle};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const SPACE: &str = "bridge-http-e2e";
const WAIT: Duration = Duration::from_secs(30);

fn space_yaml() -> String {
    let mut y = format!(
        "space: {{id: {SPACE}}}\nparticipants:\n  human: {{tokens: [human-token], capabilities: [{{kind: \"*\"}}]}}\n"
    );
    for id in [
        "every",
        "gone",
        "html",
        "redirect",
        "tokenhtml",
        "badstate",
        "hostile",
    ] {
        y.push_str(&format!(
            "  {id}:\n    type: mcp-bridge\n    tokens: [{id}-token]\n    capabilities: [{{kind: mcp/response}}, {{kind: participant/status}}]\n    mcp_server: {{url: \"http://127.0.0.1:1/mcp\"}}\n"
        ));
    }
    // A bridge that may put its server's questions to the space.
    y.push_str(
        "  asks:\n    type: mcp-bridge\n    tokens: [asks-token]\n    capabilities: [{kind: mcp/response}, {kind: mcp/request}, {kind: participant/status}]\n    mcp_server: {url: \"http://127.0.0.1:1/mcp\"}\n",
    );
    y
}

struct Gateway {
    addr: std::net::SocketAddr,
    shutdown: ShutdownHandle,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    /// Its logs and the OAuth bridges' tokens; removed once [`Gateway::stop`] has awaited
    /// the server.
    dir: Scratch,
}

impl Gateway {
    async fn start() -> Gateway {
        let config = SpaceConfig::from_yaml(&space_yaml()).unwrap();
        let dir = Scratch::new("bridge-http", "gw");
        let opts = ServerOptions {
            log_dir: dir.join(".mew/logs"),
            seed: Some(12),
            ..ServerOptions::default()
        };
        let server = GatewayServer::bind_with("127.0.0.1:0".parse().unwrap(), config, opts)
            .await
            .unwrap();
        let addr = server.local_addr();
        let shutdown = server.shutdown_handle();
        let task = tokio::spawn(server.serve());
        Gateway {
            addr,
            shutdown,
            task,
            dir,
        }
    }

    fn participant(&self, id: &str) -> ParticipantConfig {
        ParticipantConfig {
            gateway_url: format!("ws://{}/ws?space={SPACE}", self.addr),
            space: SPACE.into(),
            token: format!("{id}-token"),
            participant_id: Some(id.into()),
            ..ParticipantConfig::default()
        }
    }

    /// A bridge's configuration over HTTP as `id`: `init` to start, `call` per call, the
    /// server restarted (after 200 ms) only when `restart`.
    fn http_config(&self, id: &str, init: Duration, call: Duration, restart: bool) -> BridgeConfig {
        BridgeConfig {
            participant: self.participant(id),
            mcp: McpConfig {
                init_timeout: init,
                restart: RestartBackoff {
                    enabled: restart,
                    initial_delay: Duration::from_millis(200),
                    ..RestartBackoff::default()
                },
                ..McpConfig::http()
            },
            call_timeout: call,
            ..BridgeConfig::default()
        }
    }

    fn bridge(&self, id: &str, url: String, restart: bool) -> mew_tokio::BridgeHandle {
        let config = self.http_config(
            id,
            Duration::from_secs(10),
            Duration::from_secs(20),
            restart,
        );
        let endpoint = HttpEndpoint {
            oauth: None,
            url,
            headers: vec![("X-Mew-Test".into(), "1".into())],
        };
        let limits = HttpLimits {
            idle: Duration::from_secs(20),
            ..HttpLimits::default()
        };
        mew_tokio::spawn_bridge(
            config,
            mew_driver_common::client::bridge::ServerTarget::Http(endpoint, limits),
            Some(u64::from(id.len() as u32) * 7919),
        )
    }

    async fn human(&self) -> ParticipantRuntime {
        let (rt, _events, _) = ParticipantRuntime::connect(self.participant("human"), Some(5))
            .await
            .expect("human joins");
        rt
    }

    async fn human_with_events(&self) -> (ParticipantRuntime, mpsc::Receiver<Event>) {
        let (rt, events, _) = ParticipantRuntime::connect(self.participant("human"), Some(5))
            .await
            .expect("human joins");
        (rt, events)
    }

    async fn stop(self) {
        self.shutdown.shutdown();
        let _ = self.task.await;
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `server-everything streamableHttp` on a free port, once it listens.
struct Everything {
    child: Child,
    url: String,
}

impl Everything {
    fn start() -> Everything {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        assert!(
            script.is_file(),
            "MCP test servers are not installed: run `npm ci` in tests/mcp-servers"
        );
        let port = free_port();
        let child = Command::new("node")
            .arg(&script)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let end = Instant::now() + WAIT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < end, "server-everything never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
        Everything {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for Everything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

use super::e2e_bridge::{next_envelope, request, sees};

/// Tools listed and called through the space, the server over Streamable HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_streamable_http_lists_and_calls_tools() {
    let server = Everything::start();
    let gw = Gateway::start().await;
    let bridge = gw.bridge("every", server.url.clone(), true);
    let human = gw.human().await;
    sees(&human, "every").await;

    let tools = request(&human, "every", "tools/list", json!({}))
        .await
        .unwrap();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"get-sum"),
        "{names:?}"
    );

    let echo = request(
        &human,
        "every",
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "over http"}}),
    )
    .await
    .unwrap();
    assert_eq!(echo["content"][0]["text"], "Echo: over http");
    let sum = request(
        &human,
        "every",
        "tools/call",
        json!({"name": "get-sum", "arguments": {"a": 2, "b": 40}}),
    )
    .await
    .unwrap();
    assert_eq!(sum["content"][0]["text"], "The sum of 2 and 40 is 42.");
    // A call answered over an event stream with progress on the way.
    let long = request(
        &human,
        "every",
        "tools/call",
        json!({"name": "trigger-long-running-operation", "arguments": {"duration": 1, "steps": 2}}),
    )
    .await
    .unwrap();
    assert!(
        long["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("completed"),
        "{long}"
    );

    bridge.shutdown();
    assert_eq!(bridge.join().await, Exit::Shutdown);
    gw.stop().await;
}

/// Nothing listens at the URL: one clear reason, and the space carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_where_nothing_listens_fails_clearly() {
    let gw = Gateway::start().await;
    let port = free_port();
    let bridge = gw.bridge("gone", format!("http://127.0.0.1:{port}/mcp"), false);
    let exit = tokio::time::timeout(WAIT, bridge.join()).await.unwrap();
    let Exit::ServerNeverReady(why) = &exit else {
        panic!("{exit:?}")
    };
    assert!(why.contains(&format!("127.0.0.1:{port}")), "{why}");
    assert!(why.to_lowercase().contains("refused"), "{why}");
    // The space is unharmed: a participant still joins.
    let human = gw.human().await;
    drop(human);
    gw.stop().await;
}

/// A server answering every request with an HTML page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_answering_html_fails_clearly() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let _ = c.set_read_timeout(Some(Duration::from_millis(300)));
                let _ = c.read(&mut buf);
                let page = "<html><body>Sign in</body></html>";
                let _ = write!(
                    c,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                    page.len()
                );
                // Read what is left of the request before closing: a socket closed with
                // unread bytes is reset, and the client may then never see the page.
                let _ = c.shutdown(std::net::Shutdown::Write);
                while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    let gw = Gateway::start().await;
    let bridge = gw.bridge("html", format!("http://127.0.0.1:{port}/mcp"), false);
    let exit = tokio::time::timeout(WAIT, bridge.join()).await.unwrap();
    let Exit::ServerNeverReady(why) = &exit else {
        panic!("{exit:?}")
    };
    assert!(why.contains("text/html"), "{why}");
    gw.stop().await;
}

/// The server is killed while it streams the answer to a call: the call fails promptly
/// with a reason, and the bridge stays in the space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_stream_fails_the_call() {
    let mut server = Everything::start();
    let gw = Gateway::start().await;
    let bridge = gw.bridge("every", server.url.clone(), false);
    let human = gw.human().await;
    sees(&human, "every").await;
    // Ready once tools are listed.
    request(&human, "every", "tools/list", json!({}))
        .await
        .unwrap();

    let call = request(
        &human,
        "every",
        "tools/call",
        json!({"name": "trigger-long-running-operation", "arguments": {"duration": 20, "steps": 20}}),
    );
    let kill = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        server.child.kill().unwrap();
        let _ = server.child.wait();
        Instant::now()
    };
    let (got, killed_at) = tokio::join!(call, kill);
    let err = got.expect_err("the call must fail");
    assert!(
        killed_at.elapsed() < Duration::from_secs(10),
        "the failure came late"
    );
    let text = err.to_string();
    assert!(!text.is_empty(), "{text}");
    // The bridge is still a participant of the space.
    sees(&human, "every").await;
    bridge.shutdown();
    let _ = tokio::time::timeout(WAIT, bridge.join()).await.unwrap();
    gw.stop().await;
}

/// The elicitation `elicitation/create` put to the caller: the forwarded call to answer, its
/// params, and the envelope that carried it.
async fn question(
    events: &mut mpsc::Receiver<Event>,
) -> (mew_core::participant::CallId, Value, Value) {
    tokio::time::timeout(WAIT, async {
        let mut forwarded = None;
        let mut envelope = None;
        loop {
            match events.recv().await.expect("event stream open") {
                Event::Forwarded {
                    call_id,
                    from,
                    method,
                    params,
                    ..
                } if from == "asks" && method == "elicitation/create" => {
                    forwarded = Some((call_id, params.unwrap_or(Value::Null)));
                }
                Event::Message(env) if env.from == "asks" && env.kind.as_str() == "mcp/request" => {
                    let v: Value = serde_json::from_str(&env.to_json()).unwrap();
                    if v["payload"]["method"] == "elicitation/create" {
                        envelope = Some(v);
                    }
                }
                _ => {}
            }
            if let (Some((call, params)), Some(env)) = (&forwarded, &envelope) {
                return (*call, params.clone(), env.clone());
            }
        }
    })
    .await
    .expect("the question reached the caller")
}

/// The caller's one pending request: the call the question is about.
async fn pending_request(rt: &ParticipantRuntime) -> String {
    let ids = rt
        .with(|p, _| {
            p.pending_requests()
                .map(|(id, _)| id.as_str().to_owned())
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
    assert_eq!(ids.len(), 1, "{ids:?}");
    ids.into_iter().next().unwrap()
}

fn texts(result: &Value) -> String {
    result["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {result}"))
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// server-everything's `trigger-elicitation-request` called through the space over
/// Streamable HTTP: its question reaches the caller as an `mcp/request`
/// `elicitation/create` correlated to the call, with the server's message and schema; an
/// answer accepted with content is what the tool reports; content that breaks the schema
/// is asked again, and a call declined is reported declined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_elicitation_over_http_is_answered_by_the_caller() {
    let server = Everything::start();
    let gw = Gateway::start().await;
    let bridge = gw.bridge("asks", server.url.clone(), false);
    let (human, mut events) = gw.human_with_events().await;
    sees(&human, "asks").await;
    human
        .with(|p, _| p.forward_method("elicitation/create"))
        .await
        .unwrap();

    // Accepted with content valid for the schema.
    let call = request(
        &human,
        "asks",
        "tools/call",
        json!({"name": "trigger-elicitation-request", "arguments": {}}),
    );
    let answer = async {
        let (call_id, params, env) = question(&mut events).await;
        assert_eq!(env["to"], json!(["human"]), "{env}");
        let about = pending_request(&human).await;
        assert_eq!(env["correlation_id"], json!([about]), "{env}");
        assert_eq!(
            params["message"],
            "Please provide inputs for the following fields:"
        );
        let schema = &params["requestedSchema"];
        assert_eq!(schema["type"], "object", "{schema}");
        assert_eq!(schema["required"], json!(["name"]), "{schema}");
        assert_eq!(schema["properties"]["name"]["type"], "string", "{schema}");
        assert_eq!(schema["properties"]["check"]["type"], "boolean", "{schema}");
        assert_eq!(schema["properties"]["email"]["format"], "email", "{schema}");
        assert_eq!(schema["properties"]["integer"]["maximum"], 100, "{schema}");
        let content = json!({
            "name": "Ada Lovelace",
            "check": true,
            "email": "ada@example.com",
            "integer": 7
        });
        human
            .with(move |p, now| {
                p.complete_call(
                    now,
                    call_id,
                    Ok(json!({"action": "accept", "content": content})),
                )
            })
            .await
            .unwrap()
            .unwrap();
    };
    let (result, ()) = tokio::join!(call, answer);
    let text = texts(&result.expect("the accepted call succeeds"));
    assert!(
        text.contains("User provided the requested information"),
        "{text}"
    );
    for line in [
        "- Name: Ada Lovelace",
        "- Agreed to terms: true",
        "- Email: ada@example.com",
        "- Favorite Integer: 7",
    ] {
        assert!(text.contains(line), "{line} missing from {text}");
    }

    // Content that breaks the schema is not sent on: the question comes again with the
    // reason; then it is declined.
    let call = request(
        &human,
        "asks",
        "tools/call",
        json!({"name": "trigger-elicitation-request", "arguments": {}}),
    );
    let answer = async {
        let (call_id, _, env) = question(&mut events).await;
        let about = pending_request(&human).await;
        assert_eq!(env["correlation_id"], json!([about]), "{env}");
        human
            .with(move |p, now| {
                p.complete_call(
                    now,
                    call_id,
                    Ok(json!({"action": "accept", "content": {"name": "Ada", "integer": 500}})),
                )
            })
            .await
            .unwrap()
            .unwrap();
        let (call_id, params, env) = question(&mut events).await;
        assert_eq!(env["correlation_id"], json!([about]), "{env}");
        let why = params["_meta"]["mew/rejected"].as_str().unwrap_or_default();
        assert!(why.contains("integer"), "{params}");
        human
            .with(move |p, now| p.complete_call(now, call_id, Ok(json!({"action": "decline"}))))
            .await
            .unwrap()
            .unwrap();
    };
    let (result, ()) = tokio::join!(call, answer);
    let text = texts(&result.expect("the declined call succeeds"));
    assert!(
        text.contains("User declined to provide the requested information"),
        "{text}"
    );
    assert!(!text.contains("Ada") && !text.contains("500"), "{text}");

    bridge.shutdown();
    assert_eq!(bridge.join().await, Exit::Shutdown);
    gw.stop().await;
}

// ---- OAuth: an authorization server that misbehaves ----

/// How the protected server's authorization misbehaves.
#[derive(Clone, Copy, PartialEq)]
enum OAuthFault {
    /// Its resource metadata redirects to another host.
    RedirectElsewhere,
    /// Its token endpoint answers with an HTML page.
    HtmlToken,
}

/// A protected MCP endpoint and its authorization server on one loopback port: every
/// `POST /mcp` is refused (401) pointing at the resource metadata; the metadata documents
/// are real; `fault` is where it goes wrong.
fn oauth_server(fault: OAuthFault) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { return };
            let base = base.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                let _ = c.set_read_timeout(Some(Duration::from_millis(300)));
                let n = c.read(&mut buf).unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let line = head.lines().next().unwrap_or("").to_owned();
                let json = |v: Value| ("200 OK", "application/json", v.to_string(), String::new());
                let (status, ctype, body, extra) = if line.starts_with("POST /mcp") {
                    (
                        "401 Unauthorized",
                        "application/json",
                        "{}".to_owned(),
                        format!("WWW-Authenticate: Bearer resource_metadata=\"{base}/prm\"\r\n"),
                    )
                } else if line.starts_with("GET /prm") {
                    if fault == OAuthFault::RedirectElsewhere {
                        (
                            "302 Found",
                            "text/plain",
                            String::new(),
                            "Location: http://elsewhere.invalid/prm\r\n".to_owned(),
                        )
                    } else {
                        json(
                            json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]}),
                        )
                    }
                } else if line.starts_with("GET /.well-known/oauth-authorization-server") {
                    json(json!({
                        "issuer": base,
                        "authorization_endpoint": format!("{base}/authorize"),
                        "token_endpoint": format!("{base}/token"),
                        "code_challenge_methods_supported": ["S256"],
                        "token_endpoint_auth_methods_supported": ["none"],
                        "client_id_metadata_document_supported": true
                    }))
                } else if line.starts_with("POST /token") {
                    (
                        "200 OK",
                        "text/html",
                        "<!doctype html><html><body>Sign in</body></html>".to_owned(),
                        String::new(),
                    )
                } else {
                    (
                        "404 Not Found",
                        "text/plain",
                        "no".to_owned(),
                        String::new(),
                    )
                };
                let _ = write!(
                    c,
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = c.shutdown(std::net::Shutdown::Write);
                while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    port
}

impl Gateway {
    /// A bridge that signs in with OAuth, its tokens kept in a folder of its own.
    fn oauth_bridge(&self, id: &str, url: String) -> mew_tokio::BridgeHandle {
        use mew_core::mcp::oauth::OAuthConfig;
        use mew_driver_common::client::oauth::{self as oauth_io, OAuthSetup};
        let config = self.http_config(id, Duration::from_secs(60), Duration::from_secs(20), false);
        let base = format!("http://{}", self.addr);
        let store = self.dir.join("oauth").join(format!("{id}.json"));
        let endpoint = HttpEndpoint {
            url: url.clone(),
            headers: Vec::new(),
            oauth: Some(Box::new(OAuthSetup {
                config: OAuthConfig {
                    server_url: url,
                    redirect_uri: oauth_io::callback_url(&base),
                    state_prefix: format!("{id}."),
                    client_metadata_url: Some(oauth_io::client_document_url(&base, id)),
                    ..OAuthConfig::default()
                },
                store,
            })),
        };
        mew_tokio::spawn_bridge(
            config,
            mew_driver_common::client::bridge::ServerTarget::Http(endpoint, HttpLimits::default()),
            Some(17),
        )
    }

    /// `GET path` on the gateway: the status and the body.
    fn get(&self, path: &str) -> (u16, String) {
        let mut s = std::net::TcpStream::connect(self.addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
        (status, body)
    }
}

/// The next `participant/status` of `from` whose `mcp_server` satisfies `f`.
async fn status_where(
    events: &mut mpsc::Receiver<Event>,
    from: &str,
    f: impl Fn(&Value) -> bool,
) -> Value {
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let ev = tokio::time::timeout_at(end, events.recv())
            .await
            .expect("no such status in time")
            .expect("events open");
        if let Event::Message(env) = ev
            && env.kind == mew_core::envelope::Kind::ParticipantStatus
            && env.from == from
            && let Some(m) = env.payload.as_ref().and_then(|p| p.get("mcp_server"))
            && f(m)
        {
            return m.clone();
        }
    }
}

/// The protected resource metadata redirects to another host: not followed, one clear
/// reason, and the space carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_redirect_to_another_host_is_refused() {
    let port = oauth_server(OAuthFault::RedirectElsewhere);
    let gw = Gateway::start().await;
    let bridge = gw.oauth_bridge("redirect", format!("http://127.0.0.1:{port}/mcp"));
    let exit = tokio::time::timeout(WAIT, bridge.join()).await.unwrap();
    let (Exit::ServerGaveUp(why) | Exit::ServerNeverReady(why)) = &exit else {
        panic!("{exit:?}")
    };
    assert!(
        why.contains(&format!(
            "http://127.0.0.1:{port}/prm redirected to another host (elsewhere.invalid); not followed"
        )),
        "{why}"
    );
    let human = gw.human().await;
    drop(human);
    gw.stop().await;
}

/// The person is asked to sign in (the link in the status); a call meanwhile is told so
/// at once; then the token endpoint answers HTML: one line, in the status too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_token_endpoint_answering_html_fails_clearly() {
    let port = oauth_server(OAuthFault::HtmlToken);
    let gw = Gateway::start().await;
    let (human, mut events) = gw.human_with_events().await;
    let bridge = gw.oauth_bridge("tokenhtml", format!("http://127.0.0.1:{port}/mcp"));
    let m = status_where(&mut events, "tokenhtml", |m| m.get("sign_in").is_some()).await;
    let url = m["sign_in"]["url"].as_str().unwrap().to_owned();
    assert_eq!(m["sign_in"]["host"], "127.0.0.1");
    assert!(
        url.starts_with(&format!("http://127.0.0.1:{port}/authorize?")),
        "{url}"
    );
    let redirect =
        format!("redirect_uri=http%3A%2F%2F{}%2Foauth%2Fcallback", gw.addr).replace(':', "%3A");
    assert!(url.contains(&redirect), "{url}");
    // The client ID metadata document the gateway serves names that same callback.
    let (status, doc) = gw.get("/oauth/client/tokenhtml");
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(
        doc["client_id"],
        format!("http://{}/oauth/client/tokenhtml", gw.addr)
    );
    assert_eq!(
        doc["redirect_uris"][0],
        format!("http://{}/oauth/callback", gw.addr)
    );

    let asked = Instant::now();
    let err = request(&human, "tokenhtml", "tools/list", json!({}))
        .await
        .unwrap_err()
        .to_string();
    assert!(asked.elapsed() < Duration::from_secs(5));
    assert!(
        err.contains("sign-in needed: open http://127.0.0.1:"),
        "{err}"
    );

    // The person comes back from the authorization server.
    let state = url
        .split("state=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    let (status, page) = gw.get(&format!(
        "/oauth/callback?code=c0de&state={state}&iss=http%3A%2F%2F127.0.0.1%3A{port}"
    ));
    assert_eq!(status, 200, "{page}");
    let line = "the token endpoint answered 200 with text/html instead of JSON";
    let m = status_where(&mut events, "tokenhtml", |m| {
        m["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("text/html"))
    })
    .await;
    assert_eq!(m["last_error"], line);
    let exit = tokio::time::timeout(WAIT, bridge.join()).await.unwrap();
    assert!(exit.to_string().contains(line), "{exit}");
    drop(human);
    gw.stop().await;
}

/// A sign-in answer whose `state` is not the bridge's: refused with one line, nothing
/// exchanged, the sign-in still open, and the bridge still in the space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_state_that_does_not_match_is_refused() {
    let port = oauth_server(OAuthFault::HtmlToken);
    let gw = Gateway::start().await;
    let (human, mut events) = gw.human_with_events().await;
    let bridge = gw.oauth_bridge("badstate", format!("http://127.0.0.1:{port}/mcp"));
    status_where(&mut events, "badstate", |m| m.get("sign_in").is_some()).await;
    let (status, _) = gw.get("/oauth/callback?code=c0de&state=badstate.forged");
    assert_eq!(status, 200);
    let m = status_where(&mut events, "badstate", |m| m.get("last_error").is_some()).await;
    assert_eq!(
        m["last_error"],
        "the sign-in answer's state does not match the sign-in in progress; nothing was exchanged"
    );
    assert!(m.get("sign_in").is_some(), "{m}");
    let err = request(&human, "badstate", "tools/list", json!({}))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("sign-in needed"), "{err}");
    // A state naming nobody in the space is answered by the gateway alone.
    let (status, _) = gw.get("/oauth/callback?code=x&state=nobody.abc");
    assert_eq!(status, 404);
    assert!(bridge.snapshot().calls_in_flight == 0);
    bridge.shutdown();
    assert_eq!(
        tokio::time::timeout(WAIT, bridge.join()).await.unwrap(),
        Exit::Shutdown
    );
    drop(human);
    gw.stop().await;
}

/// `tests/mcp-servers/modern-only.mjs`: a server over `@modelcontextprotocol/server` 2.x in
/// its strict mode, speaking only 2026-07-28; every request it receives (and every refusal)
/// is a JSON line in `log`.
fn modern_only(log: &Path) -> mew_tests::process::HttpMcpServer {
    let _ = std::fs::remove_file(log);
    mew_tests::process::HttpMcpServer::start("modern-only.mjs", &[log.to_str().unwrap()])
}

fn modern_log(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A 2025 client's `initialize`, posted as such a client would: the answer's body.
fn post_initialize(url: &str) -> Value {
    let rest = url.strip_prefix("http://").unwrap();
    let (addr, path) = rest.split_once('/').unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "a-2025-client", "version": "1.0.0"}}})
    .to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        s,
        "POST /{path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (_, body) = out.split_once("\r\n\r\n").expect("an HTTP answer");
    // The body may come chunked: the JSON object is between the first `{` and the last `}`.
    let json = &body[body.find('{').unwrap()..=body.rfind('}').unwrap()];
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// A server that speaks only 2026-07-28, brought into the space: it refuses a 2025
/// `initialize` with the unsupported-protocol-version error naming 2026-07-28 only; the
/// bridge finds its revision by `server/discover` (its first request, and no `initialize`
/// ever), shows 2026-07-28 in its status, and a participant lists and calls its tool through
/// the space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_speaking_only_2026_07_28_is_bridged_by_discovery() {
    let dir = Scratch::new("bridge-http", "modern-only");
    let log = dir.join("requests.log");
    let server = modern_only(&log);

    // The 2025 path cannot work against it.
    let refused = post_initialize(&server.url);
    assert_eq!(refused["error"]["code"], -32022, "{refused}");
    assert_eq!(
        refused["error"]["data"]["supported"],
        json!(["2026-07-28"]),
        "{refused}"
    );
    assert_eq!(refused["error"]["data"]["requested"], "2025-11-25");
    let seen = modern_log(&log);
    assert_eq!(seen[0]["method"], "initialize", "{seen:?}");
    assert!(seen.iter().any(|l| l["refused"] == -32022), "{seen:?}");
    let _ = std::fs::remove_file(&log);

    let gw = Gateway::start().await;
    let bridge = gw.bridge("every", server.url.clone(), true);
    let (human, mut events) = gw.human_with_events().await;
    sees(&human, "every").await;

    let tools = request(&human, "every", "tools/list", json!({}))
        .await
        .unwrap();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["echo", "paint"], "{tools}");
    let echo = request(
        &human,
        "every",
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "only the new revision"}}),
    )
    .await
    .unwrap();
    assert_eq!(texts(&echo), "echo: only the new revision", "{echo}");

    human
        .send_json(r#"{"kind": "participant/request-status", "to": ["every"], "payload": {}}"#)
        .await
        .unwrap();
    let status = next_envelope(&mut events, "every", "participant/status").await;
    let member = &status["payload"]["mcp_server"];
    assert_eq!(member["state"], "ready", "{status}");
    assert_eq!(member["protocol_version"], "2026-07-28", "{status}");
    assert_eq!(member["transport"], "http", "{status}");
    assert_eq!(member["server_info"]["name"], "modern-only", "{status}");
    assert_eq!(member["tools"], 2, "{status}");

    // What the bridge sent: discovery first, never an initialize, nothing refused.
    let seen = modern_log(&log);
    let methods: Vec<&str> = seen.iter().filter_map(|l| l["method"].as_str()).collect();
    assert_eq!(methods.first(), Some(&"server/discover"), "{seen:?}");
    assert!(!methods.contains(&"initialize"), "{seen:?}");
    assert!(methods.contains(&"tools/call"), "{seen:?}");
    assert!(!seen.iter().any(|l| l.get("refused").is_some()), "{seen:?}");

    bridge.shutdown();
    assert_eq!(bridge.join().await, Exit::Shutdown);
    gw.stop().await;
}

/// The 2026-07-28 multi round-trip: the tool answers `input_required` with an elicitation;
/// the question reaches the caller correlated to its call, the caller's answer goes back in
/// the retried request, and the result is the one the answer chose; a declined question is
/// reported as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_required_round_from_a_2026_only_server_is_answered_by_the_caller() {
    let dir = Scratch::new("bridge-http", "modern-asks");
    let log = dir.join("requests.log");
    let server = modern_only(&log);
    let gw = Gateway::start().await;
    let bridge = gw.bridge("asks", server.url.clone(), false);
    let (human, mut events) = gw.human_with_events().await;
    sees(&human, "asks").await;
    human
        .with(|p, _| p.forward_method("elicitation/create"))
        .await
        .unwrap();

    for (answer, expect) in [
        (
            json!({"action": "accept", "content": {"colour": "green"}}),
            "painted green",
        ),
        (json!({"action": "decline"}), "not painted (decline)"),
    ] {
        let call = request(
            &human,
            "asks",
            "tools/call",
            json!({"name": "paint", "arguments": {}}),
        );
        let answering = async {
            let (call_id, params, env) = question(&mut events).await;
            assert_eq!(env["to"], json!(["human"]), "{env}");
            let about = pending_request(&human).await;
            assert_eq!(env["correlation_id"], json!([about]), "{env}");
            assert_eq!(params["message"], "Which colour?", "{params}");
            let schema = &params["requestedSchema"];
            assert_eq!(
                schema["properties"]["colour"]["enum"],
                json!(["red", "green", "blue"]),
                "{schema}"
            );
            human
                .with(move |p, now| p.complete_call(now, call_id, Ok(answer)))
                .await
                .unwrap()
                .unwrap();
        };
        let (result, ()) = tokio::join!(call, answering);
        let result = result.expect("the call succeeds");
        assert_eq!(texts(&result), expect, "{result}");
    }

    // Each call went to the server twice: first without, then with the caller's answer.
    let seen = modern_log(&log);
    let calls = seen.iter().filter(|l| l["method"] == "tools/call").count();
    assert_eq!(calls, 4, "{seen:?}");
    assert!(
        !seen.iter().any(|l| l["method"] == "initialize"),
        "{seen:?}"
    );

    bridge.shutdown();
    assert_eq!(bridge.join().await, Exit::Shutdown);
    gw.stop().await;
}

// ---- A server that misbehaves once it is up ----

/// One HTTP request of the hostile server: method, and the JSON-RPC body if any.
fn read_request(c: &mut std::net::TcpStream) -> Option<(String, Value)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if c.read(&mut byte).ok()? == 0 || head.len() > 65536 {
            return None;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let method = head.split(' ').next()?.to_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).ok()?;
    Some((method, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

fn answer(c: &mut std::net::TcpStream, status: &str, kind: &str, body: &[u8]) -> bool {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).is_ok() && c.write_all(body).is_ok()
}

/// A server that starts properly, then answers `garbage` with invalid JSON, `huge` with a
/// body past the bridge's bound, and `endless` with an event stream that only ever sends
/// keep-alive comments; `ok` answers properly.
fn hostile_server() -> u16 {
    const TOOLS: [&str; 4] = ["ok", "garbage", "huge", "endless"];
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { return };
            std::thread::spawn(move || {
                while let Some((method, rpc)) = read_request(&mut c) {
                    let id = rpc["id"].clone();
                    let ok = |result: Value| {
                        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
                            .unwrap()
                    };
                    let json = "application/json";
                    let sent = match (method.as_str(), rpc["method"].as_str().unwrap_or("")) {
                        ("POST", "initialize") => answer(
                            &mut c,
                            "200 OK",
                            json,
                            &ok(json!({
                            "protocolVersion": "2025-11-25",
                            "capabilities": {"tools": {}},
                            "serverInfo": {"name": "hostile", "version": "1"}})),
                        ),
                        ("POST", "tools/list") => answer(
                            &mut c,
                            "200 OK",
                            json,
                            &ok(json!({"tools": TOOLS.map(|n| json!({
                                "name": n, "inputSchema": {"type": "object"}}))})),
                        ),
                        ("POST", "tools/call") => match rpc["params"]["name"].as_str() {
                            Some("garbage") => {
                                answer(&mut c, "200 OK", json, b"{\"jsonrpc\": \"2.0\", \"id\": ")
                            }
                            Some("huge") => {
                                let text = "x".repeat(17 * 1024 * 1024);
                                answer(
                                    &mut c,
                                    "200 OK",
                                    json,
                                    &ok(json!({
                                    "content": [{"type": "text", "text": text}]})),
                                )
                            }
                            Some("endless") => {
                                let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n";
                                if c.write_all(head.as_bytes()).is_err() {
                                    return;
                                }
                                while c.write_all(b": still here\n\n").is_ok() {
                                    std::thread::sleep(Duration::from_millis(100));
                                }
                                return;
                            }
                            _ => answer(
                                &mut c,
                                "200 OK",
                                json,
                                &ok(json!({
                                "content": [{"type": "text", "text": "fine"}]})),
                            ),
                        },
                        ("POST", m) if m.starts_with("notifications/") || rpc["id"].is_null() => {
                            answer(&mut c, "202 Accepted", json, b"")
                        }
                        ("POST", _) => {
                            answer(&mut c, "400 Bad Request", "text/plain", b"unsupported")
                        }
                        _ => answer(&mut c, "405 Method Not Allowed", "text/plain", b""),
                    };
                    if !sent {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// Invalid JSON, an oversized answer and a stream that never ends: each call gets an error
/// with its reason within its bound, and the bridge goes on serving the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_sending_garbage_huge_or_endless_answers_fails_only_that_call() {
    let port = hostile_server();
    let gw = Gateway::start().await;
    let config = gw.http_config(
        "hostile",
        Duration::from_secs(10),
        Duration::from_secs(3),
        false,
    );
    let endpoint = HttpEndpoint {
        oauth: None,
        url: format!("http://127.0.0.1:{port}/mcp"),
        headers: Vec::new(),
    };
    let bridge = mew_tokio::spawn_bridge(
        config,
        mew_driver_common::client::bridge::ServerTarget::Http(endpoint, HttpLimits::default()),
        Some(7),
    );
    let human = gw.human().await;
    sees(&human, "hostile").await;
    let call = |name: &'static str| {
        request(
            &human,
            "hostile",
            "tools/call",
            json!({"name": name, "arguments": {}}),
        )
    };
    let fine = |v: Value| {
        assert_eq!(v["content"][0]["text"], "fine", "{v}");
    };
    fine(call("ok").await.expect("a proper call"));
    for (name, reason) in [
        ("garbage", "not valid JSON"),
        ("huge", "larger than 16777216 bytes"),
        ("endless", "timed out"),
    ] {
        let started = Instant::now();
        let err = call(name).await.expect_err(name).to_string();
        eprintln!("{name}: {err}");
        assert!(err.contains(reason), "{name}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{name} took too long"
        );
        // The bridge is unharmed: the next call goes through.
        fine(call("ok").await.expect("a proper call after a bad one"));
    }
    bridge.shutdown();
    let _ = tokio::time::timeout(WAIT, bridge.join()).await.unwrap();
    drop(human);
    gw.stop().await;
}
