//! Real `mew` processes for end-to-end tests: a gateway started with the caller's command,
//! its address read from what it prints, stopped (SIGTERM, then kill) when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `mew gateway` (or anything that prints `ws://ADDR/...` when it is listening).
pub struct MewGateway {
    /// The process.
    pub child: Child,
    /// `HOST:PORT` it listens on.
    pub addr: String,
}

impl MewGateway {
    /// Spawns `cmd` with stdout piped and waits for the address it prints; the rest of its
    /// stdout is drained on a thread.
    pub fn start(mut cmd: Command) -> MewGateway {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run mew");
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("the gateway prints its address")
                .expect("utf-8 output");
            // `ws://` or, with TLS, `wss://`.
            if let Some(rest) = line
                .split("ws://")
                .nth(1)
                .or_else(|| line.split("wss://").nth(1))
            {
                break rest.split('/').next().unwrap_or_default().to_owned();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        MewGateway { child, addr }
    }
}

impl Drop for MewGateway {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// A child process stopped as a [`MewGateway`] is when dropped: for a test that may fail
/// while it runs. One that ended already (waited for by the test) is left alone.
pub struct Stopping(pub Child);

impl std::ops::Deref for Stopping {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Stopping {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Stopping {
    fn drop(&mut self) {
        stop(&mut self.0);
    }
}

/// SIGTERM (which lets a gateway stop the processes it started), then a kill after 10 s.
fn stop(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    #[cfg(unix)]
    {
        let _ = Command::new("kill").arg(child.id().to_string()).status();
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A Node MCP server of tests/mcp-servers serving Streamable HTTP on a free port (`PORT`
/// in its environment), killed when dropped.
pub struct HttpMcpServer {
    /// The process.
    pub child: Child,
    /// Its endpoint, `http://127.0.0.1:PORT/mcp`.
    pub url: String,
}

impl HttpMcpServer {
    /// `node <tests/mcp-servers/…/script> <args>`, once it listens.
    pub fn start(script: &str, args: &[&str]) -> HttpMcpServer {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("mcp-servers")
            .join(script);
        assert!(
            path.is_file(),
            "MCP test servers are not installed ({} missing): run `npm ci` in tests/mcp-servers",
            path.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("node")
            .arg(&path)
            .args(args)
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run node");
        let end = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < end, "{script} never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
        HttpMcpServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }

    /// `@modelcontextprotocol/server-everything` in its `streamableHttp` mode.
    pub fn everything() -> HttpMcpServer {
        HttpMcpServer::start(
            "node_modules/@modelcontextprotocol/server-everything/dist/index.js",
            &["streamableHttp"],
        )
    }
}

impl Drop for HttpMcpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
