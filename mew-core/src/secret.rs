//! Secrets: where tokens come from, and how they are compared.
//!
//! The core has no randomness of its own, so invitation tokens come from a [`TokenSource`]
//! the driver gives the gateway when it builds it: the operating system's CSPRNG in
//! servers, a seeded [`IdGen`] in simulations, and for a replica of a space kept in a log
//! [`LogEntropy`] (none: its tokens come from the entropy the log carries with each entry,
//! which the node that published the entry drew from its own source). Every token is
//! [`TOKEN_ENTROPY`] random bytes written by [`token_of`], whichever the source. Ids are
//! never drawn from the token source, so the ids a participant sees say nothing about any
//! token.

use crate::ids::IdGen;

/// Random bytes in every invitation token: 192 bits.
pub const TOKEN_ENTROPY: usize = 24;

/// Randomness for one token.
pub type Entropy = [u8; TOKEN_ENTROPY];

/// Where fresh token randomness comes from.
pub trait TokenSource: Send {
    /// [`TOKEN_ENTROPY`] fresh random bytes (from a real source outside simulations);
    /// `None` when this source has none ([`LogEntropy`]).
    fn entropy(&mut self) -> Option<Entropy>;

    /// A fresh token ([`token_of`] the next entropy); `None` as [`TokenSource::entropy`].
    fn token(&mut self) -> Option<String> {
        self.entropy().map(|e| token_of(&e))
    }
}

/// Deterministic randomness, for simulations and tests only.
impl TokenSource for IdGen {
    fn entropy(&mut self) -> Option<Entropy> {
        let mut e = [0u8; TOKEN_ENTROPY];
        for chunk in e.chunks_mut(8) {
            chunk.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        Some(e)
    }
}

/// The token source of a replica of a space kept in a log: none of its own. Its tokens
/// come only from the entropy the log carries with an entry
/// ([`crate::gateway::Input::Entropy`]), so that every replica mints the same; an input
/// that carries none and would mint a token is refused.
#[derive(Debug, Default, Clone, Copy)]
pub struct LogEntropy;

impl TokenSource for LogEntropy {
    fn entropy(&mut self) -> Option<Entropy> {
        None
    }
}

/// The token `entropy` makes: base64url without padding, 32 characters, never beginning
/// with `-` (a token pasted into a command line would be taken for an option: a first
/// character that would be `-` is written `_`, which costs 0.02 bits).
pub fn token_of(entropy: &Entropy) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(TOKEN_ENTROPY / 3 * 4);
    for group in entropy.chunks_exact(3) {
        let n = u32::from(group[0]) << 16 | u32::from(group[1]) << 8 | u32::from(group[2]);
        for shift in [18, 12, 6, 0] {
            out.push(ALPHABET[(n >> shift & 63) as usize] as char);
        }
    }
    if out.starts_with('-') {
        out.replace_range(..1, "_");
    }
    out
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
    fn tokens_are_base64url_of_their_192_bits() {
        // RFC 4648's alphabet: bytes 0xfb 0xff 0xbf encode to "-_-_".
        let mut e = [0u8; TOKEN_ENTROPY];
        assert_eq!(token_of(&e), "A".repeat(32));
        e[..6].copy_from_slice(&[0x00, 0x10, 0x83, 0xfb, 0xff, 0xbf]);
        assert_eq!(&token_of(&e)[..8], "ABCD-_-_");
        // Never a leading '-'.
        e[0] = 0xf8;
        let t = token_of(&e);
        assert_eq!((t.len(), &t[..1]), (32, "_"));
        let mut g = IdGen::new(7);
        let a = token_of(&g.entropy().unwrap());
        let b = token_of(&g.entropy().unwrap());
        assert_ne!(a, b);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        assert_eq!(LogEntropy.entropy(), None);
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
