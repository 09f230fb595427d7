//! An allowed `tools/call` through a space's `/mcp` (host session -> gateway -> bridge ->
//! MCP server over Streamable HTTP and back) against the same call to the server directly,
//! measured from outside: median and p99 round trip, sequential, one call at a time.
//!
//! ```text
//! cargo build --release -p mew-cli && cargo bench -p mew-benches --bench front
//! ```
//!
//! The program starts what it measures as child processes, each in its own process group,
//! ended when it finishes, panics or is interrupted: the conformance fixture
//! (`tests/mcp-conformance/everything-server`, on the Node of `tests/mcp-clients`; both need
//! `npm ci`), and a space whose participant `fixture` bridges it and whose `/mcp` admits
//! hosts on this machine (the release `mew` beside this program, or `$MEW_BIN`).
//!
//! Both are asked the same way, over HTTP/1.1 as a host does: one `initialize` (2025-11-25,
//! the revision the bridge offers the fixture too), `notifications/initialized`, then calls
//! of the fixture's `test_simple_text`, direct and through the space alternately so that
//! both see the same machine. Two cases: each call on a fresh connection (`Connection:
//! close`), and all calls on one kept-alive connection (as hosts keep theirs). 100
//! unmeasured calls first, then `MEW_FRONT_N` (2000) measured per case and side.
//! `MEW_FRONT_DIRECT` / `MEW_FRONT_SPACE` measure servers already running instead.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The revision of every session here.
const REVISION: &str = "2025-11-25";

// ------------------------------------------------------------------ child processes

/// Process groups to end on SIGINT/SIGTERM/SIGHUP (0: none).
static GROUPS: [AtomicI32; 2] = [AtomicI32::new(0), AtomicI32::new(0)];

/// Takes SIGINT, SIGTERM and SIGHUP in a thread of its own, which ends the children's
/// groups and then the program. Called before any other thread starts, so that every
/// thread has them blocked (a child starts with none blocked).
fn end_children_on_signals() {
    use nix::sys::signal::{SigSet, Signal, killpg};
    let mut set = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(s);
    }
    set.thread_block().expect("block the signals");
    std::thread::spawn(move || {
        let sig = set.wait().unwrap_or(Signal::SIGTERM);
        // SIGTERM first: the gateway then stops the bridge it started (in a group of its
        // own) before it ends; whatever is left of either tree is killed.
        let groups: Vec<u32> = GROUPS
            .iter()
            .map(|g| g.load(Ordering::SeqCst))
            .filter(|pg| *pg > 0)
            .flat_map(|pg| {
                let mut all = descendants(pg as u32);
                all.push(pg as u32);
                all
            })
            .collect();
        for end in [Signal::SIGTERM, Signal::SIGKILL] {
            for pg in &groups {
                let _ = killpg(nix::unistd::Pid::from_raw(*pg as i32), end);
            }
            std::thread::sleep(Duration::from_secs(3));
        }
        std::process::exit(128 + sig as i32);
    });
}

/// A child in its own process group, ended with SIGTERM (then SIGKILL) when dropped.
struct Group {
    child: Child,
    slot: usize,
}

impl Group {
    fn spawn(mut cmd: Command, slot: usize) -> Group {
        let child = cmd
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
        GROUPS[slot].store(child.id() as i32, Ordering::SeqCst);
        Group { child, slot }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, killpg};
        // The gateway's bridge runs in a group of its own: the gateway stops it on SIGTERM,
        // and it is killed here if it outlives the gateway.
        let strays = descendants(self.child.id());
        let pg = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = killpg(pg, Signal::SIGTERM);
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = killpg(pg, Signal::SIGKILL);
        let _ = self.child.wait();
        GROUPS[self.slot].store(0, Ordering::SeqCst);
        let alive = descendants(1);
        for p in strays.into_iter().filter(|p| alive.contains(p)) {
            let _ = killpg(nix::unistd::Pid::from_raw(p as i32), Signal::SIGKILL);
        }
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn wait_listening(port: u16, what: &str, child: &mut Group) {
    let end = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.child.try_wait() {
            panic!("{what} exited: {status}");
        }
        assert!(Instant::now() < end, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The conformance fixture on a free port; its `/mcp` URL.
fn start_fixture() -> (Group, String) {
    let dir = repo().join("tests/mcp-conformance/everything-server");
    let tsx = dir.join("node_modules/.bin/tsx");
    let node = repo().join("tests/mcp-clients/node_modules/.bin/node");
    for (p, at) in [(&tsx, &dir), (&node, &repo().join("tests/mcp-clients"))] {
        assert!(
            p.exists(),
            "{} missing: run `npm ci` in {}",
            p.display(),
            at.display()
        );
    }
    let node_dir = std::fs::canonicalize(&node)
        .expect("node")
        .parent()
        .expect("node's folder")
        .to_owned();
    let path = format!(
        "{}:{}",
        node_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let port = free_port();
    let mut cmd = Command::new(tsx);
    cmd.arg("everything-server.ts")
        .current_dir(&dir)
        .env("PORT", port.to_string())
        .env("PATH", path)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut g = Group::spawn(cmd, 0);
    wait_listening(port, "the fixture", &mut g);
    (g, format!("http://localhost:{port}/mcp"))
}

/// A space (the configuration of `tests/mcp-conformance/serve-space`) bridging `fixture`,
/// ready once the bridge is in; its `/mcp` URL.
fn start_space(fixture: &str, dir: &Path) -> (Group, String) {
    let yaml = format!(
        r#"space: {{id: bench}}
participants:
  host:
    tokens: [host-token]
    capabilities: [{{kind: "mcp/request"}}, {{kind: "mcp/response"}}, {{kind: "mcp/proposal"}}, {{kind: "chat"}}]
    connections: 16
  fixture:
    type: mcp-bridge
    auto_start: true
    tokens: [fixture-token]
    capabilities: [{{kind: "mcp/request"}}, {{kind: "mcp/response"}}, {{kind: "participant/status"}}, {{kind: "chat"}}]
    mcp_server: {{url: "{fixture}"}}
    bridge_config: {{init_timeout: 20000, protocol_version: "{REVISION}"}}
gateway:
  durability: off
  rate_limit: off
  mcp: {{loopback_as: host}}
"#
    );
    std::fs::create_dir_all(dir).expect("the space's folder");
    std::fs::write(dir.join("space.yaml"), yaml).expect("space.yaml");
    let port = free_port();
    let mut cmd = Command::new(mew_benches::mew_bin());
    cmd.args(["gateway", "--config"])
        .arg(dir.join("space.yaml"))
        .args(["--port", &port.to_string(), "--log-level", "warn"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let mut g = Group::spawn(cmd, 1);
    wait_listening(port, "the gateway", &mut g);
    let end = Instant::now() + Duration::from_secs(30);
    let url = format!("http://localhost:{port}/participants");
    loop {
        let mut c = Client::new(&url, false);
        let r = c.request("GET", &[("Authorization", "Bearer host-token")], "");
        if r.body.contains("\"fixture\"") {
            break;
        }
        assert!(Instant::now() < end, "the bridge did not join: {}", r.body);
        std::thread::sleep(Duration::from_millis(100));
    }
    (g, format!("http://localhost:{port}/mcp"))
}

// ------------------------------------------------------------------ the host's HTTP/1.1

/// An answer: its head and its body (an event stream's whole text).
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One host's connection to one URL: a new one per request, or one kept alive across
/// requests (opened again only when the server closes it).
struct Client {
    addr: String,
    path: String,
    keep: bool,
    stream: Option<TcpStream>,
    /// Bytes read past the last answer.
    buf: Vec<u8>,
    /// Connections opened.
    opened: usize,
}

impl Client {
    fn new(url: &str, keep: bool) -> Client {
        let rest = url.strip_prefix("http://").expect("an http:// URL");
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        Client {
            addr: authority.replace("localhost", "127.0.0.1"),
            path: format!("/{path}"),
            keep,
            stream: None,
            buf: Vec::new(),
            opened: 0,
        }
    }

    fn request(&mut self, method: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        use std::fmt::Write as _;
        let mut req = format!(
            "{method} {} HTTP/1.1\r\nHost: {}\r\n",
            self.path,
            self.addr.replace("127.0.0.1", "localhost")
        );
        for (k, v) in headers {
            let _ = write!(req, "{k}: {v}\r\n");
        }
        if !self.keep {
            req.push_str("Connection: close\r\n");
        }
        let _ = write!(req, "Content-Length: {}\r\n\r\n{body}", body.len());
        // A kept connection the server closed while idle fails its first write or read:
        // the request is sent again, once, on a new connection.
        let mut retried = false;
        loop {
            let reused = self.stream.is_some();
            if !reused {
                let s = TcpStream::connect(&self.addr).expect("connect");
                s.set_nodelay(true).expect("nodelay");
                s.set_read_timeout(Some(Duration::from_secs(30)))
                    .expect("timeout");
                self.stream = Some(s);
                self.buf.clear();
                self.opened += 1;
            }
            match self.exchange(req.as_bytes()) {
                Ok(r) => return r,
                Err(_) if reused && !retried => {
                    retried = true;
                    self.stream = None;
                }
                Err(e) => panic!("{method} {}: {e}", self.path),
            }
        }
    }

    fn exchange(&mut self, req: &[u8]) -> std::io::Result<Reply> {
        let s = self.stream.as_mut().expect("a connection");
        s.write_all(req)?;
        let (status, headers, head_len) = loop {
            let mut hs = [httparse::EMPTY_HEADER; 32];
            let mut r = httparse::Response::new(&mut hs);
            if let httparse::Status::Complete(n) =
                r.parse(&self.buf).map_err(std::io::Error::other)?
            {
                let headers: Vec<(String, String)> = r
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_owned(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                break (r.code.unwrap_or(0), headers, n);
            }
            fill(s, &mut self.buf)?;
        };
        self.buf.drain(..head_len);
        let mut reply = Reply {
            status,
            headers,
            body: String::new(),
        };
        let mut body = Vec::new();
        let chunked = reply
            .header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        let mut until_close = false;
        if chunked {
            loop {
                let line_end = loop {
                    if let Some(i) = memchr::memmem::find(&self.buf, b"\r\n") {
                        break i;
                    }
                    fill(s, &mut self.buf)?;
                };
                let size_text = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
                let size =
                    usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                        .map_err(|_| {
                            std::io::Error::other(format!("bad chunk size {size_text:?}"))
                        })?;
                while self.buf.len() < line_end + 2 + size + 2 {
                    fill(s, &mut self.buf)?;
                }
                body.extend_from_slice(&self.buf[line_end + 2..line_end + 2 + size]);
                self.buf.drain(..line_end + 2 + size + 2);
                if size == 0 {
                    break;
                }
            }
        } else if let Some(len) = reply.header("content-length") {
            let len: usize = len.trim().parse().map_err(std::io::Error::other)?;
            while self.buf.len() < len {
                fill(s, &mut self.buf)?;
            }
            body.extend(self.buf.drain(..len));
        } else {
            until_close = true;
            s.read_to_end(&mut self.buf)?;
            body.append(&mut self.buf);
        }
        reply.body = String::from_utf8_lossy(&body).into_owned();
        let closes = reply
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        if until_close || closes || !self.keep {
            self.stream = None;
        }
        Ok(reply)
    }
}

/// Reads more of the stream into `buf`; the end of the stream is an error here.
fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let mut chunk = [0u8; 16 * 1024];
    match s.read(&mut chunk)? {
        0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
        n => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

// ------------------------------------------------------------------ the measurement

/// An MCP host's session at one URL.
struct Host {
    client: Client,
    session: String,
    next_id: u64,
}

impl Host {
    fn open(url: &str, keep: bool) -> Host {
        let mut client = Client::new(url, keep);
        let init = format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{REVISION}","capabilities":{{}},"clientInfo":{{"name":"bench","version":"1"}}}}}}"#
        );
        let r = client.request("POST", &Self::headers(None), &init);
        assert_eq!(r.status, 200, "initialize at {url}: {}", r.body);
        let session = r
            .header("mcp-session-id")
            .unwrap_or_else(|| panic!("no session id from {url}"))
            .to_owned();
        let r = client.request(
            "POST",
            &Self::headers(Some(&session)),
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        );
        assert_eq!(r.status, 202, "notifications/initialized at {url}");
        Host {
            client,
            session,
            next_id: 1,
        }
    }

    /// Ends the session, as a host does when it quits; the connections its calls opened.
    fn close(mut self) -> usize {
        let opened = self.client.opened;
        let session = self.session.clone();
        let r = self
            .client
            .request("DELETE", &[("Mcp-Session-Id", &session)], "");
        assert!(r.status < 300, "DELETE: {} {}", r.status, r.body);
        opened
    }

    fn headers(session: Option<&str>) -> Vec<(&'static str, &str)> {
        let mut h = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", REVISION),
        ];
        if let Some(s) = session {
            h.push(("Mcp-Session-Id", s));
        }
        h
    }

    /// One `tools/call`, timed from the request's first byte (or the connect) to the
    /// answer's last.
    fn call(&mut self) -> Duration {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"test_simple_text","arguments":{{}}}}}}"#,
            self.next_id
        );
        self.next_id += 1;
        let t = Instant::now();
        let session = self.session.clone();
        let r = self
            .client
            .request("POST", &Self::headers(Some(&session)), &body);
        let d = t.elapsed();
        assert!(
            r.status == 200 && r.body.contains("simple text response"),
            "{} {}",
            r.status,
            r.body
        );
        d
    }
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// Every process: (pid, parent, user plus system CPU ticks), from `/proc`.
fn processes() -> Vec<(u32, u32, u64)> {
    let mut procs = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // The fields after the command's closing parenthesis: state, ppid, ...; utime and
        // stime are the 12th and 13th, in clock ticks.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
        procs.push((pid, f.get(1).copied().unwrap_or(0) as u32, ticks));
    }
    procs
}

/// The processes below `root` (not `root` itself), alive now.
fn descendants(root: u32) -> Vec<u32> {
    let procs = processes();
    let mut tree = vec![root];
    let mut grew = true;
    while grew {
        grew = false;
        for (pid, parent, _) in &procs {
            if tree.contains(parent) && !tree.contains(pid) {
                tree.push(*pid);
                grew = true;
            }
        }
    }
    tree.remove(0);
    tree
}

/// User plus system CPU time of a process and its descendants alive now (the gateway and
/// the bridge it started).
fn tree_cpu(root: u32) -> Duration {
    let mut tree = descendants(root);
    tree.push(root);
    let ticks: u64 = processes()
        .iter()
        .filter(|(pid, _, _)| tree.contains(pid))
        .map(|(_, _, t)| t)
        .sum();
    // Linux counts them in USER_HZ, 100 a second on every architecture it runs on.
    Duration::from_millis(ticks * 10)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn measure(case: &str, keep: bool, direct: &str, space: &str, n: usize, gateway: Option<u32>) {
    let mut d = Host::open(direct, keep);
    let mut s = Host::open(space, keep);
    for _ in 0..100 {
        d.call();
        s.call();
    }
    let (mut dt, mut st) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let load_before = loadavg();
    let cpu_before = gateway.map(tree_cpu);
    for _ in 0..n {
        dt.push(d.call());
        st.push(s.call());
    }
    let (d_opened, s_opened) = (d.close(), s.close());
    let gateway_cpu = gateway
        .zip(cpu_before)
        .map(|(p, b)| tree_cpu(p).saturating_sub(b));
    dt.sort();
    st.sort();
    let (dm, dp) = (pct(&dt, 0.5), pct(&dt, 0.99));
    let (sm, sp) = (pct(&st, 0.5), pct(&st, 0.99));
    println!(
        "{case} ({n} calls each, load {load_before} -> {}):",
        loadavg()
    );
    println!(
        "  direct:        median {}, p99 {} ({} connections)",
        ms(dm),
        ms(dp),
        d_opened
    );
    println!(
        "  through /mcp:  median {}, p99 {} ({} connections)",
        ms(sm),
        ms(sp),
        s_opened
    );
    println!(
        "  ratio: {:.2}x at the median, {:.2}x at p99",
        sm.as_secs_f64() / dm.as_secs_f64(),
        sp.as_secs_f64() / dp.as_secs_f64()
    );
    if let Some(c) = gateway_cpu {
        println!(
            "  the space's CPU (gateway and bridge) per call through it: {}",
            ms(c / n as u32)
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter naming neither case skips this program.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter
        .as_deref()
        .is_some_and(|f| !"front fresh kept-alive".contains(f))
    {
        return;
    }
    end_children_on_signals();
    let n = std::env::var("MEW_FRONT_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let dir = std::env::temp_dir().join(format!("mew-front-bench-{}", std::process::id()));
    let (_fixture, _space, direct, space, gateway) = match (
        std::env::var("MEW_FRONT_DIRECT"),
        std::env::var("MEW_FRONT_SPACE"),
    ) {
        (Ok(d), Ok(s)) => (None, None, d, s, None),
        _ => {
            let (f, direct) = start_fixture();
            let (g, space) = start_space(&direct, &dir);
            let pid = g.pid();
            (Some(f), Some(g), direct, space, Some(pid))
        }
    };
    println!("direct: {direct}\nthrough the space: {space}");
    measure(
        "fresh connection per call",
        false,
        &direct,
        &space,
        n,
        gateway,
    );
    measure("kept-alive connection", true, &direct, &space, n, gateway);
    let _ = std::fs::remove_dir_all(&dir);
}
