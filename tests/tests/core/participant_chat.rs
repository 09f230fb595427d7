//! Chat acknowledgement queue, reasoning sequences and their cancellation, streams, and
//! context accounting.

use crate::support;

use mew_core::participant::{CommandError, Event, Input, StreamRole};
use serde_json::json;
use std::time::Duration;
use support::{ME, Script, all_caps, config};

#[test]
fn chat_ack_queue() {
    let mut cfg = config();
    cfg.bounds.max_pending_chats = 3;
    let mut s = Script::joined(cfg, all_caps(), &[]);
    s.p.chat(s.now, "hello", vec![]).unwrap();
    let c = s.sent_one("chat");
    assert_eq!(c["payload"], json!({"text": "hello", "format": "plain"}));
    assert!(c.get("to").is_none());
    // Broadcast chats are counted but not queued.
    s.send_from("bob", &[], "chat", None, json!({"text": "all"}));
    assert_eq!(s.p.pending_chats().count(), 0);
    let ids: Vec<String> = (0..4)
        .map(|i| s.send_from("bob", &[ME], "chat", None, json!({"text": format!("q{i}")})))
        .collect();
    let queued: Vec<&str> = s.p.pending_chats().map(|c| c.id.as_str()).collect();
    assert_eq!(
        queued,
        [&ids[1], &ids[2], &ids[3]],
        "bounded: the oldest is dropped"
    );
    s.p.acknowledge_chat(s.now, &ids[1], "received").unwrap();
    let ack = s.sent_one("chat/acknowledge");
    assert_eq!(ack["correlation_id"], json!([ids[1]]));
    assert_eq!(ack["to"], json!(["bob"]));
    assert_eq!(ack["payload"]["status"], "received");
    assert!(matches!(
        s.p.acknowledge_chat(s.now, &ids[1], "x"),
        Err(CommandError::Unknown { .. })
    ));
    // The sender cancels one; someone else's cancel is ignored.
    s.send_from(
        "eve",
        &[ME],
        "chat/cancel",
        Some(&ids[2]),
        json!({"reason": "x"}),
    );
    assert_eq!(s.p.pending_chats().count(), 2);
    s.send_from(
        "bob",
        &[ME],
        "chat/cancel",
        Some(&ids[2]),
        json!({"reason": "handled_elsewhere"}),
    );
    assert!(
        s.events
            .iter()
            .any(|e| matches!(e, Event::ChatCancelled { id, .. } if *id == ids[2]))
    );
    assert_eq!(s.p.cancel_all_chats(s.now, "timeout").unwrap(), 1);
    let cancels = s.sent_of("chat/cancel");
    assert_eq!(cancels.len(), 1);
    assert_eq!(cancels[0]["correlation_id"], json!([ids[3]]));
    assert_eq!(s.p.pending_chats().count(), 0);
    assert_eq!(s.p.context_usage().messages_in_context, 5);
}

#[test]
fn reasoning_sequence_and_cancellation_by_others() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    let ctx =
        s.p.reasoning_start(s.now, "Analyzing", Some("req-1"))
            .unwrap();
    let start = s.sent_one("reasoning/start");
    assert_eq!(start["id"], ctx.as_str());
    assert_eq!(start["correlation_id"], json!(["req-1"]));
    s.p.reasoning_thought(s.now, &ctx, "step").unwrap();
    assert_eq!(s.sent_one("reasoning/thought")["context"], ctx.as_str());
    // A cancel for some other context changes nothing.
    s.send_from(
        "boss",
        &[],
        "reasoning/cancel",
        None,
        json!({"reason": "x"}),
    );
    assert!(s.p.reasoning_active(&ctx));
    let mut cancel = json!({"protocol": "mew/v0.4", "id": "c1", "from": "boss", "kind": "reasoning/cancel", "context": ctx, "payload": {"reason": "superseded"}});
    s.inject(cancel.clone());
    assert!(s.events.iter().any(|e| matches!(e, Event::ReasoningCancelled { by, reason: Some(r), .. } if by == "boss" && r == "superseded")));
    assert_eq!(
        s.p.reasoning_thought(s.now, &ctx, "more"),
        Err(CommandError::ReasoningCancelled(ctx.clone()))
    );
    assert!(s.p.reasoning_conclusion(s.now, &ctx, "done").is_err());
    cancel["id"] = json!("c2");
    s.inject(cancel);
    assert_eq!(
        s.events
            .iter()
            .filter(|e| matches!(e, Event::ReasoningCancelled { .. }))
            .count(),
        1
    );
    // A fresh sequence concludes normally, then is over.
    let c2 = s.p.reasoning_start(s.now, "again", None).unwrap();
    s.p.reasoning_conclusion(s.now, &c2, "done").unwrap();
    assert!(matches!(
        s.p.reasoning_thought(s.now, &c2, "late"),
        Err(CommandError::Unknown { .. })
    ));
    s.take_sent();
    // Our own cancel goes out with the context.
    let c3 = s.p.reasoning_start(s.now, "third", None).unwrap();
    s.p.reasoning_cancel(s.now, &c3, "error").unwrap();
    assert_eq!(s.sent_one("reasoning/cancel")["context"], c3.as_str());
}

#[test]
fn streams_request_open_data_close() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    let req =
        s.p.request_stream(
            s.now,
            json!({"direction": "upload", "description": "trace"}),
            vec!["gateway".into()],
        )
        .unwrap();
    assert_eq!(
        s.sent_one("stream/request")["payload"]["direction"],
        "upload"
    );
    assert!(matches!(
        s.p.send_stream_data("stream-1", "x"),
        Err(CommandError::NotStreamOwner(_))
    ));
    s.send_from(
        "system:gateway",
        &[ME],
        "stream/open",
        Some(&req),
        json!({"stream_id": "stream-1", "encoding": "text"}),
    );
    assert!(s.events.iter().any(|e| matches!(e, Event::StreamOpened { request_id, stream_id } if *request_id == req && stream_id == "stream-1")));
    s.p.send_stream_data("stream-1", "chunk#1").unwrap();
    s.drain();
    assert_eq!(s.raw.last().unwrap(), "#stream-1#chunk#1");
    // Someone else's stream: observed, data surfaced, but not ours to write.
    s.send_from(
        "system:gateway",
        &["bob"],
        "stream/open",
        Some("bob-req"),
        json!({"stream_id": "stream-2"}),
    );
    assert_eq!(
        s.p.streams()
            .find(|x| x.stream_id == "stream-2")
            .unwrap()
            .role,
        StreamRole::Observer
    );
    assert!(matches!(
        s.p.send_stream_data("stream-2", "x"),
        Err(CommandError::NotStreamOwner(_))
    ));
    s.frame("#stream-2#payload");
    assert!(s.events.iter().any(|e| matches!(e, Event::StreamData { stream_id, data } if stream_id == "stream-2" && data == "payload")));
    s.send_from(
        "bob",
        &[],
        "stream/close",
        None,
        json!({"stream_id": "stream-2", "reason": "complete"}),
    );
    assert!(
        s.events
            .iter()
            .any(|e| matches!(e, Event::StreamClosed { stream_id, .. } if stream_id == "stream-2"))
    );
    // Closing by correlation with the stream/open, as in the spec's example.
    let open3 = s.send_from(
        "system:gateway",
        &["bob"],
        "stream/open",
        Some("bob-req-2"),
        json!({"stream_id": "stream-3"}),
    );
    s.send_from(
        "bob",
        &[],
        "stream/close",
        Some(&open3),
        json!({"reason": "complete"}),
    );
    assert!(s.p.streams().all(|x| x.stream_id != "stream-3"));
    let open1 =
        s.p.streams()
            .find(|x| x.stream_id == "stream-1")
            .unwrap()
            .open_id
            .clone();
    s.take_sent();
    s.p.close_stream(s.now, "stream-1", "complete").unwrap();
    assert_eq!(
        s.sent_of("stream/close")[0]["correlation_id"],
        json!([open1.unwrap()])
    );
    assert_eq!(
        s.sent_one("stream/close")["payload"]["stream_id"],
        "stream-1"
    );
    assert!(s.p.send_stream_data("stream-1", "late").is_err());
}

#[test]
fn proactive_status_near_the_limit_with_cooldown() {
    let mut cfg = config();
    cfg.context.max_tokens = 1000;
    cfg.context.status_cooldown = Duration::from_secs(60);
    let mut s = Script::joined(cfg, all_caps(), &[]);
    s.p.record_context_usage(s.now, 899, 10);
    assert!(s.take_sent().is_empty());
    s.p.record_context_usage(s.now, 1, 1);
    let st = s.sent_one("participant/status");
    assert_eq!(
        st["payload"],
        json!({"tokens": 900, "max_tokens": 1000, "messages_in_context": 11, "status": "near_limit"})
    );
    assert!(s.events.iter().any(|e| matches!(
        e,
        Event::NearLimit {
            tokens: 900,
            max_tokens: 1000
        }
    )));
    s.p.record_context_usage(s.now, 10, 1);
    assert!(s.take_sent().is_empty(), "cooldown");
    s.advance(60_000);
    s.p.record_context_usage(s.now, 10, 1);
    assert_eq!(s.sent_one("participant/status")["payload"]["tokens"], 920);
}

#[test]
fn streams_missing_from_a_rejoin_welcome_are_closed() {
    let mut s = Script::joined(config(), all_caps(), &[]);
    let req =
        s.p.request_stream(s.now, json!({"direction": "upload"}), vec![])
            .unwrap();
    s.send_from(
        "system:gateway",
        &[ME],
        "stream/open",
        Some(&req),
        json!({"stream_id": "stream-9"}),
    );
    s.p.handle_input(s.now, Input::Disconnected { reason: "blip" });
    s.advance(2_000);
    s.p.handle_input(s.now, Input::Connected);
    s.welcome(all_caps(), &[]);
    assert!(s.p.streams().next().is_none());
    assert!(
        s.events
            .iter()
            .any(|e| matches!(e, Event::StreamClosed { stream_id, .. } if stream_id == "stream-9"))
    );
    assert!(s.p.send_stream_data("stream-9", "x").is_err());
}
