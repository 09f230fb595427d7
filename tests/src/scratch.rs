//! A test's own folder under the system's temporary directory, gone when the test passes.
//!
//! Each run of the suite used to leave every test's folder behind (gigabytes of gateways'
//! logs and stores after a few runs); a failed test's folder is still worth keeping, since
//! its logs are how the failure is read.

use std::ffi::OsStr;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts the folders made in this process: tests running on threads of one process (plain
/// `cargo test`) may ask for the same prefix and name.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A fresh folder, removed when dropped unless the thread is panicking (a failed test keeps
/// it, and its path is printed) or `MEW_KEEP_SCRATCH` is set in the environment.
///
/// Bind it for as long as anything writes there: a process started in it, or a struct that
/// holds it together with such a process, must drop first (a field declared before it, a
/// variable bound after it).
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// `$TMPDIR/mew-<prefix>-<name>-<pid>-<n>`, empty, canonical.
    pub fn new(prefix: &str, name: &str) -> Scratch {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("mew-{prefix}-{name}-{}-{n}", std::process::id()));
        // A process of a past run with the same id may have left it.
        let _ = std::fs::remove_dir_all(&path);
        if let Err(e) = std::fs::create_dir_all(&path) {
            panic!("scratch folder {}: {e}", path.display());
        }
        // Canonical (where `/tmp` is a link, as on macOS): the filesystem MCP server allows
        // only canonical roots, and gateways report the paths they resolved.
        let path = path.canonicalize().unwrap_or(path);
        Scratch { path }
    }

    /// As [`Scratch::new`], with an empty `.mew` inside: a space's folder, where `mew` looks
    /// for its state, tokens and logs.
    pub fn space(prefix: &str, name: &str) -> Scratch {
        let s = Scratch::new(prefix, name);
        if let Err(e) = std::fs::create_dir(s.join(".mew")) {
            panic!("scratch folder {}/.mew: {e}", s.display());
        }
        s
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<OsStr> for Scratch {
    fn as_ref(&self) -> &OsStr {
        self.path.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("MEW_KEEP_SCRATCH").is_some() {
            eprintln!("scratch folder kept: {}", self.path.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::Scratch;

    #[test]
    fn removed_when_dropped_and_never_shared() {
        let (a, b) = (Scratch::space("scratch", "t"), Scratch::new("scratch", "t"));
        assert_ne!(a.path(), b.path());
        assert!(a.join(".mew").is_dir() && b.is_dir());
        std::fs::write(a.join(".mew/f"), "x").unwrap();
        let path = a.to_path_buf();
        drop(a);
        if std::env::var_os("MEW_KEEP_SCRATCH").is_none() {
            assert!(!path.exists());
        } else {
            std::fs::remove_dir_all(path).unwrap();
        }
    }

    #[test]
    fn kept_when_the_test_fails() {
        let s = Scratch::new("scratch", "failing");
        let path = s.to_path_buf();
        std::panic::catch_unwind(move || {
            let _s = s;
            panic!("a failing test");
        })
        .unwrap_err();
        assert!(path.is_dir());
        std::fs::remove_dir_all(path).unwrap();
    }
}
