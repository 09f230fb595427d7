//! Space configurations the scenario tests share.

/// A space with a trusted human, a proposal-only agent, a service that may grant chat
/// access onwards, and a virtual participant logging to a file.
pub const SPACE: &str = r#"
space: {id: test-space, name: Test space}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  agent:
    tokens: [agent-token]
    capabilities:
      - {kind: mcp/proposal}
      - {kind: chat}
      - {kind: chat/acknowledge}
      - {kind: capability/grant-ack}
      - {kind: stream/request}
      - {kind: stream/close}
  service:
    tokens: [service-token]
    capabilities:
      - {kind: mcp/response}
      - {kind: chat}
      - {kind: capability/grant}
  log: {tokens: [log-token], output_log: logs/log.jsonl, auto_connect: true, capabilities: [{kind: chat}]}
defaults: {capabilities: [{kind: chat}]}
"#;

/// [`SPACE`] with extra `gateway:` options appended (indented YAML mapping body).
pub fn space_with(options: &str) -> String {
    format!("{SPACE}gateway:\n{options}\n")
}
