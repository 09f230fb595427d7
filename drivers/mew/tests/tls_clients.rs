//! The `mew` programs as clients of a `wss://` gateway (`mew gateway --tls-cert`), with a
//! private CA made here: `--ca-file` and `MEW_CA_FILE` make its certificate trusted; without
//! them the clients stop at once with one line saying why; `--insecure-skip-verify` connects
//! and warns.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mew_tests::scratch::Scratch;

const MEW: &str = env!("CARGO_BIN_EXE_mew");

struct Gateway {
    child: Child,
    port: u16,
    tokens: Vec<(String, String)>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_gateway(dir: &Path) -> Gateway {
    let mut child = Command::new(MEW)
        .args([
            "gateway",
            "--port",
            "0",
            "--log-level",
            "warn",
            "--tls-cert",
        ])
        .arg(dir.join("cert.pem"))
        .arg("--tls-key")
        .arg(dir.join("key.pem"))
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run mew gateway");
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut port = None;
    let mut tokens = Vec::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(10)) {
        if let Some(rest) = line.split("wss://").nth(1)
            && port.is_none()
        {
            let addr = rest.split('/').next().unwrap();
            port = addr.rsplit(':').next().and_then(|p| p.parse().ok());
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() >= 3 && words[1] == "token" {
            tokens.push((words[0].to_owned(), words[2].to_owned()));
        }
        if line.starts_with("join with:") {
            break;
        }
    }
    Gateway {
        child,
        port: port.expect("the gateway prints its wss:// address"),
        tokens,
    }
}

impl Gateway {
    fn token(&self, id: &str) -> &str {
        &self.tokens.iter().find(|(p, _)| p == id).unwrap().1
    }

    fn url(&self) -> String {
        format!("wss://localhost:{}", self.port)
    }
}

fn send(gw: &Gateway, extra: &[&str], env: &[(&str, &Path)]) -> (Output, Duration) {
    let mut c = Command::new(MEW);
    c.args(["client", "--gateway", &gw.url(), "--space", "default"])
        .args(["--token", gw.token("human")])
        .args(["--send", r#"{"kind":"chat","payload":{"text":"over tls"}}"#])
        .args(extra)
        .env_remove("MEW_CA_FILE");
    for (k, v) in env {
        c.env(k, v);
    }
    let started = Instant::now();
    let out = c.output().unwrap();
    (out, started.elapsed())
}

#[test]
fn clients_trust_the_ca_file_and_refuse_an_unverified_certificate_at_once() {
    let dir = Scratch::new("tls-clients", "ca-file");
    mew_tests::pki::make(&dir, &["localhost"]);
    let gw = start_gateway(&dir);
    let ca = dir.join("ca.pem");

    let (out, took) = send(&gw, &[], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("certificate is not trusted"), "{err}");
    assert!(took < Duration::from_secs(3), "no retry loop: {took:?}");

    let (out, _) = send(&gw, &["--ca-file", ca.to_str().unwrap()], &[]);
    let id = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!id.trim().is_empty());

    let (out, _) = send(&gw, &[], &[("MEW_CA_FILE", &ca)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (out, _) = send(&gw, &["--insecure-skip-verify"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("warning: --insecure-skip-verify"), "{err}");

    let (out, _) = send(&gw, &["--ca-file", "/nonexistent/ca.pem"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("/nonexistent/ca.pem"), "{err}");

    // A bridge that cannot verify the gateway exits at once, saying why. Its MCP server
    // stays silent (`cat` would echo the bridge's `initialize`, and that refusal could
    // come first).
    let started = Instant::now();
    let out = Command::new(MEW)
        .args(["bridge", "--gateway", &gw.url(), "--space", "default"])
        .args(["--token", gw.token("human"), "--", "sleep", "60"])
        .env_remove("MEW_CA_FILE")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("certificate is not trusted"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// `mew space status` of a space served over TLS asks it over HTTPS, trusting the certificate
/// the space's own folder names (whatever names it carries: here only `localhost`, while the
/// status asks 127.0.0.1), and shows the gateway's figures and members.
#[test]
fn space_status_reads_a_tls_space_over_https() {
    let scratch = Scratch::new("tls-clients", "status");
    let dir = scratch.join("space");
    std::fs::create_dir_all(dir.join(".mew")).unwrap();
    mew_tests::pki::make(&dir, &["localhost"]);
    std::fs::write(
        dir.join(".mew/space.yaml"),
        "space: {id: tls-status}\ngateway: {tls: {cert: ../cert.pem, key: ../key.pem}}\nparticipants:\n  human: {tokens: [human-token], capabilities: [{kind: \"*\"}]}\n",
    )
    .unwrap();
    let mew = |args: &[&str]| {
        Command::new(MEW)
            .args(args)
            .arg("--space-dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let up = mew(&["space", "up", "--detach", "--port", "0"]);
    assert!(up.status.success(), "{up:?}");
    assert!(
        String::from_utf8_lossy(&up.stdout).contains("wss://"),
        "{up:?}"
    );
    let out = mew(&["space", "status", "--json"]);
    let down = mew(&["space", "down"]);
    assert!(down.status.success(), "{down:?}");
    let st: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status --json ({e}): {out:?}"));
    assert_eq!(st["running"], true, "{st}");
    assert!(
        st["gateway"].as_str().unwrap().starts_with("wss://"),
        "{st}"
    );
    assert!(
        st["health"]["connections"].is_u64(),
        "the gateway's figures, over HTTPS: {st}"
    );
    let ids: Vec<&str> = st["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["human"], "{st}");
}
