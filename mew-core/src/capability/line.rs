//! One line of the `capcheck` tool's input, checked.

use super::{Capability, CapabilitySet};
use serde_json::Value;

/// Checks one JSON line `{"capability": {...}, "message": {...}}` or
/// `{"capabilities": [...], "message": {...}}` and answers `true`, `false`, or
/// `error: <reason>` (invalid line or pattern). The message needs a string `kind`; its
/// `payload` is optional.
pub fn check_line(line: &str) -> String {
    match check(line) {
        Ok(b) => b.to_string(),
        // One answer per line, whatever the reason contains.
        Err(e) => format!("error: {}", e.replace(['\n', '\r'], " ")),
    }
}

fn check(line: &str) -> Result<bool, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
    let obj = v.as_object().ok_or("a line must be a JSON object")?;
    let set = match (obj.get("capability"), obj.get("capabilities")) {
        (Some(c), None) => CapabilitySet::from_capabilities(vec![
            Capability::compile(c.clone()).map_err(|e| e.to_string())?,
        ]),
        (None, Some(Value::Array(list))) => {
            CapabilitySet::compile(list).map_err(|e| e.to_string())?
        }
        (None, Some(_)) => return Err("`capabilities` must be an array".into()),
        _ => return Err("expected exactly one of `capability` or `capabilities`".into()),
    };
    let msg = obj
        .get("message")
        .and_then(Value::as_object)
        .ok_or("missing `message` object")?;
    let kind = msg
        .get("kind")
        .and_then(Value::as_str)
        .ok_or("the message needs a string `kind`")?;
    // A JSON `null` payload is an absent payload, as when parsing an envelope.
    let payload = msg.get("payload").filter(|p| !p.is_null());
    Ok(set.allows(kind, payload))
}

#[cfg(test)]
mod tests {
    use super::check_line;

    #[test]
    fn answers() {
        assert_eq!(
            check_line(r#"{"capability":{"kind":"mcp/*"},"message":{"kind":"mcp/request"}}"#),
            "true"
        );
        assert_eq!(
            check_line(r#"{"capabilities":[{"kind":"chat"}],"message":{"kind":"mcp/request"}}"#),
            "false"
        );
        assert_eq!(
            check_line(
                r#"{"capability":{"kind":"x","payload":{"m":"!a"}},"message":{"kind":"x","payload":null}}"#
            ),
            "false"
        );
    }

    #[test]
    fn errors() {
        for (line, want) in [
            ("not json", "error: invalid JSON"),
            ("[]", "error: a line must be"),
            (r#"{"message":{"kind":"x"}}"#, "error: expected exactly one"),
            (
                r#"{"capability":{"kind":"!"},"message":{"kind":"x"}}"#,
                "error: invalid capability: kind: `!` alone",
            ),
            (
                r#"{"capabilities":[{"kind":"a"},{"kind":"/(/"}],"message":{"kind":"x"}}"#,
                "error: invalid capability #1",
            ),
            (r#"{"capability":{"kind":"x"}}"#, "error: missing `message`"),
            (
                r#"{"capability":{"kind":"x"},"message":{"kind":5}}"#,
                "error: the message needs",
            ),
        ] {
            let got = check_line(line);
            assert!(got.starts_with(want), "{line} -> {got}");
        }
    }
}
