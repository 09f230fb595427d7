//! The shape of the source tree, read from the files themselves:
//!
//! - no two source files import each other, outside tests;
//! - no file under `drivers/` is over [`MAX_LINES`] lines, outside tests;
//! - `drivers/common/src` holds at most [`COMMON_TOP_FILES`] files at its top level.
//!
//! A file imports another when it names a path (`use` or inline) beginning with `crate::`,
//! `super::` or `self::` whose longest prefix that is a module of a file is that file's
//! module (`a/b.rs` and `a/b/mod.rs` are module `a::b`; `lib.rs`, `main.rs` and `mod.rs`
//! are their folder's module). Comments are left out, and so is everything from a file's
//! `#[cfg(test)] mod tests` on. A module and its ancestors (which declare it and re-export
//! its items) are not counted as a pair. Test files are `tests.rs`, `*_tests.rs` and
//! anything under a `tests/` folder; crates are the folders with a `Cargo.toml` and a
//! `src/` (the fuzz targets and build output aside).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use mew_tests::scratch::Scratch;

/// Lines a file under `drivers/` may have, outside tests.
const MAX_LINES: usize = 1200;
/// Files at the top level of `drivers/common/src` (lib.rs included).
const COMMON_TOP_FILES: usize = 8;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace holds the tests crate")
        .to_owned()
}

fn skipped(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        matches!(n, "target" | "node_modules" | "fuzz" | ".git") || n.starts_with('.')
    })
}

/// Every file under `dir` (in a stable order), skipped folders aside.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if !skipped(&p) {
                walk(&p, out);
            }
        } else {
            out.push(p);
        }
    }
}

fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
}

/// The module path of a file under a crate's `src`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("a file of the crate");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The text that counts: before `#[cfg(test)] mod tests`, without `//` comments.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The paths named from `crate`, `super` or `self`: the head and the names after it (a `{`
/// opening a group is passed over, so `crate::{a, b}` names `a`).
fn named_paths(code: &str) -> Vec<(&str, Vec<&str>)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let at_word = i == 0 || !is_ident(b[i - 1]);
        let head = ["crate", "super", "self"].into_iter().find(|h| {
            at_word
                && b[i..].starts_with(h.as_bytes())
                && !b.get(i + h.len()).is_some_and(|&c| is_ident(c))
        });
        let Some(head) = head else {
            i += 1;
            continue;
        };
        let mut j = i + head.len();
        let mut rest = Vec::new();
        while b[j..].starts_with(b"::") {
            let mut k = j + 2;
            if b.get(k) == Some(&b'{') {
                k += 1;
            }
            let start = k;
            if !b
                .get(k)
                .is_some_and(|&c| c.is_ascii_alphabetic() || c == b'_')
            {
                break;
            }
            while b.get(k).is_some_and(|&c| is_ident(c)) {
                k += 1;
            }
            rest.push(&code[start..k]);
            j = k;
        }
        if !rest.is_empty() {
            out.push((head, rest));
        }
        i = j.max(i + 1);
    }
    out
}

/// The crates of the workspace: their folders and `src` folders.
fn crates(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    walk(root, &mut files);
    let mut out: Vec<PathBuf> = files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n == "Cargo.toml"))
        .filter_map(|f| f.parent())
        .filter(|d| d.join("src").is_dir())
        .map(|d| d.join("src"))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Pairs of files of one crate that import each other (outside tests, a module and its
/// ancestors aside), as paths relative to the workspace.
fn import_circles(root: &Path, src: &Path) -> Vec<(String, String)> {
    let mut rs = Vec::new();
    walk(src, &mut rs);
    let files: BTreeMap<Vec<String>, PathBuf> = rs
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| (module_of(src, &p), p))
        .collect();
    let mut deps: BTreeMap<&Vec<String>, BTreeSet<&Vec<String>>> = BTreeMap::new();
    for (module, path) in &files {
        if is_test_file(path) {
            continue;
        }
        let text = fs::read_to_string(path).expect("a readable source file");
        let mut out = BTreeSet::new();
        for (head, rest) in named_paths(&code_of(&text)) {
            let mut rest: &[&str] = &rest;
            let mut full: Vec<String> = match head {
                "crate" => Vec::new(),
                "self" => module.clone(),
                _ => {
                    let mut base = module.clone();
                    base.pop();
                    while rest.first() == Some(&"super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                    base
                }
            };
            full.extend(rest.iter().map(|s| s.to_string()));
            for k in (0..=full.len()).rev() {
                if let Some((target, target_path)) = files.get_key_value(&full[..k]) {
                    if target != module && !is_test_file(target_path) {
                        out.insert(target);
                    }
                    break;
                }
            }
        }
        deps.insert(module, out);
    }
    let rel = |m: &Vec<String>| {
        files[m]
            .strip_prefix(root)
            .unwrap_or(&files[m])
            .display()
            .to_string()
    };
    let mut pairs = Vec::new();
    for (a, ds) in &deps {
        for b in ds {
            let back = deps.get(b).is_some_and(|d| d.contains(a));
            let lineage = a.starts_with(b) || b.starts_with(a);
            if back && a < b && !lineage {
                pairs.push((rel(a), rel(b)));
            }
        }
    }
    pairs
}

#[test]
fn no_two_source_files_import_each_other() {
    let root = root();
    let srcs = crates(&root);
    assert!(
        srcs.iter().any(|s| s.ends_with("mew-core/src")) && srcs.len() >= 6,
        "the workspace's crates are found: {srcs:?}"
    );
    let circles: Vec<String> = srcs
        .iter()
        .flat_map(|src| import_circles(&root, src))
        .map(|(a, b)| format!("{a} <-> {b}"))
        .collect();
    assert!(
        circles.is_empty(),
        "files that import each other (move what both need to where it belongs, or to a small file both import):\n{}",
        circles.join("\n")
    );
}

#[test]
fn no_driver_file_is_over_the_line_limit() {
    let root = root();
    let mut files = Vec::new();
    walk(&root.join("drivers"), &mut files);
    assert!(files.len() > 50, "the drivers' files are found");
    let long: Vec<String> = files
        .iter()
        .filter(|p| !is_test_file(p))
        .filter_map(|p| {
            let text = fs::read(p).ok()?;
            let lines = text.iter().filter(|&&b| b == b'\n').count();
            (lines > MAX_LINES).then(|| {
                format!(
                    "{}: {lines} lines",
                    p.strip_prefix(&root).unwrap_or(p).display()
                )
            })
        })
        .collect();
    assert!(
        long.is_empty(),
        "files under drivers/ over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn drivers_common_keeps_its_files_in_folders_by_side() {
    let src = root().join("drivers/common/src");
    let mut top: Vec<String> = fs::read_dir(&src)
        .expect("drivers/common/src")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert!(top.contains(&"lib.rs".to_owned()), "{top:?}");
    assert!(
        top.len() <= COMMON_TOP_FILES,
        "drivers/common/src has {} files at its top level (at most {COMMON_TOP_FILES}): {top:?}; \
         a new file belongs in server/, state/ or client/",
        top.len()
    );
}

/// The rule's own checks: each way of naming another file is seen, and what is not an
/// import (a comment, a test module, a module's own ancestors) is not.
#[test]
fn the_import_rule_reads_paths_as_the_compiler_does() {
    let dir = Scratch::new("layout", "imports");
    let src = dir.join("src");
    let write = |rel: &str, text: &str| {
        let p = src.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    };
    write(
        "lib.rs",
        "pub mod a;\npub mod b;\npub mod c;\npub mod d;\nuse crate::a::X;\n",
    );
    write(
        "a/mod.rs",
        "pub mod inner;\npub use inner::Y;\nuse crate::{b::Z};\npub struct X;\n",
    );
    write("a/inner.rs", "use super::X;\npub struct Y;\n");
    write("b.rs", "pub struct Z;\nfn f() { let _ = crate::a::X; }\n");
    write(
        "c.rs",
        "// use crate::d::W;\npub struct V;\n#[cfg(test)]\nmod tests {\n    use crate::d::W;\n}\n",
    );
    write("d.rs", "use crate::c::V;\npub struct W;\n");
    let circles = import_circles(&dir, &src);
    assert_eq!(
        circles,
        [("src/a/mod.rs".to_owned(), "src/b.rs".to_owned())]
    );
}
