//! Arbitrary bytes decoded into gateway operations: connects with and without tokens,
//! frames (raw bytes and well-formed envelopes of chosen kinds), ticks, closes, pongs and
//! write reports, HTTP posts, oversize frames and a shutdown, given to the simulated world
//! the tests use (`mew_tests::sim::World`, the gateway's one input adapter). The gateway must
//! never panic, never send on a connection it was told is gone, and every audit line it
//! formats must be one JSON object.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use mew_core::gateway::{ConnId, SpaceConfig};
use mew_tests::sim::{Handed, World};
use std::sync::OnceLock;
use std::time::Duration;

const YAML: &str = r#"
space: {id: fuzz}
participants:
  root: {tokens: [t0], capabilities: [{kind: "*"}]}
  mid: {tokens: [t1], capabilities: [{kind: chat}, {kind: capability/grant}, {kind: stream/request}, {kind: stream/close}]}
  low: {tokens: [t2], capabilities: [{kind: mcp/request, payload: {method: tools/list}}]}
  log: {tokens: [t3], output_log: l.jsonl, auto_connect: true}
defaults: {capabilities: [{kind: chat}]}
gateway: {anonymous_joins: true, max_frame_bytes: 4096, max_queue_frames: 32, history_size: 16, max_streams: 4}
"#;

const TOKENS: [&str; 5] = ["t0", "t1", "t2", "t3", "nope"];
const IDS: [&str; 5] = ["root", "mid", "low", "log", "anon"];
const KINDS: [&str; 16] = [
    "chat",
    "mcp/request",
    "capability/grant",
    "capability/revoke",
    "space/invite",
    "space/kick",
    "participant/pause",
    "participant/resume",
    "participant/shutdown",
    "stream/request",
    "stream/close",
    "system/welcome",
    "chat/acknowledge",
    "mcp/response",
    "capability/grant-ack",
    "game/move",
];

fn take<'a>(data: &mut &'a [u8], n: usize) -> &'a [u8] {
    let n = n.min(data.len());
    let (head, tail) = data.split_at(n);
    *data = tail;
    head
}

fn byte(data: &mut &[u8]) -> u8 {
    take(data, 1).first().copied().unwrap_or(0)
}

fn envelope(data: &mut &[u8]) -> String {
    let kind = KINDS[byte(data) as usize % KINDS.len()];
    let from = IDS[byte(data) as usize % IDS.len()];
    let target = IDS[byte(data) as usize % IDS.len()];
    let n = byte(data);
    let payload = match n % 6 {
        0 => format!(r#"{{"recipient":"{target}","capabilities":[{{"kind":"chat"}}]}}"#),
        1 => format!(r#"{{"recipient":"{target}","grant_id":"g{}"}}"#, n / 6),
        2 => format!(r#"{{"participant_id":"{target}","initial_capabilities":[{{"kind":"*"}}]}}"#),
        3 => format!(
            r#"{{"stream_id":"stream-{}","timeout_seconds":{}}}"#,
            n % 4,
            n
        ),
        4 => r#"{"method":"tools/list"}"#.to_owned(),
        _ => String::from_utf8_lossy(take(data, 24))
            .into_owned()
            .replace('"', "'"),
    };
    let payload = if n % 6 == 5 {
        format!(r#"{{"t":"{payload}"}}"#)
    } else {
        payload
    };
    format!(
        r#"{{"protocol":"mew/v0.4","id":"g{}","from":"{from}","to":["{target}"],"kind":"{kind}","payload":{payload}}}"#,
        n / 6
    )
}

fuzz_target!(|input: &[u8]| {
    let mut data = input;
    // Parsed once: the target exercises the gateway, not the YAML reader.
    static CONFIG: OnceLock<SpaceConfig> = OnceLock::new();
    let config = CONFIG
        .get_or_init(|| SpaceConfig::from_yaml(YAML).expect("fuzz config is valid"))
        .clone();
    let mut w = World::seeded(config, 7);
    let mut conns: Vec<ConnId> = Vec::new();
    while !data.is_empty() {
        let op = byte(&mut data);
        let pick = byte(&mut data) as usize;
        let conn = (!conns.is_empty()).then(|| conns[pick % conns.len()]);
        match op % 10 {
            0 => {
                let bearer = (pick % 6 < 5).then(|| TOKENS[pick % 5]);
                conns.push(w.open(bearer));
            }
            1 | 2 => {
                if let Some(c) = conn {
                    let f = envelope(&mut data);
                    w.frame_in(c, Bytes::from(f));
                }
            }
            3 => {
                if let Some(c) = conn {
                    let len = byte(&mut data) as usize;
                    let raw = take(&mut data, len).to_vec();
                    w.frame_in(c, Bytes::from(raw));
                }
            }
            4 => {
                if let Some(c) = conn {
                    let f = format!(
                        r#"{{"type":"join","token":"{}","participantId":"{}"}}"#,
                        TOKENS[pick % 5],
                        IDS[byte(&mut data) as usize % 5]
                    );
                    w.frame_in(c, Bytes::from(f));
                }
            }
            5 => w.tick(Duration::from_millis(u64::from(byte(&mut data)) * 500)),
            6 => {
                if let Some(c) = conn {
                    w.disconnect(c);
                }
            }
            7 => {
                if let Some(c) = conn {
                    w.sent(c, pick, pick * 100);
                    w.pong(c);
                }
            }
            8 => {
                if let Some(c) = conn {
                    let f = format!("#stream-{}#{}", pick % 4, pick);
                    w.frame_in(c, Bytes::from(f));
                }
            }
            _ => {
                let body = envelope(&mut data);
                let who = IDS[pick % 5];
                let _ = w.post(who, Some(TOKENS[pick % 5]), body.as_bytes());
                let _ = w.gw.http_messages(who, Some(TOKENS[pick % 5]), Some("g1"));
                if pick.is_multiple_of(7) {
                    let c = conn.unwrap_or_else(|| w.open(None));
                    w.oversize(c, 1 << 30);
                }
            }
        }
        // The world answers closes, checks that nothing is sent on a connection after it,
        // and that each audit batch holds as many lines as it counts.
        for handed in w.drain() {
            if let Handed::Close(conn, ..) = handed {
                conns.retain(|c| *c != conn);
            }
        }
        // Whatever came in, every audit line is one JSON object.
        for (_, line) in w.audits.drain(..) {
            let v: serde_json::Value =
                serde_json::from_str(&line).expect("an audit line is one JSON value");
            assert!(v.is_object(), "{line}");
        }
        // What the peers received is not checked here: keep memory flat.
        for ep in w.net.endpoints.values_mut() {
            ep.inbox.clear();
        }
        let _ = w.gateway_timeout();
    }
    let _ = w.gw.participants();
    w.shut_down();
    w.pump();
});
