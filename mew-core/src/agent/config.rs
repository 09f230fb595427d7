//! The agent's configuration: the file `mew agent --config` reads (YAML or JSON, the spec's
//! camelCase keys accepted beside snake_case ones), checked as a whole so that every problem
//! is reported at once.
//!
//! ```yaml
//! gateway: ws://localhost:8080          # connection (the program's; env MEW_GATEWAY etc.)
//! space: default
//! token: ${AGENT_TOKEN}
//! participant_id: assistant
//! model: gpt-4o-mini                    # or MEW_MODEL
//! base_url: http://localhost:11434/v1   # or OPENAI_BASE_URL
//! name: assistant
//! reasoning_enabled: true               # reasoning/start, thought, conclusion
//! reasoning_format: native              # native | scratchpad
//! max_iterations: 10
//! conversation_history_length: 10       # earlier turns included (0: none)
//! prompts: {system: "...", reason: "{input}", act: "...", respond: "..."}
//! chat: {respond_to_direct: true, respond_to_mentions: true, respond_to_all: false,
//!        classify: true, confidence_threshold: 0.5, classify_max_tokens: 256,
//!        respond_to_questions: true, max_queue: 32}
//! stream: true                          # ask for server-sent events (falls back)
//! model_reasoning: thoughts             # thoughts | none: where <think> text goes
//! auto_fulfil:                          # proposals of others this agent fulfils
//!   - {from: "*", to: "files", method: tools/call, tool: "read_*", read_only: true}
//! ```

use super::prompt::{
    ACT_VARS, DEFAULT_ACT, DEFAULT_REASON, DEFAULT_RESPOND, DEFAULT_SYSTEM, REASON_VARS,
    RESPOND_VARS, SYSTEM_VARS, Template,
};
use crate::capability::{Capability, CapabilitySet};
use crate::participant::ParticipantConfig;
use serde::Deserialize;
use serde_json::json;
use std::fmt;
use std::time::Duration;

/// How earlier steps are shown to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningFormat {
    /// The API's own tool-call messages.
    #[default]
    Native,
    /// A text record of thoughts, actions and observations; replies parsed from text.
    Scratchpad,
}

/// Where the model's private reasoning (`<think>` text, `reasoning_content`) goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelReasoning {
    /// Into `reasoning/thought` envelopes (when `reasoning_enabled`).
    #[default]
    Thoughts,
    /// Nowhere.
    None,
}

/// The file's `prompts` section, as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PromptsFile {
    /// System prompt.
    pub system: Option<String>,
    /// First user turn of a task.
    pub reason: Option<String>,
    /// Scratchpad turn after observations.
    pub act: Option<String>,
    /// Last call when the step budget is spent.
    pub respond: Option<String>,
}

/// The file's `chat` section: when to answer a chat.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ChatStrategy {
    /// Answer chats whose `to` names the agent.
    #[serde(alias = "respondToDirect")]
    pub respond_to_direct: bool,
    /// Answer chats that mention the agent's id or name.
    #[serde(alias = "respondToMentions")]
    pub respond_to_mentions: bool,
    /// Answer every chat to everyone (not a reply to another chat): for a space of one
    /// person and their agent.
    #[serde(alias = "respondToAll")]
    pub respond_to_all: bool,
    /// Ask the model whether to answer other chats (the reference's strategy).
    pub classify: bool,
    /// Least confidence of the model's "respond" verdict.
    #[serde(alias = "confidenceThreshold")]
    pub confidence_threshold: f64,
    /// Reply length limit of the classification call.
    #[serde(alias = "classifyMaxTokens")]
    pub classify_max_tokens: u32,
    /// When classification is off or fails: answer chats that ask a question (`?`).
    #[serde(alias = "respondToQuestions")]
    pub respond_to_questions: bool,
    /// Chats waiting while the agent is busy or paused; the oldest is dropped beyond it.
    #[serde(alias = "maxQueue")]
    pub max_queue: usize,
    /// Answers to one participant per minute at most (a guard against agent loops).
    #[serde(alias = "maxRepliesPerMinute")]
    pub max_replies_per_minute: u32,
}

impl Default for ChatStrategy {
    fn default() -> Self {
        ChatStrategy {
            respond_to_direct: true,
            respond_to_mentions: true,
            respond_to_all: false,
            classify: true,
            confidence_threshold: 0.5,
            classify_max_tokens: 256,
            respond_to_questions: true,
            max_queue: 32,
            max_replies_per_minute: 20,
        }
    }
}

/// One `auto_fulfil` rule as written; every field is a pattern of the capability language
/// (globs, `!P`, `/re/`), absent fields match anything.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FulfilRuleFile {
    /// The proposer.
    pub from: Option<String>,
    /// The participant the proposal is for.
    pub to: Option<String>,
    /// The JSON-RPC method.
    pub method: Option<String>,
    /// `params.name` (the tool).
    pub tool: Option<String>,
    /// Only tools whose discovered annotations say `readOnlyHint: true`.
    #[serde(default)]
    pub read_only: bool,
}

/// A compiled `auto_fulfil` rule.
#[derive(Debug, Clone)]
pub struct FulfilRule {
    pub(super) from: Option<CapabilitySet>,
    pub(super) to: Option<CapabilitySet>,
    /// `mcp/proposal` with the method and tool patterns as a payload pattern.
    pub(super) proposal: CapabilitySet,
    pub(super) read_only: bool,
}

/// The configuration file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct AgentFile {
    /// Gateway URL.
    pub gateway: Option<String>,
    /// Space id.
    pub space: Option<String>,
    /// Token.
    pub token: Option<String>,
    /// Participant id.
    #[serde(alias = "participantId", alias = "id")]
    pub participant_id: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// API base URL.
    #[serde(alias = "baseURL", alias = "baseUrl")]
    pub base_url: Option<String>,
    /// API key (better from the environment).
    #[serde(alias = "apiKey")]
    pub api_key: Option<String>,
    /// Name the agent goes by in prompts and mentions.
    pub name: Option<String>,
    /// System prompt (same as `prompts.system`).
    #[serde(alias = "systemPrompt")]
    pub system_prompt: Option<String>,
    /// Emit reasoning envelopes.
    #[serde(alias = "reasoningEnabled", alias = "thinkingEnabled")]
    pub reasoning_enabled: Option<bool>,
    /// Answer chats at all.
    #[serde(alias = "autoRespond")]
    pub auto_respond: Option<bool>,
    /// Steps per task.
    #[serde(alias = "maxIterations")]
    pub max_iterations: Option<u32>,
    /// How steps are shown to the model.
    #[serde(alias = "reasoningFormat")]
    pub reasoning_format: Option<ReasoningFormat>,
    /// Earlier messages included.
    #[serde(alias = "conversationHistoryLength")]
    pub conversation_history_length: Option<usize>,
    /// Prompt overrides.
    pub prompts: PromptsFile,
    /// Chat strategy.
    pub chat: ChatStrategy,
    /// Mirror thoughts into a stream (`stream/request`) while reasoning.
    pub stream_reasoning: bool,
    /// Ask the model server for a stream (`stream: true`; default on). A server that
    /// refuses gets plain requests from then on.
    pub stream: Option<bool>,
    /// Where the model's private reasoning goes (`thoughts`, the default, or `none`).
    #[serde(alias = "modelReasoning")]
    pub model_reasoning: ModelReasoning,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Reply length limit.
    pub max_tokens: Option<u32>,
    /// The model's context window in tokens (0: unknown; no automatic compaction).
    pub context_window: u64,
    /// How long a task waits for tool discoveries in progress, in ms (default 2000: a
    /// participant that never answers `tools/list` delays a task by this much at most).
    pub discovery_wait_ms: Option<u64>,
    /// Deadline of one model call, in ms.
    pub model_timeout_ms: Option<u64>,
    /// Retries of a model call on 429, 5xx and connection errors.
    pub model_retries: Option<u32>,
    /// Deadline of a tool call (direct request), in ms.
    pub tool_timeout_ms: Option<u64>,
    /// Deadline of a proposal before it is withdrawn, in ms.
    pub proposal_timeout_ms: Option<u64>,
    /// Never wait for approval: a tool call that would need a proposal fails at once.
    pub headless: bool,
    /// Proposals of others to fulfil.
    pub auto_fulfil: Vec<FulfilRuleFile>,
    /// Discover other participants' tools (on for agents).
    pub discovery: Option<bool>,
    /// Headless runs (tools-mode calls) going at once at most (default 8).
    #[serde(alias = "maxRuns")]
    pub max_runs: Option<usize>,
    /// Tools mode: the agent's name, version, description and the tools it serves, as
    /// written (checked by `mew_core::tools`).
    pub metadata: Option<serde_json::Value>,
}

/// Everything the agent core needs besides its participant configuration.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// Name in prompts and mentions (the participant id when unset).
    pub name: Option<String>,
    /// Model name.
    pub model: String,
    /// Emit reasoning envelopes.
    pub reasoning_enabled: bool,
    /// Answer chats at all.
    pub auto_respond: bool,
    /// Model calls that may ask for tools, per task.
    pub max_iterations: u32,
    /// How steps are shown.
    pub format: ReasoningFormat,
    /// Earlier messages included.
    pub history_length: usize,
    /// System prompt.
    pub system: Template,
    /// First user turn.
    pub reason: Template,
    /// Scratchpad continuation.
    pub act: Template,
    /// Final call when steps run out.
    pub respond: Template,
    /// When to answer.
    pub chat: ChatStrategy,
    /// Mirror thoughts into a stream.
    pub stream_reasoning: bool,
    /// Ask the model server for a stream.
    pub stream: bool,
    /// Where the model's private reasoning goes.
    pub model_reasoning: ModelReasoning,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Reply length limit.
    pub max_tokens: Option<u32>,
    /// Context window (0: unknown).
    pub context_window: u64,
    /// Wait for discoveries before a task's first step.
    pub discovery_wait: Duration,
    /// Deadline of one model call (the driver enforces it).
    pub model_timeout: Duration,
    /// Retries of a model call.
    pub model_retries: u32,
    /// First retry delay (doubled per retry, jittered by up to 20%).
    pub retry_base: Duration,
    /// Longest wait between retries (a larger `Retry-After` is capped to it).
    pub retry_cap: Duration,
    /// Fail tool calls that would need approval instead of proposing.
    pub headless: bool,
    /// Proposals to fulfil.
    pub auto_fulfil: Vec<FulfilRule>,
    /// Discover other participants' tools (the agent switches its participant's discovery
    /// on unless this is off).
    pub discovery: bool,
    /// Headless runs at once at most.
    pub max_runs: usize,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings::from_file(&AgentFile::default()).expect("the defaults are valid")
    }
}

/// Every problem of a configuration, one per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfigError(pub Vec<String>);

impl fmt::Display for AgentConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

impl std::error::Error for AgentConfigError {}

/// Default model when neither the file nor `MEW_MODEL` names one.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";

impl AgentFile {
    /// Reads YAML (JSON is YAML too).
    pub fn from_yaml(text: &str) -> Result<AgentFile, AgentConfigError> {
        if text.trim().is_empty() {
            return Ok(AgentFile::default());
        }
        serde_norway::from_str(text).map_err(|e| AgentConfigError(vec![e.to_string()]))
    }
}

fn glob_set(pattern: &str, loc: &str, errors: &mut Vec<String>) -> Option<CapabilitySet> {
    match Capability::compile(json!({ "kind": pattern })) {
        Ok(c) => Some(CapabilitySet::from_capabilities(vec![c])),
        Err(e) => {
            errors.push(format!("{loc}: {}", e.reason));
            None
        }
    }
}

impl AgentSettings {
    /// Checks and compiles the file's settings.
    pub fn from_file(f: &AgentFile) -> Result<AgentSettings, AgentConfigError> {
        let mut errors = Vec::new();
        let mut template =
            |src: Option<&str>, default: &str, vars: &[&str], loc: &str| match Template::parse(
                src.unwrap_or(default),
                vars,
            ) {
                Ok(t) => t,
                Err(e) => {
                    errors.push(format!("{loc}: {e}"));
                    Template::parse(default, vars).expect("default templates parse")
                }
            };
        let system_src = f.prompts.system.as_deref().or(f.system_prompt.as_deref());
        let system = template(system_src, DEFAULT_SYSTEM, SYSTEM_VARS, "prompts.system");
        let reason = template(
            f.prompts.reason.as_deref(),
            DEFAULT_REASON,
            REASON_VARS,
            "prompts.reason",
        );
        let act = template(
            f.prompts.act.as_deref(),
            DEFAULT_ACT,
            ACT_VARS,
            "prompts.act",
        );
        let respond = template(
            f.prompts.respond.as_deref(),
            DEFAULT_RESPOND,
            RESPOND_VARS,
            "prompts.respond",
        );
        let max_iterations = f.max_iterations.unwrap_or(10);
        if max_iterations == 0 {
            errors.push("max_iterations: must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&f.chat.confidence_threshold) {
            errors.push("chat.confidence_threshold: must be between 0 and 1".into());
        }
        if f.max_runs == Some(0) {
            errors.push("max_runs: must be at least 1".into());
        }
        if f.chat.max_queue == 0 {
            errors.push("chat.max_queue: must be at least 1".into());
        }
        let mut auto_fulfil = Vec::new();
        for (i, r) in f.auto_fulfil.iter().enumerate() {
            let loc = format!("auto_fulfil[{i}]");
            let from = r
                .from
                .as_deref()
                .and_then(|p| glob_set(p, &format!("{loc}.from"), &mut errors));
            let to =
                r.to.as_deref()
                    .and_then(|p| glob_set(p, &format!("{loc}.to"), &mut errors));
            let mut payload = serde_json::Map::new();
            if let Some(m) = &r.method {
                payload.insert("method".into(), json!(m));
            }
            if let Some(t) = &r.tool {
                payload.insert("params".into(), json!({ "name": t }));
            }
            match Capability::compile(json!({"kind": "mcp/proposal", "payload": payload})) {
                Ok(c) => auto_fulfil.push(FulfilRule {
                    from,
                    to,
                    proposal: CapabilitySet::from_capabilities(vec![c]),
                    read_only: r.read_only,
                }),
                Err(e) => errors.push(format!("{loc}: {}", e.reason)),
            }
        }
        if !errors.is_empty() {
            return Err(AgentConfigError(errors));
        }
        Ok(AgentSettings {
            name: f.name.clone(),
            model: f.model.clone().unwrap_or_else(|| DEFAULT_MODEL.into()),
            reasoning_enabled: f.reasoning_enabled.unwrap_or(true),
            auto_respond: f.auto_respond.unwrap_or(true),
            max_iterations,
            format: f.reasoning_format.unwrap_or_default(),
            history_length: f.conversation_history_length.unwrap_or(0),
            system,
            reason,
            act,
            respond,
            chat: f.chat.clone(),
            stream_reasoning: f.stream_reasoning,
            stream: f.stream.unwrap_or(true),
            model_reasoning: f.model_reasoning,
            temperature: f.temperature,
            max_tokens: f.max_tokens,
            context_window: f.context_window,
            discovery_wait: Duration::from_millis(f.discovery_wait_ms.unwrap_or(2_000)),
            model_timeout: Duration::from_millis(f.model_timeout_ms.unwrap_or(120_000)),
            model_retries: f.model_retries.unwrap_or(3),
            retry_base: Duration::from_secs(1),
            retry_cap: Duration::from_secs(60),
            headless: f.headless,
            auto_fulfil,
            discovery: f.discovery.unwrap_or(true),
            max_runs: f.max_runs.unwrap_or(8),
        })
    }
}

/// A whole agent configuration: its participant and its settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The participant it runs as (discovery is switched on by the agent).
    pub participant: ParticipantConfig,
    /// Agent settings.
    pub settings: AgentSettings,
    /// Tools mode: the tools it serves (from the file's `metadata`).
    pub tools: Option<crate::tools::ToolSet>,
    /// Tools mode: serve MCP on stdio.
    pub mcp_stdio: bool,
    /// Join the space of `participant` (off for an MCP server with no space).
    pub join_space: bool,
}

impl AgentConfig {
    /// An agent that joins its space, with no tools of its own.
    pub fn new(participant: ParticipantConfig, settings: AgentSettings) -> AgentConfig {
        AgentConfig {
            participant,
            settings,
            tools: None,
            mcp_stdio: false,
            join_space: true,
        }
    }

    /// Applies the file's timeouts and context window to a participant configuration.
    pub fn apply_timeouts(participant: &mut ParticipantConfig, f: &AgentFile) {
        if let Some(ms) = f.tool_timeout_ms {
            participant.request_timeout = Duration::from_millis(ms);
        }
        if let Some(ms) = f.proposal_timeout_ms {
            participant.proposal_timeout = Duration::from_millis(ms);
        }
        participant.context.max_tokens = f.context_window;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_spellings_and_reports_every_problem() {
        let f = AgentFile::from_yaml(
            "systemPrompt: 'Hi {name}'\nmaxIterations: 3\nreasoningFormat: scratchpad\nchat: {classify: true}\nauto_fulfil: [{tool: 'read_*', read_only: true}]\n",
        )
        .unwrap();
        let s = AgentSettings::from_file(&f).unwrap();
        assert_eq!(s.max_iterations, 3);
        assert_eq!(s.format, ReasoningFormat::Scratchpad);
        assert!(s.chat.classify && s.chat.respond_to_direct && !s.chat.respond_to_all);
        assert!(s.stream && s.model_reasoning == ModelReasoning::Thoughts);
        assert_eq!(s.system.fill(|_| Some("bob".into())), "Hi bob");
        assert_eq!(s.auto_fulfil.len(), 1);
        let bad = AgentFile::from_yaml(
            "max_iterations: 0\nprompts: {reason: '{inptu}', act: '{'}\nchat: {confidence_threshold: 2}\nauto_fulfil: [{from: '{a,b'}]\n",
        )
        .unwrap();
        let e = AgentSettings::from_file(&bad).unwrap_err();
        assert_eq!(e.0.len(), 5, "{e}");
        assert!(
            e.0[0].starts_with("prompts.reason: unknown placeholder `{inptu}`"),
            "{e}"
        );
        assert!(
            e.0.iter().any(|l| l.starts_with("auto_fulfil[0].from")),
            "{e}"
        );
        let unknown = AgentFile::from_yaml("prompts: {sytem: x}\n").unwrap_err();
        assert!(unknown.to_string().contains("sytem"), "{unknown}");
        assert!(AgentFile::from_yaml("max_iterations: many").is_err());
    }
}
