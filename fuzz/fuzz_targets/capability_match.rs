//! Arbitrary bytes split at the first NUL into a capability pattern and a message; compile,
//! match and delegate must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mew_core::capability::{Capability, CapabilitySet};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let (pattern, message) = (&data[..split], data.get(split + 1..).unwrap_or(&[]));
    let Ok(pattern) = serde_json::from_slice::<Value>(pattern) else {
        return;
    };
    let message = serde_json::from_slice::<Value>(message).ok();
    let kind = message
        .as_ref()
        .and_then(|m| m.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or("chat");
    let payload = message.as_ref().and_then(|m| m.get("payload"));

    // The pattern as a whole capability, as a list, and as a payload pattern.
    let mut caps = Vec::new();
    if let Ok(c) = Capability::compile(pattern.clone()) {
        caps.push(c);
    }
    if let Some(list) = pattern.as_array()
        && let Ok(set) = CapabilitySet::compile(list)
    {
        caps.extend(set.iter().cloned());
    }
    if let Ok(c) = Capability::compile(serde_json::json!({"kind": "*", "payload": pattern})) {
        caps.push(c);
    }
    let set = CapabilitySet::from_capabilities(caps.clone());
    let _ = set.allows(kind, payload);
    let _ = set.precheck(kind);
    for c in &caps {
        let allowed = c.matches(kind, payload);
        assert!(!allowed || set.allows(kind, payload));
        let _ = c.matches_kind_only(kind);
        // Every capability covers itself (same text is always covered).
        assert!(set.covers(c));
        let _ = CapabilitySet::from_capabilities(vec![c.clone()]).covers(&caps[0]);
    }
});
