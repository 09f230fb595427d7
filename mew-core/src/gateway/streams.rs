//! Streams: `stream/request` answered with `stream/open`, `#id#data` frames from the owner
//! only, `stream/close` by the owner or the gateway, and `active_streams` for late joiners.
//!
//! `stream/open` (`payload: {stream_id, encoding: "text"}`, `to: [requester]`,
//! `correlation_id: [request id]`) is delivered like the request: to everyone in `all` mode,
//! to the requester only in `addressed` mode. Data frames go to everyone (`all`) or everyone
//! but the owner (`addressed`), forwarded unchanged. The stream a `stream/close` ends is named
//! by `payload.stream_id`, or by a `correlation_id` holding the stream id or the id of its
//! `stream/open`.

use super::config::DeliveryMode;
use super::deliver::Recipient;
use super::enforce::{Op, Refusal};
use super::member::Hold;
use super::{ConnId, Gateway, GatewayEvent, Output};
use crate::Time;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;

pub(super) struct Stream {
    pub(super) id: String,
    pub(super) owner: Arc<str>,
    pub(super) open_id: String,
    /// The request's payload plus `stream_id`, `owner`, `created`: the welcome's entry.
    pub(super) json: Value,
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

    pub(super) fn active_json(&self) -> Vec<&Value> {
        self.open.iter().map(|s| &s.json).collect()
    }

    fn find(&self, id: &str) -> Option<usize> {
        self.open.iter().position(|s| s.id == id)
    }
}

#[derive(Serialize)]
struct OpenPayload<'a> {
    stream_id: &'a str,
    encoding: &'static str,
}

#[derive(Serialize)]
struct ClosePayload<'a> {
    stream_id: &'a str,
    reason: &'a str,
}

impl Gateway {
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
        self.deliver_envelope(now, frame, id, op.member, op.to);
        self.streams.next += 1;
        let stream_id = format!("stream-{}", self.streams.next);
        let owner = self.members.get(op.member).id.clone();
        let mut json = match payload {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        // The gateway's fields win over look-alikes in the request.
        json.insert("stream_id".into(), Value::String(stream_id.clone()));
        json.insert("owner".into(), Value::String(owner.to_string()));
        json.insert("created".into(), Value::String(now.rfc3339()));
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
            },
        );
        self.streams.open.push(Stream {
            id: stream_id.clone(),
            owner: owner.clone(),
            open_id: open_id.clone(),
            json: Value::Object(json),
        });
        self.push_event(GatewayEvent::StreamOpened {
            stream_id,
            owner: owner.to_string(),
        });
        match self.config.gateway.delivery {
            DeliveryMode::All => self.gateway_broadcast(now, open, &open_id, None),
            DeliveryMode::Addressed => self.gateway_to_member(now, op.member, open, &open_id),
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
        let Some(pos) = pos else {
            return Err(Refusal::new(
                "unknown_stream",
                "no open stream matches `payload.stream_id` or `correlation_id`",
            )
            .about_id(op.id));
        };
        let sender = self.members.get(op.member).id.clone();
        if self.streams.open[pos].owner != sender {
            return Err(Refusal::new(
                "stream_not_owned",
                format!(
                    "stream `{}` belongs to another participant",
                    self.streams.open[pos].id
                ),
            )
            .about_id(op.id));
        }
        let s = self.streams.open.remove(pos);
        self.push_event(GatewayEvent::StreamClosed { stream_id: s.id });
        self.deliver_envelope(now, frame, id, op.member, op.to);
        Ok(())
    }

    /// Closes every stream `owner` holds, announcing each with a gateway `stream/close`.
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
    }

    /// A `#stream_id#data` frame: forwarded unchanged when its sender owns the open stream.
    pub(super) fn stream_data(&mut self, now: Time, conn: ConnId, member: usize, frame: Bytes) {
        let max = self.config.gateway.limits.max_frame_bytes;
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
                    "stream frames look like `#<stream_id>#<data>`",
                )),
                Some(end) => {
                    let sid = &frame[1..1 + end];
                    let m = self.members.get(member);
                    match self.streams.open.iter().find(|s| s.id.as_bytes() == sid) {
                        None => Some(Refusal::new(
                            "unknown_stream",
                            format!("no open stream `{}`", String::from_utf8_lossy(sid)),
                        )),
                        Some(s) if s.owner != m.id => Some(Refusal::new(
                            "stream_not_owned",
                            format!("stream `{}` belongs to another participant", s.id),
                        )),
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
        for i in 0..self.audience.len() {
            let Some(&r) = self.audience.get(i) else {
                break;
            };
            match r {
                Recipient::Conn { conn, member: m } => {
                    if !(skip_sender && m == member) {
                        self.transmit(now, conn, frame.clone());
                    }
                }
                Recipient::Virtual { member: m } => {
                    if let Some(path) = self.members.get(m).virtual_log.clone() {
                        let mut line = Vec::with_capacity(frame.len() + 1);
                        line.extend_from_slice(&frame);
                        line.push(b'\n');
                        self.out.push_back(Output::AppendLog {
                            path,
                            line: Bytes::from(line),
                        });
                    }
                }
            }
        }
    }
}
