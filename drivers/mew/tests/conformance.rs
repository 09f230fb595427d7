//! The official MCP conformance suite's client role, played by a space: `conformance client
//! --command tests/mcp-conformance/client-adapter --requirements <revision>` for both
//! requirement sets, each scenario a gateway, a bridge to the suite's test server and a
//! scripted participant and person (drivers/mew/examples/conformance_client.rs).
//!
//! Every scenario the suite runs is named here, as passing or as failing with the reason; a
//! passing one that fails, a failing one that passes, and a scenario not named all fail the
//! test, so the lists stay true.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use mew_tests::scratch::Scratch;

const MEW: &str = env!("CARGO_BIN_EXE_mew");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A tool of the MCP test clients' folder (`npm ci` in tests/mcp-clients).
fn clients_bin(name: &str) -> PathBuf {
    let p = repo()
        .join("tests/mcp-clients/node_modules/.bin")
        .join(name);
    assert!(
        p.exists(),
        "MCP test clients are not installed: run `npm ci` in tests/mcp-clients"
    );
    p
}

/// The scripted participant, an example of this package built beside `mew`
/// (`cargo nextest run --workspace` builds the examples).
fn conformance_client() -> PathBuf {
    let p = Path::new(MEW)
        .parent()
        .expect("mew is in a folder")
        .join("examples/conformance_client");
    assert!(
        p.is_file(),
        "{} is missing: cargo build -p mew-cli --example conformance_client",
        p.display()
    );
    p
}

/// The authorization scenarios both sets share: the bridge signs in (the scripted person
/// following its link) and the caller's calls go through.
const AUTH: &[&str] = &[
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
];

/// The 2026-07-28 set's further authorization scenarios.
const AUTH_2026: &[&str] = &[
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
];

/// Extensions the suite runs but does not score (machine-to-machine grants, DPoP,
/// enterprise-managed authorization): the bridge has none of them.
const EXTENSIONS: &[&str] = &[
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/enterprise-managed-authorization",
    "auth/dpop",
    "auth/dpop-nonce",
    "auth/wif-jwt-bearer",
];
const NOT_AN_EXTENSION_WE_HAVE: &str =
    "an OAuth extension the bridge does not implement (not scored)";

/// The checks of `scenario` that did not succeed, from the suite's results folder `out`
/// (`<out>/<scenario>-<time>/checks.json`), with the adapter's stderr.
fn failed_checks(out: &Path, scenario: &str) -> String {
    let path = out.join(scenario);
    let (Some(dir), Some(base)) = (path.parent(), path.file_name()) else {
        return String::new();
    };
    let prefix = format!("{}-", base.to_string_lossy());
    let Some(found) = std::fs::read_dir(dir).ok().and_then(|entries| {
        entries
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
    }) else {
        return String::new();
    };
    let checks: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(found.path().join("checks.json")).unwrap_or_default(),
    )
    .unwrap_or_default();
    let mut text = String::new();
    for c in checks.as_array().into_iter().flatten() {
        if c["status"] != "SUCCESS" && c["status"] != "INFO" {
            text.push_str(&format!(
                "    {} {}: {} {}\n",
                c["status"], c["id"], c["errorMessage"], c["details"]
            ));
        }
    }
    let stderr = std::fs::read_to_string(found.path().join("stderr.txt")).unwrap_or_default();
    if !stderr.trim().is_empty() {
        text.push_str(&format!("    adapter's stderr: {stderr}\n"));
    }
    text
}

/// Runs the suite's client scenarios of `revision`, its results saved under `out`; each
/// scenario's name and whether all of its checks passed.
fn run(revision: &str, out_dir: &Path) -> BTreeMap<String, bool> {
    let started = Instant::now();
    let adapter = repo().join("tests/mcp-conformance/client-adapter");
    let out = Command::new(clients_bin("node"))
        .arg(clients_bin("conformance"))
        .args(["client", "--requirements", revision, "--command"])
        .arg(&adapter)
        .arg("--output-dir")
        .arg(out_dir)
        .env("MEW_BIN", MEW)
        .env("MEW_CONFORMANCE_CLIENT", conformance_client())
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .output()
        .expect("run the conformance suite");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text
        .split_once("=== SUITE SUMMARY ===")
        .unwrap_or_else(|| {
            panic!(
                "no summary in the suite's output: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .1;
    // `✓ tools_call: 2 passed, 0 failed` / `✗ auth/dpop: 0 passed, 3 failed`
    let mut results = BTreeMap::new();
    for line in summary.lines() {
        let (passed, rest) = if let Some(rest) = line.strip_prefix("✓ ") {
            (true, rest)
        } else if let Some(rest) = line.strip_prefix("✗ ") {
            (false, rest)
        } else {
            continue;
        };
        let (name, _) = rest.split_once(": ").expect("name: counts");
        results.insert(name.to_owned(), passed);
    }
    eprintln!(
        "{revision}: {} scenarios in {:.1}s",
        results.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(!results.is_empty(), "no scenario ran: {text}");
    results
}

/// Checks the suite's results against the lists: `pass` must pass, `fail` (with reasons)
/// must fail, and nothing else may run.
fn check(revision: &str, pass: &[&str], fail: &[(&str, &str)]) {
    let out = Scratch::new("conformance", revision);
    let results = run(revision, &out);
    let mut wrong = Vec::new();
    for name in pass {
        match results.get(*name) {
            Some(true) => {}
            Some(false) => wrong.push(format!("{name}: fails\n{}", failed_checks(&out, name))),
            None => wrong.push(format!("{name}: did not run")),
        }
    }
    for (name, why) in fail {
        match results.get(*name) {
            Some(false) => {}
            Some(true) => wrong.push(format!(
                "{name}: passes now (it was listed as failing: {why}); move it to the passing list"
            )),
            None => wrong.push(format!("{name}: did not run")),
        }
    }
    for name in results.keys() {
        if !pass.contains(&name.as_str()) && !fail.iter().any(|(n, _)| n == name) {
            wrong.push(format!("{name}: ran but is not listed"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{revision}:\n{}\n(re-run one with: conformance client --command \
         tests/mcp-conformance/client-adapter --scenario NAME --spec-version {revision})",
        wrong.join("\n")
    );
}

fn failing(names: &[&'static str], why: &'static str) -> Vec<(&'static str, &'static str)> {
    names.iter().map(|n| (*n, why)).collect()
}

#[test]
fn client_scenarios_of_2025_11_25() {
    let pass = [
        "initialize",
        "tools_call",
        "elicitation-sep1034-client-defaults",
        "sse-retry",
        // Run after the set's release, not scored.
        "json-schema-2020-12-preservation",
    ];
    let pass = [&pass[..], AUTH].concat();
    let fail = failing(EXTENSIONS, NOT_AN_EXTENSION_WE_HAVE);
    check("2025-11-25", &pass, &fail);
}

#[test]
fn client_scenarios_of_2026_07_28() {
    let pass = [
        "tools_call",
        "request-metadata",
        "sep-2322-client-request-state",
        "http-standard-headers",
        "http-custom-headers",
        "http-invalid-tool-headers",
        "json-schema-ref-no-deref",
        // Run after the set's release, not scored.
        "json-schema-2020-12-preservation",
    ];
    let pass = [&pass[..], AUTH, AUTH_2026].concat();
    let fail = failing(EXTENSIONS, NOT_AN_EXTENSION_WE_HAVE);
    check("2026-07-28", &pass, &fail);
}
