//! The space configuration: `space.yaml` as the reference reads it, plus mew-rs options.
//!
//! ```yaml
//! space: {id: my-space, name: My space, description: ...}
//! participants:
//!   human: {tokens: [human-token], capabilities: [{kind: "*"}]}
//!   files: {type: mcp-bridge, mcp_server: {command: npx, args: [...]}, ...}
//! defaults: {capabilities: [{kind: chat}]}
//! logging: {enabled: true, envelope_history: true, capability_decisions: true}
//! # mew-rs only (the reference ignores this section); every key is optional.
//! gateway:
//!   anonymous_joins: false      # clients without a known token may pick an id
//!   delivery: all               # `all` (everyone observes everything) or `addressed`
//!   max_frame_bytes: 1048576
//!   max_depth: 127             # serde_json's own ceiling; lower values are honoured
//!   join_timeout_ms: 10000
//!   heartbeat_interval_ms: 30000
//!   idle_timeout_ms: 90000
//!   max_queue_frames: 4096      # per connection, handed out but not yet written
//!   max_queue_bytes: 16777216
//!   history_size: 1000          # envelopes kept for HTTP polling
//!   history_bytes: 16777216     # ... and their bytes at most
//!   max_streams: 1024           # open streams in the space
//!   max_grants_per_participant: 256
//!   max_participants: 10000     # members at most, invited and anonymous included
//!   rate_limit: {per_second: 1000, burst: 2000, bytes_per_second: 8388608,
//!                burst_bytes: 16777216}   # per participant; `rate_limit: off` disables
//!   tls: {cert: tls/cert.pem, key: tls/key.pem}   # relative to this file; wss:// and https://
//!   limits: {max_connections: 10000, max_connections_per_address: 1000,
//!            max_unauthenticated: 1024}
//!   trusted_proxies: [127.0.0.1/32]   # only these may say who the client is (X-Forwarded-For)
//!   auth:
//!     jwt: {issuer: https://idp.example, audience: mew, jwks_file: jwks.json,
//!           jwks_url: https://idp.example/jwks.json, allow_unknown_subjects: false}
//!   durability: {fsync: always} # or {fsync: {every_ms: 100}}; `durability: off` keeps no
//!                               # state on disk (see docs/durability.md)
//! ```
//! `mew:` is accepted as a synonym of `gateway:`.

use crate::capability::{Capability, CapabilitySet};
use crate::envelope::Limits;
use serde_json::Value;
use serde_yaml::Value as Yaml;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// How envelopes are fanned out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeliveryMode {
    /// Every participant observes every envelope, the sender included (the reference).
    #[default]
    All,
    /// Strict routing: a broadcast goes to everyone but the sender, a directed envelope
    /// only to the participants its `to` names.
    Addressed,
}

/// What kind of participant a config entry describes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ParticipantType {
    /// A participant that connects on its own (human, agent, script).
    #[default]
    Standard,
    /// An MCP server behind a bridge (`type: mcp-bridge`).
    McpBridge,
    /// A process the space starts from `command`/`args`/`env` (`type: local`): the
    /// reference's agents and scripts.
    Local,
    /// An LLM agent the space starts as `mew agent` (`type: agent`), configured by the file
    /// `agent_config` names (relative to the folder of `space.yaml`).
    Agent,
}

/// `restart_policy` of a started participant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestartPolicy {
    /// Never restarted (`no`, the default).
    #[default]
    Never,
    /// Restarted when it exits with a failure (`on-failure`).
    OnFailure,
    /// Restarted whenever it exits (`always`).
    Always,
}

/// `mcp_server` of an `mcp-bridge` participant.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct McpServerConfig {
    /// Program to run.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Working directory.
    pub cwd: Option<String>,
}

/// `bridge_config` of an `mcp-bridge` participant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeSettings {
    /// How long the MCP server may take to initialise, in ms (default 30000).
    pub init_timeout_ms: u64,
    /// Restart the server when it exits.
    pub reconnect: bool,
    /// How many restarts at most.
    pub max_reconnects: u32,
}

impl Default for BridgeSettings {
    fn default() -> Self {
        BridgeSettings {
            init_timeout_ms: 30_000,
            reconnect: true,
            max_reconnects: 3,
        }
    }
}

/// One `participants.<id>` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ParticipantEntry {
    /// The participant id (the map key).
    pub id: String,
    /// `type`.
    pub kind: ParticipantType,
    /// Tokens that authenticate as this participant (after [`SpaceConfig::resolve_tokens`]).
    pub tokens: Vec<String>,
    /// Static capabilities (`defaults.capabilities` when the entry has none).
    pub capabilities: CapabilitySet,
    /// Whether the entry listed its own capabilities.
    pub explicit_capabilities: bool,
    /// Start `command` with the space.
    pub auto_start: bool,
    /// Program for `auto_start`.
    pub command: Option<String>,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its extra environment.
    pub env: BTreeMap<String, String>,
    /// Append every envelope delivered to this participant to this file.
    pub output_log: Option<String>,
    /// With `output_log`: the gateway holds this participant's membership itself.
    pub auto_connect: bool,
    /// `mcp_server` (bridges).
    pub mcp_server: Option<McpServerConfig>,
    /// `bridge_config` (bridges).
    pub bridge_config: Option<BridgeSettings>,
    /// `restart_policy` of a started process.
    pub restart_policy: RestartPolicy,
    /// `default_to`: whom the reference's interactive client addresses by default.
    pub default_to: Vec<String>,
    /// `fifo` (the reference CLI's FIFO-driven participants; kept, not used by the gateway).
    pub fifo: bool,
    /// `io` (the reference CLI's I/O mode for `type: local`; kept, not used by the gateway).
    pub io: Option<String>,
    /// `agent_config` (`type: agent`): the agent's configuration file.
    pub agent_config: Option<String>,
}

impl ParticipantEntry {
    /// A standard participant with these capabilities and tokens.
    pub fn new(id: &str, tokens: Vec<String>, capabilities: CapabilitySet) -> Self {
        ParticipantEntry {
            id: id.to_owned(),
            kind: ParticipantType::Standard,
            tokens,
            capabilities,
            explicit_capabilities: true,
            auto_start: false,
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            output_log: None,
            auto_connect: false,
            mcp_server: None,
            bridge_config: None,
            restart_policy: RestartPolicy::Never,
            default_to: Vec::new(),
            fifo: false,
            io: None,
            agent_config: None,
        }
    }

    /// Whether the space starts a process for this participant (`auto_start` with something
    /// to run: a bridge's `mcp_server`, or a `command`).
    pub fn is_started(&self) -> bool {
        self.auto_start
            && match self.kind {
                ParticipantType::McpBridge => self.mcp_server.is_some(),
                ParticipantType::Agent => true,
                _ => self.command.is_some(),
            }
    }

    /// Whether the gateway itself holds this participant's membership (`output_log` and
    /// `auto_connect: true`).
    pub fn is_virtual(&self) -> bool {
        self.output_log.is_some() && self.auto_connect
    }
}

/// The `logging` switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggingConfig {
    /// Master switch.
    pub enabled: bool,
    /// `envelope-history.jsonl` records.
    pub envelope_history: bool,
    /// `capability-decisions.jsonl` records.
    pub capability_decisions: bool,
    /// A log file is rotated once it grows past this (`max_file_mb`, default 32 MB).
    pub max_file_bytes: u64,
    /// Rotated files kept per log (`max_files`, default 4): with two audit logs, a busy space
    /// keeps at most 2 x 5 x 32 MB by default.
    pub keep_files: u32,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            enabled: true,
            envelope_history: true,
            capability_decisions: true,
            max_file_bytes: 32 * 1024 * 1024,
            keep_files: 4,
        }
    }
}

impl LoggingConfig {
    /// Everything off.
    pub const OFF: LoggingConfig = LoggingConfig {
        enabled: false,
        envelope_history: false,
        capability_decisions: false,
        max_file_bytes: 32 * 1024 * 1024,
        keep_files: 4,
    };
}

/// mew-rs options (`gateway:` section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayOptions {
    /// Let clients without a known token join under an id of their choice with
    /// `defaults.capabilities`.
    pub anonymous_joins: bool,
    /// Fan-out rule.
    pub delivery: DeliveryMode,
    /// Frame size and JSON depth limits.
    pub limits: Limits,
    /// How long a connection may stay unauthenticated.
    pub join_timeout: Duration,
    /// Interval between pings to each connection.
    pub heartbeat_interval: Duration,
    /// A connection silent for longer than this is closed.
    pub idle_timeout: Duration,
    /// Frames handed to a connection but not yet reported written, before it is closed.
    pub max_queue_frames: usize,
    /// Bytes handed to a connection but not yet reported written, before it is closed.
    pub max_queue_bytes: usize,
    /// Envelopes kept for `GET /participants/{id}/messages`.
    pub history_size: usize,
    /// Bytes of those envelopes at most (the oldest go first).
    pub history_bytes: usize,
    /// Open streams in the space at most.
    pub max_streams: usize,
    /// Runtime grants one participant may hold at most.
    pub max_grants_per_participant: usize,
    /// Members the space holds at most (configured ones always fit; invites and anonymous
    /// joins beyond it are refused).
    pub max_participants: usize,
    /// Envelopes and bytes per second per participant (`None`: unlimited).
    pub rate_limit: Option<super::rate::RateLimit>,
    /// `tls`: the certificate and key the driver serves TLS with (paths as written).
    pub tls: Option<TlsConfig>,
    /// `limits`: connection counts the driver enforces before anything reaches the core.
    pub connections: ConnectionLimits,
    /// `trusted_proxies`: networks (CIDR, or a bare address) whose `X-Forwarded-For` or
    /// `Forwarded` header the driver believes.
    pub trusted_proxies: Vec<String>,
    /// `auth.jwt`: bearer tokens that are JWTs from an identity provider.
    pub jwt: Option<JwtConfig>,
    /// Whether and how a single-node gateway keeps the space's state on disk (`None`: it
    /// keeps none). Not part of the space's state: changing it never invalidates a snapshot.
    pub durability: Option<Fsync>,
}

/// `gateway.tls`: paths as written in `space.yaml` (the driver resolves them against the
/// file's folder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert: String,
    /// PEM private key.
    pub key: String,
}

/// `gateway.limits`: how many connections the server holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections at most (WebSocket and HTTP together).
    pub max_connections: usize,
    /// Open connections from one client address at most.
    pub max_connections_per_address: usize,
    /// Connections that have not yet sent a complete request head, at most.
    pub max_unauthenticated: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 10_000,
            max_connections_per_address: 1_000,
            max_unauthenticated: 1_024,
        }
    }
}

/// `gateway.auth.jwt`: who issues identities and where its keys are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtConfig {
    /// The `iss` a token must carry.
    pub issuer: String,
    /// The `aud` a token must carry (one of its audiences).
    pub audience: String,
    /// A JWK set in a file (relative to `space.yaml`).
    pub jwks_file: Option<String>,
    /// A JWK set at a URL, fetched and refreshed by the driver.
    pub jwks_url: Option<String>,
    /// Subjects without an entry join with `defaults.capabilities`.
    pub allow_unknown_subjects: bool,
}

/// When a durable space's state files are flushed to the disk (`fsync`). Every change is
/// written to the file before its outputs leave, so a killed process loses nothing; the
/// policy decides what a power loss or a kernel crash may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fsync {
    /// Each batch of inputs is on the disk before any of its outputs (acknowledgements
    /// included) leave.
    Always,
    /// At most this many milliseconds of acknowledged changes may be lost to a power loss.
    EveryMs(u64),
}

impl Default for GatewayOptions {
    fn default() -> Self {
        GatewayOptions {
            anonymous_joins: false,
            delivery: DeliveryMode::All,
            limits: Limits::default(),
            join_timeout: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(90),
            max_queue_frames: 4096,
            max_queue_bytes: 16 * 1024 * 1024,
            history_size: 1000,
            history_bytes: 16 * 1024 * 1024,
            max_streams: 1024,
            max_grants_per_participant: 256,
            max_participants: 10_000,
            rate_limit: Some(super::rate::RateLimit::default()),
            tls: None,
            connections: ConnectionLimits::default(),
            trusted_proxies: Vec::new(),
            jwt: None,
            durability: Some(Fsync::Always),
        }
    }
}

/// A whole space configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct SpaceConfig {
    /// `space.id`.
    pub id: String,
    /// `space.name`.
    pub name: Option<String>,
    /// `space.description`.
    pub description: Option<String>,
    /// Participants in file order.
    pub participants: Vec<ParticipantEntry>,
    /// `defaults.capabilities`: for entries without their own and for anonymous joins.
    pub default_capabilities: CapabilitySet,
    /// `logging`.
    pub logging: LoggingConfig,
    /// `gateway:` options.
    pub gateway: GatewayOptions,
    /// Keys this implementation does not use: ignored, reported here so the driver can log
    /// them (a near miss of a known key is flagged as a likely misspelling).
    pub warnings: Vec<ConfigWarning>,
}

/// A key of `space.yaml` that was ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// Dotted path of the key.
    pub location: String,
    /// The known key it resembles, when it looks misspelt.
    pub did_you_mean: Option<&'static str>,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.did_you_mean {
            Some(k) => write!(
                f,
                "{}: unknown key, ignored (did you mean `{k}`?)",
                self.location
            ),
            None => write!(f, "{}: not used by this gateway, ignored", self.location),
        }
    }
}

/// One problem found in a configuration, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted path, e.g. `participants.agent.capabilities[1]`.
    pub location: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.location.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.location, self.message)
        }
    }
}

/// Every problem found in a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// A token [`SpaceConfig::resolve_tokens`] generated; the driver stores it in
/// `.mew/tokens/<participant>.token` (mode 0600).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedToken {
    /// Whose token.
    pub participant: String,
    /// The token.
    pub token: String,
}

/// Length of generated tokens.
pub const TOKEN_LEN: usize = 32;

/// The environment variable the reference reads a participant's token from.
pub fn token_env_var(participant: &str) -> String {
    let mut s = String::from("MEW_TOKEN_");
    s.extend(participant.chars().map(|c| {
        if c == '-' {
            '_'
        } else {
            c.to_ascii_uppercase()
        }
    }));
    s
}

impl SpaceConfig {
    /// Parses and validates `space.yaml` text, reporting every problem found.
    pub fn from_yaml(text: &str) -> Result<SpaceConfig, ConfigErrors> {
        let root: Yaml = serde_yaml::from_str(text).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                location: e
                    .location()
                    .map(|l| format!("line {} column {}", l.line(), l.column()))
                    .unwrap_or_default(),
                message: format!("invalid YAML: {e}"),
            }])
        })?;
        let mut cx = Cx::default();
        let mut cfg = cx.space(&root);
        cfg.warnings = cx.warnings;
        if cx.errors.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigErrors(cx.errors))
        }
    }

    /// The space `mew gateway` runs without a config: `human` may do anything, `agent` may
    /// only propose (plus chat, reasoning, the acknowledgements and withdrawals it needs, and
    /// `tools/list` requests so that it can discover what to propose), `service`
    /// answers MCP requests and chats. Tokens come from `ids`.
    pub fn default_space(tokens: &mut dyn crate::secret::TokenSource) -> SpaceConfig {
        let caps = |kinds: &[&str]| {
            CapabilitySet::from_capabilities(
                kinds
                    .iter()
                    .map(|k| {
                        Capability::compile(serde_json::json!({ "kind": k }))
                            .expect("built-in capability compiles")
                    })
                    .collect(),
            )
        };
        let human = ParticipantEntry::new("human", vec![tokens.token()], caps(&["*"]));
        let mut agent_caps = caps(&[
            "mcp/proposal",
            "mcp/withdraw",
            "chat",
            "chat/acknowledge",
            "chat/cancel",
            "capability/grant-ack",
            "participant/status",
            "reasoning/*",
        ]);
        // Listing tools changes nothing, and an agent that cannot see the tools cannot
        // propose calls to them.
        agent_caps.push(
            Capability::compile(
                serde_json::json!({"kind": "mcp/request", "payload": {"method": "tools/list"}}),
            )
            .expect("built-in capability compiles"),
        );
        let agent = ParticipantEntry::new("agent", vec![tokens.token()], agent_caps);
        let service = ParticipantEntry::new(
            "service",
            vec![tokens.token()],
            caps(&["mcp/response", "chat"]),
        );
        SpaceConfig {
            id: "default".into(),
            name: Some("default".into()),
            description: Some("The built-in space of `mew gateway`".into()),
            participants: vec![human, agent, service],
            default_capabilities: caps(&["chat"]),
            logging: LoggingConfig::default(),
            gateway: GatewayOptions::default(),
            warnings: Vec::new(),
        }
    }

    /// A participant's entry by id.
    pub fn participant(&self, id: &str) -> Option<&ParticipantEntry> {
        self.participants.iter().find(|p| p.id == id)
    }

    /// Settles every participant's tokens the way the reference accepts them: the
    /// environment variable [`token_env_var`], the token file (`.mew/tokens/<id>.token`, read
    /// by `token_file`) and every literal of `tokens:` all authenticate, in that order (the
    /// first is the one handed to a process the space starts). A participant with none gets
    /// a fresh token from `fresh`, returned so the driver can write that file.
    pub fn resolve_tokens(
        &mut self,
        mut env: impl FnMut(&str) -> Option<String>,
        mut token_file: impl FnMut(&str) -> Option<String>,
        mut fresh: impl FnMut() -> String,
    ) -> Vec<GeneratedToken> {
        let mut generated = Vec::new();
        for p in &mut self.participants {
            let clean = |t: Option<String>| {
                t.map(|t| t.trim().to_owned())
                    .filter(|t: &String| !t.is_empty())
            };
            let mut tokens: Vec<String> = Vec::with_capacity(p.tokens.len() + 2);
            for t in [clean(env(&token_env_var(&p.id))), clean(token_file(&p.id))]
                .into_iter()
                .flatten()
                .chain(std::mem::take(&mut p.tokens))
            {
                if !tokens.contains(&t) {
                    tokens.push(t);
                }
            }
            if tokens.is_empty() {
                let token = fresh();
                tokens.push(token.clone());
                generated.push(GeneratedToken {
                    participant: p.id.clone(),
                    token,
                });
            }
            p.tokens = tokens;
        }
        generated
    }
}

/// Replaces `${NAME}` in `text` with `lookup(NAME)`, as the reference does in the `command`,
/// `args`, `env` and `mcp_server` of started participants. A name `lookup` does not know
/// becomes the empty string and is returned in the second value so the caller can warn;
/// `$` not followed by `{` and an unclosed `${` are kept as they are.
pub fn substitute(
    text: &str,
    mut lookup: impl FnMut(&str) -> Option<String>,
) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut missing = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find('}') {
            Some(end) => {
                let name = &after[..end];
                match lookup(name) {
                    Some(v) => out.push_str(&v),
                    None => missing.push(name.to_owned()),
                }
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    (out, missing)
}

/// Keys of a participant entry this implementation reads (the reference's and mew-rs's).
const PARTICIPANT_KEYS: &[&str] = &[
    "type",
    "agent_config",
    "tokens",
    "token",
    "capabilities",
    "auto_start",
    "command",
    "args",
    "env",
    "output_log",
    "auto_connect",
    "mcp_server",
    "bridge_config",
    "restart_policy",
    "default_to",
    "fifo",
    "io",
];

/// Top-level keys this implementation reads.
const TOP_KEYS: &[&str] = &[
    "space",
    "participants",
    "defaults",
    "logging",
    "gateway",
    "mew",
];

/// The known key `key` is most likely a misspelling of: at most two edits away, and not
/// shorter than 4 characters (so `id` is not taken for `io`).
fn near_miss(key: &str, known: &[&'static str]) -> Option<&'static str> {
    if key.len() < 4 {
        return None;
    }
    known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[derive(Default)]
struct Cx {
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigWarning>,
}

fn type_name(v: &Yaml) -> &'static str {
    match v {
        Yaml::Null => "null",
        Yaml::Bool(_) => "a boolean",
        Yaml::Number(_) => "a number",
        Yaml::String(_) => "a string",
        Yaml::Sequence(_) => "a list",
        Yaml::Mapping(_) => "a mapping",
        Yaml::Tagged(_) => "a tagged value",
    }
}

impl Cx {
    /// Records every key of `m` not in `known` as ignored.
    fn unknown_keys(&mut self, m: &serde_yaml::Mapping, known: &[&'static str], loc: &str) {
        for k in m.keys() {
            let key = match k {
                Yaml::String(s) => s.clone(),
                other => serde_yaml::to_string(other)
                    .map(|s| s.trim().to_owned())
                    .unwrap_or_default(),
            };
            if !known.contains(&key.as_str()) {
                self.warnings.push(ConfigWarning {
                    location: if loc.is_empty() {
                        key.clone()
                    } else {
                        format!("{loc}.{key}")
                    },
                    did_you_mean: near_miss(&key, known),
                });
            }
        }
    }

    fn err(&mut self, location: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            location: location.into(),
            message: message.into(),
        });
    }

    fn map<'a>(&mut self, v: &'a Yaml, loc: &str) -> Option<&'a serde_yaml::Mapping> {
        match v {
            Yaml::Mapping(m) => Some(m),
            Yaml::Null => None,
            other => {
                self.err(
                    loc,
                    format!("expected a mapping, found {}", type_name(other)),
                );
                None
            }
        }
    }

    fn string(&mut self, v: Option<&Yaml>, loc: &str) -> Option<String> {
        match v? {
            Yaml::String(s) => Some(s.clone()),
            Yaml::Number(n) => Some(n.to_string()),
            Yaml::Null => None,
            other => {
                self.err(
                    loc,
                    format!("expected a string, found {}", type_name(other)),
                );
                None
            }
        }
    }

    fn boolean(&mut self, v: Option<&Yaml>, loc: &str, default: bool) -> bool {
        match v {
            None | Some(Yaml::Null) => default,
            Some(Yaml::Bool(b)) => *b,
            Some(other) => {
                self.err(
                    loc,
                    format!("expected true or false, found {}", type_name(other)),
                );
                default
            }
        }
    }

    fn uint(&mut self, v: Option<&Yaml>, loc: &str, default: u64, min: u64) -> u64 {
        match v {
            None | Some(Yaml::Null) => default,
            Some(Yaml::Number(n)) => match n.as_u64() {
                Some(x) if x >= min => x,
                _ => {
                    self.err(loc, format!("expected an integer >= {min}, found {n}"));
                    default
                }
            },
            Some(other) => {
                self.err(
                    loc,
                    format!("expected an integer, found {}", type_name(other)),
                );
                default
            }
        }
    }

    fn strings(&mut self, v: Option<&Yaml>, loc: &str) -> Vec<String> {
        match v {
            None | Some(Yaml::Null) => Vec::new(),
            Some(Yaml::Sequence(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(i, it)| self.string(Some(it), &format!("{loc}[{i}]")))
                .collect(),
            Some(other) => {
                self.err(loc, format!("expected a list, found {}", type_name(other)));
                Vec::new()
            }
        }
    }

    fn string_map(&mut self, v: Option<&Yaml>, loc: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(v) = v else { return out };
        let Some(m) = self.map(v, loc) else {
            return out;
        };
        for (k, val) in m {
            let Some(key) = k.as_str() else {
                self.err(loc, "keys must be strings");
                continue;
            };
            let kl = format!("{loc}.{key}");
            match val {
                Yaml::String(s) => {
                    out.insert(key.to_owned(), s.clone());
                }
                Yaml::Number(n) => {
                    out.insert(key.to_owned(), n.to_string());
                }
                Yaml::Bool(b) => {
                    out.insert(key.to_owned(), b.to_string());
                }
                other => self.err(kl, format!("expected a string, found {}", type_name(other))),
            }
        }
        out
    }

    fn capabilities(&mut self, v: &Yaml, loc: &str) -> CapabilitySet {
        let Yaml::Sequence(items) = v else {
            self.err(loc, format!("expected a list, found {}", type_name(v)));
            return CapabilitySet::default();
        };
        let mut set = CapabilitySet::default();
        for (i, item) in items.iter().enumerate() {
            let l = format!("{loc}[{i}]");
            let json = match item {
                // A bare string is shorthand for `{kind: <string>}`.
                Yaml::String(s) => serde_json::json!({ "kind": s }),
                other => match serde_json::to_value(other) {
                    Ok(j) => j,
                    Err(e) => {
                        self.err(l, format!("invalid capability: {e}"));
                        continue;
                    }
                },
            };
            match Capability::compile(json) {
                Ok(c) => set.push(c),
                Err(e) => self.err(l, format!("invalid capability: {}", e.reason)),
            }
        }
        set
    }

    fn space(&mut self, root: &Yaml) -> SpaceConfig {
        let mut cfg = SpaceConfig {
            id: String::new(),
            name: None,
            description: None,
            participants: Vec::new(),
            default_capabilities: CapabilitySet::default(),
            logging: LoggingConfig::default(),
            gateway: GatewayOptions::default(),
            warnings: Vec::new(),
        };
        let Some(top) = self.map(root, "") else {
            self.err("", "the configuration is empty");
            return cfg;
        };
        self.unknown_keys(top, TOP_KEYS, "");
        match top.get("space") {
            Some(Yaml::String(s)) => cfg.id = s.clone(),
            Some(v) => {
                if let Some(m) = self.map(v, "space") {
                    cfg.id = self.string(m.get("id"), "space.id").unwrap_or_default();
                    cfg.name = self.string(m.get("name"), "space.name");
                    cfg.description = self.string(m.get("description"), "space.description");
                }
            }
            None => {}
        }
        if cfg.id.is_empty() {
            match &cfg.name {
                Some(n) => cfg.id = n.clone(),
                None => self.err("space.id", "missing: every space needs an id"),
            }
        }
        if let Some(d) = top.get("defaults")
            && let Some(m) = self.map(d, "defaults")
            && let Some(c) = m.get("capabilities")
        {
            cfg.default_capabilities = self.capabilities(c, "defaults.capabilities");
        }
        if let Some(l) = top.get("logging") {
            cfg.logging = self.logging(l);
        }
        let opts = match (top.get("gateway"), top.get("mew")) {
            (Some(g), _) => Some((g, "gateway")),
            (None, Some(m)) => Some((m, "mew")),
            _ => None,
        };
        if let Some((v, loc)) = opts {
            cfg.gateway = self.options(v, loc);
        }
        if let Some(p) = top.get("participants")
            && let Some(m) = self.map(p, "participants")
        {
            for (k, v) in m {
                let Some(id) = k.as_str() else {
                    self.err("participants", "participant ids must be strings");
                    continue;
                };
                let loc = format!("participants.{id}");
                if id.is_empty() || id.starts_with("system:") || id.contains(char::is_whitespace) {
                    self.err(
                        &loc,
                        "invalid participant id (empty, whitespace, or the reserved `system:` prefix)",
                    );
                    continue;
                }
                let p = self.participant(id, v, &loc, &cfg.default_capabilities);
                cfg.participants.push(p);
            }
        }
        // Tokens must identify exactly one participant.
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        let mut dups = Vec::new();
        for p in &cfg.participants {
            for (i, t) in p.tokens.iter().enumerate() {
                if let Some(first) = seen.insert(t, &p.id)
                    && first != p.id
                {
                    dups.push((
                        format!("participants.{}.tokens[{i}]", p.id),
                        format!("duplicate token: already used by participant `{first}`"),
                    ));
                }
            }
        }
        for (l, m) in dups {
            self.err(l, m);
        }
        cfg
    }

    fn participant(
        &mut self,
        id: &str,
        v: &Yaml,
        loc: &str,
        defaults: &CapabilitySet,
    ) -> ParticipantEntry {
        let mut p = ParticipantEntry::new(id, Vec::new(), defaults.clone());
        p.explicit_capabilities = false;
        let Some(m) = self.map(v, loc) else {
            return p;
        };
        let m = m.clone();
        self.unknown_keys(&m, PARTICIPANT_KEYS, loc);
        let get = |k: &str| m.get(k);
        match self.string(get("type"), &format!("{loc}.type")).as_deref() {
            None | Some("standard") => {}
            Some("mcp-bridge") => p.kind = ParticipantType::McpBridge,
            Some("local") => p.kind = ParticipantType::Local,
            Some("agent") => p.kind = ParticipantType::Agent,
            Some(other) => self.err(
                format!("{loc}.type"),
                format!("unknown participant type `{other}` (known: agent, local, mcp-bridge)"),
            ),
        }
        p.tokens = self.strings(get("tokens"), &format!("{loc}.tokens"));
        if let Some(t) = self.string(get("token"), &format!("{loc}.token")) {
            p.tokens.push(t);
        }
        if let Some(c) = get("capabilities") {
            p.capabilities = self.capabilities(c, &format!("{loc}.capabilities"));
            p.explicit_capabilities = true;
        }
        p.auto_start = self.boolean(get("auto_start"), &format!("{loc}.auto_start"), false);
        p.command = self.string(get("command"), &format!("{loc}.command"));
        p.args = self.strings(get("args"), &format!("{loc}.args"));
        p.env = self.string_map(get("env"), &format!("{loc}.env"));
        p.output_log = self.string(get("output_log"), &format!("{loc}.output_log"));
        p.auto_connect = self.boolean(get("auto_connect"), &format!("{loc}.auto_connect"), false);
        p.fifo = self.boolean(get("fifo"), &format!("{loc}.fifo"), false);
        p.io = self.string(get("io"), &format!("{loc}.io"));
        p.agent_config = self.string(get("agent_config"), &format!("{loc}.agent_config"));
        p.default_to = match get("default_to") {
            Some(Yaml::String(s)) => vec![s.clone()],
            other => self.strings(other, &format!("{loc}.default_to")),
        };
        match self
            .string(get("restart_policy"), &format!("{loc}.restart_policy"))
            .as_deref()
        {
            None | Some("no") | Some("never") => {}
            Some("on-failure") => p.restart_policy = RestartPolicy::OnFailure,
            Some("always") => p.restart_policy = RestartPolicy::Always,
            Some(other) => self.err(
                format!("{loc}.restart_policy"),
                format!("unknown restart policy `{other}` (known: no, on-failure, always)"),
            ),
        }
        if p.auto_start
            && p.command.is_none()
            && !matches!(p.kind, ParticipantType::McpBridge | ParticipantType::Agent)
        {
            self.err(format!("{loc}.command"), "auto_start needs a command");
        }
        if let Some(s) = get("mcp_server") {
            let l = format!("{loc}.mcp_server");
            if let Some(sm) = self.map(s, &l) {
                let sm = sm.clone();
                let command = self.string(sm.get("command"), &format!("{l}.command"));
                if command.is_none() {
                    self.err(
                        format!("{l}.command"),
                        "missing: an MCP server needs a command",
                    );
                }
                p.mcp_server = Some(McpServerConfig {
                    command: command.unwrap_or_default(),
                    args: self.strings(sm.get("args"), &format!("{l}.args")),
                    env: self.string_map(sm.get("env"), &format!("{l}.env")),
                    cwd: self.string(sm.get("cwd"), &format!("{l}.cwd")),
                });
            }
        } else if p.kind == ParticipantType::McpBridge {
            self.err(
                format!("{loc}.mcp_server"),
                "missing: an mcp-bridge participant needs mcp_server",
            );
        }
        if let Some(b) = get("bridge_config") {
            let l = format!("{loc}.bridge_config");
            if let Some(bm) = self.map(b, &l) {
                let bm = bm.clone();
                let d = BridgeSettings::default();
                p.bridge_config = Some(BridgeSettings {
                    init_timeout_ms: self.uint(
                        bm.get("init_timeout"),
                        &format!("{l}.init_timeout"),
                        d.init_timeout_ms,
                        1,
                    ),
                    reconnect: self.boolean(
                        bm.get("reconnect"),
                        &format!("{l}.reconnect"),
                        d.reconnect,
                    ),
                    max_reconnects: self
                        .uint(
                            bm.get("max_reconnects"),
                            &format!("{l}.max_reconnects"),
                            u64::from(d.max_reconnects),
                            0,
                        )
                        .min(u64::from(u32::MAX)) as u32,
                });
            }
        }
        p
    }

    fn logging(&mut self, v: &Yaml) -> LoggingConfig {
        let mut l = LoggingConfig::default();
        match v {
            Yaml::Bool(b) => {
                l.enabled = *b;
                return l;
            }
            _ => {
                let Some(m) = self.map(v, "logging") else {
                    return l;
                };
                let m = m.clone();
                l.enabled = self.boolean(m.get("enabled"), "logging.enabled", true);
                l.envelope_history =
                    self.boolean(m.get("envelope_history"), "logging.envelope_history", true);
                l.capability_decisions = self.boolean(
                    m.get("capability_decisions"),
                    "logging.capability_decisions",
                    true,
                );
                // Kilobytes are accepted too, for small test spaces.
                let d = LoggingConfig::default();
                if m.contains_key("max_file_kb") {
                    l.max_file_bytes =
                        self.uint(m.get("max_file_kb"), "logging.max_file_kb", 0, 1) * 1024;
                } else {
                    l.max_file_bytes = self.uint(
                        m.get("max_file_mb"),
                        "logging.max_file_mb",
                        d.max_file_bytes / (1024 * 1024),
                        1,
                    ) * 1024
                        * 1024;
                }
                l.keep_files = self
                    .uint(
                        m.get("max_files"),
                        "logging.max_files",
                        u64::from(d.keep_files),
                        0,
                    )
                    .min(1000) as u32;
            }
        }
        l
    }

    fn options(&mut self, v: &Yaml, loc: &str) -> GatewayOptions {
        let mut o = GatewayOptions::default();
        let Some(m) = self.map(v, loc) else {
            return o;
        };
        let m = m.clone();
        let l = |k: &str| format!("{loc}.{k}");
        o.anonymous_joins = self.boolean(m.get("anonymous_joins"), &l("anonymous_joins"), false);
        match m.get("rate_limit") {
            None => {}
            Some(Yaml::Bool(false)) | Some(Yaml::Null) => o.rate_limit = None,
            Some(Yaml::String(s)) if s == "off" => o.rate_limit = None,
            Some(v) => {
                let loc = l("rate_limit");
                if let Some(rm) = self.map(v, &loc) {
                    let rm = rm.clone();
                    let d = super::rate::RateLimit::default();
                    let mut num = |k: &str, default: u64| {
                        self.uint(rm.get(k), &format!("{loc}.{k}"), default, 1)
                    };
                    o.rate_limit = Some(super::rate::RateLimit {
                        per_second: num("per_second", d.per_second),
                        burst: num("burst", d.burst),
                        bytes_per_second: num("bytes_per_second", d.bytes_per_second),
                        burst_bytes: num("burst_bytes", d.burst_bytes),
                    });
                }
            }
        }
        match m.get("durability") {
            None => {}
            Some(Yaml::Bool(false)) | Some(Yaml::Null) => o.durability = None,
            Some(Yaml::String(s)) if s == "off" => o.durability = None,
            Some(v) => {
                let loc = l("durability");
                if let Some(dm) = self.map(v, &loc) {
                    let dm = dm.clone();
                    let floc = format!("{loc}.fsync");
                    match dm.get("fsync") {
                        None => {}
                        Some(Yaml::String(s)) if s == "always" => {
                            o.durability = Some(Fsync::Always)
                        }
                        Some(Yaml::Mapping(fm)) if fm.contains_key("every_ms") => {
                            let ms =
                                self.uint(fm.get("every_ms"), &format!("{floc}.every_ms"), 100, 1);
                            o.durability = Some(Fsync::EveryMs(ms));
                        }
                        Some(_) => {
                            self.err(floc, "expected `always` or `{every_ms: N}`".to_owned())
                        }
                    }
                }
            }
        }
        match self.string(m.get("delivery"), &l("delivery")).as_deref() {
            None | Some("all") => {}
            Some("addressed") => o.delivery = DeliveryMode::Addressed,
            Some(other) => self.err(
                l("delivery"),
                format!("unknown delivery mode `{other}` (known: all, addressed)"),
            ),
        }
        let d = GatewayOptions::default();
        o.limits.max_frame_bytes = self.uint(
            m.get("max_frame_bytes"),
            &l("max_frame_bytes"),
            d.limits.max_frame_bytes as u64,
            64,
        ) as usize;
        o.limits.max_depth = self
            .uint(
                m.get("max_depth"),
                &l("max_depth"),
                d.limits.max_depth as u64,
                2,
            )
            .min(crate::envelope::SERDE_MAX_DEPTH as u64) as usize;
        let ms = |cx: &mut Cx, k: &str, d: Duration| {
            Duration::from_millis(cx.uint(m.get(k), &l(k), d.as_millis() as u64, 1))
        };
        o.join_timeout = ms(self, "join_timeout_ms", d.join_timeout);
        o.heartbeat_interval = ms(self, "heartbeat_interval_ms", d.heartbeat_interval);
        o.idle_timeout = ms(self, "idle_timeout_ms", d.idle_timeout);
        o.max_queue_frames = self.uint(
            m.get("max_queue_frames"),
            &l("max_queue_frames"),
            d.max_queue_frames as u64,
            1,
        ) as usize;
        o.max_queue_bytes = self.uint(
            m.get("max_queue_bytes"),
            &l("max_queue_bytes"),
            d.max_queue_bytes as u64,
            1,
        ) as usize;
        o.history_size = self.uint(
            m.get("history_size"),
            &l("history_size"),
            d.history_size as u64,
            0,
        ) as usize;
        o.history_bytes = self.uint(
            m.get("history_bytes"),
            &l("history_bytes"),
            d.history_bytes as u64,
            0,
        ) as usize;
        o.max_streams = self.uint(
            m.get("max_streams"),
            &l("max_streams"),
            d.max_streams as u64,
            0,
        ) as usize;
        o.max_participants = self.uint(
            m.get("max_participants"),
            &l("max_participants"),
            d.max_participants as u64,
            1,
        ) as usize;
        o.max_grants_per_participant = self.uint(
            m.get("max_grants_per_participant"),
            &l("max_grants_per_participant"),
            d.max_grants_per_participant as u64,
            0,
        ) as usize;
        if let Some(t) = m.get("tls") {
            o.tls = self.tls(t, &l("tls"));
        }
        if let Some(v) = m.get("limits")
            && let Some(lm) = self.map(v, &l("limits"))
        {
            let lm = lm.clone();
            let d = ConnectionLimits::default();
            let mut num = |k: &str, default: usize| {
                self.uint(lm.get(k), &format!("{loc}.limits.{k}"), default as u64, 1) as usize
            };
            o.connections = ConnectionLimits {
                max_connections: num("max_connections", d.max_connections),
                max_connections_per_address: num(
                    "max_connections_per_address",
                    d.max_connections_per_address,
                ),
                max_unauthenticated: num("max_unauthenticated", d.max_unauthenticated),
            };
        }
        let proxies = self.strings(m.get("trusted_proxies"), &l("trusted_proxies"));
        for (i, p) in proxies.iter().enumerate() {
            if !valid_cidr(p) {
                self.err(
                    format!("{loc}.trusted_proxies[{i}]"),
                    format!("`{p}` is not an address or a network (CIDR, e.g. 10.0.0.0/8)"),
                );
            }
        }
        o.trusted_proxies = proxies;
        if let Some(a) = m.get("auth")
            && let Some(am) = self.map(a, &l("auth"))
            && let Some(j) = am.get("jwt")
        {
            let am = am.clone();
            self.unknown_keys(&am, &["jwt"], &l("auth"));
            o.jwt = self.jwt(j, &format!("{loc}.auth.jwt"));
        }
        o
    }

    fn tls(&mut self, v: &Yaml, loc: &str) -> Option<TlsConfig> {
        let m = self.map(v, loc)?.clone();
        self.unknown_keys(&m, &["cert", "key"], loc);
        let cert = self.string(m.get("cert"), &format!("{loc}.cert"));
        let key = self.string(m.get("key"), &format!("{loc}.key"));
        match (cert, key) {
            (Some(cert), Some(key)) => Some(TlsConfig { cert, key }),
            _ => {
                self.err(loc, "TLS needs both `cert` and `key` (PEM files)");
                None
            }
        }
    }

    fn jwt(&mut self, v: &Yaml, loc: &str) -> Option<JwtConfig> {
        let m = self.map(v, loc)?.clone();
        self.unknown_keys(
            &m,
            &[
                "issuer",
                "audience",
                "jwks_file",
                "jwks_url",
                "allow_unknown_subjects",
            ],
            loc,
        );
        let issuer = self.string(m.get("issuer"), &format!("{loc}.issuer"));
        let audience = self.string(m.get("audience"), &format!("{loc}.audience"));
        let jwks_file = self.string(m.get("jwks_file"), &format!("{loc}.jwks_file"));
        let jwks_url = self.string(m.get("jwks_url"), &format!("{loc}.jwks_url"));
        let allow_unknown_subjects = self.boolean(
            m.get("allow_unknown_subjects"),
            &format!("{loc}.allow_unknown_subjects"),
            false,
        );
        if issuer.is_none() {
            self.err(
                format!("{loc}.issuer"),
                "missing: the issuer tokens must name",
            );
        }
        if audience.is_none() {
            self.err(
                format!("{loc}.audience"),
                "missing: the audience tokens must name",
            );
        }
        if jwks_file.is_none() == jwks_url.is_none() {
            self.err(loc, "exactly one of `jwks_file` and `jwks_url` is needed");
        }
        Some(JwtConfig {
            issuer: issuer?,
            audience: audience?,
            jwks_file,
            jwks_url,
            allow_unknown_subjects,
        })
    }
}

/// Whether `s` is an IP address or an IP network in CIDR form.
fn valid_cidr(s: &str) -> bool {
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let Ok(ip) = addr.parse::<std::net::IpAddr>() else {
        return false;
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    prefix.is_none_or(|p| p.parse::<u8>().is_ok_and(|n| n <= max))
}

/// Converts a capability list given as JSON (a grant's or an invite's payload) into a set,
/// naming the first bad entry.
pub(crate) fn compile_json_caps(v: Option<&Value>) -> Result<CapabilitySet, String> {
    let Some(Value::Array(items)) = v else {
        return Err("`capabilities` must be a list of capability objects".into());
    };
    CapabilitySet::compile(items).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_reference_layout() {
        let yaml = r#"
space: {id: my-space, name: My space, description: test}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  agent:
    tokens: [agent-token]
    capabilities: [{kind: mcp/proposal}, {kind: chat}]
    auto_start: true
    command: node
    args: [agent.js]
    env: {A: "1"}
  files:
    type: mcp-bridge
    tokens: [files-token]
    capabilities: [{kind: mcp/response}]
    mcp_server: {command: npx, args: [-y, server], env: {X: y}, cwd: /tmp}
    bridge_config: {init_timeout: 5000, reconnect: false, max_reconnects: 1}
  log: {output_log: logs/out.jsonl, auto_connect: true}
defaults: {capabilities: [{kind: chat}]}
gateway: {delivery: addressed, anonymous_joins: true, join_timeout_ms: 500}
"#;
        let c = SpaceConfig::from_yaml(yaml).unwrap();
        assert_eq!(c.id, "my-space");
        assert_eq!(c.participants.len(), 4);
        let files = c.participant("files").unwrap();
        assert_eq!(files.kind, ParticipantType::McpBridge);
        assert_eq!(
            files.mcp_server.as_ref().unwrap().cwd.as_deref(),
            Some("/tmp")
        );
        assert_eq!(files.bridge_config.as_ref().unwrap().init_timeout_ms, 5000);
        assert!(c.participant("log").unwrap().is_virtual());
        assert_eq!(c.participant("log").unwrap().capabilities.len(), 1);
        assert_eq!(c.gateway.delivery, DeliveryMode::Addressed);
        assert!(c.gateway.anonymous_joins);
        assert_eq!(c.gateway.join_timeout, Duration::from_millis(500));
        assert_eq!(c.participant("agent").unwrap().env["A"], "1");
    }

    #[test]
    fn reports_every_problem_with_location() {
        let yaml = r#"
space: {id: s}
participants:
  a: {type: robot, tokens: [t1], capabilities: [{kind: chat}, {nokind: 1}]}
  b: {tokens: [t1], auto_start: maybe}
gateway: {delivery: sideways, idle_timeout_ms: -3}
"#;
        let errs = SpaceConfig::from_yaml(yaml).unwrap_err();
        let text = errs.to_string();
        assert!(
            text.contains("participants.a.type: unknown participant type `robot`"),
            "{text}"
        );
        assert!(
            text.contains("participants.a.capabilities[1]: invalid capability"),
            "{text}"
        );
        assert!(
            text.contains("participants.b.tokens[0]: duplicate token"),
            "{text}"
        );
        assert!(text.contains("participants.b.auto_start"), "{text}");
        assert!(text.contains("gateway.delivery"), "{text}");
        assert!(text.contains("gateway.idle_timeout_ms"), "{text}");
        assert_eq!(errs.0.len(), 6, "{text}");
    }

    #[test]
    fn every_token_source_authenticates_in_reference_order() {
        let mut c = SpaceConfig::from_yaml(
            "space: {id: s}\nparticipants:\n  my-agent: {tokens: [lit]}\n  b: {tokens: [lit-b, lit-b2]}\n  c: {}\n  d: {tokens: [lit-d]}\n",
        )
        .unwrap();
        let mut n = 0;
        let generated = c.resolve_tokens(
            |var| (var == "MEW_TOKEN_MY_AGENT").then(|| "from-env\n".to_owned()),
            |id| match id {
                "b" | "my-agent" => Some("from-file".to_owned()),
                "d" => Some("lit-d".to_owned()),
                _ => None,
            },
            || {
                n += 1;
                format!("fresh-{n}")
            },
        );
        assert_eq!(
            c.participant("my-agent").unwrap().tokens,
            vec!["from-env", "from-file", "lit"]
        );
        assert_eq!(
            c.participant("b").unwrap().tokens,
            vec!["from-file", "lit-b", "lit-b2"]
        );
        // The same token from two sources is listed once.
        assert_eq!(c.participant("d").unwrap().tokens, vec!["lit-d"]);
        assert_eq!(
            generated,
            vec![GeneratedToken {
                participant: "c".into(),
                token: "fresh-1".into()
            }]
        );
        assert_eq!(c.participant("c").unwrap().tokens, vec!["fresh-1"]);
        assert_eq!(token_env_var("my-agent"), "MEW_TOKEN_MY_AGENT");
    }

    #[test]
    fn reference_keys_load_and_unknown_keys_are_warnings() {
        let yaml = r#"
space: {id: ref}
participants:
  agent:
    type: local
    tokens: [agent-token]
    command: node
    args: ["agent.js", "--port", "${PORT}"]
    env: {DEBUG: "1"}
    auto_start: true
    restart_policy: on-failure
    fifo: true
    io: fifo
    default_to: [files]
    capabilitys: []
    colour: blue
  human: {tokens: [h], default_to: agent}
ui: {theme: dark}
"#;
        let c = SpaceConfig::from_yaml(yaml).unwrap();
        let a = c.participant("agent").unwrap();
        assert_eq!(a.kind, ParticipantType::Local);
        assert_eq!(a.restart_policy, RestartPolicy::OnFailure);
        assert!(a.fifo && a.is_started());
        assert_eq!(a.io.as_deref(), Some("fifo"));
        assert_eq!(a.default_to, vec!["files"]);
        assert_eq!(c.participant("human").unwrap().default_to, vec!["agent"]);
        let w: Vec<String> = c.warnings.iter().map(|w| w.to_string()).collect();
        assert_eq!(
            w,
            vec![
                "ui: not used by this gateway, ignored",
                "participants.agent.capabilitys: unknown key, ignored (did you mean `capabilities`?)",
                "participants.agent.colour: not used by this gateway, ignored",
            ]
        );
        let e = SpaceConfig::from_yaml(
            "space: s\nparticipants:\n  a: {type: local, restart_policy: sometimes}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("participants.a.restart_policy: unknown restart policy `sometimes`"),
            "{e}"
        );
    }

    #[test]
    fn substitution_follows_the_reference() {
        let env = |k: &str| match k {
            "PORT" => Some("8080".to_owned()),
            "SPACE" => Some("s".to_owned()),
            _ => None,
        };
        assert_eq!(
            substitute("ws://localhost:${PORT}/${SPACE}", env),
            ("ws://localhost:8080/s".to_owned(), vec![])
        );
        assert_eq!(
            substitute("a${NOPE}b $PORT ${", env),
            ("ab $PORT ${".to_owned(), vec!["NOPE".to_owned()])
        );
    }

    #[test]
    fn short_forms_and_options() {
        let c = SpaceConfig::from_yaml(
            "space: short\nparticipants:\n  a: {token: solo, capabilities: [chat, {kind: mcp/*}]}\nlogging: false\nmew: {delivery: all, history_size: 0, heartbeat_interval_ms: 5000}\n",
        )
        .unwrap();
        assert_eq!(c.id, "short");
        let a = c.participant("a").unwrap();
        assert_eq!(a.tokens, vec!["solo"]);
        assert!(a.capabilities.allows("chat", None));
        assert!(a.capabilities.allows("mcp/request", None));
        assert!(!c.logging.enabled);
        assert_eq!(c.gateway.history_size, 0);
        assert_eq!(c.gateway.heartbeat_interval, Duration::from_secs(5));
        assert_eq!(c.gateway.idle_timeout, Duration::from_secs(90));
        assert_eq!(c.gateway.limits, Limits::default());
    }

    #[test]
    fn structural_errors_are_reported() {
        for (yaml, needle) in [
            ("", "empty"),
            ("[1, 2]", "expected a mapping"),
            (
                "space: {name: 3}\nparticipants: []",
                "participants: expected a mapping",
            ),
            ("participants: {}", "space.id: missing"),
            (
                "space: s\nparticipants:\n  b: {type: mcp-bridge}",
                "participants.b.mcp_server: missing",
            ),
            (
                "space: s\nparticipants:\n  c: {auto_start: true}",
                "participants.c.command",
            ),
            (
                "space: s\nparticipants:\n  \"system:x\": {}",
                "reserved `system:` prefix",
            ),
            (
                "space: s\nparticipants:\n  d: {capabilities: {kind: chat}}",
                "participants.d.capabilities: expected a list",
            ),
            (
                "space: s\ndefaults: {capabilities: [{kind: 5}]}",
                "defaults.capabilities[0]: invalid capability",
            ),
            ("space: [unclosed", "invalid YAML"),
        ] {
            let text = SpaceConfig::from_yaml(yaml).unwrap_err().to_string();
            assert!(text.contains(needle), "{yaml:?}: {text}");
        }
    }

    #[test]
    fn default_space_is_seeded() {
        let a = SpaceConfig::default_space(&mut crate::ids::IdGen::new(9));
        let b = SpaceConfig::default_space(&mut crate::ids::IdGen::new(9));
        assert_eq!(a, b);
        let agent = a.participant("agent").unwrap();
        assert!(agent.capabilities.allows("mcp/proposal", None));
        assert!(!agent.capabilities.allows("mcp/request", None));
        assert!(
            a.participant("human")
                .unwrap()
                .capabilities
                .allows("mcp/request", None)
        );
    }
}
