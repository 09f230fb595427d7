//! Capabilities: compiled JSON patterns over an envelope's `kind` and `payload`.
//!
//! The language is the one in `shared/notes/capability-patterns.md`. Patterns are compiled
//! once when a capability enters the system; matching never fails, never panics and never
//! allocates. The same matcher serves gateway enforcement and participant `can_send`.
//!
//! - `value`: value patterns, object keys, the security rules, compile-time limits
//!   (nesting 32, 4 KiB of pattern text);
//! - `string`: plain, glob, `/regex/` and `!` string patterns;
//! - `glob`: the glob syntax and its matcher;
//! - `jsonpath`: the `$…` key subset;
//! - `covers`: the (sound) delegation rule used by [`CapabilitySet::covers`].
//!
//! Nothing here keeps a cache keyed by message content: the only state a check touches
//! besides the compiled patterns is the `regex` crate's pooled scratch space for regexes and
//! complex globs, allocated on a thread's first such check and reused after (the crate may
//! build a throwaway one when many threads contend for the same pattern at once). Plain
//! strings, `*` and the one-wildcard glob shapes never touch it.

mod covers;
mod glob;
mod jsonpath;
mod line;
mod string;
mod text;
mod value;

pub use line::check_line;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::sync::Arc;
use thiserror::Error;
use value::Compiled;

/// Why a capability could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid capability{}: {reason}", index.map(|i| format!(" #{i}")).unwrap_or_default())]
pub struct CapabilityError {
    /// Position in the list being compiled, when compiling a list.
    pub index: Option<usize>,
    /// What is wrong, naming the offending pattern.
    pub reason: String,
}

/// One compiled capability. Cheap to clone (shared).
#[derive(Clone)]
pub struct Capability {
    inner: Arc<Inner>,
}

struct Inner {
    raw: Value,
    /// `raw` as compact JSON, for audit records (written once per envelope).
    json: Box<str>,
    compiled: Compiled,
}

impl std::fmt::Debug for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Capability({})", self.inner.raw)
    }
}

impl PartialEq for Capability {
    fn eq(&self, other: &Self) -> bool {
        self.inner.raw == other.inner.raw
    }
}

impl Capability {
    /// Validates and compiles a capability object `{"kind": P, "payload": Q?, ...}`.
    pub fn compile(raw: Value) -> Result<Capability, CapabilityError> {
        let compiled = Compiled::new(&raw).map_err(|reason| CapabilityError {
            index: None,
            reason,
        })?;
        let json = raw.to_string().into_boxed_str();
        Ok(Capability {
            inner: Arc::new(Inner {
                raw,
                json,
                compiled,
            }),
        })
    }

    /// The capability as it was given (extra keys such as `id` or `description` kept).
    pub fn raw(&self) -> &Value {
        &self.inner.raw
    }

    /// [`Capability::raw`] as compact JSON.
    pub fn json(&self) -> &str {
        &self.inner.json
    }

    /// Whether a message with this `kind` and `payload` is allowed by this capability.
    /// An absent payload is treated as `{}`.
    pub fn matches(&self, kind: &str, payload: Option<&Value>) -> bool {
        self.inner.compiled.matches(kind, payload)
    }

    /// Whether the kind alone already decides: `Some(true)`/`Some(false)`, or `None` when
    /// the payload pattern must be consulted.
    pub fn matches_kind_only(&self, kind: &str) -> Option<bool> {
        self.inner.compiled.matches_kind_only(kind)
    }
}

impl Serialize for Capability {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.inner.raw.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Capability {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(d)?;
        Capability::compile(raw).map_err(serde::de::Error::custom)
    }
}

/// The outcome of looking at a message's kind alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precheck {
    /// Capability at this index matches on kind alone.
    Allowed(usize),
    /// No capability can match this kind.
    Denied,
    /// Some capability's payload pattern must be checked.
    NeedsPayload,
}

/// The capabilities one participant holds; a message is allowed when any one matches.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CapabilitySet {
    caps: Vec<Capability>,
}

impl CapabilitySet {
    /// Compiles every capability of a list; the error names the first bad one's index.
    pub fn compile(raw: &[Value]) -> Result<CapabilitySet, CapabilityError> {
        raw.iter()
            .enumerate()
            .map(|(i, v)| {
                Capability::compile(v.clone()).map_err(|mut e| {
                    e.index = Some(i);
                    e
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|caps| CapabilitySet { caps })
    }

    /// A set from already-compiled capabilities.
    pub fn from_capabilities(caps: Vec<Capability>) -> CapabilitySet {
        CapabilitySet { caps }
    }

    /// The capabilities in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Capability> {
        self.caps.iter()
    }

    /// Number of capabilities held.
    pub fn len(&self) -> usize {
        self.caps.len()
    }

    /// Whether no capability is held.
    pub fn is_empty(&self) -> bool {
        self.caps.is_empty()
    }

    /// Adds a capability at the end.
    pub fn push(&mut self, cap: Capability) {
        self.caps.push(cap);
    }

    /// Keeps only the capabilities for which `keep` is true.
    pub fn retain(&mut self, keep: impl FnMut(&Capability) -> bool) {
        self.caps.retain(keep);
    }

    /// The raw JSON list, as shown in welcomes and errors.
    pub fn to_json(&self) -> Value {
        Value::Array(self.caps.iter().map(|c| c.raw().clone()).collect())
    }

    /// The first capability allowing this message, if any.
    pub fn first_match(&self, kind: &str, payload: Option<&Value>) -> Option<&Capability> {
        self.first_match_index(kind, payload).map(|i| &self.caps[i])
    }

    /// The index of [`CapabilitySet::first_match`] in the set (as [`CapabilitySet::iter`]
    /// gives them), if any.
    pub fn first_match_index(&self, kind: &str, payload: Option<&Value>) -> Option<usize> {
        self.caps.iter().position(|c| c.matches(kind, payload))
    }

    /// Whether any capability allows this message.
    pub fn allows(&self, kind: &str, payload: Option<&Value>) -> bool {
        self.first_match(kind, payload).is_some()
    }

    /// Decides on the kind alone when possible, so the gateway parses a payload only when a
    /// payload pattern could change the answer.
    pub fn precheck(&self, kind: &str) -> Precheck {
        let mut needs_payload = false;
        for (i, c) in self.caps.iter().enumerate() {
            match c.matches_kind_only(kind) {
                Some(true) => return Precheck::Allowed(i),
                Some(false) => {}
                None => needs_payload = true,
            }
        }
        if needs_payload {
            Precheck::NeedsPayload
        } else {
            Precheck::Denied
        }
    }

    /// Whether every message `cap` allows is allowed by this set (sound, not complete:
    /// may answer `false` for a grant that would have been safe, never `true` for an
    /// unsafe one). Used to refuse grants that exceed the granter's own capabilities.
    ///
    /// The rule is documented in the `covers` module: each alternative of the granted `kind` must be
    /// covered by one of this set's capabilities.
    pub fn covers(&self, cap: &Capability) -> bool {
        let theirs = &cap.inner.compiled;
        (0..theirs.kind.len()).all(|alt| {
            self.caps
                .iter()
                .any(|mine| covers::covers_alt(&mine.inner.compiled, theirs, alt))
        })
    }
}

impl Serialize for CapabilitySet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.caps.serialize(s)
    }
}

impl<'de> Deserialize<'de> for CapabilitySet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(CapabilitySet {
            caps: Vec::<Capability>::deserialize(d)?,
        })
    }
}

impl FromIterator<Capability> for CapabilitySet {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        CapabilitySet {
            caps: iter.into_iter().collect(),
        }
    }
}

impl<'a> IntoIterator for &'a CapabilitySet {
    type Item = &'a Capability;
    type IntoIter = std::slice::Iter<'a, Capability>;
    fn into_iter(self) -> Self::IntoIter {
        self.caps.iter()
    }
}
