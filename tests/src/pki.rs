//! A private CA and a server certificate it signed, and an issuer's JWK set, made in the
//! test (rcgen).

use std::path::Path;

/// Writes a private CA (`ca.pem`) and a certificate for `names` it signed (`cert.pem`,
/// `key.pem`) into `dir`. A name that parses as an IP address is an IP address SAN.
pub fn make(dir: &Path, names: &[&str]) {
    let ca_key = rcgen::KeyPair::generate().expect("a CA key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "mew test CA");
    let ca_cert = ca.self_signed(&ca_key).expect("the CA certificate");
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).expect("write ca.pem");
    let key = rcgen::KeyPair::generate().expect("a server key");
    let names = names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    let leaf = rcgen::CertificateParams::new(names).expect("certificate parameters");
    let cert = leaf
        .signed_by(&key, &ca_cert, &ca_key)
        .expect("the server certificate");
    std::fs::write(dir.join("cert.pem"), cert.pem()).expect("write cert.pem");
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).expect("write key.pem");
}

/// Writes a JWK set with one ES256 (P-256) key, `kid` `k1`, to `path`: the key, to sign JWTs
/// with.
pub fn es256_jwks(path: &Path) -> rcgen::KeyPair {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("a P-256 key");
    let point = key.public_key_raw();
    let jwks = serde_json::json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1",
        "alg": "ES256", "x": b64(&point[1..33]), "y": b64(&point[33..65])}]});
    std::fs::write(path, jwks.to_string()).expect("write the JWK set");
    key
}
