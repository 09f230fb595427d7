//! Tool definitions of a tools-mode agent: the `metadata` section of its configuration.
//!
//! ```yaml
//! metadata:
//!   name: Travel desk            # serverInfo.name
//!   version: 1.0.0               # serverInfo.version
//!   description: Books travel.   # instructions
//!   tools:
//!     - name: book_flight
//!       description: Books a flight ticket for a user.
//!       parameters:              # JSON Schema; the root is an object
//!         type: object
//!         properties:
//!           destination: {type: string, description: "City and country"}
//!           departure_date: {type: string, pattern: "^\\d{4}-\\d{2}-\\d{2}$"}
//!         required: [destination, departure_date]
//!       prompt: The user wants to book a flight to {destination} on {departure_date}.
//! ```
//!
//! A prompt's `{placeholder}` is a parameter or one of the tool's own fields (`{name}`,
//! `{description}`; a parameter of the same name wins); `{{` and `}}` are literal braces.
//! Every placeholder is checked when the file is loaded. When a call is filled in, absent
//! parameters take their schema `default`; an absent optional parameter without one stays
//! as `{param}` in the text, as the tool preview of the specification shows it, so the model
//! sees that it was not given. Strings are inserted as they are, other values as JSON.

use crate::agent::prompt::Template;
use crate::mcp::ServedTool;
use crate::mcp::ServerInfo;
use crate::schema::{ObjectSchema, Problem, Schema};
use serde_json::{Map, Value, json};

/// One tool of a tools-mode agent.
#[derive(Debug, Clone)]
pub struct ToolDef {
    /// Name (unique in the set).
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its parameters, typed.
    pub parameters: ObjectSchema,
    /// The same schema as written (listed as `inputSchema`).
    pub input_schema: Value,
    /// The same schema compiled for checking calls.
    pub schema: Schema,
    /// The prompt template.
    pub prompt: Template,
}

/// A tools-mode agent's metadata: who it is and its tools.
#[derive(Debug, Clone)]
pub struct ToolSet {
    /// Server name, version and instructions.
    pub info: ServerInfo,
    /// The tools, in the file's order.
    pub tools: Vec<ToolDef>,
}

/// Longest tool name (MCP clients commonly cap names at 64 characters).
const MAX_NAME: usize = 64;
const TOOL_KEYS: &[&str] = &["name", "description", "parameters", "prompt"];
const METADATA_KEYS: &[&str] = &["name", "version", "description", "tools"];

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= MAX_NAME
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn text(obj: &Map<String, Value>, key: &str, at: &str, p: &mut Vec<Problem>) -> Option<String> {
    match obj.get(key) {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            p.push(Problem::new(format!("{at}.{key}"), "not a string"));
            None
        }
    }
}

impl ToolSet {
    /// Loads the `metadata` section; every problem is reported, each with its path.
    pub fn load(metadata: &Value) -> Result<ToolSet, Vec<Problem>> {
        let mut p = Vec::new();
        let at = "metadata";
        let Some(obj) = metadata.as_object() else {
            return Err(vec![Problem::new(at, "not a mapping")]);
        };
        for k in obj.keys() {
            if !METADATA_KEYS.contains(&k.as_str()) {
                p.push(Problem::new(
                    format!("{at}.{k}"),
                    format!("unknown key (known: {})", METADATA_KEYS.join(", ")),
                ));
            }
        }
        let name = text(obj, "name", at, &mut p);
        if name.as_deref().is_none_or(str::is_empty)
            && obj.get("name").is_none_or(|v| v.is_string())
        {
            p.push(Problem::new(
                format!("{at}.name"),
                "missing (the server's name)",
            ));
        }
        let version = text(obj, "version", at, &mut p).unwrap_or_else(|| "0.1.0".into());
        let description = text(obj, "description", at, &mut p);
        let mut tools: Vec<ToolDef> = Vec::new();
        match obj.get("tools") {
            None => p.push(Problem::new(
                format!("{at}.tools"),
                "missing (the tools to serve)",
            )),
            Some(Value::Array(list)) if list.is_empty() => p.push(Problem::new(
                format!("{at}.tools"),
                "empty: define at least one tool",
            )),
            Some(Value::Array(list)) => {
                let mut names: Vec<&str> = Vec::new();
                for (i, raw) in list.iter().enumerate() {
                    let tat = format!("{at}.tools[{i}]");
                    // Duplicates are found among the names as written, whether or not the
                    // rest of each definition loads.
                    if let Some(n) = raw.get("name").and_then(Value::as_str) {
                        if names.contains(&n) {
                            p.push(Problem::new(
                                format!("{tat}.name"),
                                format!("`{n}` is defined twice"),
                            ));
                        }
                        names.push(n);
                    }
                    tools.extend(ToolDef::load(raw, &tat, &mut p));
                }
            }
            Some(_) => p.push(Problem::new(format!("{at}.tools"), "not a list")),
        }
        if !p.is_empty() {
            return Err(p);
        }
        Ok(ToolSet {
            info: ServerInfo {
                name: name.unwrap_or_default(),
                version,
                instructions: description,
            },
            tools,
        })
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<&ToolDef> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The tools as the MCP server lists and checks them.
    pub fn served(&self) -> Vec<ServedTool> {
        self.tools
            .iter()
            .map(|t| ServedTool {
                name: t.name.clone(),
                description: Some(t.description.clone()),
                input_schema: t.input_schema.clone(),
                schema: t.schema.clone(),
            })
            .collect()
    }
}

impl ToolDef {
    fn load(raw: &Value, at: &str, p: &mut Vec<Problem>) -> Option<ToolDef> {
        let Some(obj) = raw.as_object() else {
            p.push(Problem::new(at, "not a mapping"));
            return None;
        };
        let before = p.len();
        for k in obj.keys() {
            if !TOOL_KEYS.contains(&k.as_str()) {
                p.push(Problem::new(
                    format!("{at}.{k}"),
                    format!("unknown key (known: {})", TOOL_KEYS.join(", ")),
                ));
            }
        }
        let name = text(obj, "name", at, p);
        match &name {
            None if obj.get("name").is_none() => {
                p.push(Problem::new(format!("{at}.name"), "missing"));
            }
            Some(n) if !valid_name(n) => p.push(Problem::new(
                format!("{at}.name"),
                format!("{n:?}: use 1 to {MAX_NAME} letters, digits, `_`, `-` or `.`"),
            )),
            _ => {}
        }
        let description = text(obj, "description", at, p);
        if obj.get("description").is_none() {
            p.push(Problem::new(
                format!("{at}.description"),
                "missing (MCP clients show it to their model)",
            ));
        }
        let input_schema = obj
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        let parameters = ObjectSchema::load_root(&input_schema, &format!("{at}.parameters"), p);
        let prompt_src = text(obj, "prompt", at, p);
        if obj.get("prompt").is_none() {
            p.push(Problem::new(
                format!("{at}.prompt"),
                "missing (the prompt template the agent works from)",
            ));
        }
        let prompt = match (&prompt_src, &parameters) {
            (Some(src), Some(params)) => {
                let mut allowed: Vec<&str> =
                    params.properties.iter().map(|(n, _)| n.as_str()).collect();
                allowed.extend(["name", "description"]);
                match Template::parse(src, &allowed) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        p.push(Problem::new(format!("{at}.prompt"), e.0));
                        None
                    }
                }
            }
            _ => None,
        };
        if p.len() > before {
            return None;
        }
        let schema = Schema::compile(&input_schema).ok()?;
        Some(ToolDef {
            name: name?,
            description: description?,
            parameters: parameters?,
            input_schema,
            schema,
            prompt: prompt?,
        })
    }

    /// The prompt for a call: defaults applied, then the template filled (see the module
    /// notes for absent parameters). The arguments are assumed checked.
    pub fn fill(&self, args: &Map<String, Value>) -> String {
        let args = self.parameters.with_defaults(args);
        self.prompt.fill(|v| match args.get(v) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
            None => match v {
                "name" => Some(self.name.clone()),
                "description" => Some(self.description.clone()),
                _ => None,
            },
        })
    }

    /// Reads `key=value` pairs typed by a person (`mew tools preview --arg`), converting
    /// each value to its parameter's type.
    pub fn parse_args<'a>(
        &self,
        pairs: impl IntoIterator<Item = &'a str>,
    ) -> Result<Map<String, Value>, String> {
        let mut out = Map::new();
        for pair in pairs {
            let Some((k, v)) = pair.split_once('=') else {
                return Err(format!("{pair:?}: write key=value"));
            };
            let value = match self.parameters.property(k) {
                Some(s) => s.parse_arg(v).map_err(|e| format!("{k}: {e}"))?,
                None => {
                    let known: Vec<&str> = self
                        .parameters
                        .properties
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect();
                    return Err(format!(
                        "`{k}` is not a parameter of {} (parameters: {})",
                        self.name,
                        if known.is_empty() {
                            "none".into()
                        } else {
                            known.join(", ")
                        }
                    ));
                }
            };
            out.insert(k.to_owned(), value);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<ToolSet, Vec<String>> {
        let v: Value = serde_norway::from_str(yaml).unwrap();
        ToolSet::load(&v).map_err(|p| p.iter().map(ToString::to_string).collect())
    }

    const FLIGHTS: &str = r#"
name: Travel desk
version: 2.1.0
description: Books travel.
tools:
  - name: book_flight
    description: Books a flight ticket for a user.
    parameters:
      type: object
      properties:
        destination: {type: string}
        departure_date: {type: string}
        seats: {type: integer, minimum: 1, default: 1}
        class: {type: string, enum: [economy, business]}
        extras: {type: array, items: {type: string}}
      required: [destination, departure_date]
    prompt: "{name}: fly to {destination} on {departure_date}, {seats} seat(s), class {class}, extras {extras}. {{literal}}"
"#;

    #[test]
    fn loads_and_fills_with_defaults_and_unfilled_optionals() {
        let set = load(FLIGHTS).unwrap();
        assert_eq!(set.info.name, "Travel desk");
        assert_eq!(set.info.version, "2.1.0");
        assert_eq!(set.info.instructions.as_deref(), Some("Books travel."));
        let t = set.get("book_flight").unwrap();
        let args = t
            .parse_args([
                "destination=Paris, France",
                "departure_date=2026-12-01",
                "extras=[\"meal\"]",
            ])
            .unwrap();
        assert_eq!(
            t.fill(&args),
            "book_flight: fly to Paris, France on 2026-12-01, 1 seat(s), class {class}, extras [\"meal\"]. {literal}"
        );
        assert_eq!(
            set.served()[0].input_schema["required"],
            json!(["destination", "departure_date"])
        );
        assert!(
            t.parse_args(["seats=two"])
                .unwrap_err()
                .contains("not an integer")
        );
        assert!(
            t.parse_args(["colour=red"])
                .unwrap_err()
                .contains("not a parameter")
        );
    }

    #[test]
    fn every_problem_of_a_file_is_reported_with_its_path() {
        let e = load(
            r#"
name: ""
colour: blue
tools:
  - name: "bad name"
    parameters: {type: object, properties: {limit: {type: integer, minimum: "x"}}}
    prompt: "{limit} {unknown}"
  - name: ok
    description: fine
    parameters: {type: string}
    prompt: hi
  - name: dup
    description: d
    prompt: "{"
  - name: dup
    description: d
    prompt: x
  - name: dup2
    description: d
    prompt: x
    extra: 1
"#,
        )
        .unwrap_err();
        let expected = [
            "metadata.colour: unknown key",
            "metadata.name: missing",
            "metadata.tools[0].name: \"bad name\"",
            "metadata.tools[0].description: missing",
            "metadata.tools[0].parameters.properties.limit.minimum: not a number",
            "metadata.tools[1].parameters.type: the parameters' root must be `type: object`",
            "metadata.tools[2].prompt: unclosed `{`",
            "metadata.tools[3].name: `dup` is defined twice",
            "metadata.tools[4].extra: unknown key",
        ];
        for x in expected {
            assert!(e.iter().any(|g| g.starts_with(x)), "{x} not in {e:#?}");
        }
        assert_eq!(e.len(), expected.len(), "{e:#?}");
        // A placeholder naming nothing, in a tool otherwise sound.
        let e = load("name: n\ntools: [{name: t, description: d, prompt: 'Find {qurey}'}]\n")
            .unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("metadata.tools[0].prompt: unknown placeholder `{qurey}`"),
            "{e:?}"
        );
        assert!(load("name: n\ntools: []\n").unwrap_err()[0].contains("empty"));
    }
}
