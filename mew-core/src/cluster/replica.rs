//! One node's copy of a replicated space.

use super::record::{Entry, Record};
use crate::Time;
use crate::gateway::{
    Answer, Bearer, ConnId, Gateway, HttpAccepted, HttpError, IdentityVerifier, Input,
    SnapshotError, SpaceConfig,
};
use crate::secret::{Entropy, LogEntropy};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// How long a node that never announced its timeout may stay silent.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_secs(5);

/// A silence of the whole log longer than this is the log's own outage (every live node
/// beats at least once a second), not every node's death: each node's silence is counted
/// again from the end of it, so nodes are not declared gone for the log's pause.
pub const LOG_QUIET: Duration = Duration::from_secs(2);

/// Something the node that holds this replica must act on (besides the outputs of the
/// [`Gateway`] the replica holds, drained from [`Replica::gateway_mut`]).
#[derive(Debug)]
pub enum ReplicaEvent {
    /// A connection this node published has its id: answer the socket waiting for it.
    Connected {
        /// The node's number from [`Entry::Connect`].
        local: u64,
        /// The space's id for it, the same on every replica.
        conn: ConnId,
    },
    /// A `POST` this node published was applied.
    Posted {
        /// The node's number from [`Entry::Post`].
        local: u64,
        /// The gateway's answer.
        result: Result<HttpAccepted, HttpError>,
    },
    /// A node was declared gone and its connections closed.
    NodeGone {
        /// Which.
        node: String,
        /// How many connections it held.
        connections: usize,
    },
    /// This node itself was declared gone (it was cut off from the log for too long): its
    /// sockets for these connections must close, their participants having left the space.
    Evicted {
        /// The connections.
        conns: Vec<ConnId>,
    },
}

/// Why a record was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// A record is missing before this one: the replica must be rebuilt from a snapshot.
    #[error("log gap: expected entry {expected}, got {got}")]
    Gap {
        /// The sequence number the replica needed.
        expected: u64,
        /// The one it was given.
        got: u64,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct NodeState {
    last: Time,
    timeout_ms: u64,
}

/// One node's copy of a space: its [`Gateway`], and what the log adds to it (time,
/// connection owners, live nodes). The gateway's outputs are drained from
/// [`Replica::gateway_mut`] after each entry; its invitation tokens come only from the
/// entropy the entries carry ([`LogEntropy`]), so every replica mints the same.
///
/// | input | what it may queue |
/// |---|---|
/// | [`handle_record`](Self::handle_record) (entry `seq` of the log, decoded) | the gateway's outputs for the entry; `Connected`, `Posted` (this node's inputs applied), `NodeGone`, `Evicted`; `Err` on a gap |
/// | [`handle_unreadable`](Self::handle_unreadable) (entry `seq` could not be decoded) | nothing: it counts as applied on every replica alike |
///
/// Neither takes `now`: an entry takes effect at the time it carries.
pub struct Replica {
    gateway: Gateway,
    node: String,
    now: Time,
    applied: u64,
    owners: BTreeMap<ConnId, String>,
    nodes: BTreeMap<String, NodeState>,
    events: VecDeque<ReplicaEvent>,
    /// Whether the last entry applied drew a token from its entropy.
    used_entropy: bool,
}

#[derive(Serialize, Deserialize)]
struct ReplicaState<'a> {
    applied: u64,
    now: Time,
    owners: Vec<(ConnId, String)>,
    nodes: BTreeMap<String, NodeState>,
    #[serde(borrow)]
    gateway: &'a serde_json::value::RawValue,
}

/// The seed every replica of a space shares: the space's ids depend on it, never a secret.
fn seed_of(config: &SpaceConfig) -> u64 {
    let h = crate::secret::TokenHash::of(&config.id).to_hex();
    u64::from_str_radix(&h[..16], 16).expect("hex digits")
}

impl Replica {
    /// An empty space (before the log's first entry), held by `node`, whose bearer tokens
    /// that the configuration does not list are judged by `verifier` (when there is one).
    pub fn new(
        node: &str,
        config: SpaceConfig,
        verifier: Option<Arc<dyn IdentityVerifier>>,
    ) -> Replica {
        let seed = seed_of(&config);
        let gateway = Gateway::new(config, seed, Box::new(LogEntropy), verifier);
        Replica::around(
            node,
            gateway,
            Time::ZERO,
            0,
            BTreeMap::new(),
            BTreeMap::new(),
        )
    }

    fn around(
        node: &str,
        mut gateway: Gateway,
        now: Time,
        applied: u64,
        owners: BTreeMap<ConnId, String>,
        nodes: BTreeMap<String, NodeState>,
    ) -> Replica {
        gateway.set_replicated();
        Replica {
            gateway,
            node: node.to_owned(),
            now,
            applied,
            owners,
            nodes,
            events: VecDeque::new(),
            used_entropy: false,
        }
    }

    /// A replica in the state of `snapshot` (from [`Replica::snapshot`] on any node).
    pub fn restore(
        node: &str,
        config: SpaceConfig,
        snapshot: &[u8],
        verifier: Option<Arc<dyn IdentityVerifier>>,
    ) -> Result<Replica, SnapshotError> {
        let s: ReplicaState<'_> = serde_json::from_slice(snapshot)
            .map_err(|e| SnapshotError::Malformed(e.to_string()))?;
        let gateway = Gateway::restore(
            config,
            s.gateway.get().as_bytes(),
            Box::new(LogEntropy),
            verifier,
        )?;
        Ok(Replica::around(
            node,
            gateway,
            s.now,
            s.applied,
            s.owners.into_iter().collect(),
            s.nodes,
        ))
    }

    /// The one way a node's replica starts, whether its log is a cluster's stream or a
    /// single node's files: from the latest snapshot when there is one, else empty. The
    /// entries after it are then applied with [`Replica::handle_record`] (through
    /// [`super::NodeInput::Entry`]).
    pub fn open(
        node: &str,
        config: SpaceConfig,
        snapshot: Option<&[u8]>,
        verifier: Option<Arc<dyn IdentityVerifier>>,
    ) -> Result<Replica, SnapshotError> {
        match snapshot {
            Some(s) => Replica::restore(node, config, s, verifier),
            None => Ok(Replica::new(node, config, verifier)),
        }
    }

    /// The space's gateway.
    pub fn gateway(&self) -> &Gateway {
        &self.gateway
    }

    /// The space's gateway, to drain its outputs (and for the inputs a single node applies
    /// outside its log: a reload, its shutdown).
    pub fn gateway_mut(&mut self) -> &mut Gateway {
        &mut self.gateway
    }

    /// Whether the last entry applied drew a token from the entropy its record carried
    /// (an invitation): a node that keeps its log in files snapshots at once rather than
    /// keep that entropy, which would be the token itself, on disk.
    pub fn used_entropy(&self) -> bool {
        self.used_entropy
    }

    /// The replica's state after entry [`Replica::applied`], as bytes. The gateway's
    /// outputs must have been drained.
    pub fn snapshot(&self) -> Result<Vec<u8>, SnapshotError> {
        self.snapshot_with(self.gateway.snapshot()?)
    }

    /// [`Replica::snapshot`] for a node's own files, without live tokens (see
    /// [`Gateway::snapshot_at_rest`]).
    pub fn snapshot_at_rest(&self) -> Result<Vec<u8>, SnapshotError> {
        self.snapshot_with(self.gateway.snapshot_at_rest()?)
    }

    fn snapshot_with(&self, g: Vec<u8>) -> Result<Vec<u8>, SnapshotError> {
        let g = String::from_utf8(g).map_err(|e| SnapshotError::Malformed(e.to_string()))?;
        let raw = serde_json::value::RawValue::from_string(g)
            .map_err(|e| SnapshotError::Malformed(e.to_string()))?;
        let s = ReplicaState {
            applied: self.applied,
            now: self.now,
            owners: self.owners.iter().map(|(c, n)| (*c, n.clone())).collect(),
            nodes: self.nodes.clone(),
            gateway: &raw,
        };
        serde_json::to_vec(&s).map_err(|e| SnapshotError::Malformed(e.to_string()))
    }

    /// The sequence number of the last entry applied (0 before the first).
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// The log's time: the latest clock reading of any record applied.
    pub fn now(&self) -> Time {
        self.now
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Whether this node holds the connection.
    pub fn is_local(&self, conn: ConnId) -> bool {
        self.owners.get(&conn).is_some_and(|n| *n == self.node)
    }

    /// Nodes heard from and not declared gone, in id order.
    pub fn live_nodes(&self) -> impl Iterator<Item = &str> {
        self.nodes.keys().map(String::as_str)
    }

    /// The next event for this node.
    pub fn poll_output(&mut self) -> Option<ReplicaEvent> {
        self.events.pop_front()
    }

    /// Applies entry `seq` of the log. Entries already applied are ignored; a gap is an
    /// error (the replica must be rebuilt from a snapshot).
    pub fn handle_record(&mut self, seq: u64, rec: Record) -> Result<(), ApplyError> {
        if seq <= self.applied {
            return Ok(());
        }
        if seq != self.applied + 1 && self.applied != 0 {
            return Err(ApplyError::Gap {
                expected: self.applied + 1,
                got: seq,
            });
        }
        self.applied = seq;
        let now = self.now.max(rec.at);
        if now.saturating_since(self.now) > LOG_QUIET {
            for n in self.nodes.values_mut() {
                n.last = now;
            }
        }
        self.now = now;
        let node: &str = &rec.node;
        let timeout_ms = match &rec.entry {
            Entry::NodeUp { timeout } => u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            _ => self
                .nodes
                .get(node)
                .map_or(DEFAULT_NODE_TIMEOUT.as_millis() as u64, |n| n.timeout_ms),
        };
        // Looked up before inserting: the node's id is not copied for every entry.
        match self.nodes.get_mut(node) {
            Some(n) => {
                n.last = now;
                n.timeout_ms = timeout_ms;
            }
            None => {
                self.nodes.insert(
                    node.to_owned(),
                    NodeState {
                        last: now,
                        timeout_ms,
                    },
                );
            }
        }
        let mut entropy = rec.entropy;
        self.used_entropy = false;
        let owned = |owners: &BTreeMap<ConnId, String>, conn: &ConnId| {
            owners.get(conn).is_some_and(|n| n == node)
        };
        match rec.entry {
            Entry::NodeUp { .. } => {
                // Whatever the node held before it restarted is gone.
                self.close_node_conns(now, node);
            }
            Entry::Beat | Entry::Tick => {}
            Entry::Connect { local, token } => {
                let a = self.apply(
                    now,
                    &mut entropy,
                    Input::Connected {
                        bearer: token.into(),
                    },
                );
                self.connected(node, local, a);
            }
            Entry::ConnectJudged { local, judged } => {
                let bearer = Bearer::Judged(judged);
                let a = self.apply(now, &mut entropy, Input::Connected { bearer });
                self.connected(node, local, a);
            }
            Entry::Frame { conn, frame } if owned(&self.owners, &conn) => {
                self.apply(now, &mut entropy, Input::Frame { conn, frame });
            }
            Entry::SealedJoin { conn, frame, token } if owned(&self.owners, &conn) => {
                let bearer = Bearer::Hashed(token);
                self.apply(
                    now,
                    &mut entropy,
                    Input::Join {
                        conn,
                        frame,
                        bearer,
                    },
                );
            }
            Entry::JudgedJoin {
                conn,
                frame,
                judged,
            } if owned(&self.owners, &conn) => {
                let bearer = Bearer::Judged(judged);
                self.apply(
                    now,
                    &mut entropy,
                    Input::Join {
                        conn,
                        frame,
                        bearer,
                    },
                );
            }
            Entry::Oversize { conn, size } if owned(&self.owners, &conn) => {
                self.apply(now, &mut entropy, Input::Oversize { conn, size });
            }
            Entry::Pong { conn } if owned(&self.owners, &conn) => {
                self.apply(now, &mut entropy, Input::Pong { conn });
            }
            Entry::Slow { conn } if owned(&self.owners, &conn) => {
                self.apply(now, &mut entropy, Input::Slow { conn });
            }
            Entry::Closed { conn } if owned(&self.owners, &conn) => {
                self.owners.remove(&conn);
                self.apply(now, &mut entropy, Input::Disconnected { conn });
            }
            // A connection of another node, or one already closed: a stale entry.
            Entry::Frame { .. }
            | Entry::SealedJoin { .. }
            | Entry::JudgedJoin { .. }
            | Entry::Oversize { .. }
            | Entry::Pong { .. }
            | Entry::Slow { .. }
            | Entry::Closed { .. } => {}
            Entry::Post {
                local,
                participant,
                token,
                body,
            } => {
                let post = Input::Post {
                    participant: &participant,
                    bearer: token.into(),
                    body: &body,
                };
                let result = self.apply(now, &mut entropy, post).posted();
                if node == self.node
                    && let Some(result) = result
                {
                    self.events
                        .push_back(ReplicaEvent::Posted { local, result });
                }
            }
        }
        self.expire_nodes(now);
        if self.gateway.poll_timeout().is_some_and(|t| t <= now) {
            self.gateway.handle_input(now, Input::Timeout);
        }
        Ok(())
    }

    /// Applies an entry's input, with the entry's entropy when it carries some.
    fn apply(&mut self, now: Time, entropy: &mut Option<Entropy>, input: Input<'_>) -> Answer {
        let given = entropy.take();
        if let Some(e) = given {
            self.gateway.handle_input(now, Input::Entropy(e));
        }
        let answer = self.gateway.handle_input(now, input);
        self.used_entropy = given.is_some() && self.gateway.drew_entropy();
        answer
    }

    /// Passes over entry `seq`, which could not be read (it counts as applied, and changes
    /// nothing, on every replica alike).
    pub fn handle_unreadable(&mut self, seq: u64) {
        self.applied = self.applied.max(seq);
    }

    /// Declares gone every node silent for longer than its timeout.
    fn expire_nodes(&mut self, now: Time) {
        let silent = |s: &NodeState| now.saturating_since(s.last).as_millis() as u64 > s.timeout_ms;
        if !self.nodes.values().any(silent) {
            return;
        }
        let gone: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, s)| now.saturating_since(s.last).as_millis() as u64 > s.timeout_ms)
            .map(|(n, _)| n.clone())
            .collect();
        for node in gone {
            self.nodes.remove(&node);
            let connections = self.close_node_conns(now, &node);
            self.events
                .push_back(ReplicaEvent::NodeGone { node, connections });
        }
    }

    /// Closes every connection `node` holds; how many there were.
    /// A connection of `node` got its id: remembered as that node's, and reported when
    /// the node is this one.
    fn connected(&mut self, node: &str, local: u64, answer: Answer) {
        let Some(conn) = answer.conn() else {
            return;
        };
        self.owners.insert(conn, node.to_owned());
        if node == self.node {
            self.events
                .push_back(ReplicaEvent::Connected { local, conn });
        }
    }

    fn close_node_conns(&mut self, now: Time, node: &str) -> usize {
        let conns: Vec<ConnId> = self
            .owners
            .iter()
            .filter(|(_, n)| *n == node)
            .map(|(c, _)| *c)
            .collect();
        for c in &conns {
            self.owners.remove(c);
            self.gateway
                .handle_input(now, Input::Disconnected { conn: *c });
        }
        if node == self.node && !conns.is_empty() {
            self.events.push_back(ReplicaEvent::Evicted {
                conns: conns.clone(),
            });
        }
        conns.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::Output;
    use crate::secret::{TOKEN_ENTROPY, TokenHash, token_of};
    use bytes::Bytes;

    const SPACE: &str = "space: {id: s}\nparticipants:\n  human: {tokens: [human-token], capabilities: [{kind: \"*\"}]}\n";

    fn rec(at: u64, entropy: Option<Entropy>, entry: Entry) -> Record {
        Record {
            node: "a".into(),
            at: Time::from_unix_millis(at),
            entropy,
            entry,
        }
    }

    fn invite(id: &str, guest: &str) -> Bytes {
        Bytes::from(format!(
            r#"{{"protocol":"mew/v0.4","id":"{id}","kind":"space/invite","payload":{{"participant_id":"{guest}"}}}}"#
        ))
    }

    /// The frames the gateway sent for the last entry, as JSON.
    fn sent(r: &mut Replica) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        while let Some(o) = r.gateway_mut().poll_output() {
            if let Output::Transmit { frame, .. } = o {
                out.push(serde_json::from_slice(&frame).unwrap());
            }
        }
        out
    }

    #[test]
    fn invitation_tokens_are_the_entrys_192_bits_and_never_made_up() {
        let config = SpaceConfig::from_yaml(SPACE).unwrap();
        let mut r = Replica::new("a", config, None);
        let token = Some(TokenHash::of("human-token"));
        r.handle_record(1, rec(1_000, None, Entry::Connect { local: 1, token }))
            .unwrap();
        let conn = match r.poll_output() {
            Some(ReplicaEvent::Connected { conn, .. }) => conn,
            other => panic!("{other:?}"),
        };
        sent(&mut r);
        // With the entry's entropy: the token is those bytes, as every token is written.
        let entropy = [0x5a; TOKEN_ENTROPY];
        let frame = invite("i1", "guest");
        let entry = Entry::Frame { conn, frame };
        r.handle_record(2, rec(1_001, Some(entropy), entry))
            .unwrap();
        assert!(r.used_entropy());
        let ack = sent(&mut r)
            .into_iter()
            .find(|v| v["kind"] == "space/invite-ack")
            .expect("an acknowledgement");
        assert_eq!(ack["payload"]["token"], token_of(&entropy).as_str());
        assert_eq!(token_of(&entropy).len(), 32);
        // Without: refused (no replica has a source of its own), on every replica alike.
        let frame = invite("i2", "other");
        r.handle_record(3, rec(1_002, None, Entry::Frame { conn, frame }))
            .unwrap();
        assert!(!r.used_entropy());
        let frames = sent(&mut r);
        assert!(frames.iter().all(|v| v["kind"] != "space/invite-ack"));
        let err = frames
            .iter()
            .find(|v| v["kind"] == "system/error")
            .expect("a refusal");
        assert_eq!(err["payload"]["error"], "internal_error");
        // Entropy given with an entry that mints nothing is dropped, not kept for the next.
        let chat = Bytes::from_static(
            br#"{"protocol":"mew/v0.4","id":"c1","kind":"chat","payload":{"text":"hi"}}"#,
        );
        let entry = Entry::Frame { conn, frame: chat };
        r.handle_record(4, rec(1_003, Some([1; TOKEN_ENTROPY]), entry))
            .unwrap();
        assert!(!r.used_entropy());
        sent(&mut r);
        let frame = invite("i3", "third");
        r.handle_record(5, rec(1_004, None, Entry::Frame { conn, frame }))
            .unwrap();
        assert!(sent(&mut r).iter().all(|v| v["kind"] != "space/invite-ack"));
    }
}
