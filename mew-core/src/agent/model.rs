//! Model calls as data: the request the agent wants made (OpenAI chat-completions shape, which
//! hosted APIs and local servers such as Ollama, llama.cpp and vLLM accept), the reply, and
//! what the driver reports back about the HTTP exchange. Retrying is decided here, not in the
//! driver, so the policy is the same under every runtime and in simulation.

use serde_json::{Map, Value, json};
use std::fmt;
use std::time::Duration;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Instructions.
    System,
    /// The person (or participant) asking.
    User,
    /// The model.
    Assistant,
    /// A tool's result, answering an assistant tool call.
    Tool,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Role.
    pub role: Role,
    /// Text, if any.
    pub content: Option<String>,
    /// Tool calls (assistant messages only).
    pub tool_calls: Vec<ToolCall>,
    /// Which call this answers (tool messages only).
    pub tool_call_id: Option<String>,
}

impl Message {
    /// A message with text only.
    pub fn text(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// A tool result.
    pub fn tool_result(call_id: &str, content: impl Into<String>) -> Message {
        Message {
            role: Role::Tool,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.to_owned()),
        }
    }

    /// A rough token count (about 4 bytes a token), for when the model reports no usage.
    pub fn estimate_tokens(&self) -> u64 {
        let bytes = self.content.as_deref().map_or(0, str::len)
            + self
                .tool_calls
                .iter()
                .map(|c| c.name.len() + c.arguments.len())
                .sum::<usize>();
        (bytes as u64).div_ceil(4) + 4
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("role".into(), self.role.as_str().into());
        // An assistant message with tool calls may carry no text; APIs want `null` then.
        m.insert(
            "content".into(),
            self.content.clone().map_or(Value::Null, Value::String),
        );
        if !self.tool_calls.is_empty() {
            m.insert(
                "tool_calls".into(),
                self.tool_calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function",
                               "function": {"name": c.name, "arguments": c.arguments}})
                    })
                    .collect(),
            );
        }
        if let Some(id) = &self.tool_call_id {
            m.insert("tool_call_id".into(), id.clone().into());
        }
        Value::Object(m)
    }
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionDef {
    /// Encoded name (`[A-Za-z0-9_-]{1,64}`).
    pub name: String,
    /// Description, naming the participant that provides it.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// One chat-completions call.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// Model name.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Callable functions (empty: none offered).
    pub tools: Vec<FunctionDef>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Reply length limit.
    pub max_tokens: Option<u32>,
    /// Ask for a server-sent-events stream.
    pub stream: bool,
}

impl ModelRequest {
    /// The request body, as chat-completions APIs take it.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("model".into(), self.model.clone().into());
        m.insert(
            "messages".into(),
            self.messages.iter().map(Message::to_json).collect(),
        );
        if !self.tools.is_empty() {
            m.insert(
                "tools".into(),
                self.tools
                    .iter()
                    .map(|t| {
                        json!({"type": "function", "function": {
                            "name": t.name, "description": t.description,
                            "parameters": t.parameters}})
                    })
                    .collect(),
            );
        }
        if let Some(t) = self.temperature {
            m.insert("temperature".into(), json!(t));
        }
        if let Some(t) = self.max_tokens {
            m.insert("max_tokens".into(), json!(t));
        }
        if self.stream {
            m.insert("stream".into(), json!(true));
        }
        Value::Object(m)
    }

    /// Estimated prompt size in tokens.
    pub fn estimate_tokens(&self) -> u64 {
        self.messages.iter().map(Message::estimate_tokens).sum()
    }
}

pub use super::reply::{ModelReply, TextCalls, ToolCall, Usage};

/// What the driver saw of one model call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelOutcome {
    /// An HTTP answer, whatever its status.
    Http {
        /// Status code.
        status: u16,
        /// `Retry-After`, when the server sent one (seconds form).
        retry_after: Option<Duration>,
        /// The body.
        body: String,
    },
    /// No HTTP answer: connection refused, timed out, reset.
    Transport(String),
}

/// A model call that failed for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelError {
    /// One line saying what went wrong and what to check.
    pub message: String,
    /// Whether it was retried before giving up.
    pub attempts: u32,
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// What to do with an outcome.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Verdict {
    Reply(ModelReply),
    /// Try again after this long (or the backoff when `None`).
    Retry(Option<Duration>, String),
    Fail(String),
}

/// The error text of an API error body (`{"error":{"message":...}}`), or the body's start.
fn api_message(body: &str) -> String {
    let from_json = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error"))
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let text = from_json.unwrap_or_else(|| body.trim().to_owned());
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect();
    one_line
}

/// Whether a 200 body is an error object whose code says the server failed (429, 5xx).
fn server_side_error(body: &str) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return false;
    };
    let code = v
        .pointer("/error/code")
        .or_else(|| v.pointer("/error/status"))
        .and_then(|c| c.as_u64().or_else(|| c.as_str()?.parse().ok()));
    code.is_some_and(|c| c == 429 || (500..600).contains(&c))
}

pub(super) fn judge(outcome: ModelOutcome) -> Verdict {
    match outcome {
        ModelOutcome::Http {
            status: 200, body, ..
        } => match ModelReply::from_body(&body) {
            Ok(r) => Verdict::Reply(r),
            // Some servers and proxies answer 200 with an error object; a server-side
            // code in it is worth another try, like the status it stands for.
            Err(e) if server_side_error(&body) => Verdict::Retry(None, e),
            Err(e) if e.starts_with("the model server") => Verdict::Fail(e),
            Err(e) => Verdict::Fail(format!("the model endpoint answered something else: {e}")),
        },
        ModelOutcome::Http {
            status: 401 | 403,
            body,
            ..
        } => Verdict::Fail(format!(
            "the model endpoint refused the API key (check OPENAI_API_KEY): {}",
            api_message(&body)
        )),
        ModelOutcome::Http {
            status: 404, body, ..
        } => Verdict::Fail(format!(
            "the model endpoint or model was not found (check OPENAI_BASE_URL and MEW_MODEL): {}",
            api_message(&body)
        )),
        ModelOutcome::Http {
            status,
            retry_after,
            body,
        } if status == 429 || status >= 500 => Verdict::Retry(
            retry_after,
            format!(
                "the model endpoint answered {status}: {}",
                api_message(&body)
            ),
        ),
        ModelOutcome::Http { status, body, .. } => {
            let message = api_message(&body);
            // llama.cpp's server takes tools only with its chat-template engine on.
            let hint = if message.contains("--jinja") {
                " (start llama-server with --jinja to use tools)"
            } else {
                ""
            };
            Verdict::Fail(format!(
                "the model endpoint answered {status}: {message}{hint}"
            ))
        }
        ModelOutcome::Transport(e) => Verdict::Retry(
            None,
            format!("cannot reach the model endpoint (check OPENAI_BASE_URL): {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_body_has_the_api_shape() {
        let r = ModelRequest {
            model: "m".into(),
            messages: vec![
                Message::text(Role::System, "s"),
                Message {
                    role: Role::Assistant,
                    content: None,
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "w__get".into(),
                        arguments: "{}".into(),
                    }],
                    tool_call_id: None,
                },
                Message::tool_result("c1", "sunny"),
            ],
            tools: vec![FunctionDef {
                name: "w__get".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }],
            temperature: Some(0.0),
            max_tokens: None,
            stream: false,
        };
        assert_eq!(
            r.to_json(),
            json!({"model": "m", "temperature": 0.0, "messages": [
                {"role": "system", "content": "s"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "w__get", "arguments": "{}"}}]},
                {"role": "tool", "content": "sunny", "tool_call_id": "c1"}],
              "tools": [{"type": "function", "function": {"name": "w__get", "description": "d",
                         "parameters": {"type": "object"}}}]})
        );
    }

    #[test]
    fn replies_and_errors_are_read() {
        let r = ModelReply::from_json(
            r#"{"choices":[{"message":{"role":"assistant","content":"","tool_calls":[{"id":"x","type":"function","function":{"name":"a__b","arguments":{"k":1}}}]}}],"usage":{"prompt_tokens":10,"completion_tokens":2}}"#,
        )
        .unwrap();
        assert_eq!(r.content, None);
        assert_eq!(r.tool_calls[0].arguments, r#"{"k":1}"#);
        assert_eq!(r.usage.unwrap().prompt_tokens, 10);
        assert!(ModelReply::from_json("{}").is_err());
        let v = judge(ModelOutcome::Http {
            status: 401,
            retry_after: None,
            body: r#"{"error":{"message":"bad key"}}"#.into(),
        });
        assert_eq!(
            v,
            Verdict::Fail(
                "the model endpoint refused the API key (check OPENAI_API_KEY): bad key".into()
            )
        );
        assert!(matches!(
            judge(ModelOutcome::Http {
                status: 429,
                retry_after: Some(Duration::from_secs(2)),
                body: String::new()
            }),
            Verdict::Retry(Some(d), _) if d == Duration::from_secs(2)
        ));
        // 200 with an error object: a server-side code is retried, anything else fails.
        let ok_but = |body: &str| ModelOutcome::Http {
            status: 200,
            retry_after: None,
            body: body.into(),
        };
        assert!(matches!(
            judge(ok_but(r#"{"error":{"message":"overloaded","code":503}}"#)),
            Verdict::Retry(None, m) if m.contains("overloaded")
        ));
        assert!(matches!(
            judge(ok_but(r#"{"error":{"message":"bad model","code":"invalid"}}"#)),
            Verdict::Fail(m) if m == "the model server reported an error: bad model"
        ));
        assert!(matches!(
            judge(ok_but(r#"{"choices":[]}"#)),
            Verdict::Fail(m) if m.contains("choices are empty")
        ));
        assert!(matches!(
            judge(ModelOutcome::Transport("refused".into())),
            Verdict::Retry(None, m) if m.contains("cannot reach")
        ));
        assert!(matches!(
            judge(ModelOutcome::Http { status: 400, retry_after: None,
                body: r#"{"error":{"code":400,"message":"tools param requires --jinja flag","type":"invalid_request_error"}}"#.into() }),
            Verdict::Fail(m) if m.ends_with("--jinja flag (start llama-server with --jinja to use tools)")
        ));
        assert!(matches!(
            judge(ModelOutcome::Http { status: 400, retry_after: None, body: "x\ny".into() }),
            Verdict::Fail(m) if m == "the model endpoint answered 400: x y"
        ));
    }
}
