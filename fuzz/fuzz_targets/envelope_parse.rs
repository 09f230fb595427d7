//! Arbitrary bytes through every envelope entry point: nothing may panic, and whatever
//! parses must survive a serialise/parse round trip unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mew_core::envelope::{FrameKind, StreamFrame};
use mew_core::{Envelope, Limits, ParseError, RoutingView};

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let shallow = Limits {
        max_depth: 4,
        ..Limits::default()
    };

    let parsed = Envelope::parse(data, &limits);
    if let Ok(env) = &parsed {
        let text = env.to_json();
        let again = Envelope::parse(text.as_bytes(), &limits)
            .unwrap_or_else(|e| panic!("re-parse of {text} failed: {e}"));
        assert_eq!(&again, env, "round trip changed the envelope");
        let view = RoutingView::parse(text.as_bytes(), &limits)
            .unwrap_or_else(|e| panic!("view of {text} failed: {e}"));
        assert_eq!(view.kind.as_ref(), env.kind.as_str());
        assert_eq!(view.id.as_deref(), Some(env.id.as_str()));
    }
    // The stricter envelope parse may not accept what the lenient view refuses, except
    // for depth: the envelope drops unknown fields unscanned, the view forwards them.
    match RoutingView::parse(data, &limits) {
        Ok(view) => {
            let _ = view.payload_value();
            let _ = view.correlation_id.as_ref().map(|c| c.first());
        }
        Err(ParseError::TooDeep { .. }) => {}
        Err(e) => assert!(
            parsed.is_err(),
            "view refused ({e}) what the envelope accepted"
        ),
    }
    // A lower configured depth goes through the scan instead of serde's own limit.
    if let Ok(env) = Envelope::parse(data, &shallow) {
        assert_eq!(Some(&env), parsed.as_ref().ok());
    }

    if FrameKind::of(data) == FrameKind::StreamData {
        if let Ok(frame) = StreamFrame::parse(data) {
            let encoded = frame.encode();
            let back = StreamFrame::parse(&encoded).expect("encoded frame parses");
            assert_eq!(back, frame);
        }
    } else {
        assert!(StreamFrame::parse(data).is_err());
    }
});
