//! Who else is in the space: the welcome's list, then each join and leave the gateway
//! announces (one by one, or gathered in batches in a crowded space). The participant keeps
//! one of these, and so does a [`crate::view::View`]: both follow the same rule.
//!
//! The rule: a leaver is dropped (not kept as "offline"); a join already known only updates
//! the capabilities (batches may repeat joins); at most `max` others are tracked, and a
//! join beyond is refused; our own id never counts.

use crate::capability::CapabilitySet;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What a welcome or an announcement changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberChange {
    /// Someone new is here.
    Joined(String),
    /// Someone known left.
    Left(String),
}

/// The other participants of a space and their capabilities (bounded).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Members {
    others: BTreeMap<String, CapabilitySet>,
    /// Those the gateway marks as persons (`"person": true`).
    persons: BTreeSet<String>,
    max: usize,
}

fn capabilities_of(entry: &Value) -> CapabilitySet {
    entry
        .get("capabilities")
        .and_then(Value::as_array)
        .and_then(|a| CapabilitySet::compile(a).ok())
        .unwrap_or_default()
}

impl Members {
    /// An empty list tracking at most `max` others.
    pub fn new(max: usize) -> Members {
        Members {
            max,
            ..Members::default()
        }
    }

    /// The welcome's `participants` (anyone but `me`, the first `max` of them): who is here
    /// now. Returns the joins (in the list's order), then the leaves of those no longer
    /// listed.
    pub fn welcome(&mut self, me: &str, participants: &[Value]) -> Vec<MemberChange> {
        let mut changes = Vec::new();
        let mut listed = BTreeSet::new();
        for p in participants.iter().take(self.max) {
            let Some(id) = p.get("id").and_then(Value::as_str) else {
                continue;
            };
            if id == me {
                continue;
            }
            listed.insert(id.to_owned());
            self.mark_person(id, p);
            if self
                .others
                .insert(id.to_owned(), capabilities_of(p))
                .is_none()
            {
                changes.push(MemberChange::Joined(id.to_owned()));
            }
        }
        let gone: Vec<String> = self
            .others
            .keys()
            .filter(|k| !listed.contains(*k))
            .cloned()
            .collect();
        for id in gone {
            if self.remove(&id) {
                changes.push(MemberChange::Left(id));
            }
        }
        changes
    }

    /// One `system/presence` payload (a join, a leave, or a batch of them): what each
    /// change did, or why it was not applied.
    pub fn presence(
        &mut self,
        me: &str,
        payload: &Value,
    ) -> Vec<Result<Option<MemberChange>, &'static str>> {
        if payload.get("event").and_then(Value::as_str) == Some("batch") {
            return match payload.get("changes").and_then(Value::as_array) {
                Some(changes) => changes.iter().map(|c| self.change(me, c)).collect(),
                None => vec![Err("presence batch without changes")],
            };
        }
        vec![self.change(me, payload)]
    }

    /// One join or leave, from an announcement or a batch: `None` when nothing changed but
    /// maybe the capabilities of someone known.
    fn change(&mut self, me: &str, p: &Value) -> Result<Option<MemberChange>, &'static str> {
        let part = p.get("participant");
        let id = part
            .and_then(|x| x.get("id"))
            .and_then(Value::as_str)
            .ok_or("presence without participant.id")?;
        if id == me {
            return Ok(None);
        }
        match p.get("event").and_then(Value::as_str) {
            Some("join") => {
                let entry = part.unwrap_or(&Value::Null);
                if let Some(known) = self.others.get_mut(id) {
                    // A repeated join (in the welcome, or an earlier batch): its
                    // capabilities are taken, nothing is announced again.
                    *known = capabilities_of(entry);
                    self.mark_person(id, entry);
                    return Ok(None);
                }
                if self.others.len() >= self.max {
                    return Err("too many participants tracked");
                }
                self.others.insert(id.to_owned(), capabilities_of(entry));
                self.mark_person(id, entry);
                Ok(Some(MemberChange::Joined(id.to_owned())))
            }
            Some("leave") => Ok(self.remove(id).then(|| MemberChange::Left(id.to_owned()))),
            _ => Err("presence event must be join, leave or batch"),
        }
    }

    /// Notes whether a welcome's or presence's participant entry marks a person.
    fn mark_person(&mut self, id: &str, entry: &Value) {
        if entry.get("person").and_then(Value::as_bool) == Some(true) {
            self.persons.insert(id.to_owned());
        } else {
            self.persons.remove(id);
        }
    }

    /// Forgets `id`; whether it was known.
    pub fn remove(&mut self, id: &str) -> bool {
        self.persons.remove(id);
        self.others.remove(id).is_some()
    }

    /// The capabilities of `id`, when it is here.
    pub fn get(&self, id: &str) -> Option<&CapabilitySet> {
        self.others.get(id)
    }

    /// Whether `id` is here.
    pub fn contains(&self, id: &str) -> bool {
        self.others.contains_key(id)
    }

    /// Whether the gateway marks `id` as a person.
    pub fn is_person(&self, id: &str) -> bool {
        self.persons.contains(id)
    }

    /// The others and their capabilities, by id.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &CapabilitySet)> {
        self.others.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// How many others are here.
    pub fn len(&self) -> usize {
        self.others.len()
    }

    /// Whether nobody else is here.
    pub fn is_empty(&self) -> bool {
        self.others.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn leavers_are_dropped_repeats_update_and_the_bound_holds() {
        let mut m = Members::new(2);
        let changes = m.welcome(
            "me",
            &[
                json!({"id": "me", "capabilities": []}),
                json!({"id": "a", "capabilities": [{"kind": "chat"}], "person": true}),
            ],
        );
        assert_eq!(changes, [MemberChange::Joined("a".into())]);
        assert!(m.is_person("a") && !m.contains("me"));
        let batch = json!({"event": "batch", "changes": [
            {"event": "join", "participant": {"id": "a", "capabilities": [{"kind": "*"}]}},
            {"event": "join", "participant": {"id": "b"}},
            {"event": "join", "participant": {"id": "c"}},
            {"event": "leave", "participant": {"id": "a"}},
            {"event": "wave", "participant": {"id": "a"}}]});
        let out = m.presence("me", &batch);
        assert_eq!(
            out,
            [
                Ok(None),
                Ok(Some(MemberChange::Joined("b".into()))),
                Err("too many participants tracked"),
                Ok(Some(MemberChange::Left("a".into()))),
                Err("presence event must be join, leave or batch"),
            ]
        );
        assert_eq!(m.iter().map(|(id, _)| id).collect::<Vec<_>>(), ["b"]);
        assert!(!m.is_person("a"));
        // A welcome after a rejoin: those not listed left.
        let changes = m.welcome("me", &[json!({"id": "c"})]);
        assert_eq!(
            changes,
            [
                MemberChange::Joined("c".into()),
                MemberChange::Left("b".into())
            ]
        );
        assert_eq!(
            m.presence("me", &json!({"event": "batch"})),
            [Err("presence batch without changes")]
        );
    }
}
