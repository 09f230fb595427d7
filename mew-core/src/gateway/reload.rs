//! Live configuration: a re-read `space.yaml` applied to a running space.
//!
//! - A participant added to the file can join at once. An invitation (or an anonymous or
//!   unknown-subject join) that held its id, or an id that looks like it (same confusable
//!   skeleton), ends: its tokens are refused, its grants dropped, its connection closed
//!   (1008, "invitation ended: ..."); the entry gets only what the file gives it.
//! - A participant removed from the file is removed from the space as by a kick: its
//!   tokens are refused and its connection is closed (1008) with the reason.
//! - A token removed from an entry is refused from then on, and a connection that joined
//!   with it is closed (1008); connections that joined with another token of the entry,
//!   or with a verified identity, stay.
//! - Changed capabilities replace the entry's static capabilities (runtime grants stay);
//!   a connected participant learns them as after a grant: a fresh `system/welcome`.
//! - `defaults`, `logging` switches and the gateway options read while serving (join and
//!   idle timeouts, rate limits, delivery, limits on frames, grants and participants,
//!   `auth.jwt.allow_unknown_subjects`) take effect; sizes fixed at start (the polling
//!   history) keep their first values. The space's id cannot change.
//!
//! Every change is returned (for the log) and written as an audit record
//! (`configuration_changed`, in the envelope history).

use super::audit::{Direction, Transport};
use super::conn::Phase;
use super::member::{Hold, Member, Origin};
use super::{ConnId, Gateway, SpaceConfig};
use crate::Time;
use crate::secret::TokenHash;
use std::fmt;
use std::sync::Arc;

/// One change a reload made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigChange {
    /// A participant entry appeared (or came back).
    Added {
        /// Its id.
        participant: String,
    },
    /// A participant entry disappeared: removed from the space.
    Removed {
        /// Its id.
        participant: String,
        /// Whether a live connection was closed.
        disconnected: bool,
    },
    /// An invitation (or a join without an entry) held an id that the file now names, or
    /// one that looks like it: it ended, its tokens refused and its connection closed.
    InvitationEnded {
        /// The id it held.
        participant: String,
        /// Whether a live connection was closed.
        disconnected: bool,
    },
    /// Tokens of an entry were removed (and possibly others added).
    TokensRevoked {
        /// Whose.
        participant: String,
        /// How many tokens.
        revoked: usize,
        /// Whether a live connection that used one was closed.
        disconnected: bool,
    },
    /// Tokens were added to an entry.
    TokensAdded {
        /// Whose.
        participant: String,
        /// How many.
        added: usize,
    },
    /// An entry's capabilities changed.
    Capabilities {
        /// Whose.
        participant: String,
        /// The new static capabilities.
        capabilities: serde_json::Value,
        /// Whether a connected participant was sent a fresh welcome.
        notified: bool,
    },
    /// `defaults.capabilities` changed (for later anonymous joins and unknown subjects).
    Defaults,
    /// Other settings changed (`gateway:` options, `logging`).
    Settings,
}

impl ConfigChange {
    fn participant(&self) -> &str {
        match self {
            ConfigChange::Added { participant }
            | ConfigChange::Removed { participant, .. }
            | ConfigChange::InvitationEnded { participant, .. }
            | ConfigChange::TokensRevoked { participant, .. }
            | ConfigChange::TokensAdded { participant, .. }
            | ConfigChange::Capabilities { participant, .. } => participant,
            ConfigChange::Defaults | ConfigChange::Settings => "system:gateway",
        }
    }

    fn metadata(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            ConfigChange::Added { .. } => json!({"change": "participant_added"}),
            ConfigChange::Removed { disconnected, .. } => {
                json!({"change": "participant_removed", "disconnected": disconnected})
            }
            ConfigChange::InvitationEnded { disconnected, .. } => {
                json!({"change": "invitation_ended", "disconnected": disconnected})
            }
            ConfigChange::TokensRevoked {
                revoked,
                disconnected,
                ..
            } => {
                json!({"change": "tokens_revoked", "revoked": revoked, "disconnected": disconnected})
            }
            ConfigChange::TokensAdded { added, .. } => {
                json!({"change": "tokens_added", "added": added})
            }
            ConfigChange::Capabilities { capabilities, .. } => {
                json!({"change": "capabilities_changed", "capabilities": capabilities})
            }
            ConfigChange::Defaults => json!({"change": "defaults_changed"}),
            ConfigChange::Settings => json!({"change": "settings_changed"}),
        }
    }
}

impl fmt::Display for ConfigChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigChange::Added { participant } => write!(f, "participant {participant} added"),
            ConfigChange::Removed {
                participant,
                disconnected,
            } => {
                write!(f, "participant {participant} removed")?;
                if *disconnected {
                    f.write_str(" (its connection closed)")?;
                }
                Ok(())
            }
            ConfigChange::InvitationEnded {
                participant,
                disconnected,
            } => {
                write!(f, "the invitation of {participant} ended")?;
                if *disconnected {
                    f.write_str(" (its connection closed)")?;
                }
                Ok(())
            }
            ConfigChange::TokensRevoked {
                participant,
                revoked,
                disconnected,
            } => {
                write!(f, "{revoked} token(s) of {participant} revoked")?;
                if *disconnected {
                    f.write_str(" (the connection that used one closed)")?;
                }
                Ok(())
            }
            ConfigChange::TokensAdded { participant, added } => {
                write!(f, "{added} token(s) added for {participant}")
            }
            ConfigChange::Capabilities {
                participant,
                capabilities,
                notified,
            } => {
                write!(f, "capabilities of {participant} now {capabilities}")?;
                if *notified {
                    f.write_str(" (sent a fresh welcome)")?;
                }
                Ok(())
            }
            ConfigChange::Defaults => f.write_str("defaults.capabilities changed"),
            ConfigChange::Settings => f.write_str("gateway or logging settings changed"),
        }
    }
}

/// The reason closed connections are given.
const REMOVED: &str = "removed from the space by a configuration change";
const ENDED: &str =
    "invitation ended: space.yaml now names this participant id (or one that looks like it)";
const REVOKED: &str = "token revoked by a configuration change";

impl Gateway {
    /// Ends what holds a member's id besides a configured entry: its tokens are refused,
    /// its grants and holds dropped, and its connection (if any) is to be closed.
    /// Whether it had connections (all of them are closed: a person may hold several).
    fn end_holder(&mut self, idx: usize, to_close: &mut Vec<(ConnId, &'static str)>) -> bool {
        self.members.remove_tokens(idx);
        let m = self.members.get_mut(idx);
        m.grants.clear();
        m.hold = Hold::None;
        m.recompute_caps();
        if m.removed {
            return false;
        }
        for &c in m.conns.as_slice() {
            to_close.push((c, ENDED));
        }
        !m.conns.is_empty()
    }

    /// [`Input::Reconfigure`](super::Input::Reconfigure)'s work.
    pub(super) fn apply_config(
        &mut self,
        now: Time,
        new: SpaceConfig,
    ) -> Result<Vec<ConfigChange>, String> {
        if new.id != self.config.id {
            return Err(format!(
                "space.id changed from `{}` to `{}`: a running gateway serves one space; restart it to serve another",
                self.config.id, new.id
            ));
        }
        let mut changes = Vec::new();
        let mut to_close: Vec<(ConnId, &'static str)> = Vec::new();
        for p in &new.participants {
            let tokens: Vec<TokenHash> = p.tokens.iter().map(|t| TokenHash::of(t)).collect();
            let had_entry =
                self.config.participant(&p.id).is_some() && self.members.find(&p.id).is_some();
            let idx = match self.members.find(&p.id) {
                Some(i) => i,
                None => {
                    self.members.insert(Member {
                        id: Arc::from(p.id.as_str()),
                        origin: Origin::Configured,
                        tokens,
                        static_caps: p.capabilities.clone(),
                        grants: Vec::new(),
                        caps: Arc::new(p.capabilities.clone()),
                        conns: super::member::Conns::for_entry(p),
                        virtual_log: None,
                        hold: Hold::None,
                        bucket: Default::default(),
                        removed: false,
                    });
                    changes.push(ConfigChange::Added {
                        participant: p.id.clone(),
                    });
                    continue;
                }
            };
            let m = self.members.get(idx);
            if m.origin != Origin::Configured {
                // An invitation (or an anonymous or unknown-subject join) holds the id the
                // file now names: it ends, and nothing of it passes to the entry.
                let disconnected = self.end_holder(idx, &mut to_close);
                changes.push(ConfigChange::InvitationEnded {
                    participant: p.id.clone(),
                    disconnected,
                });
            }
            let m = self.members.get(idx);
            let came_back = m.removed || m.origin != Origin::Configured || !had_entry;
            let revoked: Vec<TokenHash> = m
                .tokens
                .iter()
                .filter(|t| !tokens.contains(t))
                .copied()
                .collect();
            let added = tokens.iter().filter(|t| !m.tokens.contains(t)).count();
            let caps_changed = m.static_caps.to_json() != p.capabilities.to_json();
            // Tokens: the new list replaces the old.
            self.members.remove_tokens(idx);
            for t in &tokens {
                self.members.add_token(*t, idx);
            }
            let m = self.members.get_mut(idx);
            m.tokens = tokens;
            m.origin = Origin::Configured;
            m.removed = false;
            m.conns.configure(p);
            let conns = m.conns.clone();
            if came_back {
                m.grants.clear();
                m.hold = Hold::None;
                m.static_caps = p.capabilities.clone();
                m.recompute_caps();
                changes.push(ConfigChange::Added {
                    participant: p.id.clone(),
                });
                continue;
            }
            if !revoked.is_empty() {
                let mut used = false;
                for &c in conns.as_slice() {
                    if self
                        .conns
                        .get_mut(c)
                        .and_then(|c| c.joined_with)
                        .is_some_and(|t| revoked.contains(&t))
                    {
                        to_close.push((c, REVOKED));
                        used = true;
                    }
                }
                changes.push(ConfigChange::TokensRevoked {
                    participant: p.id.clone(),
                    revoked: revoked.len(),
                    disconnected: used,
                });
            }
            if added > 0 {
                changes.push(ConfigChange::TokensAdded {
                    participant: p.id.clone(),
                    added,
                });
            }
            if caps_changed {
                let m = self.members.get_mut(idx);
                m.static_caps = p.capabilities.clone();
                m.recompute_caps();
                let closing = conns
                    .as_slice()
                    .iter()
                    .all(|c| to_close.iter().any(|(t, _)| t == c));
                let notified = !conns.is_empty() && !closing;
                if notified {
                    self.send_welcome(now, idx);
                }
                changes.push(ConfigChange::Capabilities {
                    participant: p.id.clone(),
                    capabilities: p.capabilities.to_json(),
                    notified,
                });
            }
        }
        // Members that look like an entry (same confusable skeleton, another id) and that
        // the file does not name: an invitation or a join that came first ends.
        let lookalikes: Vec<(usize, String)> = self
            .members
            .iter()
            .filter(|(_, m)| {
                m.origin != Origin::Configured && !m.removed && new.participant(&m.id).is_none()
            })
            .filter_map(|(i, m)| {
                new.participants
                    .iter()
                    .find(|p| crate::participant_id::confusable(&p.id, &m.id))
                    .map(|_| (i, m.id.to_string()))
            })
            .collect();
        for (idx, id) in lookalikes {
            let disconnected = self.end_holder(idx, &mut to_close);
            self.members.get_mut(idx).removed = true;
            changes.push(ConfigChange::InvitationEnded {
                participant: id,
                disconnected,
            });
        }
        // Entries that are gone: removed from the space, as by a kick.
        let gone: Vec<usize> = self
            .members
            .iter()
            .filter(|(_, m)| {
                m.origin == Origin::Configured && !m.removed && new.participant(&m.id).is_none()
            })
            .map(|(i, _)| i)
            .collect();
        for idx in gone {
            self.members.remove_tokens(idx);
            let m = self.members.get_mut(idx);
            m.removed = true;
            m.grants.clear();
            m.hold = Hold::None;
            m.recompute_caps();
            let id = m.id.to_string();
            let conns = m.conns.clone();
            let was_virtual = m.virtual_log.take().is_some();
            if !conns.is_empty() {
                for &c in conns.as_slice() {
                    to_close.push((c, REMOVED));
                }
            } else if was_virtual {
                self.rebuild_audience();
                self.close_streams_of(now, &id);
                self.send_presence_leave(now, &id);
            }
            changes.push(ConfigChange::Removed {
                participant: id,
                disconnected: !conns.is_empty(),
            });
        }
        if new.default_capabilities.to_json() != self.config.default_capabilities.to_json() {
            changes.push(ConfigChange::Defaults);
        }
        if new.gateway != self.config.gateway || new.logging != self.config.logging {
            changes.push(ConfigChange::Settings);
        }
        let logging = new.logging;
        self.audit_envelopes = logging.enabled && logging.envelope_history;
        self.audit_capabilities = logging.enabled && logging.capability_decisions;
        self.config = new;
        self.rebuild_audience();
        // A shorter idle timeout may bring connections' timers forward.
        self.conn_timer = self.earliest_conn_timer();
        for (c, reason) in to_close {
            if let Some(conn) = self.conns.get_mut(c)
                && conn.phase != Phase::Closed
            {
                self.close_conn(now, c, 1008, reason, reason);
            }
        }
        if self.audit_envelopes {
            for c in &changes {
                self.audit_envelope(
                    now,
                    "configuration_changed",
                    None,
                    None,
                    false,
                    Arc::from(c.participant()),
                    Direction::Inbound,
                    Transport::Config,
                    Some(c.metadata()),
                );
            }
        }
        self.finish_closes(now);
        Ok(changes)
    }
}
