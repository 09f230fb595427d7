//! Every envelope example of the spec, taken from a verbatim copy of it at test time.
//!
//! Each example must parse, re-serialise to the same JSON value, be of a known kind, and
//! give a routing view that agrees with the envelope. The serialised text of
//! each is pinned by an insta snapshot named after the example's id.

use mew_core::envelope::RoutingView;
use mew_core::{Envelope, Kind, Limits};
use serde_json::Value;

const SPEC: &str = include_str!("data/protocol-v0.4.md");

/// Envelope examples in the spec; a spec edit that adds or drops one must update this.
const ENVELOPES: usize = 37;
/// Examples whose body is a placeholder such as `{ /* kind-specific body */ }`.
const PLACEHOLDERS: usize = 1;

/// The contents of every ```json fence, in order.
fn json_blocks(doc: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = doc;
    while let Some(start) = rest.find("```json\n") {
        let body = &rest[start + "```json\n".len()..];
        let end = body.find("```").expect("unterminated ```json fence");
        out.push(&body[..end]);
        rest = &body[end + 3..];
    }
    out
}

/// Removes `// ...` comments that lie outside JSON strings.
fn strip_line_comments(block: &str) -> String {
    let mut out = String::with_capacity(block.len());
    for line in block.lines() {
        let (mut in_str, mut escaped, mut cut) = (false, false, line.len());
        let bytes = line.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            if in_str {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_str = false,
                    _ => {}
                }
            } else if b == b'"' {
                in_str = true;
            } else if b == b'/' && bytes.get(i + 1) == Some(&b'/') {
                cut = i;
                break;
            }
        }
        out.push_str(line[..cut].trim_end());
        out.push('\n');
    }
    out
}

/// A block that is not JSON because it elides a body (`{ /* ... */ }`, `{...}`).
fn is_placeholder(block: &str) -> bool {
    serde_json::from_str::<Value>(block).is_err() && (block.contains("/*") || block.contains("..."))
}

/// The envelope examples, comments stripped, placeholders left out.
fn examples() -> (Vec<String>, usize) {
    let mut envelopes = Vec::new();
    let mut placeholders = 0;
    for block in json_blocks(SPEC) {
        if !block.contains("\"protocol\"") {
            continue;
        }
        let text = strip_line_comments(block);
        if is_placeholder(&text) {
            placeholders += 1;
            continue;
        }
        envelopes.push(text);
    }
    (envelopes, placeholders)
}

#[test]
fn extracts_every_example() {
    assert_eq!(json_blocks(SPEC).len(), 45, "```json fences in the spec");
    let (envelopes, placeholders) = examples();
    assert_eq!(envelopes.len(), ENVELOPES);
    assert_eq!(placeholders, PLACEHOLDERS);
}

#[test]
fn every_example_round_trips() {
    let limits = Limits::default();
    let mut kinds_seen = std::collections::BTreeSet::new();
    let mut ids_seen = std::collections::BTreeSet::new();
    for text in examples().0 {
        let original: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("example is not JSON ({e}):\n{text}"));
        let env = Envelope::parse(text.as_bytes(), &limits)
            .unwrap_or_else(|e| panic!("example rejected ({e}):\n{text}"));
        assert!(ids_seen.insert(env.id.clone()), "duplicate id {}", env.id);
        kinds_seen.insert(env.kind.as_str().to_owned());

        let json = env.to_json();
        let back: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back, original, "round trip changed {}", env.id);
        assert_eq!(Envelope::parse(json.as_bytes(), &limits).unwrap(), env);

        assert!(
            !matches!(env.kind, Kind::Other(_)),
            "{}: kind {} is not a known kind",
            env.id,
            env.kind
        );

        let view = RoutingView::parse(text.as_bytes(), &limits).unwrap();
        assert_eq!(view.protocol.as_deref(), Some(env.protocol.as_str()));
        assert_eq!(view.id.as_deref(), Some(env.id.as_str()));
        assert_eq!(view.ts.as_deref(), env.ts.as_deref());
        assert_eq!(view.from.as_deref(), Some(env.from.as_str()));
        assert_eq!(view.kind.as_ref(), env.kind.as_str());
        assert_eq!(view.context.as_deref(), env.context.as_deref());
        assert_eq!(
            view.to
                .as_ref()
                .map(|t| t.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            env.to
        );
        assert_eq!(
            view.correlation_id
                .as_ref()
                .map(|c| c.iter().map(str::to_owned).collect::<Vec<_>>()),
            env.correlation_id
        );
        assert_eq!(view.payload_value(), env.payload);
        assert_eq!(view.is_broadcast(), env.is_broadcast());
        assert_eq!(view.raw, text);

        insta::assert_snapshot!(env.id.clone(), json);
    }
    // Every kind the spec defines has an example.
    let missing: Vec<_> = Kind::ALL_KNOWN
        .iter()
        .filter(|k| !kinds_seen.contains(k.as_str()))
        .map(Kind::as_str)
        .collect();
    assert_eq!(missing, Vec::<&str>::new(), "kinds without an example");
}
