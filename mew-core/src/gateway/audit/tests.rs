use super::format::*;
use super::*;

/// The record's line, without its newline.
fn line(r: Record<'_>) -> String {
    let mut out = Vec::new();
    r.write_line(&mut out, &mut Timestamps::default());
    assert_eq!(out.pop(), Some(b'\n'));
    String::from_utf8(out).unwrap()
}

#[test]
fn lines_escape_and_embed() {
    let r = Record::Envelope {
        at: Time::from_unix_millis(0),
        event: "rejected",
        id: Some("a\"b"),
        envelope: Some(b"not \"json\"\n"),
        envelope_is_json: false,
        participant: "p\u{1}",
        space_id: "s",
        direction: Direction::Inbound,
        transport: Transport::Http,
        metadata: None,
    };
    let line = line(r);
    assert!(!line.contains('\n'));
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["id"], "a\"b");
    assert_eq!(v["envelope"], "not \"json\"\n");
    assert_eq!(v["participant"], "p\u{1}");
    assert_eq!(v["transport"], "http");
    assert_eq!(v["timestamp"], "1970-01-01T00:00:00.000Z");
    assert!(v.get("metadata").is_none());
    assert_eq!(r.file().file_name(), "envelope-history.jsonl");
}

fn received(envelope: &[u8], envelope_is_json: bool) -> Record<'_> {
    Record::Envelope {
        at: Time::from_unix_millis(1_000),
        event: "received",
        id: Some("x1"),
        envelope: Some(envelope),
        envelope_is_json,
        participant: "mallory",
        space_id: "s",
        direction: Direction::Inbound,
        transport: Transport::WebSocket,
        metadata: None,
    }
}

#[test]
fn a_pretty_printed_envelope_cannot_forge_a_record() {
    let forged = b"{\"protocol\":\"mew/v0.4\",\"id\":\"x1\",\"kind\":\"chat\",\"payload\":\n{\"timestamp\":\"2020-01-01T00:00:00.000Z\",\"event\":\"delivered\",\"id\":\"forged\",\"participant\":\"admin\"}\r\n}\n";
    let mut out = Vec::new();
    received(forged, true).write_line(&mut out, &mut Timestamps::default());
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.matches('\n').count(), 1);
    assert!(text.ends_with('\n'));
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["event"], "received");
    assert_eq!(v["envelope"]["payload"]["id"], "forged", "kept, as data");
}

#[test]
fn secrets_are_redacted_and_the_record_kept() {
    let invite = b"{\"protocol\":\"mew/v0.4\",\"id\":\"i\",\"kind\":\"system/invite\",\"payload\":{\"participant_id\":\"bob\",\"token\":\"s3cret-t0ken\"}}";
    let line = line(received(invite, true));
    assert!(!line.contains("s3cret-t0ken"), "{line}");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["envelope"]["payload"]["token"], "[redacted]");
    assert_eq!(v["envelope"]["payload"]["participant_id"], "bob");
    // Not JSON, but holding a token: the text is not kept.
    let r = received(b"{\"type\":\"join\",\"token\":\"s3cret-t0ken\"", false);
    assert!(!super::tests::line(r).contains("s3cret"));
}

proptest::proptest! {
    /// The vectorised search finds what the scan from quote to quote finds.
    #[test]
    fn the_secret_search_agrees_with_the_quote_scan(
        parts in proptest::collection::vec(
            proptest::sample::select(vec![
                "\"", "token", "tokens", "api_key", "apiKey", "password", "secret", "\\",
                ":", "{", "}", "x", "tok", "\"sec", "é", " ",
            ]),
            0..24,
        )
    ) {
        let text = parts.concat();
        proptest::prop_assert_eq!(
            may_hold_secret(text.as_bytes()),
            super::format::quote_scan(text.as_bytes()),
            "{}", text
        );
    }
}

#[test]
fn every_secret_key_is_found_and_only_those() {
    for k in SECRET_KEYS {
        let env = format!(r#"{{"kind":"x","payload":{{"{k}":"hush-{k}"}}}}"#);
        let line = line(received(env.as_bytes(), true));
        assert!(!line.contains("hush"), "{k}: {line}");
        assert!(may_hold_secret(env.as_bytes()), "{k}");
    }
    for harmless in [
        r#"{"tokenizer":1}"#,
        r#"{"secrets_seen":0}"#,
        r#"{"text":"say \"token\" here"}"#,
        r#"{"text":"a""#,
        "\"",
    ] {
        assert!(!may_hold_secret(harmless.as_bytes()), "{harmless}");
    }
    // A value that looks like a key is parsed, and nothing in it is redacted.
    let line = line(received(br#"{"a":"token"}"#, true));
    assert!(line.contains(r#""envelope":{"a":"token"}"#), "{line}");
}

#[test]
fn control_characters_in_every_field_are_escaped() {
    let meta = serde_json::json!({"reason": "line\nbreak"});
    let r = Record::Envelope {
        at: Time::from_unix_millis(0),
        event: "rejected",
        id: Some("a\nb\u{0}\u{1b}"),
        envelope: None,
        envelope_is_json: false,
        participant: "p\r\n{\"event\":\"x\"}",
        space_id: "s\u{7f}",
        direction: Direction::Inbound,
        transport: Transport::WebSocket,
        metadata: Some(&meta),
    };
    let line = line(r);
    assert!(!line.contains('\n') && !line.contains('\r'), "{line}");
    assert!(line.bytes().all(|b| b >= 0x20 && b != 0x7f), "{line}");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["id"], "a\nb\u{0}\u{1b}");
    assert_eq!(v["participant"], "p\r\n{\"event\":\"x\"}");
    assert_eq!(v["space_id"], "s\u{7f}");
}

#[test]
fn timestamps_are_formatted_once_per_millisecond() {
    let mut ts = Timestamps::default();
    assert_eq!(
        ts.get(Time::from_unix_millis(1_736_416_800_123)),
        b"2025-01-09T10:00:00.123Z"
    );
    let p = ts.get(Time::from_unix_millis(1_736_416_800_123)).as_ptr();
    assert_eq!(
        p,
        ts.get(Time::from_unix_millis(1_736_416_800_123)).as_ptr()
    );
    assert_eq!(
        ts.get(Time::from_unix_millis(0)),
        b"1970-01-01T00:00:00.000Z"
    );
}

#[test]
fn bytes_claimed_as_json_that_are_not_stay_one_parseable_line() {
    for raw in [&b"+\xff\x00garbage"[..], b"[1,2]", b"{\"a\":\"\xff\"}"] {
        let line = line(received(raw, true));
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["envelope"].is_string(), "{line}");
    }
}

mod batches {
    use super::*;
    use crate::gateway::{Bearer, Gateway, Input, SpaceConfig};

    fn space() -> (Gateway, Vec<crate::gateway::ConnId>) {
        let cfg = SpaceConfig::from_yaml(
            "space: {id: s}\nlogging: {enabled: true}\ngateway: {rate_limit: off}\nparticipants:\n  a: {tokens: [ta], capabilities: [{kind: chat}]}\n  b: {tokens: [tb]}\n  c: {tokens: [tc]}\n",
        )
        .unwrap();
        let now = Time::from_unix_millis(1_000);
        let mut gw = Gateway::new(cfg, 1, Box::new(crate::ids::IdGen::new(2)), None);
        let conns = ["ta", "tb", "tc"]
            .iter()
            .map(|t| {
                gw.handle_input(
                    now,
                    Input::Connected {
                        bearer: Bearer::Token(t),
                    },
                )
                .conn()
                .expect("a connection")
            })
            .collect();
        while gw.poll_output().is_some() {}
        while gw.poll_audit(|_| Vec::new()).is_some() {}
        (gw, conns)
    }

    #[test]
    fn a_broadcast_is_one_received_line_and_a_delivered_line_per_recipient() {
        let (mut gw, conns) = space();
        let now = Time::from_unix_millis(2_000);
        gw.handle_input(
            now,
            Input::Frame {
                conn: conns[0],
                frame: Bytes::from_static(
                    br#"{"protocol":"mew/v0.4","id":"m1","kind":"chat","payload":{"text":"hi"}}"#,
                ),
            },
        );
        while gw.poll_output().is_some() {}
        let mut spare = Some(Vec::with_capacity(12_345));
        let batch = gw.poll_audit(|_| spare.take().unwrap_or_default()).unwrap();
        assert_eq!(batch.file, AuditFile::EnvelopeHistory);
        let text = batch.to_text();
        assert_eq!(text.len() as u64, batch.text_len());
        let text = std::str::from_utf8(&text).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(batch.lines, 4);
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0]["event"], "received");
        assert_eq!(lines[0]["envelope"]["payload"]["text"], "hi");
        let mut to: Vec<&str> = lines[1..]
            .iter()
            .map(|l| {
                assert_eq!(l["event"], "delivered");
                assert_eq!(l["id"], "m1");
                assert!(l.get("envelope").is_none(), "small lines");
                l["participant"].as_str().unwrap()
            })
            .collect();
        to.sort_unstable();
        assert_eq!(to, ["a", "b", "c"]);
        // Taken once; the next batch goes into the spare; then the other file's.
        assert_eq!(gw.audit.files[0].buf.capacity(), 12_345);
        let decision = gw.poll_audit(|_| Vec::new()).unwrap();
        assert_eq!(decision.file, AuditFile::CapabilityDecisions);
        assert!(gw.poll_audit(|_| Vec::new()).is_none());
        assert_eq!(decision.lines, 1);
        let d: Value = serde_json::from_slice(decision.to_text().trim_ascii_end()).unwrap();
        assert_eq!(d["result"], "allowed");
        assert_eq!(d["matched_capability"], serde_json::json!({"kind": "chat"}));
        assert_eq!(
            d["granted_capabilities"],
            serde_json::json!([{"kind": "chat"}])
        );
    }

    #[test]
    fn delivered_lines_from_shared_parts_are_each_lines_own_bytes() {
        let mut lines = AuditLines::default();
        let mut want = String::new();
        let ids = [Some("m1"), Some("m1"), Some("m\"2\n"), None, Some("m1")];
        let who: [Arc<str>; 3] = ["a".into(), "b\u{1}".into(), "c".into()];
        let (s, other): (Arc<str>, Arc<str>) = ("s".into(), "other\t".into());
        // Slot 0 is taken over by another participant of the same name halfway.
        let again: Arc<str> = "a".into();
        for (n, id) in ids.iter().enumerate() {
            for (i, p) in who.iter().enumerate() {
                let p = if i == 0 && n >= 3 { &again } else { p };
                let at = Time::from_unix_millis(1_000 + (n as u64 / 2));
                let space = if n == 4 { &other } else { &s };
                let transport = if i == 2 && n != 1 {
                    Transport::Virtual
                } else {
                    Transport::WebSocket
                };
                lines.push_delivered(at, *id, i, p, space, transport);
                let id = id.map_or(String::new(), |id| {
                    format!(",\"id\":{}", serde_json::to_string(id).unwrap())
                });
                want.push_str(&format!(
                    "{{\"timestamp\":\"{at}\",\"event\":\"delivered\"{id},\"participant\":{},\"space_id\":{},\"direction\":\"outbound\",\"transport\":\"{}\"}}\n",
                    serde_json::to_string(&**p).unwrap(),
                    serde_json::to_string(&**space).unwrap(),
                    transport.as_str(),
                ));
            }
        }
        let batch = lines.take(AuditFile::EnvelopeHistory, Vec::new).unwrap();
        assert_eq!(batch.lines, 15);
        let got = String::from_utf8(batch.to_text()).unwrap();
        assert_eq!(got, want);
        for l in got.lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["event"], "delivered");
        }
    }

    #[test]
    fn a_deferred_record_is_the_line_formatted_at_once_in_its_place() {
        let mut lines = AuditLines::default();
        let mut want = Vec::new();
        let mut ts = Timestamps::default();
        let (a, s): (Arc<str>, Arc<str>) = ("a\"1".into(), "s".into());
        let frames = [
            (
                &br#"{"protocol":"mew/v0.4","id":"m1","kind":"chat","payload":{"text":"hi"}}"#[..],
                true,
            ),
            (br#"{"kind":"x","payload":{"token":"hunter2"}}"#, true),
            (b"{\"a\":\n1}", true),
            (b"not json \xff", false),
            (b"{\"a\":\"\xff\"}", true),
        ];
        for (n, (frame, is_json)) in frames.into_iter().enumerate() {
            let at = Time::from_unix_millis(1_000 + n as u64);
            let id = (n != 2).then(|| format!("id-{n}"));
            let (event, direction, transport) = if n == 1 {
                ("delivered", Direction::Outbound, Transport::Virtual)
            } else {
                ("received", Direction::Inbound, Transport::WebSocket)
            };
            let meta = serde_json::json!({"n": n});
            let record = |event, envelope, direction, transport, metadata| Record::Envelope {
                at,
                event,
                id: id.as_deref(),
                envelope,
                envelope_is_json: is_json,
                participant: &a,
                space_id: &s,
                direction,
                transport,
                metadata,
            };
            let r = record(event, Some(frame), direction, transport, None);
            r.write_line(&mut want, &mut ts);
            lines.push_deferred(r, &Bytes::copy_from_slice(frame), &a, &s);
            // Between them, lines formatted at once and delivered lines' references.
            let other = record(event, Some(frame), direction, transport, Some(&meta));
            other.write_line(&mut want, &mut ts);
            lines.push(other);
            lines.push_delivered(at, id.as_deref(), 0, &a, &s, Transport::Http);
            record(
                "delivered",
                None,
                Direction::Outbound,
                Transport::Http,
                None,
            )
            .write_line(&mut want, &mut ts);
        }
        let batch = lines.take(AuditFile::EnvelopeHistory, Vec::new).unwrap();
        assert_eq!(batch.lines, 15);
        assert_eq!(batch.text_len(), want.len() as u64);
        assert_eq!(
            String::from_utf8_lossy(&batch.to_text()),
            String::from_utf8_lossy(&want)
        );
        assert_eq!(batch.to_text(), want, "read twice, the same");
        let text = String::from_utf8(want).unwrap();
        assert!(
            text.contains(r#""payload":{"token":"[redacted]"}"#),
            "{text}"
        );
        assert!(!text.contains("hunter2"));
        assert_eq!(text.lines().count(), 15);
        // The envelopes count toward the batch's bound while it waits.
        assert!(batch.encoded_len() > frames.iter().map(|f| f.0.len()).sum::<usize>());
    }

    #[test]
    fn a_deferred_decision_is_the_line_formatted_at_once() {
        let mut lines = AuditLines::default();
        let mut want = Vec::new();
        let mut ts = Timestamps::default();
        let set = |kinds: &[&str]| {
            Arc::new(
                CapabilitySet::compile(
                    &kinds
                        .iter()
                        .map(|k| serde_json::json!({"kind": k, "payload": {"n": 1}}))
                        .collect::<Vec<_>>(),
                )
                .unwrap(),
            )
        };
        let (one, two) = (set(&["chat", "mcp/*"]), set(&["x"]));
        let cases = [
            (&one, Some(1), Some("e\"1"), "mcp/request"),
            (&two, None, None, "chat"),
            (&one, Some(0), Some("e2"), "chat"),
            (&one, None, Some("e3"), "tab\there"),
        ];
        let (who, space): (Arc<str>, Arc<str>) = ("p\u{1}".into(), "s".into());
        for (n, (granted, matched, id, kind)) in cases.into_iter().enumerate() {
            let at = Time::from_unix_millis(5_000 + n as u64);
            Record::Capability {
                at,
                envelope_id: id,
                participant: "p\u{1}",
                space_id: "s",
                allowed: matched.is_some(),
                required: kind,
                matched: matched.and_then(|i| granted.iter().nth(i)),
                granted,
                metadata: None,
            }
            .write_line(&mut want, &mut ts);
            lines.push_decision(at, id, &who, &space, kind, matched, granted);
        }
        let batch = lines
            .take(AuditFile::CapabilityDecisions, Vec::new)
            .unwrap();
        assert_eq!(batch.lines, 4);
        assert_eq!(batch.text_len(), want.len() as u64);
        assert_eq!(
            String::from_utf8(batch.to_text()).unwrap(),
            String::from_utf8(want).unwrap()
        );
        // Each set once, however many decisions name it.
        assert_eq!(batch.caps.len(), 2);
        let v: Value = serde_json::from_str(
            String::from_utf8(batch.to_text())
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(v["result"], "allowed");
        assert_eq!(v["matched_capability"]["kind"], "mcp/*");
        assert_eq!(v["granted_capabilities"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn each_batch_holds_the_parts_its_lines_refer_to_and_keeps_their_order() {
        let mut lines = AuditLines::default();
        let (a, b, s): (Arc<str>, Arc<str>, Arc<str>) = ("a".into(), "b".into(), "s".into());
        let at = Time::from_unix_millis(5_000);
        let received = |lines: &mut AuditLines, id: &str| {
            lines.push(Record::Envelope {
                at,
                event: "received",
                id: Some(id),
                envelope: None,
                envelope_is_json: false,
                participant: "a",
                space_id: "s",
                direction: Direction::Inbound,
                transport: Transport::WebSocket,
                metadata: None,
            })
        };
        let events = |batch: &AuditBatch| -> Vec<String> {
            let text = batch.to_text();
            assert_eq!(text.len() as u64, batch.text_len());
            std::str::from_utf8(&text)
                .unwrap()
                .lines()
                .map(|l| {
                    let v: Value = serde_json::from_str(l).unwrap();
                    format!("{} {} {}", v["event"], v["id"], v["participant"])
                })
                .collect()
        };
        received(&mut lines, "m1");
        lines.push_delivered(at, Some("m1"), 0, &a, &s, Transport::WebSocket);
        received(&mut lines, "m2");
        lines.push_delivered(at, Some("m1"), 1, &b, &s, Transport::WebSocket);
        let first = lines.take(AuditFile::EnvelopeHistory, Vec::new).unwrap();
        assert_eq!(
            events(&first),
            [
                r#""received" "m1" "a""#,
                r#""delivered" "m1" "a""#,
                r#""received" "m2" "a""#,
                r#""delivered" "m1" "b""#
            ]
        );
        // The same head and members again, in a new batch (the first one may be lost).
        lines.push_delivered(at, Some("m1"), 1, &b, &s, Transport::WebSocket);
        lines.push_delivered(at, Some("m1"), 0, &a, &s, Transport::WebSocket);
        drop(first);
        let second = lines.take(AuditFile::EnvelopeHistory, Vec::new).unwrap();
        assert_eq!(second.lines, 2);
        assert_eq!(
            events(&second),
            [r#""delivered" "m1" "b""#, r#""delivered" "m1" "a""#]
        );
        // A recipient costs the batch a reference, not a line.
        for _ in 0..100 {
            lines.push_delivered(at, Some("m1"), 0, &a, &s, Transport::WebSocket);
        }
        let third = lines.take(AuditFile::EnvelopeHistory, Vec::new).unwrap();
        assert!(
            third.encoded_len() < 100 * 10 + 200,
            "{}",
            third.encoded_len()
        );
        assert_eq!(third.to_text().len() as u64, third.text_len());
        assert!(third.text_len() > 100 * 90);
        let from = AuditBatch::from_lines(AuditFile::EnvelopeHistory, 2, b"x\ny\n");
        assert_eq!(from.to_text(), b"x\ny\n");
        assert_eq!(from.pieces().count(), 1);
    }

    #[test]
    fn a_batch_nobody_takes_stops_growing_and_counts_what_it_drops() {
        let (mut gw, conns) = space();
        let mut n = 0u64;
        while gw.audit.files[0].held() < AUDIT_BATCH_MAX {
            n += 1;
            let f =
                format!(r#"{{"protocol":"mew/v0.4","id":"m{n}","kind":"chat","payload":{{}}}}"#);
            gw.handle_input(
                Time::from_unix_millis(2_000),
                Input::Frame {
                    conn: conns[0],
                    frame: Bytes::from(f),
                },
            );
            while let Some(o) = gw.poll_output() {
                if let crate::gateway::Output::Transmit { conn, frame } = o {
                    gw.handle_input(
                        Time::from_unix_millis(2_000),
                        Input::Sent {
                            conn,
                            frames: 1,
                            bytes: frame.len(),
                        },
                    );
                }
            }
        }
        let before = gw.audit_dropped();
        assert!(before < 4, "lines dropped only once the batch is full");
        gw.handle_input(
            Time::from_unix_millis(2_000),
            Input::Frame {
                conn: conns[0],
                frame: Bytes::from_static(
                    br#"{"protocol":"mew/v0.4","id":"last","kind":"chat","payload":{}}"#,
                ),
            },
        );
        assert_eq!(
            gw.audit_dropped() - before,
            4,
            "received and three delivered"
        );
        let batch = gw.poll_audit(|_| Vec::new()).unwrap();
        assert_eq!(batch.file, AuditFile::EnvelopeHistory);
        assert!(batch.encoded_len() < AUDIT_BATCH_MAX + 4096);
        assert_eq!(batch.lines + gw.audit_dropped(), 4 * (n + 1));
        assert_eq!(
            std::str::from_utf8(&batch.to_text())
                .unwrap()
                .lines()
                .count() as u64,
            batch.lines
        );
    }
}
