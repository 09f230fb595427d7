//! Streams: `stream/request` answered with `stream/open`, `#id#data` frames from the
//! stream's writers only, `stream/close` by the owner or the gateway, write access and
//! ownership ([s2w]), targeted delivery ([t5d]), and `active_streams` for late joiners.
//!
//! `stream/open` (`payload: {stream_id, encoding: "text", owner, authorized_writers,
//! target?}`, `to: [requester]`, `correlation_id: [request id]`) is delivered like the
//! request: to everyone in `all` mode, to the requester and its targets in `addressed` mode.
//! A request's `target` (participant ids present in the space, else `target_not_found`)
//! limits who receives the stream's frames to the targets and the owner; without it frames
//! go to everyone (`all`) or everyone but the writer (`addressed`), forwarded unchanged.
//!
//! Writers: the owner always, plus whoever the owner grants (`stream/grant-write`) until it
//! revokes them (`stream/revoke-write`) or they leave the space. `stream/transfer-ownership`
//! hands the stream to another participant present in the space; the previous owner loses
//! write access with it (as the reference does). Each change is announced to everyone with
//! `stream/write-granted`, `stream/write-revoked` or `stream/ownership-transferred`, which
//! replace the request envelope (the reference does not forward it either). A frame from a
//! participant that may not write is refused with `unauthorized_stream_write` naming the
//! `stream_id`.
//!
//! The stream a `stream/close` ends is named by `payload.stream_id`, or by a
//! `correlation_id` holding the stream id or the id of its `stream/open`. A close that names
//! no stream of the gateway is an envelope like any other (participants may negotiate
//! streams between themselves, as the reference's scenarios do) and is forwarded; a close of
//! a gateway stream by anyone but its owner is refused.

use super::config::DeliveryMode;
use super::deliver::Recipient;
use super::member::Hold;
use super::op::Op;
use super::refusal::Refusal;
use super::{ConnId, Gateway, GatewayEvent};
use crate::Time;
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};
use std::sync::Arc;

pub(super) struct Stream {
    pub(super) id: String,
    pub(super) owner: Arc<str>,
    pub(super) open_id: String,
    /// Who may write frames: the owner first, then the participants it granted.
    pub(super) writers: Vec<Arc<str>>,
    /// [t5d]: the only recipients of frames (besides the owner); `None` for everyone.
    pub(super) target: Option<Vec<Arc<str>>>,
    /// The request's payload plus `stream_id`, `owner`, `created`: the welcome's entry
    /// (with `authorized_writers` added when it is shown).
    pub(super) json: Value,
}

impl Stream {
    /// The welcome's `active_streams` entry.
    fn entry(&self) -> Value {
        let mut v = self.json.clone();
        if let Value::Object(m) = &mut v {
            m.insert("owner".into(), Value::String(self.owner.to_string()));
            m.insert("authorized_writers".into(), ids_json(&self.writers));
        }
        v
    }
}

/// Open streams in creation order.
#[derive(Default)]
pub(super) struct Streams {
    pub(super) next: u64,
    pub(super) open: Vec<Stream>,
}

impl Streams {
    pub(super) fn len(&self) -> usize {
        self.open.len()
    }

    pub(super) fn active_json(&self) -> Vec<Value> {
        self.open.iter().map(Stream::entry).collect()
    }

    fn find(&self, id: &str) -> Option<usize> {
        self.open.iter().position(|s| s.id == id)
    }
}

/// Participant ids as a JSON array of strings.
#[derive(Clone, Copy)]
struct Ids<'a>(&'a [Arc<str>]);

impl Serialize for Ids<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|i| &**i))
    }
}

fn ids_json(ids: &[Arc<str>]) -> Value {
    Value::Array(ids.iter().map(|i| Value::String(i.to_string())).collect())
}

#[derive(Serialize)]
struct OpenPayload<'a> {
    stream_id: &'a str,
    encoding: &'static str,
    owner: &'a str,
    authorized_writers: Ids<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<Ids<'a>>,
}

#[derive(Serialize)]
struct ClosePayload<'a> {
    stream_id: &'a str,
    reason: &'a str,
}

#[derive(Serialize)]
struct WritersChanged<'a> {
    stream_id: &'a str,
    participant_id: &'a str,
    authorized_writers: Ids<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

#[derive(Serialize)]
struct OwnerChanged<'a> {
    stream_id: &'a str,
    previous_owner: &'a str,
    new_owner: &'a str,
    authorized_writers: Ids<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

/// A write-access notification's payload.
#[derive(Serialize)]
#[serde(untagged)]
enum WriteChange<'a> {
    Writers(WritersChanged<'a>),
    Owner(OwnerChanged<'a>),
}

/// The three write-access operations of [s2w].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WriteOp {
    Grant,
    Revoke,
    Transfer,
}

impl WriteOp {
    pub(super) fn of(kind: &str) -> Option<WriteOp> {
        match kind {
            "stream/grant-write" => Some(WriteOp::Grant),
            "stream/revoke-write" => Some(WriteOp::Revoke),
            "stream/transfer-ownership" => Some(WriteOp::Transfer),
            _ => None,
        }
    }
}

impl Gateway {
    /// Whether `id` names a member present in the space (on a connection or held by the
    /// gateway): targets, new writers and new owners must be.
    fn present(&self, id: &str) -> bool {
        self.members
            .find(id)
            .is_some_and(|i| self.members.get(i).is_online())
    }

    pub(super) fn op_stream_request(
        &mut self,
        now: Time,
        op: &Op<'_, '_>,
        frame: &Bytes,
        id: Option<&str>,
    ) -> Result<(), Refusal> {
        if self.streams.len() >= self.config.gateway.max_streams {
            return Err(Refusal::new(
                "too_many_streams",
                format!(
                    "the space already has {} open streams",
                    self.config.gateway.max_streams
                ),
            )
            .about_id(op.id));
        }
        let payload = op.payload();
        let target = match payload.get("target") {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) => {
                let mut ids: Vec<Arc<str>> = Vec::with_capacity(a.len());
                for t in a {
                    let Some(t) = t.as_str() else {
                        return Err(Refusal::new(
                            "invalid_envelope",
                            "payload.target must be an array of participant ids",
                        )
                        .about_id(op.id));
                    };
                    if !ids.iter().any(|i| &**i == t) {
                        ids.push(Arc::from(t));
                    }
                }
                let missing: Vec<&str> = ids
                    .iter()
                    .map(|t| &**t)
                    .filter(|t| !self.present(t))
                    .collect();
                if !missing.is_empty() {
                    return Err(Refusal::new(
                        "target_not_found",
                        "One or more target participants do not exist in space",
                    )
                    .with("targets", json!(missing))
                    .about_id(op.id));
                }
                // An empty target is no target (broadcast), as the spec says.
                (!ids.is_empty()).then_some(ids)
            }
            Some(_) => {
                return Err(Refusal::new(
                    "invalid_envelope",
                    "payload.target must be an array of participant ids",
                )
                .about_id(op.id));
            }
        };
        self.deliver_envelope(now, frame, id, op.member, op.to);
        self.streams.next += 1;
        let stream_id = format!("stream-{}", self.streams.next);
        let owner = self.members.get(op.member).id.clone();
        let mut json = match payload {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        // The gateway's fields win over look-alikes in the request (a request cannot name
        // another owner or writers).
        json.insert("stream_id".into(), Value::String(stream_id.clone()));
        json.insert("owner".into(), Value::String(owner.to_string()));
        json.remove("authorized_writers");
        json.insert("created".into(), Value::String(now.rfc3339()));
        let writers = vec![owner.clone()];
        let open_id = self.envelope_id();
        let open = super::system::write(
            &open_id,
            now,
            Some(&owner),
            "stream/open",
            Some(op.id),
            OpenPayload {
                stream_id: &stream_id,
                encoding: "text",
                owner: &owner,
                authorized_writers: Ids(&writers),
                target: target.as_deref().map(Ids),
            },
        );
        self.http_answer = Some(json!({
            "id": open_id, "status": "stream_opened", "stream_id": stream_id,
            "timestamp": now.rfc3339(),
        }));
        let targets = target.clone();
        self.streams.open.push(Stream {
            id: stream_id.clone(),
            owner: owner.clone(),
            open_id: open_id.clone(),
            writers,
            target,
            json: Value::Object(json),
        });
        self.push_event(GatewayEvent::StreamOpened {
            stream_id,
            owner: owner.to_string(),
        });
        match self.config.gateway.delivery {
            DeliveryMode::All => self.gateway_broadcast(now, open, &open_id, None),
            DeliveryMode::Addressed => {
                self.gateway_to_member(now, op.member, open.clone(), &open_id);
                for t in targets.iter().flatten() {
                    if let Some(i) = self.members.find(t)
                        && i != op.member
                    {
                        self.gateway_to_member(now, i, open.clone(), &open_id);
                    }
                }
            }
        }
        self.finish_closes(now);
        Ok(())
    }

    pub(super) fn op_stream_close(
        &mut self,
        now: Time,
        op: &Op<'_, '_>,
        frame: &Bytes,
        id: Option<&str>,
    ) -> Result<(), Refusal> {
        let payload = op.payload();
        let named = payload.get("stream_id").and_then(Value::as_str);
        let pos = match named {
            Some(s) => self.streams.find(s),
            None => op.view.correlation_id.as_ref().and_then(|c| {
                c.iter().find_map(|cid| {
                    self.streams
                        .open
                        .iter()
                        .position(|s| s.id == cid || s.open_id == cid)
                })
            }),
        };
        if let Some(pos) = pos {
            let sender = self.members.get(op.member).id.clone();
            if self.streams.open[pos].owner != sender {
                return Err(Refusal::new(
                    "stream_not_owned",
                    format!(
                        "stream {} belongs to another participant",
                        self.streams.open[pos].id
                    ),
                )
                .with("stream_id", self.streams.open[pos].id.clone())
                .about_id(op.id));
            }
            let s = self.streams.open.remove(pos);
            self.push_event(GatewayEvent::StreamClosed { stream_id: s.id });
        }
        // Not a stream of the gateway: the participants' own business, forwarded.
        self.deliver_envelope(now, frame, id, op.member, op.to);
        Ok(())
    }

    /// `stream/grant-write`, `stream/revoke-write` and `stream/transfer-ownership`.
    pub(super) fn op_stream_write(
        &mut self,
        now: Time,
        op: &Op<'_, '_>,
        what: WriteOp,
    ) -> Result<(), Refusal> {
        let payload = op.payload();
        let field = |name: &str| -> Result<String, Refusal> {
            payload
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    Refusal::new("invalid_envelope", format!("payload.{name} is required"))
                        .about_id(op.id)
                })
        };
        let stream_id = field("stream_id")?;
        let who = field(if what == WriteOp::Transfer {
            "new_owner"
        } else {
            "participant_id"
        })?;
        let reason = payload.get("reason").and_then(Value::as_str);
        let Some(pos) = self.streams.find(&stream_id) else {
            return Err(Refusal::new(
                "stream_not_found",
                format!("Stream {stream_id} does not exist"),
            )
            .with("stream_id", stream_id)
            .about_id(op.id));
        };
        let sender = self.members.get(op.member).id.clone();
        if self.streams.open[pos].owner != sender {
            let action = match what {
                WriteOp::Grant => "grant write access",
                WriteOp::Revoke => "revoke write access",
                WriteOp::Transfer => "transfer ownership",
            };
            return Err(Refusal::new(
                "unauthorized",
                format!("Only the stream owner can {action}"),
            )
            .with("stream_id", stream_id)
            .about_id(op.id));
        }
        if what != WriteOp::Revoke && !self.present(&who) {
            return Err(Refusal::new(
                "participant_not_found",
                format!("Participant {who} is not in the space"),
            )
            .with("stream_id", stream_id)
            .about_id(op.id));
        }
        if what == WriteOp::Revoke && *who == *sender {
            return Err(
                Refusal::new("invalid_operation", "Owner cannot revoke own write access")
                    .with("stream_id", stream_id)
                    .about_id(op.id),
            );
        }
        let ack_id = self.envelope_id();
        let s = &mut self.streams.open[pos];
        let mut previous = None;
        let (kind, status) = match what {
            WriteOp::Grant => {
                if !s.writers.iter().any(|w| **w == *who) {
                    s.writers.push(Arc::from(who.as_str()));
                }
                ("stream/write-granted", "granted")
            }
            WriteOp::Revoke => {
                s.writers.retain(|w| **w != *who);
                ("stream/write-revoked", "revoked")
            }
            WriteOp::Transfer => {
                let before = std::mem::replace(&mut s.owner, Arc::from(who.as_str()));
                s.writers.retain(|w| *w != before);
                if !s.writers.iter().any(|w| **w == *who) {
                    s.writers.insert(0, s.owner.clone());
                }
                previous = Some(before);
                ("stream/ownership-transferred", "transferred")
            }
        };
        let s = &self.streams.open[pos];
        let writers = Ids(&s.writers);
        let payload = match &previous {
            None => WriteChange::Writers(WritersChanged {
                stream_id: &stream_id,
                participant_id: &who,
                authorized_writers: writers,
                reason,
            }),
            Some(previous) => WriteChange::Owner(OwnerChanged {
                stream_id: &stream_id,
                previous_owner: previous,
                new_owner: &who,
                authorized_writers: writers,
                reason,
            }),
        };
        let mut answer = json!({
            "id": ack_id, "status": status, "stream_id": stream_id,
            "authorized_writers": ids_json(&s.writers),
        });
        if previous.is_some() {
            answer["new_owner"] = json!(&*s.owner);
        }
        let frame = super::system::write(&ack_id, now, None, kind, Some(op.id), payload);
        self.http_answer = Some(answer);
        self.gateway_broadcast(now, frame, &ack_id, None);
        self.finish_closes(now);
        Ok(())
    }

    /// Closes every stream `owner` holds, announcing each with a gateway `stream/close`, and
    /// takes back the write access `owner` was granted on the others (announced with
    /// `stream/write-revoked`).
    pub(super) fn close_streams_of(&mut self, now: Time, owner: &str) {
        while let Some(pos) = self.streams.open.iter().position(|s| &*s.owner == owner) {
            let s = self.streams.open.remove(pos);
            let cid = self.envelope_id();
            let frame = super::system::write(
                &cid,
                now,
                None,
                "stream/close",
                Some(&s.open_id),
                ClosePayload {
                    stream_id: &s.id,
                    reason: "owner_left",
                },
            );
            self.push_event(GatewayEvent::StreamClosed {
                stream_id: s.id.clone(),
            });
            self.gateway_broadcast(now, frame, &cid, None);
        }
        for pos in 0..self.streams.open.len() {
            let s = &mut self.streams.open[pos];
            let before = s.writers.len();
            s.writers.retain(|w| &**w != owner);
            if s.writers.len() == before {
                continue;
            }
            let rid = self.envelope_id();
            let s = &self.streams.open[pos];
            let frame = super::system::write(
                &rid,
                now,
                None,
                "stream/write-revoked",
                None,
                WritersChanged {
                    stream_id: &s.id,
                    participant_id: owner,
                    authorized_writers: Ids(&s.writers),
                    reason: Some("participant_left"),
                },
            );
            self.gateway_broadcast(now, frame, &rid, None);
        }
    }

    /// A `#stream_id#data` frame: forwarded unchanged when its sender may write to the open
    /// stream, to the stream's targets and owner or to everyone.
    pub(super) fn stream_data(&mut self, now: Time, conn: ConnId, member: usize, frame: Bytes) {
        let max = self.config.gateway.limits.max_frame_bytes;
        let mut pos = None;
        let refusal = if frame.len() > max {
            Some(Refusal::new(
                "frame_too_large",
                format!(
                    "frame of {} bytes exceeds the limit of {max} bytes",
                    frame.len()
                ),
            ))
        } else {
            match memchr::memchr(b'#', &frame[1..]) {
                None => Some(Refusal::new(
                    "invalid_stream_frame",
                    "stream frames look like #<stream_id>#<data>",
                )),
                Some(end) => {
                    let sid = &frame[1..1 + end];
                    let m = self.members.get(member);
                    pos = self
                        .streams
                        .open
                        .iter()
                        .position(|s| s.id.as_bytes() == sid);
                    match pos.map(|p| &self.streams.open[p]) {
                        None => Some(
                            Refusal::new(
                                "unknown_stream",
                                format!("no open stream {}", String::from_utf8_lossy(sid)),
                            )
                            .with("stream_id", String::from_utf8_lossy(sid).into_owned()),
                        ),
                        Some(s) if !s.writers.contains(&m.id) => Some(
                            Refusal::new(
                                "unauthorized_stream_write",
                                format!("You are not authorized to write to stream {}", s.id),
                            )
                            .with("stream_id", s.id.clone()),
                        ),
                        Some(_) => match m.hold {
                            Hold::None => None,
                            Hold::Paused(_) => Some(Refusal::new(
                                "participant_paused",
                                "you are paused; stream data is held until resumed",
                            )),
                            Hold::ShutDown => Some(Refusal::new(
                                "participant_shutdown",
                                "you were shut down; rejoin the space to send again",
                            )),
                        },
                    }
                }
            }
        };
        if let Some(r) = refusal {
            self.refuse_ws(now, conn, member, r, None);
            return;
        }
        let skip_sender = self.config.gateway.delivery == DeliveryMode::Addressed;
        if let Some(p) = pos
            && let Some(targets) = &self.streams.open[p].target
        {
            // [t5d]: the targets and the owner, each once, in the order named.
            let s = &self.streams.open[p];
            let mut to: smallvec::SmallVec<[usize; 4]> = smallvec::SmallVec::new();
            for t in std::iter::once(&s.owner).chain(targets.iter()) {
                if let Some(i) = self.members.find(t)
                    && !to.contains(&i)
                    && !(skip_sender && i == member)
                {
                    to.push(i);
                }
            }
            for i in to {
                if let Some(r) = Recipient::of(i, self.members.get(i)) {
                    self.data_to(now, r, &frame);
                }
            }
            return;
        }
        for i in 0..self.audience.len() {
            let Some(&r) = self.audience.get(i) else {
                break;
            };
            match r {
                Recipient::Conn { member: m, .. } | Recipient::Many { member: m }
                    if skip_sender && m == member => {}
                _ => self.data_to(now, r, &frame),
            }
        }
    }

    /// Hands a stream frame to one recipient (each of its connections, or its log).
    fn data_to(&mut self, now: Time, r: Recipient, frame: &Bytes) {
        match r {
            Recipient::Conn { conn, .. } => {
                self.transmit(now, conn, frame.clone());
            }
            Recipient::Many { member } => {
                let mut k = 0;
                while let Some(&conn) = self.members.get(member).conns.as_slice().get(k) {
                    k += 1;
                    self.transmit(now, conn, frame.clone());
                }
            }
            Recipient::Virtual { member } => {
                if let Some(path) = self.members.get(member).virtual_log.clone() {
                    self.append_log(path, frame);
                }
            }
        }
    }
}
