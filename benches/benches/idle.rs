//! Memory per idle joined connection of an already running gateway, measured from outside.
//!
//! Joins N connections to a gateway (anonymous joins, one participant each), waits until the
//! join storm is written out and the gateway is idle, and reports the growth of the gateway
//! process's resident memory per connection. Then one more participant sends a chat and the
//! program checks that every idle connection received it.
//!
//! Several gateways (the nodes of a cluster serving one space) take a comma-separated
//! `MEW_IDLE_GATEWAY`: connection `i` goes to gateway `i mod k`, and the memory reported is
//! the growth of all their processes together. The connections are held by child processes
//! of this program (`MEW_IDLE_PROCESSES`, by default one per 15,000 connections), since one
//! process may hold only so many open files.
//!
//! The space must allow anonymous joins by at least N + 1 participants, with `chat` among the
//! default capabilities, and the server must accept N + 1 connections:
//!
//! ```text
//! printf 'space: {id: idle}\nlogging: {enabled: false}\ndefaults: {capabilities: [{kind: chat}]}\ngateway: {anonymous_joins: true, max_participants: 60000, limits: {max_connections: 20000}}\n' > /tmp/idle.yaml
//! mew gateway --config /tmp/idle.yaml --port 8090 &
//! MEW_IDLE_GATEWAY=127.0.0.1:8090 MEW_IDLE_N=10000 cargo bench -p mew-benches --bench idle
//! ```
//!
//! (docs/benchmarks.md has the cluster of three nodes that holds 50,000.)
//!
//! Environment: `MEW_IDLE_GATEWAY` (`127.0.0.1:8080`, or several separated by commas),
//! `MEW_IDLE_SPACE` (`idle`), `MEW_IDLE_N` (1000), `MEW_IDLE_PID` (the gateways' processes,
//! separated by commas; found from their listening ports when unset), `MEW_IDLE_PROCESSES`
//! (client processes), `MEW_IDLE_JOINERS` (connections joining at a time in each client
//! process, each waiting for its welcome, 2),
//! `MEW_IDLE_PER_ADDRESS` (connections per loopback source address 127.0.x.y, 900: under
//! the gateway's per-address limit), `MEW_IDLE_HOLD` (seconds to keep the connections open
//! after the report, 0), `MEW_IDLE_QUIET` (percent of a core under which a gateway process
//! counts as quiet, 2).
//!
//! The idle connections read what they are sent at the TCP level and only look for the
//! probe chat's marker in it, so that the clients' cost stays small beside the gateway's.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

#[path = "support/mod.rs"]
mod support;

use support::{env_usize, health, rss_kib};

/// One client frame: text, final, masked with a zero key (the payload stays readable).
fn client_text(payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x81u8];
    match payload.len() {
        n if n < 126 => f.push(0x80 | n as u8),
        n if n <= 0xffff => {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(0x80 | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(payload);
    f
}

/// The loopback source address of connection `i`.
fn source(i: usize, per_address: usize) -> IpAddr {
    let k = i / per_address.max(1);
    IpAddr::V4(Ipv4Addr::new(
        127,
        1 + (k / 250) as u8,
        0,
        1 + (k % 250) as u8,
    ))
}

/// Opens a WebSocket from `from`, sends the join; returns the stream after the 101.
async fn open(
    gw: SocketAddr,
    from: IpAddr,
    space: &str,
    id: &str,
) -> Result<(TcpStream, Frames), String> {
    let sock = TcpSocket::new_v4().map_err(|e| e.to_string())?;
    sock.bind(SocketAddr::new(from, 0))
        .map_err(|e| format!("bind {from}: {e}"))?;
    let mut s = sock.connect(gw).await.map_err(|e| e.to_string())?;
    let _ = s.set_nodelay(true);
    let head = format!(
        "GET /ws?space={space} HTTP/1.1\r\nHost: {gw}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    s.write_all(head.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    // The 101 head alone: read byte by byte up to its end (the welcome follows the join).
    let mut got = Vec::with_capacity(256);
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.map_err(|e| e.to_string())? == 0 {
            return Err(format!("closed: {}", String::from_utf8_lossy(&got)));
        }
        got.push(b[0]);
        if got.len() > 4096 {
            return Err("oversized response head".into());
        }
    }
    if !got.starts_with(b"HTTP/1.1 101") {
        return Err(String::from_utf8_lossy(&got).into_owned());
    }
    let join = serde_json::json!({"type": "join", "participantId": id, "space": space});
    s.write_all(&client_text(join.to_string().as_bytes()))
        .await
        .map_err(|e| e.to_string())?;
    // Until the welcome: joins then arrive no faster than the gateway answers them, as a
    // crowd would, rather than piling up presence announcements it cannot write in time.
    let want = b"\"system/welcome\"";
    let mut buf = vec![0u8; 4096];
    let mut have = 0;
    let mut frames = Frames::default();
    loop {
        let n = s.read(&mut buf[have..]).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed before the welcome".into());
        }
        let pongs = frames.feed(&buf[have..have + n]);
        s.write_all(&pongs).await.map_err(|e| e.to_string())?;
        let end = have + n;
        if memchr::memmem::find(&buf[..end], want).is_some() {
            return Ok((s, frames));
        }
        let tail = end.min(want.len() - 1);
        buf.copy_within(end - tail..end, 0);
        have = tail;
    }
}

/// Follows the server's frames through a byte stream: pings are answered (a gateway closes
/// connections that stay silent past its idle timeout), everything else is skipped.
#[derive(Default)]
struct Frames {
    /// Bytes of the current frame's head read so far.
    head: Vec<u8>,
    /// Payload bytes of the current frame still to come.
    left: u64,
    /// The current frame is a ping: its payload so far.
    ping: Option<Vec<u8>>,
}

impl Frames {
    /// Takes `data`; returns the pongs to send.
    fn feed(&mut self, mut data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        while !data.is_empty() {
            if self.left > 0 {
                let n = (self.left as usize).min(data.len());
                if let Some(p) = &mut self.ping {
                    p.extend_from_slice(&data[..n]);
                }
                self.left -= n as u64;
                data = &data[n..];
            } else {
                self.head.push(data[0]);
                data = &data[1..];
                let need = match self.head.get(1).map(|b| b & 0x7f) {
                    None => continue,
                    Some(126) => 4,
                    Some(127) => 10,
                    Some(_) => 2,
                };
                if self.head.len() < need {
                    continue;
                }
                self.left = match need {
                    4 => u64::from(u16::from_be_bytes([self.head[2], self.head[3]])),
                    10 => u64::from_be_bytes(self.head[2..10].try_into().unwrap_or_default()),
                    _ => u64::from(self.head[1] & 0x7f),
                };
                self.ping = (self.head[0] & 0x0f == 0x9).then(Vec::new);
                self.head.clear();
            }
            if self.left == 0
                && let Some(p) = self.ping.take()
            {
                let mut pong = client_text(&p);
                pong[0] = 0x8a;
                out.extend_from_slice(&pong);
            }
        }
        out
    }
}

/// Reads until the connection ends, answering pings; counts it in `seen` once `marker`
/// went by.
async fn drain(
    (mut s, mut frames): (TcpStream, Frames),
    marker: Arc<Vec<u8>>,
    seen: Arc<AtomicUsize>,
) {
    let mut buf = vec![0u8; 4096];
    let keep = marker.len() - 1;
    let mut have = 0;
    let mut found = false;
    loop {
        let n = match s.read(&mut buf[have..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let pongs = frames.feed(&buf[have..have + n]);
        if !pongs.is_empty() && s.write_all(&pongs).await.is_err() {
            return;
        }
        let end = have + n;
        if !found && memchr::memmem::find(&buf[..end], &marker).is_some() {
            found = true;
            seen.fetch_add(1, Ordering::Relaxed);
        }
        // Keep the tail, in case the marker straddles two reads.
        let tail = end.min(keep);
        buf.copy_within(end - tail..end, 0);
        have = tail;
    }
}

/// The process listening on `port` (Linux: its socket's inode among processes' files).
fn listener_pid(port: u16) -> Option<u32> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?
        + &std::fs::read_to_string("/proc/net/tcp6").unwrap_or_default();
    let inode = table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
        (local_port == port && f.get(3) == Some(&"0A")).then(|| f.get(9).map(|s| s.to_string()))?
    })?;
    let want = format!("socket:[{inode}]");
    for p in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == want) {
                return Some(pid);
            }
        }
    }
    None
}

/// CPU ticks (user + system) a process has used.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

/// Waits until the process used at most `percent` of a core over a second (at most until
/// `deadline`).
async fn until_quiet(pid: u32, percent: u64, deadline: Instant) {
    let mut last = cpu_ticks(pid);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = cpu_ticks(pid);
        // Ticks are 1/100 s: 2 ticks in a second is 2% of a core.
        if now.saturating_sub(last) <= percent {
            return;
        }
        last = now;
    }
}

fn raise_fd_limit(want: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= want {
        return;
    }
    // Raising the hard limit needs privileges; otherwise go as far as it allows.
    if setrlimit(Resource::RLIMIT_NOFILE, want, want.max(hard)).is_err() {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, want.min(hard), hard);
    }
    if let Ok((soft, _)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < want
    {
        eprintln!(
            "warning: open files limited to {soft} (wanted {want}); raise `ulimit -n` for the gateway too"
        );
    }
}

/// The gateways' addresses (`MEW_IDLE_GATEWAY`, separated by commas).
fn gateways() -> Vec<SocketAddr> {
    std::env::var("MEW_IDLE_GATEWAY")
        .unwrap_or_else(|_| "127.0.0.1:8080".into())
        .split(',')
        .map(|a| {
            a.trim()
                .trim_start_matches("ws://")
                .trim_end_matches('/')
                .parse()
                .expect("MEW_IDLE_GATEWAY is host:port[,host:port...]")
        })
        .collect()
}

/// A worker: joins connections `first..first + n` and holds them until its standard input
/// closes; prints `joined OK FAILED [ERROR]` once, then `seen K` whenever more of its
/// connections have seen the marker.
fn worker(first: usize, n: usize) {
    let gws = gateways();
    let space = std::env::var("MEW_IDLE_SPACE").unwrap_or_else(|_| "idle".into());
    let joiners = env_usize("MEW_IDLE_JOINERS", 2).max(1);
    let per_address = env_usize("MEW_IDLE_PER_ADDRESS", 900);
    let tag = std::env::var("MEW_IDLE_TAG").unwrap_or_default();
    let marker = Arc::new(
        std::env::var("MEW_IDLE_MARKER")
            .unwrap_or_default()
            .into_bytes(),
    );
    raise_fd_limit(n as u64 + 256);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        let seen = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
        let mut tasks = Vec::new();
        for w in 0..joiners {
            let (marker, seen, failed, first_error) = (
                marker.clone(),
                seen.clone(),
                failed.clone(),
                first_error.clone(),
            );
            let (space, gws, tag) = (space.clone(), gws.clone(), tag.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = first + w;
                while i < first + n {
                    let gw = gws[i % gws.len()];
                    let id = format!("idle-{tag}-{i}");
                    // A join the space never answers (a node declared gone) counts as failed.
                    let joined = tokio::time::timeout(
                        Duration::from_secs(60),
                        open(gw, source(i, per_address), &space, &id),
                    )
                    .await
                    .unwrap_or_else(|_| Err("no welcome within 60 s".into()));
                    match joined {
                        Ok(s) => {
                            tokio::spawn(drain(s, marker.clone(), seen.clone()));
                        }
                        Err(e) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            first_error.lock().unwrap().get_or_insert(e);
                        }
                    }
                    i += joiners;
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        let f = failed.load(Ordering::Relaxed);
        let e = first_error.lock().unwrap().take().unwrap_or_default();
        println!(
            "joined {} {f} {}",
            n - f,
            e.lines().next().unwrap_or_default()
        );
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = done.clone();
        // Until the coordinator closes this process's standard input.
        std::thread::spawn(move || {
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
            d.store(true, Ordering::Relaxed);
        });
        let mut told = 0;
        while !done.load(Ordering::Relaxed) {
            let k = seen.load(Ordering::Relaxed);
            if k != told {
                println!("seen {k}");
                told = k;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// What the coordinator hears from its workers.
#[derive(Default)]
struct Reports {
    joined: Vec<Option<(usize, usize, String)>>,
    seen: Vec<usize>,
}

fn main() {
    if let Ok(w) = std::env::var("MEW_IDLE_WORKER") {
        let (first, n) = w.split_once(':').expect("MEW_IDLE_WORKER is FIRST:N");
        worker(
            first.parse().expect("a number"),
            n.parse().expect("a number"),
        );
        return;
    }
    // `cargo bench` passes `--bench`; this program takes its settings from the environment.
    let gws = gateways();
    let space = std::env::var("MEW_IDLE_SPACE").unwrap_or_else(|_| "idle".into());
    let n = env_usize("MEW_IDLE_N", 1000);
    let per_address = env_usize("MEW_IDLE_PER_ADDRESS", 900);
    let hold = env_usize("MEW_IDLE_HOLD", 0);
    // A cluster's nodes share every pong through the log: busier at rest than one gateway.
    let quiet = env_usize("MEW_IDLE_QUIET", 2) as u64;
    let procs = env_usize("MEW_IDLE_PROCESSES", n.div_ceil(15_000)).clamp(1, n.max(1));
    let pids: Vec<u32> = match std::env::var("MEW_IDLE_PID") {
        Ok(p) => p
            .split(',')
            .map(|p| {
                p.trim()
                    .parse()
                    .expect("MEW_IDLE_PID is a list of process ids")
            })
            .collect(),
        Err(_) => gws
            .iter()
            .map(|g| {
                listener_pid(g.port())
                    .expect("a gateway listening on each MEW_IDLE_GATEWAY port (or MEW_IDLE_PID)")
            })
            .collect(),
    };
    let rss = |pids: &[u32]| pids.iter().map(|p| rss_kib(*p)).sum::<u64>();
    // Ids unique to this run, so that a gateway can be measured again without a restart.
    let tag = std::process::id();
    let marker = format!("probe-{tag}-marker");
    let before = rss(&pids);
    let t = Instant::now();
    let reports = Arc::new(std::sync::Mutex::new(Reports {
        joined: vec![None; procs],
        seen: vec![0; procs],
    }));
    let exe = std::env::current_exe().expect("this program's path");
    let mut children = Vec::new();
    for k in 0..procs {
        let first = n * k / procs;
        let count = n * (k + 1) / procs - first;
        let mut child = std::process::Command::new(&exe)
            .env("MEW_IDLE_WORKER", format!("{first}:{count}"))
            .env("MEW_IDLE_TAG", tag.to_string())
            .env("MEW_IDLE_MARKER", &marker)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("a worker process");
        let out = child.stdout.take().expect("piped");
        let reports = reports.clone();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(out)).map_while(Result::ok)
            {
                let mut r = reports.lock().unwrap();
                let mut f = line.splitn(4, ' ');
                match f.next() {
                    Some("joined") => {
                        let ok = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
                        let failed = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
                        r.joined[k] = Some((ok, failed, f.next().unwrap_or_default().to_owned()));
                    }
                    Some("seen") => r.seen[k] = f.next().and_then(|v| v.parse().ok()).unwrap_or(0),
                    _ => {}
                }
            }
        });
        children.push(child);
    }
    while reports.lock().unwrap().joined.iter().any(Option::is_none) {
        if children
            .iter_mut()
            .any(|c| c.try_wait().ok().flatten().is_some())
        {
            panic!("a worker process ended before its connections joined");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let join_time = t.elapsed();
    let (joined, failed, first_error) = {
        let r = reports.lock().unwrap();
        let list: Vec<_> = r.joined.iter().flatten().collect();
        (
            list.iter().map(|j| j.0).sum::<usize>(),
            list.iter().map(|j| j.1).sum::<usize>(),
            list.iter().map(|j| j.2.clone()).find(|e| !e.is_empty()),
        )
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        // The storm of announcements drains; then every gateway goes quiet.
        let deadline = Instant::now() + Duration::from_secs(600);
        for p in &pids {
            until_quiet(*p, quiet, deadline).await;
        }
        let settled = t.elapsed();
        let hs: Vec<_> = gws.iter().map(|g| health(*g)).collect();
        let after = rss(&pids);
        // A replicated space's nodes each count every connection of the space.
        let conns = hs.iter().filter_map(|h| h["connections"].as_u64()).max();
        let online = hs.iter().filter_map(|h| h["participants_online"].as_u64()).max();
        println!(
            "{joined} of {n} joined in {:.1} s ({procs} client processes, {} gateway processes), quiet after {:.1} s; the space reports {} connections, {} online",
            join_time.as_secs_f64(),
            pids.len(),
            settled.as_secs_f64(),
            conns.map_or("?".into(), |c| c.to_string()),
            online.map_or("?".into(), |c| c.to_string()),
        );
        if failed > 0 {
            println!("{failed} failed; first failure: {}", first_error.unwrap_or_default());
        }
        // Per connection the gateways still hold (a join storm may close some).
        let held = conns.map_or(joined, |c| c as usize);
        println!(
            "gateway RSS {:.1} MiB -> {:.1} MiB: {:.1} KiB per idle joined connection ({held} held)",
            before as f64 / 1024.0,
            after as f64 / 1024.0,
            after.saturating_sub(before) as f64 / held.max(1) as f64
        );
        // A chat from one more participant must reach every idle connection.
        let seen = || reports.lock().unwrap().seen.iter().sum::<usize>();
        match open(gws[0], source(n, per_address), &space, &format!("idle-{tag}-sender")).await {
            Ok((mut s, _)) => {
                let chat = serde_json::json!({"protocol": "mew/v0.4", "id": format!("probe-{tag}"),
                    "kind": "chat", "payload": {"text": marker}});
                let sent = Instant::now();
                let _ = s.write_all(&client_text(chat.to_string().as_bytes())).await;
                let deadline = Instant::now() + Duration::from_secs(120);
                while seen() < held && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                println!(
                    "a chat reached {} of {held} idle connections in {:.0} ms",
                    seen(),
                    sent.elapsed().as_secs_f64() * 1000.0
                );
                if hold > 0 {
                    tokio::time::sleep(Duration::from_secs(hold as u64)).await;
                }
                drop(s);
            }
            Err(e) => println!("the sender could not join: {e}"),
        }
    });
    // Closing their standard input ends the workers, which closes every connection.
    for mut c in children {
        drop(c.stdin.take());
        let _ = c.wait();
    }
}
