//! Arbitrary bytes as a replicated space's log: records decoded from raw bytes and records
//! built from chosen entries (nodes starting, beating and falling silent, connections
//! joining, sending, closing and slowing, posts, ticks), some naming connections that exist
//! and some any number. Three replicas apply the same log; none may panic, all must end in
//! the same state, and a snapshot taken at the end must restore.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use mew_core::Time;
use mew_core::cluster::{Entry, Record, Replica, ReplicaEvent};
use mew_core::gateway::{ConnId, SpaceConfig};
use mew_core::secret::TokenHash;
use std::sync::OnceLock;
use std::time::Duration;

const YAML: &str = r#"
space: {id: fuzz-cluster}
participants:
  root: {tokens: [t0], capabilities: [{kind: "*"}]}
  mid: {tokens: [t1], capabilities: [{kind: chat}, {kind: capability/grant}, {kind: stream/request}]}
  low: {tokens: [t2], capabilities: [{kind: chat}]}
gateway: {max_frame_bytes: 4096, max_queue_frames: 32, history_size: 16, max_streams: 4}
"#;

const NODES: [&str; 3] = ["a", "b", "c"];
const TOKENS: [&str; 4] = ["t0", "t1", "t2", "nope"];
const KINDS: [&str; 10] = [
    "chat",
    "mcp/request",
    "capability/grant",
    "space/invite",
    "space/kick",
    "participant/pause",
    "stream/request",
    "stream/close",
    "mcp/proposal",
    "system/join",
];

fn config() -> SpaceConfig {
    static C: OnceLock<SpaceConfig> = OnceLock::new();
    C.get_or_init(|| SpaceConfig::from_yaml(YAML).expect("fuzz config"))
        .clone()
}

fn take<'a>(data: &mut &'a [u8], n: usize) -> &'a [u8] {
    let n = n.min(data.len());
    let (head, tail) = data.split_at(n);
    *data = tail;
    head
}

fn byte(data: &mut &[u8]) -> u8 {
    take(data, 1).first().copied().unwrap_or(0)
}

fn frame(data: &mut &[u8]) -> Bytes {
    let kind = KINDS[byte(data) as usize % KINDS.len()];
    let n = byte(data);
    let text = match kind {
        "system/join" => format!(
            r#"{{"type":"join","participantId":"low","space":"fuzz-cluster","token":"{}"}}"#,
            TOKENS[n as usize % TOKENS.len()]
        ),
        _ => format!(
            r#"{{"protocol":"mew/v0.4","id":"e{n}","kind":"{kind}","to":["{}"],"payload":{{"text":"x","participant":"low","method":"tools/call","stream_id":"s{}","capabilities":[{{"kind":"chat"}}],"reason":"r"}}}}"#,
            ["root", "mid", "low"][n as usize % 3],
            n % 3
        ),
    };
    Bytes::from(text)
}

fn apply_all(reps: &mut [Replica], seq: u64, rec: &Record, conns: &mut Vec<ConnId>) {
    for r in reps.iter_mut() {
        // A gap cannot arise here (sequence numbers are consecutive); anything else a log
        // holds must be taken without a panic.
        r.handle_record(seq, rec.clone())
            .expect("consecutive entries apply");
        while let Some(ev) = r.poll_output() {
            if let ReplicaEvent::Connected { conn, .. } = ev
                && conns.len() < 64
                && !conns.contains(&conn)
            {
                conns.push(conn);
            }
        }
        while r.gateway_mut().poll_output().is_some() {}
    }
}

fuzz_target!(|input: &[u8]| {
    let mut data = input;
    let mut reps: Vec<Replica> = NODES
        .iter()
        .map(|n| Replica::new(n, config(), None))
        .collect();
    let mut conns: Vec<ConnId> = Vec::new();
    let mut clock = 1_700_000_000_000u64;
    let mut seq = 0u64;
    let mut local = 0u64;
    while !data.is_empty() && seq < 256 {
        let op = byte(&mut data);
        let rec = if op.is_multiple_of(16) {
            let n = byte(&mut data) as usize;
            match Record::decode(Bytes::copy_from_slice(take(&mut data, n))) {
                Ok(r) => r,
                Err(_) => continue,
            }
        } else {
            let node: std::sync::Arc<str> = NODES[byte(&mut data) as usize % 3].into();
            // Mostly forward, now and then a long silence or a step back.
            let step = byte(&mut data);
            clock = match step {
                250..=255 => clock + 10_000,
                240..=249 => clock.saturating_sub(500),
                s => clock + u64::from(s) * 7,
            };
            let conn = {
                let c = byte(&mut data) as usize;
                if c < 240 && !conns.is_empty() {
                    conns[c % conns.len()]
                } else {
                    ConnId::from_u64((c as u64) << 29 | 3)
                }
            };
            let token = TokenHash::of(TOKENS[byte(&mut data) as usize % TOKENS.len()]);
            let entry = match op % 12 {
                1 => Entry::NodeUp {
                    timeout: Duration::from_millis(500 + u64::from(byte(&mut data)) * 20),
                },
                2 => Entry::Beat,
                3 => Entry::Tick,
                4 | 5 => {
                    local += 1;
                    Entry::Connect {
                        local,
                        token: (!byte(&mut data).is_multiple_of(4)).then_some(token),
                    }
                }
                6 | 7 => Entry::Frame {
                    conn,
                    frame: frame(&mut data),
                },
                8 => Entry::SealedJoin {
                    conn,
                    frame: frame(&mut data),
                    token,
                },
                9 => match byte(&mut data) % 4 {
                    0 => Entry::Closed { conn },
                    1 => Entry::Slow { conn },
                    2 => Entry::Pong { conn },
                    _ => Entry::Oversize {
                        conn,
                        size: 1 << 20,
                    },
                },
                10 => {
                    local += 1;
                    Entry::Post {
                        local,
                        participant: ["root", "mid", "low", "ghost"][byte(&mut data) as usize % 4]
                            .to_owned(),
                        token: Some(token),
                        body: frame(&mut data),
                    }
                }
                11 => {
                    // A JWT judged where it arrived: an identity until some time, or a
                    // refusal.
                    let judged = match byte(&mut data) % 3 {
                        0 => Err("the token's signature does not verify".to_owned()),
                        n => Ok(mew_core::gateway::Identity {
                            subject: ["root", "mid", "low", "ghost"][byte(&mut data) as usize % 4]
                                .to_owned(),
                            expires_at: (n == 1).then(|| {
                                Time::from_unix_millis(clock + u64::from(byte(&mut data)) * 50)
                            }),
                            not_before: None,
                        }),
                    };
                    if byte(&mut data).is_multiple_of(2) {
                        local += 1;
                        Entry::ConnectJudged { local, judged }
                    } else {
                        Entry::JudgedJoin {
                            conn,
                            frame: frame(&mut data),
                            judged,
                        }
                    }
                }
                _ => Entry::Beat,
            };
            let entropy = (op & 0x80 != 0).then(|| [byte(&mut data); 24]);
            Record {
                node,
                at: Time::from_unix_millis(clock),
                entropy,
                entry,
            }
        };
        // What is encoded decodes to the same record.
        let again = Record::decode(Bytes::from(rec.encode())).expect("an encoded record decodes");
        assert_eq!(again, rec);
        seq += 1;
        apply_all(&mut reps, seq, &rec, &mut conns);
    }
    // Every replica holds the same space.
    let (first, rest) = reps.split_first_mut().unwrap();
    let snap = first.snapshot().expect("a snapshot");
    for r in rest.iter() {
        assert_eq!(r.snapshot().expect("a snapshot"), snap, "replicas agree");
    }
    Replica::restore("a", config(), &snap, None).expect("the snapshot restores");
});
