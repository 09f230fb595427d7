use super::*;

#[test]
fn reads_reference_layout() {
    let yaml = r#"
space: {id: my-space, name: My space, description: test}
participants:
  human: {tokens: [human-token], capabilities: [{kind: "*"}]}
  agent:
    tokens: [agent-token]
    capabilities: [{kind: mcp/proposal}, {kind: chat}]
    auto_start: true
    command: node
    args: [agent.js]
    env: {A: "1"}
  files:
    type: mcp-bridge
    tokens: [files-token]
    capabilities: [{kind: mcp/response}]
    mcp_server: {command: npx, args: [-y, server], env: {X: y}, cwd: /tmp}
    bridge_config: {init_timeout: 5000, reconnect: false, max_reconnects: 1, sampling: {answered_by: model}, roots: ["file:///tmp"]}
  log: {output_log: logs/out.jsonl, auto_connect: true}
defaults: {capabilities: [{kind: chat}]}
gateway: {delivery: addressed, anonymous_joins: true, join_timeout_ms: 500}
"#;
    let c = SpaceConfig::from_yaml(yaml).unwrap();
    assert_eq!(c.id, "my-space");
    assert_eq!(c.participants.len(), 4);
    let files = c.participant("files").unwrap();
    assert_eq!(files.kind, ParticipantType::McpBridge);
    assert_eq!(
        files.mcp_server.as_ref().unwrap().cwd.as_deref(),
        Some("/tmp")
    );
    let bc = files.bridge_config.as_ref().unwrap();
    assert_eq!(bc.init_timeout_ms, 5000);
    assert_eq!(bc.sampling_answered_by.as_deref(), Some("model"));
    assert_eq!(bc.roots, ["file:///tmp"]);
    assert!(c.participant("log").unwrap().is_virtual());
    assert_eq!(c.participant("log").unwrap().capabilities.len(), 1);
    assert_eq!(c.gateway.delivery, DeliveryMode::Addressed);
    assert!(c.gateway.anonymous_joins);
    assert_eq!(c.gateway.join_timeout, Duration::from_millis(500));
    assert_eq!(c.participant("agent").unwrap().env["A"], "1");
}

#[test]
fn reports_every_problem_with_location() {
    let yaml = r#"
space: {id: s}
participants:
  a: {type: robot, tokens: [t1], capabilities: [{kind: chat}, {nokind: 1}]}
  b: {tokens: [t1], auto_start: maybe}
gateway: {delivery: sideways, idle_timeout_ms: -3}
"#;
    let errs = SpaceConfig::from_yaml(yaml).unwrap_err();
    let text = errs.to_string();
    assert!(
        text.contains("participants.a.type: unknown participant type `robot`"),
        "{text}"
    );
    assert!(
        text.contains("participants.a.capabilities[1]: invalid capability"),
        "{text}"
    );
    assert!(
        text.contains("participants.b.tokens[0]: duplicate token"),
        "{text}"
    );
    assert!(text.contains("participants.b.auto_start"), "{text}");
    assert!(text.contains("gateway.delivery"), "{text}");
    assert!(text.contains("gateway.idle_timeout_ms"), "{text}");
    assert_eq!(errs.0.len(), 6, "{text}");
}

#[test]
fn every_token_source_authenticates_in_reference_order() {
    let mut c = SpaceConfig::from_yaml(
            "space: {id: s}\nparticipants:\n  my-agent: {tokens: [lit]}\n  b: {tokens: [lit-b, lit-b2]}\n  c: {}\n  d: {tokens: [lit-d]}\n",
        )
        .unwrap();
    let mut n = 0;
    let generated = c.resolve_tokens(
        |var| (var == "MEW_TOKEN_MY_AGENT").then(|| "from-env\n".to_owned()),
        |id| match id {
            "b" | "my-agent" => Some("from-file".to_owned()),
            "d" => Some("lit-d".to_owned()),
            _ => None,
        },
        || {
            n += 1;
            format!("fresh-{n}")
        },
    );
    assert_eq!(
        c.participant("my-agent").unwrap().tokens,
        vec!["from-env", "from-file", "lit"]
    );
    assert_eq!(
        c.participant("b").unwrap().tokens,
        vec!["from-file", "lit-b", "lit-b2"]
    );
    // The same token from two sources is listed once.
    assert_eq!(c.participant("d").unwrap().tokens, vec!["lit-d"]);
    assert_eq!(
        generated,
        vec![GeneratedToken {
            participant: "c".into(),
            token: "fresh-1".into()
        }]
    );
    assert_eq!(c.participant("c").unwrap().tokens, vec!["fresh-1"]);
    assert_eq!(token_env_var("my-agent"), "MEW_TOKEN_MY_AGENT");
}

#[test]
fn reference_keys_load_and_unknown_keys_are_warnings() {
    let yaml = r#"
space: {id: ref}
participants:
  agent:
    type: local
    tokens: [agent-token]
    command: node
    args: ["agent.js", "--port", "${PORT}"]
    env: {DEBUG: "1"}
    auto_start: true
    restart_policy: on-failure
    fifo: true
    io: fifo
    default_to: [files]
    capabilitys: []
    colour: blue
  human: {tokens: [h], default_to: agent}
ui: {theme: dark}
"#;
    let c = SpaceConfig::from_yaml(yaml).unwrap();
    let a = c.participant("agent").unwrap();
    assert_eq!(a.kind, ParticipantType::Local);
    assert_eq!(a.restart_policy, RestartPolicy::OnFailure);
    assert!(a.fifo && a.is_started());
    assert_eq!(a.io.as_deref(), Some("fifo"));
    assert_eq!(a.default_to, vec!["files"]);
    assert_eq!(c.participant("human").unwrap().default_to, vec!["agent"]);
    let w: Vec<String> = c.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        w,
        vec![
            "ui: not used by this gateway, ignored",
            "participants.agent.capabilitys: unknown key, ignored (did you mean `capabilities`?)",
            "participants.agent.colour: not used by this gateway, ignored",
        ]
    );
    let e = SpaceConfig::from_yaml(
        "space: s\nparticipants:\n  a: {type: local, restart_policy: sometimes}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("participants.a.restart_policy: unknown restart policy `sometimes`"),
        "{e}"
    );
}

#[test]
fn substitution_follows_the_reference() {
    let env = |k: &str| match k {
        "PORT" => Some("8080".to_owned()),
        "SPACE" => Some("s".to_owned()),
        _ => None,
    };
    assert_eq!(
        substitute("ws://localhost:${PORT}/${SPACE}", env),
        ("ws://localhost:8080/s".to_owned(), vec![])
    );
    assert_eq!(
        substitute("a${NOPE}b $PORT ${", env),
        ("ab $PORT ${".to_owned(), vec!["NOPE".to_owned()])
    );
}

#[test]
fn short_forms_and_options() {
    let c = SpaceConfig::from_yaml(
            "space: short\nparticipants:\n  a: {token: solo, capabilities: [chat, {kind: mcp/*}]}\nlogging: false\nmew: {delivery: all, history_size: 0, heartbeat_interval_ms: 5000}\n",
        )
        .unwrap();
    assert_eq!(c.id, "short");
    let a = c.participant("a").unwrap();
    assert_eq!(a.tokens, vec!["solo"]);
    assert!(a.capabilities.allows("chat", None));
    assert!(a.capabilities.allows("mcp/request", None));
    assert!(!c.logging.enabled);
    assert_eq!(c.gateway.history_size, 0);
    assert_eq!(c.gateway.heartbeat_interval, Duration::from_secs(5));
    assert_eq!(c.gateway.idle_timeout, Duration::from_secs(90));
    assert_eq!(c.gateway.limits, Limits::default());
}

#[test]
fn structural_errors_are_reported() {
    for (yaml, needle) in [
        ("", "empty"),
        ("[1, 2]", "expected a mapping"),
        (
            "space: {name: 3}\nparticipants: []",
            "participants: expected a mapping",
        ),
        ("participants: {}", "space.id: missing"),
        (
            "space: s\nparticipants:\n  b: {type: mcp-bridge}",
            "participants.b.mcp_server: missing",
        ),
        (
            "space: s\nparticipants:\n  c: {auto_start: true}",
            "participants.c.command",
        ),
        (
            "space: s\nparticipants:\n  \"system:x\": {}",
            "participants.system:x: invalid participant id: participant ids starting with `system:` are the gateway's",
        ),
        (
            "space: s\nparticipants:\n  d: {capabilities: {kind: chat}}",
            "participants.d.capabilities: expected a list",
        ),
        (
            "space: s\ndefaults: {capabilities: [{kind: 5}]}",
            "defaults.capabilities[0]: invalid capability",
        ),
        ("space: [unclosed", "invalid YAML"),
    ] {
        let text = SpaceConfig::from_yaml(yaml).unwrap_err().to_string();
        assert!(text.contains(needle), "{yaml:?}: {text}");
    }
}

#[test]
fn default_space_is_seeded() {
    let a = SpaceConfig::default_space(&mut crate::ids::IdGen::new(9));
    let b = SpaceConfig::default_space(&mut crate::ids::IdGen::new(9));
    assert_eq!(a, b);
    let agent = a.participant("agent").unwrap();
    assert!(agent.capabilities.allows("mcp/proposal", None));
    assert!(!agent.capabilities.allows("mcp/request", None));
    assert!(
        a.participant("human")
            .unwrap()
            .capabilities
            .allows("mcp/request", None)
    );
}

#[test]
fn configured_ids_follow_the_id_rule() {
    for (yaml, needle) in [
        (
            "space: s\nparticipants:\n  \"bo\\u200Bt\": {}",
            "participants.bo\\u{200b}t: invalid participant id: a participant id cannot hold U+200B (byte 2)",
        ),
        (
            "space: s\nparticipants:\n  \"\\u202Etob\": {}",
            "cannot hold U+202E",
        ),
        (
            "space: s\nparticipants:\n  \"../x\": {}",
            "participant_id contains invalid characters",
        ),
        (
            "space: s\nparticipants:\n  bot: {}\n  \"b\\u043Et\": {}",
            "looks like participant `bot`",
        ),
    ] {
        let text = SpaceConfig::from_yaml(yaml).unwrap_err().to_string();
        assert!(text.contains(needle), "{yaml:?}: {text}");
    }
    // An explicit key: YAML allows longer ones than `key: value`.
    let long = format!(
        "space: s\nparticipants:\n  ? {}\n  : {{}}",
        "x".repeat(100_000)
    );
    let text = SpaceConfig::from_yaml(&long).unwrap_err().to_string();
    assert!(
        text.contains("at most 128 bytes (this one has 100000)"),
        "{}",
        &text[..200.min(text.len())]
    );
    assert!(
        text.len() < 400,
        "the error does not repeat the id: {} bytes",
        text.len()
    );
    // Ids that merely differ are fine.
    assert!(
        SpaceConfig::from_yaml("space: s\nparticipants:\n  agent-1: {}\n  agent-2: {}").is_ok()
    );
}

#[test]
fn yaml_that_does_not_parse_is_reported_with_its_line_and_column() {
    // A tab where YAML wants spaces, on line 4; a key given twice (named where its mapping
    // begins, on line 4).
    let errs =
        SpaceConfig::from_yaml("space: {id: s}\nparticipants:\n  a:\n\ttokens: [t]\n").unwrap_err();
    assert_eq!(errs.0.len(), 1, "{errs}");
    assert_eq!(errs.0[0].location, "line 4 column 1", "{errs}");
    assert!(errs.0[0].message.starts_with("invalid YAML: "), "{errs}");
    let errs = SpaceConfig::from_yaml(
        "space: {id: s}\nparticipants:\n  a:\n    tokens: [t]\n    tokens: [u]\n",
    )
    .unwrap_err();
    assert_eq!(errs.0[0].location, "line 4 column 5", "{errs}");
    assert!(
        errs.0[0]
            .message
            .contains("duplicate entry with key \"tokens\""),
        "{errs}"
    );
    let errs = SpaceConfig::from_yaml("participants: [unclosed\n").unwrap_err();
    assert!(errs.0[0].location.starts_with("line 2 column"), "{errs}");
}

#[test]
fn agent_configuration_yaml_errors_name_their_line() {
    let e = crate::agent::AgentFile::from_yaml("model: m\n  bad: indent\n").unwrap_err();
    assert!(e.to_string().contains("line 2 column"), "{e}");
}

#[test]
fn mcp_server_url_with_headers_from_env_and_file() {
    let y = "space: {id: s}\nparticipants:\n  gh:\n    type: mcp-bridge\n    tokens: [t]\n    mcp_server:\n      url: https://h/mcp\n      headers:\n        X-Tenant: acme\n        Authorization: {env: GH_TOKEN, prefix: \"Bearer \"}\n        X-Api-Key: {file: k.txt}\n";
    let c = SpaceConfig::from_yaml(y).unwrap();
    let s = c.participant("gh").unwrap().mcp_server.clone().unwrap();
    assert_eq!(s.url.as_deref(), Some("https://h/mcp"));
    assert_eq!(s.headers["X-Tenant"], HeaderSource::Value("acme".into()));
    assert_eq!(
        s.headers["Authorization"],
        HeaderSource::Env {
            var: "GH_TOKEN".into(),
            prefix: "Bearer ".into()
        }
    );
    assert_eq!(
        s.headers["X-Api-Key"],
        HeaderSource::File {
            path: "k.txt".into(),
            prefix: String::new()
        }
    );
}

#[test]
fn mcp_server_refuses_a_credential_in_the_yaml_and_both_forms() {
    let base = "space: {id: s}\nparticipants:\n  gh:\n    type: mcp-bridge\n    tokens: [t]\n    mcp_server:\n";
    let err = |rest: &str| {
        SpaceConfig::from_yaml(&format!("{base}{rest}"))
            .unwrap_err()
            .to_string()
    };
    let e = err("      url: https://h/mcp\n      headers: {Authorization: \"Bearer abc\"}\n");
    assert!(
        e.contains("mcp_server.headers.Authorization") && e.contains("{env: VAR}"),
        "{e}"
    );
    assert!(!e.contains("abc"), "{e}");
    let e = err("      url: https://h/mcp\n      command: npx\n");
    assert!(e.contains("not both"), "{e}");
    let e = err("      args: [x]\n");
    assert!(e.contains("a command or a url"), "{e}");
    let e = err("      url: ftp://h/mcp\n");
    assert!(e.contains("http:// or https://"), "{e}");
}

#[test]
fn mcp_server_oauth_settings() {
    let base = "space: {id: s}\nparticipants:\n  gh:\n    type: mcp-bridge\n    tokens: [t]\n    mcp_server:\n      url: https://h/mcp\n";
    let oauth = |rest: &str| {
        SpaceConfig::from_yaml(&format!("{base}{rest}")).map(|c| {
            c.participant("gh")
                .unwrap()
                .mcp_server
                .clone()
                .unwrap()
                .oauth
        })
    };
    assert_eq!(oauth("").unwrap(), McpOAuthSettings::default());
    assert!(oauth("").unwrap().enabled);
    assert!(!oauth("      oauth: false\n").unwrap().enabled);
    let o = oauth("      oauth: {client_file: gh-client.json, client_metadata_url: \"https://me.example/client.json\"}\n").unwrap();
    assert_eq!(o.client_file.as_deref(), Some("gh-client.json"));
    assert_eq!(
        o.client_metadata_url.as_deref(),
        Some("https://me.example/client.json")
    );
    let e = oauth("      oauth: {client_secret: hunter2}\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("mcp_server.oauth.client_secret") && e.contains("client_file"),
        "{e}"
    );
    assert!(!e.contains("hunter2"), "{e}");
}
