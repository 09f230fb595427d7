//! Configuration of the client connection and the participant built on it.

use crate::envelope::{Kind, Limits};
use std::time::Duration;

/// Reconnection after a lost connection: exponential backoff with seeded jitter.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconnectPolicy {
    /// Whether to reconnect at all.
    pub enabled: bool,
    /// Attempts after one loss before giving up (reset once ready again).
    pub max_attempts: u32,
    /// Delay before the first attempt; doubled for each further attempt.
    pub base_delay: Duration,
    /// Ceiling of the doubled delay.
    pub max_delay: Duration,
    /// Up to this fraction of the delay is added as jitter (0.0 disables jitter).
    pub jitter: f64,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        // The reference waits 1, 2, 4, 8, 16 s.
        ReconnectPolicy {
            enabled: true,
            max_attempts: 5,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(16),
            jitter: 0.2,
        }
    }
}

/// Liveness checking. The core asks the driver to send WebSocket pings ([`Output::Ping`])
/// and treats any inbound frame or pong as proof of life; silence longer than
/// `idle_timeout` closes the connection (and reconnects per policy).
///
/// [`Output::Ping`]: super::Output::Ping
#[derive(Debug, Clone, PartialEq)]
pub struct HeartbeatPolicy {
    /// Interval between pings; `None` disables both pings and the idle check.
    pub interval: Option<Duration>,
    /// Silence after which the connection is considered dead.
    pub idle_timeout: Duration,
    /// Time allowed from asking to connect to the welcome (TCP, WebSocket handshake and
    /// join): a gateway that accepts and then says nothing is given up on after this.
    pub connect_timeout: Duration,
    /// Time a write may wait on a gateway that does not read before the connection is
    /// given up (the driver enforces it).
    pub write_timeout: Duration,
}

impl Default for HeartbeatPolicy {
    fn default() -> Self {
        HeartbeatPolicy {
            interval: Some(Duration::from_secs(30)),
            idle_timeout: Duration::from_secs(90),
            connect_timeout: Duration::from_secs(15),
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// What happens to envelopes the application sends before the participant is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReadyPolicy {
    /// Keep up to `max` envelopes and send them once ready; beyond that refuse.
    Queue {
        /// Largest number of queued envelopes.
        max: usize,
    },
    /// Refuse at once with [`SendError::NotReady`](super::SendError::NotReady).
    Refuse,
}

impl Default for NotReadyPolicy {
    fn default() -> Self {
        NotReadyPolicy::Queue { max: 256 }
    }
}

/// Tool discovery of other participants' tools.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscoveryConfig {
    /// Discover automatically from welcome and presence. Off by default (the SDK makes
    /// discovery opt-in); agents switch it on.
    pub auto: bool,
    /// Delay between the starts of successive discoveries (avoids request storms).
    pub stagger: Duration,
    /// Time allowed for one `tools/list` answer.
    pub timeout: Duration,
    /// Attempts before a participant's discovery is marked failed.
    pub max_attempts: u32,
    /// Retry delay after attempt n is `n * retry_base`.
    pub retry_base: Duration,
    /// How long a discovered tool list stays fresh before it is refreshed.
    pub ttl: Duration,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig {
            auto: false,
            stagger: Duration::from_secs(1),
            timeout: Duration::from_secs(10),
            max_attempts: 3,
            retry_base: Duration::from_secs(5),
            ttl: Duration::from_secs(300),
        }
    }
}

/// Context accounting and proactive status.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextConfig {
    /// Size of the context window in tokens (0: unknown, no proactive status).
    pub max_tokens: u64,
    /// Fraction of `max_tokens` at which a `near_limit` status is sent.
    pub soft_limit: f64,
    /// Least time between two proactive statuses.
    pub status_cooldown: Duration,
    /// Count inbound chats into the usage (one message, about one token per 4 bytes).
    pub count_inbound_chat: bool,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            max_tokens: 0,
            soft_limit: 0.9,
            status_cooldown: Duration::from_secs(60),
            count_inbound_chat: true,
        }
    }
}

/// Bounds on every queue and table the participant keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounds {
    /// Pending requests and proposals of this participant.
    pub max_pending_requests: usize,
    /// Proposals of others kept for review.
    pub max_reviewed_proposals: usize,
    /// Chats addressed to us awaiting acknowledgement.
    pub max_pending_chats: usize,
    /// Tool and resource calls handed to the application and not yet completed.
    pub max_pending_calls: usize,
    /// Control envelopes awaiting the application's completion.
    pub max_pending_controls: usize,
    /// Reasoning sequences tracked at once.
    pub max_reasoning_contexts: usize,
    /// Streams tracked (requested, owned or known).
    pub max_streams: usize,
    /// Participants tracked in the space.
    pub max_participants: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_pending_requests: 1024,
            max_reviewed_proposals: 256,
            max_pending_chats: 256,
            max_pending_calls: 256,
            max_pending_controls: 64,
            max_reasoning_contexts: 64,
            max_streams: 256,
            max_participants: 4096,
        }
    }
}

/// Everything a participant needs to run. `Default` gives sensible values apart from the
/// gateway, space and token.
#[derive(Debug, Clone, PartialEq)]
pub struct ParticipantConfig {
    /// WebSocket URL of the gateway (e.g. `ws://localhost:8080/ws?space=dev`).
    pub gateway_url: String,
    /// Space to join.
    pub space: String,
    /// Bearer token.
    pub token: String,
    /// Id to ask for; the welcome's `you.id` is authoritative.
    pub participant_id: Option<String>,
    /// Default deadline of an `mcp/request`.
    pub request_timeout: Duration,
    /// Default deadline of an `mcp/proposal`, after which it is withdrawn (`timeout`).
    pub proposal_timeout: Duration,
    /// Reconnection policy.
    pub reconnect: ReconnectPolicy,
    /// Liveness pings.
    pub heartbeat: HeartbeatPolicy,
    /// Sending before ready.
    pub not_ready: NotReadyPolicy,
    /// Tool discovery.
    pub discovery: DiscoveryConfig,
    /// Context accounting.
    pub context: ContextConfig,
    /// Send proposals even when a direct request is allowed.
    pub prefer_proposals: bool,
    /// Kinds still allowed while paused.
    pub pause_exempt_kinds: Vec<Kind>,
    /// Limits applied to every inbound frame.
    pub limits: Limits,
    /// Queue and table bounds.
    pub bounds: Bounds,
}

impl Default for ParticipantConfig {
    fn default() -> Self {
        ParticipantConfig {
            gateway_url: "ws://localhost:8080/ws".into(),
            space: "default".into(),
            token: String::new(),
            participant_id: None,
            request_timeout: Duration::from_secs(30),
            proposal_timeout: Duration::from_secs(300),
            reconnect: ReconnectPolicy::default(),
            heartbeat: HeartbeatPolicy::default(),
            not_ready: NotReadyPolicy::default(),
            discovery: DiscoveryConfig::default(),
            context: ContextConfig::default(),
            prefer_proposals: false,
            pause_exempt_kinds: default_pause_exempt(),
            limits: Limits::default(),
            bounds: Bounds::default(),
        }
    }
}

/// What a paused participant may still send (spec 3.9.1): [`Kind::PAUSE_EXEMPT`], the list
/// the gateway enforces, so nothing the participant lets out while paused is refused there;
/// rejecting proposals and resuming others wait for the pause to end.
pub fn default_pause_exempt() -> Vec<Kind> {
    Kind::PAUSE_EXEMPT.to_vec()
}
