//! The pattern language case by case: the note's table, the spec's examples (4.1, 4.2, 9.3)
//! and many more.

use mew_core::capability::{Capability, CapabilitySet, Precheck};
use serde_json::{Value, json};

fn cap(v: Value) -> Capability {
    Capability::compile(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"))
}

/// `msg` is `{"kind": ..., "payload"?: ...}`.
fn matches(c: &Value, msg: &Value) -> bool {
    let kind = msg["kind"].as_str().unwrap();
    cap(c.clone()).matches(kind, msg.get("payload"))
}

fn check(cases: &[(Value, Value, bool)]) {
    for (c, m, want) in cases {
        assert_eq!(matches(c, m), *want, "capability {c} message {m}");
    }
}

fn set(v: Value) -> CapabilitySet {
    CapabilitySet::compile(v.as_array().unwrap()).unwrap()
}

#[test]
fn note_table() {
    check(&[
        (json!({"kind":"*"}), json!({"kind":"mcp/request"}), true),
        (json!({"kind":"mcp/*"}), json!({"kind":"mcp/a/b"}), false),
        (json!({"kind":"mcp/**"}), json!({"kind":"mcp/a/b"}), true),
        (
            json!({"kind":["chat","mcp/*"]}),
            json!({"kind":"mcp/proposal"}),
            true,
        ),
        (
            json!({"kind":"mcp/request","payload":{"method":"*/list"}}),
            json!({"kind":"mcp/request","payload":{"method":"tools/list"}}),
            true,
        ),
        (
            json!({"kind":"mcp/request","payload":{"method":"!tools/*"}}),
            json!({"kind":"mcp/request","payload":{"method":"tools/list"}}),
            false,
        ),
        (
            json!({"kind":"mcp/request","payload":{"method":"!tools/call"}}),
            json!({"kind":"mcp/request","payload":{}}),
            false,
        ),
        (
            json!({"kind":"x","payload":{"params":{"name":"read_*"}}}),
            json!({"kind":"x","payload":{"params":{"name":"read_file"}}}),
            true,
        ),
        (
            json!({"kind":"x","payload":{"uri":"/public/**"}}),
            json!({"kind":"x","payload":{"uri":"/public/docs/a.md"}}),
            true,
        ),
        (
            json!({"kind":"x","payload":{"q":"/^SELECT .* FROM public\\./"}}),
            json!({"kind":"x","payload":{"q":"DELETE FROM users"}}),
            false,
        ),
        (
            json!({"kind":"x","payload":{"**":"secret"}}),
            json!({"kind":"x","payload":{"a":{"b":["secret"]}}}),
            true,
        ),
        (
            json!({"kind":"x","payload":{"$.params[*].name":"file_*"}}),
            json!({"kind":"x","payload":{"params":[{"name":"file_read"}]}}),
            true,
        ),
        (
            json!({"kind":"x","payload":{"n":5}}),
            json!({"kind":"x","payload":{"n":"5"}}),
            false,
        ),
        (
            json!({"kind":"x","payload":{"v":null}}),
            json!({"kind":"x","payload":{}}),
            false,
        ),
    ]);
}

#[test]
fn note_table_counterparts() {
    check(&[
        (json!({"kind":"mcp/*"}), json!({"kind":"mcp/request"}), true),
        (json!({"kind":"mcp/*"}), json!({"kind":"mcp"}), false),
        (json!({"kind":"mcp/*"}), json!({"kind":"chat"}), false),
        (json!({"kind":"*"}), json!({"kind":"a/b/c"}), true),
        (
            json!({"kind":["chat","mcp/*"]}),
            json!({"kind":"chat"}),
            true,
        ),
        (
            json!({"kind":["chat","mcp/*"]}),
            json!({"kind":"reasoning/start"}),
            false,
        ),
        (
            json!({"kind":"mcp/request","payload":{"method":"!tools/*"}}),
            json!({"kind":"mcp/request","payload":{"method":"resources/list"}}),
            true,
        ),
        (
            json!({"kind":"mcp/request","payload":{"method":"!tools/call"}}),
            json!({"kind":"mcp/request"}),
            false,
        ),
        (
            json!({"kind":"mcp/request","payload":{"method":"!tools/call"}}),
            json!({"kind":"mcp/request","payload":{"method":5}}),
            false,
        ),
        (
            json!({"kind":"x","payload":{"params":{"name":"read_*"}}}),
            json!({"kind":"x","payload":{"params":{"name":"write_file"}}}),
            false,
        ),
        (
            json!({"kind":"x","payload":{"uri":"/public/**"}}),
            json!({"kind":"x","payload":{"uri":"/private/public/a"}}),
            false,
        ),
        (
            json!({"kind":"x","payload":{"q":"/^SELECT .* FROM public\\./"}}),
            json!({"kind":"x","payload":{"q":"SELECT * FROM public.t"}}),
            true,
        ),
        (
            json!({"kind":"x","payload":{"q":"/FROM/"}}),
            json!({"kind":"x","payload":{"q":"x FROM y"}}),
            true,
        ),
        (
            json!({"kind":"x","payload":{"**":"secret"}}),
            json!({"kind":"x","payload":{"a":{"b":["public"]}}}),
            false,
        ),
        (
            json!({"kind":"x","payload":{"$.params[*].name":"file_*"}}),
            json!({"kind":"x","payload":{"params":[{"name":"net_get"},{"name":"file_write"}]}}),
            true,
        ),
        (
            json!({"kind":"x","payload":{"$.params[*].name":"file_*"}}),
            json!({"kind":"x","payload":{"params":[]}}),
            false,
        ),
        (
            json!({"kind":"x","payload":{"n":5}}),
            json!({"kind":"x","payload":{"n":5}}),
            true,
        ),
        (
            json!({"kind":"x","payload":{"n":5}}),
            json!({"kind":"x","payload":{"n":5.0}}),
            true,
        ),
        (
            json!({"kind":"x","payload":{"n":5}}),
            json!({"kind":"x","payload":{"n":6}}),
            false,
        ),
        (
            json!({"kind":"x","payload":{"v":null}}),
            json!({"kind":"x","payload":{"v":null}}),
            true,
        ),
        (
            json!({"kind":"x","payload":{"v":null}}),
            json!({"kind":"x","payload":{"v":0}}),
            false,
        ),
    ]);
}

#[test]
fn spec_4_1_profiles() {
    let full = set(json!([{"kind": "mcp/*"}, {"kind": "chat"}]));
    for k in ["mcp/request", "mcp/response", "mcp/proposal", "chat"] {
        assert!(full.allows(k, None), "{k}");
    }
    assert!(!full.allows("system/welcome", None));
    assert!(!full.allows("reasoning/start", None));

    let proposal_only =
        set(json!([{"kind":"mcp/proposal"},{"kind":"mcp/response"},{"kind":"chat"}]));
    assert!(proposal_only.allows("mcp/proposal", Some(&json!({"method":"tools/call"}))));
    assert!(proposal_only.allows("mcp/response", None));
    assert!(proposal_only.allows("chat", Some(&json!({"text":"hi"}))));
    assert!(!proposal_only.allows("mcp/request", Some(&json!({"method":"tools/call"}))));

    let tool_specific = set(json!([
        {"kind":"mcp/request","payload":{"method":"tools/call","params":{"name":"read_*"}}},
        {"kind":"mcp/response"},
        {"kind":"chat"}
    ]));
    let call = |name: &str| json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":name,"arguments":{}}});
    assert!(tool_specific.allows("mcp/request", Some(&call("read_file"))));
    assert!(tool_specific.allows("mcp/request", Some(&call("read_"))));
    assert!(!tool_specific.allows("mcp/request", Some(&call("write_file"))));
    assert!(!tool_specific.allows("mcp/request", Some(&call("x/read_file"))));
    assert!(!tool_specific.allows(
        "mcp/request",
        Some(&json!({"method":"tools/list","params":{"name":"read_file"}}))
    ));
    assert!(!tool_specific.allows("mcp/request", Some(&json!({"method":"tools/call"}))));
    assert!(!tool_specific.allows("mcp/request", None));
    assert!(tool_specific.allows("mcp/response", Some(&json!({"result":{}}))));
    assert!(!tool_specific.allows("mcp/proposal", None));

    // Progressive trust.
    let initial = set(json!([{"kind": "mcp/proposal"}, {"kind": "chat"}]));
    assert!(!initial.allows("mcp/request", None));
    let full_mcp = set(json!([{"kind": "mcp/*"}]));
    assert!(full_mcp.allows("mcp/request", Some(&json!({"method":"anything"}))));
    assert!(!full_mcp.allows("chat", None));
}

#[test]
fn spec_4_2_examples() {
    let msg = json!({"kind":"mcp/request","payload":{"method":"tools/call","params":{"name":"x"}}});
    for c in [
        json!({"kind": "mcp/*"}),
        json!({"kind": "mcp/request"}),
        json!({"kind": "mcp/request", "payload": {"method": "tools/*"}}),
    ] {
        assert!(matches(&c, &msg), "{c}");
    }
    for c in [
        json!({"kind": "mcp/response"}),
        json!({"kind": "chat"}),
        json!({"kind": "mcp/request", "payload": {"method": "resources/*"}}),
    ] {
        assert!(!matches(&c, &msg), "{c}");
    }
    let chat = json!({"kind":"chat","payload":{"text":"hello"}});
    assert!(matches(&json!({"kind":"chat"}), &chat));
    assert!(matches(&json!({"kind":"*"}), &chat));
    for c in [
        json!({"kind":"mcp/*"}),
        json!({"kind":"chat/*"}),
        json!({"kind":"cha"}),
    ] {
        assert!(!matches(&c, &chat), "{c}");
    }
}

#[test]
fn spec_9_3_mixed_environment() {
    let admin = cap(json!({"kind": "mcp/*"}));
    let service = cap(json!({"kind": "mcp/response"}));
    let newbie = cap(json!({"kind": "mcp/proposal"}));
    let monitor = cap(json!({"kind": "mcp/request", "payload": {"method": "*/list"}}));
    let req = |m: &str| json!({"jsonrpc":"2.0","id":1,"method":m});

    assert!(admin.matches("mcp/request", Some(&req("tools/call"))));
    assert!(admin.matches("mcp/response", None));
    assert!(!admin.matches("chat", None));

    assert!(service.matches("mcp/response", Some(&json!({"result":{}}))));
    assert!(!service.matches("mcp/request", Some(&req("tools/list"))));

    assert!(newbie.matches("mcp/proposal", Some(&req("tools/call"))));
    assert!(!newbie.matches("mcp/request", Some(&req("tools/call"))));

    for m in ["tools/list", "resources/list", "prompts/list"] {
        assert!(monitor.matches("mcp/request", Some(&req(m))), "{m}");
    }
    for m in ["tools/call", "resources/read", "a/b/list", "list"] {
        assert!(!monitor.matches("mcp/request", Some(&req(m))), "{m}");
    }
    assert!(!monitor.matches("mcp/proposal", Some(&req("tools/list"))));
    assert!(!monitor.matches("mcp/request", None));
}

#[test]
fn scalars_same_type() {
    check(&[
        (
            json!({"kind":"k","payload":{"b":true}}),
            json!({"kind":"k","payload":{"b":true}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"b":true}}),
            json!({"kind":"k","payload":{"b":"true"}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"b":true}}),
            json!({"kind":"k","payload":{"b":1}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"b":false}}),
            json!({"kind":"k","payload":{"b":null}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"n":1.5}}),
            json!({"kind":"k","payload":{"n":1.5}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"n":-3}}),
            json!({"kind":"k","payload":{"n":-3}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"n":0}}),
            json!({"kind":"k","payload":{"n":false}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"s":"5"}}),
            json!({"kind":"k","payload":{"s":5}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"s":"*"}}),
            json!({"kind":"k","payload":{"s":5}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"s":"*"}}),
            json!({"kind":"k","payload":{"s":null}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"s":"*"}}),
            json!({"kind":"k","payload":{"s":""}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"s":"!x"}}),
            json!({"kind":"k","payload":{"s":null}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"s":"!x"}}),
            json!({"kind":"k","payload":{"s":["y"]}}),
            false,
        ),
    ]);
}

#[test]
fn scalar_never_matches_array_elementwise() {
    check(&[
        (
            json!({"kind":"k","payload":{"t":"a"}}),
            json!({"kind":"k","payload":{"t":["a"]}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"t":"*"}}),
            json!({"kind":"k","payload":{"t":["a"]}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"t":1}}),
            json!({"kind":"k","payload":{"t":[1]}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"$.t[*]":"a"}}),
            json!({"kind":"k","payload":{"t":["b","a"]}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"$.t[0]":"a"}}),
            json!({"kind":"k","payload":{"t":["b","a"]}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"$.t[1]":"a"}}),
            json!({"kind":"k","payload":{"t":["b","a"]}}),
            true,
        ),
    ]);
}

#[test]
fn arrays_are_alternatives() {
    check(&[
        (
            json!({"kind":"k","payload":{"m":["a","b*"]}}),
            json!({"kind":"k","payload":{"m":"bx"}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"m":["a","b*"]}}),
            json!({"kind":"k","payload":{"m":"c"}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"m":[1,"1"]}}),
            json!({"kind":"k","payload":{"m":1}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"m":[]}}),
            json!({"kind":"k","payload":{"m":"a"}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"m":[{"a":1},{"b":2}]}}),
            json!({"kind":"k","payload":{"m":{"b":2,"c":3}}}),
            true,
        ),
        (
            json!({"kind":"k","payload":[{"a":1},{"b":2}]}),
            json!({"kind":"k","payload":{"b":2}}),
            true,
        ),
        (
            json!({"kind":["a",["b",["c*"]]]}),
            json!({"kind":"cc"}),
            true,
        ),
        (json!({"kind":[]}), json!({"kind":"a"}), false),
    ]);
}

#[test]
fn objects_are_subset_matches() {
    check(&[
        (json!({"kind":"k","payload":{}}), json!({"kind":"k"}), true),
        (
            json!({"kind":"k","payload":{}}),
            json!({"kind":"k","payload":{"a":1}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{}}),
            json!({"kind":"k","payload":"text"}),
            false,
        ),
        (
            json!({"kind":"k","payload":{}}),
            json!({"kind":"k","payload":[]}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"a":{}}}),
            json!({"kind":"k","payload":{"a":{"z":1}}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"a":{}}}),
            json!({"kind":"k","payload":{"a":[]}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"a":{}}}),
            json!({"kind":"k","payload":{}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"a":1,"b":2}}),
            json!({"kind":"k","payload":{"a":1}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"a":1,"b":2}}),
            json!({"kind":"k","payload":{"a":1,"b":2,"c":3}}),
            true,
        ),
        (
            json!({"kind":"k","payload":"hi*"}),
            json!({"kind":"k","payload":"hint"}),
            true,
        ),
        (
            json!({"kind":"k","payload":"hi*"}),
            json!({"kind":"k"}),
            false,
        ),
        (
            json!({"kind":"k","payload":null}),
            json!({"kind":"k"}),
            false,
        ),
    ]);
}

#[test]
fn glob_keys_and_deep_keys() {
    check(&[
        (
            json!({"kind":"k","payload":{"para*":{"name":"x"}}}),
            json!({"kind":"k","payload":{"params":{"name":"x"}}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"para*":{"name":"x"}}}),
            json!({"kind":"k","payload":{"params":{"name":"y"}, "paragraph":{"name":"x"}}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"para*":{"name":"x"}}}),
            json!({"kind":"k","payload":{"params":{"name":"y"}}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"para*":"!x"}}),
            json!({"kind":"k","payload":{"other":"y"}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"*":"x"}}),
            json!({"kind":"k","payload":{"anything":"x"}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"*":"x"}}),
            json!({"kind":"k","payload":{}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"{a,b}":1}}),
            json!({"kind":"k","payload":{"b":1}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"?":1}}),
            json!({"kind":"k","payload":{"ab":1}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"**":{"token":"*"}}}),
            json!({"kind":"k","payload":{"a":[{"b":{"token":"t"}}]}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"**":{"token":"*"}}}),
            json!({"kind":"k","payload":{"token":"t"}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"**":{"token":"*"}}}),
            json!({"kind":"k","payload":{"a":[{"token":1}]}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"**":"/rm -rf/"}}),
            json!({"kind":"k","payload":{"args":["ls","sudo rm -rf /"]}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"**":5}}),
            json!({"kind":"k","payload":{"a":[[[5]]]}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"**":{}}}),
            json!({"kind":"k"}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"**":"x"}}),
            json!({"kind":"k"}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"outer":{"**":"x"}}}),
            json!({"kind":"k","payload":{"x":"x","outer":{}}}),
            false,
        ),
    ]);
}

#[test]
fn jsonpath_keys() {
    let p = json!({"kind":"k","payload":{"a":{"b":"c"},"l":[{"name":"n1"},{"name":"n2"}],"deep":{"x":{"name":"n3"}},"it.em":1}});
    let c = |k: &str, v: Value| json!({"kind":"k","payload":{k: v}});
    check(&[
        (c("$.a.b", json!("c")), p.clone(), true),
        (c("$.a.b", json!("d")), p.clone(), false),
        (c("$['a']['b']", json!("c")), p.clone(), true),
        (c("$['it.em']", json!(1)), p.clone(), true),
        (c("$.l[0].name", json!("n1")), p.clone(), true),
        (c("$.l[0].name", json!("n2")), p.clone(), false),
        (c("$.l[*].name", json!("n2")), p.clone(), true),
        (c("$.l[5].name", json!("!x")), p.clone(), false),
        (c("$.missing", json!(null)), p.clone(), false),
        (c("$.missing", json!("!x")), p.clone(), false),
        (c("$..name", json!("n3")), p.clone(), true),
        (c("$..name", json!("n4")), p.clone(), false),
        (c("$.a.*", json!("c")), p.clone(), true),
        (c("$", json!({"a":{"b":"c"}})), p.clone(), true),
        (c("$.l[*]", json!({"name":"n*"})), p.clone(), true),
    ]);
}

#[test]
fn negation() {
    check(&[
        (json!({"kind":"!system/*"}), json!({"kind":"chat"}), true),
        (
            json!({"kind":"!system/*"}),
            json!({"kind":"system/error"}),
            false,
        ),
        (json!({"kind":"!chat"}), json!({"kind":"chat"}), false),
        (json!({"kind":"!chat"}), json!({"kind":"mcp/request"}), true),
        (
            json!({"kind":"k","payload":{"cmd":"!/^rm /"}}),
            json!({"kind":"k","payload":{"cmd":"ls"}}),
            true,
        ),
        (
            json!({"kind":"k","payload":{"cmd":"!/^rm /"}}),
            json!({"kind":"k","payload":{"cmd":"rm x"}}),
            false,
        ),
        (
            json!({"kind":"k","payload":{"cmd":["!a*","a1"]}}),
            json!({"kind":"k","payload":{"cmd":"a1"}}),
            true,
        ),
    ]);
}

#[test]
fn globs_in_kinds() {
    check(&[
        (
            json!({"kind":"mcp/{request,response}"}),
            json!({"kind":"mcp/response"}),
            true,
        ),
        (
            json!({"kind":"mcp/{request,response}"}),
            json!({"kind":"mcp/proposal"}),
            false,
        ),
        (
            json!({"kind":"mcp/re?uest"}),
            json!({"kind":"mcp/request"}),
            true,
        ),
        (
            json!({"kind":"mcp/re?uest"}),
            json!({"kind":"mcp/reuest"}),
            false,
        ),
        (
            json!({"kind":"*/request"}),
            json!({"kind":"mcp/request"}),
            true,
        ),
        (
            json!({"kind":"*/request"}),
            json!({"kind":"a/mcp/request"}),
            false,
        ),
        (
            json!({"kind":"**/request"}),
            json!({"kind":"a/mcp/request"}),
            true,
        ),
        (json!({"kind":"**"}), json!({"kind":"a/b"}), true),
        (
            json!({"kind":"participant/*"}),
            json!({"kind":"participant/pause"}),
            true,
        ),
        (
            json!({"kind":"/^stream\\//"}),
            json!({"kind":"stream/open"}),
            true,
        ),
        (
            json!({"kind":"/^stream\\//"}),
            json!({"kind":"x/stream/open"}),
            false,
        ),
        (
            json!({"kind":"/request/"}),
            json!({"kind":"mcp/request"}),
            true,
        ),
    ]);
}

#[test]
fn invalid_patterns_are_refused_with_a_reason() {
    let long = "a".repeat(5000);
    for (c, why) in [
        (json!("chat"), "must be a JSON object"),
        (json!({}), "missing `kind`"),
        (json!({"payload":{}}), "missing `kind`"),
        (json!({"kind": 5}), "string pattern"),
        (json!({"kind": {"a":1}}), "string pattern"),
        (json!({"kind": [1]}), "string pattern"),
        (json!({"kind": "!"}), "`!` alone"),
        (
            json!({"kind": "x", "payload": {"a":"!"}}),
            "payload.a: `!` alone",
        ),
        (
            json!({"kind": "x", "payload": {"q":"/(unclosed/"}}),
            "invalid regex",
        ),
        (json!({"kind": "mcp/{a,b"}), "unbalanced"),
        (json!({"kind": "mcp/a}*"}), "unbalanced"),
        (json!({"kind": "x", "payload": {"{a": 1}}), "unbalanced"),
        (json!({"kind": "x", "payload": {"$.a[": 1}}), "JSONPath"),
        (json!({"kind": "x", "payload": {"$ref": 1}}), "JSONPath"),
        (json!({"kind": long}), "exceeds the limit"),
        (
            json!({"kind": "x", "payload": {"**": {"**": 1}}}),
            "search inside a search",
        ),
        (json!({"id": "cap-7", "kind": "!"}), "capability \"cap-7\""),
    ] {
        let e = Capability::compile(c.clone()).expect_err(&c.to_string());
        assert!(e.reason.contains(why), "{c}: {}", e.reason);
        assert_eq!(e.index, None);
    }
    let mut deep = json!(1);
    for _ in 0..40 {
        deep = json!([deep]);
    }
    let e = Capability::compile(json!({"kind": "x", "payload": deep})).unwrap_err();
    assert!(e.reason.contains("deeper than 32"), "{}", e.reason);

    let e = CapabilitySet::compile(&[
        json!({"kind":"a"}),
        json!({"kind":"b"}),
        json!({"kind":"/[/"}),
    ])
    .unwrap_err();
    assert_eq!(e.index, Some(2));
    assert!(e.to_string().contains("#2"), "{e}");
}

#[test]
fn pattern_text_limit_is_4_kib() {
    // `{"kind":"` ... `"}` minus the quotes: the kind string JSON is len + 2 bytes.
    let ok = "a".repeat(4094);
    assert!(Capability::compile(json!({"kind": ok})).is_ok());
    let too_long = "a".repeat(4095);
    assert!(Capability::compile(json!({"kind": too_long})).is_err());
    // Other keys do not count.
    let desc = "d".repeat(10_000);
    assert!(Capability::compile(json!({"kind": "x", "description": desc})).is_ok());
}

#[test]
fn extra_keys_are_kept_and_ignored() {
    let raw = json!({"id":"c1","kind":"chat","to":["a"],"description":"talk"});
    let c = cap(raw.clone());
    assert_eq!(c.raw(), &raw);
    assert!(c.matches("chat", None));
    let s = serde_json::to_value(&c).unwrap();
    assert_eq!(s, raw);
    let back: Capability = serde_json::from_value(s).unwrap();
    assert_eq!(back, c);
    assert!(serde_json::from_value::<Capability>(json!({"kind":"!"})).is_err());
    let set: CapabilitySet =
        serde_json::from_value(json!([raw.clone(), {"kind":"mcp/*"}])).unwrap();
    assert_eq!(set.to_json(), json!([raw, {"kind":"mcp/*"}]));
}

#[test]
fn precheck_decides_on_kind_when_it_can() {
    let s = set(json!([
        {"kind":"mcp/request","payload":{"method":"tools/list"}},
        {"kind":"chat"},
        {"kind":"mcp/*","payload":{"x":1}}
    ]));
    assert_eq!(s.precheck("chat"), Precheck::Allowed(1));
    assert_eq!(s.precheck("reasoning/start"), Precheck::Denied);
    assert_eq!(s.precheck("mcp/request"), Precheck::NeedsPayload);
    assert_eq!(s.precheck("mcp/response"), Precheck::NeedsPayload);
    let c = cap(json!({"kind":"chat","payload":{"a":1}}));
    assert_eq!(c.matches_kind_only("x"), Some(false));
    assert_eq!(c.matches_kind_only("chat"), None);
    assert_eq!(
        cap(json!({"kind":"chat"})).matches_kind_only("chat"),
        Some(true)
    );
    assert_eq!(
        s.first_match("mcp/request", Some(&json!({"method":"tools/list"})))
            .map(|c| c.raw()["kind"].clone()),
        Some(json!("mcp/request"))
    );
    assert!(
        s.first_match("mcp/request", Some(&json!({"method":"tools/call"})))
            .is_none()
    );
}

#[test]
fn set_editing() {
    let mut s = CapabilitySet::default();
    assert!(s.is_empty());
    assert!(!s.allows("chat", None));
    s.push(cap(json!({"kind":"chat"})));
    s.push(cap(json!({"kind":"mcp/*"})));
    assert_eq!(s.len(), 2);
    assert!(s.allows("mcp/x", None));
    s.retain(|c| c.raw()["kind"] == "chat");
    assert_eq!(s.len(), 1);
    assert!(!s.allows("mcp/x", None));
    assert_eq!(s.iter().count(), 1);
}

#[test]
fn delegation_examples() {
    let granter = set(json!([
        {"kind":"mcp/*"},
        {"kind":"chat"}
    ]));
    for g in [
        json!({"kind":"mcp/request"}),
        json!({"kind":"mcp/request","payload":{"method":"tools/call"}}),
        json!({"kind":"mcp/{request,response}"}),
        json!({"kind":["chat","mcp/proposal"]}),
        json!({"kind":"mcp/re*"}),
    ] {
        assert!(granter.covers(&cap(g.clone())), "{g}");
    }
    for g in [
        json!({"kind":"*"}),
        json!({"kind":"mcp/**"}),
        json!({"kind":"system/*"}),
        json!({"kind":["chat","reasoning/start"]}),
        json!({"kind":"!chat"}),
        json!({"kind":"/^mcp\\//"}),
    ] {
        assert!(!granter.covers(&cap(g.clone())), "{g}");
    }

    let limited = set(json!([
        {"kind":"mcp/request","payload":{"method":"tools/call","params":{"name":"read_*"}}}
    ]));
    for g in [
        json!({"kind":"mcp/request","payload":{"method":"tools/call","params":{"name":"read_file"}}}),
        json!({"kind":"mcp/request","payload":{"method":"tools/call","params":{"name":"read_f*","arguments":{}}}}),
        json!({"kind":"mcp/request","payload":{"method":"tools/call","params":{"name":["read_a","read_b"]}}}),
    ] {
        assert!(limited.covers(&cap(g.clone())), "{g}");
    }
    for g in [
        json!({"kind":"mcp/request"}),
        json!({"kind":"mcp/request","payload":{"method":"tools/call"}}),
        json!({"kind":"mcp/request","payload":{"method":"tools/call","params":{"name":"*"}}}),
        json!({"kind":"mcp/request","payload":{"method":"tools/*","params":{"name":"read_file"}}}),
        json!({"kind":"mcp/request","payload":{"method":"tools/call","params":{"name":"!write_file"}}}),
    ] {
        assert!(!limited.covers(&cap(g.clone())), "{g}");
    }

    let not_rm = set(json!([{"kind":"k","payload":{"cmd":"!rm *"}}]));
    assert!(not_rm.covers(&cap(json!({"kind":"k","payload":{"cmd":"!rm*"}}))));
    // "rmdir" is not `rm *` but is `rm*`: the wider negation is not covered.
    assert!(
        !set(json!([{"kind":"k","payload":{"cmd":"!rm*"}}]))
            .covers(&cap(json!({"kind":"k","payload":{"cmd":"!rm *"}})))
    );
    assert!(not_rm.covers(&cap(json!({"kind":"k","payload":{"cmd":"ls"}}))));
    assert!(!not_rm.covers(&cap(json!({"kind":"k","payload":{"cmd":"rm -rf"}}))));
    assert!(!not_rm.covers(&cap(json!({"kind":"k","payload":{"cmd":"!rm"}}))));

    let deep = set(json!([{"kind":"k","payload":{"**":"public"}}]));
    assert!(deep.covers(&cap(json!({"kind":"k","payload":{"a":"public","b":1}}))));
    assert!(!deep.covers(&cap(json!({"kind":"k","payload":{"a":{"b":"public"}}}))));
    assert!(CapabilitySet::default().covers(&cap(json!({"kind":[]}))));
    assert!(!CapabilitySet::default().covers(&cap(json!({"kind":"chat"}))));
}
