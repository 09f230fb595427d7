//! Reading what model servers answer, as real servers write it: a chat-completions body or
//! its server-sent-events stream (`stream: true`), from OpenAI, Ollama, llama.cpp's server,
//! vLLM and the like.
//!
//! Beyond the API's plain shape, a reply is read the way a person running a local server
//! would want:
//!
//! - private reasoning is kept apart from the answer: `reasoning_content` (DeepSeek, vLLM,
//!   llama.cpp) or `reasoning` (Ollama, OpenRouter) fields, and `<think>…</think>` text at
//!   the start of the content (or ending at `</think>` when the template opened the tag);
//! - tool calls written into the text by servers without a tool-call parser are recognised
//!   when the reply has no `tool_calls`: `<tool_call>{…}</tool_call>` (Hermes, Qwen),
//!   `[TOOL_CALLS][…]` (Mistral), a fenced JSON object, or a reply that is one JSON object,
//!   each with `name` and `arguments` (or `parameters`);
//! - arguments given as a JSON object rather than a string are taken as written; missing or
//!   repeated tool-call ids are replaced by unique ones; `finish_reason: "length"` marks the
//!   reply as cut; `usage` may be absent.

use serde_json::{Map, Value, json};

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The model's id for it (answered by a `tool` message with this `tool_call_id`).
    pub id: String,
    /// The function name as the model saw it (see [`super::toolname`]).
    pub name: String,
    /// Arguments as the JSON text the model wrote (may be invalid JSON).
    pub arguments: String,
}

/// Token counts the API reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Reply tokens.
    pub completion_tokens: u64,
}

/// How the model wrote tool calls into its text (when the server did not parse them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextCalls {
    /// `<tool_call>{…}</tool_call>`: results go back as `<tool_response>` blocks.
    Hermes,
    /// `[TOOL_CALLS][…]`, a fenced or bare JSON object: results go back as plain text.
    Json,
}

/// The model's answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelReply {
    /// The answer text, without reasoning and without tool calls written in text.
    pub content: Option<String>,
    /// The model's private reasoning, if it showed any.
    pub reasoning: Option<String>,
    /// Tool calls, if any, with unique ids.
    pub tool_calls: Vec<ToolCall>,
    /// Set when the tool calls were read from the text: the form to answer them in.
    pub text_calls: Option<TextCalls>,
    /// The text as the model wrote it (reasoning removed): what it said, tool calls
    /// included, for the conversation history.
    pub raw_content: Option<String>,
    /// The reply was cut by the length limit (`finish_reason: "length"`).
    pub truncated: bool,
    /// Usage, when reported.
    pub usage: Option<Usage>,
}

impl ModelReply {
    /// Reads a chat-completions response body: JSON, or a server-sent-events stream.
    pub fn from_body(body: &str) -> Result<ModelReply, String> {
        let t = body.trim_start();
        if t.starts_with("data:") || t.starts_with("event:") || t.starts_with(':') {
            let mut s = StreamAssembler::default();
            s.push(body);
            s.push("\n\n");
            return s.finish();
        }
        ModelReply::from_json(body)
    }

    /// Reads a chat-completions response body (JSON).
    pub fn from_json(body: &str) -> Result<ModelReply, String> {
        let v: Value =
            serde_json::from_str(body).map_err(|e| format!("the reply is not JSON: {e}"))?;
        if let Some(e) = error_message(&v) {
            return Err(format!("the model server reported an error: {e}"));
        }
        let choices = v
            .get("choices")
            .and_then(Value::as_array)
            .ok_or("the reply has no choices")?;
        let choice = choices
            .first()
            .ok_or("the reply's choices are empty (the server produced no answer)")?;
        let msg = choice
            .get("message")
            .ok_or("the reply has no choices[0].message")?;
        let finish = choice.get("finish_reason").and_then(Value::as_str);
        read_message(msg, finish, v.get("usage"))
    }
}

/// The message of an `error` object (`{"error": {"message": …}}` or `{"error": "…"}`).
pub(super) fn error_message(v: &Value) -> Option<String> {
    let e = v.get("error")?;
    if e.is_null() {
        return None;
    }
    Some(
        e.get("message")
            .and_then(Value::as_str)
            .or_else(|| e.as_str())
            .map_or_else(|| e.to_string(), str::to_owned),
    )
}

fn nonempty(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .map(str::to_owned)
}

/// Reads one assistant message (whole, or assembled from a stream).
fn read_message(
    msg: &Value,
    finish: Option<&str>,
    usage: Option<&Value>,
) -> Result<ModelReply, String> {
    let mut reasoning = nonempty(msg.get("reasoning_content")).or(nonempty(msg.get("reasoning")));
    let mut content = msg
        .get("content")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(c) = content.take() {
        let (think, rest) = split_think(&c);
        if let Some(t) = think.filter(|t| !t.trim().is_empty()) {
            reasoning = Some(match reasoning {
                Some(r) => format!("{r}\n{t}"),
                None => t,
            });
        }
        content = Some(rest).filter(|s| !s.trim().is_empty());
    }
    let mut tool_calls = Vec::new();
    if let Some(calls) = msg.get("tool_calls").and_then(Value::as_array) {
        for c in calls {
            let f = c.get("function").unwrap_or(c);
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .ok_or("a tool call without a name")?;
            let id = c.get("id").and_then(Value::as_str).unwrap_or("");
            tool_calls.push(ToolCall {
                id: id.to_owned(),
                name: name.to_owned(),
                arguments: arguments_text(f.get("arguments")),
            });
        }
    }
    let raw_content = content.clone();
    let mut text_calls = None;
    if tool_calls.is_empty()
        && let Some(text) = &content
        && let Some((form, calls, rest)) = calls_in_text(text)
    {
        tool_calls = calls;
        text_calls = Some(form);
        content = Some(rest).filter(|s| !s.trim().is_empty());
    }
    unique_ids(&mut tool_calls);
    let usage = usage.filter(|u| u.is_object()).map(|u| Usage {
        prompt_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        completion_tokens: u
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    });
    Ok(ModelReply {
        content: content.map(|c| c.trim().to_owned()),
        reasoning: reasoning.map(|r| r.trim().to_owned()),
        tool_calls,
        text_calls,
        raw_content,
        truncated: finish == Some("length"),
        usage,
    })
}

/// Arguments as JSON text: a string as written, an object (some servers) serialised.
fn arguments_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) if s.trim().is_empty() => "{}".into(),
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => "{}".into(),
        Some(other) => other.to_string(),
    }
}

/// Gives every call an id, unique within the reply.
fn unique_ids(calls: &mut [ToolCall]) {
    let mut seen = std::collections::BTreeSet::new();
    for (i, c) in calls.iter_mut().enumerate() {
        if c.id.is_empty() || seen.contains(&c.id) {
            let mut id = format!("call_{i}");
            let mut n = 0;
            while seen.contains(&id) {
                n += 1;
                id = format!("call_{i}_{n}");
            }
            c.id = id;
        }
        seen.insert(c.id.clone());
    }
}

const THINK_TAGS: [(&str, &str); 2] = [("<think>", "</think>"), ("<thinking>", "</thinking>")];

/// Splits `<think>…</think>` reasoning off the start of a text; an unclosed tag (a cut
/// reply) makes it all reasoning, and a lone `</think>` (the template opened the tag)
/// ends the reasoning there.
pub(super) fn split_think(text: &str) -> (Option<String>, String) {
    let t = text.trim_start();
    for (open, close) in THINK_TAGS {
        if let Some(after) = t.strip_prefix(open) {
            return match after.find(close) {
                Some(end) => (
                    Some(after[..end].trim().to_owned()),
                    after[end + close.len()..].trim_start().to_owned(),
                ),
                None => (Some(after.trim().to_owned()), String::new()),
            };
        }
        if let Some(end) = t.find(close)
            && !t[..end].contains('<')
        {
            return (
                Some(t[..end].trim().to_owned()),
                t[end + close.len()..].trim_start().to_owned(),
            );
        }
    }
    (None, text.to_owned())
}

/// A call object as models write it: `{"name", "arguments"|"parameters"}`, possibly inside
/// `{"function": …}`.
fn call_of(v: &Value) -> Option<(String, String)> {
    let f = v.get("function").filter(|f| f.is_object()).unwrap_or(v);
    let name = f.get("name")?.as_str()?.to_owned();
    let args = f.get("arguments").or_else(|| f.get("parameters"));
    if args.is_none() && f.as_object().is_some_and(|o| o.len() > 1) {
        return None;
    }
    Some((name, arguments_text(args)))
}

fn calls_of(v: &Value) -> Option<Vec<(String, String)>> {
    match v {
        Value::Array(items) if !items.is_empty() => items.iter().map(call_of).collect(),
        Value::Object(_) => call_of(v).map(|c| vec![c]),
        _ => None,
    }
}

fn to_calls(found: Vec<(String, String)>) -> Vec<ToolCall> {
    found
        .into_iter()
        .map(|(name, arguments)| ToolCall {
            id: String::new(),
            name,
            arguments,
        })
        .collect()
}

/// Tool calls written into a reply's text, the form they were in, and the text left.
fn calls_in_text(text: &str) -> Option<(TextCalls, Vec<ToolCall>, String)> {
    // Hermes / Qwen: one or more <tool_call> blocks; the last may lack its closing tag.
    if text.contains("<tool_call>") {
        let mut calls = Vec::new();
        let mut rest = String::new();
        let mut s = text;
        while let Some(start) = s.find("<tool_call>") {
            rest.push_str(&s[..start]);
            let after = &s[start + "<tool_call>".len()..];
            let (inner, next) = match after.find("</tool_call>") {
                Some(end) => (&after[..end], &after[end + "</tool_call>".len()..]),
                None => (after, ""),
            };
            let v: Value = serde_json::from_str(inner.trim()).ok()?;
            calls.extend(calls_of(&v)?);
            s = next;
        }
        rest.push_str(s);
        return Some((TextCalls::Hermes, to_calls(calls), rest.trim().to_owned()));
    }
    let t = text.trim();
    if let Some(list) = t.strip_prefix("[TOOL_CALLS]") {
        let v: Value = serde_json::from_str(list.trim()).ok()?;
        return Some((TextCalls::Json, to_calls(calls_of(&v)?), String::new()));
    }
    // A fenced block holding a call.
    let mut s = t;
    while let Some(start) = s.find("```") {
        let after = &s[start + 3..];
        let body_start = after.find('\n').map_or(0, |i| i + 1);
        let Some(end) = after[body_start..].find("```") else {
            break;
        };
        let inner = &after[body_start..body_start + end];
        if let Ok(v) = serde_json::from_str::<Value>(inner.trim())
            && let Some(calls) = calls_of(&v)
        {
            let block_end = start + 3 + body_start + end + 3;
            let rest = format!("{}{}", &s[..start], &s[block_end..]);
            let before = &t[..t.len() - s.len()];
            return Some((
                TextCalls::Json,
                to_calls(calls),
                format!("{before}{rest}").trim().to_owned(),
            ));
        }
        s = &after[body_start + end + 3..];
    }
    // The whole reply one call object (Llama 3 templates without a parser).
    if t.starts_with('{')
        && let Ok(v) = serde_json::from_str::<Value>(t)
        && v.get("name").is_some()
        && (v.get("arguments").is_some() || v.get("parameters").is_some())
    {
        return Some((TextCalls::Json, to_calls(calls_of(&v)?), String::new()));
    }
    None
}

/// What a stream brought since the last push, for showing as it comes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    /// Private reasoning (a reasoning field, or text inside `<think>`).
    Reasoning(String),
    /// Answer text.
    Content(String),
}

/// Assembles a server-sent-events chat-completions stream into one reply: content and
/// reasoning deltas concatenated, tool-call fragments joined by their `index`, the last
/// `finish_reason` and any `usage` kept. [`StreamAssembler::push`] takes the body in pieces
/// of any size and returns what is new, split into reasoning and answer.
#[derive(Debug, Clone, Default)]
pub struct StreamAssembler {
    line: String,
    content: String,
    reasoning: String,
    calls: Vec<(String, String, String)>,
    finish: Option<String>,
    usage: Option<Value>,
    error: Option<String>,
    done: bool,
    /// Content shown so far: where `<think>` handling stands.
    shown: usize,
    in_think: Option<&'static str>,
    saw_data: bool,
}

/// Largest text a stream may assemble, in bytes (a runaway stream ends as an error).
const MAX_STREAM: usize = 16 * 1024 * 1024;

impl StreamAssembler {
    /// Takes a piece of the body; returns the new reasoning and answer text.
    pub fn push(&mut self, piece: &str) -> Vec<Delta> {
        let mut deltas = Vec::new();
        self.line.push_str(piece);
        while let Some(nl) = self.line.find('\n') {
            let line: String = self.line.drain(..=nl).collect();
            self.on_line(line.trim_end_matches(['\r', '\n']), &mut deltas);
        }
        if self.line.len() > MAX_STREAM {
            self.line.clear();
            self.error = Some("a stream line is too long".into());
        }
        deltas
    }

    fn on_line(&mut self, line: &str, deltas: &mut Vec<Delta>) {
        let Some(data) = line.strip_prefix("data:") else {
            return;
        };
        let data = data.trim();
        self.saw_data = true;
        if data == "[DONE]" {
            self.done = true;
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return;
        };
        if let Some(e) = error_message(&v) {
            self.error = Some(e);
            return;
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        let Some(choice) = v.pointer("/choices/0") else {
            return;
        };
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(f.to_owned());
        }
        // Some servers send the whole message in the last event.
        let delta = choice.get("delta").or_else(|| choice.get("message"));
        let Some(delta) = delta else { return };
        for key in ["reasoning_content", "reasoning"] {
            if let Some(r) = delta.get(key).and_then(Value::as_str)
                && !r.is_empty()
                && self.reasoning.len() + r.len() <= MAX_STREAM
            {
                self.reasoning.push_str(r);
                deltas.push(Delta::Reasoning(r.to_owned()));
                break;
            }
        }
        if let Some(c) = delta.get("content").and_then(Value::as_str)
            && self.content.len() + c.len() <= MAX_STREAM
        {
            self.content.push_str(c);
            self.show_content(deltas);
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (pos, c) in calls.iter().enumerate() {
                let i = c
                    .get("index")
                    .and_then(Value::as_u64)
                    .map_or(pos, |i| i as usize)
                    .min(255);
                if self.calls.len() <= i {
                    self.calls.resize(i + 1, Default::default());
                }
                let slot = &mut self.calls[i];
                if let Some(id) = c.get("id").and_then(Value::as_str) {
                    slot.0 = id.to_owned();
                }
                let f = c.get("function").unwrap_or(c);
                if let Some(n) = f.get("name").and_then(Value::as_str) {
                    slot.1.push_str(n);
                }
                match f.get("arguments") {
                    Some(Value::String(a)) if slot.2.len() + a.len() <= MAX_STREAM => {
                        slot.2.push_str(a)
                    }
                    Some(Value::Object(o)) => slot.2 = Value::Object(o.clone()).to_string(),
                    _ => {}
                }
            }
        }
    }

    /// Splits newly arrived content into reasoning (inside `<think>`) and answer, holding
    /// back a tail that may be the start of a tag.
    fn show_content(&mut self, deltas: &mut Vec<Delta>) {
        loop {
            let rest = &self.content[self.shown..];
            if rest.is_empty() {
                return;
            }
            match self.in_think {
                Some(close) => match rest.find(close) {
                    Some(end) => {
                        if end > 0 {
                            deltas.push(Delta::Reasoning(rest[..end].to_owned()));
                        }
                        self.shown += end + close.len();
                        self.in_think = None;
                    }
                    None => {
                        let keep = partial_tag(rest, close);
                        let upto = rest.len() - keep;
                        if upto > 0 {
                            deltas.push(Delta::Reasoning(rest[..upto].to_owned()));
                        }
                        self.shown += upto;
                        return;
                    }
                },
                None => {
                    // Only leading reasoning counts: once answer text began, tags are text.
                    let at_start = self.content[..self.shown].trim().is_empty();
                    if at_start {
                        let trimmed = rest.trim_start();
                        let lead = rest.len() - trimmed.len();
                        if let Some((open, close)) =
                            THINK_TAGS.iter().find(|(o, _)| trimmed.starts_with(o))
                        {
                            self.shown += lead + open.len();
                            self.in_think = Some(close);
                            continue;
                        }
                        if THINK_TAGS.iter().any(|(o, _)| o.starts_with(trimmed)) {
                            return;
                        }
                    }
                    deltas.push(Delta::Content(rest.to_owned()));
                    self.shown = self.content.len();
                    return;
                }
            }
        }
    }

    /// Whether `[DONE]` (or a finish reason) arrived.
    pub fn is_done(&self) -> bool {
        self.done || self.finish.is_some()
    }

    /// The assembled reply.
    pub fn finish(self) -> Result<ModelReply, String> {
        if let Some(e) = self.error {
            return Err(format!("the model server reported an error: {e}"));
        }
        if !self.saw_data {
            return Err("the stream held no events".into());
        }
        let mut msg = Map::new();
        msg.insert("content".into(), json!(self.content));
        if !self.reasoning.is_empty() {
            msg.insert("reasoning_content".into(), json!(self.reasoning));
        }
        let calls: Vec<Value> = self
            .calls
            .into_iter()
            .filter(|(_, name, _)| !name.is_empty())
            .map(|(id, name, args)| {
                json!({"id": id, "type": "function",
                       "function": {"name": name, "arguments": args}})
            })
            .collect();
        if !calls.is_empty() {
            msg.insert("tool_calls".into(), Value::Array(calls));
        }
        read_message(
            &Value::Object(msg),
            self.finish.as_deref(),
            self.usage.as_ref(),
        )
    }
}

/// How many bytes at the end of `text` could begin `tag`.
fn partial_tag(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
