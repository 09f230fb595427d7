//! The MCP server process driver against real processes: output, exit status, termination
//! with escalation, and nothing of the process group left behind.
#![cfg(unix)]

use std::time::{Duration, Instant};

use mew_core::mcp::ExitStatus;
use mew_tokio::mcp_process::{McpProcess, ProcessEvent, ServerCommand};

fn sh(script: &str) -> McpProcess {
    McpProcess::new(ServerCommand::new("sh", ["-c", script]))
}

/// Collects stdout, stderr and the exit.
async fn run_to_exit(p: &mut McpProcess) -> (String, String, ExitStatus) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match p.next_event().await {
                ProcessEvent::Stdout(b) => out.extend(b),
                ProcessEvent::Stderr(b) => err.extend(b),
                ProcessEvent::Exited(s) => return s,
            }
        }
    })
    .await
    .expect("the process exits");
    (
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
        status,
    )
}

async fn first_line(p: &mut McpProcess) -> String {
    let mut out = Vec::new();
    while !out.contains(&b'\n') {
        match p.next_event().await {
            ProcessEvent::Stdout(b) => out.extend(b),
            ProcessEvent::Stderr(_) => {}
            ProcessEvent::Exited(s) => panic!("exited early: {s}"),
        }
    }
    String::from_utf8(out)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned()
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

async fn gone(pid: u32) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while alive(pid) {
        if Instant::now() > end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

#[tokio::test]
async fn reports_output_and_exit_code() {
    let mut p = sh("echo out; echo err >&2; exit 3");
    p.spawn().unwrap();
    assert!(p.is_running());
    let (out, err, status) = run_to_exit(&mut p).await;
    assert_eq!((out.as_str(), err.as_str()), ("out\n", "err\n"));
    assert_eq!(status, ExitStatus::code(3));
    assert!(!p.is_running());
    assert_eq!(p.pid(), None);
}

#[tokio::test]
async fn lines_written_reach_stdin() {
    let mut p = McpProcess::new(ServerCommand::new("head", ["-n", "2"]));
    p.spawn().unwrap();
    assert!(p.write("one\n".into()));
    assert!(p.write("two\n".into()));
    let (out, _, status) = run_to_exit(&mut p).await;
    assert_eq!(out, "one\ntwo\n");
    assert_eq!(status, ExitStatus::code(0));
    assert!(!p.write("late\n".into()), "nothing runs any more");
}

#[tokio::test]
async fn env_and_cwd_apply() {
    let dir = std::env::temp_dir().canonicalize().unwrap();
    let mut p = McpProcess::new(ServerCommand {
        program: "sh".into(),
        args: vec!["-c".into(), "echo \"$MEW_X $(pwd)\"".into()],
        env: vec![("MEW_X".into(), "y".into())],
        cwd: Some(dir.clone()),
    });
    p.spawn().unwrap();
    let (out, _, _) = run_to_exit(&mut p).await;
    assert_eq!(out.trim_end(), format!("y {}", dir.display()));
}

#[tokio::test]
async fn a_missing_program_is_an_error_naming_it() {
    let mut p = McpProcess::new(ServerCommand::new(
        "mew-no-such-program",
        Vec::<String>::new(),
    ));
    let err = p.spawn().unwrap_err().to_string();
    assert!(
        err.contains("mew-no-such-program") && err.contains("No such file"),
        "{err}"
    );
    assert!(!p.is_running());
}

#[tokio::test]
async fn terminate_is_sigterm_to_the_whole_group() {
    let mut p = sh("sleep 60 & echo $!; wait");
    p.spawn().unwrap();
    let grandchild: u32 = first_line(&mut p).await.parse().unwrap();
    assert!(alive(grandchild));
    p.kill(Duration::from_secs(5));
    let (_, _, status) = run_to_exit(&mut p).await;
    assert_eq!(status, ExitStatus::signal(15));
    assert!(gone(grandchild).await, "grandchild {grandchild} survived");
}

#[tokio::test]
async fn a_process_ignoring_sigterm_is_killed_after_the_grace() {
    let mut p = sh("trap '' TERM; echo ready; while true; do sleep 0.05; done");
    p.spawn().unwrap();
    assert_eq!(first_line(&mut p).await, "ready");
    let started = Instant::now();
    p.kill(Duration::from_millis(300));
    let (_, _, status) = run_to_exit(&mut p).await;
    assert_eq!(status, ExitStatus::signal(9));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[tokio::test]
async fn what_a_crashed_server_started_does_not_outlive_it() {
    // The leader exits on its own, leaving a grandchild that holds stdout open.
    let mut p = sh("sleep 60 & echo $!; exit 7");
    p.spawn().unwrap();
    let grandchild: u32 = first_line(&mut p).await.parse().unwrap();
    let (_, _, status) = run_to_exit(&mut p).await;
    assert_eq!(status, ExitStatus::code(7));
    assert!(gone(grandchild).await, "grandchild {grandchild} survived");
}

#[tokio::test]
async fn dropping_the_driver_kills_the_group() {
    let mut p = sh("sleep 60 & echo $!; wait");
    let leader = p.spawn().unwrap();
    let grandchild: u32 = first_line(&mut p).await.parse().unwrap();
    drop(p);
    assert!(gone(grandchild).await, "grandchild {grandchild} survived");
    assert!(gone(leader).await, "leader {leader} survived");
}

#[tokio::test]
async fn after_a_respawn_only_the_new_process_is_heard() {
    let mut p = sh("while true; do echo $$; sleep 0.01; done");
    let first = p.spawn().unwrap();
    assert_eq!(first_line(&mut p).await, first.to_string());
    // Respawning kills the old process; its late output and exit must not leak through.
    let second = p.spawn().unwrap();
    assert_ne!(first, second);
    let mut out = Vec::new();
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        match tokio::time::timeout(Duration::from_millis(50), p.next_event()).await {
            Ok(ProcessEvent::Stdout(b)) => out.extend(b),
            Ok(ProcessEvent::Stderr(_)) | Err(_) => {}
            Ok(ProcessEvent::Exited(s)) => panic!("an exit leaked through: {s}"),
        }
    }
    let text = String::from_utf8(out).unwrap();
    assert!(!text.is_empty());
    assert!(text.lines().all(|l| l == second.to_string()), "{text}");
    assert!(gone(first).await);
    p.kill(Duration::ZERO);
    let (_, _, status) = run_to_exit(&mut p).await;
    assert!(status.signal.is_some(), "{status}");
}
