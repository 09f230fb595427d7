use super::*;
use proptest::prelude::*;

fn history(entries: &[(&str, &str, &str, Value, Option<bool>)]) -> Vec<String> {
    // (proposal id, proposer, tool, arguments, Some(approved?) or undecided)
    let mut lines = Vec::new();
    for (i, (id, proposer, tool, args, outcome)) in entries.iter().enumerate() {
        lines.push(
            json!({"event": "received", "envelope": {
            "protocol": "mew/v0.4", "id": id, "ts": format!("2026-11-25T10:00:{i:02}Z"),
            "from": proposer, "to": ["files"], "kind": "mcp/proposal",
            "payload": {"method": "tools/call", "params": {"name": tool, "arguments": args}}}})
            .to_string(),
        );
        match outcome {
            Some(true) => lines.push(
                json!({"protocol": "mew/v0.4", "id": format!("f-{id}"),
                "ts": format!("2026-11-25T10:01:{i:02}Z"), "from": "human", "to": ["files"],
                "kind": "mcp/request", "correlation_id": [id],
                "payload": {"method": "tools/call", "params": {"name": tool, "arguments": args}}})
                .to_string(),
            ),
            Some(false) => lines.push(
                json!({"protocol": "mew/v0.4", "id": format!("r-{id}"),
                "ts": format!("2026-11-25T10:01:{i:02}Z"), "from": "human", "to": [proposer],
                "kind": "mcp/reject", "correlation_id": [id], "payload": {"reason": "no"}})
                .to_string(),
            ),
            None => {}
        }
    }
    lines
}

#[test]
fn repeated_approvals_become_the_narrowest_grant() {
    let lines = history(&[
        (
            "p1",
            "agent",
            "read_file",
            json!({"path": "src/a.rs", "encoding": "utf8"}),
            Some(true),
        ),
        (
            "p2",
            "agent",
            "read_file",
            json!({"path": "src/b.rs", "encoding": "utf8"}),
            Some(true),
        ),
        (
            "p3",
            "agent",
            "read_file",
            json!({"path": "src/lib/c.rs", "encoding": "utf8"}),
            Some(true),
        ),
        (
            "p4",
            "agent",
            "write_file",
            json!({"path": "src/a.rs"}),
            Some(true),
        ),
        (
            "p5",
            "agent",
            "write_file",
            json!({"path": "src/a.rs"}),
            Some(false),
        ),
        ("p6", "agent", "delete_file", json!({"path": "x"}), None),
        (
            "p7",
            "other",
            "read_file",
            json!({"path": "README"}),
            Some(true),
        ),
    ]);
    let d = decisions(lines.iter().map(String::as_str));
    assert_eq!(d.len(), 6, "the undecided proposal is not a decision");
    let s = suggest(&d, 3, &BTreeMap::new());
    assert_eq!(s.len(), 1, "{s:#?}");
    let only = &s[0];
    assert_eq!(only.recipient, "agent");
    assert_eq!(
        only.capability,
        json!({"kind": "mcp/request", "payload": {"method": "tools/call", "params": {
            "name": "read_file", "arguments": {"encoding": "utf8", "path": "src/**"}}}})
    );
    assert_eq!(only.approved, ["p1", "p2", "p3"]);
    assert_eq!(only.approvers, ["human"]);
    assert_eq!(
        (only.first.as_str(), only.last.as_str()),
        ("2026-11-25T10:01:00Z", "2026-11-25T10:01:02Z")
    );
    assert_eq!(only.grant_payload()["recipient"], "agent");
    // The write had a rejection: never suggested, however often approved otherwise.
    assert!(
        suggest(&d, 1, &BTreeMap::new())
            .iter()
            .all(|s| s.capability["payload"]["params"]["name"] != "write_file")
    );
}

#[test]
fn a_rejection_narrows_the_glob_to_exact_values_or_nothing() {
    let lines = history(&[
        (
            "p1",
            "agent",
            "read_file",
            json!({"path": "src/a.rs"}),
            Some(true),
        ),
        (
            "p2",
            "agent",
            "read_file",
            json!({"path": "src/a.rs"}),
            Some(true),
        ),
        (
            "p3",
            "agent",
            "read_file",
            json!({"path": "src/a.rs", "x": 1}),
            Some(true),
        ),
    ]);
    let d = decisions(lines.iter().map(String::as_str));
    let s = suggest(&d, 3, &BTreeMap::new());
    assert_eq!(
        s[0].capability["payload"]["params"]["arguments"],
        json!({"path": "src/a.rs"})
    );
    // The approver's own capabilities must cover what is suggested.
    let weak = CapabilitySet::compile(&[json!({"kind": "chat"})]).unwrap();
    let strong = CapabilitySet::compile(&[json!({"kind": "*"})]).unwrap();
    let caps = |c: &CapabilitySet| BTreeMap::from([("human".to_owned(), c.clone())]);
    assert!(suggest(&d, 3, &caps(&weak)).is_empty());
    assert_eq!(suggest(&d, 3, &caps(&strong)).len(), 1);
}

fn arb_decision() -> impl Strategy<Value = (String, String, Value, bool)> {
    (
        prop_oneof![Just("a"), Just("b")],
        prop_oneof![Just("read_file"), Just("write_file")],
        prop_oneof![
            Just("src/a.rs"),
            Just("src/b.rs"),
            Just("src/x/c.rs"),
            Just("docs/a.md"),
            Just("secret")
        ],
        prop_oneof![Just(json!(null)), Just(json!("utf8")), Just(json!(1))],
        prop::bool::weighted(0.8),
    )
        .prop_map(|(p, t, path, enc, ok)| {
            let mut args = json!({"path": path});
            if !enc.is_null() {
                args["encoding"] = enc;
            }
            (p.to_owned(), t.to_owned(), args, ok)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn suggestions_cover_every_approval_and_no_rejection(
        entries in prop::collection::vec(arb_decision(), 0..40),
        min in 1usize..4,
    ) {
        let named: Vec<(String, String, String, Value, Option<bool>)> = entries
            .iter()
            .enumerate()
            .map(|(i, (p, t, a, ok))| (format!("p{i}"), p.clone(), t.clone(), a.clone(), Some(*ok)))
            .collect();
        let borrowed: Vec<(&str, &str, &str, Value, Option<bool>)> = named
            .iter()
            .map(|(i, p, t, a, o)| (i.as_str(), p.as_str(), t.as_str(), a.clone(), *o))
            .collect();
        let lines = history(&borrowed);
        let d = decisions(lines.iter().map(String::as_str));
        prop_assert_eq!(d.len(), entries.len());
        for s in suggest(&d, min, &BTreeMap::new()) {
            let cap = Capability::compile(s.capability.clone()).unwrap();
            prop_assert!(s.approved.len() >= min);
            for id in &s.approved {
                let x = d.iter().find(|x| &x.id == id).unwrap();
                prop_assert!(cap.matches("mcp/request", Some(&x.payload)), "{} misses {}", s.capability, x.payload);
            }
            for x in d.iter().filter(|x| x.proposer == s.recipient && matches!(x.outcome, Outcome::Rejected { .. })) {
                prop_assert!(!cap.matches("mcp/request", Some(&x.payload)), "{} allows rejected {}", s.capability, x.payload);
            }
        }
    }
}

#[test]
fn the_narrowest_grant_allows_exactly_the_proposed_call() {
    let payload = json!({"method": "tools/call",
                         "params": {"name": "write_file", "arguments": {"path": "/a", "content": "x"}}});
    let cap = narrowest(&payload);
    assert_eq!(
        cap,
        json!({"kind": "mcp/request", "payload": {"method": "tools/call",
               "params": {"name": "write_file", "arguments": {"path": "/a", "content": "x"}}}})
    );
    let c = Capability::compile(cap).unwrap();
    assert!(c.matches("mcp/request", Some(&payload)));
    let other = json!({"method": "tools/call",
                       "params": {"name": "write_file", "arguments": {"path": "/b", "content": "x"}}});
    assert!(!c.matches("mcp/request", Some(&other)));
    // No params: the method alone.
    assert_eq!(
        narrowest(&json!({"method": "tools/list"})),
        json!({"kind": "mcp/request", "payload": {"method": "tools/list"}})
    );
}
