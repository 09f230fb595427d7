//! When the agent answers a chat (the SDK's chat response strategy).
//!
//! The reference's strategy by default. Never its own chats. A chat whose `to` names the
//! agent is answered (when `respond_to_direct`). A chat addressed to others is not. A
//! broadcast that mentions the agent (`@id`, or its id or name as a word, any case) is
//! answered when `respond_to_mentions`. Any other broadcast of a person (a participant the
//! gateway marks `"person": true`, from `person: true` in space.yaml) is answered when
//! `respond_to_all` (a space of one person and their agent), and one of a bridge or another
//! agent is then not answered at all (a bridge reporting its failure must not cost a model
//! call per report); without `respond_to_all` a broadcast is put to the model first
//! when `classify` is on (the default), else answered when it asks a question (`?`) and
//! `respond_to_questions` is on; a failed classification falls back to that question rule.
//! A chat that is itself a reply (it has a `correlation_id`) is answered only when it is
//! addressed to the agent: an agent's answer observed by another agent must not start a
//! conversation between them. A per-sender reply limit guards against loops that remain.
//! Every chat of another participant that is not answered says why (logged at debug
//! level by `mew agent`).

use super::AgentSettings;
use crate::envelope::Envelope;
use serde_json::Value;

pub(super) enum Decision {
    /// Not for us; the reason is worth reporting only for chats that came close.
    Ignore(Option<String>),
    Respond {
        text: String,
        classify: bool,
    },
}

/// What the agent decides about `env`; `person` says whether its sender is a person.
pub(super) fn decide(
    s: &AgentSettings,
    me: &str,
    name: &str,
    env: &Envelope,
    person: bool,
) -> Decision {
    if me.is_empty() || env.from == me || env.from.starts_with("system:") {
        return Decision::Ignore(None);
    }
    let Some(text) = env
        .payload
        .as_ref()
        .and_then(|p| p.get("text"))
        .and_then(Value::as_str)
    else {
        return Decision::Ignore(None);
    };
    if !s.auto_respond {
        return Decision::Ignore(Some("auto_respond is off".into()));
    }
    let to = env.to.as_deref().unwrap_or(&[]);
    let is_reply = env.correlation_id.as_ref().is_some_and(|c| !c.is_empty());
    let respond = |classify| Decision::Respond {
        text: text.to_owned(),
        classify,
    };
    if to.iter().any(|t| t == me) {
        return if s.chat.respond_to_direct {
            respond(false)
        } else {
            Decision::Ignore(Some("respond_to_direct is off".into()))
        };
    }
    if !to.is_empty() {
        return Decision::Ignore(Some(format!("addressed to {}", to.join(", "))));
    }
    if is_reply {
        return Decision::Ignore(Some("a reply to another chat".into()));
    }
    if s.chat.respond_to_mentions && (mentions(text, me) || mentions(text, name)) {
        return respond(false);
    }
    if s.chat.respond_to_all {
        return if person {
            respond(false)
        } else {
            Decision::Ignore(Some(format!(
                "{} is not a person (respond_to_all answers the participants space.yaml marks `person: true`)",
                env.from
            )))
        };
    }
    if s.chat.classify {
        return respond(true);
    }
    if s.chat.respond_to_questions && text.contains('?') {
        return respond(false);
    }
    Decision::Ignore(Some(
        "neither addressed to this agent nor mentioning it (classification is off)".into(),
    ))
}

/// Whether `text` names `who` as a word (`@who`, or `who` between non-word characters).
pub(super) fn mentions(text: &str, who: &str) -> bool {
    if who.is_empty() {
        return false;
    }
    let lower = text.to_lowercase();
    let who = who.to_lowercase();
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-');
    let mut start = 0;
    while let Some(i) = lower[start..].find(&who) {
        let at = start + i;
        let before = lower[..at].chars().next_back();
        let after = lower[at + who.len()..].chars().next();
        if !word(before) && !word(after) {
            return true;
        }
        start = at + who.len().max(1);
    }
    false
}

/// Reads the classifier's `{"shouldRespond", "confidence"}` verdict.
pub(super) fn read_classification(text: &str) -> Option<(bool, f64)> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    let v: Value = serde_json::from_str(text.get(start..=end)?).ok()?;
    let yes = v
        .get("shouldRespond")
        .or_else(|| v.get("should_respond"))?
        .as_bool()?;
    let confidence = v.get("confidence").and_then(Value::as_f64).unwrap_or(1.0);
    Some((yes, confidence))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_are_words() {
        assert!(mentions("hey @Agent, help", "agent"));
        assert!(mentions("agent: what is 2+2", "agent"));
        assert!(!mentions("the agents are here", "agent"));
        assert!(!mentions("my-agent is here", "agent"));
        assert!(!mentions("anything", ""));
        assert_eq!(
            read_classification("sure {\"shouldRespond\": true, \"confidence\": 0.8}"),
            Some((true, 0.8))
        );
        assert_eq!(read_classification("no"), None);
    }
}
