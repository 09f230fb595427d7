//! The JSONPath subset allowed as a payload key: `$`, `.name`, `['name']` / `["name"]`,
//! `[0]`, `[*]` / `.*`, and one descendant step `..name` / `..['name']` / `..*` / `..[*]`.
//!
//! `$` is the object the key belongs to. Evaluation visits results one at a time and stops at
//! the first one the caller accepts, so it never allocates. A descendant step searches at
//! most [`MAX_DESCENT`] levels down; deeper values are not found (and so never allowed).
//! Only one descendant step per path keeps the cost linear in the payload's size.

use serde_json::Value;

/// How many levels a descendant search (`..` or the `**` key) goes down.
pub(crate) const MAX_DESCENT: u32 = 128;

#[derive(Debug, PartialEq, Eq)]
enum Seg {
    Child(Box<str>),
    Index(usize),
    Wild,
    Desc(Box<str>),
    DescWild,
}

/// A compiled path.
#[derive(Debug)]
pub(crate) struct JsonPath {
    src: Box<str>,
    segs: Vec<Seg>,
}

impl JsonPath {
    /// Parses a path starting with `$`.
    pub(crate) fn compile(src: &str) -> Result<JsonPath, String> {
        let bad = |why: &str| format!("unsupported JSONPath {src:?}: {why}");
        let mut rest = src
            .strip_prefix('$')
            .ok_or_else(|| bad("must start with `$`"))?;
        let mut segs = Vec::new();
        while !rest.is_empty() {
            let (desc, after) = match rest.strip_prefix("..") {
                Some(r) => (true, r),
                None => (false, rest),
            };
            let (seg, r) = if desc {
                if after.starts_with('[') {
                    bracket(after).ok_or_else(|| bad("bad `[...]` step"))?
                } else {
                    dotted(after)
                }
            } else if let Some(r) = after.strip_prefix('.') {
                dotted(r)
            } else if after.starts_with('[') {
                bracket(after).ok_or_else(|| bad("bad `[...]` step"))?
            } else {
                return Err(bad("expected `.` or `[`"));
            };
            let seg = match (desc, seg) {
                (_, Seg::Child(n)) if n.is_empty() => return Err(bad("empty name")),
                (false, s) => s,
                (true, Seg::Child(n)) => Seg::Desc(n),
                (true, Seg::Wild) => Seg::DescWild,
                (true, _) => return Err(bad("`..` takes a name or `*`")),
            };
            segs.push(seg);
            rest = r;
        }
        if segs
            .iter()
            .filter(|s| matches!(s, Seg::Desc(_) | Seg::DescWild))
            .count()
            > 1
        {
            return Err(bad("at most one `..` step"));
        }
        Ok(JsonPath {
            src: src.into(),
            segs,
        })
    }

    /// The path's text.
    pub(crate) fn src(&self) -> &str {
        &self.src
    }

    /// Whether the path has a descendant step.
    pub(crate) fn searches(&self) -> bool {
        self.segs
            .iter()
            .any(|s| matches!(s, Seg::Desc(_) | Seg::DescWild))
    }

    /// Whether some result of the path over `root` satisfies `accept`.
    pub(crate) fn any(&self, root: &Value, accept: &mut dyn FnMut(&Value) -> bool) -> bool {
        walk(&self.segs, root, accept)
    }
}

fn dotted(s: &str) -> (Seg, &str) {
    let end = s.find(['.', '[']).unwrap_or(s.len());
    let name = &s[..end];
    let seg = if name == "*" {
        Seg::Wild
    } else {
        Seg::Child(name.into())
    };
    (seg, &s[end..])
}

fn bracket(s: &str) -> Option<(Seg, &str)> {
    let inner = s.strip_prefix('[')?;
    for q in ['\'', '"'] {
        if let Some(body) = inner.strip_prefix(q) {
            let close = body.find(q)?;
            let rest = body[close + 1..].strip_prefix(']')?;
            return Some((Seg::Child(body[..close].into()), rest));
        }
    }
    let close = inner.find(']')?;
    let (tok, rest) = (&inner[..close], &inner[close + 1..]);
    if tok == "*" {
        return Some((Seg::Wild, rest));
    }
    if tok.is_empty() || !tok.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((Seg::Index(tok.parse().ok()?), rest))
}

/// Calls `visit` on `v` and its descendants down to `budget` levels, stopping at the first
/// `true`.
pub(crate) fn descend(v: &Value, budget: u32, visit: &mut dyn FnMut(&Value) -> bool) -> bool {
    if visit(v) {
        return true;
    }
    if budget == 0 {
        return false;
    }
    match v {
        Value::Array(a) => a.iter().any(|c| descend(c, budget - 1, visit)),
        Value::Object(o) => o.values().any(|c| descend(c, budget - 1, visit)),
        _ => false,
    }
}

fn walk(segs: &[Seg], v: &Value, accept: &mut dyn FnMut(&Value) -> bool) -> bool {
    let Some((first, rest)) = segs.split_first() else {
        return accept(v);
    };
    match first {
        Seg::Child(k) => v
            .as_object()
            .and_then(|o| o.get(&**k))
            .is_some_and(|c| walk(rest, c, accept)),
        Seg::Index(i) => v
            .as_array()
            .and_then(|a| a.get(*i))
            .is_some_and(|c| walk(rest, c, accept)),
        Seg::Wild => match v {
            Value::Array(a) => a.iter().any(|c| walk(rest, c, accept)),
            Value::Object(o) => o.values().any(|c| walk(rest, c, accept)),
            _ => false,
        },
        Seg::Desc(k) => descend(v, MAX_DESCENT, &mut |node| {
            node.as_object()
                .and_then(|o| o.get(&**k))
                .is_some_and(|c| walk(rest, c, accept))
        }),
        Seg::DescWild => descend(v, MAX_DESCENT, &mut |node| {
            // Descendants only, not the starting node itself.
            !std::ptr::eq(node, v) && walk(rest, node, accept)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn results(p: &str, v: &Value) -> Vec<Value> {
        let mut out = Vec::new();
        JsonPath::compile(p).unwrap().any(v, &mut |x| {
            out.push(x.clone());
            false
        });
        out
    }

    #[test]
    fn steps() {
        let v = json!({"a": {"b": 1}, "l": [{"name": "x"}, {"name": "y"}], "q": {"name": "z"}});
        assert_eq!(results("$.a.b", &v), vec![json!(1)]);
        assert_eq!(results("$['a']['b']", &v), vec![json!(1)]);
        assert_eq!(results("$[\"a\"].b", &v), vec![json!(1)]);
        assert_eq!(results("$.l[1].name", &v), vec![json!("y")]);
        assert_eq!(results("$.l[*].name", &v), vec![json!("x"), json!("y")]);
        assert_eq!(results("$.l[2]", &v), Vec::<Value>::new());
        assert_eq!(results("$.a.*", &v), vec![json!(1)]);
        let mut names = results("$..name", &v);
        names.sort_by_key(|n| n.to_string());
        assert_eq!(names, vec![json!("x"), json!("y"), json!("z")]);
        assert_eq!(results("$", &v), vec![v.clone()]);
        assert_eq!(results("$.l..[*]", &v).len(), 4);
    }

    #[test]
    fn refused() {
        for p in [
            "a", "$a", "$.", "$[", "$[x]", "$['a'", "$..", "$..[0]", "$..a..b", "$.a[-1]",
        ] {
            assert!(JsonPath::compile(p).is_err(), "{p}");
        }
    }
}
