//! Property tests: a value generated from any schema validates against it, and any
//! single-rule mutation of such a value is refused with that rule (and its path) named.

use super::{Additional, Items, JsonSchema, Schema};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// A small deterministic generator for values (the schema comes from proptest).
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        // Strings: bounded lengths, or an enum, each maybe with the lower-case pattern.
        (0u64..4, 3u64..8, any::<bool>()).prop_map(|(min, span, pat)| {
            let mut s = json!({"type": "string", "minLength": min, "maxLength": min + span});
            if pat {
                s["pattern"] = json!("^[a-z]*$");
            }
            s
        }),
        prop::collection::btree_set("[a-z]{1,6}", 1..4)
            .prop_map(|e| json!({"type": "string", "enum": e.into_iter().collect::<Vec<_>>()})),
        (-50i64..50, 10i64..100)
            .prop_map(|(min, span)| json!({"type": "integer", "minimum": min, "maximum": min + span})),
        (-50i64..50, 1i64..100).prop_map(
            |(min, span)| json!({"type": "number", "minimum": min as f64 + 0.5, "maximum": (min + span) as f64 + 0.5})
        ),
        Just(json!({"type": "boolean"})),
    ]
}

fn schema() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            (inner.clone(), 0u64..3, 1u64..4, any::<bool>()).prop_map(
                |(items, min, span, unique)| {
                    // Uniqueness only where the items' domain is large.
                    let roomy = items["type"] == "integer"
                        || (items["type"] == "string" && items.get("enum").is_none());
                    json!({"type": "array", "items": items, "minItems": min, "maxItems": min + span,
                       "uniqueItems": unique && roomy})
                }
            ),
            (
                prop::collection::vec(inner, 0..4),
                any::<u8>(),
                any::<bool>(),
                any::<bool>()
            )
                .prop_map(|(props, req, closed, bounded)| {
                    let mut properties = Map::new();
                    let mut required = Vec::new();
                    for (i, p) in props.into_iter().enumerate() {
                        let name = format!("p{i}");
                        if req & (1 << i) != 0 {
                            required.push(json!(name));
                        }
                        properties.insert(name, p);
                    }
                    let n = properties.len() as u64;
                    let mut o = json!({"type": "object", "properties": properties,
                                       "required": required, "additionalProperties": !closed});
                    if bounded {
                        o["minProperties"] = json!(required.len() as u64);
                        o["maxProperties"] = json!(n.max(1));
                    }
                    o
                }),
        ]
    })
}

/// A value the schema accepts.
fn generate(s: &JsonSchema, g: &mut Gen) -> Value {
    match s {
        JsonSchema::String(st) => {
            if let Some(e) = &st.enumeration {
                return json!(e[g.between(0, e.len() as i64 - 1) as usize]);
            }
            let min = st.min_length.unwrap_or(0) as i64;
            let max = st.max_length.map_or(min + 5, |m| m as i64);
            let len = g.between(min, max);
            let text: String = (0..len)
                .map(|_| (b'a' + g.between(0, 25) as u8) as char)
                .collect();
            json!(text)
        }
        JsonSchema::Integer(n) => json!(g.between(
            n.minimum.unwrap_or(-10.0) as i64,
            n.maximum.unwrap_or(10.0) as i64
        )),
        JsonSchema::Number(n) => {
            let (lo, hi) = (n.minimum.unwrap_or(0.0), n.maximum.unwrap_or(1.0));
            json!(lo + (hi - lo) * (g.between(0, 1000) as f64 / 1000.0))
        }
        JsonSchema::Boolean(_) => json!(g.between(0, 1) == 1),
        JsonSchema::Array(a) => {
            let Items::All(item) = &a.items else {
                unreachable!("generated schemas use one item schema")
            };
            let min = a.min_items.unwrap_or(0) as i64;
            let n = g.between(min, a.max_items.map_or(min + 2, |m| m as i64));
            let mut out: Vec<Value> = Vec::new();
            let mut tries = 0;
            while (out.len() as i64) < n {
                let v = generate(item, g);
                tries += 1;
                if a.unique_items && out.contains(&v) && tries < 1000 {
                    continue;
                }
                out.push(v);
            }
            Value::Array(out)
        }
        JsonSchema::Object(o) => {
            let mut out = Map::new();
            let max = o.max_properties.map_or(usize::MAX, |m| m as usize);
            for (name, p) in &o.properties {
                let wanted = o.is_required(name) || g.between(0, 1) == 1;
                if wanted && (o.is_required(name) || out.len() < max) {
                    out.insert(name.clone(), generate(p, g));
                }
            }
            // Fill up to minProperties with optional properties.
            let min = o.min_properties.unwrap_or(0) as usize;
            for (name, p) in &o.properties {
                if out.len() >= min {
                    break;
                }
                out.entry(name.clone()).or_insert_with(|| generate(p, g));
            }
            Value::Object(out)
        }
    }
}

/// Every single-rule mutation of a valid `v`: the mutated value, the rule it breaks, and
/// where.
fn mutations(s: &JsonSchema, v: &Value, path: &str) -> Vec<(Value, &'static str, String)> {
    let at = if path.is_empty() {
        "/".to_owned()
    } else {
        path.to_owned()
    };
    let mut out = Vec::new();
    let wrong_type = match s {
        JsonSchema::String(_) => json!(42),
        JsonSchema::Integer(_) | JsonSchema::Number(_) => json!("7"),
        JsonSchema::Boolean(_) => json!(1),
        JsonSchema::Array(_) => json!({}),
        JsonSchema::Object(_) => json!([]),
    };
    out.push((wrong_type, "type", at.clone()));
    match (s, v) {
        (JsonSchema::String(st), Value::String(text)) => {
            let len = text.chars().count() as u64;
            if let Some(e) = &st.enumeration {
                let other = format!("{}-not-listed", e.join(""));
                out.push((json!(other), "enum", at.clone()));
            }
            if let Some(min) = st.min_length.filter(|m| *m > 0 && st.enumeration.is_none()) {
                out.push((json!("a".repeat(min as usize - 1)), "minLength", at.clone()));
            }
            if let Some(max) = st.max_length.filter(|_| st.enumeration.is_none()) {
                out.push((json!("a".repeat(max as usize + 1)), "maxLength", at.clone()));
            }
            if st.pattern.is_some() && len > 0 {
                let mut t: Vec<char> = text.chars().collect();
                t[0] = 'A';
                out.push((
                    json!(t.into_iter().collect::<String>()),
                    "pattern",
                    at.clone(),
                ));
            }
        }
        (JsonSchema::Integer(n), _) => {
            if let Some(min) = n.minimum {
                out.push((json!(min as i64 - 1), "minimum", at.clone()));
                if n.maximum.is_some_and(|max| min + 0.5 <= max) {
                    out.push((json!(min + 0.5), "type", at.clone()));
                }
            }
            if let Some(max) = n.maximum {
                out.push((json!(max as i64 + 1), "maximum", at.clone()));
            }
        }
        (JsonSchema::Number(n), _) => {
            if let Some(min) = n.minimum {
                out.push((json!(min - 0.25), "minimum", at.clone()));
            }
            if let Some(max) = n.maximum {
                out.push((json!(max + 0.25), "maximum", at.clone()));
            }
        }
        (JsonSchema::Array(a), Value::Array(list)) => {
            let Items::All(item) = &a.items else {
                unreachable!()
            };
            if let Some(min) = a.min_items.filter(|m| *m > 0) {
                out.push((json!(list[..min as usize - 1]), "minItems", at.clone()));
            }
            if let Some(max) = a.max_items {
                let mut longer = list.clone();
                let mut g = Gen(list.len() as u64);
                while longer.len() as u64 <= max {
                    longer.push(generate(item, &mut g));
                }
                out.push((json!(longer), "maxItems", at.clone()));
            }
            if a.unique_items && list.len() >= 2 {
                let mut dup = list.clone();
                dup[1] = dup[0].clone();
                out.push((json!(dup), "uniqueItems", at.clone()));
            }
            for (i, x) in list.iter().enumerate() {
                for (m, rule, p) in mutations(item, x, &format!("{path}/{i}")) {
                    let mut copy = list.clone();
                    copy[i] = m;
                    // Changing an item may make it equal to another: not this rule's test.
                    if a.unique_items && copy.iter().filter(|y| **y == copy[i]).count() > 1 {
                        continue;
                    }
                    out.push((json!(copy), rule, p));
                }
            }
        }
        (JsonSchema::Object(o), Value::Object(map)) => {
            let n = map.len() as u64;
            let min = o.min_properties.unwrap_or(0);
            let max = o.max_properties.unwrap_or(u64::MAX);
            for r in &o.required {
                if n > min {
                    let mut fewer = map.clone();
                    fewer.remove(r);
                    out.push((Value::Object(fewer), "required", at.clone()));
                }
            }
            if o.additional == Additional::Denied && n < max {
                let mut more = map.clone();
                more.insert("zz_extra".into(), json!(1));
                out.push((
                    Value::Object(more),
                    "additionalProperties",
                    format!("{path}/zz_extra"),
                ));
            }
            if o.min_properties.is_some_and(|m| m > 0 && m == n) {
                let mut fewer = map.clone();
                let optional = map.keys().find(|k| !o.is_required(k)).cloned();
                if let Some(k) = optional {
                    fewer.remove(&k);
                    out.push((Value::Object(fewer), "minProperties", at.clone()));
                }
            }
            if o.max_properties.is_some() {
                let mut more = map.clone();
                let mut i = 0;
                while more.len() as u64 <= max {
                    more.insert(format!("zz_{i}"), json!(true));
                    i += 1;
                }
                out.push((Value::Object(more), "maxProperties", at.clone()));
            }
            for (name, x) in map {
                let Some(p) = o.property(name) else { continue };
                for (m, rule, pth) in mutations(p, x, &format!("{path}/{name}")) {
                    let mut copy = map.clone();
                    copy.insert(name.clone(), m);
                    out.push((Value::Object(copy), rule, pth));
                }
            }
        }
        _ => {}
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn generated_values_validate_and_single_mutations_name_their_rule(raw in schema(), seed in any::<u64>()) {
        let mut problems = Vec::new();
        let typed = JsonSchema::load(&raw, "schema", &mut problems);
        prop_assert!(problems.is_empty(), "{raw}: {problems:?}");
        let typed = typed.unwrap();
        let compiled = Schema::compile(&raw).unwrap();
        let v = generate(&typed, &mut Gen(seed));
        prop_assert!(compiled.validate(&v).is_ok(), "{v} against {raw}: {:?}", compiled.validate(&v));
        for (m, rule, path) in mutations(&typed, &v, "") {
            let err = compiled.validate(&m);
            prop_assert!(err.is_err(), "{m} (breaking {rule} at {path}) was accepted by {raw}");
            let err = err.unwrap_err();
            prop_assert_eq!(err.rule, rule, "{} at {}: {} for {}", m, path, err, raw);
            prop_assert_eq!(&err.path, &path, "{} for {}", m, raw);
        }
    }
}
