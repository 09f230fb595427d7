//! A unit test's own folder, removed when the test passes (kept, with its path printed,
//! when it fails): runs of the suite no longer leave the logs and state they wrote behind.

use std::path::{Path, PathBuf};

/// `$TMPDIR/mew-<kind>-<name>-<pid>`, fresh, removed on drop unless the test panicked.
#[derive(Debug)]
pub(crate) struct TestDir(PathBuf);

impl TestDir {
    pub(crate) fn new(kind: &str, name: &str) -> TestDir {
        let d = std::env::temp_dir().join(format!("mew-{kind}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("a test folder");
        TestDir(d)
    }
}

impl std::ops::Deref for TestDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test folder kept: {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
