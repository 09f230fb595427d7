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
}
