//! What of the space's traffic a person does not need to see: discovery and other
//! machine-to-machine chatter (folded away, counted, shown with `/verbose`), and how long
//! texts are cut to a few lines (Ctrl-O expands them).

use serde_json::Value;

/// Methods that participants call on each other to find out what is there.
const DISCOVERY: &[&str] = &[
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
    DISCOVERY.contains(&method) || method.starts_with("notifications/")
}

/// Whether an answer's result is a discovery listing (its request may not have been seen).
pub fn is_listing(result: &Value) -> bool {
    ["tools", "resources", "resourceTemplates", "prompts"]
        .iter()
        .any(|k| result[*k].is_array())
}

/// Lines shown of a long text when folded.
pub const FOLDED_LINES: usize = 3;
/// Lines kept of one text at most, expanded.
pub const MAX_TEXT_LINES: usize = 400;
/// Characters kept of one line.
const MAX_LINE: usize = 400;

/// A text as display lines: split on newlines, each cut to a bounded width, at most
/// [`MAX_TEXT_LINES`] of them (then a line saying how many more there were).
pub fn text_lines(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let all: Vec<&str> = text.lines().collect();
    for l in all.iter().take(MAX_TEXT_LINES) {
        let mut s: String = l.chars().take(MAX_LINE).collect();
        if l.chars().count() > MAX_LINE {
            s.push('…');
        }
        out.push(s);
    }
    if all.len() > MAX_TEXT_LINES {
        out.push(format!(
            "… {} more line(s) not kept",
            all.len() - MAX_TEXT_LINES
        ));
    }
    out
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
    }
}
