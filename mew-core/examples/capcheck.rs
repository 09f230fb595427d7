//! Reads JSON lines `{"capability": {...}, "message": {...}}` (or `"capabilities": [...]`)
//! from stdin and prints `true`, `false` or `error: <reason>` for each.

use std::io::{BufRead, BufWriter, Write};

fn main() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    let mut out = BufWriter::new(std::io::stdout().lock());
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        writeln!(out, "{}", mew_core::capability::check_line(&line))?;
    }
    out.flush()
}
