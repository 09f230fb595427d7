//! A tmux server of a test's own, for driving terminal interfaces as a person would
//! (`send-keys`) and reading what they show (`capture-pane`).

use std::process::Command;
use std::time::Duration;

/// A tmux server (`-L NAME`) whose session `pane` runs the interface; killed on drop.
pub struct Tmux {
    server: String,
    pane: &'static str,
}

impl Tmux {
    /// A server named `server` (unique per test: add the process id), its pane `pane`.
    pub fn new(server: String, pane: &'static str) -> Tmux {
        Tmux { server, pane }
    }

    /// Starts `command` (a program and its arguments) in the pane, detached, on a
    /// `cols` x `rows` terminal, with `env` (`NAME=value` each) set for it.
    pub fn start(&self, cols: u16, rows: u16, env: &[&str], command: &[&str]) {
        let (cols, rows) = (cols.to_string(), rows.to_string());
        let mut a = vec![
            "new-session",
            "-d",
            "-s",
            self.pane,
            "-x",
            &cols,
            "-y",
            &rows,
        ];
        for e in env {
            a.extend(["-e", e]);
        }
        a.extend_from_slice(command);
        self.cmd(&a);
    }

    /// Runs `tmux -L SERVER ARGS`: its standard output.
    pub fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.server])
            .args(args)
            .output()
            .expect(
                "tmux is needed for the terminal tests (tests/run.sh installs it with apt-get)",
            );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the pane shows now.
    pub fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", self.pane])
    }

    /// Waits (30 s at most) until the pane shows `what`: the screen then.
    pub fn until(&self, what: &str) -> String {
        crate::wait::until_ok(
            &format!("{what:?} on the screen"),
            Duration::from_secs(30),
            || {
                let s = self.screen();
                if s.contains(what) { Ok(s) } else { Err(s) }
            },
        )
    }

    /// Types `keys` into the pane (`send-keys` arguments: key names, or `-l` and text).
    pub fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", self.pane];
        a.extend_from_slice(keys);
        self.cmd(&a);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.server, "kill-server"])
            .output();
    }
}
