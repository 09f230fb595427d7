//! PKCE (RFC 7636) with S256: the verifier stays with the bridge, its SHA-256 goes in the
//! authorization URL.

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// `BASE64URL(SHA256(verifier))`, unpadded.
pub fn s256(verifier: &str) -> String {
    let digest = Sha256::digest(verifier.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
}

/// Whether `verifier` has the form RFC 7636 §4.1 asks for: 43 to 128 unreserved
/// characters.
pub fn valid_verifier(verifier: &str) -> bool {
    (43..=128).contains(&verifier.len())
        && verifier
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7636 appendix B.
    #[test]
    fn rfc_7636_example() {
        let v = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        assert!(valid_verifier(v));
        assert_eq!(s256(v), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
        assert!(!valid_verifier("short"));
        assert!(!valid_verifier(&"a+".repeat(30)));
    }
}
