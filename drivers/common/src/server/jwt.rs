//! JWT identities (`gateway.auth.jwt`): the [`IdentityVerifier`] the core asks about bearer
//! tokens it does not list. Signatures, issuer and audience are checked by `jsonwebtoken`
//! against a JWK set from a file or a URL; what a verified subject may do is the core's
//! rule (see `mew_core::gateway::Identity`).
//!
//! Accepted algorithms: ES256, RS256 and EdDSA (Ed25519), never HMAC (a shared secret is
//! not an identity provider's key). A key set from a URL is fetched at start, refreshed
//! every [`REFRESH`] (or the `max-age` its server gives, within [`MIN_REFRESH`] and one
//! day), and fetched again when a token names a key it does not hold (at most every
//! [`MIN_REFRESH`]); the last good set stays in use while the URL fails.

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use mew_core::Time;
use mew_core::gateway::{Identity, IdentityVerifier, JwtConfig, Verdict};
use serde_json::Value;

/// How often a key set from a URL is fetched again, unless its server says otherwise.
pub const REFRESH: Duration = Duration::from_secs(600);
/// Fetches of a key set's URL are at least this far apart.
pub const MIN_REFRESH: Duration = Duration::from_secs(30);
/// Keys kept from one set at most.
pub const MAX_KEYS: usize = 64;
/// Bytes of a key set at most.
pub const MAX_JWKS_BYTES: u64 = 1024 * 1024;

/// One usable key.
struct Key {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

/// Keys of one JWK set.
#[derive(Default)]
struct Keys(Vec<Key>);

impl Keys {
    /// The usable keys of a JWK set's JSON text; keys of other kinds are skipped.
    fn parse(text: &str) -> Result<Keys, String> {
        let set: JwkSet = serde_json::from_str(text)
            .map_err(|e| format!("not a JWK set ({{\"keys\": [...]}}): {e}"))?;
        let mut keys = Vec::new();
        for jwk in set.keys.iter().take(MAX_KEYS) {
            let alg = match &jwk.algorithm {
                AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => {
                    Algorithm::ES256
                }
                AlgorithmParameters::RSA(_) => Algorithm::RS256,
                AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
                    Algorithm::EdDSA
                }
                _ => continue,
            };
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            keys.push(Key {
                kid: jwk.common.key_id.clone(),
                alg,
                key,
            });
        }
        if keys.is_empty() {
            return Err("the JWK set holds no ES256 (P-256), RS256 or Ed25519 key".into());
        }
        Ok(Keys(keys))
    }
}

/// Checks JWTs against one identity provider's keys.
pub struct JwtVerifier {
    issuer: String,
    audience: String,
    keys: Arc<RwLock<Keys>>,
    /// Asks the URL fetcher (if any) for a fresh set: a token named a key not held.
    refetch: Option<std::sync::mpsc::SyncSender<()>>,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish()
    }
}

/// Whether `token` has the shape of a compact JWS (three base64url parts).
fn looks_like_jwt(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    parts.len() == 3
        && parts[..2].iter().all(|p| !p.is_empty())
        && parts.iter().all(|p| {
            p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

fn describe(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind as K;
    match e.kind() {
        K::InvalidSignature => {
            "the token's signature does not verify with the identity provider's keys".into()
        }
        K::InvalidIssuer => "the token was issued by another issuer (iss)".into(),
        K::InvalidAudience => "the token is for another audience (aud)".into(),
        K::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        K::ExpiredSignature => "the token has expired".into(),
        K::MissingRequiredClaim(c) => format!("the token has no `{c}` claim"),
        K::InvalidAlgorithm => "the token's algorithm does not match its key".into(),
        _ => format!("the token is not a valid JWT: {e}"),
    }
}

impl JwtVerifier {
    /// A verifier for `config`, whose `jwks_file` is relative to `base` (the folder of
    /// `space.yaml`). A URL's first fetch happens here; when it fails the verifier still
    /// starts (refusing tokens until a fetch succeeds) and the error is returned beside it
    /// to be logged.
    pub fn new(config: &JwtConfig, base: &Path) -> Result<(JwtVerifier, Option<String>), String> {
        let keys = Arc::new(RwLock::new(Keys::default()));
        let mut warning = None;
        let mut refetch = None;
        if let Some(file) = &config.jwks_file {
            let path = base.join(file);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let set = Keys::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            *keys.write().unwrap_or_else(|e| e.into_inner()) = set;
        } else if let Some(url) = &config.jwks_url {
            if let Err(e) = fetch_into(url, &keys) {
                warning = Some(format!("{url}: {e} (tokens are refused until it answers)"));
            }
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            refetch = Some(tx);
            let (url, keys) = (url.clone(), keys.clone());
            std::thread::Builder::new()
                .name("mew-jwks".into())
                .spawn(move || refresh_loop(&url, &keys, &rx))
                .map_err(|e| format!("cannot start the key set refresher: {e}"))?;
        }
        Ok((
            JwtVerifier {
                issuer: config.issuer.clone(),
                audience: config.audience.clone(),
                keys,
                refetch,
            },
            warning,
        ))
    }
}

/// Fetches a key set; the `max-age` of the answer, if any.
fn fetch_into(url: &str, keys: &RwLock<Keys>) -> Result<Option<Duration>, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut resp = agent.get(url).call().map_err(|e| e.to_string())?;
    let max_age = resp
        .headers()
        .get("cache-control")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.split(',')
                .filter_map(|d| d.trim().strip_prefix("max-age="))
                .find_map(|n| n.parse::<u64>().ok())
        })
        .map(Duration::from_secs);
    let text = resp
        .body_mut()
        .with_config()
        .limit(MAX_JWKS_BYTES)
        .read_to_string()
        .map_err(|e| e.to_string())?;
    let set = Keys::parse(&text)?;
    *keys.write().unwrap_or_else(|e| e.into_inner()) = set;
    Ok(max_age)
}

fn refresh_loop(url: &str, keys: &RwLock<Keys>, nudges: &std::sync::mpsc::Receiver<()>) {
    use std::sync::mpsc::RecvTimeoutError;
    let mut next = std::time::Instant::now() + REFRESH;
    let mut last = std::time::Instant::now();
    loop {
        let wait = next.saturating_duration_since(std::time::Instant::now());
        match nudges.recv_timeout(wait) {
            Err(RecvTimeoutError::Disconnected) => return,
            // A token named an unknown key: fetch now, unless the last fetch is too recent.
            Ok(()) if last.elapsed() < MIN_REFRESH => continue,
            Ok(()) | Err(RecvTimeoutError::Timeout) => {}
        }
        last = std::time::Instant::now();
        let after = match fetch_into(url, keys) {
            Ok(age) => age
                .unwrap_or(REFRESH)
                .clamp(MIN_REFRESH, Duration::from_secs(86_400)),
            Err(e) => {
                tracing::warn!("JWK set {url} not refreshed (the last one stays): {e}");
                MIN_REFRESH
            }
        };
        next = last + after;
    }
}

impl IdentityVerifier for JwtVerifier {
    fn verify(&self, token: &str) -> Verdict {
        if !looks_like_jwt(token) {
            return Verdict::NotMine;
        }
        let header = match jsonwebtoken::decode_header(token) {
            Ok(h) => h,
            Err(_) => return Verdict::NotMine,
        };
        if !matches!(
            header.alg,
            Algorithm::ES256 | Algorithm::RS256 | Algorithm::EdDSA
        ) {
            return Verdict::Invalid(format!(
                "tokens signed with {:?} are not accepted (ES256, RS256 or EdDSA)",
                header.alg
            ));
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "sub", "iss", "aud"]);
        // The core closes connections at `exp` by its own clock; it also refuses tokens
        // past it, or not valid yet (`nbf`, `iat`), so that rule is kept in one place.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.leeway = 0;
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        let candidates: Vec<&Key> = keys
            .0
            .iter()
            .filter(|k| k.alg == header.alg)
            .filter(|k| header.kid.is_none() || k.kid == header.kid)
            .collect();
        if candidates.is_empty() {
            if let Some(tx) = &self.refetch {
                let _ = tx.try_send(());
            }
            return Verdict::Invalid(match &header.kid {
                Some(kid) => format!("the identity provider has no {:?} key `{kid}`", header.alg),
                None => format!("the identity provider has no {:?} key", header.alg),
            });
        }
        let mut last = None;
        for k in candidates {
            match jsonwebtoken::decode::<serde_json::Value>(token, &k.key, &validation) {
                Ok(data) => {
                    let claims = data.claims;
                    let (Some(sub), Some(exp)) = (claims["sub"].as_str(), claims["exp"].as_u64())
                    else {
                        return Verdict::Invalid(
                            "the token's `sub` must be a string and its `exp` a number of seconds"
                                .into(),
                        );
                    };
                    // `nbf` and `iat` are judged by the core, beside `exp`, with its clock.
                    let mut not_before = None;
                    for claim in ["nbf", "iat"] {
                        match &claims[claim] {
                            Value::Null => {}
                            v => {
                                let Some(secs) = v.as_u64() else {
                                    return Verdict::Invalid(format!(
                                        "the token's `{claim}` must be a number of seconds"
                                    ));
                                };
                                let t = Time::from_unix_millis(secs.saturating_mul(1000));
                                not_before = not_before.max(Some(t));
                            }
                        }
                    }
                    return Verdict::Valid(Identity {
                        subject: sub.to_owned(),
                        expires_at: Some(Time::from_unix_millis(exp.saturating_mul(1000))),
                        not_before,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Verdict::Invalid(last.map_or_else(|| "the token does not verify".into(), |e| describe(&e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_compact_jws_shapes_are_taken() {
        assert!(looks_like_jwt("eyJh.eyJz.c2ln"));
        assert!(!looks_like_jwt("plain-token"));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("a.b.c d"));
    }

    #[test]
    fn a_set_without_usable_keys_is_refused() {
        let Err(e) = Keys::parse(r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#) else {
            panic!("an HMAC key is not an identity provider's key");
        };
        assert!(e.contains("no ES256"), "{e}");
        assert!(Keys::parse("[]").is_err());
    }
}
