//! Properties of the capability matcher: literals match themselves, `!P` is the complement
//! of `P`, compiling and matching never panic, and delegation (`covers`) is sound.

use mew_core::capability::{Capability, CapabilitySet};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Number, Value, json};
use std::cell::Cell;

/// Characters that carry meaning somewhere in the pattern language, plus a few plain ones.
const PATTERN_CHARS: &str = "[a-c*?{},!/$.\\[\\]'\"^()|\\\\ ]{0,10}";

fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-c]{1,3}",
        Just("**".to_string()),
        Just("$.a".to_string()),
        Just("$..b".to_string()),
        Just("$.a[*]".to_string()),
        Just("$['a'][0]".to_string()),
        PATTERN_CHARS,
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        PATTERN_CHARS.prop_map(Value::String),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(8, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(arb_key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A value whose strings and keys are plain (no pattern syntax) and with no arrays, so the
/// value read as a pattern is a literal.
fn arb_plain_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        "[a-z0-9_ ./-]{0,12}"
            .prop_filter("not a regex", |s| !(s.len() > 2
                && s.starts_with('/')
                && s.ends_with('/')))
            .prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 32, 5, |inner| {
        prop::collection::btree_map("[a-z_][a-z0-9_]{0,6}", inner, 0..5)
            .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>()))
    })
}

/// Globs and plain strings (never `/…/`, which would be a regex).
fn arb_glob() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ab/]{1,6}",
        "[ab/*?]{1,6}",
        "[ab/]{0,2}\\{[ab*]{0,2},[ab/]{0,2}\\}[ab*/]{0,2}",
    ]
    .prop_filter("not a regex", |s| {
        !(s.len() > 2 && s.starts_with('/') && s.ends_with('/'))
    })
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn a_literal_pattern_matches_its_value(kind in "[a-z]{1,8}(/[a-z]{1,8})?", payload in arb_plain_value()) {
        let c = Capability::compile(json!({"kind": kind, "payload": payload})).unwrap();
        prop_assert!(c.matches(&kind, Some(&payload)));
        let k = Capability::compile(json!({"kind": kind})).unwrap();
        prop_assert!(k.matches(&kind, None));
    }

    #[test]
    fn not_p_is_the_complement_of_p(p in arb_glob(), s in "[ab/]{0,8}") {
        let pos = Capability::compile(json!({"kind": "k", "payload": {"f": p}})).unwrap();
        let neg = Capability::compile(json!({"kind": "k", "payload": {"f": format!("!{p}")}})).unwrap();
        let msg = json!({"f": s});
        prop_assert_ne!(pos.matches("k", Some(&msg)), neg.matches("k", Some(&msg)));
        // A missing field matches neither.
        let empty = Value::Object(Map::new());
        prop_assert!(!pos.matches("k", Some(&empty)));
        prop_assert!(!neg.matches("k", Some(&empty)));
    }

    #[test]
    fn not_regex_is_the_complement_of_regex(re in "[ab.^$*+?|]{1,6}", s in "[ab]{0,8}") {
        let p = format!("/{re}/");
        if let (Ok(pos), Ok(neg)) = (
            Capability::compile(json!({"kind": p})),
            Capability::compile(json!({"kind": format!("!{p}")})),
        ) {
            prop_assert_ne!(pos.matches(&s, None), neg.matches(&s, None));
        }
    }

    #[test]
    fn compile_never_panics(v in arb_json()) {
        let _ = Capability::compile(v.clone());
        let _ = Capability::compile(json!({"kind": v.clone()}));
        let _ = Capability::compile(json!({"kind": "*", "payload": v}));
    }

    #[test]
    fn match_never_panics(pattern in arb_json(), kind in PATTERN_CHARS, payload in arb_json()) {
        if let Ok(c) = Capability::compile(json!({"kind": [kind.clone(), "*"], "payload": pattern})) {
            let _ = c.matches(&kind, Some(&payload));
            let _ = c.matches(&kind, None);
            let set = CapabilitySet::from_capabilities(vec![c.clone()]);
            let _ = set.precheck(&kind);
            let _ = set.covers(&c);
        }
    }
}

// ---- delegation soundness ------------------------------------------------------------

fn pick<T: Clone + std::fmt::Debug + 'static>(items: &'static [T]) -> impl Strategy<Value = T> {
    prop::sample::select(items)
}

const KINDS: &[&str] = &[
    "mcp/request",
    "mcp/response",
    "mcp/proposal",
    "chat",
    "mcp/a/b",
    "system/x",
];
const KIND_PATS: &[&str] = &[
    "*",
    "mcp/*",
    "mcp/**",
    "mcp/request",
    "mcp/response",
    "chat",
    "!chat",
    "!mcp/*",
    "mcp/{request,response}",
    "mcp/re*",
    "/^mcp/",
    "mcp/?equest",
    "**/b",
];
const METHODS: &[&str] = &["tools/call", "tools/list", "resources/list", "x"];
const METHOD_PATS: &[&str] = &[
    "tools/*",
    "tools/call",
    "*/list",
    "!tools/*",
    "!tools/call",
    "*",
    "tools/{call,list}",
    "/list$/",
    "!*/list",
    "t*",
];
const NAMES: &[&str] = &["read_file", "write_file", "read_x", "file_a"];
const NAME_PATS: &[&str] = &[
    "read_*",
    "read_file",
    "*",
    "!write_*",
    "{read,write}_file",
    "*_file",
    "!read_*",
];

fn arb_str_pat(items: &'static [&'static str]) -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => pick(items).prop_map(|s| json!(s)),
        1 => prop::collection::vec(pick(items), 1..3).prop_map(|v| json!(v)),
    ]
}

fn arb_payload_pat() -> impl Strategy<Value = Value> {
    (
        prop::option::of(arb_str_pat(METHOD_PATS)),
        prop::option::of(arb_str_pat(NAME_PATS)),
        0..6u8,
        prop::option::of(pick(&[1i64, 2])),
    )
        .prop_map(|(method, name, shape, n)| {
            let mut o = Map::new();
            if let Some(m) = method {
                o.insert("method".into(), m);
            }
            if let Some(nm) = name {
                match shape {
                    0 | 1 => {
                        o.insert("params".into(), json!({ "name": nm }));
                    }
                    2 => {
                        o.insert("$.params.name".into(), nm);
                    }
                    3 => {
                        o.insert("para*".into(), json!({ "name": nm }));
                    }
                    4 => {
                        o.insert("**".into(), nm);
                    }
                    _ => {
                        o.insert("$..name".into(), nm);
                    }
                }
            }
            if let Some(n) = n {
                o.insert("n".into(), json!(n));
            }
            Value::Object(o)
        })
}

fn arb_cap() -> impl Strategy<Value = Value> {
    (arb_str_pat(KIND_PATS), prop::option::of(arb_payload_pat())).prop_map(|(kind, payload)| {
        match payload {
            Some(p) => json!({"kind": kind, "payload": p}),
            None => json!({"kind": kind}),
        }
    })
}

fn arb_envelope() -> impl Strategy<Value = (String, Option<Value>)> {
    let payload = (
        prop::option::of(pick(METHODS)),
        prop::option::of(pick(NAMES)),
        prop::option::of(pick(&[1i64, 2, 3])),
        any::<bool>(),
    )
        .prop_map(|(m, name, n, nested)| {
            let mut o = Map::new();
            if let Some(m) = m {
                o.insert("method".into(), json!(m));
            }
            if let Some(name) = name {
                let params = if nested {
                    json!({"name": name, "arguments": {"deep": {"name": name}}})
                } else {
                    json!({"name": name})
                };
                o.insert("params".into(), params);
            }
            if let Some(n) = n {
                o.insert("n".into(), json!(n));
            }
            Value::Object(o)
        });
    (
        pick(KINDS).prop_map(String::from),
        prop::option::of(payload),
    )
}

#[test]
fn covers_is_sound() {
    let mut runner = TestRunner::new(config(4000));
    let covered = Cell::new(0u32);
    let exercised = Cell::new(0u32);
    let total = Cell::new(0u32);
    let strategy = (
        prop::collection::vec(arb_cap(), 1..4),
        arb_cap(),
        prop::collection::vec(arb_envelope(), 24),
    );
    runner
        .run(&strategy, |(mine, grant, envelopes)| {
            let set = CapabilitySet::compile(&mine).unwrap();
            let cap = Capability::compile(grant.clone()).unwrap();
            total.set(total.get() + 1);
            if set.covers(&cap) {
                covered.set(covered.get() + 1);
                for (kind, payload) in &envelopes {
                    if cap.matches(kind, payload.as_ref()) {
                        exercised.set(exercised.get() + 1);
                        prop_assert!(
                            set.allows(kind, payload.as_ref()),
                            "set {} covers {} but not {kind} {:?}",
                            set.to_json(),
                            grant,
                            payload
                        );
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    let (covered, exercised, total) = (covered.get(), exercised.get(), total.get());
    // The property is not vacuous: many grants are covered and do match envelopes.
    eprintln!("covers: {covered}/{total} grants, {exercised} matching envelopes checked");
    assert!(
        covered * 10 >= total,
        "only {covered} of {total} grants covered"
    );
    assert!(exercised >= 2000, "only {exercised} envelopes exercised");
}

#[test]
fn a_capability_covers_itself_when_its_patterns_are_comparable() {
    let mut runner = TestRunner::new(config(500));
    runner
        .run(&arb_cap(), |c| {
            let cap = Capability::compile(c.clone()).unwrap();
            let set = CapabilitySet::from_capabilities(vec![cap.clone()]);
            prop_assert!(set.covers(&cap), "{c}");
            Ok(())
        })
        .unwrap();
}
