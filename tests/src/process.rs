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
            if let Some(rest) = line.split("ws://").nth(1) {
                break rest.split('/').next().unwrap_or_default().to_owned();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        MewGateway { child, addr }
    }
}

impl Drop for MewGateway {
    fn drop(&mut self) {
        #[cfg(unix)]
        {
            // SIGTERM lets the gateway stop the processes it started.
            let _ = Command::new("kill")
                .arg(self.child.id().to_string())
                .status();
            let end = Instant::now() + Duration::from_secs(10);
            while Instant::now() < end {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
