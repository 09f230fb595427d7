//! Runs the real `capcheck` example with JSON lines on stdin.

use std::io::Write;
use std::process::{Command, Stdio};

#[test]
fn capcheck_example_answers_each_line() {
    let input = [
        r#"{"capability":{"kind":"mcp/*"},"message":{"kind":"mcp/request"}}"#,
        r#"{"capability":{"kind":"mcp/request","payload":{"method":"!tools/call"}},"message":{"kind":"mcp/request","payload":{}}}"#,
        r#"{"capabilities":[{"kind":"chat"},{"kind":"mcp/request","payload":{"params":{"name":"read_*"}}}],"message":{"kind":"mcp/request","payload":{"params":{"name":"read_file"}}}}"#,
        r#"{"capability":{"kind":"x","payload":{"q":"/(/"}},"message":{"kind":"x"}}"#,
        "not json",
    ]
    .join("\n");
    let mut child = Command::new(env!("CARGO"))
        .args(["run", "-q", "-p", "mew-core", "--example", "capcheck"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("cargo runs");
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
    assert_eq!(lines.len(), 5, "{text}");
    assert_eq!(&lines[..3], ["true", "false", "true"]);
    assert!(
        lines[3].starts_with("error: invalid capability: payload.q: invalid regex"),
        "{}",
        lines[3]
    );
    assert!(lines[4].starts_with("error: invalid JSON"), "{}", lines[4]);
}
