//! Pattern compilation and matching.
//!
//! PROVISIONAL: kind patterns (plain, `*`, simple globs) and exact payload subsets only.
//! The full language of capability-patterns.md replaces this module.

use serde_json::Value;

pub(crate) struct Compiled {
    kind: String,
    payload: Option<Value>,
}

impl Compiled {
    pub(crate) fn new(raw: &Value) -> Result<Compiled, String> {
        let obj = raw
            .as_object()
            .ok_or("a capability must be a JSON object")?;
        let kind = match obj.get("kind") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err("`kind` must be a string pattern".into()),
            None => return Err("missing `kind`".into()),
        };
        Ok(Compiled {
            kind,
            payload: obj.get("payload").cloned(),
        })
    }

    pub(crate) fn matches_kind_only(&self, kind: &str) -> Option<bool> {
        if !glob(&self.kind, kind) {
            return Some(false);
        }
        if self.payload.is_some() {
            None
        } else {
            Some(true)
        }
    }

    pub(crate) fn matches(&self, kind: &str, payload: Option<&Value>) -> bool {
        match self.matches_kind_only(kind) {
            Some(b) => b,
            None => {
                let empty = Value::Object(Default::default());
                subset(
                    self.payload.as_ref().unwrap_or(&empty),
                    payload.unwrap_or(&empty),
                )
            }
        }
    }
}

fn glob(p: &str, s: &str) -> bool {
    if p == "*" {
        return true;
    }
    match p.strip_suffix('*') {
        Some(prefix) => s.starts_with(prefix) && !s[prefix.len()..].contains('/'),
        None => p == s,
    }
}

fn subset(p: &Value, v: &Value) -> bool {
    match (p, v) {
        (Value::Object(po), Value::Object(vo)) => po
            .iter()
            .all(|(k, pv)| vo.get(k).is_some_and(|vv| subset(pv, vv))),
        (Value::String(ps), Value::String(vs)) => glob(ps, vs),
        _ => p == v,
    }
}

pub(crate) fn covers(mine: &Compiled, theirs: &Compiled) -> bool {
    mine.kind == "*" && mine.payload.is_none()
        || (mine.kind == theirs.kind && mine.payload.is_none())
}
