//! The validator: any tool input schema (ours or another participant's), compiled once.
//!
//! Supported: `type` (string or list), `properties`, `required`, `additionalProperties`
//! (bool or schema), `minProperties`, `maxProperties`, `enum`, `const`, `items`,
//! `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `minLength`, `maxLength`,
//! `minItems`, `maxItems`, `uniqueItems`, `pattern`, `anyOf`, `oneOf`, `allOf`. Unknown
//! keywords (`description`, `default`, `$schema`, ...) are ignored, as JSON Schema says.
//! A violation names the keyword it breaks, so a caller can tell which rule refused it.

use regex::Regex;
use serde_json::{Map, Value};

const MAX_DEPTH: usize = 32;

/// A compiled schema.
#[derive(Debug, Clone)]
pub struct Schema {
    types: Vec<JsonType>,
    properties: Vec<(String, Schema)>,
    required: Vec<String>,
    additional: Additional,
    enumeration: Option<Vec<Value>>,
    constant: Option<Value>,
    items: Option<Box<Schema>>,
    /// `items` written as a list: positional schemas.
    tuple: Vec<Schema>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    exclusive_minimum: Option<f64>,
    exclusive_maximum: Option<f64>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    unique_items: bool,
    min_properties: Option<u64>,
    max_properties: Option<u64>,
    pattern: Option<Regex>,
    any_of: Vec<Schema>,
    one_of: Vec<Schema>,
    all_of: Vec<Schema>,
}

#[derive(Debug, Clone)]
enum Additional {
    Allowed,
    Denied,
    Schema(Box<Schema>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JsonType {
    Null,
    Boolean,
    Integer,
    Number,
    String,
    Array,
    Object,
}

impl JsonType {
    fn parse(s: &str) -> Option<JsonType> {
        Some(match s {
            "null" => JsonType::Null,
            "boolean" => JsonType::Boolean,
            "integer" => JsonType::Integer,
            "number" => JsonType::Number,
            "string" => JsonType::String,
            "array" => JsonType::Array,
            "object" => JsonType::Object,
            _ => return None,
        })
    }

    fn admits(self, v: &Value) -> bool {
        match self {
            JsonType::Null => v.is_null(),
            JsonType::Boolean => v.is_boolean(),
            JsonType::Integer => {
                v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            JsonType::Number => v.is_number(),
            JsonType::String => v.is_string(),
            JsonType::Array => v.is_array(),
            JsonType::Object => v.is_object(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            JsonType::Null => "null",
            JsonType::Boolean => "boolean",
            JsonType::Integer => "integer",
            JsonType::Number => "number",
            JsonType::String => "string",
            JsonType::Array => "array",
            JsonType::Object => "object",
        }
    }
}

/// The first violation found, with a JSON-pointer-like path and the keyword it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message} (`{rule}`)")]
pub struct SchemaViolation {
    /// Where (`/a/0/b`; `/` for the root).
    pub path: String,
    /// The keyword broken (`minimum`, `required`, `type`, ...).
    pub rule: &'static str,
    /// What is wrong.
    pub message: String,
}

fn num(obj: &Map<String, Value>, key: &str) -> Result<Option<f64>, String> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be a number")),
    }
}

fn count(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be a non-negative integer")),
    }
}

impl Schema {
    /// Compiles a schema; `true`/`{}` accept anything, `false` nothing.
    pub fn compile(raw: &Value) -> Result<Schema, String> {
        Schema::compile_at(raw, 0)
    }

    fn empty() -> Schema {
        Schema {
            types: Vec::new(),
            properties: Vec::new(),
            required: Vec::new(),
            additional: Additional::Allowed,
            enumeration: None,
            constant: None,
            items: None,
            tuple: Vec::new(),
            minimum: None,
            maximum: None,
            exclusive_minimum: None,
            exclusive_maximum: None,
            min_length: None,
            max_length: None,
            min_items: None,
            max_items: None,
            unique_items: false,
            min_properties: None,
            max_properties: None,
            pattern: None,
            any_of: Vec::new(),
            one_of: Vec::new(),
            all_of: Vec::new(),
        }
    }

    fn compile_at(raw: &Value, depth: usize) -> Result<Schema, String> {
        if depth > MAX_DEPTH {
            return Err(format!("schema nested deeper than {MAX_DEPTH} levels"));
        }
        let obj = match raw {
            Value::Bool(true) => return Ok(Schema::empty()),
            Value::Bool(false) => {
                let mut s = Schema::empty();
                s.enumeration = Some(Vec::new());
                return Ok(s);
            }
            Value::Object(o) => o,
            _ => return Err("a schema must be an object or a boolean".into()),
        };
        let mut s = Schema::empty();
        match obj.get("type") {
            None => {}
            Some(Value::String(t)) => {
                s.types
                    .push(JsonType::parse(t).ok_or_else(|| format!("unknown type {t:?}"))?);
            }
            Some(Value::Array(ts)) => {
                for t in ts {
                    let t = t.as_str().ok_or("`type` entries must be strings")?;
                    s.types
                        .push(JsonType::parse(t).ok_or_else(|| format!("unknown type {t:?}"))?);
                }
            }
            Some(_) => return Err("`type` must be a string or a list".into()),
        }
        if let Some(p) = obj.get("properties") {
            let p = p.as_object().ok_or("`properties` must be an object")?;
            for (k, v) in p {
                s.properties
                    .push((k.clone(), Schema::compile_at(v, depth + 1)?));
            }
        }
        if let Some(r) = obj.get("required") {
            let r = r.as_array().ok_or("`required` must be a list")?;
            for k in r {
                s.required.push(
                    k.as_str()
                        .ok_or("`required` entries must be strings")?
                        .to_owned(),
                );
            }
        }
        s.additional = match obj.get("additionalProperties") {
            None | Some(Value::Bool(true)) => Additional::Allowed,
            Some(Value::Bool(false)) => Additional::Denied,
            Some(v) => Additional::Schema(Box::new(Schema::compile_at(v, depth + 1)?)),
        };
        if let Some(e) = obj.get("enum") {
            s.enumeration = Some(e.as_array().ok_or("`enum` must be a list")?.clone());
        }
        s.constant = obj.get("const").cloned();
        match obj.get("items") {
            None => {}
            Some(Value::Array(list)) => {
                for i in list {
                    s.tuple.push(Schema::compile_at(i, depth + 1)?);
                }
            }
            Some(i) => s.items = Some(Box::new(Schema::compile_at(i, depth + 1)?)),
        }
        s.minimum = num(obj, "minimum")?;
        s.maximum = num(obj, "maximum")?;
        s.exclusive_minimum = num(obj, "exclusiveMinimum")?;
        s.exclusive_maximum = num(obj, "exclusiveMaximum")?;
        s.min_length = count(obj, "minLength")?;
        s.max_length = count(obj, "maxLength")?;
        s.min_items = count(obj, "minItems")?;
        s.max_items = count(obj, "maxItems")?;
        s.min_properties = count(obj, "minProperties")?;
        s.max_properties = count(obj, "maxProperties")?;
        s.unique_items = match obj.get("uniqueItems") {
            None => false,
            Some(v) => v.as_bool().ok_or("`uniqueItems` must be a boolean")?,
        };
        if let Some(p) = obj.get("pattern") {
            let p = p.as_str().ok_or("`pattern` must be a string")?;
            s.pattern = Some(
                regex::RegexBuilder::new(p)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| format!("bad pattern: {e}"))?,
            );
        }
        for (key, dst) in [
            ("anyOf", &mut s.any_of),
            ("oneOf", &mut s.one_of),
            ("allOf", &mut s.all_of),
        ] {
            if let Some(list) = obj.get(key) {
                let list = list
                    .as_array()
                    .ok_or_else(|| format!("`{key}` must be a list"))?;
                for v in list {
                    dst.push(Schema::compile_at(v, depth + 1)?);
                }
            }
        }
        Ok(s)
    }

    /// Fills in, on `object`, the `default` of every top-level property of the raw object
    /// schema `raw` that `object` lacks (what a form answered with omitted fields means).
    pub fn fill_defaults(raw: &Value, object: &mut Map<String, Value>) {
        let Some(props) = raw.get("properties").and_then(Value::as_object) else {
            return;
        };
        for (name, prop) in props {
            if let Some(d) = prop.get("default")
                && !object.contains_key(name)
            {
                object.insert(name.clone(), d.clone());
            }
        }
    }

    /// Checks a value; the error names the first violation.
    pub fn validate(&self, v: &Value) -> Result<(), SchemaViolation> {
        let mut path = String::new();
        self.check(v, &mut path)
    }

    fn fail(path: &str, rule: &'static str, message: String) -> Result<(), SchemaViolation> {
        Err(SchemaViolation {
            path: if path.is_empty() {
                "/".into()
            } else {
                path.to_owned()
            },
            rule,
            message,
        })
    }

    fn check(&self, v: &Value, path: &mut String) -> Result<(), SchemaViolation> {
        if !self.types.is_empty() && !self.types.iter().any(|t| t.admits(v)) {
            let names: Vec<&str> = self.types.iter().map(|t| t.name()).collect();
            return Schema::fail(path, "type", format!("expected {}", names.join(" or ")));
        }
        if let Some(e) = &self.enumeration
            && !e.contains(v)
        {
            return Schema::fail(
                path,
                "enum",
                format!("must be one of {}", Value::Array(e.clone())),
            );
        }
        if let Some(c) = &self.constant
            && c != v
        {
            return Schema::fail(path, "const", format!("must equal {c}"));
        }
        match v {
            Value::Number(n) => {
                let f = n.as_f64().unwrap_or(0.0);
                if self.minimum.is_some_and(|m| f < m) {
                    return Schema::fail(
                        path,
                        "minimum",
                        format!("must be >= {}", self.minimum.unwrap_or(0.0)),
                    );
                }
                if self.maximum.is_some_and(|m| f > m) {
                    return Schema::fail(
                        path,
                        "maximum",
                        format!("must be <= {}", self.maximum.unwrap_or(0.0)),
                    );
                }
                if self.exclusive_minimum.is_some_and(|m| f <= m) {
                    return Schema::fail(
                        path,
                        "exclusiveMinimum",
                        "below the exclusive minimum".into(),
                    );
                }
                if self.exclusive_maximum.is_some_and(|m| f >= m) {
                    return Schema::fail(
                        path,
                        "exclusiveMaximum",
                        "above the exclusive maximum".into(),
                    );
                }
            }
            Value::String(s) => {
                let len = s.chars().count() as u64;
                if self.min_length.is_some_and(|m| len < m) {
                    return Schema::fail(
                        path,
                        "minLength",
                        format!("shorter than {} characters", self.min_length.unwrap_or(0)),
                    );
                }
                if self.max_length.is_some_and(|m| len > m) {
                    return Schema::fail(
                        path,
                        "maxLength",
                        format!("longer than {} characters", self.max_length.unwrap_or(0)),
                    );
                }
                if let Some(re) = &self.pattern
                    && !re.is_match(s)
                {
                    return Schema::fail(path, "pattern", format!("must match /{}/", re.as_str()));
                }
            }
            Value::Array(a) => {
                let len = a.len() as u64;
                if self.min_items.is_some_and(|m| len < m) {
                    return Schema::fail(
                        path,
                        "minItems",
                        format!("fewer than {} items", self.min_items.unwrap_or(0)),
                    );
                }
                if self.max_items.is_some_and(|m| len > m) {
                    return Schema::fail(
                        path,
                        "maxItems",
                        format!("more than {} items", self.max_items.unwrap_or(0)),
                    );
                }
                if self.unique_items
                    && let Some(i) = (1..a.len()).find(|&i| a[..i].contains(&a[i]))
                {
                    return Schema::fail(
                        path,
                        "uniqueItems",
                        format!("item {i} repeats an earlier item"),
                    );
                }
                for (i, item) in a.iter().enumerate() {
                    let schema = match self.tuple.get(i) {
                        Some(s) => s,
                        None if self.tuple.is_empty() => match &self.items {
                            Some(s) => s,
                            None => break,
                        },
                        None => break,
                    };
                    let n = path.len();
                    path.push('/');
                    path.push_str(&i.to_string());
                    schema.check(item, path)?;
                    path.truncate(n);
                }
            }
            Value::Object(o) => {
                let len = o.len() as u64;
                if self.min_properties.is_some_and(|m| len < m) {
                    return Schema::fail(
                        path,
                        "minProperties",
                        format!("fewer than {} properties", self.min_properties.unwrap_or(0)),
                    );
                }
                if self.max_properties.is_some_and(|m| len > m) {
                    return Schema::fail(
                        path,
                        "maxProperties",
                        format!("more than {} properties", self.max_properties.unwrap_or(0)),
                    );
                }
                for r in &self.required {
                    if !o.contains_key(r) {
                        return Schema::fail(
                            path,
                            "required",
                            format!("missing required property `{r}`"),
                        );
                    }
                }
                for (k, val) in o {
                    let n = path.len();
                    path.push('/');
                    path.push_str(k);
                    match self.properties.iter().find(|(p, _)| p == k) {
                        Some((_, s)) => s.check(val, path)?,
                        None => match &self.additional {
                            Additional::Allowed => {}
                            Additional::Denied => {
                                return Schema::fail(
                                    path,
                                    "additionalProperties",
                                    "property not allowed".into(),
                                );
                            }
                            Additional::Schema(s) => s.check(val, path)?,
                        },
                    }
                    path.truncate(n);
                }
            }
            _ => {}
        }
        for s in &self.all_of {
            s.check(v, path)?;
        }
        if !self.any_of.is_empty() && !self.any_of.iter().any(|s| s.validate(v).is_ok()) {
            return Schema::fail(path, "anyOf", "matches none of anyOf".into());
        }
        if !self.one_of.is_empty() {
            let n = self.one_of.iter().filter(|s| s.validate(v).is_ok()).count();
            if n != 1 {
                return Schema::fail(
                    path,
                    "oneOf",
                    format!("matches {n} of oneOf, expected exactly 1"),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(v: Value) -> Schema {
        Schema::compile(&v).unwrap()
    }

    #[test]
    fn typical_tool_schema() {
        let s = schema(json!({
            "type": "object",
            "properties": {
                "a": {"type": "number", "minimum": 0},
                "op": {"type": "string", "enum": ["add", "sub"]},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2}
            },
            "required": ["a", "op"],
            "additionalProperties": false
        }));
        assert!(s.validate(&json!({"a": 1, "op": "add"})).is_ok());
        assert!(
            s.validate(&json!({"a": 1.5, "op": "sub", "tags": ["x"]}))
                .is_ok()
        );
        let e = s.validate(&json!({"op": "add"})).unwrap_err();
        assert_eq!(e.path, "/");
        assert!(e.message.contains("`a`"));
        assert_eq!(
            s.validate(&json!({"a": -1, "op": "add"})).unwrap_err().path,
            "/a"
        );
        assert_eq!(
            s.validate(&json!({"a": 1, "op": "mul"})).unwrap_err().path,
            "/op"
        );
        assert_eq!(
            s.validate(&json!({"a": 1, "op": "add", "tags": ["abcd"]}))
                .unwrap_err()
                .path,
            "/tags/0"
        );
        assert_eq!(
            s.validate(&json!({"a": 1, "op": "add", "z": 0}))
                .unwrap_err()
                .path,
            "/z"
        );
        assert!(s.validate(&json!([1])).is_err());
        assert!(
            s.validate(&json!({"a": 1, "op": "add", "tags": ["a", "b", "c"]}))
                .is_err()
        );
    }

    #[test]
    fn integers_strings_and_combinators() {
        let s = schema(json!({"type": "integer", "exclusiveMaximum": 10}));
        assert!(s.validate(&json!(3)).is_ok());
        assert!(s.validate(&json!(3.0)).is_ok());
        assert!(s.validate(&json!(3.5)).is_err());
        assert!(s.validate(&json!(10)).is_err());
        assert!(s.validate(&json!("3")).is_err());
        let s = schema(json!({"type": "string", "pattern": "^[a-z]+$", "minLength": 2}));
        assert!(s.validate(&json!("ab")).is_ok());
        assert!(s.validate(&json!("a")).is_err());
        assert!(s.validate(&json!("aB")).is_err());
        let s = schema(json!({"oneOf": [{"type": "string"}, {"type": "number"}]}));
        assert!(s.validate(&json!(1)).is_ok());
        assert!(s.validate(&json!(null)).is_err());
        let s = schema(json!({"anyOf": [{"const": 1}, {"const": 2}]}));
        assert!(s.validate(&json!(2)).is_ok());
        assert!(s.validate(&json!(3)).is_err());
        let s = schema(json!({"type": ["string", "null"]}));
        assert!(s.validate(&json!(null)).is_ok());
        assert!(s.validate(&json!(false)).is_err());
        assert!(schema(json!(false)).validate(&json!(1)).is_err());
        assert!(schema(json!({})).validate(&json!({"x": [1]})).is_ok());
    }

    #[test]
    fn bad_schemas_are_refused() {
        for bad in [
            json!({"type": "text"}),
            json!({"type": 3}),
            json!({"required": "a"}),
            json!({"pattern": "("}),
            json!({"minimum": "1"}),
            json!({"properties": {"a": 5}}),
            json!("string"),
        ] {
            assert!(Schema::compile(&bad).is_err(), "{bad}");
        }
        let mut deep = json!({});
        for _ in 0..40 {
            deep = json!({"items": deep});
        }
        assert!(Schema::compile(&deep).is_err());
    }
}
