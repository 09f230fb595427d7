//! Snapshots of a space's state, for a space replicated over a log: a node that starts
//! restores the latest snapshot and applies the log's entries after it.
//!
//! A snapshot holds everything that decides what the space does next (members, grants,
//! tokens as digests, holds, rate buckets, connections and their timers, streams, the polling
//! history, the proposal workflow, refusal windows, the id generator). It leaves out what
//! each node keeps for itself: counters for metrics and the unwritten backlog of connections
//! (a replicated space tracks backlogs at the node that holds the socket). The space's
//! configuration is not in it: every node loads the same `space.yaml`, and a snapshot taken
//! under another configuration is refused by the fingerprint it carries.

use super::conn::{Conn, Phase, Slot};
use super::crowd::{Change, Gathered};
use super::deliver::Seen;
use super::member::{Conns, Grant, Hold, Member, Origin};
use super::rate::Bucket;
use super::{ConnId, Gateway, SpaceConfig, audit::RefusalWindow, audit::Transport};
use crate::Time;
use crate::capability::{Capability, CapabilitySet};
use crate::ids::IdGen;
use crate::secret::TokenHash;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// Why a snapshot could not be taken or restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// Outputs are still queued: drain `poll_output` first.
    #[error("outputs are still queued; drain them before taking a snapshot")]
    NotDrained,
    /// The snapshot was taken under another configuration.
    #[error("the snapshot was taken under another space configuration")]
    OtherConfig,
    /// The bytes are not a snapshot of this version.
    #[error("not a space snapshot: {0}")]
    Malformed(String),
}

#[derive(Serialize, Deserialize)]
pub(crate) struct State {
    config: String,
    ids: u64,
    next_envelope: u64,
    conns: Vec<SConnSlot>,
    conn_free: Vec<u32>,
    members: Vec<Option<SMember>>,
    member_free: Vec<usize>,
    by_token: Vec<(String, usize)>,
    ambiguous: Vec<String>,
    streams_next: u64,
    streams: Vec<SStream>,
    history: Vec<SHistory>,
    proposals: Vec<(String, String)>,
    fulfilments: Vec<(String, String)>,
    refusals: Vec<(String, SRefusal)>,
    /// A crowd's joins and leaves waiting for their batch (absent from older snapshots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    presence: Option<SGathered>,
    /// The bound under connections' timers: part of the state, since it decides when the
    /// space's timers run (absent from older snapshots: computed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    conn_timer: Option<Time>,
}

#[derive(Serialize, Deserialize)]
struct SGathered {
    /// Each change: the participant and, for a join, its capabilities.
    changes: Vec<(String, Option<Value>)>,
    omitted: usize,
    due: Time,
}

#[derive(Serialize, Deserialize)]
struct SConnSlot {
    generation: u32,
    conn: Option<SConn>,
}

#[derive(Serialize, Deserialize)]
struct SConn {
    phase: Phase,
    last_activity: Time,
    next_ping: Time,
    /// When the verified token it joined with expires: a replica restored from the
    /// snapshot closes it then, as the others do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires: Option<Time>,
    /// The digest of the listed token it joined with (a reload removing it closes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    joined_with: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct SMember {
    id: String,
    origin: Origin,
    tokens: Vec<String>,
    static_caps: Value,
    grants: Vec<SGrant>,
    /// Its oldest connection (a snapshot of one connection per member reads as before).
    conn: Option<ConnId>,
    /// Its other connections, when it holds several.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    more_conns: Vec<ConnId>,
    virtual_log: Option<String>,
    hold: Hold,
    removed: bool,
    bucket: Bucket,
}

#[derive(Serialize, Deserialize)]
struct SGrant {
    grant_id: String,
    granter: String,
    caps: Vec<Value>,
}

#[derive(Serialize, Deserialize)]
struct SStream {
    id: String,
    owner: String,
    open_id: String,
    json: Value,
    /// Empty in snapshots taken before write access existed: the owner alone.
    #[serde(default)]
    writers: Vec<String>,
    #[serde(default)]
    target: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize)]
struct SHistory {
    at: Time,
    frame: String,
    /// `None`: everyone may see it.
    seen: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize)]
struct SRefusal {
    until: Time,
    logged: u32,
    suppressed: u64,
    transport: Transport,
}

/// A fingerprint of a configuration: the digest of its debug form (ordered maps only, so
/// the same `space.yaml` gives the same fingerprint on every node).
fn fingerprint(config: &SpaceConfig) -> String {
    // How the state is kept on disk is no part of the state.
    let mut c = config.clone();
    c.gateway.durability = None;
    TokenHash::of(&format!("{c:?}")).to_hex()
}

fn caps_from(v: &Value) -> Result<CapabilitySet, SnapshotError> {
    let list = v
        .as_array()
        .ok_or_else(|| SnapshotError::Malformed("capabilities must be a list".into()))?;
    CapabilitySet::compile(list).map_err(|e| SnapshotError::Malformed(e.to_string()))
}

fn hash(hex: &str) -> Result<TokenHash, SnapshotError> {
    TokenHash::from_hex(hex).ok_or_else(|| SnapshotError::Malformed("bad token digest".into()))
}

impl Gateway {
    pub(super) fn snapshot_with(&self, at_rest: bool) -> Result<Vec<u8>, SnapshotError> {
        if !self.out.is_empty() || !self.pending_leaves.is_empty() {
            return Err(SnapshotError::NotDrained);
        }
        let m = &self.members;
        let state = State {
            config: fingerprint(&self.config),
            ids: self.ids.state(),
            next_envelope: self.next_envelope,
            conns: self
                .conns
                .slots
                .iter()
                .map(|s| SConnSlot {
                    generation: s.generation,
                    conn: s.conn.as_ref().map(|c| SConn {
                        phase: c.phase,
                        last_activity: c.last_activity,
                        next_ping: c.next_ping,
                        expires: c.expires,
                        joined_with: c.joined_with.as_ref().map(TokenHash::to_hex),
                    }),
                })
                .collect(),
            conn_free: self.conns.free.clone(),
            members: m
                .slots
                .iter()
                .map(|s| {
                    s.as_ref().map(|m| SMember {
                        id: m.id.to_string(),
                        origin: m.origin,
                        tokens: m.tokens.iter().map(TokenHash::to_hex).collect(),
                        static_caps: m.static_caps.to_json(),
                        grants: m
                            .grants
                            .iter()
                            .map(|g| SGrant {
                                grant_id: g.grant_id.clone(),
                                granter: g.granter.to_string(),
                                caps: g.caps.iter().map(|c| c.raw().clone()).collect(),
                            })
                            .collect(),
                        conn: m.conns.first(),
                        more_conns: m.conns.as_slice().iter().skip(1).copied().collect(),
                        virtual_log: m.virtual_log.clone(),
                        hold: m.hold,
                        removed: m.removed,
                        bucket: m.bucket.clone(),
                    })
                })
                .collect(),
            member_free: m.free.clone(),
            by_token: m.by_token.iter().map(|(h, i)| (h.to_hex(), *i)).collect(),
            ambiguous: m.ambiguous.iter().map(TokenHash::to_hex).collect(),
            streams_next: self.streams.next,
            streams: self
                .streams
                .open
                .iter()
                .map(|s| SStream {
                    id: s.id.clone(),
                    owner: s.owner.to_string(),
                    open_id: s.open_id.clone(),
                    json: s.json.clone(),
                    writers: s.writers.iter().map(|w| w.to_string()).collect(),
                    target: s
                        .target
                        .as_ref()
                        .map(|t| t.iter().map(|w| w.to_string()).collect()),
                })
                .collect(),
            history: self
                .history
                .entries
                .iter()
                .filter(|e| {
                    !(at_rest
                        && memchr::memmem::find(&e.frame, br#""kind":"space/invite-ack""#)
                            .is_some())
                })
                .map(|e| SHistory {
                    at: e.at,
                    frame: String::from_utf8_lossy(&e.frame).into_owned(),
                    seen: match &e.seen {
                        Seen::All => None,
                        Seen::Only(who) => Some(who.iter().map(|w| w.to_string()).collect()),
                    },
                })
                .collect(),
            proposals: pairs(self.workflow.proposals.entries()),
            fulfilments: pairs(self.workflow.fulfilments.entries()),
            refusals: self
                .refusals
                .iter()
                .map(|(k, w)| {
                    (
                        k.to_string(),
                        SRefusal {
                            until: w.until,
                            logged: w.logged,
                            suppressed: w.suppressed,
                            transport: w.transport,
                        },
                    )
                })
                .collect(),
            presence: self.gathered.due.map(|due| SGathered {
                changes: self
                    .gathered
                    .changes
                    .iter()
                    .map(|c| match c {
                        Change::Join { id, caps, .. } => (id.to_string(), Some(caps.to_json())),
                        Change::Leave { id } => (id.to_string(), None),
                    })
                    .collect(),
                omitted: self.gathered.omitted,
                due,
            }),
            conn_timer: self.conn_timer,
        };
        serde_json::to_vec(&state).map_err(|e| SnapshotError::Malformed(e.to_string()))
    }

    /// [`Gateway::restore`]'s work.
    pub(super) fn from_snapshot(
        config: SpaceConfig,
        snapshot: &[u8],
        tokens: Box<dyn crate::secret::TokenSource>,
        verifier: Option<std::sync::Arc<dyn super::IdentityVerifier>>,
    ) -> Result<Gateway, SnapshotError> {
        let s: State = serde_json::from_slice(snapshot)
            .map_err(|e| SnapshotError::Malformed(e.to_string()))?;
        if s.config != fingerprint(&config) {
            return Err(SnapshotError::OtherConfig);
        }
        let mut g = Gateway::new(config, 0, tokens, verifier);
        g.ids = IdGen::new(s.ids);
        g.next_envelope = s.next_envelope;
        let mut conns = Vec::with_capacity(s.conns.len());
        for c in s.conns {
            let conn = match c.conn {
                Some(c) => Some(Conn {
                    phase: c.phase,
                    last_activity: c.last_activity,
                    next_ping: c.next_ping,
                    queued_frames: 0,
                    queued_bytes: 0,
                    expires: c.expires,
                    joined_with: c.joined_with.as_deref().map(hash).transpose()?,
                }),
                None => None,
            };
            conns.push(Slot {
                generation: c.generation,
                conn,
            });
        }
        g.conns.slots = conns;
        g.conns.live = g.conns.slots.iter().filter(|s| s.conn.is_some()).count();
        g.conns.free = s.conn_free;
        let mut slots = Vec::with_capacity(s.members.len());
        for m in s.members {
            let Some(m) = m else {
                slots.push(None);
                continue;
            };
            let mut grants = Vec::with_capacity(m.grants.len());
            for gr in m.grants {
                let caps = gr
                    .caps
                    .into_iter()
                    .map(Capability::compile)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| SnapshotError::Malformed(e.to_string()))?;
                grants.push(Grant {
                    grant_id: gr.grant_id,
                    granter: Arc::from(gr.granter),
                    caps,
                });
            }
            let static_caps = caps_from(&m.static_caps)?;
            let mut member = Member {
                id: Arc::from(m.id),
                origin: m.origin,
                tokens: m.tokens.iter().map(|t| hash(t)).collect::<Result<_, _>>()?,
                caps: Arc::new(static_caps.clone()),
                static_caps,
                grants,
                conns: Default::default(),
                virtual_log: m.virtual_log,
                hold: m.hold,
                removed: m.removed,
                bucket: m.bucket,
            };
            member.recompute_caps();
            if let Some(p) = g
                .config
                .participant(&member.id)
                .filter(|_| member.origin == Origin::Configured)
            {
                member.conns = Conns::for_entry(p);
            }
            member.conns.restore(m.conn.into_iter().chain(m.more_conns));
            slots.push(Some(member));
        }
        let members = &mut g.members;
        members.by_id = slots
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.as_ref().map(|m| (m.id.clone(), i)))
            .collect();
        members.slots = slots;
        members.index_skeletons();
        members.free = s.member_free;
        members.by_token = s
            .by_token
            .iter()
            .map(|(h, i)| Ok((hash(h)?, *i)))
            .collect::<Result<_, SnapshotError>>()?;
        members.ambiguous = s
            .ambiguous
            .iter()
            .map(|h| hash(h))
            .collect::<Result<_, _>>()?;
        if members
            .by_token
            .values()
            .any(|&i| members.slots.get(i).is_none_or(Option::is_none))
        {
            return Err(SnapshotError::Malformed("a token of no member".into()));
        }
        g.streams.next = s.streams_next;
        g.streams.open = s
            .streams
            .into_iter()
            .map(|st| {
                let owner: Arc<str> = Arc::from(st.owner);
                let writers = if st.writers.is_empty() {
                    vec![owner.clone()]
                } else {
                    st.writers.into_iter().map(Arc::from).collect()
                };
                super::streams::Stream {
                    id: st.id,
                    owner,
                    open_id: st.open_id,
                    writers,
                    target: st.target.map(|t| t.into_iter().map(Arc::from).collect()),
                    json: st.json,
                }
            })
            .collect();
        for h in s.history {
            let seen = match h.seen {
                None => Seen::All,
                Some(who) => Seen::Only(who.into_iter().map(Arc::from).collect()),
            };
            g.history.push(h.at, Bytes::from(h.frame), seen);
        }
        for (id, p) in s.proposals {
            g.workflow.proposals.insert(&id, Arc::from(p));
        }
        for (id, p) in s.fulfilments {
            g.workflow.fulfilments.insert(&id, Arc::from(p));
        }
        for (k, w) in s.refusals {
            g.refusals.insert(
                Arc::from(k),
                RefusalWindow {
                    until: w.until,
                    logged: w.logged,
                    suppressed: w.suppressed,
                    transport: w.transport,
                },
            );
        }
        if let Some(p) = s.presence {
            let mut changes = Vec::with_capacity(p.changes.len());
            for (id, caps) in p.changes {
                let id: Arc<str> = Arc::from(id);
                changes.push(match caps {
                    Some(c) => Change::Join {
                        // The mark is the configuration's, which the snapshot's matches.
                        person: g
                            .members
                            .find(&id)
                            .is_some_and(|i| g.members.get(i).conns.person()),
                        id,
                        caps: Arc::new(caps_from(&c)?),
                    },
                    None => Change::Leave { id },
                });
            }
            g.gathered = Gathered {
                changes,
                omitted: p.omitted,
                due: Some(p.due),
            };
        }
        g.rebuild_audience();
        g.timed_pauses = g.any_timed_pause();
        g.conn_timer = s.conn_timer.or_else(|| g.earliest_conn_timer());
        Ok(g)
    }
}

fn pairs<'a>(it: impl Iterator<Item = (&'a str, &'a Arc<str>)>) -> Vec<(String, String)> {
    it.map(|(k, v)| (k.to_owned(), v.to_string())).collect()
}
