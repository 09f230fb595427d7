//! The space configuration: `space.yaml` as the reference reads it, plus mew-rs options.
//!
//! ```yaml
//! space: {id: my-space, name: My space, description: ...}
//! participants:
//!   human: {tokens: [human-token], capabilities: [{kind: "*"}]}
//!   files: {type: mcp-bridge, mcp_server: {command: npx, args: [...]}, ...}
//!   # mew-rs: `person: true` marks a person (announced so; up to 8 connections at once),
//!   # `connections: N` (1..=16) bounds how many connections one participant holds.
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
//!   crowd: {size: 1000, batch_ms: 1000, batch_max: 20}   # beyond `size` online: bounded
//!                               # welcomes, joins and leaves announced in batches
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
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

mod env;
mod parse;
#[cfg(test)]
mod tests;

pub use env::{GeneratedToken, TOKEN_LEN, substitute, token_env_var};
pub(crate) use parse::compile_json_caps;

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

/// `mcp_server` of an `mcp-bridge` participant: a command to run (stdio) or a `url`
/// (Streamable HTTP), exactly one of the two.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct McpServerConfig {
    /// Program to run (empty with `url`).
    pub command: String,
    /// The Streamable HTTP endpoint, instead of a command.
    pub url: Option<String>,
    /// Headers sent to the `url` server.
    pub headers: BTreeMap<String, HeaderSource>,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Working directory.
    pub cwd: Option<String>,
    /// `oauth`: how the bridge signs in to a `url` server that asks for it.
    pub oauth: McpOAuthSettings,
}

/// `mcp_server.oauth`: OAuth sign-in to a remote MCP server (on unless `oauth: false`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpOAuthSettings {
    /// Whether the bridge signs in when the server asks (`oauth: false` turns it off).
    pub enabled: bool,
    /// `client_file`: a JSON file with a pre-registered `client_id` (and `client_secret`),
    /// relative to the folder of `space.yaml`; never the values themselves.
    pub client_file: Option<String>,
    /// `client_metadata_url`: the client ID metadata document to name as `client_id`
    /// instead of the one the gateway serves.
    pub client_metadata_url: Option<String>,
}

impl Default for McpOAuthSettings {
    fn default() -> Self {
        McpOAuthSettings {
            enabled: true,
            client_file: None,
            client_metadata_url: None,
        }
    }
}

/// Where a header's value for an MCP server over HTTP comes from. A credential is never
/// written in `space.yaml`: it is read from the environment or a file when the bridge starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderSource {
    /// A plain value (refused for headers that carry credentials, see
    /// [`HeaderSource::is_credential_header`]).
    Value(String),
    /// `{env: VAR, prefix: "Bearer "}`: the variable's value, after `prefix`.
    Env {
        /// The variable.
        var: String,
        /// Text before the value.
        prefix: String,
    },
    /// `{file: PATH, prefix: ...}`: the file's content (trailing newline removed), after
    /// `prefix`; a relative path is relative to the folder of `space.yaml`.
    File {
        /// The file.
        path: String,
        /// Text before the value.
        prefix: String,
    },
}

impl HeaderSource {
    /// Whether a header of this name carries a credential, so its value may not be written
    /// in `space.yaml`: `Authorization`, `Proxy-Authorization`, `Cookie`, and any name that
    /// says `token`, `key`, `secret` or `password`.
    pub fn is_credential_header(name: &str) -> bool {
        let n = name.to_ascii_lowercase();
        matches!(
            n.as_str(),
            "authorization" | "proxy-authorization" | "cookie"
        ) || ["token", "key", "secret", "password"]
            .iter()
            .any(|w| n.contains(w))
    }
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
    /// `sampling.answered_by`: the participant that may answer the server's sampling
    /// requests; none: sampling is declined with a reason.
    pub sampling_answered_by: Option<String>,
    /// `roots`: the `file://` URIs answered to the server's `roots/list`.
    pub roots: Vec<String>,
    /// `protocol_version`: the newest MCP revision offered to the server (`None`: the
    /// newest known).
    pub protocol_version: Option<String>,
}

impl Default for BridgeSettings {
    fn default() -> Self {
        BridgeSettings {
            init_timeout_ms: 30_000,
            reconnect: true,
            max_reconnects: 3,
            sampling_answered_by: None,
            roots: Vec::new(),
            protocol_version: None,
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
    /// `person: true`: a person, announced as one in welcomes and presence (agents answer
    /// persons' chats, see `respond_to_all`), who may hold several connections at once.
    pub person: bool,
    /// `connections: N`: how many connections it may hold at once (a new one beyond that
    /// replaces the oldest); `None` for the default, `PERSON_CONNECTIONS` (8) for a person and
    /// 1 (the protocol's rule) for everyone else.
    pub connections: Option<u8>,
}

/// Connections a person may hold at once unless `connections` says otherwise.
pub const PERSON_CONNECTIONS: u8 = 8;

/// The most connections `connections` may allow one participant.
pub const MAX_CONNECTIONS: u8 = 16;

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
            person: false,
            connections: None,
        }
    }

    /// How many connections this participant may hold at once.
    pub fn max_connections(&self) -> u8 {
        self.connections
            .unwrap_or(if self.person { PERSON_CONNECTIONS } else { 1 })
            .clamp(1, MAX_CONNECTIONS)
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
    /// Participants online above which the space is a crowd: a welcome lists at most this
    /// many others, and joins and leaves are announced in batches (see [`Crowd`]).
    pub crowd: Crowd,
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
    /// `mcp`: the space as an MCP server at `/mcp`.
    pub mcp: McpEndpoint,
}

/// `gateway.mcp`: how MCP hosts come in at `/mcp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpEndpoint {
    /// `loopback_as`: a host connecting from this machine without credentials is admitted
    /// as this participant (`None`: every host needs a bearer token or a JWT).
    pub loopback_as: Option<String>,
    /// `proposal_timeout_ms`: how long a host's call waits for people to review it.
    pub proposal_timeout: Duration,
    /// `max_sessions`: host sessions at once.
    pub max_sessions: usize,
    /// `idle_timeout_ms`: a session without a request for this long is ended.
    pub idle_timeout: Duration,
}

impl Default for McpEndpoint {
    fn default() -> Self {
        McpEndpoint {
            loopback_as: None,
            proposal_timeout: Duration::from_secs(300),
            max_sessions: 256,
            idle_timeout: Duration::from_secs(600),
        }
    }
}

/// `gateway.crowd`: how a large space announces who is there. Up to `size` participants
/// online, every join and leave is one `system/presence` to everyone and a welcome lists
/// everyone (as the protocol describes); beyond it, what a join costs the others would grow
/// with the space (a storm of N joins writes N² announcements), so:
/// - a welcome lists at most `size` other participants (configured ones first, then in join
///   order) and says how many it left out (`participants_omitted`); `GET /participants`
///   lists them all;
/// - joins and leaves are gathered for `batch_ms` and go out as one `system/presence`
///   `{event: "batch", changes: [...], omitted, online}` to everyone, listing at most
///   `batch_max` changes (each exactly the payload a single announcement would have).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crowd {
    /// Participants online (the one joining or leaving counted) beyond which the space is
    /// a crowd.
    pub size: usize,
    /// How long joins and leaves of a crowd are gathered before they are announced.
    pub batch: Duration,
    /// Changes one batch lists at most (the others are counted in `omitted`).
    pub batch_max: usize,
}

impl Default for Crowd {
    fn default() -> Self {
        Crowd {
            size: 1000,
            batch: Duration::from_secs(1),
            batch_max: 20,
        }
    }
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
    /// A change of the space (a grant, a revocation, an invitation, a join, a post, ...)
    /// is on the disk before anything after it leaves (its acknowledgement included);
    /// chats are flushed in groups, at most 10 ms after they were delivered.
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
            crowd: Crowd::default(),
            rate_limit: Some(super::rate::RateLimit::default()),
            tls: None,
            connections: ConnectionLimits::default(),
            trusted_proxies: Vec::new(),
            jwt: None,
            durability: Some(Fsync::Always),
            mcp: McpEndpoint::default(),
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

impl SpaceConfig {
    /// Parses and validates `space.yaml` text, reporting every problem found.
    pub fn from_yaml(text: &str) -> Result<SpaceConfig, ConfigErrors> {
        parse::from_yaml(text)
    }

    /// The space `mew gateway` runs without a config: `human` may do anything, `agent` may
    /// only propose (plus chat, reasoning, the acknowledgements and withdrawals it needs, and
    /// `tools/list` requests so that it can discover what to propose), `service`
    /// answers MCP requests and chats. Tokens come from `tokens`.
    ///
    /// # Panics
    /// When `tokens` has no randomness ([`crate::secret::LogEntropy`]).
    pub fn default_space(tokens: &mut dyn crate::secret::TokenSource) -> SpaceConfig {
        let mut token = || tokens.token().expect("a token source with randomness");
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
        let mut human = ParticipantEntry::new("human", vec![token()], caps(&["*"]));
        // At a terminal and a browser at once.
        human.person = true;
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
        let agent = ParticipantEntry::new("agent", vec![token()], agent_caps);
        let service =
            ParticipantEntry::new("service", vec![token()], caps(&["mcp/response", "chat"]));
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
}
