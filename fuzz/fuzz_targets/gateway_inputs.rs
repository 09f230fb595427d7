//! Arbitrary bytes decoded into gateway operations: connects with and without tokens,
//! frames (raw bytes and well-formed envelopes of chosen kinds), ticks, closes, pongs and
//! write reports. The gateway must never panic.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use mew_core::Time;
use mew_core::gateway::{Bearer, Input};
use mew_core::gateway::{ConnId, Gateway, Output, SpaceConfig};
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
    let mut now = Time::from_unix_millis(1_736_416_800_000);
    // Parsed once: the target exercises the gateway, not the YAML reader.
    static CONFIG: OnceLock<SpaceConfig> = OnceLock::new();
    let config = CONFIG
        .get_or_init(|| SpaceConfig::from_yaml(YAML).expect("fuzz config is valid"))
        .clone();
    let mut gw = Gateway::new(config, 7, Box::new(mew_core::ids::IdGen::new(8)), None);
    let mut conns: Vec<ConnId> = Vec::new();
    while !data.is_empty() {
        let op = byte(&mut data);
        let pick = byte(&mut data) as usize;
        let conn = (!conns.is_empty()).then(|| conns[pick % conns.len()]);
        match op % 10 {
            0 => {
                let bearer = (pick % 6 < 5).then(|| TOKENS[pick % 5]);
                conns.push(
                    gw.handle_input(
                        now,
                        Input::Connected {
                            bearer: Bearer::from(bearer),
                        },
                    )
                    .conn()
                    .expect("a connection"),
                );
            }
            1 | 2 => {
                if let Some(c) = conn {
                    let f = envelope(&mut data);
                    gw.handle_input(
                        now,
                        Input::Frame {
                            conn: c,
                            frame: Bytes::from(f),
                        },
                    );
                }
            }
            3 => {
                if let Some(c) = conn {
                    let len = byte(&mut data) as usize;
                    let raw = take(&mut data, len).to_vec();
                    gw.handle_input(
                        now,
                        Input::Frame {
                            conn: c,
                            frame: Bytes::from(raw),
                        },
                    );
                }
            }
            4 => {
                if let Some(c) = conn {
                    let f = format!(
                        r#"{{"type":"join","token":"{}","participantId":"{}"}}"#,
                        TOKENS[pick % 5],
                        IDS[byte(&mut data) as usize % 5]
                    );
                    gw.handle_input(
                        now,
                        Input::Frame {
                            conn: c,
                            frame: Bytes::from(f),
                        },
                    );
                }
            }
            5 => {
                now = now + Duration::from_millis(u64::from(byte(&mut data)) * 500);
                gw.handle_input(now, Input::Timeout);
            }
            6 => {
                if let Some(c) = conn {
                    gw.handle_input(now, Input::Disconnected { conn: c });
                }
            }
            7 => {
                if let Some(c) = conn {
                    gw.handle_input(
                        now,
                        Input::Sent {
                            conn: c,
                            frames: pick,
                            bytes: pick * 100,
                        },
                    );
                    gw.handle_input(now, Input::Pong { conn: c });
                }
            }
            8 => {
                if let Some(c) = conn {
                    let f = format!("#stream-{}#{}", pick % 4, pick);
                    gw.handle_input(
                        now,
                        Input::Frame {
                            conn: c,
                            frame: Bytes::from(f),
                        },
                    );
                }
            }
            _ => {
                let body = envelope(&mut data);
                let who = IDS[pick % 5];
                let _ = gw
                    .handle_input(
                        now,
                        Input::Post {
                            participant: who,
                            bearer: Bearer::Token(TOKENS[pick % 5]),
                            body: body.as_bytes(),
                        },
                    )
                    .posted()
                    .expect("an answer");
                let _ = gw.http_messages(who, Some(TOKENS[pick % 5]), Some("g1"));
                if pick % 7 == 0 {
                    let c = match conn {
                        Some(c) => c,
                        None => gw
                            .handle_input(
                                now,
                                Input::Connected {
                                    bearer: Bearer::None,
                                },
                            )
                            .conn()
                            .expect("a connection"),
                    };
                    gw.handle_input(
                        now,
                        Input::Oversize {
                            conn: c,
                            size: 1 << 30,
                        },
                    );
                }
            }
        }
        while let Some(o) = gw.poll_output() {
            if let Output::Close { conn, .. } = o {
                gw.handle_input(now, Input::Disconnected { conn });
                conns.retain(|c| *c != conn);
            }
        }
        // Whatever came in, every audit line is one JSON object.
        while let Some(batch) = gw.poll_audit(Vec::new) {
            let text = std::str::from_utf8(&batch.bytes).expect("audit lines are UTF-8");
            assert_eq!(text.lines().count() as u64, batch.lines);
            for line in text.lines() {
                let v: serde_json::Value =
                    serde_json::from_str(line).expect("an audit line is one JSON value");
                assert!(v.is_object(), "{line}");
            }
        }
        let _ = gw.poll_timeout();
    }
    let _ = gw.participants();
    gw.handle_input(now, Input::Close);
});
