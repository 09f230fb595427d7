use super::*;
use crate::ids::IdGen;
use serde_json::json;

const SERVER: &str = "http://rs.test:1/mcp";
const AS: &str = "http://as.test:2";
const PRM_URL: &str = "http://rs.test:1/.well-known/oauth-protected-resource/mcp";

fn t(ms: u64) -> Time {
    Time::from_unix_millis(ms)
}

fn config() -> OAuthConfig {
    OAuthConfig {
        server_url: SERVER.into(),
        redirect_uri: "http://gw.test:3/oauth/callback".into(),
        state_prefix: "files.".into(),
        ..OAuthConfig::default()
    }
}

fn machine(config: OAuthConfig) -> OAuth {
    OAuth::new(config, None, Box::new(IdGen::new(7)))
}

fn ok(body: Value) -> FetchResponse {
    FetchResponse {
        status: 200,
        content_type: Some("application/json".into()),
        body: body.to_string().into_bytes(),
    }
}

fn not_found() -> FetchResponse {
    FetchResponse {
        status: 404,
        content_type: Some("text/html".into()),
        body: b"<h1>Not Found</h1>".to_vec(),
    }
}

fn prm(scopes: Option<Vec<&str>>) -> Value {
    let mut v = json!({"resource": SERVER, "authorization_servers": [AS]});
    if let Some(s) = scopes {
        v["scopes_supported"] = json!(s);
    }
    v
}

fn as_meta() -> Value {
    json!({
        "issuer": AS,
        "authorization_endpoint": format!("{AS}/authorize"),
        "token_endpoint": format!("{AS}/token"),
        "registration_endpoint": format!("{AS}/register"),
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "authorization_response_iss_parameter_supported": true
    })
}

fn next_fetch(o: &mut OAuth) -> Fetch {
    loop {
        match o.poll_output() {
            Some(OAuthOutput::Fetch(f)) => return f,
            Some(_) => {}
            None => panic!("no fetch queued"),
        }
    }
}

fn outputs(o: &mut OAuth) -> Vec<OAuthOutput> {
    std::iter::from_fn(|| o.poll_output()).collect()
}

fn query(url: &str) -> Vec<(String, String)> {
    url::parse_form(url.split_once('?').map_or("", |(_, q)| q))
}

fn param(pairs: &[(String, String)], k: &str) -> Option<String> {
    pairs.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone())
}

/// Drives a fresh machine from a 401 to the sign-in URL, with `meta` as the server's
/// metadata; returns the URL.
fn to_sign_in(o: &mut OAuth, challenge: &str, prm_doc: Value, meta: Value) -> String {
    assert_eq!(o.handle_refusal(t(0), 401, Some(challenge)), Refusal::Retry);
    assert_eq!(o.gate(), Gate::Hold);
    let f = next_fetch(o);
    assert_eq!(f.url, PRM_URL);
    o.handle_fetch(t(0), f.id, ok(prm_doc));
    let f = next_fetch(o);
    assert_eq!(
        f.url,
        format!("{AS}/.well-known/oauth-authorization-server")
    );
    let registers = meta.get("registration_endpoint").is_some()
        && meta.get("client_id_metadata_document_supported").is_none();
    o.handle_fetch(t(0), f.id, ok(meta));
    if registers && matches!(o.config.client, ClientChoice::Automatic) {
        let f = next_fetch(o);
        assert!(f.post);
        assert_eq!(f.url, format!("{AS}/register"));
        let body: Value = serde_json::from_str(f.body.as_deref().unwrap()).unwrap();
        assert_eq!(
            body["redirect_uris"],
            json!(["http://gw.test:3/oauth/callback"])
        );
        assert_eq!(
            body["grant_types"],
            json!(["authorization_code", "refresh_token"])
        );
        assert_eq!(body["token_endpoint_auth_method"], "none");
        assert_eq!(body["application_type"], "web");
        o.handle_fetch(
            t(0),
            f.id,
            ok(json!({"client_id": "dyn-client", "redirect_uris": []})),
        );
    }
    let out = outputs(o);
    let Some(OAuthOutput::SignIn { url, host }) = out.last().cloned() else {
        panic!("expected a sign-in, got {out:?}")
    };
    assert_eq!(host, "as.test");
    assert_eq!(o.sign_in().map(|(u, _)| u.to_owned()), Some(url.clone()));
    url
}

fn callback(url: &str, iss: Option<&str>) -> Callback {
    let q = query(url);
    Callback {
        state: param(&q, "state"),
        code: Some("the-code".into()),
        iss: iss.map(str::to_owned),
        ..Callback::default()
    }
}

fn token_ok(extra: Value) -> FetchResponse {
    let mut v = json!({"access_token": "at-1", "token_type": "Bearer", "expires_in": 3600});
    if let Value::Object(m) = extra {
        for (k, x) in m {
            v[k] = x;
        }
    }
    ok(v)
}

#[test]
fn full_flow_with_registration_pkce_resource_and_iss() {
    let mut o = machine(config());
    let url = to_sign_in(
        &mut o,
        &format!(r#"Bearer resource_metadata="{PRM_URL}", scope="mcp:basic""#),
        prm(Some(vec!["mcp:other"])),
        as_meta(),
    );
    assert!(url.starts_with(&format!("{AS}/authorize?")));
    let q = query(&url);
    assert_eq!(param(&q, "response_type").as_deref(), Some("code"));
    assert_eq!(param(&q, "client_id").as_deref(), Some("dyn-client"));
    assert_eq!(
        param(&q, "redirect_uri").as_deref(),
        Some("http://gw.test:3/oauth/callback")
    );
    assert_eq!(param(&q, "code_challenge_method").as_deref(), Some("S256"));
    assert_eq!(param(&q, "resource").as_deref(), Some(SERVER));
    // The challenge's scope wins over scopes_supported.
    assert_eq!(param(&q, "scope").as_deref(), Some("mcp:basic"));
    let state = param(&q, "state").unwrap();
    assert!(
        state.starts_with("files.") && state.len() == "files.".len() + 32,
        "{state}"
    );
    assert!(matches!(o.gate(), Gate::SignInNeeded { .. }));

    // A state that does not match changes nothing.
    let mut forged = callback(&url, Some(AS));
    forged.state = Some("files.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into());
    let e = o.handle_callback(t(0), &forged).unwrap_err();
    assert!(e.contains("state does not match"), "{e}");
    assert!(outputs(&mut o).is_empty());
    assert!(o.sign_in().is_some());

    o.handle_callback(t(1000), &callback(&url, Some(AS)))
        .unwrap();
    let f = next_fetch(&mut o);
    assert_eq!(f.url, format!("{AS}/token"));
    let body = url::parse_form(f.body.as_deref().unwrap());
    assert_eq!(
        param(&body, "grant_type").as_deref(),
        Some("authorization_code")
    );
    assert_eq!(param(&body, "code").as_deref(), Some("the-code"));
    assert_eq!(param(&body, "resource").as_deref(), Some(SERVER));
    assert_eq!(param(&body, "client_id").as_deref(), Some("dyn-client"));
    let verifier = param(&body, "code_verifier").unwrap();
    assert!(pkce::valid_verifier(&verifier));
    assert_eq!(pkce::s256(&verifier), param(&q, "code_challenge").unwrap());
    assert!(!format!("{f:?}").contains(&verifier));

    // Single use: the same answer again is refused.
    assert!(o.handle_callback(t(0), &callback(&url, Some(AS))).is_err());

    o.handle_fetch(t(2000), f.id, token_ok(json!({"refresh_token": "rt-1"})));
    let out = outputs(&mut o);
    let Some(OAuthOutput::Save(s)) = out.first() else {
        panic!("{out:?}")
    };
    assert_eq!(s.access_token, "at-1");
    assert_eq!(s.expires_at_ms, Some(2000 + 3_600_000));
    assert!(s.registered);
    assert!(!format!("{s:?}").contains("at-1"));
    assert_eq!(out.last(), Some(&OAuthOutput::Authorized));
    assert_eq!(o.gate(), Gate::Send(Some("Bearer at-1".into())));
    // Refreshed a minute before expiry.
    assert_eq!(o.poll_timeout(), Some(t(2000 + 3_600_000 - 60_000)));
}

#[test]
fn discovery_falls_back_to_root_prm_and_openid_with_path() {
    let mut o = machine(config());
    assert_eq!(o.handle_refusal(t(0), 401, Some("Bearer")), Refusal::Retry);
    let f = next_fetch(&mut o);
    assert_eq!(f.url, PRM_URL);
    o.handle_fetch(t(0), f.id, not_found());
    let f = next_fetch(&mut o);
    assert_eq!(
        f.url,
        "http://rs.test:1/.well-known/oauth-protected-resource"
    );
    let doc =
        json!({"resource": "http://rs.test:1", "authorization_servers": [format!("{AS}/tenant1")]});
    o.handle_fetch(t(0), f.id, ok(doc));
    let f = next_fetch(&mut o);
    assert_eq!(
        f.url,
        format!("{AS}/.well-known/oauth-authorization-server/tenant1")
    );
    o.handle_fetch(t(0), f.id, not_found());
    let f = next_fetch(&mut o);
    assert_eq!(
        f.url,
        format!("{AS}/.well-known/openid-configuration/tenant1")
    );
    o.handle_fetch(t(0), f.id, not_found());
    let f = next_fetch(&mut o);
    assert_eq!(
        f.url,
        format!("{AS}/tenant1/.well-known/openid-configuration")
    );
    o.handle_fetch(t(0), f.id, not_found());
    let out = outputs(&mut o);
    let Some(OAuthOutput::Failed(why)) = out.last() else {
        panic!("{out:?}")
    };
    assert!(
        why.starts_with("no authorization server metadata for http://as.test:2/tenant1"),
        "{why}"
    );
    assert_eq!(o.gate(), Gate::Send(None));
}

#[test]
fn iss_checks() {
    let mut meta = as_meta();
    // (advertised, iss sent, accepted)
    let cases: [(Option<bool>, Option<&str>, bool); 6] = [
        (Some(true), Some(AS), true),
        (Some(true), None, false),
        (Some(true), Some("https://evil.example.com"), false),
        (Some(true), Some("http://as.test:2/"), false),
        (None, None, true),
        (None, Some("https://evil.example.com"), false),
    ];
    for (advertised, iss, accepted) in cases {
        match advertised {
            Some(b) => meta["authorization_response_iss_parameter_supported"] = json!(b),
            None => {
                meta.as_object_mut()
                    .unwrap()
                    .remove("authorization_response_iss_parameter_supported");
            }
        }
        let mut o = machine(config());
        let url = to_sign_in(&mut o, "Bearer", prm(None), meta.clone());
        o.handle_callback(t(0), &callback(&url, iss)).unwrap();
        let out = outputs(&mut o);
        let exchanged = out.iter().any(|x| matches!(x, OAuthOutput::Fetch(_)));
        assert_eq!(exchanged, accepted, "{advertised:?} {iss:?}: {out:?}");
        if !accepted {
            let Some(OAuthOutput::Failed(why)) = out.last() else {
                panic!("{out:?}")
            };
            assert!(why.contains("iss") || why.contains("issuer"), "{why}");
            assert!(why.ends_with("nothing was exchanged"), "{why}");
        }
    }
}

#[test]
fn metadata_issuer_mismatch_and_resource_mismatch_stop_the_flow() {
    let mut o = machine(config());
    o.handle_refusal(t(0), 401, Some("Bearer"));
    let f = next_fetch(&mut o);
    o.handle_fetch(t(0), f.id, ok(prm(None)));
    let f = next_fetch(&mut o);
    let mut meta = as_meta();
    meta["issuer"] = json!("https://attacker.example.com");
    o.handle_fetch(t(0), f.id, ok(meta));
    let out = outputs(&mut o);
    assert_eq!(
        out,
        vec![OAuthOutput::Failed(
            "the authorization server metadata states issuer \"https://attacker.example.com\", not \"http://as.test:2\"".into()
        )]
    );

    let mut o = machine(config());
    o.handle_refusal(t(0), 401, Some("Bearer"));
    let f = next_fetch(&mut o);
    let mut doc = prm(None);
    doc["resource"] = json!("https://evil.example.com/mcp");
    o.handle_fetch(t(0), f.id, ok(doc));
    let out = outputs(&mut o);
    assert_eq!(out.len(), 1, "no further fetch: {out:?}");
    assert!(matches!(&out[0], OAuthOutput::Failed(w) if w.contains("evil.example.com")));
}

#[test]
fn scope_selection() {
    // scopes_supported when the challenge has none; offline_access added when listed.
    let mut o = machine(config());
    let mut meta = as_meta();
    meta["scopes_supported"] = json!(["mcp:basic", "offline_access"]);
    let url = to_sign_in(&mut o, "Bearer", prm(Some(vec!["mcp:basic"])), meta);
    assert_eq!(
        param(&query(&url), "scope").as_deref(),
        Some("mcp:basic offline_access")
    );
    // Nothing known: no scope at all.
    let mut o = machine(config());
    let url = to_sign_in(&mut o, "Bearer", prm(None), as_meta());
    assert_eq!(param(&query(&url), "scope"), None);
}

#[test]
fn step_up_asks_for_the_union_and_stops_after_the_limit() {
    let mut o = machine(config());
    let url = to_sign_in(&mut o, r#"Bearer scope="mcp:basic""#, prm(None), as_meta());
    o.handle_callback(t(0), &callback(&url, Some(AS))).unwrap();
    let f = next_fetch(&mut o);
    o.handle_fetch(t(0), f.id, token_ok(json!({})));
    outputs(&mut o);
    o.handle_success();
    let step = r#"Bearer scope="mcp:write", error="insufficient_scope""#;
    // A 403 without insufficient_scope is no business of ours.
    assert!(matches!(
        o.handle_refusal(t(0), 403, Some("Bearer")),
        Refusal::GiveUp(_)
    ));
    for attempt in 1..=2 {
        assert_eq!(
            o.handle_refusal(t(0), 403, Some(step)),
            Refusal::Retry,
            "{attempt}"
        );
        let f = next_fetch(&mut o);
        o.handle_fetch(t(0), f.id, ok(prm(None)));
        let f = next_fetch(&mut o);
        o.handle_fetch(t(0), f.id, ok(as_meta()));
        let out = outputs(&mut o);
        let Some(OAuthOutput::SignIn { url, .. }) = out.last() else {
            panic!("{out:?}")
        };
        assert_eq!(
            param(&query(url), "scope").as_deref(),
            Some("mcp:basic mcp:write")
        );
        // The client registered before is reused with the same server.
        assert_eq!(
            param(&query(url), "client_id").as_deref(),
            Some("dyn-client")
        );
        let url = url.clone();
        o.handle_callback(t(0), &callback(&url, Some(AS))).unwrap();
        let f = next_fetch(&mut o);
        o.handle_fetch(t(0), f.id, token_ok(json!({})));
        outputs(&mut o);
    }
    let Refusal::GiveUp(why) = o.handle_refusal(t(0), 403, Some(step)) else {
        panic!()
    };
    assert!(why.contains("after 2 sign-ins"), "{why}");
}

#[test]
fn client_identities() {
    // A client ID metadata document when the server takes them.
    let mut cfg = config();
    cfg.client_metadata_url = Some("https://conformance-test.local/client-metadata.json".into());
    let mut o = machine(cfg.clone());
    let mut meta = as_meta();
    meta["client_id_metadata_document_supported"] = json!(true);
    let url = to_sign_in(&mut o, "Bearer", prm(None), meta);
    assert_eq!(
        param(&query(&url), "client_id").as_deref(),
        Some("https://conformance-test.local/client-metadata.json")
    );

    // Pre-registered with a secret: client_secret_basic, or post when only that is taken.
    for (methods, basic) in [
        (json!(["client_secret_basic"]), true),
        (json!(["client_secret_post"]), false),
    ] {
        let mut cfg = config();
        cfg.client = ClientChoice::Registered {
            client_id: "pre id".into(),
            client_secret: Some("s:cret".into()),
        };
        let mut o = machine(cfg);
        let mut meta = as_meta();
        meta["token_endpoint_auth_methods_supported"] = methods;
        let url = to_sign_in(&mut o, "Bearer", prm(None), meta);
        assert_eq!(param(&query(&url), "client_id").as_deref(), Some("pre id"));
        o.handle_callback(t(0), &callback(&url, Some(AS))).unwrap();
        let f = next_fetch(&mut o);
        let body = url::parse_form(f.body.as_deref().unwrap());
        let auth = f
            .headers
            .iter()
            .find(|(k, _)| k == "Authorization")
            .map(|(_, v)| v.clone());
        if basic {
            // base64("pre%20id:s%3Acret")
            assert_eq!(auth.as_deref(), Some("Basic cHJlJTIwaWQ6cyUzQWNyZXQ="));
            assert_eq!(param(&body, "client_secret"), None);
        } else {
            assert_eq!(auth, None);
            assert_eq!(param(&body, "client_id").as_deref(), Some("pre id"));
            assert_eq!(param(&body, "client_secret").as_deref(), Some("s:cret"));
        }
    }

    // Neither registration nor documents: one line saying what to configure.
    let mut o = machine(config());
    o.handle_refusal(t(0), 401, Some("Bearer"));
    let f = next_fetch(&mut o);
    o.handle_fetch(t(0), f.id, ok(prm(None)));
    let f = next_fetch(&mut o);
    let mut meta = as_meta();
    meta.as_object_mut()
        .unwrap()
        .remove("registration_endpoint");
    o.handle_fetch(t(0), f.id, ok(meta));
    let out = outputs(&mut o);
    assert!(
        matches!(out.last(), Some(OAuthOutput::Failed(w)) if w.ends_with("configure a client id"))
    );
}

#[test]
fn token_endpoint_html_is_one_line_and_nothing_is_kept() {
    let mut o = machine(config());
    let url = to_sign_in(&mut o, "Bearer", prm(None), as_meta());
    o.handle_callback(t(0), &callback(&url, Some(AS))).unwrap();
    let f = next_fetch(&mut o);
    let html = FetchResponse {
        status: 200,
        content_type: Some("text/html; charset=utf-8".into()),
        body: b"<!doctype html><html><body>Sign in</body></html>".to_vec(),
    };
    o.handle_fetch(t(0), f.id, html);
    assert_eq!(
        outputs(&mut o),
        vec![OAuthOutput::Failed(
            "the token endpoint answered 200 with text/html instead of JSON".into()
        )]
    );
    assert!(o.stored().is_none());
    assert_eq!(o.gate(), Gate::Send(None));
}

#[test]
fn refresh_before_expiry_and_on_401() {
    let stored = Stored {
        resource: SERVER.into(),
        issuer: AS.into(),
        token_endpoint: format!("{AS}/token"),
        client_id: "c".into(),
        client_secret: None,
        auth_method: "none".into(),
        registered: false,
        access_token: "old".into(),
        refresh_token: Some("rt".into()),
        expires_at_ms: Some(100_000),
        scope: None,
    };
    let mut o = OAuth::new(config(), Some(stored.clone()), Box::new(IdGen::new(1)));
    assert_eq!(o.gate(), Gate::Send(Some("Bearer old".into())));
    assert_eq!(o.poll_timeout(), Some(t(40_000)));
    o.handle_timeout(t(39_999));
    assert!(outputs(&mut o).is_empty());
    o.handle_timeout(t(40_000));
    let f = next_fetch(&mut o);
    let body = url::parse_form(f.body.as_deref().unwrap());
    assert_eq!(param(&body, "grant_type").as_deref(), Some("refresh_token"));
    assert_eq!(param(&body, "refresh_token").as_deref(), Some("rt"));
    assert_eq!(param(&body, "resource").as_deref(), Some(SERVER));
    // Requests keep going with the old token meanwhile.
    assert_eq!(o.gate(), Gate::Send(Some("Bearer old".into())));
    o.handle_fetch(t(41_000), f.id, token_ok(json!({})));
    let out = outputs(&mut o);
    let Some(OAuthOutput::Save(s)) = out.first() else {
        panic!("{out:?}")
    };
    assert_eq!(s.access_token, "at-1");
    assert_eq!(
        s.refresh_token.as_deref(),
        Some("rt"),
        "kept when none is issued"
    );

    // A 401 with a refresh token: refreshed first, without a person.
    let mut o = OAuth::new(config(), Some(stored.clone()), Box::new(IdGen::new(1)));
    assert_eq!(o.handle_refusal(t(0), 401, Some("Bearer")), Refusal::Retry);
    let f = next_fetch(&mut o);
    assert!(
        f.body
            .as_deref()
            .unwrap()
            .contains("grant_type=refresh_token")
    );
    assert_eq!(o.gate(), Gate::Hold);

    // Kept state for another server is not used.
    let mut other = stored;
    other.resource = "http://elsewhere.test/mcp".into();
    let o = OAuth::new(config(), Some(other), Box::new(IdGen::new(1)));
    assert_eq!(o.gate(), Gate::Send(None));
}

#[test]
fn callback_parameters_round_trip() {
    let c = Callback::from_query("code=a%2Bb&state=files.x&iss=http%3A%2F%2Fas.test%3A2&other=1");
    assert_eq!(c.code.as_deref(), Some("a+b"));
    assert_eq!(c.iss.as_deref(), Some(AS));
    assert_eq!(Callback::from_json(&c.to_json()), c);
    assert!(!format!("{c:?}").contains("a+b"));
}
