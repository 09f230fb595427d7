//! What the bridge tells the space about its server: the `mcp_server` member of every
//! `participant/status` (state, catalog sizes, the MCP revision in use as
//! `protocol_version` and the `transport`), and the final report when the server cannot be kept running.

use super::Bridge;
use crate::envelope::Kind;
use crate::mcp::{McpClient, Phase, Transport};
use crate::participant::{Draft, Participant, Status};
use crate::time::Time;
use serde_json::{Value, json};

/// The server's state as the space sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    /// Spawning, initializing or listing.
    Starting,
    /// Serving requests.
    Ready,
    /// Crashed; a restart is scheduled or the old process is being stopped.
    Restarting,
    /// Out of restarts.
    Failed,
    /// Stopped on request.
    Stopped,
}

impl ServerState {
    /// The state of a client in `phase`.
    pub fn of(phase: Phase) -> ServerState {
        match phase {
            Phase::Idle | Phase::Spawning | Phase::Initializing | Phase::Listing => {
                ServerState::Starting
            }
            Phase::Ready => ServerState::Ready,
            Phase::Stopping | Phase::Backoff => ServerState::Restarting,
            Phase::GaveUp => ServerState::Failed,
            Phase::Stopped => ServerState::Stopped,
        }
    }

    /// Wire text.
    pub fn as_str(self) -> &'static str {
        match self {
            ServerState::Starting => "starting",
            ServerState::Ready => "ready",
            ServerState::Restarting => "restarting",
            ServerState::Failed => "failed",
            ServerState::Stopped => "stopped",
        }
    }
}

/// What the member was built from: phase, catalog sizes, restarts, the last error and the
/// sign-in link.
type Shown = (
    Phase,
    usize,
    usize,
    usize,
    u32,
    Option<String>,
    Option<String>,
);

/// Keeps the status member current without rebuilding it on every message.
#[derive(Debug, Default)]
pub(super) struct Tracker {
    pub(super) restarts: u32,
    pub(super) last_error: Option<String>,
    /// The sign-in a person is asked for: `(url, host)`.
    pub(super) sign_in: Option<(String, String)>,
    /// What the member was last built from.
    shown: Option<Shown>,
}

impl Tracker {
    pub(super) fn refresh(&mut self, participant: &mut Participant, mcp: &McpClient) {
        let c = mcp.catalog();
        let key = (
            mcp.phase(),
            c.tools.len(),
            c.resources.len(),
            c.prompts.len(),
            self.restarts,
            self.last_error.clone(),
            self.sign_in.as_ref().map(|s| s.0.clone()),
        );
        if self.shown.as_ref() == Some(&key) {
            return;
        }
        self.shown = Some(key);
        participant.set_status_extra("mcp_server", Some(self.member(mcp)));
    }

    fn member(&self, mcp: &McpClient) -> Value {
        let c = mcp.catalog();
        let mut v = json!({
            "state": ServerState::of(mcp.phase()).as_str(),
            "tools": c.tools.len(),
            "resources": c.resources.len(),
            "prompts": c.prompts.len(),
            "restarts": self.restarts,
            "transport": match mcp.config().transport {
                Transport::Stdio => "stdio",
                Transport::Http => "http",
            },
        });
        if let Some(d) = mcp.server() {
            v["server_info"] = d.server_info.clone();
            v["protocol_version"] = json!(d.protocol_version.as_str());
        }
        if let Some(e) = &self.last_error {
            v["last_error"] = json!(e);
        }
        if let Some((url, host)) = &self.sign_in {
            v["sign_in"] = json!({"url": url, "host": host});
        }
        v
    }
}

impl Bridge {
    /// Tells the space the server is gone for good: a `participant/status` with
    /// `status: "error"` and a chat line anyone can read.
    pub(super) fn report_gave_up(&mut self, now: Time, reason: &str) {
        self.status.refresh(&mut self.participant, &self.mcp);
        let mut payload = self.participant.status_payload(Status::Active);
        payload["status"] = json!("error");
        // The client may still be stopping the process; for the space it is over.
        payload["mcp_server"]["state"] = json!(ServerState::Failed.as_str());
        payload["error"] = json!(format!("MCP server failed: {reason}"));
        let sent = self
            .participant
            .send(now, Draft::new(Kind::ParticipantStatus).payload(payload));
        let chat = self.participant.chat(
            now,
            &format!("MCP server unavailable, bridge stopping: {reason}"),
            Vec::new(),
        );
        // Without the capability to send these the gateway would refuse them anyway; the
        // driver reports the failure through the exit reason.
        let _ = (sent, chat);
    }
}
