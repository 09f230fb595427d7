//! A reference model of a space, checked against the real gateway frame by frame.
//!
//! The model ([`Space`]) knows members, their grants and pauses, and who receives what; it
//! is written from the protocol and docs/gateway rules alone, with its own small matcher
//! for the capability patterns it hands out, and never asks the gateway anything. Random
//! sequences of joins, leaves, sends of every kind, grants, revocations (by pattern and by
//! grant id), pauses (with and without a timeout), resumes, kicks and the passing of time
//! run against both, in `all` and `addressed` delivery; after every step the frames each
//! connection actually received (and the closes) must be exactly those the model expects.
//!
//! The same check run against a gateway wrapped to behave wrongly (it forgets revocations,
//! forgets pauses, or shows directed envelopes to everyone) must fail and shrink to a
//! handful of steps: that is what shows the model can find a bookkeeping bug.

use mew_core::gateway::{ConnId, SpaceConfig};
use mew_tests::sim::{World, parse};
use proptest::prelude::*;
use proptest::strategy::Union;
use proptest::test_runner::{Config, TestError, TestRunner};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// The model.

/// The space's members; the first holds `*` and does all the space operations.
const NAMES: [&str; 4] = ["boss", "ann", "bob", "cat"];
const BOSS: usize = 0;

fn yaml(addressed: bool) -> String {
    format!(
        r#"
space: {{id: model}}
participants:
  boss: {{tokens: [t-boss], capabilities: [{{kind: "*"}}]}}
  ann: {{tokens: [t-ann], capabilities: [{{kind: chat}}]}}
  bob: {{tokens: [t-bob], capabilities: [{{kind: chat}}, {{kind: mcp/request, payload: {{method: tools/list}}}}]}}
  cat: {{tokens: [t-cat], capabilities: [{{kind: mcp/response}}]}}
gateway: {{delivery: {}, heartbeat_interval_ms: 86400000, idle_timeout_ms: 86400000}}
"#,
        if addressed { "addressed" } else { "all" }
    )
}

fn token(m: usize) -> String {
    format!("t-{}", NAMES[m])
}

/// A capability pattern the model hands out (and the ones the configuration gives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Pat {
    Any,
    Chat,
    Request,
    ListTools,
    Mcp,
    Proposal,
    Response,
    Status,
}

const GRANTABLE: [Pat; 8] = [
    Pat::Any,
    Pat::Chat,
    Pat::Request,
    Pat::ListTools,
    Pat::Mcp,
    Pat::Proposal,
    Pat::Response,
    Pat::Status,
];

impl Pat {
    fn json(self) -> Value {
        match self {
            Pat::Any => json!({"kind": "*"}),
            Pat::Chat => json!({"kind": "chat"}),
            Pat::Request => json!({"kind": "mcp/request"}),
            Pat::ListTools => json!({"kind": "mcp/request", "payload": {"method": "tools/list"}}),
            Pat::Mcp => json!({"kind": "mcp/*"}),
            Pat::Proposal => json!({"kind": "mcp/proposal"}),
            Pat::Response => json!({"kind": "mcp/response"}),
            Pat::Status => json!({"kind": "participant/status"}),
        }
    }

    /// Whether a message of this sort matches the pattern.
    fn allows(self, say: Say) -> bool {
        match self {
            Pat::Any => true,
            Pat::Chat => say == Say::Chat,
            Pat::Request => matches!(say, Say::List | Say::Call),
            Pat::ListTools => say == Say::List,
            Pat::Mcp => matches!(say, Say::List | Say::Call | Say::Propose | Say::Respond),
            Pat::Proposal => say == Say::Propose,
            Pat::Response => say == Say::Respond,
            Pat::Status => say == Say::Status,
        }
    }

    /// Whether every message `other` matches, this matches too.
    fn covers(self, other: Pat) -> bool {
        self == other
            || self == Pat::Any
            || (self == Pat::Mcp
                && matches!(
                    other,
                    Pat::Request | Pat::ListTools | Pat::Proposal | Pat::Response
                ))
            || (self == Pat::Request && other == Pat::ListTools)
    }
}

fn configured(m: usize) -> &'static [Pat] {
    match m {
        0 => &[Pat::Any],
        1 => &[Pat::Chat],
        2 => &[Pat::Chat, Pat::ListTools],
        _ => &[Pat::Response],
    }
}

/// What a member says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Say {
    Chat,
    List,
    Call,
    Propose,
    Respond,
    Ack,
    Status,
}

const SAYS: [Say; 7] = [
    Say::Chat,
    Say::List,
    Say::Call,
    Say::Propose,
    Say::Respond,
    Say::Ack,
    Say::Status,
];

impl Say {
    fn kind(self) -> &'static str {
        match self {
            Say::Chat => "chat",
            Say::List | Say::Call => "mcp/request",
            Say::Propose => "mcp/proposal",
            Say::Respond => "mcp/response",
            Say::Ack => "chat/acknowledge",
            Say::Status => "participant/status",
        }
    }

    fn payload(self) -> Value {
        match self {
            Say::Chat => json!({"text": "hello"}),
            Say::List => json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            Say::Call | Say::Propose => {
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}})
            }
            Say::Respond => json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
            Say::Ack => json!({"status": "received"}),
            Say::Status => json!({"status": "idle"}),
        }
    }

    /// Kinds that finish or acknowledge work, which a paused member may still send.
    fn while_paused(self) -> bool {
        matches!(self, Say::Respond | Say::Ack | Say::Status)
    }
}

/// One step of a run.
#[derive(Debug, Clone)]
enum Step {
    /// The member opens a connection with its token.
    Connect(usize),
    /// The member closes its connection.
    Leave(usize),
    /// The member sends, to everyone or to one member.
    Send {
        from: usize,
        say: Say,
        to: Option<usize>,
    },
    /// One grant of one or two patterns.
    Grant {
        to: usize,
        pats: Vec<Pat>,
    },
    RevokePattern {
        to: usize,
        pat: Pat,
    },
    RevokeGrant {
        to: usize,
        grant: String,
    },
    Pause {
        who: usize,
        secs: Option<u8>,
    },
    Resume(usize),
    Kick(usize),
    Tick(u16),
}

#[derive(Debug, Clone, Default)]
struct Member {
    online: bool,
    kicked: bool,
    /// Grant id and what it still gives.
    grants: Vec<(String, Vec<Pat>)>,
    /// Paused, until a time (ms) or until resumed.
    paused: Option<Option<u64>>,
}

/// A frame as the model describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// A member's envelope.
    Envelope {
        kind: String,
        from: String,
        id: String,
    },
    /// `system/welcome`: own capabilities, and who else is there with theirs.
    Welcome {
        caps: BTreeSet<String>,
        others: BTreeMap<String, BTreeSet<String>>,
    },
    Joined {
        who: String,
        caps: BTreeSet<String>,
    },
    Left(String),
    Error {
        code: String,
        about: Option<String>,
    },
}

/// What one step must show.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Shown {
    /// Frames each member's connection received, in order.
    frames: [Vec<Seen>; 4],
    /// Members whose connection the gateway closed, and the code.
    closes: [Option<u16>; 4],
    /// Frames on a connection that never became a member's, and how it was closed.
    refused: Option<(Vec<Seen>, Option<u16>)>,
}

/// The model's state.
#[derive(Debug, Clone)]
struct Space {
    addressed: bool,
    now_ms: u64,
    next: u64,
    members: [Member; 4],
    /// The id of the envelope the last step sent.
    last_id: String,
    /// What the last step must have shown.
    expect: Shown,
}

fn canon(p: &Value) -> String {
    match p {
        Value::Object(m) => {
            let sorted: BTreeMap<&String, String> = m.iter().map(|(k, v)| (k, canon(v))).collect();
            let inner: Vec<String> = sorted
                .iter()
                .map(|(k, v)| format!("{}:{v}", Value::String((*k).clone())))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(canon).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

impl Space {
    fn caps(&self, m: usize) -> Vec<Pat> {
        let mut v: Vec<Pat> = configured(m).to_vec();
        for (_, pats) in &self.members[m].grants {
            v.extend(pats);
        }
        v
    }

    fn caps_json(&self, m: usize) -> BTreeSet<String> {
        self.caps(m).iter().map(|p| canon(&p.json())).collect()
    }

    fn online(&self) -> impl Iterator<Item = usize> + '_ {
        (0..4).filter(|&m| self.members[m].online)
    }

    fn welcome(&self, m: usize) -> Seen {
        Seen::Welcome {
            caps: self.caps_json(m),
            others: self
                .online()
                .filter(|&o| o != m)
                .map(|o| (NAMES[o].to_owned(), self.caps_json(o)))
                .collect(),
        }
    }

    fn show_all(&mut self, seen: Seen) {
        for m in self.online().collect::<Vec<_>>() {
            self.expect.frames[m].push(seen.clone());
        }
    }

    fn show_one(&mut self, m: usize, seen: Seen) {
        if self.members[m].online {
            self.expect.frames[m].push(seen);
        }
    }

    fn error(&mut self, m: usize, code: &str) {
        let about = Some(self.last_id.clone());
        self.show_one(
            m,
            Seen::Error {
                code: code.into(),
                about,
            },
        );
    }

    /// Who receives an accepted envelope: everyone under `all`; under `addressed`,
    /// everyone but the sender when it names no one (and always for a proposal, so that
    /// reviewers see it), else the member it names.
    fn deliver(&mut self, from: usize, kind: &str, to: Option<usize>) {
        let seen = Seen::Envelope {
            kind: kind.into(),
            from: NAMES[from].into(),
            id: self.last_id.clone(),
        };
        if !self.addressed {
            return self.show_all(seen);
        }
        match to {
            Some(t) if kind != "mcp/proposal" => self.show_one(t, seen),
            _ => {
                for m in self.online().filter(|&m| m != from).collect::<Vec<_>>() {
                    self.expect.frames[m].push(seen.clone());
                }
            }
        }
    }

    fn expire_pauses(&mut self) {
        let now = self.now_ms;
        for m in &mut self.members {
            if let Some(Some(until)) = m.paused
                && until <= now
            {
                m.paused = None;
            }
        }
    }

    fn step(&mut self, step: &Step) {
        self.expect = Shown::default();
        self.next += 1;
        self.last_id = format!("e{}", self.next);
        match *step {
            Step::Connect(m) => {
                if self.members[m].kicked {
                    let refused = vec![Seen::Error {
                        code: "unknown_token".into(),
                        about: None,
                    }];
                    self.expect.refused = Some((refused, Some(1008)));
                } else if self.members[m].online {
                    // A new connection replaces the old one: no presence.
                    self.expect.closes[m] = Some(1000);
                    let w = self.welcome(m);
                    self.expect.frames[m].push(w);
                } else {
                    let joined = Seen::Joined {
                        who: NAMES[m].into(),
                        caps: self.caps_json(m),
                    };
                    self.show_all(joined);
                    self.members[m].online = true;
                    let w = self.welcome(m);
                    self.expect.frames[m].push(w);
                }
            }
            Step::Leave(m) => {
                self.members[m].online = false;
                self.show_all(Seen::Left(NAMES[m].into()));
            }
            Step::Send { from, say, to } => {
                let paused = self.members[from].paused.is_some();
                if paused && !say.while_paused() {
                    self.error(from, "participant_paused");
                } else if !self.caps(from).iter().any(|p| p.allows(say)) {
                    self.error(from, "capability_violation");
                } else {
                    self.deliver(from, say.kind(), to);
                }
            }
            Step::Grant { to, ref pats } => {
                if self.members[to].kicked {
                    return self.error(BOSS, "unknown_participant");
                }
                let id = self.last_id.clone();
                self.members[to].grants.push((id, pats.clone()));
                let w = self.welcome(to);
                self.show_one(to, w);
                self.deliver(BOSS, "capability/grant", Some(to));
            }
            Step::RevokePattern { to, pat } => {
                if self.members[to].kicked {
                    return self.error(BOSS, "unknown_participant");
                }
                for (_, pats) in &mut self.members[to].grants {
                    pats.retain(|p| !pat.covers(*p));
                }
                self.members[to].grants.retain(|(_, pats)| !pats.is_empty());
                let w = self.welcome(to);
                self.show_one(to, w);
                self.deliver(BOSS, "capability/revoke", Some(to));
            }
            Step::RevokeGrant { to, ref grant } => {
                if self.members[to].kicked {
                    return self.error(BOSS, "unknown_participant");
                }
                let grants = &mut self.members[to].grants;
                let Some(pos) = grants.iter().position(|(g, _)| g == grant) else {
                    return self.error(BOSS, "unknown_grant");
                };
                grants.remove(pos);
                let w = self.welcome(to);
                self.show_one(to, w);
                self.deliver(BOSS, "capability/revoke", Some(to));
            }
            Step::Pause { who, secs } => {
                self.deliver(BOSS, "participant/pause", Some(who));
                if !self.members[who].kicked {
                    let until = secs.map(|s| self.now_ms + u64::from(s) * 1000);
                    self.members[who].paused = Some(until);
                }
            }
            Step::Resume(who) => {
                self.deliver(BOSS, "participant/resume", Some(who));
                self.members[who].paused = None;
            }
            Step::Kick(who) => {
                if self.members[who].kicked {
                    return self.error(BOSS, "unknown_participant");
                }
                // The kick is seen by its target too, then the target is gone for good:
                // its token, grants and pause with it.
                self.deliver(BOSS, "space/kick", None);
                let was_online = self.members[who].online;
                self.members[who] = Member {
                    kicked: true,
                    ..Member::default()
                };
                if was_online {
                    self.expect.closes[who] = Some(1008);
                    self.show_all(Seen::Left(NAMES[who].into()));
                }
            }
            Step::Tick(ms) => {
                self.now_ms += u64::from(ms);
                self.expire_pauses();
            }
        }
    }
}

/// The reference state machine: what may happen next, and what it changes.
struct Model;

impl ReferenceStateMachine for Model {
    type State = Space;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Space> {
        any::<bool>()
            .prop_map(|addressed| Space {
                addressed,
                now_ms: 0,
                next: 0,
                members: Default::default(),
                last_id: String::new(),
                expect: Shown::default(),
            })
            .boxed()
    }

    fn transitions(state: &Space) -> BoxedStrategy<Step> {
        let member = || 0..4usize;
        let other = || 1..4usize;
        let online: Vec<usize> = state.online().collect();
        let mut steps: Vec<(u32, BoxedStrategy<Step>)> =
            vec![(3, member().prop_map(Step::Connect).boxed())];
        steps.push((1, (1..4000u16).prop_map(Step::Tick).boxed()));
        if !online.is_empty() {
            let from = proptest::sample::select(online.clone());
            steps.push((
                1,
                proptest::sample::select(online)
                    .prop_map(Step::Leave)
                    .boxed(),
            ));
            steps.push((
                8,
                (
                    from,
                    proptest::sample::select(SAYS.to_vec()),
                    proptest::option::of(member()),
                )
                    .prop_map(|(from, say, to)| Step::Send { from, say, to })
                    .boxed(),
            ));
        }
        if state.members[BOSS].online {
            let pat = || proptest::sample::select(GRANTABLE.to_vec());
            steps.push((
                3,
                (other(), proptest::collection::vec(pat(), 1..=2))
                    .prop_map(|(to, pats)| Step::Grant { to, pats })
                    .boxed(),
            ));
            steps.push((
                1,
                (other(), pat())
                    .prop_map(|(to, pat)| Step::RevokePattern { to, pat })
                    .boxed(),
            ));
            let grants: Vec<(usize, String)> = (1..4)
                .flat_map(|m| {
                    state.members[m]
                        .grants
                        .iter()
                        .map(move |(g, _)| (m, g.clone()))
                })
                .collect();
            if !grants.is_empty() {
                steps.push((
                    2,
                    proptest::sample::select(grants)
                        .prop_map(|(to, grant)| Step::RevokeGrant { to, grant })
                        .boxed(),
                ));
            }
            steps.push((
                2,
                (other(), proptest::option::of(1..6u8))
                    .prop_map(|(who, secs)| Step::Pause { who, secs })
                    .boxed(),
            ));
            steps.push((1, other().prop_map(Step::Resume).boxed()));
            steps.push((1, other().prop_map(Step::Kick).boxed()));
        }
        Union::new_weighted(steps).boxed()
    }

    fn preconditions(state: &Space, step: &Step) -> bool {
        match step {
            Step::Leave(m) => state.members[*m].online,
            Step::Send { from, .. } => state.members[*from].online,
            Step::Connect(_) | Step::Tick(_) => true,
            _ => state.members[BOSS].online,
        }
    }

    fn apply(mut state: Space, step: &Step) -> Space {
        state.step(step);
        state
    }
}

// ---------------------------------------------------------------------------------------
// The system under test: the real gateway in the simulated world, seen only through the
// frames its connections received.

/// A deliberate fault put around the gateway, to show the model catches it.
trait Perturb: Default + 'static {
    /// Changes an envelope on its way in; may give one more to send right after it, whose
    /// own deliveries are hidden.
    fn inbound(&self, _env: &mut Value) -> Option<Value> {
        None
    }

    /// Changes what the live connections received in one step.
    fn outbound(&self, _w: &mut World, _live: &[ConnId]) {}
}

/// The gateway as it is.
#[derive(Default)]
struct Faithful;

impl Perturb for Faithful {}

/// A gateway that goes through the motions of a revocation by pattern (welcome, delivery)
/// but keeps what it should have removed.
#[derive(Default)]
struct ForgetsRevocations;

impl Perturb for ForgetsRevocations {
    fn inbound(&self, env: &mut Value) -> Option<Value> {
        if env["kind"] == "capability/revoke" && env["payload"].get("capabilities").is_some() {
            let recipient = env["payload"]["recipient"].clone();
            env["payload"] =
                json!({"recipient": recipient, "capabilities": [{"kind": "never/held"}]});
        }
        None
    }
}

/// A gateway that announces a pause but does not hold the participant.
#[derive(Default)]
struct ForgetsPauses;

impl Perturb for ForgetsPauses {
    fn inbound(&self, env: &mut Value) -> Option<Value> {
        (env["kind"] == "participant/pause").then(|| {
            let mut resume = env.clone();
            resume["id"] = json!(format!("unseen-{}", env["id"].as_str().unwrap_or("")));
            resume["kind"] = json!("participant/resume");
            resume["payload"] = json!({});
            resume
        })
    }
}

/// A gateway that shows directed envelopes to every member.
#[derive(Default)]
struct ShowsDirectedToAll;

impl Perturb for ShowsDirectedToAll {
    fn outbound(&self, w: &mut World, live: &[ConnId]) {
        let mut directed = Vec::new();
        for c in live {
            for f in &w.endpoint(*c).inbox {
                let v = parse(f);
                if v["from"] != "system:gateway" && v.get("to").is_some() && !directed.contains(f) {
                    directed.push(f.clone());
                }
            }
        }
        for c in live {
            let ep = w.net.endpoints.get_mut(c).expect("a live connection");
            for f in &directed {
                if !ep.inbox.contains(f) {
                    ep.inbox.push(f.clone());
                }
            }
        }
    }
}

/// The real gateway, each member's current connection, and the fault around it.
struct Sut<P> {
    world: World,
    conns: [Option<ConnId>; 4],
    perturb: P,
}

impl<P: Perturb> Sut<P> {
    /// The one place a member's envelope enters the gateway.
    fn send(&mut self, from: usize, mut env: Value) {
        let conn = self.conns[from].expect("the sender is online");
        let unseen = self.perturb.inbound(&mut env);
        self.world.frame_in(conn, env.to_string().into());
        self.world.pump();
        if let Some(u) = unseen {
            let id = u["id"].clone();
            self.world.frame_in(conn, u.to_string().into());
            self.world.pump();
            for ep in self.world.net.endpoints.values_mut() {
                ep.inbox.retain(|f| parse(f)["id"] != id);
            }
        }
    }

    fn envelope(id: &str, from: usize, kind: &str, to: Option<usize>, payload: Value) -> Value {
        let mut v = json!({"protocol": "mew/v0.4", "id": id, "ts": "2025-01-09T10:00:00.000Z",
            "from": NAMES[from], "kind": kind, "payload": payload});
        if let Some(t) = to {
            v["to"] = json!([NAMES[t]]);
        }
        v
    }

    fn seen(frame: &[u8]) -> Seen {
        let v = parse(frame);
        let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let caps = |v: &Value| -> BTreeSet<String> {
            v.as_array()
                .map(|a| a.iter().map(canon).collect())
                .unwrap_or_default()
        };
        if v["from"] != "system:gateway" {
            return Seen::Envelope {
                kind: s(&v["kind"]),
                from: s(&v["from"]),
                id: s(&v["id"]),
            };
        }
        let p = &v["payload"];
        match v["kind"].as_str() {
            Some("system/welcome") => Seen::Welcome {
                caps: caps(&p["you"]["capabilities"]),
                others: p["participants"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|o| (s(&o["id"]), caps(&o["capabilities"])))
                    .collect(),
            },
            Some("system/presence") if p["event"] == "join" => Seen::Joined {
                who: s(&p["participant"]["id"]),
                caps: caps(&p["participant"]["capabilities"]),
            },
            Some("system/presence") if p["event"] == "leave" => {
                Seen::Left(s(&p["participant"]["id"]))
            }
            Some("system/error") => Seen::Error {
                code: s(&p["error"]),
                about: v["correlation_id"][0].as_str().map(str::to_owned),
            },
            _ => Seen::Envelope {
                kind: s(&v["kind"]),
                from: s(&v["from"]),
                id: s(&v["id"]),
            },
        }
    }

    fn take(&mut self, conn: ConnId) -> Vec<Seen> {
        let ep = self.world.net.endpoints.get_mut(&conn).expect("known");
        std::mem::take(&mut ep.inbox)
            .iter()
            .map(|f| Self::seen(f))
            .collect()
    }

    /// Runs one step; what every connection received in it.
    fn run(&mut self, space: &Space, step: &Step) -> Shown {
        let before = self.conns;
        let id = space.last_id.as_str();
        let mut fresh = None;
        match step {
            Step::Connect(m) => {
                let c = self.world.open(Some(&token(*m)));
                self.world.pump();
                fresh = Some((*m, c));
            }
            Step::Leave(m) => {
                let c = self.conns[*m].take().expect("online");
                self.world.disconnect(c);
                self.world.pump();
            }
            Step::Send { from, say, to } => {
                let env = Self::envelope(id, *from, say.kind(), *to, say.payload());
                self.send(*from, env);
            }
            Step::Grant { to, pats } => {
                let caps: Vec<Value> = pats.iter().map(|p| p.json()).collect();
                let p = json!({"recipient": NAMES[*to], "capabilities": caps});
                let env = Self::envelope(id, BOSS, "capability/grant", Some(*to), p);
                self.send(BOSS, env);
            }
            Step::RevokePattern { to, pat } => {
                let p = json!({"recipient": NAMES[*to], "capabilities": [pat.json()]});
                let env = Self::envelope(id, BOSS, "capability/revoke", Some(*to), p);
                self.send(BOSS, env);
            }
            Step::RevokeGrant { to, grant } => {
                let p = json!({"recipient": NAMES[*to], "grant_id": grant});
                let env = Self::envelope(id, BOSS, "capability/revoke", Some(*to), p);
                self.send(BOSS, env);
            }
            Step::Pause { who, secs } => {
                let p = match secs {
                    Some(s) => json!({"reason": "model", "timeout_seconds": s}),
                    None => json!({"reason": "model"}),
                };
                let env = Self::envelope(id, BOSS, "participant/pause", Some(*who), p);
                self.send(BOSS, env);
            }
            Step::Resume(who) => {
                let env = Self::envelope(id, BOSS, "participant/resume", Some(*who), json!({}));
                self.send(BOSS, env);
            }
            Step::Kick(who) => {
                let p = json!({"participant_id": NAMES[*who], "reason": "model"});
                let env = Self::envelope(id, BOSS, "space/kick", None, p);
                self.send(BOSS, env);
            }
            Step::Tick(ms) => self.world.advance(Duration::from_millis(u64::from(*ms))),
        }
        let mut shown = Shown::default();
        // A connection the gateway closed is no longer its member's.
        for (m, was) in before.iter().enumerate() {
            if let Some(c) = *was
                && let Some((code, _)) = self.world.closed(c)
                && self.conns[m] == Some(c)
            {
                shown.closes[m] = Some(code);
                self.conns[m] = None;
            }
        }
        if let Some((m, c)) = fresh
            && self.world.closed(c).is_none()
        {
            self.conns[m] = Some(c);
        }
        let live: Vec<ConnId> = self.conns.iter().flatten().copied().collect();
        self.perturb.outbound(&mut self.world, &live);
        for (m, was) in before.iter().enumerate() {
            let mut frames = Vec::new();
            if let Some(c) = *was {
                frames.extend(self.take(c));
            }
            if let Some(c) = self.conns[m]
                && *was != Some(c)
            {
                frames.extend(self.take(c));
            }
            shown.frames[m] = frames;
        }
        if let Some((m, c)) = fresh
            && self.conns[m] != Some(c)
        {
            let frames = self.take(c);
            shown.refused = Some((frames, self.world.closed(c).map(|(code, _)| code)));
        }
        shown
    }
}

/// The model check, around the gateway with fault `P`.
struct Check<P>(PhantomData<P>);

impl<P: Perturb> StateMachineTest for Check<P> {
    type SystemUnderTest = Sut<P>;
    type Reference = Model;

    fn init_test(space: &Space) -> Sut<P> {
        let config = SpaceConfig::from_yaml(&yaml(space.addressed)).expect("the model's space");
        Sut {
            world: World::seeded(config, 7),
            conns: [None; 4],
            perturb: P::default(),
        }
    }

    fn apply(mut sut: Sut<P>, space: &Space, step: Step) -> Sut<P> {
        let shown = sut.run(space, &step);
        assert_eq!(
            shown, space.expect,
            "after {step:?} (left: what the gateway delivered, right: what the model expects)"
        );
        sut
    }
}

prop_state_machine! {
    #![proptest_config(Config {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256),
        max_shrink_iters: 4096,
        ..Config::default()
    })]

    #[test]
    fn the_gateway_delivers_what_the_model_expects(sequential 1..40 => Check<Faithful>);
}

/// Runs the check around a faulty gateway; the shrunk failing run and its message.
fn shrunk_failure<P: Perturb>() -> (Vec<Step>, String) {
    let config = Config {
        cases: 256,
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config.clone(),
        proptest::test_runner::TestRng::deterministic_rng(config.rng_algorithm),
    );
    let strategy = Model::sequential_strategy(1..40);
    let result = runner.run(&strategy, |(initial, steps, seen)| {
        Check::<P>::test_sequential(config.clone(), initial, steps, seen);
        Ok(())
    });
    match result {
        Err(TestError::Fail(why, (_, steps, _))) => (steps, why.to_string()),
        other => panic!("the model did not catch the fault: {other:?}"),
    }
}

#[test]
fn the_model_catches_a_gateway_that_forgets_revocations() {
    let (steps, why) = shrunk_failure::<ForgetsRevocations>();
    assert!(
        steps.len() <= 4,
        "shrunk to {} steps: {steps:?}",
        steps.len()
    );
    assert!(
        steps
            .iter()
            .any(|s| matches!(s, Step::RevokePattern { .. })),
        "{steps:?}"
    );
    assert!(
        why.contains("Welcome") || why.contains("capability_violation"),
        "{why}"
    );
}

#[test]
fn the_model_catches_a_gateway_that_forgets_pauses() {
    let (steps, why) = shrunk_failure::<ForgetsPauses>();
    assert!(
        steps.len() <= 4,
        "shrunk to {} steps: {steps:?}",
        steps.len()
    );
    assert!(
        steps.iter().any(|s| matches!(s, Step::Pause { .. })),
        "{steps:?}"
    );
    assert!(why.contains("participant_paused"), "{why}");
}

#[test]
fn the_model_catches_a_gateway_that_shows_directed_envelopes_to_all() {
    let (steps, why) = shrunk_failure::<ShowsDirectedToAll>();
    assert!(
        steps.len() <= 4,
        "shrunk to {} steps: {steps:?}",
        steps.len()
    );
    assert!(
        steps.iter().any(|s| matches!(
            s,
            Step::Send { to: Some(_), .. }
                | Step::Grant { .. }
                | Step::Pause { .. }
                | Step::Resume(_)
                | Step::RevokePattern { .. }
                | Step::RevokeGrant { .. }
        )),
        "{steps:?}"
    );
    assert!(why.contains("Envelope"), "{why}");
}
