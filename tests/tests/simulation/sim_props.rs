//! Property test over the whole system: participant machines and the gateway core under
//! random interleavings of commands, garbage and valid envelopes written on sockets by
//! hand, garbage handed straight to participants, grants, revocations, controls, dropped
//! links and ticks, in both delivery modes.
//!
//! Invariants: nothing panics (and no timer is left unconsumed); every pending request
//! has a deadline the machine's timer will honour; nothing is delivered from a sender
//! whose capabilities (at that moment, at the gateway) did not allow it; after quiescence
//! every ready participant's own capabilities equal the gateway's, and it sees exactly the
//! members the gateway has online.

use mew_core::capability::CapabilitySet;
use mew_core::envelope::Kind;
use mew_core::gateway::SpaceConfig;
use mew_core::participant::{
    ClientState, Control, Draft, ForgetDirection, RequestId, RequestOptions, StreamRole, ToolSpec,
};
use mew_tests::sim::participants::behaviour::{control_handler, reviewer, tool_handler};
use mew_tests::sim::participants::{NodeId, SPACE, Verdict, World};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

const NAMES: [&str; 4] = ["human", "agent", "caller", "service"];
const KINDS: [&str; 12] = [
    "chat",
    "mcp/request",
    "mcp/proposal",
    "mcp/response",
    "mcp/withdraw",
    "mcp/reject",
    "system/welcome",
    "capability/grant",
    "participant/pause",
    "participant/resume",
    "stream/request",
    "reasoning/start",
];
const GRANTABLE: [&str; 4] = [
    "mcp/request",
    "chat",
    "participant/resume",
    "stream/request",
];

#[derive(Debug, Clone)]
enum Op {
    Chat(usize),
    Request {
        from: usize,
        target: usize,
        n: i64,
        prefer_proposal: bool,
        timeout_s: u8,
    },
    Withdraw(usize),
    /// A well-formed envelope written on a node's socket, bypassing its machine.
    RawEnvelope {
        on: usize,
        kind: usize,
        spoof: Option<usize>,
        to: Option<usize>,
    },
    /// Bytes written on a node's socket.
    Garbage(usize, String),
    /// Text handed straight to a participant machine.
    Inbound(usize, String),
    /// An envelope from another participant handed straight to a participant machine.
    InboundEnvelope {
        to: usize,
        from: usize,
        kind: usize,
    },
    Grant(usize, usize),
    Revoke(usize, usize),
    Control(usize, u8, u8),
    Drop(usize),
    /// A second connection with the node's token, replacing the participant's.
    Impostor(usize),
    /// The node asks for a stream, or writes on the first it owns.
    Stream(usize),
    Tick(u32),
}

fn op() -> impl Strategy<Value = Op> {
    let node = 0..NAMES.len();
    prop_oneof![
        node.clone().prop_map(Op::Chat),
        // Mostly the service, which has the tool; sometimes anyone.
        (
            node.clone(),
            prop_oneof![2 => Just(3usize), 1 => 0..NAMES.len()],
            -3i64..3,
            any::<bool>(),
            0u8..20
        )
            .prop_map(
                |(from, target, n, prefer_proposal, timeout_s)| Op::Request {
                    from,
                    target,
                    n,
                    prefer_proposal,
                    timeout_s
                }
            ),
        node.clone().prop_map(Op::Withdraw),
        (
            node.clone(),
            0..KINDS.len(),
            proptest::option::of(node.clone()),
            proptest::option::of(node.clone())
        )
            .prop_map(|(on, kind, spoof, to)| Op::RawEnvelope {
                on,
                kind,
                spoof,
                to
            }),
        (node.clone(), ".{0,40}").prop_map(|(n, s)| Op::Garbage(n, s)),
        (node.clone(), ".{0,40}").prop_map(|(n, s)| Op::Inbound(n, s)),
        (node.clone(), node.clone(), 0..KINDS.len())
            .prop_map(|(to, from, kind)| Op::InboundEnvelope { to, from, kind }),
        (node.clone(), 0..GRANTABLE.len()).prop_map(|(n, c)| Op::Grant(n, c)),
        (node.clone(), 0..GRANTABLE.len()).prop_map(|(n, c)| Op::Revoke(n, c)),
        (node.clone(), 0u8..8, 0u8..40).prop_map(|(n, c, t)| Op::Control(n, c, t)),
        node.clone().prop_map(Op::Drop),
        node.clone().prop_map(Op::Impostor),
        node.prop_map(Op::Stream),
        (0u32..20_000).prop_map(Op::Tick),
    ]
}

fn payload_for(kind: &str, n: i64) -> Value {
    match kind {
        "mcp/request" | "mcp/proposal" => {
            json!({"method": "tools/call", "params": {"name": "work", "arguments": {"n": n}}})
        }
        "mcp/response" => json!({"jsonrpc": "2.0", "id": 1, "result": {"n": n}}),
        "system/welcome" => {
            json!({"you": {"id": "agent", "capabilities": [{"kind": "*"}]}, "participants": []})
        }
        "capability/grant" => json!({"recipient": "agent", "capabilities": [{"kind": "*"}]}),
        "participant/pause" => json!({"reason": "x", "timeout_seconds": n.abs()}),
        _ => json!({"text": format!("n={n}"), "reason": "x"}),
    }
}

struct Harness {
    w: World,
    nodes: Vec<NodeId>,
    requests: Vec<Vec<RequestId>>,
    violations: Rc<RefCell<Vec<String>>>,
    counter: u64,
}

impl Harness {
    fn new(seed: u64, addressed: bool) -> Harness {
        let yaml = if addressed {
            format!("{SPACE}gateway: {{delivery: addressed}}\n")
        } else {
            SPACE.to_owned()
        };
        let config = SpaceConfig::from_yaml(&yaml).unwrap();
        let mut w = World::new(config, seed, (1, 200));
        let violations = Rc::new(RefCell::new(Vec::new()));
        let v = violations.clone();
        w.transmit_hook = Some(Box::new(move |gw, _conn, frame| {
            if frame.first() == Some(&b'#') {
                return; // stream data, checked by ownership instead
            }
            let Ok(env) = serde_json::from_slice::<Value>(frame) else {
                v.borrow_mut()
                    .push(format!("unparsable frame delivered: {frame:?}"));
                return;
            };
            let from = env["from"].as_str().unwrap_or_default();
            let kind = env["kind"].as_str().unwrap_or_default();
            if from == "system:gateway" {
                return;
            }
            if kind.starts_with("system/") {
                v.borrow_mut()
                    .push(format!("system kind from {from} delivered"));
            }
            let Some(caps) = gw.capabilities_of(from) else {
                v.borrow_mut()
                    .push(format!("envelope from non-member {from} delivered"));
                return;
            };
            let caps = CapabilitySet::compile(caps.as_array().unwrap()).unwrap();
            if !caps.allows(kind, env.get("payload")) {
                v.borrow_mut().push(format!(
                    "{from} lacked the capability for {kind} but it was delivered"
                ));
            }
        }));
        let mut nodes = Vec::new();
        for name in NAMES {
            let mut c = w.config_for(name, &format!("{name}-token"));
            c.request_timeout = Duration::from_secs(15);
            c.proposal_timeout = Duration::from_secs(40);
            c.discovery.timeout = Duration::from_secs(3);
            c.discovery.retry_base = Duration::from_secs(1);
            let n = w.join_with(name, c);
            w.behave(n, control_handler(Duration::from_millis(300), 10));
            nodes.push(n);
        }
        let service = nodes[3];
        w.act(service, |p, _| {
            p.register_tool(ToolSpec {
                name: "work".into(),
                description: None,
                input_schema: None,
            })
        })
        .unwrap();
        w.behave(service, tool_handler(|_, a| Ok(a.clone())));
        w.behave(
            nodes[0],
            reviewer(
                Duration::from_millis(100),
                |_, p| match p["params"]["arguments"]["n"].as_i64().unwrap_or(0) {
                    n if n > 0 => Verdict::Fulfil,
                    n if n < 0 => Verdict::Reject("negative".into()),
                    _ => Verdict::Ignore,
                },
            ),
        );
        Harness {
            w,
            nodes,
            requests: vec![Vec::new(); NAMES.len()],
            violations,
            counter: 0,
        }
    }

    fn apply(&mut self, op: &Op) {
        let w = &mut self.w;
        self.counter += 1;
        let c = self.counter;
        match op {
            Op::Chat(n) => {
                let _ = w.act(self.nodes[*n], |p, now| p.chat(now, "hi", vec![]));
            }
            Op::Request {
                from,
                target,
                n,
                prefer_proposal,
                timeout_s,
            } => {
                let r = w.act(self.nodes[*from], |p, now| {
                    p.mcp_request(
                        now,
                        vec![NAMES[*target].into()],
                        payload_for("mcp/request", *n),
                        RequestOptions {
                            timeout: Some(Duration::from_secs(u64::from(*timeout_s))),
                            prefer_proposal: *prefer_proposal,
                        },
                    )
                });
                if let Ok(id) = r {
                    self.requests[*from].push(id);
                }
            }
            Op::Withdraw(n) => {
                if let Some(id) = self.requests[*n].pop() {
                    let _ = w.act(self.nodes[*n], |p, now| p.withdraw(now, &id, "done"));
                }
            }
            Op::RawEnvelope {
                on,
                kind,
                spoof,
                to,
            } => {
                let from = NAMES[spoof.unwrap_or(*on)];
                let kind = KINDS[*kind];
                let mut env = json!({"protocol": "mew/v0.4", "id": format!("raw-{c}"),
                    "from": from, "kind": kind, "payload": payload_for(kind, c as i64 % 3)});
                if let Some(t) = to {
                    env["to"] = json!([NAMES[*t]]);
                }
                if kind.starts_with("mcp/") && kind != "mcp/request" && kind != "mcp/proposal" {
                    env["correlation_id"] = json!([format!("raw-{}", c.saturating_sub(1))]);
                }
                w.send_raw(self.nodes[*on], env.to_string());
            }
            Op::Garbage(n, s) => w.send_raw(self.nodes[*n], s.clone()),
            Op::Inbound(n, s) => w.inject(self.nodes[*n], s),
            Op::InboundEnvelope { to, from, kind } => {
                let kind = KINDS[*kind];
                let env = json!({"protocol": "mew/v0.4", "id": format!("fake-{c}"),
                    "from": NAMES[*from], "to": [NAMES[*to]], "kind": kind,
                    "correlation_id": [format!("fake-{}", c.saturating_sub(1))],
                    "payload": payload_for(kind, 1)});
                w.inject(self.nodes[*to], &env.to_string());
            }
            Op::Grant(n, cap) => {
                let _ = w.act(self.nodes[0], |p, now| {
                    p.send(
                        now,
                        Draft::new(Kind::CapabilityGrant).to([NAMES[*n]]).payload(
                            json!({"recipient": NAMES[*n], "capabilities": [{"kind": GRANTABLE[*cap]}]}),
                        ),
                    )
                });
            }
            Op::Revoke(n, cap) => {
                let _ = w.act(self.nodes[0], |p, now| {
                    p.send(
                        now,
                        Draft::new(Kind::CapabilityRevoke).to([NAMES[*n]]).payload(
                            json!({"recipient": NAMES[*n], "capabilities": [{"kind": GRANTABLE[*cap]}]}),
                        ),
                    )
                });
            }
            Op::Control(n, which, t) => {
                let control = match which {
                    0 => Control::Pause {
                        reason: "prop".into(),
                        timeout: Some(Duration::from_secs(u64::from(*t))),
                    },
                    1 => Control::Resume,
                    2 => Control::RequestStatus { fields: vec![] },
                    3 => Control::Forget {
                        direction: ForgetDirection::Newest,
                        entries: Some(1),
                    },
                    4 => Control::Compact {
                        reason: None,
                        target_tokens: None,
                    },
                    5 => Control::Clear,
                    6 => Control::Restart,
                    _ => Control::Shutdown,
                };
                let _ = w.act(self.nodes[0], |p, now| {
                    p.send_control(now, NAMES[*n], &control)
                });
            }
            Op::Drop(n) => w.drop_link(self.nodes[*n]),
            Op::Impostor(n) => {
                w.connect_raw("impostor", Some(&format!("{}-token", NAMES[*n])));
            }
            Op::Stream(n) => {
                let owned = w
                    .p(self.nodes[*n])
                    .streams()
                    .find(|s| s.role == StreamRole::Owner)
                    .map(|s| s.stream_id.clone());
                let _ = match owned {
                    Some(sid) => w
                        .act(self.nodes[*n], |p, _| p.send_stream_data(&sid, "chunk"))
                        .map(|_| String::new()),
                    None => w.act(self.nodes[*n], |p, now| {
                        p.request_stream(now, json!({"direction": "upload"}), vec![])
                    }),
                };
            }
            Op::Tick(ms) => w.run_for(Duration::from_millis(u64::from(*ms))),
        }
        w.run_for(Duration::from_millis(20));
    }

    fn check_deadlines(&self) -> Result<(), TestCaseError> {
        let now = self.w.now();
        for &n in &self.nodes {
            let p = self.w.p(n);
            let earliest = p.pending_requests().map(|(_, d)| d).min();
            if let Some(d) = earliest {
                prop_assert!(d >= now, "{}: a pending request is overdue", NAMES[n.0]);
                prop_assert!(
                    p.poll_timeout().is_some_and(|t| t <= d),
                    "{}: no timer for a pending request's deadline",
                    NAMES[n.0]
                );
            }
        }
        Ok(())
    }
}

proptest! {
    // PROPTEST_CASES raises the count for longer hunts.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(96),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_whole_system_keeps_its_invariants(
        seed in any::<u64>(),
        addressed in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        run(seed, addressed, &ops)?;
    }
}

/// Runs `ops` in a fresh world (strict routing when `addressed`) and checks the invariants.
fn run(seed: u64, addressed: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut h = Harness::new(seed, addressed);
    for op in ops {
        h.apply(op);
        h.check_deadlines()?;
        let v = h.violations.borrow();
        prop_assert!(v.is_empty(), "after {op:?}: {v:?}");
    }
    // Quiescence: let reconnects, pauses, proposals and requests run out.
    h.w.run_for(Duration::from_secs(120));
    h.w.run_until_quiet();
    h.check_deadlines()?;
    for &n in &h.nodes {
        let p = h.w.p(n);
        if p.state() != ClientState::Ready {
            continue;
        }
        let id = p.id().unwrap();
        prop_assert_eq!(
            Some(p.capabilities().to_json()),
            h.w.gw.capabilities_of(id),
            "{}'s capabilities disagree with the gateway's",
            id
        );
        let mut seen: Vec<String> = p.participants().map(|(id, _)| id.to_owned()).collect();
        seen.sort();
        let mut online: Vec<String> =
            h.w.gw
                .participants()
                .into_iter()
                .filter(|m| m.online && m.id != id)
                .map(|m| m.id)
                .collect();
        online.sort();
        prop_assert_eq!(seen, online, "{}'s view of who is present disagrees", id);
    }
    let v = h.violations.borrow();
    prop_assert!(v.is_empty(), "{v:?}");
    Ok(())
}
