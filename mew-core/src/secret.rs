//! Secrets: where tokens come from, and how they are compared.
//!
//! The core has no randomness of its own, so tokens come from a [`TokenSource`] the driver
//! injects: the operating system's CSPRNG in servers, a seeded [`IdGen`] in simulations (and
//! by default, which is why servers must replace it). Ids are never drawn from the token
//! source, so the ids a participant sees say nothing about any token.

use crate::ids::IdGen;

/// Where fresh tokens come from.
pub trait TokenSource: Send {
    /// A fresh token: at least 128 bits of entropy from a real source, URL-safe characters.
    fn token(&mut self) -> String;
}

/// Length of a token drawn from an [`IdGen`] (57-character alphabet: about 140 bits).
pub const SEEDED_TOKEN_LEN: usize = 24;

/// Deterministic tokens, for simulations and tests only.
impl TokenSource for IdGen {
    fn token(&mut self) -> String {
        IdGen::token(self, SEEDED_TOKEN_LEN)
    }
}

/// The SHA-256 digest of a token: what the gateway keeps and compares instead of the token,
/// and what a replicated space's log carries (a reader of the log learns no token).
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// The digest of `token`.
    pub fn of(token: &str) -> TokenHash {
        use sha2::Digest;
        TokenHash(sha2::Sha256::digest(token.as_bytes()).into())
    }

    /// Lower-case hex, 64 characters.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// Parses [`TokenHash::to_hex`]'s form.
    pub fn from_hex(s: &str) -> Option<TokenHash> {
        unhex(s).map(TokenHash)
    }
}

/// Bytes as lower-case hex: how digests and entropy are written in logs and snapshots.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Parses [`hex`]'s form (either case) into exactly `N` bytes.
pub fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.len() != N * 2 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        *o = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

impl std::fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenHash({}…)", &self.to_hex()[..8])
    }
}

/// Compares two secrets in time that depends only on their lengths, so how long a refusal
/// takes says nothing about how close a guess was.
pub fn equal(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equality() {
        assert!(equal(b"abc", b"abc"));
        assert!(!equal(b"abc", b"abd"));
        assert!(!equal(b"abc", b"ab"));
        assert!(equal(b"", b""));
    }

    #[test]
    fn token_hashes_round_trip_through_hex() {
        let h = TokenHash::of("abc");
        // The SHA-256 test vector of "abc".
        assert_eq!(
            h.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(TokenHash::from_hex(&h.to_hex()), Some(h));
        assert_eq!(TokenHash::from_hex("zz"), None);
        assert_eq!(hex(&[0, 0xab, 0x0f]), "00ab0f");
        assert_eq!(unhex::<3>("00AB0f"), Some([0, 0xab, 0x0f]));
        assert_eq!(unhex::<3>("00ab0"), None);
        assert_eq!(unhex::<2>("0g00"), None);
    }
}
