//! Shared helpers for the criterion benchmarks.

/// The release `mew` the benchmark programs run: `MEW_BIN`, else the one built beside this
/// program (`target/release/deps/<bench>-<hash>` -> `target/release/mew`).
pub fn mew_bin() -> std::path::PathBuf {
    if let Ok(p) = std::env::var("MEW_BIN") {
        return std::path::PathBuf::from(p);
    }
    let bin = std::env::current_exe()
        .expect("this program")
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("mew"))
        .expect("the target folder");
    assert!(
        bin.exists(),
        "{} missing: cargo build --release -p mew-cli (or set MEW_BIN)",
        bin.display()
    );
    bin
}
