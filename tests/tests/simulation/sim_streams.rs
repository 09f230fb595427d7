//! Streams between participant machines through the real gateway core: request, open,
//! data from the owner, refusal of data from others, close, and a late joiner's welcome.

use mew_core::participant::{CommandError, Event, StreamRole};
use mew_tests::sim::participants::{NodeId, SPACE, World};
use serde_json::json;

fn opened(w: &World, n: NodeId) -> Option<String> {
    w.events(n).iter().find_map(|e| match e {
        Event::StreamOpened { stream_id, .. } => Some(stream_id.clone()),
        _ => None,
    })
}

fn data(w: &World, n: NodeId, stream: &str) -> Vec<String> {
    w.events(n)
        .iter()
        .filter_map(|e| match e {
            Event::StreamData { stream_id, data } if stream_id == stream => Some(data.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn owner_streams_data_others_observe_and_close_ends_it() {
    let mut w = World::from_yaml(SPACE, 51, (1, 60));
    let human = w.join("human", "human-token");
    let service = w.join("service", "service-token");
    w.run_until_quiet();
    let req = w
        .act(human, |p, now| {
            p.request_stream(
                now,
                json!({"direction": "upload", "description": "progress"}),
                vec![],
            )
        })
        .unwrap();
    w.run_until_quiet();
    let sid = opened(&w, human).expect("stream opened");
    let mine = w
        .p(human)
        .streams()
        .find(|s| s.stream_id == sid)
        .unwrap()
        .clone();
    assert_eq!(mine.role, StreamRole::Owner);
    assert_eq!(
        w.node(human).received_kind("stream/open")[0]["correlation_id"],
        json!([req])
    );
    for chunk in ["10%", "50%", "100%"] {
        w.act(human, |p, _| p.send_stream_data(&sid, chunk))
            .unwrap();
    }
    w.run_until_quiet();
    assert_eq!(
        data(&w, service, &sid),
        ["10%", "50%", "100%"],
        "FIFO on every link"
    );

    // The observer may not write on it: refused locally, and by the gateway when forced.
    assert_eq!(
        w.act(service, |p, _| p.send_stream_data(&sid, "spoof")),
        Err(CommandError::NotStreamOwner(sid.clone()))
    );
    w.send_raw(service, format!("#{sid}#spoof"));
    w.run_until_quiet();
    assert!(!data(&w, human, &sid).contains(&"spoof".to_owned()));
    let refused = w.events(service).iter().any(
        |e| matches!(e, Event::GatewayError { payload } if payload["error"] == "unauthorized_stream_write"),
    );
    assert!(refused);

    // A late joiner learns of the stream from its welcome.
    let late = w.join("caller", "caller-token");
    assert!(
        w.p(late)
            .streams()
            .any(|s| s.stream_id == sid && s.owner == "human")
    );

    w.act(human, |p, now| p.close_stream(now, &sid, "complete"))
        .unwrap();
    w.run_until_quiet();
    for n in [service, late] {
        assert!(
            w.events(n)
                .iter()
                .any(|e| matches!(e, Event::StreamClosed { stream_id, .. } if *stream_id == sid)),
            "{} saw the close",
            w.node(n).name
        );
        assert!(w.p(n).streams().all(|s| s.stream_id != sid));
    }
    assert_eq!(w.gw.health().active_streams, 0);
}

#[test]
fn write_access_granted_and_ownership_transferred_reach_the_participants() {
    use mew_core::envelope::Kind;
    use mew_core::participant::Draft;
    let mut w = World::from_yaml(SPACE, 52, (1, 40));
    let human = w.join("human", "human-token");
    let service = w.join("service", "service-token");
    w.run_until_quiet();
    w.act(human, |p, now| {
        p.request_stream(now, json!({"direction": "upload"}), vec![])
    })
    .unwrap();
    w.run_until_quiet();
    let sid = opened(&w, human).expect("stream opened");
    let seen = w
        .p(service)
        .streams()
        .find(|s| s.stream_id == sid)
        .unwrap()
        .clone();
    assert_eq!(
        (seen.owner.as_str(), seen.writers.clone()),
        ("human", vec!["human".to_owned()])
    );
    assert!(
        w.act(service, |p, _| p.send_stream_data(&sid, "no"))
            .is_err()
    );

    let grant = Draft::new(Kind::Other("stream/grant-write".into()))
        .payload(json!({"stream_id": sid, "participant_id": "service"}));
    w.act(human, |p, now| p.send(now, grant)).unwrap();
    w.run_until_quiet();
    let seen = w
        .p(service)
        .streams()
        .find(|s| s.stream_id == sid)
        .unwrap()
        .clone();
    assert_eq!(seen.writers, vec!["human", "service"]);
    w.act(service, |p, _| p.send_stream_data(&sid, "granted"))
        .unwrap();
    w.run_until_quiet();
    assert_eq!(data(&w, human, &sid), ["granted"]);

    let transfer = Draft::new(Kind::Other("stream/transfer-ownership".into()))
        .payload(json!({"stream_id": sid, "new_owner": "service"}));
    w.act(human, |p, now| p.send(now, transfer)).unwrap();
    w.run_until_quiet();
    let now_owner = w
        .p(service)
        .streams()
        .find(|s| s.stream_id == sid)
        .unwrap()
        .clone();
    assert_eq!(now_owner.role, StreamRole::Owner);
    let before = w
        .p(human)
        .streams()
        .find(|s| s.stream_id == sid)
        .unwrap()
        .clone();
    assert_eq!(
        (before.role, before.owner.as_str()),
        (StreamRole::Observer, "service")
    );
    assert_eq!(
        w.act(human, |p, _| p.send_stream_data(&sid, "old owner")),
        Err(CommandError::NotStreamOwner(sid.clone()))
    );
    // The new owner's frames reach the old one.
    w.act(service, |p, _| p.send_stream_data(&sid, "new owner"))
        .unwrap();
    w.run_until_quiet();
    assert_eq!(data(&w, human, &sid), ["granted", "new owner"]);
}
