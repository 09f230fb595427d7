//! Streams: `stream/request`, tracking `stream/open` by correlation and `stream/close`,
//! ownership, and sending data frames on owned streams only.

use super::Participant;
use super::error::CommandError;
use super::event::Event;
use crate::envelope::{Envelope, Kind};
use crate::time::Time;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Our relation to a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamRole {
    /// We requested it; we may send on it.
    Owner,
    /// Someone else's.
    Observer,
}

/// A stream known to this participant.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamInfo {
    /// Stream id.
    pub stream_id: String,
    /// Owner's id.
    pub owner: String,
    /// Our role.
    pub role: StreamRole,
    /// The request payload (direction, description, ...), when known.
    pub metadata: Value,
    /// Id of the `stream/open` envelope, which a `stream/close` correlates with.
    pub open_id: Option<String>,
    /// Who may write frames (\[s2w\] `authorized_writers`; the owner alone when the gateway
    /// does not say).
    pub writers: Vec<String>,
}

/// `authorized_writers` of a gateway payload, or the owner alone.
fn writers_of(v: &Value, owner: &str) -> Vec<String> {
    match v.get("authorized_writers").and_then(Value::as_array) {
        Some(a) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        None => vec![owner.to_owned()],
    }
}

#[derive(Debug, Default)]
pub(super) struct Streams {
    /// Our `stream/request` id -> its payload.
    requested: BTreeMap<String, Value>,
    open: BTreeMap<String, StreamInfo>,
}

impl Participant {
    /// Sends a `stream/request` (payload needs `direction`, `"upload"` or `"download"`);
    /// the stream is ours once the matching `stream/open` arrives ([`Event::StreamOpened`]).
    pub fn request_stream(
        &mut self,
        now: Time,
        payload: Value,
        to: Vec<String>,
    ) -> Result<String, CommandError> {
        match payload.get("direction").and_then(Value::as_str) {
            Some("upload" | "download") => {}
            other => {
                return Err(CommandError::InvalidPayload {
                    field: "direction",
                    reason: format!(
                        "must be \"upload\" or \"download\", not {}",
                        other.map_or("missing".to_owned(), |d| format!("{d:?}"))
                    ),
                });
            }
        }
        let max = self.config.bounds.max_streams;
        if self.streams.requested.len() + self.streams.open.len() >= max {
            return Err(CommandError::Full {
                what: "streams",
                max,
            });
        }
        let env = self.build(
            now,
            Kind::StreamRequest,
            to,
            Vec::new(),
            None,
            Some(payload.clone()),
        );
        let id = env.id.clone();
        self.send_checked(env)?;
        self.streams.requested.insert(id.clone(), payload);
        Ok(id)
    }

    /// Streams known (owned or observed).
    pub fn streams(&self) -> impl Iterator<Item = &StreamInfo> {
        self.streams.open.values()
    }

    /// Sends one data frame on a stream we own or were granted write access to.
    pub fn send_stream_data(&mut self, stream_id: &str, data: &str) -> Result<(), CommandError> {
        let me = self.me();
        match self.streams.open.get(stream_id) {
            Some(s) if s.role == StreamRole::Owner || s.writers.iter().any(|w| w == me) => {
                Ok(self.client.send_stream_frame(stream_id, data)?)
            }
            _ => Err(CommandError::NotStreamOwner(stream_id.to_owned())),
        }
    }

    /// Closes a stream we own (`stream/close`).
    pub fn close_stream(
        &mut self,
        now: Time,
        stream_id: &str,
        reason: &str,
    ) -> Result<(), CommandError> {
        match self.streams.open.get(stream_id) {
            Some(s) if s.role == StreamRole::Owner => {}
            _ => return Err(CommandError::NotStreamOwner(stream_id.to_owned())),
        }
        let info = self.streams.open.remove(stream_id);
        let env = self.build(
            now,
            Kind::StreamClose,
            Vec::new(),
            info.and_then(|i| i.open_id).into_iter().collect(),
            None,
            Some(json!({"stream_id": stream_id, "reason": reason})),
        );
        self.send_checked(env)?;
        Ok(())
    }

    pub(super) fn close_owned_streams(&mut self, now: Time, reason: &str) {
        let owned: Vec<String> = self
            .streams
            .open
            .values()
            .filter(|s| s.role == StreamRole::Owner)
            .map(|s| s.stream_id.clone())
            .collect();
        for id in owned {
            let _ = self.close_stream(now, &id, reason);
        }
        self.streams.requested.clear();
    }

    pub(super) fn streams_from_welcome(&mut self, list: &[Value], max: usize) {
        let me = self.me().to_owned();
        // The welcome lists every active stream: ours that are missing ended while we
        // were away (a reconnect), and so did others'.
        let listed = |id: &str| {
            list.iter()
                .any(|s| s.get("stream_id").and_then(Value::as_str) == Some(id))
        };
        let gone: Vec<String> = self
            .streams
            .open
            .keys()
            .filter(|k| !listed(k))
            .cloned()
            .collect();
        for id in gone {
            self.streams.open.remove(&id);
            self.client.emit(Event::StreamClosed {
                stream_id: id,
                reason: Some("not active after rejoin".into()),
            });
        }
        for s in list {
            if self.streams.open.len() >= max {
                break;
            }
            let (Some(id), Some(owner)) = (
                s.get("stream_id").and_then(Value::as_str),
                s.get("owner").and_then(Value::as_str),
            ) else {
                continue;
            };
            let role = if owner == me {
                StreamRole::Owner
            } else {
                StreamRole::Observer
            };
            self.streams
                .open
                .entry(id.to_owned())
                .or_insert(StreamInfo {
                    stream_id: id.to_owned(),
                    owner: owner.to_owned(),
                    role,
                    metadata: s.clone(),
                    open_id: None,
                    writers: writers_of(s, owner),
                });
        }
    }

    pub(super) fn on_stream_open(&mut self, env: &Envelope) {
        let Some(stream_id) = env
            .payload
            .as_ref()
            .and_then(|p| p.get("stream_id"))
            .and_then(Value::as_str)
        else {
            return self.invalid(env, "stream/open without payload.stream_id");
        };
        let ours = env
            .first_correlation()
            .and_then(|c| self.streams.requested.remove_entry(c));
        let (role, owner, metadata, request_id) = match ours {
            Some((req, meta)) => (StreamRole::Owner, self.me().to_owned(), meta, Some(req)),
            None => {
                // The gateway names the owner ([s2w]); older gateways address it.
                let owner = env
                    .payload
                    .as_ref()
                    .and_then(|p| p.get("owner"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| env.to.as_ref().and_then(|t| t.first()).cloned())
                    .unwrap_or_default();
                (StreamRole::Observer, owner, Value::Null, None)
            }
        };
        let writers = env
            .payload
            .as_ref()
            .map_or_else(|| vec![owner.clone()], |p| writers_of(p, &owner));
        if request_id.is_none() && self.streams.open.len() >= self.config.bounds.max_streams {
            return;
        }
        self.streams.open.insert(
            stream_id.to_owned(),
            StreamInfo {
                stream_id: stream_id.to_owned(),
                owner,
                role,
                metadata,
                open_id: Some(env.id.clone()),
                writers,
            },
        );
        if let Some(request_id) = request_id {
            self.client.emit(Event::StreamOpened {
                request_id,
                stream_id: stream_id.to_owned(),
            });
        }
    }

    /// `stream/write-granted`, `stream/write-revoked`, `stream/ownership-transferred`: the
    /// gateway's word on who may write and who owns a stream.
    pub(super) fn on_stream_writers(&mut self, env: &Envelope) {
        let Some(p) = env.payload.as_ref() else {
            return;
        };
        let Some(id) = p.get("stream_id").and_then(Value::as_str) else {
            return self.invalid(env, "stream notification without payload.stream_id");
        };
        let me = self.me().to_owned();
        let Some(s) = self.streams.open.get_mut(id) else {
            return;
        };
        if let Some(owner) = p.get("new_owner").and_then(Value::as_str) {
            s.owner = owner.to_owned();
            s.role = if owner == me {
                StreamRole::Owner
            } else {
                StreamRole::Observer
            };
        }
        s.writers = writers_of(p, &s.owner);
    }

    pub(super) fn on_stream_close(&mut self, env: &Envelope) {
        let p = env.payload.as_ref();
        let id = p.and_then(|p| p.get("stream_id")).and_then(Value::as_str);
        // The spec's close correlates with the `stream/open`; the reference names the id.
        let id = match id {
            Some(id) => id.to_owned(),
            None => {
                let Some(c) = env.first_correlation() else {
                    return;
                };
                match self
                    .streams
                    .open
                    .values()
                    .find(|s| s.open_id.as_deref() == Some(c) || s.stream_id == c)
                {
                    Some(s) => s.stream_id.clone(),
                    None => return,
                }
            }
        };
        let id = id.as_str();
        if self.streams.open.remove(id).is_some() {
            self.client.emit(Event::StreamClosed {
                stream_id: id.to_owned(),
                reason: p
                    .and_then(|p| p.get("reason"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            });
        }
    }
}
