//! Typed JSON Schema: the form tools-mode definitions are written in.
//!
//! A tagged enum over the six types a tool parameter can have, each with the constraints
//! that type allows (`../spec/tools-mode-agent.md`). Loading is strict where plain JSON
//! Schema is lax, because these schemas are authored by hand and a typo should be caught:
//! an unknown keyword, a constraint of the wrong type, `minimum` above `maximum`, a
//! `required` name that is not a property, or a `default`, `enum` value or example that the
//! schema itself refuses is a [`Problem`]. Every problem is reported, each with its path.

use super::validate::Schema;
use serde_json::{Map, Value};
use std::fmt;

/// One problem of a definition, with where it is (`tools[2].parameters.properties.limit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted path from the file's root.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl Problem {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Annotations every schema may carry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meta {
    /// Short title.
    pub title: Option<String>,
    /// What the value is for (shown to MCP clients and models).
    pub description: Option<String>,
}

/// `type: string`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StringSchema {
    /// Annotations.
    pub meta: Meta,
    /// The only values allowed.
    pub enumeration: Option<Vec<String>>,
    /// Used when the argument is absent.
    pub default: Option<String>,
    /// Sample values (documentation; each must be valid).
    pub examples: Vec<String>,
    /// Least length in characters.
    pub min_length: Option<u64>,
    /// Greatest length in characters.
    pub max_length: Option<u64>,
    /// A regular expression the value must match (unanchored, as JSON Schema says).
    pub pattern: Option<String>,
    /// A format annotation (`date`, `uri`, ...), shown to clients, not checked.
    pub format: Option<String>,
}

/// `type: number` or `type: integer` (integers are numbers without a fraction).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NumericSchema {
    /// Annotations.
    pub meta: Meta,
    /// The only values allowed.
    pub enumeration: Option<Vec<f64>>,
    /// Used when the argument is absent.
    pub default: Option<f64>,
    /// Sample values.
    pub examples: Vec<f64>,
    /// Least value (inclusive).
    pub minimum: Option<f64>,
    /// Greatest value (inclusive).
    pub maximum: Option<f64>,
}

/// `type: boolean`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BooleanSchema {
    /// Annotations.
    pub meta: Meta,
    /// Used when the argument is absent.
    pub default: Option<bool>,
}

/// What an array holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Items {
    /// Every item has this schema.
    All(Box<JsonSchema>),
    /// Item `i` has schema `i` (a tuple); items beyond the list are free.
    Tuple(Vec<JsonSchema>),
}

/// `type: array`.
#[derive(Debug, Clone, PartialEq)]
pub struct ArraySchema {
    /// Annotations.
    pub meta: Meta,
    /// The items' schema.
    pub items: Items,
    /// Least number of items.
    pub min_items: Option<u64>,
    /// Greatest number of items.
    pub max_items: Option<u64>,
    /// No two items equal.
    pub unique_items: bool,
    /// Used when the argument is absent.
    pub default: Option<Vec<Value>>,
}

/// Properties not listed in `properties`.
#[derive(Debug, Clone, PartialEq)]
pub enum Additional {
    /// Allowed, any value (the JSON Schema default).
    Any,
    /// Refused.
    Denied,
    /// Allowed when they match this schema.
    Schema(Box<JsonSchema>),
}

/// `type: object`; the root of every tool's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectSchema {
    /// Annotations.
    pub meta: Meta,
    /// Named properties, in name order.
    pub properties: Vec<(String, JsonSchema)>,
    /// Properties that must be present.
    pub required: Vec<String>,
    /// What other properties may be.
    pub additional: Additional,
    /// Least number of properties.
    pub min_properties: Option<u64>,
    /// Greatest number of properties.
    pub max_properties: Option<u64>,
    /// Used when the argument is absent.
    pub default: Option<Map<String, Value>>,
}

/// A typed schema.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonSchema {
    /// A string.
    String(StringSchema),
    /// Any number.
    Number(NumericSchema),
    /// A number without a fraction.
    Integer(NumericSchema),
    /// `true` or `false`.
    Boolean(BooleanSchema),
    /// A list.
    Array(ArraySchema),
    /// A map.
    Object(ObjectSchema),
}

/// Deepest nesting a definition may have.
const MAX_DEPTH: usize = 16;

const COMMON: &[&str] = &["type", "title", "description"];
const STRING_KEYS: &[&str] = &[
    "enum",
    "default",
    "examples",
    "minLength",
    "maxLength",
    "pattern",
    "format",
];
const NUMERIC_KEYS: &[&str] = &["enum", "default", "examples", "minimum", "maximum"];
const BOOLEAN_KEYS: &[&str] = &["default"];
const ARRAY_KEYS: &[&str] = &["items", "minItems", "maxItems", "uniqueItems", "default"];
const OBJECT_KEYS: &[&str] = &[
    "properties",
    "required",
    "additionalProperties",
    "minProperties",
    "maxProperties",
    "default",
];

/// Reads the fields of one schema object, recording problems as it goes.
struct Reader<'a> {
    obj: &'a Map<String, Value>,
    path: &'a str,
    problems: &'a mut Vec<Problem>,
}

impl Reader<'_> {
    fn at(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    fn problem(&mut self, key: &str, message: impl Into<String>) {
        let path = self.at(key);
        self.problems.push(Problem::new(path, message));
    }

    fn string(&mut self, key: &str) -> Option<String> {
        match self.obj.get(key)? {
            Value::String(s) => Some(s.clone()),
            _ => {
                self.problem(key, "not a string");
                None
            }
        }
    }

    fn number(&mut self, key: &str) -> Option<f64> {
        match self.obj.get(key)? {
            Value::Number(n) => n.as_f64(),
            _ => {
                self.problem(key, "not a number");
                None
            }
        }
    }

    fn count(&mut self, key: &str) -> Option<u64> {
        let v = self.obj.get(key)?;
        match v.as_u64() {
            Some(n) => Some(n),
            None => {
                self.problem(key, "not a non-negative integer");
                None
            }
        }
    }

    fn boolean(&mut self, key: &str) -> Option<bool> {
        match self.obj.get(key)? {
            Value::Bool(b) => Some(*b),
            _ => {
                self.problem(key, "not a boolean");
                None
            }
        }
    }

    /// A list whose entries each go through `one` (which says what it wanted on `None`).
    fn list<T>(&mut self, key: &str, want: &str, one: impl Fn(&Value) -> Option<T>) -> Vec<T> {
        let Some(v) = self.obj.get(key) else {
            return Vec::new();
        };
        let Some(items) = v.as_array() else {
            self.problem(key, "not a list");
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match one(item) {
                Some(x) => out.push(x),
                None => {
                    let path = format!("{}[{i}]", self.at(key));
                    self.problems
                        .push(Problem::new(path, format!("not {want}")));
                }
            }
        }
        out
    }

    fn meta(&mut self) -> Meta {
        Meta {
            title: self.string("title"),
            description: self.string("description"),
        }
    }

    fn unknown_keys(&mut self, allowed: &[&str]) {
        let unknown: Vec<String> = self
            .obj
            .keys()
            .filter(|k| !COMMON.contains(&k.as_str()) && !allowed.contains(&k.as_str()))
            .cloned()
            .collect();
        for k in unknown {
            let known = allowed.join(", ");
            self.problem(
                &k,
                format!("unknown keyword for this type (known: {known})"),
            );
        }
    }

    fn order(&mut self, low: &str, high: &str, a: Option<f64>, b: Option<f64>) {
        if let (Some(a), Some(b)) = (a, b)
            && a > b
        {
            self.problem(low, format!("greater than `{high}`"));
        }
    }
}

fn as_integer(v: &Value) -> Option<f64> {
    let f = v.as_f64()?;
    (f.fract() == 0.0).then_some(f)
}

impl JsonSchema {
    /// Loads a schema written at `path`; `None` if any problem was found (each one is in
    /// `problems`).
    pub fn load(raw: &Value, path: &str, problems: &mut Vec<Problem>) -> Option<JsonSchema> {
        let before = problems.len();
        let s = JsonSchema::load_at(raw, path, problems, 0);
        if problems.len() > before {
            return None;
        }
        let s = s?;
        s.check_samples(raw, path, problems);
        (problems.len() == before).then_some(s)
    }

    fn load_at(
        raw: &Value,
        path: &str,
        problems: &mut Vec<Problem>,
        depth: usize,
    ) -> Option<JsonSchema> {
        if depth > MAX_DEPTH {
            problems.push(Problem::new(
                path,
                format!("nested deeper than {MAX_DEPTH} levels"),
            ));
            return None;
        }
        let Some(obj) = raw.as_object() else {
            problems.push(Problem::new(path, "a schema must be an object"));
            return None;
        };
        let kind = match obj.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(_) => {
                problems.push(Problem::new(format!("{path}.type"), "not a string"));
                return None;
            }
            None => {
                problems.push(Problem::new(
                    format!("{path}.type"),
                    "missing (one of string, number, integer, boolean, array, object)",
                ));
                return None;
            }
        };
        let mut r = Reader {
            obj,
            path,
            problems,
        };
        let meta = r.meta();
        Some(match kind {
            "string" => {
                r.unknown_keys(STRING_KEYS);
                let str_of = |v: &Value| v.as_str().map(str::to_owned);
                let enumeration = obj
                    .contains_key("enum")
                    .then(|| r.list("enum", "a string", str_of));
                let s = StringSchema {
                    meta,
                    enumeration,
                    default: r.string("default"),
                    examples: r.list("examples", "a string", str_of),
                    min_length: r.count("minLength"),
                    max_length: r.count("maxLength"),
                    pattern: r.string("pattern"),
                    format: r.string("format"),
                };
                r.order(
                    "minLength",
                    "maxLength",
                    s.min_length.map(|n| n as f64),
                    s.max_length.map(|n| n as f64),
                );
                if let Some(p) = &s.pattern
                    && let Err(e) = regex::RegexBuilder::new(p).size_limit(1 << 20).build()
                {
                    r.problem("pattern", format!("not a regular expression: {e}"));
                }
                JsonSchema::String(s)
            }
            "number" | "integer" => {
                let integer = kind == "integer";
                r.unknown_keys(NUMERIC_KEYS);
                let one: fn(&Value) -> Option<f64> =
                    if integer { as_integer } else { Value::as_f64 };
                let want = if integer { "an integer" } else { "a number" };
                let enumeration = obj.contains_key("enum").then(|| r.list("enum", want, one));
                let default = match obj.get("default") {
                    None => None,
                    Some(v) => {
                        let d = one(v);
                        if d.is_none() {
                            r.problem("default", format!("not {want}"));
                        }
                        d
                    }
                };
                let s = NumericSchema {
                    meta,
                    enumeration,
                    default,
                    examples: r.list("examples", want, one),
                    minimum: r.number("minimum"),
                    maximum: r.number("maximum"),
                };
                r.order("minimum", "maximum", s.minimum, s.maximum);
                if integer {
                    JsonSchema::Integer(s)
                } else {
                    JsonSchema::Number(s)
                }
            }
            "boolean" => {
                r.unknown_keys(BOOLEAN_KEYS);
                JsonSchema::Boolean(BooleanSchema {
                    meta,
                    default: r.boolean("default"),
                })
            }
            "array" => {
                r.unknown_keys(ARRAY_KEYS);
                let items = match obj.get("items") {
                    None => {
                        r.problem("items", "missing (the schema of the items)");
                        None
                    }
                    Some(Value::Array(list)) => {
                        let mut tuple = Vec::new();
                        for (i, item) in list.iter().enumerate() {
                            let p = format!("{path}.items[{i}]");
                            tuple.extend(JsonSchema::load_at(item, &p, r.problems, depth + 1));
                        }
                        Some(Items::Tuple(tuple))
                    }
                    Some(item) => {
                        let p = format!("{path}.items");
                        JsonSchema::load_at(item, &p, r.problems, depth + 1)
                            .map(|s| Items::All(Box::new(s)))
                    }
                };
                let default = match obj.get("default") {
                    None => None,
                    Some(Value::Array(a)) => Some(a.clone()),
                    Some(_) => {
                        r.problem("default", "not a list");
                        None
                    }
                };
                let s = ArraySchema {
                    meta,
                    items: items?,
                    min_items: r.count("minItems"),
                    max_items: r.count("maxItems"),
                    unique_items: r.boolean("uniqueItems").unwrap_or(false),
                    default,
                };
                r.order(
                    "minItems",
                    "maxItems",
                    s.min_items.map(|n| n as f64),
                    s.max_items.map(|n| n as f64),
                );
                JsonSchema::Array(s)
            }
            "object" => {
                r.unknown_keys(OBJECT_KEYS);
                let mut properties = Vec::new();
                match obj.get("properties") {
                    None => {}
                    Some(Value::Object(props)) => {
                        for (name, p) in props {
                            let at = format!("{path}.properties.{name}");
                            if let Some(s) = JsonSchema::load_at(p, &at, r.problems, depth + 1) {
                                properties.push((name.clone(), s));
                            }
                        }
                    }
                    Some(_) => r.problem("properties", "not an object"),
                }
                let required = r.list("required", "a string", |v| v.as_str().map(str::to_owned));
                if let Some(Value::Object(props)) = obj.get("properties") {
                    for (i, name) in required.iter().enumerate() {
                        if !props.contains_key(name) {
                            let path = format!("{}[{i}]", r.at("required"));
                            r.problems.push(Problem::new(
                                path,
                                format!("`{name}` is not one of the properties"),
                            ));
                        }
                    }
                }
                let additional = match obj.get("additionalProperties") {
                    None | Some(Value::Bool(true)) => Additional::Any,
                    Some(Value::Bool(false)) => Additional::Denied,
                    Some(v) => {
                        let p = format!("{path}.additionalProperties");
                        match JsonSchema::load_at(v, &p, r.problems, depth + 1) {
                            Some(s) => Additional::Schema(Box::new(s)),
                            None => Additional::Any,
                        }
                    }
                };
                let default = match obj.get("default") {
                    None => None,
                    Some(Value::Object(m)) => Some(m.clone()),
                    Some(_) => {
                        r.problem("default", "not an object");
                        None
                    }
                };
                let s = ObjectSchema {
                    meta,
                    properties,
                    required,
                    additional,
                    min_properties: r.count("minProperties"),
                    max_properties: r.count("maxProperties"),
                    default,
                };
                r.order(
                    "minProperties",
                    "maxProperties",
                    s.min_properties.map(|n| n as f64),
                    s.max_properties.map(|n| n as f64),
                );
                JsonSchema::Object(s)
            }
            other => {
                r.problem(
                    "type",
                    format!(
                        "unknown type {other:?} (one of string, number, integer, boolean, array, object)"
                    ),
                );
                return None;
            }
        })
    }

    /// Checks that `default`, `enum` values and examples are values the schema accepts,
    /// at every level.
    fn check_samples(&self, raw: &Value, path: &str, problems: &mut Vec<Problem>) {
        let Ok(compiled) = Schema::compile(raw) else {
            problems.push(Problem::new(path, "not a usable schema"));
            return;
        };
        for key in ["default", "examples", "enum"] {
            let samples: Vec<(String, &Value)> = match (key, raw.get(key)) {
                (_, None) => Vec::new(),
                ("default", Some(v)) => vec![(format!("{path}.default"), v)],
                (_, Some(Value::Array(list))) => list
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (format!("{path}.{key}[{i}]"), v))
                    .collect(),
                _ => Vec::new(),
            };
            for (at, v) in samples {
                if let Err(e) = compiled.validate(v) {
                    problems.push(Problem::new(at, format!("the schema refuses it: {e}")));
                }
            }
        }
        match self {
            JsonSchema::Array(a) => match &a.items {
                Items::All(s) => {
                    if let Some(r) = raw.get("items") {
                        s.check_samples(r, &format!("{path}.items"), problems);
                    }
                }
                Items::Tuple(list) => {
                    for (i, s) in list.iter().enumerate() {
                        if let Some(r) = raw.get("items").and_then(|v| v.get(i)) {
                            s.check_samples(r, &format!("{path}.items[{i}]"), problems);
                        }
                    }
                }
            },
            JsonSchema::Object(o) => {
                for (name, s) in &o.properties {
                    if let Some(r) = raw.get("properties").and_then(|p| p.get(name)) {
                        s.check_samples(r, &format!("{path}.properties.{name}"), problems);
                    }
                }
                if let (Additional::Schema(s), Some(r)) =
                    (&o.additional, raw.get("additionalProperties"))
                {
                    s.check_samples(r, &format!("{path}.additionalProperties"), problems);
                }
            }
            _ => {}
        }
    }

    /// The type's name.
    pub fn type_name(&self) -> &'static str {
        match self {
            JsonSchema::String(_) => "string",
            JsonSchema::Number(_) => "number",
            JsonSchema::Integer(_) => "integer",
            JsonSchema::Boolean(_) => "boolean",
            JsonSchema::Array(_) => "array",
            JsonSchema::Object(_) => "object",
        }
    }

    /// The annotations.
    pub fn meta(&self) -> &Meta {
        match self {
            JsonSchema::String(s) => &s.meta,
            JsonSchema::Number(s) | JsonSchema::Integer(s) => &s.meta,
            JsonSchema::Boolean(s) => &s.meta,
            JsonSchema::Array(s) => &s.meta,
            JsonSchema::Object(s) => &s.meta,
        }
    }

    /// The `default`, as a JSON value.
    pub fn default_value(&self) -> Option<Value> {
        match self {
            JsonSchema::String(s) => s.default.clone().map(Value::String),
            JsonSchema::Number(s) => s
                .default
                .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number)),
            JsonSchema::Integer(s) => s.default.map(|f| Value::from(f as i64)),
            JsonSchema::Boolean(s) => s.default.map(Value::Bool),
            JsonSchema::Array(s) => s.default.clone().map(Value::Array),
            JsonSchema::Object(s) => s.default.clone().map(Value::Object),
        }
    }

    /// Reads a value of this type written on a command line: strings as they are, numbers
    /// and booleans parsed, arrays and objects as JSON.
    pub fn parse_arg(&self, text: &str) -> Result<Value, String> {
        match self {
            JsonSchema::String(_) => Ok(Value::String(text.to_owned())),
            JsonSchema::Integer(_) => text
                .trim()
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| format!("{text:?} is not an integer")),
            JsonSchema::Number(_) => text
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| format!("{text:?} is not a number")),
            JsonSchema::Boolean(_) => match text.trim() {
                "true" => Ok(Value::Bool(true)),
                "false" => Ok(Value::Bool(false)),
                _ => Err(format!("{text:?} is not true or false")),
            },
            JsonSchema::Array(_) | JsonSchema::Object(_) => {
                serde_json::from_str(text).map_err(|e| format!("{text:?} is not JSON ({e})"))
            }
        }
    }
}

impl ObjectSchema {
    /// Loads the root of a tool's parameters, which must be an object schema.
    pub fn load_root(raw: &Value, path: &str, problems: &mut Vec<Problem>) -> Option<ObjectSchema> {
        if raw.get("type").and_then(Value::as_str) != Some("object") {
            problems.push(Problem::new(
                format!("{path}.type"),
                "the parameters' root must be `type: object`",
            ));
            return None;
        }
        match JsonSchema::load(raw, path, problems)? {
            JsonSchema::Object(o) => Some(o),
            _ => None,
        }
    }

    /// A property's schema.
    pub fn property(&self, name: &str) -> Option<&JsonSchema> {
        self.properties
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s)
    }

    /// Whether `name` must be present.
    pub fn is_required(&self, name: &str) -> bool {
        self.required.iter().any(|r| r == name)
    }

    /// `args` with the `default` of every absent property filled in.
    pub fn with_defaults(&self, args: &Map<String, Value>) -> Map<String, Value> {
        let mut out = args.clone();
        for (name, s) in &self.properties {
            if !out.contains_key(name)
                && let Some(d) = s.default_value()
            {
                out.insert(name.clone(), d);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(v: Value) -> Vec<String> {
        let mut p = Vec::new();
        let s = JsonSchema::load(&v, "parameters", &mut p);
        assert_eq!(s.is_none(), !p.is_empty());
        p.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_typical_definition_loads_with_its_defaults() {
        let raw = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 2, "examples": ["Paris"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14, "default": 3},
                "units": {"type": "string", "enum": ["metric", "imperial"], "default": "metric"},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                "detailed": {"type": "boolean"}
            },
            "required": ["city"],
            "additionalProperties": false
        });
        let mut p = Vec::new();
        let o = ObjectSchema::load_root(&raw, "parameters", &mut p).expect("loads");
        assert!(p.is_empty());
        assert_eq!(o.properties.len(), 5);
        assert!(o.is_required("city") && !o.is_required("days"));
        let filled = o.with_defaults(json!({"city": "Oslo"}).as_object().unwrap());
        assert_eq!(
            Value::Object(filled),
            json!({"city": "Oslo", "days": 3, "units": "metric"})
        );
        assert_eq!(o.property("days").unwrap().parse_arg("4"), Ok(json!(4)));
        assert!(o.property("days").unwrap().parse_arg("4.5").is_err());
        assert_eq!(
            o.property("detailed").unwrap().parse_arg("true"),
            Ok(json!(true))
        );
        assert_eq!(
            o.property("tags").unwrap().parse_arg("[\"a\"]"),
            Ok(json!(["a"]))
        );
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let got = problems(json!({
            "type": "object",
            "properties": {
                "limit": {"type": "integer", "minimum": "one", "maximum": 5, "default": 9},
                "name": {"type": "string", "minLength": 5, "maxLength": 2, "pattern": "("},
                "mode": {"type": "text"},
                "list": {"type": "array"},
                "flag": {"type": "boolean", "minimum": 1}
            },
            "required": ["limit", "missing"]
        }));
        let expected = [
            "parameters.properties.flag.minimum: unknown keyword",
            "parameters.properties.limit.minimum: not a number",
            "parameters.properties.list.items: missing",
            "parameters.properties.mode.type: unknown type \"text\"",
            "parameters.properties.name.minLength: greater than `maxLength`",
            "parameters.properties.name.pattern: not a regular expression",
            "parameters.required[1]: `missing` is not one of the properties",
        ];
        for e in expected {
            assert!(got.iter().any(|g| g.starts_with(e)), "{e} not in {got:#?}");
        }
        assert_eq!(got.len(), expected.len(), "{got:#?}");
        // Samples are checked once the schema itself is sound.
        let got = problems(json!({
            "type": "object",
            "properties": {"n": {"type": "integer", "maximum": 5, "default": 9, "examples": [1, 7]}}
        }));
        assert_eq!(got.len(), 2, "{got:#?}");
        assert!(got[0].starts_with("parameters.properties.n.default: the schema refuses it"));
        assert!(got[0].contains("`maximum`"), "{got:#?}");
        assert!(got[1].starts_with("parameters.properties.n.examples[1]"));
    }

    #[test]
    fn the_root_must_be_an_object() {
        let mut p = Vec::new();
        assert!(
            ObjectSchema::load_root(&json!({"type": "string"}), "tools[0].parameters", &mut p)
                .is_none()
        );
        assert_eq!(p[0].path, "tools[0].parameters.type");
        assert!(problems(json!("string"))[0].contains("must be an object"));
        assert!(problems(json!({"minimum": 1}))[0].starts_with("parameters.type: missing"));
    }
}
