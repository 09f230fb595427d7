//! A new user's first hour with `mew space`, with the real binary from a scratch folder:
//! README's and docs/spaces.md's coder commands run as written (a relative `--space-dir`),
//! `space up` says which participant did not start and why, Ctrl-C while it waits stops
//! everything and leaves the calling shell alone, no secret lands in a file others can
//! read, a closed stdout ends a command quietly, and a mistyped gateway address says what
//! to change.

use mew_tests::tmux::Tmux;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use mew_tests::model_server::ModelServer;
use mew_tests::scratch::Scratch;
use mew_tests::wait::{until, until_true};
use serde_json::Value;

const MEW: &str = env!("CARGO_BIN_EXE_mew");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The npm packages of `tests/mcp-servers`, reachable from `dir` as a project's own
/// `node_modules` would be: `npx -y @modelcontextprotocol/server-filesystem` then runs the
/// real server without the network (npm is told to stay offline).
fn npm_packages_in(dir: &Path) {
    let modules = repo()
        .join("tests/mcp-servers/node_modules")
        .canonicalize()
        .expect("npm ci in tests/mcp-servers");
    std::os::unix::fs::symlink(modules, dir.join("node_modules")).unwrap();
}

/// `mew` run in `cwd` with a clean model environment and npm offline.
fn mew_in(cwd: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(MEW);
    c.args(args)
        .current_dir(cwd)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("npm_config_offline", "true")
        .stdin(Stdio::null());
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The shell lines of the first ```sh block of `page` holding `marker`, continuations
/// joined.
fn sh_block(page: &str, marker: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join(page)).unwrap();
    let block = text
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.contains(marker))
        .unwrap_or_else(|| panic!("no sh block with {marker:?} in {page}"));
    let mut lines = Vec::new();
    let mut acc = String::new();
    for l in block.lines() {
        if let Some(head) = l.strip_suffix('\\') {
            acc.push_str(head);
            continue;
        }
        acc.push_str(l);
        lines.push(std::mem::take(&mut acc));
    }
    lines
}

/// Runs one documented line the way a shell would (these lines use no quotes): `cd DIR`,
/// `VAR=value ... mew ARGS # comment`. The only changes: the built binary for `mew` (and
/// `target/release/mew`), the scripted model server for the model URL, and `--port 0` for
/// `space up`, so that the test does not depend on port 8080 being free.
fn run_line(line: &str, cwd: &mut PathBuf, model: &ModelServer) -> Option<Output> {
    let line = line.split(" #").next().unwrap().trim();
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [] => return None,
        ["cd", dir] => {
            *cwd = cwd.join(dir);
            return None;
        }
        _ => {}
    }
    let mut env = Vec::new();
    let mut rest = &words[..];
    while let Some((w, tail)) = rest.split_first()
        && let Some((k, v)) = w.split_once('=')
    {
        let v = if k == "OPENAI_BASE_URL" {
            model.base_url.clone()
        } else {
            v.to_owned()
        };
        env.push((k.to_owned(), v));
        rest = tail;
    }
    let (program, args) = rest.split_first().unwrap();
    assert!(
        *program == "mew" || program.ends_with("target/release/mew"),
        "{line}"
    );
    // The terminal interface needs a person at a terminal; the other tests drive it.
    if args.starts_with(&["space", "connect"]) {
        return None;
    }
    let mut args: Vec<&str> = args.to_vec();
    if args.starts_with(&["space", "up"]) {
        args.extend(["--port", "0"]);
    }
    let out = mew_in(cwd, &args).envs(env).output().unwrap();
    assert!(
        out.status.success(),
        "`{line}` in {}: {out:?}",
        cwd.display()
    );
    Some(out)
}

fn status_json(cwd: &Path, dir: &str) -> Value {
    let out = mew_in(cwd, &["space", "status", "--space-dir", dir, "--json"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

fn online(status: &Value, id: &str) -> bool {
    status["participants"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p["id"] == id && p["online"] == true)
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// Every file under `.mew/logs` and `.mew/run` is the user's alone and holds no token.
fn assert_private_and_tokenless(space: &Path) {
    let tokens: Vec<String> = std::fs::read_dir(space.join(".mew/tokens"))
        .unwrap()
        .flatten()
        .map(|f| std::fs::read_to_string(f.path()).unwrap().trim().to_owned())
        .collect();
    assert!(tokens.len() >= 3, "{tokens:?}");
    for folder in [".mew/logs", ".mew/run"] {
        let folder = space.join(folder);
        assert_eq!(mode(&folder), 0o700, "{}", folder.display());
        for f in std::fs::read_dir(&folder).unwrap().flatten() {
            let p = f.path();
            assert_eq!(mode(&p), 0o600, "{}", p.display());
            let body = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
            assert!(!body.contains("#token="), "{}: {body}", p.display());
            for t in &tokens {
                assert!(!body.contains(t.as_str()), "{}", p.display());
            }
        }
    }
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| !r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[test]
fn readme_and_docs_coder_commands_run_as_written_from_a_scratch_folder() {
    let model = ModelServer::start(vec![]);
    for (page, marker, space_dir) in [
        ("README.md", "mew init coder --dir my-space", "my-space"),
        ("docs/spaces.md", "mew init coder --dir my-space", "."),
    ] {
        let root = Scratch::new("up", &format!("doc-{}", page.replace(['/', '.'], "-")));
        npm_packages_in(&root);
        let lines = sh_block(page, marker);
        let mut cwd = root.to_path_buf();
        let mut ran = Vec::new();
        let mut down = None;
        for line in &lines {
            if line.contains("space down") {
                down = Some(line.clone());
                break;
            }
            if let Some(out) = run_line(line, &mut cwd, &model) {
                ran.push((line.clone(), out));
            }
        }
        let up = ran
            .iter()
            .find(|(l, _)| l.contains("space up"))
            .unwrap_or_else(|| panic!("{page}: no space up in {lines:?}"));
        let said = text(&up.1.stdout);
        assert!(said.contains("is up on ws://127.0.0.1:"), "{page}: {said}");
        assert!(
            said.contains("  web:   http://127.0.0.1:") && said.contains("#token="),
            "the link for the person is on the terminal: {said}"
        );
        assert!(up.1.stderr.is_empty(), "{page}: {}", text(&up.1.stderr));

        // Every started participant is online, asked from where the commands ran.
        let st = status_json(&cwd, space_dir);
        for id in ["agent", "filesystem"] {
            assert!(online(&st, id), "{page}: {id} not online: {st}");
            let p = st["participants"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["id"] == id)
                .unwrap();
            assert_eq!(p["process"]["restarts"], 0, "{page}: {st}");
        }
        // The agent read its configuration: its process runs in the space folder, however
        // the folder was named.
        let space = cwd.join(space_dir);
        let agent_log = std::fs::read_to_string(space.join(".mew/logs/agent.log")).unwrap();
        assert!(agent_log.contains("agent starting"), "{agent_log}");

        // A brand-new space says so.
        if let Some((_, out)) = ran.iter().find(|(l, _)| l.contains("space status")) {
            let s = text(&out.stdout);
            assert!(s.contains("new at this start"), "{s}");
            assert!(!s.contains("restored"), "{s}");
        }

        // The audit trail, read from the scratch folder with the same --space-dir.
        let audit = mew_in(
            &root,
            &[
                "audit",
                "--space-dir",
                &space.to_string_lossy(),
                "--decisions",
                "--participant",
                "agent",
            ],
        )
        .output()
        .unwrap();
        assert!(audit.status.success(), "{audit:?}");
        assert!(
            text(&audit.stdout).contains("capability_check"),
            "{}",
            text(&audit.stdout)
        );

        assert_private_and_tokenless(&space);

        let pids: Vec<u64> = st["participants"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["process"]["pid"].as_u64())
            .collect();
        let down = down.expect("the block stops the space");
        let out = run_line(&down, &mut cwd, &model).unwrap();
        assert!(text(&out.stdout).contains("stopped"), "{out:?}");
        assert!(!space.join(".mew/run/space.json").exists());
        until_true("the space's processes end", Duration::from_secs(10), || {
            pids.iter().all(|p| !alive(*p))
        });
    }
}

/// A space whose participants fail in the ways a new user meets: an agent without a model
/// (a configuration error), a filesystem server whose npm package name has a typo (its
/// bridge joins, then its server fails), and a program that never joins; with a near miss
/// of a key. Every started participant keeps the template's `restart_policy: on-failure`.
fn failing_space(root: &Path) -> PathBuf {
    let out = mew_in(root, &["init", "coder", "--dir", "bad"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let space = root.join("bad");
    let path = space.join(".mew/space.yaml");
    let yaml = std::fs::read_to_string(&path)
        .unwrap()
        .replace("server-filesystem", "server-filesytem")
        + "  sleeper:\n    type: local\n    command: sleep\n    args: [\"600\"]\n    auto_strat: true\n    auto_start: true\n";
    std::fs::write(&path, yaml).unwrap();
    // What an earlier version left: a log folder and a supervisor's log others could read.
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(space.join(".mew/logs")).unwrap();
    std::fs::write(space.join(".mew/logs/space.log"), "an earlier run\n").unwrap();
    for (p, m) in [(".mew/logs", 0o755), (".mew/logs/space.log", 0o644)] {
        std::fs::set_permissions(space.join(p), std::fs::Permissions::from_mode(m)).unwrap();
    }
    space
}

#[test]
fn up_names_who_did_not_start_with_their_output_and_exits_non_zero() {
    let root = Scratch::new("up", "failing");
    let space = failing_space(&root);
    let started = Instant::now();
    let up = mew_in(
        &root,
        &[
            "space",
            "up",
            "--space-dir",
            "bad",
            "--detach",
            "--port",
            "0",
            "--wait",
            "4",
        ],
    )
    .output()
    .unwrap();
    let err = text(&up.stderr);
    assert_eq!(up.status.code(), Some(1), "{up:?}");
    // The agent exits 2 at once and is not started again: no need to wait for it.
    assert!(
        err.contains(
            "mew: agent did not start: exit status: 2 (a usage or configuration error: not restarted)"
        ),
        "{err}"
    );
    assert!(
        err.contains("  | mew: no model endpoint: set OPENAI_BASE_URL"),
        "{err}"
    );
    // The bridge was online for a moment, but its server never became ready: it did not
    // start, said with npm's own lines, and is not started again (its policy is on-failure).
    assert!(
        err.contains(
            "mew: filesystem did not start: exit status: 2 (a usage or configuration error: not restarted)"
        ),
        "{err}"
    );
    assert!(
        err.lines().any(|l| l.starts_with("  | ")
            && l.contains("before completing the initialize handshake")
            && l.contains("its last stderr lines: npm error code ENOTCACHED")
            && l.contains("server-filesytem")),
        "{err}"
    );
    assert!(
        err.contains("mew: agent, filesystem, sleeper did not join"),
        "{err}"
    );
    assert!(
        err.contains("mew: sleeper has not joined after 4s (running)"),
        "{err}"
    );
    assert!(
        err.contains("the rest of the space is left running")
            && err.contains("`mew space down --space-dir bad` stops it"),
        "{err}"
    );
    // A near miss of a key reaches the terminal although the supervisor logs to a file.
    assert!(
        err.contains("mew: warning: ")
            && err.contains(
                "participants.sleeper.auto_strat: unknown key, ignored (did you mean `auto_start`?)"
            ),
        "{err}"
    );
    // The bridge's own warnings, quoted in the supervisor's log, are not its warnings.
    assert!(!err.contains("mew: warning: MCP server failed"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    // What works is still said, and runs.
    assert!(
        text(&up.stdout).contains("is up on ws://127.0.0.1:"),
        "{up:?}"
    );
    let st = status_json(&root, "bad");
    assert_eq!(st["running"], true, "{st}");

    // The bridge's server fails on npm's answer; its lines reach `space status`.
    let shown = until(
        "the filesystem server's failure",
        Duration::from_secs(60),
        || {
            let out = mew_in(&root, &["space", "status", "--space-dir", "bad"])
                .output()
                .unwrap();
            let s = text(&out.stdout);
            s.contains("filesystem exited").then_some(s)
        },
    );
    assert!(
        shown.contains(
            "agent exited: exit status: 2 (a usage or configuration error: not restarted)"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("its last stderr lines: npm error code ENOTCACHED"),
        "{shown}"
    );
    assert!(shown.contains("server-filesytem"), "{shown}");
    let st = status_json(&root, "bad");
    let agent = st["participants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "agent")
        .unwrap();
    assert_eq!(agent["process"]["state"], "exited", "{st}");
    assert_eq!(agent["process"]["restarts"], 0, "{st}");
    let fs = st["participants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "filesystem")
        .unwrap();
    assert_eq!(fs["process"]["state"], "exited", "{st}");
    assert_eq!(fs["process"]["restarts"], 0, "{st}");
    assert_private_and_tokenless(&space);

    let down = mew_in(&root, &["space", "down", "--space-dir", "bad"])
        .output()
        .unwrap();
    assert!(down.status.success(), "{down:?}");
}

/// A space of one program that never joins, so that `space up` keeps waiting.
fn waiting_space(root: &Path) -> PathBuf {
    let space = root.join("w");
    std::fs::create_dir_all(space.join(".mew")).unwrap();
    std::fs::write(
        space.join(".mew/space.yaml"),
        "space: {id: w}\nparticipants:\n  human:\n    capabilities: [{kind: \"*\"}]\n  sleeper:\n    type: local\n    command: sleep\n    args: [\"600\"]\n    auto_start: true\n",
    )
    .unwrap();
    space
}

fn run_file(space: &Path) -> Option<Value> {
    let t = std::fs::read_to_string(space.join(".mew/run/space.json")).ok()?;
    serde_json::from_str(&t).ok()
}

#[test]
fn ctrl_c_while_up_waits_stops_the_space_and_leaves_the_calling_shell() {
    let root = Scratch::new("up", "ctrl-c");
    let space = waiting_space(&root);
    for detach in [false, true] {
        let name = if detach { "detach" } else { "fg" };
        let tmux = Tmux::new(format!("mew-up-{name}-{}", std::process::id()), "sh");
        // `bash -c` gives up as if interrupted itself when its child dies of SIGINT; a pane
        // whose command is such a script then closes.
        let script = format!(
            "cd {} && {MEW} space up --space-dir w --port 0{}; echo \"after up: $?\"; sleep 600",
            root.display(),
            if detach { " --detach" } else { "" }
        );
        tmux.start(150, 40, &[], &["bash", "-c", &script]);
        let sleeper = until("the sleeper started", Duration::from_secs(30), || {
            run_file(&space)?["processes"][0]["pid"].as_u64()
        });
        tmux.until(if detach {
            "starting sleeper"
        } else {
            "waiting for sleeper to join"
        });
        let supervisor = run_file(&space).unwrap()["pid"].as_u64().unwrap();
        tmux.cmd(&["send-keys", "-t", "sh", "C-c"]);
        // The shell goes on: the script's next command runs.
        let screen = tmux.until("after up: 0");
        assert!(screen.contains("interrupted"), "{screen}");
        assert!(!screen.contains("panicked"), "{screen}");
        assert!(
            !space.join(".mew/run/space.json").exists(),
            "the run file is removed"
        );
        until_true("the space's processes end", Duration::from_secs(10), || {
            !alive(sleeper) && !alive(supervisor)
        });
    }
}

#[test]
fn a_closed_stdout_ends_commands_quietly() {
    let root = Scratch::new("up", "pipe");
    let gateway = ["gateway", "--port", "0", "--log-level", "off"];
    let templates = ["init", "--list-templates"];
    let init = ["init", "coder", "--dir", "x"];
    let status = ["space", "status", "--space-dir", "x", "--json"];
    for args in [&init[..], &templates[..], &status[..], &gateway[..]] {
        // The reader is gone before the first line is written, as after `| head -1`.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = mew_in(&root, args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert!(out.stderr.is_empty(), "{args:?}: {}", text(&out.stderr));
    }
    // capcheck reads lines and answers each.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut c = mew_in(&root, &["capcheck"])
        .stdin(Stdio::piped())
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut i = c.stdin.take().unwrap();
        let _ = writeln!(
            i,
            r#"{{"capability": {{"kind": "chat"}}, "message": {{"kind": "chat"}}}}"#
        );
    }
    let out = c.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

#[test]
fn gateway_address_mistakes_say_what_to_change() {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut gw = Command::new(MEW)
        .args(["gateway", "--port", "0", "--log-level", "off"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(gw.stdout.take().unwrap()).lines();
    let (mut addr, mut token) = (None, None);
    for line in lines.by_ref() {
        let line = line.unwrap();
        if addr.is_none()
            && let Some(rest) = line.split("ws://").nth(1)
        {
            addr = Some(rest.split('/').next().unwrap().to_owned());
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() >= 3 && w[0] == "human" && w[1] == "token" {
            token = Some(w[2].to_owned());
        }
        if line.starts_with("join with:") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let (addr, token) = (addr.unwrap(), token.unwrap());
    // Something on a port that is not a gateway's: it answers every request with 404.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other_addr = other.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in other.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found",
            );
        }
    });
    let client = |gateway: &str, space: &str| {
        let started = Instant::now();
        let out = Command::new(MEW)
            .args(["client", "--gateway", gateway, "--space", space, "--json"])
            .env("MEW_TOKEN", &token)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        // Not retried: trying again cannot help.
        assert!(started.elapsed() < Duration::from_secs(5), "{out:?}");
        assert_eq!(out.status.code(), Some(5), "{out:?}");
        text(&out.stderr)
    };
    let err = client(&format!("http://{addr}"), "default");
    assert!(
        err.contains("use ws:// (or wss:// with TLS)")
            && err.contains(&format!("e.g. ws://{addr}/ws?space=default")),
        "{err}"
    );
    let err = client(&format!("https://{addr}"), "default");
    assert!(err.contains(&format!("e.g. wss://{addr}/ws")), "{err}");
    let err = client(&format!("ws://{addr}"), "defualt");
    assert!(
        err.contains(
            "the gateway there serves no space \"defualt\" (HTTP 404): check the space id"
        ),
        "{err}"
    );
    let err = client(&format!("ws://{other_addr}"), "default");
    assert!(
        err.contains("nothing there accepts a MEW WebSocket (HTTP 404): check the host and port"),
        "{err}"
    );
    let _ = gw.kill();
    let _ = gw.wait();
}

/// The subcommands and options of `mew --help` (recursively: `mew space --help` ...).
fn help_of(path: &[&str]) -> String {
    let out = Command::new(MEW).args(path).arg("--help").output().unwrap();
    assert!(out.status.success(), "{path:?}: {out:?}");
    text(&out.stdout)
}

/// The names listed under `Commands:` of a help text (without `help`).
fn commands_in(help: &str) -> Vec<String> {
    help.split("Commands:\n")
        .nth(1)
        .map(|rest| {
            rest.lines()
                .take_while(|l| l.starts_with("  "))
                .filter_map(|l| l.split_whitespace().next())
                .filter(|c| *c != "help")
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_cli_synopsis_shows_every_command_and_only_options_that_exist() {
    let page = std::fs::read_to_string(repo().join("docs/cli.md")).unwrap();
    let synopsis: Vec<&str> = page
        .split("```sh\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap()
        .lines()
        .collect();
    let flag = regex::Regex::new(r"--[a-z][a-z-]*").unwrap();
    let mut shown = Vec::new();
    for line in &synopsis {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.first(), Some(&"mew"), "{line}");
        let path: Vec<&str> = words[1..]
            .iter()
            .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            .filter(|w| !w.starts_with('-'))
            .copied()
            .collect();
        let help = help_of(&path);
        // What follows `--` is the MCP server's command line, not mew's.
        let own = line.split(" -- ").next().unwrap();
        for f in flag.find_iter(own) {
            assert!(
                help.contains(&format!("{} ", f.as_str()))
                    || help.contains(&format!("{}\n", f.as_str())),
                "`{line}`: {} is not an option of `mew {}`",
                f.as_str(),
                path.join(" ")
            );
        }
        shown.push(path.join(" "));
    }
    // Every command, and every `mew space`, `mew automation` and `mew tools` subcommand, is
    // in the synopsis.
    let top = commands_in(&help_of(&[]));
    assert!(top.contains(&"space".to_owned()), "{top:?}");
    for c in top {
        let subs = commands_in(&help_of(&[&c]));
        if subs.is_empty() || c == "gateway" {
            assert!(
                shown
                    .iter()
                    .any(|s| s == &c || s.starts_with(&format!("{c} "))),
                "`mew {c}` is not in docs/cli.md's synopsis"
            );
        }
        for sub in subs {
            let full = format!("{c} {sub}");
            assert!(
                shown.contains(&full) || c == "gateway",
                "`mew {full}` is not in docs/cli.md's synopsis"
            );
        }
    }
}
