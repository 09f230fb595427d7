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
