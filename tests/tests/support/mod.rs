//! A scripted fake gateway for the participant tests: it feeds frames and ticks into one
//! `Participant` and records everything the participant emits.
#![allow(dead_code)]

use mew_core::Time;
use mew_core::participant::{Event, Input, Output, Participant, ParticipantConfig};
use serde_json::{Value, json};

/// The participant under test plus what it produced.
pub struct Script {
    pub p: Participant,
    pub now: Time,
    /// Envelopes transmitted (parsed), oldest first, not yet taken.
    pub sent: Vec<Value>,
    /// Raw frames that were not JSON objects with a `kind` (join, stream frames).
    pub raw: Vec<String>,
    pub events: Vec<Event>,
    pub pings: usize,
    pub connects: usize,
    pub disconnects: Vec<String>,
    next_id: u64,
}

pub const ME: &str = "agent";

pub fn config() -> ParticipantConfig {
    ParticipantConfig {
        gateway_url: "ws://gw.test/ws?space=s".into(),
        space: "s".into(),
        token: "agent-token".into(),
        participant_id: Some(ME.into()),
        ..Default::default()
    }
}

/// Capabilities that allow everything.
pub fn all_caps() -> Value {
    json!([{"kind": "*"}])
}

impl Script {
    pub fn new(config: ParticipantConfig) -> Script {
        Script {
            p: Participant::new(config, 42),
            now: Time::from_unix_millis(1_700_000_000_000),
            sent: Vec::new(),
            raw: Vec::new(),
            events: Vec::new(),
            pings: 0,
            connects: 0,
            disconnects: Vec::new(),
            next_id: 0,
        }
    }

    /// Connects and welcomes the participant with these capabilities and peers
    /// (`[(id, caps)]`).
    pub fn joined(config: ParticipantConfig, caps: Value, peers: &[(&str, Value)]) -> Script {
        let mut s = Script::new(config);
        s.p.start(s.now);
        s.p.handle_input(s.now, Input::Connected);
        s.welcome(caps, peers);
        s.drain();
        s
    }

    pub fn welcome(&mut self, caps: Value, peers: &[(&str, Value)]) {
        let participants: Vec<Value> = peers
            .iter()
            .map(|(id, c)| json!({"id": id, "capabilities": c}))
            .collect();
        let id = self.fresh_id();
        self.inject(json!({
            "protocol": "mew/v0.4", "id": id, "from": "system:gateway",
            "to": [ME], "kind": "system/welcome",
            "payload": {"you": {"id": ME, "capabilities": caps}, "participants": participants, "active_streams": []}
        }));
    }

    pub fn fresh_id(&mut self) -> String {
        self.next_id += 1;
        format!("gw-{}", self.next_id)
    }

    /// An envelope from `from`; returns its id.
    pub fn send_from(
        &mut self,
        from: &str,
        to: &[&str],
        kind: &str,
        correlation: Option<&str>,
        payload: Value,
    ) -> String {
        let id = self.fresh_id();
        let mut env = json!({
            "protocol": "mew/v0.4", "id": id, "ts": self.now.rfc3339(),
            "from": from, "kind": kind, "payload": payload
        });
        if !to.is_empty() {
            env["to"] = json!(to);
        }
        if let Some(c) = correlation {
            env["correlation_id"] = json!([c]);
        }
        self.inject(env);
        id
    }

    pub fn inject(&mut self, env: Value) {
        self.frame(&env.to_string());
    }

    pub fn frame(&mut self, frame: &str) {
        self.p.handle_input(self.now, Input::Frame(frame));
        self.drain();
    }

    /// Advances the clock by `ms`, firing every timer due on the way.
    pub fn advance(&mut self, ms: u64) {
        let target = Time::from_unix_millis(self.now.as_unix_millis() + ms);
        while let Some(t) = self.p.poll_timeout() {
            if t > target {
                break;
            }
            self.now = self.now.max(t);
            self.p.handle_input(self.now, Input::Timeout);
            self.drain();
        }
        self.now = target;
        self.p.handle_input(self.now, Input::Timeout);
        self.drain();
    }

    pub fn drain(&mut self) {
        while let Some(o) = self.p.poll_output() {
            match o {
                Output::Transmit(t) => match serde_json::from_str::<Value>(&t) {
                    Ok(v) if v.get("kind").is_some() => self.sent.push(v),
                    _ => self.raw.push(t),
                },
                Output::Event(Event::Message(_)) => {}
                Output::Event(e) => self.events.push(e),
                Output::Ping => self.pings += 1,
                Output::Connect { .. } => self.connects += 1,
                Output::Disconnect { reason } => self.disconnects.push(reason),
            }
        }
    }

    pub fn take_sent(&mut self) -> Vec<Value> {
        self.drain();
        std::mem::take(&mut self.sent)
    }

    pub fn take_events(&mut self) -> Vec<Event> {
        self.drain();
        std::mem::take(&mut self.events)
    }

    /// The single sent envelope of this kind (panics with the list otherwise).
    pub fn sent_one(&mut self, kind: &str) -> Value {
        self.drain();
        let all = self.take_sent();
        let mut of: Vec<&Value> = all.iter().filter(|e| e["kind"] == kind).collect();
        assert_eq!(of.len(), 1, "expected one {kind} among {all:#?}");
        of.remove(0).clone()
    }

    pub fn sent_of(&mut self, kind: &str) -> Vec<Value> {
        self.drain();
        self.sent
            .iter()
            .filter(|e| e["kind"] == kind)
            .cloned()
            .collect()
    }

    /// The completion event of request `id`, if it arrived.
    pub fn completion(
        &mut self,
        id: &mew_core::participant::RequestId,
    ) -> Option<Result<Value, mew_core::participant::RequestError>> {
        self.drain();
        let pos = self
            .events
            .iter()
            .position(|e| matches!(e, Event::RequestCompleted { id: i, .. } if i == id))?;
        match self.events.remove(pos) {
            Event::RequestCompleted { result, .. } => Some(result),
            _ => unreachable!(),
        }
    }
}
