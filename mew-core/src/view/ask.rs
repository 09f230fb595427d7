//! What the space asks of the person directly: an MCP server's questions (elicitations put
//! to us by a bridge because our call caused them) and the sign-in notices of bridges.
//!
//! A question arrives as a forwarded `elicitation/create` ([`FORWARDED`]; the participant
//! holds the call until it is answered). It is read by the MCP client's own rule
//! ([`crate::mcp::parse_ask`]) and shown as a [`Question`]: a form whose [`Field`]s are built
//! from the requested schema, or a link to open. The person's [`Command::Answer`] is turned
//! into typed values here (text typed for a number is parsed, a choice may be named by its
//! value, its title or its number), checked against the requested schema, and only then sent
//! back as the `ElicitResult` ([`Action::Answer`]); a refused answer leaves the question open
//! with the reason in [`Question::problem`].
//!
//! A bridge that needs the person to sign in says so in its `participant/status`
//! (`mcp_server.sign_in {url, host}`); the view keeps one [`Notice`] per such participant,
//! gone when a later status of it has no `sign_in` or when it leaves.

use super::{Action, Change, Command, View, ViewError};
use crate::mcp::{Ask, AskAnswer, ElicitationMode, answer_result, parse_ask};
use crate::schema::Schema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The requests a person's participant hands to its view instead of refusing them
/// (`Participant::forward_method` each of them).
pub const FORWARDED: &[&str] = &["elicitation/create"];

/// How a question's field is filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldKind {
    /// Free text (maybe of a `format`: email, uri, date, date-time).
    Text,
    /// A number.
    Number,
    /// A whole number.
    Integer,
    /// Yes or no.
    Boolean,
    /// One of [`Field::options`].
    Choice,
    /// Any number of [`Field::options`] (within `min_items`..`max_items`).
    Choices,
}

/// One option of a choice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    /// What is sent.
    pub value: String,
    /// What is shown (the value when the schema gives no title).
    pub title: String,
}

/// One field of a question's form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Field {
    /// The property name (the key of [`Command::Answer`]'s `values`).
    pub name: String,
    /// Its label: the schema's `title`, else the name.
    pub title: String,
    /// The schema's `description` (empty for none).
    pub description: String,
    /// How it is filled in.
    pub kind: FieldKind,
    /// The string `format` (email, uri, date, date-time), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Whether an answer must have it.
    pub required: bool,
    /// The options of a choice, in the schema's order.
    pub options: Vec<Choice>,
    /// The schema's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// The default as the person would type it (empty for none).
    pub text: String,
    /// The bounds in words ("1 to 100", "at most 3", ...; empty for none).
    pub hint: String,
}

/// A server's question to the person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// Names it in [`Command::Answer`].
    pub id: String,
    /// Who asks (the bridge).
    pub from: String,
    /// The server's message.
    pub message: String,
    /// URL mode: the page to open (http or https only); `None` for a form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The form's fields (required first, then by name).
    pub fields: Vec<Field>,
    /// Why the last answer was refused (here, or by the bridge asking again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The person's reply to a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Answer (with the form's values, or having opened the link).
    Accept,
    /// Refuse to answer.
    Decline,
    /// Dismiss without a choice.
    Cancel,
}

/// A participant needs the person to sign in somewhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// Who needs it.
    pub participant: String,
    /// Where to sign in (the authorization server's host).
    pub host: String,
    /// The link to open (http or https).
    pub url: String,
    /// The line: `files needs you to sign in to auth.example.com`.
    pub text: String,
}

/// An open question: what the participant holds, and the server's question as read.
#[derive(Debug)]
pub(super) struct Open {
    id: String,
    call: u64,
    ask: Ask,
}

/// Whether a link may be shown to be followed: a web page, nothing a browser would run.
fn openable(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    (lower.starts_with("https://") || lower.starts_with("http://"))
        && !url.contains(char::is_whitespace)
}

fn number_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Array(a) => a.iter().map(number_text).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// Options of a choice schema: `enum` (titled by `enumNames` when given), or
/// `oneOf`/`anyOf` of `{const, title}`.
fn options(s: &Value) -> Option<Vec<Choice>> {
    if let Some(list) = s["enum"].as_array() {
        let names = s["enumNames"].as_array();
        return Some(
            list.iter()
                .enumerate()
                .map(|(i, v)| {
                    let value = number_text(v);
                    let title = names
                        .and_then(|n| n.get(i))
                        .and_then(Value::as_str)
                        .map_or_else(|| value.clone(), str::to_owned);
                    Choice { value, title }
                })
                .collect(),
        );
    }
    let list = s["oneOf"].as_array().or_else(|| s["anyOf"].as_array())?;
    let choices: Vec<Choice> = list
        .iter()
        .filter_map(|o| {
            let value = number_text(o.get("const")?);
            let title = o["title"]
                .as_str()
                .map_or_else(|| value.clone(), str::to_owned);
            Some(Choice { value, title })
        })
        .collect();
    (!choices.is_empty()).then_some(choices)
}

fn range(min: &Value, max: &Value, unit: &str) -> String {
    match (min.as_f64(), max.as_f64()) {
        (Some(_), Some(_)) => format!("{} to {}{unit}", min, max),
        (Some(_), None) => format!("at least {min}{unit}"),
        (None, Some(_)) => format!("at most {max}{unit}"),
        (None, None) => String::new(),
    }
}

/// The form of a requested schema: one field per property.
pub fn fields(schema: &Value) -> Vec<Field> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut out: Vec<Field> = schema["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, s)| {
            let ty = s["type"].as_str().unwrap_or("string");
            let (kind, options, hint) = match ty {
                "number" => (
                    FieldKind::Number,
                    Vec::new(),
                    range(&s["minimum"], &s["maximum"], ""),
                ),
                "integer" => (
                    FieldKind::Integer,
                    Vec::new(),
                    range(&s["minimum"], &s["maximum"], ""),
                ),
                "boolean" => (FieldKind::Boolean, Vec::new(), String::new()),
                "array" => (
                    FieldKind::Choices,
                    options(&s["items"]).unwrap_or_default(),
                    range(&s["minItems"], &s["maxItems"], " choices"),
                ),
                _ => match options(s) {
                    Some(o) => (FieldKind::Choice, o, String::new()),
                    None => (
                        FieldKind::Text,
                        Vec::new(),
                        range(&s["minLength"], &s["maxLength"], " characters"),
                    ),
                },
            };
            let default = s.get("default").cloned();
            let text = match (&default, kind) {
                (Some(Value::Bool(b)), _) => if *b { "yes" } else { "no" }.to_owned(),
                (Some(v), _) => number_text(v),
                (None, _) => String::new(),
            };
            Field {
                name: name.clone(),
                title: s["title"].as_str().unwrap_or(name).to_owned(),
                description: s["description"].as_str().unwrap_or_default().to_owned(),
                kind,
                format: s["format"].as_str().map(str::to_owned),
                required: required.contains(&name.as_str()),
                options,
                default,
                text,
                hint,
            }
        })
        .collect();
    out.sort_by(|a, b| b.required.cmp(&a.required).then(a.name.cmp(&b.name)));
    out
}

/// One option named by its value, its title (any case) or its number (from 1).
fn pick(field: &Field, said: &str) -> Result<String, String> {
    let said = said.trim();
    let o = &field.options;
    o.iter()
        .find(|c| c.value == said)
        .or_else(|| o.iter().find(|c| c.title.eq_ignore_ascii_case(said)))
        .or_else(|| {
            said.parse::<usize>()
                .ok()
                .and_then(|n| n.checked_sub(1))
                .and_then(|i| o.get(i))
        })
        .map(|c| c.value.clone())
        .ok_or_else(|| {
            let names: Vec<&str> = o.iter().map(|c| c.title.as_str()).collect();
            format!(
                "{}: {said:?} is not one of {}",
                field.title,
                names.join(", ")
            )
        })
}

/// The typed value of what the person gave for `field`; `None` when nothing was given.
pub fn field_value(field: &Field, given: &Value) -> Result<Option<Value>, String> {
    let text = match given {
        Value::Null => return Ok(None),
        Value::String(s) if s.trim().is_empty() && field.kind != FieldKind::Text => {
            return Ok(None);
        }
        Value::String(s) if s.is_empty() => return Ok(None),
        Value::String(s) => s.as_str(),
        other => {
            return match (field.kind, other) {
                (FieldKind::Number | FieldKind::Integer, Value::Number(_))
                | (FieldKind::Boolean, Value::Bool(_)) => Ok(Some(other.clone())),
                (FieldKind::Choices, Value::Array(list)) => list
                    .iter()
                    .map(|v| pick(field, &number_text(v)).map(Value::String))
                    .collect::<Result<Vec<_>, _>>()
                    .map(|l| Some(Value::Array(l))),
                (FieldKind::Choice, v) => pick(field, &number_text(v)).map(|s| Some(json!(s))),
                _ => Err(format!(
                    "{}: {other} is not a {}",
                    field.title,
                    kind_name(field.kind)
                )),
            };
        }
    };
    let t = text.trim();
    match field.kind {
        FieldKind::Text => Ok(Some(json!(text))),
        FieldKind::Integer => t
            .parse::<i64>()
            .map(|n| Some(json!(n)))
            .map_err(|_| format!("{}: {t:?} is not a whole number", field.title)),
        FieldKind::Number => match t.parse::<f64>() {
            Ok(n) if n.is_finite() => Ok(Some(json!(n))),
            _ => Err(format!("{}: {t:?} is not a number", field.title)),
        },
        FieldKind::Boolean => match t.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" | "on" | "1" | "x" => Ok(Some(json!(true))),
            "n" | "no" | "false" | "off" | "0" => Ok(Some(json!(false))),
            _ => Err(format!("{}: {t:?} is not yes or no", field.title)),
        },
        FieldKind::Choice => pick(field, t).map(|v| Some(json!(v))),
        FieldKind::Choices => t
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| pick(field, s).map(Value::String))
            .collect::<Result<Vec<_>, _>>()
            .map(|l| Some(Value::Array(l))),
    }
}

fn kind_name(kind: FieldKind) -> &'static str {
    match kind {
        FieldKind::Text => "text",
        FieldKind::Number => "number",
        FieldKind::Integer => "whole number",
        FieldKind::Boolean => "yes or no",
        FieldKind::Choice => "choice",
        FieldKind::Choices => "list of choices",
    }
}

impl View {
    /// A request forwarded to us: a question for the person, or one we cannot take.
    pub(super) fn on_forwarded(
        &mut self,
        call: u64,
        from: &str,
        method: &str,
        params: Option<&Value>,
        explicit: bool,
    ) {
        if !explicit {
            // Asked of everyone: meant for whoever caused it, not for us.
            return self.actions.push_back(Action::Ignore { call });
        }
        let ask = match parse_ask(method, params) {
            Ok(Some(a @ Ask::Elicitation(_))) => a,
            Ok(_) => {
                let message = format!("{method} is not answered by a person here");
                return self.actions.push_back(Action::Refuse {
                    call,
                    code: -32601,
                    message,
                });
            }
            Err(e) => {
                self.note(format!("{from} asked something unreadable: {}", e.message));
                return self.actions.push_back(Action::Refuse {
                    call,
                    code: e.code,
                    message: e.message,
                });
            }
        };
        let Ask::Elicitation(e) = &ask else { return };
        let (url, fields) = match &e.mode {
            ElicitationMode::Form { requested_schema } => (None, fields(requested_schema)),
            ElicitationMode::Url { url, .. } if openable(url) => (Some(url.clone()), Vec::new()),
            ElicitationMode::Url { url, .. } => {
                self.note(format!(
                    "{from} asked to open {url:?}, which is not a web page: cancelled"
                ));
                return self.actions.push_back(Action::Answer {
                    call,
                    result: json!({"action": "cancel"}),
                });
            }
        };
        if self.open.len() >= self.limits.questions.max(1) {
            self.note(format!(
                "{from} asked a question while {} wait: cancelled",
                self.open.len()
            ));
            return self.actions.push_back(Action::Answer {
                call,
                result: json!({"action": "cancel"}),
            });
        }
        self.asked += 1;
        let id = format!("q{}", self.asked);
        let problem = params
            .and_then(|p| p["_meta"]["mew/rejected"].as_str())
            .map(|r| format!("the last answer was refused: {r}"));
        let q = Question {
            id: id.clone(),
            from: from.to_owned(),
            message: e.message.clone(),
            url,
            fields,
            problem,
        };
        let what = if q.url.is_some() {
            "asks you to open a link"
        } else {
            "asks you"
        };
        self.note(format!("{from} {what}: {}", q.message));
        self.open.push_back(Open { id, call, ask });
        self.state.questions.push_back(q);
        self.questions_changed();
    }

    /// The person's answer to a question: checked, then sent; a refused one stays open.
    pub(super) fn answer(
        &mut self,
        question: &str,
        reply: Reply,
        values: &Map<String, Value>,
    ) -> Result<(), ViewError> {
        let at = self
            .open
            .iter()
            .position(|o| o.id == question)
            .ok_or_else(|| ViewError::UnknownQuestion(question.to_owned()))?;
        let answer = match reply {
            Reply::Decline => AskAnswer::Decline,
            Reply::Cancel => AskAnswer::Cancel,
            Reply::Accept => match self.content(at, values) {
                Ok(content) => AskAnswer::Accept(content),
                Err(why) => {
                    self.state.questions[at].problem = Some(why.clone());
                    self.questions_changed();
                    return Err(ViewError::Invalid(why));
                }
            },
        };
        let result = match answer_result(&self.open[at].ask, answer) {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => json!({"action": "cancel", "reason": e.message}),
            Err(e) => {
                let why = e.to_string();
                self.state.questions[at].problem = Some(why.clone());
                self.questions_changed();
                return Err(ViewError::Invalid(why));
            }
        };
        let open = self.open.remove(at).expect("position is in range");
        let q = self.state.questions.remove(at).expect("kept in step");
        self.questions_changed();
        let said = match reply {
            Reply::Accept => "answered",
            Reply::Decline => "declined",
            Reply::Cancel => "dismissed",
        };
        self.note(format!("you {said} {}'s question", q.from));
        self.actions.push_back(Action::Answer {
            call: open.call,
            result,
        });
        Ok(())
    }

    /// The form's content: each value typed by its field, the defaults filled in, the
    /// whole checked against the requested schema; `Err` says why not, in the person's words.
    fn content(
        &self,
        at: usize,
        values: &Map<String, Value>,
    ) -> Result<Option<Map<String, Value>>, String> {
        let q = &self.state.questions[at];
        let Ask::Elicitation(e) = &self.open[at].ask else {
            return Err("not a question".into());
        };
        let ElicitationMode::Form { requested_schema } = &e.mode else {
            return Ok(None);
        };
        let mut content = Map::new();
        for (name, given) in values {
            let Some(field) = q.fields.iter().find(|f| &f.name == name) else {
                return Err(format!("the form has no field {name:?}"));
            };
            if let Some(v) = field_value(field, given)? {
                content.insert(name.clone(), v);
            }
        }
        let mut filled = content.clone();
        Schema::fill_defaults(requested_schema, &mut filled);
        let schema = Schema::compile(requested_schema).map_err(|e| e.to_string())?;
        if let Err(v) = schema.validate(&Value::Object(filled)) {
            let name = v
                .path
                .trim_start_matches('/')
                .split('/')
                .next()
                .unwrap_or_default();
            let missing = (v.rule == "required").then(|| {
                q.fields
                    .iter()
                    .find(|f| f.required && !content.contains_key(&f.name))
                    .map(|f| f.title.clone())
            });
            return Err(
                match (missing.flatten(), q.fields.iter().find(|f| f.name == name)) {
                    (Some(title), _) => format!("{title} is required"),
                    (None, Some(f)) => format!("{}: {}", f.title, v.message),
                    (None, None) => v.to_string(),
                },
            );
        }
        Ok(Some(content))
    }

    fn questions_changed(&mut self) {
        self.changed(|s| Change::Questions(s.questions.iter().cloned().collect()));
    }

    /// A participant's status: its sign-in notice comes or goes.
    pub(super) fn on_status(&mut self, from: &str, payload: &Value) {
        let sign_in = &payload["mcp_server"]["sign_in"];
        let notice = match (sign_in["url"].as_str(), sign_in["host"].as_str()) {
            (Some(url), Some(host)) if openable(url) => Some(Notice {
                participant: from.to_owned(),
                host: host.to_owned(),
                url: url.to_owned(),
                text: format!("{from} needs you to sign in to {host}"),
            }),
            _ => None,
        };
        let before = self.state.notices.clone();
        self.state.notices.retain(|n| n.participant != from);
        if let Some(n) = notice {
            if self.state.notices.len() >= self.limits.questions.max(1) {
                self.state.notices.remove(0);
            }
            self.state.notices.push(n);
        }
        if self.state.notices != before {
            self.changed(|s| Change::Notices(s.notices.clone()));
        }
    }

    /// Someone left: its notice goes with it.
    pub(super) fn forget_notice(&mut self, who: &str) {
        let before = self.state.notices.len();
        self.state.notices.retain(|n| n.participant != who);
        if self.state.notices.len() != before {
            self.changed(|s| Change::Notices(s.notices.clone()));
        }
    }
}

impl Command {
    /// Accept question `question` with these values (name to what was typed or chosen).
    pub fn accept(question: &str, values: Map<String, Value>) -> Command {
        Command::Answer {
            question: question.to_owned(),
            reply: Reply::Accept,
            values,
        }
    }
}
