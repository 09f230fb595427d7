//! Prompt templates and the scratchpad reply format.
//!
//! A template is text with `{name}` placeholders; `{{` and `}}` stand for literal braces.
//! Templates are checked when they are loaded ([`Template::parse`] with the names a use
//! allows), so a misspelt placeholder is a configuration error, never a surprise at call time.

use serde_json::Value;
use std::fmt;

/// A piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(String),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    pieces: Vec<Piece>,
}

/// A template that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError(pub String);

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Template {
    /// Parses `source`; every placeholder must be one of `allowed`.
    pub fn parse(source: &str, allowed: &[&str]) -> Result<Template, TemplateError> {
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut chars = source.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|(_, c)| *c) == Some('{') => {
                    chars.next();
                    text.push('{');
                }
                '}' if chars.peek().map(|(_, c)| *c) == Some('}') => {
                    chars.next();
                    text.push('}');
                }
                '{' => {
                    let rest = &source[i + 1..];
                    let Some(end) = rest.find('}') else {
                        return Err(TemplateError(format!(
                            "unclosed `{{` at byte {i} (write `{{{{` for a literal brace)"
                        )));
                    };
                    let name = rest[..end].trim();
                    if !allowed.contains(&name) {
                        return Err(TemplateError(format!(
                            "unknown placeholder `{{{name}}}` (known: {})",
                            allowed
                                .iter()
                                .map(|a| format!("{{{a}}}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )));
                    }
                    if !text.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut text)));
                    }
                    pieces.push(Piece::Var(name.to_owned()));
                    for _ in 0..rest[..end].chars().count() + 1 {
                        chars.next();
                    }
                }
                '}' => {
                    return Err(TemplateError(format!(
                        "lone `}}` at byte {i} (write `}}}}` for a literal brace)"
                    )));
                }
                c => text.push(c),
            }
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        Ok(Template {
            source: source.to_owned(),
            pieces,
        })
    }

    /// Fills the placeholders; a name `value` has no value for stays as `{name}`.
    pub fn fill(&self, mut value: impl FnMut(&str) -> Option<String>) -> String {
        let mut out = String::with_capacity(self.source.len());
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Var(name) => match value(name) {
                    Some(v) => out.push_str(&v),
                    None => {
                        out.push('{');
                        out.push_str(name);
                        out.push('}');
                    }
                },
            }
        }
        out
    }

    /// The placeholders used, in order of first use.
    pub fn placeholders(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for p in &self.pieces {
            if let Piece::Var(n) = p
                && !out.contains(&n.as_str())
            {
                out.push(n);
            }
        }
        out
    }

    /// The template as written.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// Placeholders of the system prompt.
pub const SYSTEM_VARS: &[&str] = &["name", "tools"];
/// Placeholders of the reason prompt (the user turn that starts a task).
pub const REASON_VARS: &[&str] = &["input", "tools", "name", "from"];
/// Placeholders of the act prompt (scratchpad: the turn after each observation).
pub const ACT_VARS: &[&str] = &["objective", "tools", "observation", "steps"];
/// Placeholders of the respond prompt (the last call when the step budget is spent).
pub const RESPOND_VARS: &[&str] = &["observation", "input", "steps"];

/// Default system prompt.
pub const DEFAULT_SYSTEM: &str = "You are {name}, an AI agent in a MEW space: a shared workspace of people, agents and tools. Use the tools offered to you when they help; a tool may need a person's approval before it runs, and a refused or failed call comes back to you as an observation. Answer concisely.";
/// Default reason prompt.
pub const DEFAULT_REASON: &str = "{input}";
/// Default act prompt.
pub const DEFAULT_ACT: &str = "Task: {objective}\n\nPrevious actions and observations:\n{steps}\n\nBased on the above, continue with the task.";
/// Default respond prompt.
pub const DEFAULT_RESPOND: &str = "You ran out of steps. Task: {input}\n\nWhat you found:\n{steps}\n\nGive the best answer you can from this, saying what is missing.";

/// Format instructions appended to the system prompt in scratchpad mode.
pub const SCRATCHPAD_FORMAT: &str = "Tools you can use (name: description; arguments schema):\n{tools}\n\nReply with one JSON object and nothing else:\n{{\"reasoning\": \"your analysis\", \"action\": \"tool_call\" or \"respond\", \"actionInput\": {{\"tool\": \"participant/tool\", \"arguments\": {{...}}}} for a tool call, or {{\"message\": \"your answer\"}} to respond}}.";

/// What a scratchpad reply asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Scratch {
    /// Call a tool.
    Tool {
        /// The model's reasoning.
        thought: String,
        /// Tool name as written (`participant/tool`).
        tool: String,
        /// Its arguments.
        arguments: Value,
    },
    /// Answer.
    Respond {
        /// The model's reasoning.
        thought: String,
        /// The answer.
        message: String,
    },
    /// Think once more without acting.
    Continue {
        /// The model's reasoning.
        thought: String,
    },
}

/// Reads a scratchpad reply: the spec's JSON object (possibly inside a ```json fence or
/// surrounded by text), or `Thought:` / `Action:` / `Action Input:` / `Final Answer:` lines.
pub fn parse_scratchpad(text: &str) -> Result<Scratch, String> {
    let has_lines = text.lines().any(|l| {
        strip_label(l.trim(), "action").is_some() || strip_label(l.trim(), "final answer").is_some()
    });
    if let Some(v) = first_json_object(text)
        && (v.get("action").is_some() || !has_lines)
    {
        return from_json(&v);
    }
    let mut thought = String::new();
    let mut action = None;
    let mut input = None;
    let mut answer: Option<String> = None;
    for line in text.lines() {
        let l = line.trim();
        if let Some(r) = strip_label(l, "thought") {
            thought = r.to_owned();
        } else if let Some(r) = strip_label(l, "action input") {
            input = Some(r.to_owned());
        } else if let Some(r) = strip_label(l, "action") {
            action = Some(r.to_owned());
        } else if let Some(r) = strip_label(l, "final answer") {
            answer = Some(r.to_owned());
        } else if let Some(a) = &mut answer {
            a.push('\n');
            a.push_str(line);
        }
    }
    if let Some(a) = answer {
        return Ok(Scratch::Respond {
            thought,
            message: a.trim().to_owned(),
        });
    }
    if let Some(tool) = action {
        let arguments = match input.as_deref().map(str::trim) {
            None | Some("") => Value::Object(Default::default()),
            Some(s) => serde_json::from_str(s)
                .map_err(|e| format!("`Action Input` is not a JSON object ({e})"))?,
        };
        return Ok(Scratch::Tool {
            thought,
            tool: tool.trim().to_owned(),
            arguments,
        });
    }
    Err(
        "the reply is neither a JSON object with `action` nor `Action:`/`Final Answer:` lines"
            .into(),
    )
}

fn strip_label<'a>(line: &'a str, label: &str) -> Option<&'a str> {
    let (head, rest) = line.split_once(':')?;
    head.trim().eq_ignore_ascii_case(label).then(|| rest.trim())
}

fn first_json_object(text: &str) -> Option<Value> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    (end > start)
        .then(|| serde_json::from_str::<Value>(&text[start..=end]).ok())
        .flatten()
        .filter(Value::is_object)
}

fn from_json(v: &Value) -> Result<Scratch, String> {
    let thought = v
        .get("reasoning")
        .or_else(|| v.get("thought"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let input = v.get("actionInput").or_else(|| v.get("action_input"));
    match v.get("action").and_then(Value::as_str) {
        Some("tool_call" | "tool") => {
            let tool = input
                .and_then(|i| i.get("tool"))
                .and_then(Value::as_str)
                .ok_or("`actionInput.tool` is missing")?;
            let arguments = input
                .and_then(|i| i.get("arguments"))
                .cloned()
                .unwrap_or_else(|| Value::Object(Default::default()));
            Ok(Scratch::Tool {
                thought,
                tool: tool.to_owned(),
                arguments,
            })
        }
        Some("respond") => {
            let message = input
                .and_then(|i| i.get("message").or(Some(i)))
                .and_then(Value::as_str)
                .ok_or("`actionInput.message` is missing")?;
            Ok(Scratch::Respond {
                thought,
                message: message.to_owned(),
            })
        }
        Some("continue") => Ok(Scratch::Continue { thought }),
        Some(other) => Err(format!(
            "unknown action `{other}` (use tool_call, respond or continue)"
        )),
        None => Err("the JSON object has no `action`".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_fill_escape_and_check_names() {
        let t = Template::parse(
            "Hi {name}, {{literal}} {missing_ok}",
            &["name", "missing_ok"],
        )
        .unwrap();
        assert_eq!(
            t.fill(|n| (n == "name").then(|| "Ann".to_owned())),
            "Hi Ann, {literal} {missing_ok}"
        );
        assert_eq!(t.placeholders(), vec!["name", "missing_ok"]);
        let e = Template::parse("{nmae}", &["name"]).unwrap_err();
        assert_eq!(e.0, "unknown placeholder `{nmae}` (known: {name})");
        assert!(
            Template::parse("a { b", &[])
                .unwrap_err()
                .0
                .contains("unclosed")
        );
        assert!(
            Template::parse("a } b", &[])
                .unwrap_err()
                .0
                .contains("lone")
        );
        assert!(Template::parse(DEFAULT_SYSTEM, SYSTEM_VARS).is_ok());
        assert!(Template::parse(DEFAULT_ACT, ACT_VARS).is_ok());
        assert!(Template::parse(DEFAULT_RESPOND, RESPOND_VARS).is_ok());
        assert!(Template::parse(SCRATCHPAD_FORMAT, &["tools"]).is_ok());
    }

    #[test]
    fn scratchpad_forms() {
        let j = parse_scratchpad(
            "Sure.\n```json\n{\"reasoning\":\"need weather\",\"action\":\"tool_call\",\"actionInput\":{\"tool\":\"w/get\",\"arguments\":{\"city\":\"Tokyo\"}}}\n```",
        )
        .unwrap();
        assert_eq!(
            j,
            Scratch::Tool {
                thought: "need weather".into(),
                tool: "w/get".into(),
                arguments: json!({"city": "Tokyo"})
            }
        );
        let r = parse_scratchpad(
            r#"{"reasoning":"done","action":"respond","actionInput":{"message":"22C"}}"#,
        )
        .unwrap();
        assert!(matches!(r, Scratch::Respond { message, .. } if message == "22C"));
        let t =
            parse_scratchpad("Thought: look\nAction: w/get\nAction Input: {\"city\": \"Oslo\"}")
                .unwrap();
        assert!(
            matches!(t, Scratch::Tool { tool, arguments, .. } if tool == "w/get" && arguments["city"] == "Oslo")
        );
        let f = parse_scratchpad("Thought: ok\nFinal Answer: It is\nsunny.").unwrap();
        assert!(matches!(f, Scratch::Respond { message, .. } if message == "It is\nsunny."));
        assert!(parse_scratchpad("I think it is sunny").is_err());
        assert!(
            parse_scratchpad(r#"{"action":"dance"}"#)
                .unwrap_err()
                .contains("dance")
        );
        assert!(
            parse_scratchpad("Action: x\nAction Input: {oops")
                .unwrap_err()
                .contains("Action Input")
        );
    }
}
