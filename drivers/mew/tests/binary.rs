//! Runs the real `mew` binary: a gateway with the embedded default space, clients with
//! `--send` and `--json`, exit codes, and a graceful stop on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use mew_tests::process::Stopping;
use mew_tests::scratch::Scratch;

const MEW: &str = env!("CARGO_BIN_EXE_mew");

struct Gateway {
    child: Stopping,
    addr: String,
    tokens: Vec<(String, String)>,
}

fn lines_of(out: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn start_gateway() -> Gateway {
    let mut child = Command::new(MEW)
        .args(["gateway", "--port", "0", "--log-level", "warn"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run mew gateway");
    let rx = lines_of(child.stdout.take().unwrap());
    // Owned at once: a failed assertion below still stops the process.
    let mut gw = Gateway {
        child: Stopping(child),
        addr: String::new(),
        tokens: Vec::new(),
    };
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(10)) {
        if let Some(rest) = line.split("ws://").nth(1)
            && gw.addr.is_empty()
        {
            gw.addr = rest.split('/').next().unwrap().to_owned();
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() >= 3 && words[1] == "token" {
            gw.tokens.push((words[0].to_owned(), words[2].to_owned()));
        }
        if line.starts_with("join with:") {
            break;
        }
    }
    assert!(!gw.addr.is_empty(), "the gateway prints its address");
    gw
}

impl Gateway {
    fn token(&self, id: &str) -> &str {
        &self.tokens.iter().find(|(p, _)| p == id).unwrap().1
    }
}

fn client(gw: &Gateway, who: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(MEW);
    c.args([
        "client",
        "--gateway",
        &format!("ws://{}", gw.addr),
        "--space",
        "default",
        "--token",
        gw.token(who),
    ]);
    c.args(extra);
    c
}

fn http_get(addr: &str, path: &str, token: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn default_space_gateway_and_clients() {
    let gw = start_gateway();
    assert_eq!(
        gw.tokens.len(),
        3,
        "human, agent and service tokens printed"
    );

    // A watcher prints every envelope as a JSON line.
    let mut watcher = client(&gw, "service", &["--json"])
        .stdout(Stdio::piped())
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let watched = lines_of(watcher.stdout.take().unwrap());
    // Wait until the watcher is in (its own welcome is its first line).
    let first = watched.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(first.contains("system/welcome"), "{first}");

    let out = client(
        &gw,
        "human",
        &[
            "--send",
            r#"{"kind":"chat","payload":{"text":"from the binary"}}"#,
        ],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(!id.is_empty());

    let seen = loop {
        let line = watched
            .recv_timeout(Duration::from_secs(10))
            .expect("the watcher prints the chat");
        if line.contains(&id) {
            break line;
        }
    };
    let v: serde_json::Value = serde_json::from_str(&seen).unwrap();
    assert_eq!(v["payload"]["text"], "from the binary");
    assert_eq!(v["from"], "human");
    assert_eq!(
        v["id"],
        id.as_str(),
        "--send prints the id of the envelope it sent"
    );

    // The agent may only propose (and list tools): a direct tool call is refused and the
    // exit code says so.
    let out = client(
        &gw,
        "agent",
        &[
            "--send",
            r#"{"kind":"mcp/request","to":["service"],"payload":{"method":"tools/call","params":{"name":"x"}}}"#,
        ],
    )
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "README: a refused --send exits 1"
    );
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("mew: "));
    // A body that is no envelope is a usage error.
    let out = client(&gw, "agent", &["--send", r#"{"payload":{}}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    // The polling endpoint has it too.
    let resp = http_get(&gw.addr, "/participants/human/messages", gw.token("human"));
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains(&id));

    // A taken port: exit code 3 and one line.
    let port = gw.addr.rsplit(':').next().unwrap();
    let out = Command::new(MEW)
        .args(["gateway", "--port", port])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");

    // SIGTERM: the watcher sees a close and the gateway exits 0.
    let mut gw = gw;
    let pid = gw.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = gw.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let _ = watcher.kill();
    let _ = watcher.wait();
}

#[test]
fn config_errors_have_exit_codes() {
    let out = Command::new(MEW)
        .args(["gateway", "--config", "/nonexistent/space.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("mew: cannot read /nonexistent/space.yaml"),
        "{err}"
    );

    let dir = Scratch::new("bin", "config-errors");
    let bad = dir.join("space.yaml");
    std::fs::write(
        &bad,
        "space: {id: s}\nparticipants:\n  a: {tokens: [t], capabilities: [{kind: 5}]}\n  b: {type: nonsense}\n",
    )
    .unwrap();
    let out = Command::new(MEW)
        .args(["gateway", "--port", "0", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("participants.a"), "{err}");
    assert!(
        err.contains("participants.b"),
        "every problem is reported: {err}"
    );

    let out = Command::new(MEW)
        .args(["gateway", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn config_tokens_from_env_files_and_generation() {
    let dir = Scratch::new("bin", "tokens");
    std::fs::create_dir_all(dir.join(".mew/tokens")).unwrap();
    std::fs::write(dir.join(".mew/tokens/human.token"), "file-token\n").unwrap();
    let config = dir.join("space.yaml");
    std::fs::write(
        &config,
        "space: {id: tok}\nparticipants:\n  human: {tokens: [literal], capabilities: [{kind: '*'}]}\n  my-agent: {capabilities: [{kind: chat}]}\n  service: {capabilities: [{kind: chat}]}\n",
    )
    .unwrap();
    let mut child = Command::new(MEW)
        .args(["gateway", "--port", "0", "--log-level", "warn", "--config"])
        .arg(&config)
        .env("MEW_TOKEN_MY_AGENT", "env-token")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rx = lines_of(child.stdout.take().unwrap());
    // Owned at once: a failed assertion below still stops the process.
    let mut gw = Gateway {
        child: Stopping(child),
        addr: String::new(),
        tokens: Vec::new(),
    };
    let mut generated = false;
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(10)) {
        generated |= line.starts_with("generated a token for service");
        if let Some(rest) = line.split("ws://").nth(1) {
            gw.addr = rest.split('/').next().unwrap().to_owned();
            break;
        }
    }
    assert!(!gw.addr.is_empty(), "address printed");
    assert!(generated, "the generated token is announced");
    let token_file = dir.join(".mew/tokens/service.token");
    let service_token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_owned();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let send = |token: &str| {
        Command::new(MEW)
            .args([
                "client",
                "--gateway",
                &format!("ws://{}", gw.addr),
                "--space",
                "tok",
            ])
            .args([
                "--token",
                token,
                "--send",
                r#"{"kind":"chat","payload":{"text":"t"}}"#,
            ])
            .output()
            .unwrap()
            .status
            .code()
    };
    // As in the reference, every source authenticates: env var, token file and literal.
    assert_eq!(send("env-token"), Some(0));
    assert_eq!(send("file-token"), Some(0));
    assert_eq!(send(&service_token), Some(0));
    assert_eq!(
        send("literal"),
        Some(0),
        "the literal stays valid beside the file"
    );
    assert_eq!(send("not-a-token"), Some(5), "an unknown token is refused");
    assert_eq!(
        send("-Mlooks-like-an-option"),
        Some(5),
        "a token may begin with a dash: refused as unknown, not as a bad argument"
    );
}

#[test]
fn capcheck_answers_one_line_per_input() {
    let mut child = Command::new(MEW)
        .arg("capcheck")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("mew runs");
    let input = concat!(
        r#"{"capability":{"kind":"mcp/*"},"message":{"kind":"mcp/request"}}"#,
        "\n",
        r#"{"capabilities":[{"kind":"chat"},{"kind":"mcp/request","payload":{"method":"!tools/call"}}],"message":{"kind":"mcp/request","payload":{"method":"tools/call"}}}"#,
        "\n",
        r#"{"capability":{"kind":"!"},"message":{"kind":"chat"}}"#,
        "\n",
        "not json\n",
    );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(lines[0], "true");
    assert_eq!(lines[1], "false");
    assert!(lines[2].starts_with("error: "), "{}", lines[2]);
    assert!(lines[3].starts_with("error: invalid JSON"), "{}", lines[3]);
}

/// `mew client --id agent` with the human's token: the gateway welcomes `human`, and the
/// client refuses to go on as someone else: one line on stderr, exit 5, in every mode.
#[test]
fn a_client_given_another_participants_token_refuses_to_start() {
    let gw = start_gateway();
    for extra in [
        &["--json"][..],
        &["--send", r#"{"kind":"chat","payload":{"text":"x"}}"#],
    ] {
        let mut child = client(&gw, "human", &["--id", "agent"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let end = std::time::Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(std::time::Instant::now() < end, "{extra:?}: still running");
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let mut stdout = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        assert_eq!(status.code(), Some(5), "{extra:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{extra:?}: {stderr}");
        assert!(
            stderr.contains("identity_mismatch")
                && stderr.contains("`human`")
                && stderr.contains("`agent`"),
            "{stderr}"
        );
        assert!(
            stdout.is_empty(),
            "{extra:?}: nothing sent or shown: {stdout}"
        );
    }
    // The right id with that token joins as before.
    let out = client(
        &gw,
        "human",
        &[
            "--id",
            "human",
            "--send",
            r#"{"kind":"chat","payload":{"text":"x"}}"#,
        ],
    )
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An id that breaks the id rule is a usage error, before any connection.
    let out = client(&gw, "human", &["--id", "hu\u{200B}man"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("U+200B"));
}
