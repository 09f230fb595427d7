//! The space's web page end to end: a real `mew gateway` with a filesystem bridge (the npm
//! server of tests/mcp-servers), a proposing agent on a WebSocket, and Debian's Chromium
//! driven through chromedriver (WebDriver). Controls are found by their accessible role and
//! name, as a screen reader finds them (`computedrole` / `computedlabel`).
//!
//! `MEW_WEB_SCREENSHOTS=1` also writes the screenshots of docs/img/.
#![cfg(unix)]

use std::net::TcpStream;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use mew_tests::process::MewGateway;
use mew_tests::scratch::Scratch;
use serde_json::{Value, json};

const MEW: &str = env!("CARGO_BIN_EXE_mew");
const WAIT: Duration = Duration::from_secs(20);
const SPACE: &str = "web";
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

fn filesystem_script() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../../tests/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js",
    );
    assert!(
        script.is_file(),
        "MCP test servers are not installed ({} missing): run tests/run.sh",
        script.display()
    );
    script
        .canonicalize()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// A gateway for space `web`: human (everything; a person, at several screens), agent (may propose and withdraw), and `fs`
/// (a filesystem bridge over `root`) when `with_fs`.
fn gateway(dir: &Path, root: Option<&Path>) -> MewGateway {
    let mut yaml = format!(
        "space: {{id: {SPACE}}}\nparticipants:\n  human: {{tokens: [human-token], person: true, capabilities: [{{kind: \"*\"}}]}}\n  reviewer: {{tokens: [reviewer-token], capabilities: [{{kind: \"*\"}}]}}\n  agent:\n    tokens: [agent-token]\n    capabilities: [{{kind: mcp/proposal}}, {{kind: mcp/withdraw}}, {{kind: chat}}, {{kind: capability/grant-ack}}, {{kind: \"reasoning/*\"}}]\n"
    );
    if let Some(root) = root {
        yaml.push_str(&format!(
            "  fs:\n    type: mcp-bridge\n    auto_start: true\n    tokens: [fs-token]\n    capabilities: [{{kind: mcp/response}}, {{kind: participant/status}}]\n    mcp_server: {{command: node, args: [{}, {}]}}\n    bridge_config: {{init_timeout: 20000}}\n",
            filesystem_script(),
            root.display()
        ));
    }
    let config = dir.join("space.yaml");
    std::fs::write(&config, yaml).unwrap();
    let mut cmd = Command::new(MEW);
    cmd.args(["gateway", "--config"])
        .arg(&config)
        .args(["--port", "0", "--log-level", "warn"])
        .current_dir(dir);
    MewGateway::start(cmd)
}

fn http(addr: &str, path: &str) -> ureq::http::Response<ureq::Body> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    agent.get(format!("http://{addr}{path}")).call().unwrap()
}

fn online(addr: &str, id: &str) -> bool {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    agent
        .get(format!("http://{addr}/participants"))
        .header("Authorization", "Bearer human-token")
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v["participants"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .any(|p| p["id"] == id && p["online"] == true)
}

// ---- the browser -------------------------------------------------------------------------

struct Browser {
    driver: Child,
    client: Client,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver's group holds the browser it started: killing chromedriver alone
        // left chromium running after the test.
        let group = nix::unistd::Pid::from_raw(-(self.driver.id() as i32));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn browser(profile: &Path, width: u32, height: u32) -> Browser {
    for bin in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(bin).is_file(),
            "{bin} is missing: tests/run.sh installs Debian's chromium and chromium-driver"
        );
    }
    let port = free_port();
    let driver = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let end = Instant::now() + WAIT;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < end, "chromedriver did not listen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"binary": CHROMIUM, "args": [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", "--hide-scrollbars",
            format!("--user-data-dir={}", profile.display()),
            format!("--window-size={width},{height}"),
        ]}),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a WebDriver session");
    Browser { driver, client }
}

/// `GET /session/{id}/element/{element}/computed{what}`: the accessible role or name.
#[derive(Debug)]
struct Computed {
    element: String,
    what: &'static str,
}

impl WebDriverCompatibleCommand for Computed {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!(
            "session/{}/element/{}/computed{}",
            session.unwrap_or_default(),
            self.element,
            self.what
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::GET, None)
    }
}

async fn computed(c: &Client, e: &Element, what: &'static str) -> String {
    let v = c
        .issue_cmd(Computed {
            element: e.element_id().to_string(),
            what,
        })
        .await
        .unwrap_or(Value::Null);
    v.as_str().unwrap_or_default().to_owned()
}

/// Elements that may have `role`.
fn candidates(role: &str) -> &'static str {
    match role {
        "button" => "button, [role=button]",
        "textbox" => "input:not([type]), input[type=text], input[type=password], textarea",
        "dialog" => "dialog, [role=dialog]",
        "checkbox" => "input[type=checkbox]",
        "combobox" => "select",
        "log" => "[role=log]",
        "group" => "[role=group]",
        "list" => "ul, ol",
        _ => "*",
    }
}

/// The visible element with this accessible role and name, waited for.
async fn by_role(c: &Client, role: &str, name: &str) -> Element {
    let end = Instant::now() + WAIT;
    loop {
        for e in c
            .find_all(Locator::Css(candidates(role)))
            .await
            .unwrap_or_default()
        {
            if !e.is_displayed().await.unwrap_or(false) {
                continue;
            }
            if computed(c, &e, "label").await == name && computed(c, &e, "role").await == role {
                return e;
            }
        }
        assert!(
            Instant::now() < end,
            "no visible {role} named {name:?} in {}",
            c.source().await.unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a visible element with this role and name exists now.
async fn has_role(c: &Client, role: &str, name: &str) -> bool {
    for e in c
        .find_all(Locator::Css(candidates(role)))
        .await
        .unwrap_or_default()
    {
        if e.is_displayed().await.unwrap_or(false)
            && computed(c, &e, "label").await == name
            && computed(c, &e, "role").await == role
        {
            return true;
        }
    }
    false
}

/// Waits until the text of `css` contains `needle`; returns the text.
async fn wait_text(c: &Client, css: &str, needle: &str) -> String {
    let end = Instant::now() + WAIT;
    loop {
        let text = match c.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < end,
            "{css} never showed {needle:?}; it shows {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn dialog_open(c: &Client) -> bool {
    c.execute("return document.getElementById('review').open", vec![])
        .await
        .unwrap()
        == json!(true)
}

async fn wait_dialog(c: &Client, open: bool) {
    let end = Instant::now() + WAIT;
    while dialog_open(c).await != open {
        if Instant::now() > end {
            let log = c.find(Locator::Id("messages")).await.unwrap();
            let status = c.find(Locator::Id("status")).await.unwrap();
            panic!(
                "the review dialog did not {}; status {:?}; the messages: {}",
                if open { "open" } else { "close" },
                status.text().await.unwrap_or_default(),
                log.text().await.unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Keys typed into whatever has the focus.
async fn keys(c: &Client, text: &str) {
    c.active_element()
        .await
        .unwrap()
        .send_keys(text)
        .await
        .unwrap();
}

async fn screenshot(c: &Client, name: &str) {
    if std::env::var_os("MEW_WEB_SCREENSHOTS").is_none() {
        return;
    }
    let png = c.screenshot().await.unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/img");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), png).unwrap();
}

// ---- the agent ---------------------------------------------------------------------------

/// A participant speaking raw envelopes (the one that proposes). Its socket is read all the
/// time on a thread of its own, so it answers the gateway's pings while the test waits on the
/// browser.
struct Agent {
    id: &'static str,
    out: std::sync::mpsc::Sender<String>,
    inbox: std::sync::mpsc::Receiver<Value>,
    seen: Vec<Value>,
    n: u32,
}

impl Agent {
    fn join(addr: &str) -> Agent {
        Agent::join_as(addr, "agent")
    }

    fn join_as(addr: &str, id: &'static str) -> Agent {
        use tungstenite::client::IntoClientRequest;
        let mut req = format!("ws://{addr}/ws?space={SPACE}")
            .into_client_request()
            .unwrap();
        req.headers_mut().insert(
            "Authorization",
            format!("Bearer {id}-token").parse().unwrap(),
        );
        let (mut ws, _) = tungstenite::connect(req).unwrap();
        if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        }
        let (out, outgoing) = std::sync::mpsc::channel::<String>();
        let (deliver, inbox) = std::sync::mpsc::channel::<Value>();
        std::thread::spawn(move || {
            loop {
                while let Ok(text) = outgoing.try_recv() {
                    if ws.send(tungstenite::Message::text(text)).is_err() {
                        return;
                    }
                }
                match ws.read() {
                    Ok(tungstenite::Message::Text(t)) => {
                        let v: Value = serde_json::from_str(t.as_str()).unwrap();
                        if deliver.send(v).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(tungstenite::Error::Io(e))
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => return,
                }
            }
        });
        let mut a = Agent {
            id,
            out,
            inbox,
            seen: Vec::new(),
            n: 0,
        };
        a.wait(|e| e["kind"] == "system/welcome");
        a
    }

    /// Sends an envelope; returns its id.
    fn send(
        &mut self,
        kind: &str,
        to: &[&str],
        correlation: Option<&str>,
        payload: Value,
    ) -> String {
        self.n += 1;
        let id = format!("{}-{}", self.id, self.n);
        let mut env = json!({"protocol": "mew/v0.4", "id": id, "from": self.id, "kind": kind,
                             "to": to, "payload": payload});
        if let Some(c) = correlation {
            env["correlation_id"] = json!([c]);
        }
        self.out.send(env.to_string()).unwrap();
        id
    }

    fn propose(&mut self, tool: &str, args: Value) -> String {
        self.send(
            "mcp/proposal",
            &["fs"],
            None,
            json!({"method": "tools/call", "params": {"name": tool, "arguments": args}}),
        )
    }

    /// The first envelope (seen before or arriving within [`WAIT`]) that `f` accepts.
    fn wait(&mut self, f: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.seen.iter().position(&f) {
            return self.seen.remove(i);
        }
        let end = Instant::now() + WAIT;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.inbox.recv_timeout(left) {
                Ok(v) if f(&v) => return v,
                Ok(v) => self.seen.push(v),
                Err(e) => {
                    let recent: Vec<&Value> = self.seen.iter().rev().take(5).collect();
                    panic!("agent waited in vain ({e}); last seen {recent:?}");
                }
            }
        }
    }
}

fn correlates(e: &Value, id: &str) -> bool {
    e["correlation_id"]
        .as_array()
        .is_some_and(|a| a.iter().any(|c| c == id))
        || e["correlation_id"] == id
}

// ---- tests -------------------------------------------------------------------------------

#[test]
fn the_page_is_served_under_ui_with_its_types_and_policy() {
    let dir = Scratch::new("web", "serve");
    let gw = gateway(&dir, None);
    let index = http(&gw.addr, "/ui/?space=web");
    assert_eq!(index.status(), 200);
    let h = |r: &ureq::http::Response<ureq::Body>, n: &str| {
        r.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(h(&index, "content-type"), "text/html; charset=utf-8");
    let csp = h(&index, "content-security-policy");
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(h(&index, "x-content-type-options"), "nosniff");
    assert_eq!(h(&index, "cache-control"), "no-cache");
    for (path, ty) in [
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/model.js", "text/javascript; charset=utf-8"),
        ("/ui/style.css", "text/css; charset=utf-8"),
        ("/ui/icon.svg", "image/svg+xml"),
    ] {
        let r = http(&gw.addr, path);
        assert_eq!(
            (r.status().as_u16(), h(&r, "content-type")),
            (200, ty.to_owned()),
            "{path}"
        );
        assert!(!h(&r, "etag").is_empty(), "{path}");
    }
    // The page's files exist nowhere but under /ui/, and nothing else is under it.
    for path in [
        "/app.js",
        "/index.html",
        "/ui/../Cargo.toml",
        "/ui/nope.js",
        "/uiapp.js",
    ] {
        assert_eq!(http(&gw.addr, path).status(), 404, "{path}");
    }
    let moved = http(&gw.addr, "/ui?space=web");
    assert_eq!(moved.status(), 308);
    assert_eq!(h(&moved, "location"), "/ui/?space=web");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_the_page_shows_the_login_form_and_nothing_of_the_space() {
    let dir = Scratch::new("web", "login");
    let gw = gateway(&dir, None);
    let b = browser(&dir.join("profile"), 1000, 700).await;
    let c = &b.client;
    c.goto(&format!("http://{}/ui/?space={SPACE}", gw.addr))
        .await
        .unwrap();
    let space = by_role(c, "textbox", "Space").await;
    assert_eq!(space.prop("value").await.unwrap().as_deref(), Some(SPACE));
    by_role(c, "button", "Log in").await;
    let shown = c
        .execute("return document.getElementById('space').hidden", vec![])
        .await
        .unwrap();
    assert_eq!(shown, json!(true), "the space is hidden");
    for css in ["#messages li", "#participants li", "#streams li"] {
        assert!(
            c.find_all(Locator::Css(css)).await.unwrap().is_empty(),
            "{css}"
        );
    }
    assert!(!has_role(c, "log", "Messages").await);
    screenshot(c, "web-login.png").await;

    // A wrong token: refused, and still nothing of the space.
    by_role(c, "textbox", "Participant token")
        .await
        .send_keys("not-a-token")
        .await
        .unwrap();
    by_role(c, "button", "Log in").await.click().await.unwrap();
    wait_text(c, "#login-error", "token").await;
    assert!(
        c.find_all(Locator::Css("#participants li"))
            .await
            .unwrap()
            .is_empty()
    );

    // The right one, typed: in.
    let token = by_role(c, "textbox", "Participant token").await;
    token.clear().await.unwrap();
    token.send_keys("human-token\n").await.unwrap();
    wait_text(c, "#status", "joined as human").await;
    by_role(c, "log", "Messages").await;
    let stored = c
        .execute(
            "return [sessionStorage.getItem('mew.token'), localStorage.length]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(stored, json!(["human-token", 0]), "session storage only");
    by_role(c, "textbox", "Message")
        .await
        .send_keys("before logging out\n")
        .await
        .unwrap();
    wait_text(c, "#messages", "before logging out").await;

    // Log out: the token is forgotten and the space leaves the page; in again, a fresh view
    // that starts with what the gateway kept of the space.
    by_role(c, "button", "Log out").await.click().await.unwrap();
    by_role(c, "button", "Log in").await;
    let stored = c
        .execute("return sessionStorage.getItem('mew.token')", vec![])
        .await
        .unwrap();
    assert_eq!(stored, Value::Null);
    assert!(
        c.find_all(Locator::Css("#messages li"))
            .await
            .unwrap()
            .is_empty()
    );
    by_role(c, "textbox", "Participant token")
        .await
        .send_keys("human-token\n")
        .await
        .unwrap();
    wait_text(c, "#status", "joined as human").await;
    by_role(c, "textbox", "Message")
        .await
        .send_keys("after logging in again\n")
        .await
        .unwrap();
    let text = wait_text(c, "#messages", "after logging in again").await;
    // What was said before comes back as the space's history, once, before now.
    let at = |t: &str| text.find(t).unwrap_or_else(|| panic!("{t} not in {text}"));
    assert!(
        at("earlier in the space") < at("before logging out"),
        "{text}"
    );
    assert!(
        at("before logging out") < at("after logging in again"),
        "{text}"
    );
    assert_eq!(text.matches("before logging out").count(), 1, "{text}");
    c.clone().close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_reviews_proposals_in_the_browser() {
    let dir = Scratch::new("web", "review");
    let root = dir.join("files");
    std::fs::create_dir_all(&root).unwrap();
    let gw = gateway(&dir, Some(&root));
    let end = Instant::now() + Duration::from_secs(40);
    while !online(&gw.addr, "fs") {
        assert!(Instant::now() < end, "the filesystem bridge never joined");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b = browser(&dir.join("profile"), 1280, 860).await;
    let c = &b.client;
    c.goto(&format!(
        "http://{}/ui/?space={SPACE}#token=human-token",
        gw.addr
    ))
    .await
    .unwrap();
    wait_text(c, "#status", "joined as human").await;
    let url = c.current_url().await.unwrap();
    assert_eq!(
        url.fragment(),
        None,
        "the token left the address bar: {url}"
    );
    // Discovery: the bridge's tools, listed without the chatter in the messages.
    wait_text(c, "#participants", "write_file").await;
    let log = c.find(Locator::Id("messages")).await.unwrap();
    assert!(!log.text().await.unwrap().contains("fs answers"));
    by_role(c, "checkbox", "Show discovery")
        .await
        .click()
        .await
        .unwrap();
    wait_text(c, "#messages", "fs answers:").await;
    wait_text(c, "#messages", "\"name\": \"write_file\"").await;
    by_role(c, "checkbox", "Show discovery")
        .await
        .click()
        .await
        .unwrap();

    let mut agent = Agent::join(&gw.addr);
    wait_text(c, "#participants", "agent").await;

    // The chat box, both ways; reasoning folded into one line that follows the thoughts.
    by_role(c, "textbox", "Message")
        .await
        .send_keys("hello agent\n")
        .await
        .unwrap();
    let chat = agent.wait(|e| e["kind"] == "chat" && e["from"] == "human");
    assert_eq!(chat["payload"]["text"], "hello agent");
    agent.send("chat", &[], None, json!({"text": "hello human"}));
    wait_text(c, "#messages", "agent: hello human").await;
    let start = agent.send("reasoning/start", &[], None, json!({"message": "thinking"}));
    let thought = |agent: &mut Agent, kind: &str, text: &str| {
        agent.n += 1;
        let env = json!({"protocol": "mew/v0.4", "id": format!("agent-{}", agent.n),
                         "from": "agent", "kind": kind, "context": start,
                         "payload": {"message": text}});
        agent.out.send(env.to_string()).unwrap();
    };
    thought(&mut agent, "reasoning/thought", "first look");
    wait_text(
        c,
        "#messages",
        "agent is thinking (1 thought(s)): first look",
    )
    .await;
    thought(&mut agent, "reasoning/thought", "second look");
    thought(&mut agent, "reasoning/conclusion", "all clear");
    wait_text(c, "#messages", "agent reasoned in 2 step(s): all clear").await;

    // Approve: the bridge writes the file, the page shows the result.
    let approved = root.join("approved.txt");
    let p1 = agent.propose(
        "write_file",
        json!({"path": approved, "content": "approved in the browser"}),
    );
    wait_dialog(c, true).await;
    let dialog = by_role(c, "dialog", "Review proposal").await;
    let text = dialog.text().await.unwrap();
    for part in [
        "agent",
        "tools/call",
        "write_file",
        "fs",
        "\"content\": \"approved in the browser\"",
    ] {
        assert!(text.contains(part), "{part} in {text}");
    }
    screenshot(c, "web-review.png").await;
    by_role(c, "button", "Approve").await.click().await.unwrap();
    wait_dialog(c, false).await;
    wait_text(c, "#messages", "fs answers: Successfully wrote").await;
    // The record says what was approved, with the arguments it ran with.
    wait_text(
        c,
        "#messages",
        "proposal approved by human: agent's tools/call write_file on fs: {\"content\":\"approved in the browser\"",
    )
    .await;
    let end = Instant::now() + WAIT;
    while std::fs::read_to_string(&approved).ok().as_deref() != Some("approved in the browser") {
        assert!(Instant::now() < end, "the file was not written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let response = agent.wait(|e| e["kind"] == "mcp/response" && e["from"] == "fs");
    assert!(response["payload"]["result"].is_object(), "{response}");

    let _ = p1;

    // Reject with a typed reason: the proposer reads it.
    let rejected = root.join("rejected.txt");
    let p2 = agent.propose("write_file", json!({"path": rejected, "content": "no"}));
    wait_dialog(c, true).await;
    by_role(c, "button", "Reject").await.click().await.unwrap();
    by_role(c, "textbox", "Reason")
        .await
        .send_keys("not that file")
        .await
        .unwrap();
    by_role(c, "button", "Reject").await.click().await.unwrap();
    wait_dialog(c, false).await;
    let reject = agent.wait(|e| e["kind"] == "mcp/reject" && correlates(e, &p2));
    assert_eq!(reject["payload"]["reason"], "not that file");
    assert_eq!(reject["from"], "human");
    assert!(!rejected.exists());

    // Always allow: the exact grant is shown first (the core's narrowest), then the agent's
    // next identical call goes through directly, with no dialog.
    let always = root.join("always.txt");
    let args = json!({"path": always, "content": "always"});
    let payload =
        json!({"method": "tools/call", "params": {"name": "write_file", "arguments": args}});
    agent.propose("write_file", args.clone());
    wait_dialog(c, true).await;
    by_role(c, "button", "Always allow")
        .await
        .click()
        .await
        .unwrap();
    let shown = c
        .find(Locator::Id("review-grant"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let core = serde_json::to_string_pretty(&mew_core::automation::narrowest(&payload)).unwrap();
    assert_eq!(shown, core, "the page shows the core's narrowest grant");
    by_role(c, "button", "Grant and approve")
        .await
        .click()
        .await
        .unwrap();
    wait_dialog(c, false).await;
    let grant = agent.wait(|e| e["kind"] == "capability/grant");
    assert_eq!(
        grant["payload"]["capabilities"][0],
        mew_core::automation::narrowest(&payload)
    );
    agent.wait(|e| e["kind"] == "mcp/response" && e["from"] == "fs");
    std::fs::remove_file(&always).unwrap();
    let direct = agent.send("mcp/request", &["fs"], None, payload.clone());
    let answer = agent.wait(|e| e["kind"] == "mcp/response" && correlates(e, &direct));
    assert!(answer["payload"]["result"].is_object(), "{answer}");
    assert_eq!(std::fs::read_to_string(&always).unwrap(), "always");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!dialog_open(c).await, "a granted call needs no review");
    by_role(c, "button", "No proposals waiting").await;

    // Withdrawn while its dialog is open: the dialog closes.
    let p4 = agent.propose(
        "write_file",
        json!({"path": root.join("w.txt"), "content": "w"}),
    );
    wait_dialog(c, true).await;
    agent.send(
        "mcp/withdraw",
        &[],
        Some(&p4),
        json!({"reason": "changed my mind"}),
    );
    wait_dialog(c, false).await;
    wait_text(c, "#messages", "proposal withdrawn by agent").await;

    // Answered elsewhere (another reviewer rejects it) while its dialog is open: it closes.
    let mut reviewer = Agent::join_as(&gw.addr, "reviewer");
    let p5 = agent.propose(
        "write_file",
        json!({"path": root.join("r.txt"), "content": "r"}),
    );
    wait_dialog(c, true).await;
    reviewer.send(
        "mcp/reject",
        &["agent"],
        Some(&p5),
        json!({"reason": "seen to"}),
    );
    wait_dialog(c, false).await;
    wait_text(c, "#messages", "proposal rejected by reviewer: seen to").await;
    by_role(c, "button", "No proposals waiting").await;

    // Rejected by the same person at another screen (a terminal): this one stays joined,
    // and its dialog closes.
    let mut terminal = Agent::join_as(&gw.addr, "human");
    let p6 = agent.propose(
        "write_file",
        json!({"path": root.join("t.txt"), "content": "t"}),
    );
    wait_dialog(c, true).await;
    terminal.wait(|e| e["kind"] == "mcp/proposal" && e["id"] == p6.as_str());
    terminal.send(
        "mcp/reject",
        &["agent"],
        Some(&p6),
        json!({"reason": "done at the terminal"}),
    );
    wait_dialog(c, false).await;
    wait_text(
        c,
        "#messages",
        "proposal rejected by human: done at the terminal (agent's tools/call write_file on fs)",
    )
    .await;
    wait_text(c, "#status", "joined as human").await;

    // Several waiting, by keyboard alone: counted, deferred with Esc, back with r, rejected
    // with n + reason + Enter, approved with y.
    let k1 = agent.propose(
        "write_file",
        json!({"path": root.join("k1.txt"), "content": "1"}),
    );
    let k2 = agent.propose(
        "write_file",
        json!({"path": root.join("k2.txt"), "content": "2"}),
    );
    wait_dialog(c, true).await;
    by_role(c, "dialog", "Review proposal (1 more waiting)").await;
    keys(c, "\u{e00c}").await; // Escape: later
    wait_dialog(c, false).await;
    by_role(c, "button", "Review 2 waiting proposals").await;
    // From the message list (any place but a text field), r opens the review.
    c.find(Locator::Id("messages"))
        .await
        .unwrap()
        .send_keys("r")
        .await
        .unwrap();
    wait_dialog(c, true).await;
    // Esc sent the first to the back: k2 is under review.
    wait_text(c, "#review-args", "k2.txt").await;
    keys(c, "n").await;
    keys(c, "too many files\n").await;
    let r2 = agent.wait(|e| e["kind"] == "mcp/reject" && correlates(e, &k2));
    assert_eq!(r2["payload"]["reason"], "too many files");
    wait_text(c, "#review-args", "k1.txt").await;
    keys(c, "y").await;
    wait_dialog(c, false).await;
    let end = Instant::now() + WAIT;
    while !root.join("k1.txt").exists() {
        assert!(Instant::now() < end, "k1 was not written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = k1;

    // The automation card: three approvals of one call bring a suggestion with its evidence.
    for _ in 0..3 {
        agent.propose("list_directory", json!({"path": root}));
        wait_dialog(c, true).await;
        by_role(c, "button", "Approve").await.click().await.unwrap();
        wait_dialog(c, false).await;
    }
    let card = wait_text(c, "#suggestions", "approved 3 times by human").await;
    assert!(card.contains("list_directory"), "{card}");
    screenshot(c, "web-automation.png").await;
    by_role(c, "button", "Grant suggested capability to agent")
        .await
        .click()
        .await
        .unwrap();
    let g = agent.wait(|e| {
        e["kind"] == "capability/grant"
            && e["payload"]["capabilities"][0]["payload"]["params"]["name"] == "list_directory"
    });
    assert_eq!(
        g["payload"]["capabilities"][0]["payload"]["params"]["arguments"]["path"],
        json!(root)
    );

    // Grant and revoke by hand.
    by_role(c, "combobox", "Participant")
        .await
        .select_by_value("agent")
        .await
        .unwrap();
    by_role(c, "textbox", "Capability (kind or JSON)")
        .await
        .send_keys("stream/request")
        .await
        .unwrap();
    by_role(c, "button", "Grant").await.click().await.unwrap();
    let g = agent.wait(|e| {
        e["kind"] == "capability/grant"
            && e["payload"]["capabilities"][0]["kind"] == "stream/request"
    });
    assert_eq!(g["payload"]["recipient"], "agent");
    by_role(c, "textbox", "Capability (kind or JSON)")
        .await
        .send_keys("stream/request")
        .await
        .unwrap();
    by_role(c, "button", "Revoke").await.click().await.unwrap();
    agent.wait(|e| e["kind"] == "capability/revoke");

    // A narrow screen: one column, the dialog fits.
    c.set_window_size(390, 844).await.unwrap();
    agent.propose(
        "write_file",
        json!({"path": root.join("narrow.txt"), "content": "n"}),
    );
    wait_dialog(c, true).await;
    let (_, _, w, _) = by_role(c, "dialog", "Review proposal")
        .await
        .rectangle()
        .await
        .unwrap();
    assert!(w <= 390.0, "the dialog is {w}px wide");
    screenshot(c, "web-narrow.png").await;
    by_role(c, "button", "Approve").await.click().await.unwrap();
    wait_dialog(c, false).await;
    c.set_window_size(1280, 860).await.unwrap();
    // Participant controls are named for whom they act on.
    by_role(c, "group", "Controls for agent").await;
    by_role(c, "button", "Pause agent")
        .await
        .click()
        .await
        .unwrap();
    let pause = agent.wait(|e| e["kind"] == "participant/pause");
    assert_eq!(pause["from"], "human");

    by_role(c, "button", "Resume agent")
        .await
        .click()
        .await
        .unwrap();
    agent.wait(|e| e["kind"] == "participant/resume");
    c.clone().close().await.unwrap();
}

// ---- side by side with the terminal ------------------------------------------------------

/// A tmux server of its own running `mew client` (the terminal interface), killed on drop.
struct Terminal(String);

impl Terminal {
    fn start(addr: &str, token: &str) -> Terminal {
        let t = Terminal(format!("mew-web-side-{}", std::process::id()));
        let client = format!("{MEW} client --gateway ws://{addr} --space {SPACE}");
        t.cmd(&[
            "new-session",
            "-d",
            "-s",
            "ui",
            "-x",
            "140",
            "-y",
            "44",
            "-e",
            &format!("MEW_TOKEN={token}"),
            &client,
        ]);
        t
    }

    fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.0])
            .args(args)
            .output()
            .expect("tmux is needed (tests/run.sh installs it with apt-get)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "ui"])
    }

    fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", "ui"];
        a.extend_from_slice(keys);
        self.cmd(&a);
    }

    /// Waits until `f` accepts the screen; returns what `f` made of it.
    async fn until<T>(&self, what: &str, f: impl Fn(&str) -> Option<T>) -> T {
        let end = Instant::now() + WAIT;
        loop {
            let s = self.screen();
            if let Some(v) = f(&s) {
                return v;
            }
            assert!(
                Instant::now() < end,
                "the terminal never showed {what}:\n{s}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The members of the participants panel (`● id` lines), sorted.
    fn members(screen: &str) -> Vec<String> {
        let mut ids: Vec<String> = screen
            .lines()
            .filter_map(|l| l.split("● ").nth(1))
            .map(|rest| rest.split([' ', '│']).next().unwrap_or_default().to_owned())
            .collect();
        ids.sort();
        ids
    }

    /// The text inside the box titled `title`, its rows joined without spaces (a long
    /// line wraps across rows).
    fn boxed(screen: &str, title: &str) -> Option<String> {
        let rows: Vec<Vec<char>> = screen.lines().map(|l| l.chars().collect()).collect();
        let top = rows
            .iter()
            .position(|r| r.iter().collect::<String>().contains(title))?;
        let left = rows[top].iter().position(|c| *c == '┌')?;
        let right = rows[top].iter().rposition(|c| *c == '┐')?;
        let mut text = String::new();
        for r in &rows[top + 1..] {
            if r.get(left) == Some(&'└') {
                return Some(text);
            }
            let inner: String = r.get(left + 1..right.min(r.len()))?.iter().collect();
            text.extend(inner.chars().filter(|c| !c.is_whitespace()));
        }
        None
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.0, "kill-server"])
            .output();
    }
}

/// The members the page lists, sorted.
async fn page_members(c: &Client) -> Vec<String> {
    let v = c
        .execute(
            "return [...document.querySelectorAll('#participants .member-name')].map(e => e.textContent)",
            vec![],
        )
        .await
        .unwrap();
    let mut ids: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let t = t.as_str().unwrap().trim_start_matches("● ");
            t.trim_end_matches(" (you)").to_owned()
        })
        .collect();
    ids.sort();
    ids
}

/// Waits until the page lists exactly `want`.
async fn page_members_are(c: &Client, want: &[&str]) -> Vec<String> {
    let end = Instant::now() + WAIT;
    loop {
        let ids = page_members(c).await;
        if ids == want {
            return ids;
        }
        assert!(Instant::now() < end, "the page lists {ids:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the header's review button (behind the dialog, so not in the accessibility
/// tree) says `text`.
async fn review_count_is(c: &Client, text: &str) {
    let end = Instant::now() + WAIT;
    loop {
        let v = c
            .execute(
                "return document.getElementById('review-open').textContent",
                vec![],
            )
            .await
            .unwrap();
        if v == json!(text) {
            return;
        }
        assert!(
            Instant::now() < end,
            "the review button says {v}, not {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn squeeze(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_terminal_and_the_page_show_the_same_members_queue_and_suggestion() {
    let dir = Scratch::new("web", "side");
    let root = dir.join("files");
    std::fs::create_dir_all(&root).unwrap();
    let gw = gateway(&dir, Some(&root));
    let end = Instant::now() + Duration::from_secs(40);
    while !online(&gw.addr, "fs") {
        assert!(Instant::now() < end, "the filesystem bridge never joined");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // One person at two screens: the terminal, and the page.
    let term = Terminal::start(&gw.addr, "human-token");
    term.until("the join", |s| s.contains("joined as human").then_some(()))
        .await;
    let b = browser(&dir.join("profile"), 1280, 860).await;
    let c = &b.client;
    c.goto(&format!(
        "http://{}/ui/?space={SPACE}#token=human-token",
        gw.addr
    ))
    .await
    .unwrap();
    wait_text(c, "#status", "joined as human").await;

    // The same members, and the same tools discovered.
    let mut agent = Agent::join(&gw.addr);
    let all = ["agent", "fs", "human"];
    let on_page = page_members_are(c, &all).await;
    let on_term = term
        .until("three members", |s| {
            let m = Terminal::members(s);
            (m == all).then_some(m)
        })
        .await;
    assert_eq!(on_page, on_term);
    wait_text(c, "#participants", "write_file").await;
    term.until("the tools", |s| s.contains("· write_file").then_some(()))
        .await;

    // The same queue: two proposals waiting, the first the same on both.
    let p1 = agent.propose("list_directory", json!({"path": root}));
    let p2 = agent.propose("list_directory", json!({"path": root}));
    wait_dialog(c, true).await;
    review_count_is(c, "Review 2 waiting proposals").await;
    by_role(c, "dialog", "Review proposal (1 more waiting)").await;
    let what = c
        .find(Locator::Id("review-what"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(what, "agent proposes tools/call list_directory on fs");
    let review = term
        .until("the review of two", |s| {
            (s.contains("(2 to review: Enter)") && s.contains(" review (1 more waiting) "))
                .then(|| Terminal::boxed(s, " review "))
                .flatten()
        })
        .await;
    assert!(review.starts_with(&squeeze(&what)), "{review}");
    let path = root.to_string_lossy().into_owned();
    let args = c
        .find(Locator::Id("review-args"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        args.contains(&path) && review.contains(&squeeze(&path)),
        "{args} / {review}"
    );

    // Approved at the page: gone from both queues; the next, approved at the terminal, too.
    by_role(c, "button", "Approve").await.click().await.unwrap();
    agent.wait(|e| e["kind"] == "mcp/response" && e["from"] == "fs");
    review_count_is(c, "Review 1 waiting proposal").await;
    term.until("one left", |s| {
        s.contains("(1 to review: Enter)").then_some(())
    })
    .await;
    term.keys(&["y"]);
    agent.wait(|e| e["kind"] == "mcp/response" && e["from"] == "fs");
    wait_dialog(c, false).await;
    by_role(c, "button", "No proposals waiting").await;
    term.until("an empty queue", |s| {
        (!s.contains("to review: Enter")).then_some(())
    })
    .await;
    let _ = (p1, p2);

    // A third approval of the same call: both suggest the same grant, with the same evidence.
    agent.propose("list_directory", json!({"path": root}));
    wait_dialog(c, true).await;
    by_role(c, "button", "Approve").await.click().await.unwrap();
    wait_dialog(c, false).await;
    let card = wait_text(c, "#suggestions", "approved 3 times by human").await;
    let shown = c
        .find(Locator::Css("#suggestions pre"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let capability: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(
        capability["payload"]["params"],
        json!({"name": "list_directory", "arguments": {"path": path}})
    );
    let summary = c
        .find(Locator::Css("#suggestions .card p:nth-child(2)"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(card.contains(&summary), "{card}");
    let suggestion = term
        .until("the suggestion", |s| Terminal::boxed(s, " suggestion "))
        .await;
    assert!(
        suggestion.contains(&squeeze(&summary)),
        "{suggestion} / {summary}"
    );
    assert!(
        suggestion.contains(&format!("grant{}", capability)),
        "{suggestion} / {capability}"
    );

    // The agent leaves (its socket closes when the next envelope finds it gone): gone from
    // both lists.
    drop(agent);
    by_role(c, "textbox", "Message")
        .await
        .send_keys("bye\n")
        .await
        .unwrap();
    let left = ["fs", "human"];
    let on_page = page_members_are(c, &left).await;
    let on_term = term
        .until("two members", |s| {
            let m = Terminal::members(s);
            (m == left).then_some(m)
        })
        .await;
    assert_eq!(on_page, on_term);
    c.clone().close().await.unwrap();
}

// ---- a server's questions and sign-in notices ----------------------------------------------

/// Space `web` with a person, a scripted `files` (may send its status) and `everything`, a
/// bridge the gateway starts to server-everything over Streamable HTTP at `url`.
fn asking_gateway(dir: &Path, url: &str) -> MewGateway {
    let yaml = format!(
        "space: {{id: {SPACE}}}\nparticipants:\n  human: {{tokens: [human-token], person: true, capabilities: [{{kind: \"*\"}}]}}\n  files: {{tokens: [files-token], capabilities: [{{kind: participant/status}}, {{kind: chat}}]}}\n  everything:\n    type: mcp-bridge\n    auto_start: true\n    tokens: [everything-token]\n    capabilities: [{{kind: mcp/response}}, {{kind: mcp/request}}, {{kind: participant/status}}]\n    mcp_server: {{url: \"{url}\"}}\n"
    );
    let config = dir.join("space.yaml");
    std::fs::write(&config, yaml).unwrap();
    let mut cmd = Command::new(MEW);
    cmd.args(["gateway", "--config"])
        .arg(&config)
        .args(["--port", "0", "--log-level", "warn"])
        .current_dir(dir);
    MewGateway::start(cmd)
}

/// The `/json` line that calls server-everything's elicitation tool through the space.
const ASK_LINE: &str = r#"/json {"kind":"mcp/request","to":["everything"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"trigger-elicitation-request","arguments":{}}}}"#;

async fn question_open(c: &Client) -> bool {
    c.execute("return document.getElementById('question').open", vec![])
        .await
        .unwrap()
        == json!(true)
}

async fn wait_question(c: &Client, open: bool) {
    let end = Instant::now() + WAIT;
    while question_open(c).await != open {
        assert!(
            Instant::now() < end,
            "the question dialog did not {}; the messages: {}",
            if open { "open" } else { "close" },
            c.find(Locator::Id("messages"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// server-everything's question, caused by the person's call from the page, is a form in
/// the browser built from its schema (defaults filled in, titled choices by title); a value
/// out of range is refused with the reason shown and nothing sent; the corrected answer is
/// what the tool reports; a second question is declined. A scripted participant's sign-in
/// status shows as a notice with its link until its next status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_answers_a_servers_question_in_the_browser() {
    let server = mew_tests::process::HttpMcpServer::everything();
    let dir = Scratch::new("web", "question");
    let gw = asking_gateway(&dir, &server.url);
    let end = Instant::now() + Duration::from_secs(40);
    while !online(&gw.addr, "everything") {
        assert!(Instant::now() < end, "the bridge never joined");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b = browser(&dir.join("profile"), 1280, 1000).await;
    let c = &b.client;
    c.goto(&format!(
        "http://{}/ui/?space={SPACE}#token=human-token",
        gw.addr
    ))
    .await
    .unwrap();
    wait_text(c, "#status", "joined as human").await;

    // The sign-in notice of a participant's status, with its link; gone with the next one.
    let mut files = Agent::join_as(&gw.addr, "files");
    let sign_in = "https://auth.example.com/authorize?client_id=x&state=s";
    files.send(
        "participant/status",
        &[],
        None,
        json!({"status": "active", "mcp_server": {"sign_in": {"url": sign_in, "host": "auth.example.com"}}}),
    );
    let notice = wait_text(
        c,
        "#notices",
        "files needs you to sign in to auth.example.com",
    )
    .await;
    assert!(notice.contains("Sign in to auth.example.com"), "{notice}");
    let link = c
        .find(Locator::Css("#notices a"))
        .await
        .unwrap()
        .attr("href")
        .await
        .unwrap();
    assert_eq!(link.as_deref(), Some(sign_in));
    files.send(
        "participant/status",
        &[],
        None,
        json!({"status": "active", "mcp_server": {"protocol_version": "2025-11-25"}}),
    );
    let end = Instant::now() + WAIT;
    while c
        .execute("return document.getElementById('notices').hidden", vec![])
        .await
        .unwrap()
        != json!(true)
    {
        assert!(Instant::now() < end, "the notice stayed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The question, as a form.
    by_role(c, "textbox", "Message")
        .await
        .send_keys(&format!("{ASK_LINE}\n"))
        .await
        .unwrap();
    wait_question(c, true).await;
    wait_text(
        c,
        "#question-message",
        "Please provide inputs for the following fields:",
    )
    .await;
    let integer = by_role(c, "textbox", "Integer").await;
    assert_eq!(integer.prop("value").await.unwrap().as_deref(), Some("42"));
    let hero = c
        .find(Locator::Css("#q-titledSingleSelectEnum"))
        .await
        .unwrap();
    assert_eq!(hero.prop("value").await.unwrap().as_deref(), Some("hero-1"));
    by_role(c, "textbox", "String (required)")
        .await
        .send_keys("Ada Lovelace")
        .await
        .unwrap();
    integer.clear().await.unwrap();
    integer.send_keys("500").await.unwrap();
    by_role(c, "button", "Accept").await.click().await.unwrap();
    let problem = wait_text(c, "#question-problem", "Integer: must be <= 100").await;
    assert!(!problem.is_empty());
    assert!(question_open(c).await);
    // Corrected; a box ticked, a titled choice picked by its title, a second fish added.
    integer.clear().await.unwrap();
    integer.send_keys("7").await.unwrap();
    by_role(c, "checkbox", "Boolean")
        .await
        .click()
        .await
        .unwrap();
    hero.select_by_label("Green Lantern").await.unwrap();
    by_role(c, "checkbox", "Salmon")
        .await
        .click()
        .await
        .unwrap();
    screenshot(c, "web-question.png").await;
    by_role(c, "button", "Accept").await.click().await.unwrap();
    wait_question(c, false).await;
    let log = wait_text(c, "#messages", "- Favorite Integer: 7").await;
    for want in [
        "- Name: Ada Lovelace",
        "- Agreed to terms: true",
        "\"titledSingleSelectEnum\": \"hero-2\"",
        "\"fish-2\"",
        "you answered everything's question",
    ] {
        assert!(log.contains(want), "{want} missing from {log}");
    }

    // Declined.
    by_role(c, "textbox", "Message")
        .await
        .send_keys(&format!("{}\n", ASK_LINE.replace("\"id\":1", "\"id\":2")))
        .await
        .unwrap();
    wait_question(c, true).await;
    by_role(c, "button", "Decline").await.click().await.unwrap();
    wait_question(c, false).await;
    wait_text(
        c,
        "#messages",
        "User declined to provide the requested information",
    )
    .await;
    drop(files);
}
