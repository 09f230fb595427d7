//! Members of the space: configured, invited and anonymous participants, their tokens and
//! their capabilities (static from the configuration plus runtime grants).

use super::ConnId;
use super::config::{ParticipantEntry, SpaceConfig};
use crate::Time;
use crate::capability::{Capability, CapabilitySet};
use crate::secret::TokenHash;
use smallvec::SmallVec;
use std::collections::BTreeMap;
use std::sync::Arc;

/// How a member came to exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum Origin {
    Configured,
    Invited,
    /// Removed again when its connection leaves.
    Anonymous,
}

/// One runtime grant.
#[derive(Debug, Clone)]
pub(super) struct Grant {
    /// The grant envelope's id.
    pub(super) grant_id: String,
    pub(super) granter: Arc<str>,
    pub(super) caps: Vec<Capability>,
}

/// Whether (and until when) a member's outbound traffic is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum Hold {
    None,
    /// Paused until the time, or until resumed when `None`.
    Paused(Option<Time>),
    /// Shut down until it rejoins.
    ShutDown,
}

#[derive(Debug)]
pub(super) struct Member {
    pub(super) id: Arc<str>,
    pub(super) origin: Origin,
    /// Digests of its tokens: the gateway never keeps a token itself.
    pub(super) tokens: Vec<TokenHash>,
    pub(super) static_caps: CapabilitySet,
    pub(super) grants: Vec<Grant>,
    /// Static then granted: what enforcement and welcomes use (shared with audit records,
    /// which hold it without copying).
    pub(super) caps: Arc<CapabilitySet>,
    /// Its connections, and how many it may hold at once.
    pub(super) conns: Conns,
    /// `output_log` of a virtual member.
    pub(super) virtual_log: Option<String>,
    pub(super) hold: Hold,
    /// Kicked: tokens refused until re-invited.
    pub(super) removed: bool,
    /// Rate limit buckets.
    pub(super) bucket: super::rate::Bucket,
}

impl Member {
    pub(super) fn is_online(&self) -> bool {
        !self.removed && (!self.conns.is_empty() || self.virtual_log.is_some())
    }

    pub(super) fn recompute_caps(&mut self) {
        let mut caps = self.static_caps.clone();
        for g in &self.grants {
            for c in &g.caps {
                caps.push(c.clone());
            }
        }
        self.caps = Arc::new(caps);
    }
}

/// A member's connections, oldest first, and its bound: one connection for most members (a
/// new connection replaces the old, as the protocol has it); a participant the configuration
/// marks as a person, or gives `connections: N`, may hold several at once (a terminal and a
/// browser), each receiving everything the participant receives.
#[derive(Debug, Clone, Default)]
pub(super) struct Conns {
    list: SmallVec<[ConnId; 1]>,
    /// How many at once; 0 is read as 1.
    max: u8,
    /// Marked `person: true` (announced in welcomes and presence).
    person: bool,
}

impl Conns {
    /// The bound and mark of a configured participant, without connections.
    pub(super) fn for_entry(p: &ParticipantEntry) -> Conns {
        Conns {
            list: SmallVec::new(),
            max: p.max_connections(),
            person: p.person,
        }
    }

    /// Takes the bound and mark of `p` (a reload), keeping the connections.
    pub(super) fn configure(&mut self, p: &ParticipantEntry) {
        self.max = p.max_connections();
        self.person = p.person;
    }

    /// Whether the participant is a person (`person: true`).
    pub(super) fn person(&self) -> bool {
        self.person
    }

    /// How many connections it may hold at once.
    pub(super) fn max(&self) -> usize {
        usize::from(self.max.max(1))
    }

    /// Its oldest connection.
    pub(super) fn first(&self) -> Option<ConnId> {
        self.list.first().copied()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(super) fn as_slice(&self) -> &[ConnId] {
        &self.list
    }

    /// Adds a connection; the oldest ones it displaces beyond the bound.
    pub(super) fn add(&mut self, conn: ConnId) -> SmallVec<[ConnId; 1]> {
        let mut displaced = SmallVec::new();
        if self.list.contains(&conn) {
            return displaced;
        }
        while self.list.len() >= self.max() {
            displaced.push(self.list.remove(0));
        }
        self.list.push(conn);
        displaced
    }

    /// Removes a connection; whether it was one of these.
    pub(super) fn remove(&mut self, conn: ConnId) -> bool {
        match self.list.iter().position(|c| *c == conn) {
            Some(i) => {
                self.list.remove(i);
                true
            }
            None => false,
        }
    }

    /// Forgets every connection (the gateway closes them all).
    pub(super) fn clear(&mut self) {
        self.list.clear();
    }

    /// Restores connections kept in a snapshot.
    pub(super) fn restore(&mut self, list: impl IntoIterator<Item = ConnId>) {
        self.list = list.into_iter().collect();
    }
}

/// The member table: indices stay stable while a member exists.
#[derive(Debug, Default)]
pub(super) struct Members {
    pub(super) slots: Vec<Option<Member>>,
    pub(super) free: Vec<usize>,
    pub(super) by_id: BTreeMap<Arc<str>, usize>,
    pub(super) by_token: BTreeMap<TokenHash, usize>,
    /// Tokens claimed by more than one member: refused for all of them.
    pub(super) ambiguous: Vec<TokenHash>,
    /// Each member's confusable skeleton ([`crate::participant_id::skeleton`]): a new id
    /// that looks like a member's is refused.
    pub(super) by_skeleton: BTreeMap<String, usize>,
}

impl Members {
    pub(super) fn from_config(cfg: &SpaceConfig) -> Members {
        let mut m = Members::default();
        for p in &cfg.participants {
            m.insert(Member {
                id: Arc::from(p.id.as_str()),
                origin: Origin::Configured,
                tokens: p.tokens.iter().map(|t| TokenHash::of(t)).collect(),
                static_caps: p.capabilities.clone(),
                grants: Vec::new(),
                caps: Arc::new(p.capabilities.clone()),
                conns: Conns::for_entry(p),
                virtual_log: p.is_virtual().then(|| p.output_log.clone()).flatten(),
                hold: Hold::None,
                bucket: Default::default(),
                removed: false,
            });
        }
        m
    }

    /// Adds a member and its tokens; the id must be free.
    pub(super) fn insert(&mut self, member: Member) -> usize {
        let id = member.id.clone();
        let tokens = member.tokens.clone();
        let idx = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(member);
                i
            }
            None => {
                self.slots.push(Some(member));
                self.slots.len() - 1
            }
        };
        self.by_skeleton
            .entry(crate::participant_id::skeleton(&id))
            .or_insert(idx);
        self.by_id.insert(id, idx);
        for t in tokens {
            self.add_token(t, idx);
        }
        idx
    }

    pub(super) fn add_token(&mut self, token: TokenHash, idx: usize) {
        if self.ambiguous.contains(&token) {
            return;
        }
        match self.by_token.get(&token) {
            Some(&other) if other != idx => {
                // Two members claim one token: it identifies neither.
                self.by_token.remove(&token);
                self.ambiguous.push(token);
            }
            _ => {
                self.by_token.insert(token, idx);
            }
        }
    }

    pub(super) fn remove_tokens(&mut self, idx: usize) {
        let tokens = std::mem::take(&mut self.get_mut(idx).tokens);
        for t in tokens {
            if self.by_token.get(&t) == Some(&idx) {
                self.by_token.remove(&t);
            }
        }
    }

    /// Drops a member entirely (anonymous members after they leave).
    pub(super) fn remove(&mut self, idx: usize) {
        self.remove_tokens(idx);
        if let Some(m) = self.slots[idx].take() {
            self.by_id.remove(&m.id);
            let skeleton = crate::participant_id::skeleton(&m.id);
            if self.by_skeleton.get(&skeleton) == Some(&idx) {
                self.by_skeleton.remove(&skeleton);
            }
            self.free.push(idx);
        }
    }

    /// Members currently held.
    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    pub(super) fn find(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }

    /// Another member whose id looks like `id` (same confusable skeleton, other id).
    pub(super) fn lookalike(&self, id: &str) -> Option<&Member> {
        let idx = *self.by_skeleton.get(&crate::participant_id::skeleton(id))?;
        self.try_get(idx).filter(|m| &*m.id != id)
    }

    /// Rebuilds the skeleton index from the members (after a restore).
    pub(super) fn index_skeletons(&mut self) {
        let mut by_skeleton = BTreeMap::new();
        for (i, m) in self.iter() {
            by_skeleton
                .entry(crate::participant_id::skeleton(&m.id))
                .or_insert(i);
        }
        self.by_skeleton = by_skeleton;
    }

    /// The member a token authenticates. Looked up by digest: how long the lookup takes
    /// can only tell a guesser about the digest's prefix, which says nothing about how close
    /// the guessed token is.
    pub(super) fn by_token(&self, token: &str) -> Option<usize> {
        self.by_hash(&TokenHash::of(token))
    }

    /// The member a token digest authenticates.
    pub(super) fn by_hash(&self, hash: &TokenHash) -> Option<usize> {
        self.by_token.get(hash).copied()
    }

    pub(super) fn get(&self, idx: usize) -> &Member {
        self.slots[idx]
            .as_ref()
            .expect("member index refers to a live member")
    }

    pub(super) fn get_mut(&mut self, idx: usize) -> &mut Member {
        self.slots[idx]
            .as_mut()
            .expect("member index refers to a live member")
    }

    pub(super) fn try_get(&self, idx: usize) -> Option<&Member> {
        self.slots.get(idx).and_then(Option::as_ref)
    }

    pub(super) fn try_get_mut(&mut self, idx: usize) -> Option<&mut Member> {
        self.slots.get_mut(idx).and_then(Option::as_mut)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (usize, &Member)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.as_ref().map(|m| (i, m)))
    }

    pub(super) fn indices(&self) -> Vec<usize> {
        self.iter().map(|(i, _)| i).collect()
    }
}
