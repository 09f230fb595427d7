//! JWT identities over real sockets: tokens signed here (ES256, RS256, EdDSA) against a
//! JWK set in a file or served over HTTP on loopback; the gateway's verdicts as a client
//! sees them.

use crate::e2e;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use e2e::drivers::{AsyncStd, Tokio};
use e2e::{Driver, RawClient, RunningGateway};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mew_core::gateway::SpaceConfig;
use mew_driver_common::server::ServerOptions;
use mew_driver_common::server::jwt::JwtVerifier;
use mew_tests::scratch::Scratch;
use serde_json::{Value, json};

const ISSUER: &str = "https://idp.test";
const AUDIENCE: &str = "mew-e2e";
/// A 2048-bit RSA key made for these tests only.
const RSA_KEY: &str = include_str!("../../fixtures/jwt-rsa-test-key.pem");
const RSA_N: &str = "tGGn7AkQg_AhNQdcOYHjU9a-0DP_W0vlZAT4CWfAWV6WX08-fzmlH9wxwGuSm--luWYaJqA-sNHzcuzi9JYsvi-O9QskGVFrkH3VpbFpAHRP-qGMNKjZXVpQBlJGm7a-C2ewiWbhBkAfE6KmceEzhA7AY5bHx3T9x2DR-K8jRa2T5MjLsvb-dH7TCNa-ZnAr1dKdAucm72Zz-g9UYq1Ve4ngGP7VJfOGzLfdUkMW9uLeB0CDd99Kexg7niI5ULdmQZjqYgsgma2oqk0_wvPBXrn5aVlW92BmGdn6Q7ZarqbklIIye2KnoleM6CWyp8rNKsgRRg3OT_ZZH1Yb4fX6yQ";

/// The identity provider's keys: one of each accepted kind, and the JWK set of them.
struct Idp {
    ec: EncodingKey,
    ed: EncodingKey,
    rsa: EncodingKey,
    jwks: Value,
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

impl Idp {
    fn new() -> Idp {
        let ec = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let ed = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        // An uncompressed P-256 point: 0x04, x, y.
        let point = ec.public_key_raw();
        let jwks = json!({"keys": [
            {"kty": "EC", "crv": "P-256", "kid": "ec-1", "use": "sig", "alg": "ES256",
             "x": b64(&point[1..33]), "y": b64(&point[33..65])},
            {"kty": "OKP", "crv": "Ed25519", "kid": "ed-1", "use": "sig", "alg": "EdDSA",
             "x": b64(ed.public_key_raw())},
            {"kty": "RSA", "kid": "rsa-1", "use": "sig", "alg": "RS256", "n": RSA_N, "e": "AQAB"},
        ]});
        Idp {
            ec: EncodingKey::from_ec_pem(ec.serialize_pem().as_bytes()).unwrap(),
            ed: EncodingKey::from_ed_pem(ed.serialize_pem().as_bytes()).unwrap(),
            rsa: EncodingKey::from_rsa_pem(RSA_KEY.as_bytes()).unwrap(),
            jwks,
        }
    }

    fn sign(&self, alg: Algorithm, claims: &Value) -> String {
        let (key, kid) = match alg {
            Algorithm::ES256 => (&self.ec, "ec-1"),
            Algorithm::EdDSA => (&self.ed, "ed-1"),
            _ => (&self.rsa, "rsa-1"),
        };
        let mut header = Header::new(alg);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(&header, claims, key).unwrap()
    }

    /// A valid ES256 token for `sub` that expires in `secs` seconds.
    fn token(&self, sub: &str, secs: i64) -> String {
        self.sign(Algorithm::ES256, &claims(sub, secs))
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn claims(sub: &str, secs: i64) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": unix_now(),
           "exp": unix_now() + secs})
}

fn jwt_space(dir: &Path, idp: &Idp, source: &str, allow_unknown: bool) -> SpaceConfig {
    std::fs::write(dir.join("jwks.json"), idp.jwks.to_string()).unwrap();
    SpaceConfig::from_yaml(&format!(
        r#"
space: {{id: e2e}}
logging: {{enabled: false}}
defaults: {{capabilities: [{{kind: chat}}]}}
gateway:
  auth:
    jwt: {{issuer: "{ISSUER}", audience: {AUDIENCE}, {source}, allow_unknown_subjects: {allow_unknown}}}
participants:
  human: {{tokens: [human-token], capabilities: [{{kind: "*"}}]}}
  robot-1: {{capabilities: [{{kind: chat}}, {{kind: mcp/proposal}}]}}
"#
    ))
    .unwrap()
}

fn start<D: Driver>(dir: &Path, config: SpaceConfig) -> RunningGateway {
    let (verifier, warning) = JwtVerifier::new(config.gateway.jwt.as_ref().unwrap(), dir).unwrap();
    assert_eq!(warning, None);
    let opts = ServerOptions {
        log_dir: dir.join(".mew/logs"),
        identity: Some(Arc::new(verifier)),
        ..Default::default()
    };
    D::start_with(config, "127.0.0.1:0".parse().unwrap(), opts)
}

/// Connects with a bearer header; the welcome, or the error and the close reason.
async fn bearer(gw: &RunningGateway, token: &str) -> Result<Value, (Value, String)> {
    let mut c = RawClient::open(&gw.ws_url("e2e"), Some(token)).await;
    outcome(&mut c).await
}

async fn outcome(c: &mut RawClient) -> Result<Value, (Value, String)> {
    let first = c.next().await;
    if first["kind"] == "system/welcome" {
        return Ok(first);
    }
    assert_eq!(first["kind"], "system/error", "{first}");
    let close = c.expect_close().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1008);
    Err((first, close.reason.to_string()))
}

fn refusal(r: Result<Value, (Value, String)>) -> (String, String) {
    let (e, reason) = r.expect_err("refused");
    (e["payload"]["error"].as_str().unwrap().to_owned(), reason)
}

async fn jwt_identities<D: Driver>(name: &str) {
    let dir = Scratch::new("e2e", name);
    let idp = Idp::new();
    let gw = start::<D>(&dir, jwt_space(&dir, &idp, "jwks_file: jwks.json", false));

    // A valid token of each algorithm authenticates its subject, with the entry's
    // capabilities.
    for alg in [Algorithm::ES256, Algorithm::RS256, Algorithm::EdDSA] {
        let w = bearer(&gw, &idp.sign(alg, &claims("robot-1", 60)))
            .await
            .unwrap_or_else(|e| panic!("{alg:?}: {e:?}"));
        assert_eq!(w["payload"]["you"]["id"], "robot-1", "{alg:?}");
        let caps = w["payload"]["you"]["capabilities"].to_string();
        assert!(caps.contains("mcp/proposal"), "{caps}");
    }
    // Listed tokens keep working beside JWTs.
    assert!(bearer(&gw, "human-token").await.is_ok());

    // Expired.
    let (code, reason) = refusal(bearer(&gw, &idp.token("robot-1", -5)).await);
    assert_eq!(code, "token_expired");
    assert!(reason.contains("expired"), "{reason}");

    // Not valid yet: `nbf` an hour ahead, or issued an hour in the future (`iat`). A
    // past `nbf` is fine.
    for claim in ["nbf", "iat"] {
        let mut c = claims("robot-1", 7_200);
        c[claim] = json!(unix_now() + 3_600);
        let (code, reason) = refusal(bearer(&gw, &idp.sign(Algorithm::ES256, &c)).await);
        assert_eq!(code, "invalid_token", "{claim}");
        assert!(reason.contains("not valid yet"), "{claim}: {reason}");
    }
    let mut c = claims("robot-1", 60);
    c["nbf"] = json!(unix_now() - 1);
    assert!(bearer(&gw, &idp.sign(Algorithm::ES256, &c)).await.is_ok());
    let mut c = claims("robot-1", 60);
    c["nbf"] = json!("soon");
    let (code, reason) = refusal(bearer(&gw, &idp.sign(Algorithm::ES256, &c)).await);
    assert_eq!(code, "invalid_token");
    assert!(reason.contains("nbf"), "{reason}");

    // Another audience, another issuer.
    let mut c = claims("robot-1", 60);
    c["aud"] = json!("another-space");
    let (code, reason) = refusal(bearer(&gw, &idp.sign(Algorithm::ES256, &c)).await);
    assert_eq!(code, "invalid_token");
    assert!(reason.contains("audience"), "{reason}");
    let mut c = claims("robot-1", 60);
    c["iss"] = json!("https://evil.test");
    let (code, reason) = refusal(bearer(&gw, &idp.sign(Algorithm::ES256, &c)).await);
    assert_eq!(
        (code.as_str(), reason.contains("issuer")),
        ("invalid_token", true)
    );

    // Signed by a key that is not the provider's (under the provider's key id).
    let stranger = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let forged = jsonwebtoken::encode(
        &Header {
            kid: Some("ec-1".into()),
            ..Header::new(Algorithm::ES256)
        },
        &claims("robot-1", 60),
        &EncodingKey::from_ec_pem(stranger.serialize_pem().as_bytes()).unwrap(),
    )
    .unwrap();
    let (code, reason) = refusal(bearer(&gw, &forged).await);
    assert_eq!(code, "invalid_token");
    assert!(reason.contains("signature"), "{reason}");
    // A token with a payload edited after signing.
    let valid = idp.token("robot-1", 60);
    let parts: Vec<&str> = valid.split('.').collect();
    let edited = format!(
        "{}.{}.{}",
        parts[0],
        b64(claims("human", 60).to_string().as_bytes()),
        parts[2]
    );
    assert_eq!(refusal(bearer(&gw, &edited).await).0, "invalid_token");

    // A token for robot-1 never joins as anyone else: the join message names `human`.
    let mut c = RawClient::open(&gw.ws_url("e2e"), None).await;
    c.send_text(
        json!({"type": "join", "participantId": "human", "space": "e2e",
               "token": idp.token("robot-1", 60)})
        .to_string(),
    )
    .await;
    let (code, reason) = refusal(outcome(&mut c).await);
    assert_eq!(code, "identity_mismatch");
    assert!(reason.contains("robot-1"), "{reason}");
    // The same join naming robot-1 (as a system/join envelope) is welcome.
    let mut c = RawClient::open(&gw.ws_url("e2e"), None).await;
    c.send_text(
        json!({"protocol": "mew/v0.4", "id": "j1", "kind": "system/join",
               "payload": {"participantId": "robot-1", "token": idp.token("robot-1", 60)}})
        .to_string(),
    )
    .await;
    assert_eq!(
        outcome(&mut c).await.unwrap()["payload"]["you"]["id"],
        "robot-1"
    );

    // A subject the space does not list, where unknown subjects are not allowed.
    let (code, _) = refusal(bearer(&gw, &idp.token("robot-2", 60)).await);
    assert_eq!(code, "unknown_subject");
    // HMAC tokens are never accepted.
    let hs = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims("robot-1", 60),
        &EncodingKey::from_secret(b"shared"),
    )
    .unwrap();
    assert_eq!(refusal(bearer(&gw, &hs).await).0, "invalid_token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_identities_on_tokio() {
    jwt_identities::<Tokio>("jwt-tokio").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_identities_on_async_std() {
    jwt_identities::<AsyncStd>("jwt-async-std").await;
}

/// At `exp` the connection is closed with a clear reason, while others stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_closed_when_its_token_expires() {
    let dir = Scratch::new("e2e", "jwt-exp");
    let idp = Idp::new();
    let gw = start::<Tokio>(&dir, jwt_space(&dir, &idp, "jwks_file: jwks.json", false));
    let mut robot = RawClient::open(&gw.ws_url("e2e"), Some(&idp.token("robot-1", 2))).await;
    let w = robot.expect_kind("system/welcome").await;
    assert_eq!(w["payload"]["you"]["id"], "robot-1");
    let (mut human, _) = RawClient::join(&gw, "human-token").await;
    let started = std::time::Instant::now();
    let err = robot.expect_kind("system/error").await;
    assert_eq!(err["payload"]["error"], "token_expired", "{err}");
    let close = robot.expect_close().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1008);
    assert_eq!(close.reason.as_str(), "token expired");
    assert!(started.elapsed() <= Duration::from_secs(3));
    // The others go on.
    let id = human.send("chat", &[], json!({"text": "still here"})).await;
    human.expect_id(&id).await;
}

/// A tiny HTTP server on loopback that serves a JWK set and counts requests.
fn serve_jwks(jwks: Value) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let body = jwks.to_string();
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: max-age=300\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, hits)
}

/// Keys fetched from `jwks_url`; an unknown subject joins with `defaults` where allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_from_a_url_and_unknown_subjects_with_defaults() {
    let dir = Scratch::new("e2e", "jwt-url");
    let idp = Idp::new();
    let (addr, hits) = serve_jwks(idp.jwks.clone());
    let config = jwt_space(
        &dir,
        &idp,
        &format!("jwks_url: \"http://{addr}/jwks.json\""),
        true,
    );
    let gw = start::<Tokio>(&dir, config);
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    let w = bearer(&gw, &idp.token("visitor-7", 60)).await.unwrap();
    assert_eq!(w["payload"]["you"]["id"], "visitor-7");
    assert_eq!(
        w["payload"]["you"]["capabilities"],
        json!([{"kind": "chat"}])
    );
    let w = bearer(&gw, &idp.sign(Algorithm::RS256, &claims("robot-1", 60)))
        .await
        .unwrap();
    assert_eq!(w["payload"]["you"]["id"], "robot-1");
}

/// The participant runtime reads its token file before every connection: when the
/// gateway closes the connection at the token's expiry, it comes back with the fresh token
/// whatever renews the file wrote there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_reconnects_with_a_fresh_token_from_its_file() {
    use mew_core::participant::{Event, ParticipantConfig, ReconnectPolicy};
    use mew_driver_common::client::token_file::TokenFile;
    let dir = Scratch::new("e2e", "jwt-token-file");
    let idp = Idp::new();
    let gw = start::<Tokio>(&dir, jwt_space(&dir, &idp, "jwks_file: jwks.json", false));
    let file = dir.join("robot.token");
    std::fs::write(&file, format!("{}\n", idp.token("robot-1", 2))).unwrap();
    let config = ParticipantConfig {
        gateway_url: gw.ws_url("e2e"),
        space: "e2e".into(),
        token: String::new(),
        reconnect: ReconnectPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(200),
            ..ReconnectPolicy::default()
        },
        ..ParticipantConfig::default()
    };
    let (rt, mut events) = mew_tokio::ParticipantRuntime::start_with_token_file(
        config,
        Some(3),
        Some(TokenFile(file.clone())),
    );
    async fn next(events: &mut tokio::sync::mpsc::Receiver<Event>) -> Event {
        tokio::time::timeout(Duration::from_secs(5), events.recv())
            .await
            .expect("an event in time")
            .expect("the runtime runs")
    }
    let mut reasons = Vec::new();
    loop {
        match next(&mut events).await {
            Event::Ready { id, .. } => {
                assert_eq!(id, "robot-1");
                break;
            }
            Event::Disconnected { reason } => reasons.push(reason),
            _ => {}
        }
    }
    // Renewed before it expires.
    std::fs::write(&file, idp.token("robot-1", 60)).unwrap();
    let mut disconnected = None;
    loop {
        match next(&mut events).await {
            Event::Disconnected { reason } => disconnected = Some(reason),
            Event::Ready {
                reconnected: true, ..
            } => break,
            _ => {}
        }
    }
    let reason = disconnected.expect("closed at the expiry");
    assert!(reason.contains("token expired"), "{reason}");
    let (mut human, _) = RawClient::join(&gw, "human-token").await;
    let sent = rt
        .chat("back with a fresh token", vec![])
        .await
        .unwrap()
        .unwrap();
    human.expect_id(&sent).await;
}

/// A durable gateway over the state folder `dir/.mew/state` (what `mew gateway --config`
/// runs for a `space.yaml`), with the JWT verifier of `config`.
async fn start_durable(dir: &Path, config: SpaceConfig) -> RunningGateway {
    let (verifier, _) = JwtVerifier::new(config.gateway.jwt.as_ref().unwrap(), dir).unwrap();
    let verifier: Arc<dyn mew_core::gateway::IdentityVerifier> = Arc::new(verifier);
    let opts = ServerOptions {
        log_dir: dir.join(".mew/logs"),
        identity: Some(verifier.clone()),
        // The test's clients are left open: the stop does not wait for them.
        shutdown_grace: std::time::Duration::from_millis(50),
        ..Default::default()
    };
    let restored = mew_driver_common::state::durable::open(
        &dir.join(".mew/state"),
        config.clone(),
        mew_core::gateway::Fsync::Always,
        Some(verifier),
    )
    .unwrap();
    let server = mew_tokio::GatewayServer::bind_with("127.0.0.1:0".parse().unwrap(), config, opts)
        .await
        .unwrap();
    let addr = server.local_addr();
    let shutdown = server.shutdown_handle();
    let task = tokio::spawn(server.serve_durable(restored));
    RunningGateway::new(
        addr,
        Box::new(move || {
            shutdown.shutdown();
            // The state flushed and closed before the next start reads it.
            let _ =
                tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(task));
        }),
    )
}

/// A space that keeps its state on disk (the default for a `space.yaml`) takes JWTs too, in
/// the `Authorization` header and in a join message: each is checked where the connection
/// arrives and its verdict, not the token, goes into the log, which a restart replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_identities_on_a_durable_space() {
    let dir = Scratch::new("e2e", "jwt-durable");
    let idp = Idp::new();
    let config = jwt_space(&dir, &idp, "jwks_file: jwks.json", false);
    let robot = idp.token("robot-1", 60);
    for round in 0..2 {
        let mut gw = start_durable(&dir, config.clone()).await;
        let w = bearer(&gw, &robot)
            .await
            .unwrap_or_else(|e| panic!("round {round}: a JWT on a durable space: {e:?}"));
        assert_eq!(w["payload"]["you"]["id"], "robot-1");
        let caps = w["payload"]["you"]["capabilities"].to_string();
        assert!(caps.contains("mcp/proposal"), "{caps}");
        // In a join message.
        let mut c = RawClient::open(&gw.ws_url("e2e"), None).await;
        c.send_text(
            json!({"type": "join", "participantId": "robot-1", "space": "e2e", "token": robot})
                .to_string(),
        )
        .await;
        let w = outcome(&mut c).await.expect("a JWT in a join message");
        assert_eq!(w["payload"]["you"]["id"], "robot-1");
        let mut c = RawClient::open(&gw.ws_url("e2e"), None).await;
        c.send_text(
            json!({"type": "join", "participantId": "human", "space": "e2e", "token": robot})
                .to_string(),
        )
        .await;
        assert_eq!(refusal(outcome(&mut c).await).0, "identity_mismatch");
        let (code, _) = refusal(bearer(&gw, &idp.token("robot-1", -5)).await);
        assert_eq!(code, "token_expired");
        // Judged where it arrives, `nbf` goes into the log with the subject.
        let mut early = claims("robot-1", 7_200);
        early["nbf"] = json!(unix_now() + 3_600);
        let (code, reason) = refusal(bearer(&gw, &idp.sign(Algorithm::ES256, &early)).await);
        assert_eq!(code, "invalid_token");
        assert!(reason.contains("not valid yet"), "{reason}");
        let mut forged = robot.clone();
        forged.truncate(forged.len() - 4);
        forged.push_str("AAAA");
        assert_eq!(refusal(bearer(&gw, &forged).await).0, "invalid_token");
        // Listed tokens keep working beside JWTs.
        assert!(bearer(&gw, "human-token").await.is_ok());
        gw.stop();
        let log = std::fs::read(dir.join(".mew/state/log")).unwrap();
        let signature = robot.rsplit('.').next().unwrap();
        assert!(
            !log.windows(signature.len())
                .any(|w| w == signature.as_bytes()),
            "no token in the log"
        );
        assert!(
            log.windows(7).any(|w| w == b"robot-1"),
            "the verdicts are in the log"
        );
    }
}
