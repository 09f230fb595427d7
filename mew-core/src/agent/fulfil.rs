//! `auto_fulfil`: the proposals of others this agent fulfils by itself, the first step of
//! progressive automation (spec 9.4). Patterns are the capability language's, so a rule
//! reads like a capability: `{from: "agent*", to: files, method: tools/call, tool: "read_*"}`.

use super::config::FulfilRule;
use serde_json::Value;

/// The index of the first rule that matches the proposal, if any. `read_only(target, tool)`
/// tells whether that tool was discovered with `annotations.readOnlyHint: true`.
pub(super) fn matching(
    rules: &[FulfilRule],
    from: &str,
    to: &[String],
    payload: &Value,
    read_only: impl Fn(&str, &str) -> bool,
) -> Option<usize> {
    // A proposal must name whom it is for; without one nobody can fulfil it on purpose.
    let [target] = to else { return None };
    let tool = payload
        .get("params")
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str);
    rules.iter().position(|r| {
        r.from.as_ref().is_none_or(|f| f.allows(from, None))
            && r.to.as_ref().is_none_or(|t| t.allows(target, None))
            && r.proposal.allows("mcp/proposal", Some(payload))
            && (!r.read_only || tool.is_some_and(|t| read_only(target, t)))
    })
}

#[cfg(test)]
mod tests {
    use super::super::config::{AgentFile, AgentSettings};
    use super::*;
    use serde_json::json;

    #[test]
    fn rules_match_like_capabilities() {
        let f = AgentFile::from_yaml(
            "auto_fulfil:\n  - {from: 'agent*', to: files, method: tools/call, tool: 'read_*'}\n  - {tool: 'list_*', read_only: true}\n",
        )
        .unwrap();
        let rules = AgentSettings::from_file(&f).unwrap().auto_fulfil;
        let call =
            |name: &str| json!({"method": "tools/call", "params": {"name": name, "arguments": {}}});
        let files = vec!["files".to_owned()];
        let never = |_: &str, _: &str| false;
        assert_eq!(
            matching(&rules, "agent-1", &files, &call("read_file"), never),
            Some(0)
        );
        assert_eq!(
            matching(&rules, "intruder", &files, &call("read_file"), never),
            None
        );
        assert_eq!(
            matching(&rules, "agent-1", &files, &call("write_file"), never),
            None
        );
        assert_eq!(
            matching(&rules, "agent-1", &[], &call("read_file"), never),
            None
        );
        assert_eq!(
            matching(&rules, "x", &files, &call("list_dir"), never),
            None
        );
        assert_eq!(
            matching(&rules, "x", &files, &call("list_dir"), |p, t| p == "files"
                && t == "list_dir"),
            Some(1)
        );
    }
}
