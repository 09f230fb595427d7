//! Arbitrary interleavings of inbound envelopes (every kind, garbage), commands and ticks:
//! never a panic, never a pending request without a future deadline after a tick, and
//! `poll_timeout` never later than the earliest deadline.

use crate::support;

use mew_core::Kind;
use mew_core::Time;
use mew_core::participant::{
    CompactOutcome, Control, Input, Participant, RequestId, RequestOptions, ToolSpec,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use support::{ME, config};

#[derive(Debug, Clone)]
enum Op {
    Envelope {
        kind: usize,
        from: u8,
        to: u8,
        corr: Option<u8>,
        payload: u8,
        ctx: Option<u8>,
    },
    Garbage(String),
    StreamFrame(u8, String),
    Tick(u32),
    Disconnect,
    Connect,
    Welcome(u8),
    Command(u8, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..Kind::ALL_KNOWN.len() + 1, any::<u8>(), any::<u8>(), proptest::option::of(any::<u8>()), any::<u8>(), proptest::option::of(any::<u8>()))
            .prop_map(|(kind, from, to, corr, payload, ctx)| Op::Envelope { kind, from, to, corr, payload, ctx }),
        1 => ".{0,40}".prop_map(Op::Garbage),
        1 => (any::<u8>(), "[a-z#]{0,8}").prop_map(|(s, d)| Op::StreamFrame(s, d)),
        3 => (0u32..120_000).prop_map(Op::Tick),
        1 => Just(Op::Disconnect),
        1 => Just(Op::Connect),
        1 => any::<u8>().prop_map(Op::Welcome),
        6 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::Command(a, b)),
    ]
}

const PEOPLE: [&str; 5] = [ME, "bob", "boss", "system:gateway", "fs"];

fn caps(n: u8) -> Value {
    match n % 4 {
        0 => json!([{"kind": "*"}]),
        1 => json!([{"kind": "mcp/proposal"}, {"kind": "chat"}]),
        2 => {
            json!([{"kind": "mcp/request", "payload": {"method": "tools/list"}}, {"kind": "mcp/response"}])
        }
        _ => json!([]),
    }
}

fn payload(kind: &str, n: u8, known: &[String]) -> Value {
    let pick = |i: u8| {
        known
            .get(i as usize % known.len().max(1))
            .cloned()
            .unwrap_or_default()
    };
    match n % 8 {
        0 => Value::Null,
        1 => json!({"text": "hi", "reason": "unsafe", "direction": "oldest", "status": "ok"}),
        2 => {
            json!({"jsonrpc": "2.0", "id": n, "method": (["tools/list", "tools/call", "resources/read", "x/y"][n as usize % 4]),
                    "params": {"name": "t", "arguments": {"a": n}, "uri": "u"}})
        }
        3 => json!({"result": {"tools": [{"name": "t"}]}}),
        4 => json!({"error": {"code": -32601, "message": "m"}}),
        5 => {
            json!({"you": {"id": ME, "capabilities": caps(n)}, "participants": [{"id": "fs", "capabilities": caps(n / 4)}],
                    "active_streams": [{"stream_id": pick(n), "owner": ME}]})
        }
        6 => {
            json!({"event": (["join", "leave", "other"][n as usize % 3]), "participant": {"id": (PEOPLE[n as usize % 5]), "capabilities": caps(n)},
                    "timeout_seconds": n, "stream_id": pick(n), "recipient": ME, "capabilities": caps(n)})
        }
        _ => json!({"kind": kind, "nested": [[[{}]]], "timeout_seconds": -1, "fields": "x"}),
    }
}

fn command(p: &mut Participant, now: Time, a: u8, b: u8, known: &mut Vec<String>) {
    let pick = |i: u8, known: &Vec<String>| {
        known
            .get(i as usize % known.len().max(1))
            .cloned()
            .unwrap_or_default()
    };
    let pending: Vec<RequestId> = p.pending_requests().map(|(r, _)| r.clone()).collect();
    match a % 20 {
        0 | 1 => {
            if let Ok(id) = p.mcp_request(
                now,
                vec![PEOPLE[b as usize % 5].into()],
                payload("mcp/request", b, known),
                RequestOptions {
                    timeout: None,
                    prefer_proposal: b.is_multiple_of(3),
                },
            ) {
                known.push(id.to_string());
            }
        }
        2 => {
            let _ = p.fulfil(now, &pick(b, known));
        }
        3 => {
            let _ = p.reject(now, &pick(b, known), "unsafe");
        }
        4 => {
            if let Some(r) = pending.get(b as usize % pending.len().max(1)) {
                let _ = p.withdraw(now, r, "no_longer_needed");
            }
        }
        5 => {
            let _ = p.chat(now, "x", vec![]);
        }
        6 => {
            let first = p.pending_chats().next().map(|c| c.id.clone());
            if let Some(c) = first {
                let _ = p.acknowledge_chat(now, &c, "received");
            }
        }
        7 => {
            let _ = p.cancel_all_chats(now, "timeout");
        }
        8 => {
            if let Ok(c) = p.reasoning_start(now, "m", None) {
                known.push(c)
            }
        }
        9 => {
            let _ = p.reasoning_thought(now, &pick(b, known), "t");
            let _ = p.reasoning_cancel(now, &pick(b / 2, known), "x");
        }
        10 => {
            if let Ok(r) = p.request_stream(now, json!({"direction": "upload"}), vec![]) {
                known.push(r)
            }
        }
        11 => {
            let _ = p.send_stream_data(&pick(b, known), "data");
            let _ = p.close_stream(now, &pick(b, known), "done");
        }
        12 => {
            let first = p.pending_calls().next();
            if let Some(c) = first {
                let _ = p.complete_call(
                    now,
                    c,
                    if b.is_multiple_of(2) {
                        Ok(json!(b))
                    } else {
                        Err(mew_core::participant::ToolError::internal("e"))
                    },
                );
            }
        }
        13 => {
            let ctl: Vec<(String, Control)> = p
                .pending_controls()
                .map(|(i, c)| (i.to_owned(), c.clone()))
                .collect();
            if let Some((id, c)) = ctl.first() {
                let _ = match c {
                    Control::Forget { .. } => p.complete_forget(now, id, b as u64, 1),
                    Control::Compact { .. } => {
                        p.complete_compact(now, id, CompactOutcome::Skipped { reason: None })
                    }
                    Control::Clear => p.complete_clear(now, id),
                    Control::Restart => p.complete_restart(now, id),
                    Control::Shutdown if b.is_multiple_of(4) => p.complete_shutdown(now, id),
                    _ => p.complete_clear(now, id),
                };
            }
        }
        14 => {
            let _ = p.register_tool(ToolSpec {
                name: "t".into(),
                description: None,
                input_schema: Some(json!({"type": "object", "required": ["a"]})),
            });
        }
        15 => {
            let _ = p.discover_tools(now, PEOPLE[b as usize % 5]);
        }
        16 => {
            let _ = p.report_status(now, None);
            p.record_context_usage(now, b as u64 * 100, 1);
        }
        17 => {
            let _ = p.call_tool(now, "fs/t", json!({}), RequestOptions::default());
        }
        18 => {
            let _ = p.send_control(
                now,
                "bob",
                &Control::Pause {
                    reason: "x".into(),
                    timeout: None,
                },
            );
        }
        _ => {
            let _ = p.send(
                now,
                mew_core::participant::Draft::new(Kind::parse("game/move"))
                    .payload(json!({"b": b})),
            );
        }
    }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut cfg = config();
    cfg.context.max_tokens = 10_000;
    cfg.bounds.max_pending_requests = 16;
    let mut p = Participant::new(cfg, 7);
    let mut now = Time::from_unix_millis(1_000_000);
    let mut known: Vec<String> = vec!["stream-1".into()];
    let mut n = 0u64;
    p.start(now);
    p.handle_input(now, Input::Connected);
    for op in ops {
        let mut ticked = false;
        match op {
            Op::Envelope { kind, from, to, corr, payload: pl, ctx } => {
                let kind = Kind::ALL_KNOWN.get(kind).map(|k| k.as_str().to_owned()).unwrap_or("game/move".into());
                n += 1;
                let id = format!("in-{n}");
                let mut env = json!({"protocol": "mew/v0.4", "id": id, "from": PEOPLE[from as usize % 5], "kind": kind,
                                     "payload": payload(&kind, pl, &known)});
                match to % 3 { 0 => {}, 1 => env["to"] = json!([ME]), _ => env["to"] = json!([PEOPLE[to as usize % 5]]) }
                if let Some(c) = corr { env["correlation_id"] = json!([known.get(c as usize % known.len()).cloned().unwrap_or_default()]); }
                if let Some(c) = ctx { env["context"] = json!(known.get(c as usize % known.len()).cloned().unwrap_or_default()); }
                if env["payload"].is_null() { env.as_object_mut().unwrap().remove("payload"); }
                known.push(id);
                p.handle_input(now, Input::Frame(&env.to_string()));
            }
            Op::Garbage(g) => p.handle_input(now, Input::Frame(&g)),
            Op::StreamFrame(s, d) => p.handle_input(now, Input::Frame(&format!("#{}#{d}", known.get(s as usize % known.len()).cloned().unwrap_or_default()))),
            Op::Tick(ms) => {
                now = now + std::time::Duration::from_millis(ms as u64);
                p.handle_input(now, Input::Timeout);
                ticked = true;
            }
            Op::Disconnect => p.handle_input(now, Input::Disconnected { reason: "test" }),
            Op::Connect => p.handle_input(now, Input::Connected),
            Op::Welcome(c) => p.handle_input(now, Input::Frame(&json!({"protocol": "mew/v0.4", "id": "w", "from": "system:gateway", "to": [ME],
                "kind": "system/welcome", "payload": {"you": {"id": ME, "capabilities": caps(c)}, "participants": [{"id": "fs", "capabilities": caps(c / 4)}]}}).to_string())),
            Op::Command(a, b) => command(&mut p, now, a, b, &mut known),
        }
        while let Some(o) = p.poll_output() {
            if let mew_core::participant::Output::Transmit(t) = o
                && let Ok(v) = serde_json::from_str::<Value>(&t)
                && let Some(id) = v.get("id").and_then(Value::as_str)
            {
                known.push(id.to_owned());
            }
        }
        if known.len() > 200 {
            known.drain(1..100);
        }
        let deadlines: Vec<Time> = p.pending_requests().map(|(_, d)| d).collect();
        prop_assert!(deadlines.len() <= 16);
        if let Some(min) = deadlines.iter().min() {
            prop_assert!(
                p.poll_timeout().is_some_and(|t| t <= *min),
                "poll_timeout later than a deadline"
            );
            if ticked {
                prop_assert!(*min > now, "overdue request survived a tick");
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn interleavings_never_panic_and_keep_deadlines(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops)?;
    }
}
