//! Value patterns (for `kind` and everything inside `payload`) and the compiled capability.
//!
//! Security rules enforced here: a missing field never matches (not even `"!…"` or `null`);
//! an absent payload is `{}`; a type mismatch never matches; a scalar pattern never matches
//! an array element-wise. Object patterns are subset matches.
//!
//! Keys inside payload object patterns, at any level: `$…` is a JSONPath
//! relative to that object, `"**"` searches the object itself and everything below it, a key
//! with `*`, `?` or `{` is a glob over field names (one matching field suffices), anything
//! else names one field. A search (`"**"` or a path with `..`) may not appear inside another
//! search's pattern, which keeps every check linear in the payload's size.

use super::glob::Glob;
use super::jsonpath::{JsonPath, MAX_DESCENT, descend};
use super::string::StrPat;
use super::text::bytes_eq;
use serde_json::{Map, Number, Value};

/// Deepest array/object nesting accepted in a pattern.
pub(crate) const MAX_NESTING: usize = 32;

/// Most bytes of pattern text (`kind` and `payload`, as compact JSON) accepted.
pub(crate) const MAX_PATTERN_BYTES: usize = 4096;

/// A compiled value pattern.
#[derive(Debug)]
pub(crate) enum ValuePat {
    Null,
    Bool(bool),
    Num(Number),
    Str(StrPat),
    AnyOf(Vec<ValuePat>),
    Object(Vec<Entry>),
}

/// One key of an object pattern with its value pattern.
#[derive(Debug)]
pub(crate) enum Entry {
    Field(Box<str>, ValuePat),
    GlobKey(Glob, ValuePat),
    Deep(ValuePat),
    Path(JsonPath, ValuePat),
}

/// Equality of JSON numbers by value: integers exactly, anything with a fraction as `f64`.
pub(crate) fn num_eq(a: &Number, b: &Number) -> bool {
    if a.is_f64() || b.is_f64() {
        return a.as_f64() == b.as_f64();
    }
    let wide = |n: &Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    wide(a) == wide(b)
}

impl ValuePat {
    /// Whether `v` (a present value) matches. Never allocates, never panics.
    pub(crate) fn matches(&self, v: &Value) -> bool {
        match (self, v) {
            (ValuePat::Null, Value::Null) => true,
            (ValuePat::Bool(p), Value::Bool(b)) => p == b,
            (ValuePat::Num(p), Value::Number(n)) => num_eq(p, n),
            (ValuePat::Str(p), Value::String(s)) => p.matches(s),
            (ValuePat::AnyOf(alts), _) => alts.iter().any(|a| a.matches(v)),
            (ValuePat::Object(entries), Value::Object(o)) => {
                entries.iter().all(|e| e.matches(o, v))
            }
            _ => false,
        }
    }
}

impl Entry {
    fn matches(&self, o: &Map<String, Value>, whole: &Value) -> bool {
        match self {
            Entry::Field(k, p) => field(o, k).is_some_and(|v| p.matches(v)),
            Entry::GlobKey(g, p) => o.iter().any(|(k, v)| g.matches(k) && p.matches(v)),
            Entry::Deep(p) => descend(whole, MAX_DESCENT, &mut |v| p.matches(v)),
            Entry::Path(path, p) => path.any(whole, &mut |v| p.matches(v)),
        }
    }
}

/// Looks a field up. Payloads are mostly small objects, where a scan comparing lengths
/// first beats the map's ordered search (which calls `memcmp` at every step).
#[inline]
fn field<'v>(o: &'v Map<String, Value>, k: &str) -> Option<&'v Value> {
    if o.len() <= 8 {
        o.iter()
            .find(|(name, _)| bytes_eq(name.as_bytes(), k.as_bytes()))
            .map(|(_, v)| v)
    } else {
        o.get(k)
    }
}

/// A compiled capability: kind alternatives, then an optional payload pattern.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub(crate) kind: Vec<StrPat>,
    pub(crate) payload: Option<ValuePat>,
}

impl Compiled {
    /// Validates and compiles a capability object.
    pub(crate) fn new(raw: &Value) -> Result<Compiled, String> {
        let obj = raw
            .as_object()
            .ok_or("a capability must be a JSON object")?;
        let named = |why: String| match obj.get("id").and_then(Value::as_str) {
            Some(id) => format!("capability {id:?}: {why}"),
            None => why,
        };
        let kind_raw = obj
            .get("kind")
            .ok_or_else(|| named("missing `kind`".into()))?;
        // Checked before anything walks the whole value, so a hand-built value nested
        // arbitrarily deep cannot exhaust the stack here.
        for (name, v) in [("kind", Some(kind_raw)), ("payload", obj.get("payload"))] {
            if v.is_some_and(|v| deeper_than(v, MAX_NESTING)) {
                return Err(named(format!(
                    "{name}: nested deeper than {MAX_NESTING} levels"
                )));
            }
        }
        let size = json_len(kind_raw) + obj.get("payload").map_or(0, json_len);
        if size > MAX_PATTERN_BYTES {
            return Err(named(format!(
                "pattern text of {size} bytes exceeds the limit of {MAX_PATTERN_BYTES}"
            )));
        }
        let mut kind = Vec::new();
        compile_kind(kind_raw, 1, &mut kind).map_err(named)?;
        let payload = obj
            .get("payload")
            .map(|p| compile_value(p, "payload", 1, false))
            .transpose()
            .map_err(named)?;
        Ok(Compiled { kind, payload })
    }

    /// Kind first: `Some` when the kind alone decides.
    #[inline]
    pub(crate) fn matches_kind_only(&self, kind: &str) -> Option<bool> {
        if !self.kind.iter().any(|p| p.matches(kind)) {
            Some(false)
        } else if self.payload.is_none() {
            Some(true)
        } else {
            None
        }
    }

    /// Kind, then payload (absent payload is `{}`).
    #[inline]
    pub(crate) fn matches(&self, kind: &str, payload: Option<&Value>) -> bool {
        match self.matches_kind_only(kind) {
            Some(b) => b,
            None => match (&self.payload, payload) {
                (Some(p), Some(v)) => p.matches(v),
                // `Map::new` does not allocate.
                (Some(p), None) => p.matches(&Value::Object(Map::new())),
                (None, _) => true,
            },
        }
    }
}

/// Whether `v` has more than `limit` levels of nested arrays/objects; recursion stops there.
fn deeper_than(v: &Value, limit: usize) -> bool {
    match v {
        Value::Array(a) => limit == 0 || a.iter().any(|c| deeper_than(c, limit - 1)),
        Value::Object(o) => limit == 0 || o.values().any(|c| deeper_than(c, limit - 1)),
        _ => false,
    }
}

fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    // Writing a `Value` into a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

fn compile_kind(v: &Value, depth: usize, out: &mut Vec<StrPat>) -> Result<(), String> {
    match v {
        Value::String(s) => {
            out.push(StrPat::compile(s).map_err(|e| format!("kind: {e}"))?);
            Ok(())
        }
        Value::Array(alts) => {
            if depth > MAX_NESTING {
                return Err(format!("kind: nested deeper than {MAX_NESTING} levels"));
            }
            alts.iter()
                .try_for_each(|a| compile_kind(a, depth + 1, out))
        }
        _ => Err("`kind` must be a string pattern or an array of them".into()),
    }
}

fn compile_value(v: &Value, at: &str, depth: usize, in_search: bool) -> Result<ValuePat, String> {
    let too_deep = || format!("{at}: nested deeper than {MAX_NESTING} levels");
    Ok(match v {
        Value::Null => ValuePat::Null,
        Value::Bool(b) => ValuePat::Bool(*b),
        Value::Number(n) => ValuePat::Num(n.clone()),
        Value::String(s) => ValuePat::Str(StrPat::compile(s).map_err(|e| format!("{at}: {e}"))?),
        Value::Array(alts) => {
            if depth > MAX_NESTING {
                return Err(too_deep());
            }
            ValuePat::AnyOf(
                alts.iter()
                    .enumerate()
                    .map(|(i, a)| compile_value(a, &format!("{at}[{i}]"), depth + 1, in_search))
                    .collect::<Result<_, _>>()?,
            )
        }
        Value::Object(o) => {
            if depth > MAX_NESTING {
                return Err(too_deep());
            }
            let mut entries = Vec::with_capacity(o.len());
            for (k, pv) in o {
                let here = format!("{at}.{k}");
                let entry = if k.starts_with('$') {
                    let path = JsonPath::compile(k).map_err(|e| format!("{at}: {e}"))?;
                    let search = path.searches();
                    if search && in_search {
                        return Err(format!("{here}: a search inside a search is not allowed"));
                    }
                    Entry::Path(
                        path,
                        compile_value(pv, &here, depth + 1, in_search || search)?,
                    )
                } else if k == "**" {
                    if in_search {
                        return Err(format!("{here}: a search inside a search is not allowed"));
                    }
                    Entry::Deep(compile_value(pv, &here, depth + 1, true)?)
                } else if k.contains(['*', '?', '{']) {
                    let g = Glob::compile(k).map_err(|e| format!("{here}: {e}"))?;
                    Entry::GlobKey(g, compile_value(pv, &here, depth + 1, in_search)?)
                } else {
                    Entry::Field(
                        k.as_str().into(),
                        compile_value(pv, &here, depth + 1, in_search)?,
                    )
                };
                entries.push(entry);
            }
            ValuePat::Object(entries)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_by_value_same_type() {
        let n = |v: Value| v.as_number().unwrap().clone();
        assert!(num_eq(&n(json!(5)), &n(json!(5.0))));
        assert!(num_eq(&n(json!(u64::MAX)), &n(json!(u64::MAX))));
        assert!(!num_eq(&n(json!(-1)), &n(json!(u64::MAX))));
        assert!(!num_eq(&n(json!(1)), &n(json!(1.5))));
    }

    #[test]
    fn nesting_limits() {
        let mut p = json!("x");
        for _ in 0..32 {
            p = json!({ "a": p });
        }
        assert!(Compiled::new(&json!({"kind": "k", "payload": p})).is_ok());
        let p = json!({ "a": p });
        let e = Compiled::new(&json!({"kind": "k", "payload": p})).unwrap_err();
        assert!(e.contains("deeper than 32"), "{e}");
    }

    #[test]
    fn very_deep_values_are_refused_without_recursing_through_them() {
        let mut v = json!(1);
        for _ in 0..100_000 {
            v = Value::Array(vec![v]);
        }
        let mut cap = Map::new();
        cap.insert("kind".into(), json!("k"));
        cap.insert("payload".into(), v);
        let raw = Value::Object(cap);
        let e = Compiled::new(&raw).unwrap_err();
        assert!(e.contains("deeper than 32"), "{e}");
        // Dropping a value this deep recurses in serde_json itself; leak it instead.
        std::mem::forget(raw);
    }

    #[test]
    fn search_in_search_refused() {
        for p in [
            json!({"**": {"**": "x"}}),
            json!({"**": {"$..a": "x"}}),
            json!({"$..a": {"**": "x"}}),
        ] {
            let e = Compiled::new(&json!({"kind": "k", "payload": p})).unwrap_err();
            assert!(e.contains("search inside a search"), "{e}");
        }
        assert!(Compiled::new(&json!({"kind": "k", "payload": {"**": {"$.a": "x"}}})).is_ok());
    }
}
