//! What of the space's traffic a person does not need to see (discovery and other
//! machine-to-machine chatter: background items, shown on demand), and how texts are cut
//! into bounded lines.

use serde_json::Value;

/// MCP methods participants call on each other to find out what is there: the one list
/// (the terminal interface and the web page both classify with it, through the view).
pub const DISCOVERY_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "resources/list",
    "resources/templates/list",
    "prompts/list",
    "completion/complete",
    "logging/setLevel",
];

/// Whether an `mcp/request` with this method is chatter between machines.
pub fn is_discovery(method: &str) -> bool {
    DISCOVERY_METHODS.contains(&method) || method.starts_with("notifications/")
}

/// Whether an answer's result is a discovery listing (its request may not have been seen).
pub fn is_listing(result: &Value) -> bool {
    ["tools", "resources", "resourceTemplates", "prompts"]
        .iter()
        .any(|k| result[*k].is_array())
}

/// Lines a renderer shows of an item's body when folded.
pub const FOLDED_LINES: usize = 3;
/// Lines kept of one text at most.
pub const MAX_TEXT_LINES: usize = 400;
/// Characters kept of one line.
const MAX_LINE: usize = 400;
/// A text this long or longer, or of more than one line, goes under its line as a body.
const INLINE: usize = 160;

/// A text as display lines: split on newlines, each cut to a bounded width, at most
/// [`MAX_TEXT_LINES`] of them (then a line saying how many more there were).
pub fn text_lines(text: &str) -> Vec<String> {
    let all: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = all
        .iter()
        .take(MAX_TEXT_LINES)
        .map(|l| {
            let mut s: String = l.chars().take(MAX_LINE).collect();
            if l.chars().count() > MAX_LINE {
                s.push('…');
            }
            s
        })
        .collect();
    if all.len() > MAX_TEXT_LINES {
        out.push(format!(
            "… {} more line(s) not kept",
            all.len() - MAX_TEXT_LINES
        ));
    }
    out
}

/// A heading and a text: one line when the text is short, else the heading with the text
/// under it as a body.
pub(super) fn line_and_body(head: &str, text: &str) -> (String, Vec<String>) {
    let body = text_lines(text);
    if body.len() <= 1 && text.chars().count() <= INLINE {
        let first = body.first().map_or("", String::as_str);
        (format!("{head} {first}"), Vec::new())
    } else {
        (head.to_owned(), body)
    }
}

/// A JSON value as text: strings as they are, short values on one line, longer ones
/// pretty-printed (so that long arguments break into lines that can be folded).
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => {
            let compact = other.to_string();
            if compact.chars().count() <= 120 {
                compact
            } else {
                serde_json::to_string_pretty(other).unwrap_or(compact)
            }
        }
    }
}

/// A value on one line of at most `max` characters.
pub(super) fn short(v: &Value, max: usize) -> String {
    let mut s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.chars().count() > max {
        s = s.chars().take(max.saturating_sub(1)).collect::<String>() + "…";
    }
    s
}

/// A capability as a member list shows it: its kind, and its payload pattern as compact
/// JSON (keys sorted) when it has one: `mcp/request` limited to `tools/list` must not read
/// as "may call anything".
pub fn capability_label(c: &Value) -> String {
    let kind = c["kind"]
        .as_str()
        .map_or_else(|| c["kind"].to_string(), str::to_owned);
    match c.get("payload") {
        Some(p) if !p.is_null() => format!("{kind} {p}"),
        _ => kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn discovery_is_told_apart_and_texts_are_bounded() {
        assert!(is_discovery("tools/list") && is_discovery("notifications/initialized"));
        assert!(!is_discovery("tools/call"));
        assert!(is_listing(&json!({"tools": []})) && !is_listing(&json!({"content": []})));
        let long = (0..1000)
            .map(|i| format!("line {i}"))
            .collect::<Vec<_>>()
            .join("\n");
        let lines = text_lines(&long);
        assert_eq!(lines.len(), MAX_TEXT_LINES + 1);
        assert!(lines.last().unwrap().contains("600 more"));
        assert_eq!(
            text_lines(&"x".repeat(1000))[0].chars().count(),
            MAX_LINE + 1
        );
        assert_eq!(value_text(&json!({"a": 1})), r#"{"a":1}"#);
        let big = json!({"content": "x".repeat(200)});
        assert!(value_text(&big).starts_with("{\n  \"content\""));
        assert_eq!(line_and_body("a:", "b"), ("a: b".to_owned(), vec![]));
        assert_eq!(line_and_body("a:", "b\nc").1, ["b", "c"]);
        assert_eq!(
            capability_label(&json!({"kind": "mcp/request", "payload": {"method": "tools/list"}})),
            r#"mcp/request {"method":"tools/list"}"#
        );
        assert_eq!(capability_label(&json!({"kind": "chat"})), "chat");
    }
}
