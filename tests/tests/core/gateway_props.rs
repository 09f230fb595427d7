//! Properties over random sequences of connects, frames (valid and garbage), grants,
//! revokes, kicks and ticks: the gateway never panics, never delivers a message its sender
//! lacked the capability for at that moment, never delivers `system/*` from a participant,
//! and every participant's last welcome shows exactly the capabilities the gateway enforces.

use bytes::Bytes;
use mew_core::capability::CapabilitySet;
use mew_core::gateway::{Bearer, Input};
use mew_core::gateway::{ConnId, Gateway, Output, SpaceConfig};
use mew_core::{GATEWAY_ID, Time};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const YAML: &str = r#"
space: {id: prop}
participants:
  root: {tokens: [t-root], capabilities: [{kind: "*"}]}
  mid:
    tokens: [t-mid]
    capabilities:
      - {kind: chat}
      - {kind: mcp/request}
      - {kind: capability/grant}
      - {kind: capability/revoke}
      - {kind: space/kick}
  low: {tokens: [t-low], capabilities: [{kind: chat}, {kind: mcp/proposal}, {kind: stream/request}]}
  pay: {tokens: [t-pay], capabilities: [{kind: mcp/request, payload: {method: tools/list}}]}
defaults: {capabilities: [{kind: chat}]}
gateway: {anonymous_joins: true, max_queue_frames: 64}
"#;

const IDS: [&str; 5] = ["root", "mid", "low", "pay", "ghost"];
const TOKENS: [&str; 5] = ["t-root", "t-mid", "t-low", "t-pay", "bogus"];
const KINDS: [&str; 9] = [
    "chat",
    "mcp/request",
    "mcp/proposal",
    "mcp/response",
    "system/welcome",
    "capability/grant-ack",
    "stream/request",
    "participant/pause",
    "participant/resume",
];

fn cap_pool(i: u8) -> Value {
    match i % 6 {
        0 => json!({"kind": "chat"}),
        1 => json!({"kind": "mcp/request"}),
        2 => json!({"kind": "mcp/response"}),
        3 => json!({"kind": "*"}),
        4 => json!({"kind": "mcp/request", "payload": {"method": "tools/list"}}),
        _ => json!({"kind": "space/kick"}),
    }
}

#[derive(Debug, Clone)]
enum Step {
    Connect(Option<u8>),
    JoinMsg(u8, u8, u8),
    Send {
        conn: u8,
        kind: u8,
        from: u8,
        method: bool,
    },
    Grant {
        conn: u8,
        to: u8,
        cap: u8,
    },
    RevokeId {
        conn: u8,
        to: u8,
        back: u8,
    },
    RevokePattern {
        conn: u8,
        to: u8,
        cap: u8,
    },
    Kick {
        conn: u8,
        who: u8,
    },
    Garbage {
        conn: u8,
        bytes: Vec<u8>,
    },
    Data {
        conn: u8,
        stream: u8,
    },
    Tick(u32),
    Close(u8),
    Sent(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => proptest::option::of(0u8..5).prop_map(Step::Connect),
        1 => (any::<u8>(), 0u8..5, 0u8..6).prop_map(|(c, t, i)| Step::JoinMsg(c, t, i)),
        6 => (any::<u8>(), 0u8..9, 0u8..6, any::<bool>()).prop_map(|(conn, kind, from, method)| Step::Send { conn, kind, from, method }),
        3 => (any::<u8>(), 0u8..5, any::<u8>()).prop_map(|(conn, to, cap)| Step::Grant { conn, to, cap }),
        1 => (any::<u8>(), 0u8..5, any::<u8>()).prop_map(|(conn, to, back)| Step::RevokeId { conn, to, back }),
        1 => (any::<u8>(), 0u8..5, any::<u8>()).prop_map(|(conn, to, cap)| Step::RevokePattern { conn, to, cap }),
        1 => (any::<u8>(), 0u8..5).prop_map(|(conn, who)| Step::Kick { conn, who }),
        1 => (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..40)).prop_map(|(conn, bytes)| Step::Garbage { conn, bytes }),
        1 => (any::<u8>(), 0u8..4).prop_map(|(conn, stream)| Step::Data { conn, stream }),
        2 => (0u32..40_000).prop_map(Step::Tick),
        1 => any::<u8>().prop_map(Step::Close),
        1 => any::<u8>().prop_map(Step::Sent),
    ]
}

struct Harness {
    gw: Gateway,
    now: Time,
    conns: Vec<ConnId>,
    /// Who each connection is, learnt from its welcome.
    who: BTreeMap<ConnId, String>,
    /// The capabilities each connection's last welcome showed.
    welcome_caps: BTreeMap<ConnId, Value>,
    closed: Vec<ConnId>,
    grant_ids: Vec<String>,
    n: u64,
}

impl Harness {
    fn new(seed: u64) -> Harness {
        let now = Time::from_unix_millis(1_736_416_800_000);
        Harness {
            gw: Gateway::new(
                SpaceConfig::from_yaml(YAML).unwrap(),
                seed,
                mew_tests::sim::seeded_tokens(seed),
                None,
            ),
            now,
            conns: Vec::new(),
            who: BTreeMap::new(),
            welcome_caps: BTreeMap::new(),
            closed: Vec::new(),
            grant_ids: Vec::new(),
            n: 0,
        }
    }

    fn conn(&self, i: u8) -> Option<ConnId> {
        (!self.conns.is_empty()).then(|| self.conns[i as usize % self.conns.len()])
    }

    fn next_id(&mut self) -> String {
        self.n += 1;
        format!("e{}", self.n)
    }

    /// Sends a frame; checks every delivered envelope from this sender against the
    /// capabilities it held just before.
    fn send(&mut self, conn: ConnId, frame: String) {
        let sender = self.who.get(&conn).cloned();
        let caps_before = sender
            .as_deref()
            .and_then(|s| self.gw.capabilities_of(s))
            .map(|v| CapabilitySet::compile(v.as_array().unwrap()).unwrap());
        self.gw.handle_input(
            self.now,
            Input::Frame {
                conn,
                frame: Bytes::from(frame),
            },
        );
        self.drain(sender.as_deref().zip(caps_before.as_ref()));
    }

    fn drain(&mut self, sender: Option<(&str, &CapabilitySet)>) {
        while let Some(o) = self.gw.poll_output() {
            match o {
                Output::Transmit { conn, frame } => {
                    assert!(!self.closed.contains(&conn), "transmit after close");
                    if frame.first() == Some(&b'#') {
                        continue;
                    }
                    let v: Value = serde_json::from_slice(&frame).expect("gateway sends JSON");
                    let kind = v["kind"].as_str().unwrap_or_default();
                    let from = v["from"].as_str().unwrap_or_default();
                    if kind.starts_with("system/") {
                        assert_eq!(
                            from, GATEWAY_ID,
                            "system/* from a participant delivered: {v}"
                        );
                    }
                    if from != GATEWAY_ID {
                        let (s, caps) = sender.expect("participant envelopes only follow a send");
                        assert_eq!(from, s, "delivered under another identity");
                        assert!(
                            caps.allows(kind, v.get("payload")),
                            "{s} lacked the capability for {v}"
                        );
                    }
                    if kind == "system/welcome" {
                        let you = &v["payload"]["you"];
                        self.who
                            .insert(conn, you["id"].as_str().unwrap().to_owned());
                        self.welcome_caps.insert(conn, you["capabilities"].clone());
                    }
                }
                Output::Close { conn, .. } => {
                    self.closed.push(conn);
                    self.gw.handle_input(self.now, Input::Disconnected { conn });
                    self.conns.retain(|c| *c != conn);
                    self.who.remove(&conn);
                    self.welcome_caps.remove(&conn);
                }
                _ => {}
            }
        }
    }

    fn check_views(&self) {
        for (conn, caps) in &self.welcome_caps {
            let id = &self.who[conn];
            assert_eq!(
                self.gw.capabilities_of(id).as_ref(),
                Some(caps),
                "{id}'s last welcome differs from what the gateway enforces"
            );
        }
    }

    fn envelope(&mut self, from: &str, kind: &str, to: Option<&str>, payload: Value) -> String {
        let id = self.next_id();
        let mut v = json!({"protocol": "mew/v0.4", "id": id, "from": from, "kind": kind, "ts": "2025-01-09T10:00:00Z", "payload": payload});
        if let Some(t) = to {
            v["to"] = json!([t]);
        }
        if kind == "capability/grant" {
            self.grant_ids.push(id);
        }
        v.to_string()
    }

    fn run(&mut self, s: Step) {
        match s {
            Step::Connect(t) => {
                let c = self
                    .gw
                    .handle_input(
                        self.now,
                        Input::Connected {
                            bearer: Bearer::from(t.map(|t| TOKENS[t as usize])),
                        },
                    )
                    .conn()
                    .expect("a connection");
                self.conns.push(c);
                self.drain(None);
            }
            Step::JoinMsg(c, t, i) => {
                if let Some(conn) = self.conn(c) {
                    let pid = IDS.get(i as usize).copied().unwrap_or("anon-x");
                    let f =
                        json!({"type": "join", "token": TOKENS[t as usize], "participantId": pid});
                    self.send(conn, f.to_string());
                }
            }
            Step::Send {
                conn,
                kind,
                from,
                method,
            } => {
                if let Some(c) = self.conn(conn) {
                    let me = self.who.get(&c).cloned().unwrap_or_default();
                    let from = IDS
                        .get(from as usize)
                        .map(|s| s.to_string())
                        .unwrap_or(me.clone());
                    let payload = if method {
                        json!({"method": "tools/list"})
                    } else {
                        json!({"method": "tools/call"})
                    };
                    let to = if kind % 2 == 0 { Some("mid") } else { None };
                    let f = self.envelope(&from, KINDS[kind as usize], to, payload);
                    self.send(c, f);
                }
            }
            Step::Grant { conn, to, cap } => {
                if let Some(c) = self.conn(conn) {
                    let me = self.who.get(&c).cloned().unwrap_or_default();
                    let f = self.envelope(
                        &me,
                        "capability/grant",
                        None,
                        json!({"recipient": IDS[to as usize], "capabilities": [cap_pool(cap)]}),
                    );
                    self.send(c, f);
                }
            }
            Step::RevokeId { conn, to, back } => {
                if let Some(c) = self.conn(conn) {
                    let me = self.who.get(&c).cloned().unwrap_or_default();
                    let gid = if self.grant_ids.is_empty() {
                        "none".to_owned()
                    } else {
                        self.grant_ids[back as usize % self.grant_ids.len()].clone()
                    };
                    let f = self.envelope(
                        &me,
                        "capability/revoke",
                        None,
                        json!({"recipient": IDS[to as usize], "grant_id": gid}),
                    );
                    self.send(c, f);
                }
            }
            Step::RevokePattern { conn, to, cap } => {
                if let Some(c) = self.conn(conn) {
                    let me = self.who.get(&c).cloned().unwrap_or_default();
                    let f = self.envelope(
                        &me,
                        "capability/revoke",
                        None,
                        json!({"recipient": IDS[to as usize], "capabilities": [cap_pool(cap)]}),
                    );
                    self.send(c, f);
                }
            }
            Step::Kick { conn, who } => {
                if let Some(c) = self.conn(conn) {
                    let me = self.who.get(&c).cloned().unwrap_or_default();
                    let f = self.envelope(
                        &me,
                        "space/kick",
                        None,
                        json!({"participant_id": IDS[who as usize]}),
                    );
                    self.send(c, f);
                }
            }
            Step::Garbage { conn, bytes } => {
                if let Some(c) = self.conn(conn) {
                    let sender = self.who.get(&c).cloned();
                    self.gw.handle_input(
                        self.now,
                        Input::Frame {
                            conn: c,
                            frame: Bytes::from(bytes),
                        },
                    );
                    let caps = sender.as_deref().and_then(|s| self.gw.capabilities_of(s));
                    let set = caps.map(|v| CapabilitySet::compile(v.as_array().unwrap()).unwrap());
                    self.drain(sender.as_deref().zip(set.as_ref()));
                }
            }
            Step::Data { conn, stream } => {
                if let Some(c) = self.conn(conn) {
                    self.send(c, format!("#stream-{stream}#payload"));
                }
            }
            Step::Tick(ms) => {
                self.now = self.now + Duration::from_millis(u64::from(ms));
                self.gw.handle_input(self.now, Input::Timeout);
                self.drain(None);
            }
            Step::Close(i) => {
                if let Some(c) = self.conn(i) {
                    self.gw
                        .handle_input(self.now, Input::Disconnected { conn: c });
                    self.closed.push(c);
                    self.conns.retain(|x| *x != c);
                    self.who.remove(&c);
                    self.welcome_caps.remove(&c);
                    self.drain(None);
                }
            }
            Step::Sent(i) => {
                if let Some(c) = self.conn(i) {
                    self.gw.handle_input(
                        self.now,
                        Input::Sent {
                            conn: c,
                            frames: 1000,
                            bytes: 1 << 20,
                        },
                    );
                }
            }
        }
        self.check_views();
        let _ = self.gw.poll_timeout();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn gateway_invariants_hold(seed in any::<u64>(), steps in proptest::collection::vec(step(), 1..80)) {
        let mut h = Harness::new(seed);
        for s in steps {
            h.run(s);
        }
    }
}
