//! Identifier generation from an injected seed.
//!
//! The core draws no randomness of its own: a driver seeds [`IdGen`] (from the OS, say) and a
//! simulation seeds it with a fixed number, so every id a run produces is reproducible.

use std::fmt::Write as _;

/// A small deterministic generator (SplitMix64) for ids, jitter and tokens.
#[derive(Debug, Clone)]
pub struct IdGen {
    state: u64,
}

impl IdGen {
    /// A generator whose whole output is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        IdGen { state: seed }
    }

    /// The generator's whole state (a snapshot keeps it; [`IdGen::new`] restores it).
    pub fn state(&self) -> u64 {
        self.state
    }

    /// The next 64 pseudo-random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value uniformly spread over `0..bound` (`bound` > 0); used for jitter.
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "IdGen::below needs a positive bound");
        // Lemire's multiply-shift; the bias is negligible for jitter and ids.
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// A UUID version 4 string (`xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx`).
    pub fn uuid_v4(&mut self) -> String {
        let hi = (self.next_u64() & 0xFFFF_FFFF_FFFF_0FFF) | 0x0000_0000_0000_4000;
        let lo = (self.next_u64() & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000;
        let mut s = String::with_capacity(36);
        let _ = write!(
            s,
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            hi >> 32,
            (hi >> 16) & 0xFFFF,
            hi & 0xFFFF,
            lo >> 48,
            lo & 0xFFFF_FFFF_FFFF
        );
        s
    }

    /// A token of `len` characters from an unambiguous URL-safe alphabet.
    pub fn token(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
        (0..len)
            .map(|_| ALPHABET[self.below(ALPHABET.len() as u64) as usize] as char)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_ids() {
        let mut a = IdGen::new(7);
        let mut b = IdGen::new(7);
        assert_eq!(a.uuid_v4(), b.uuid_v4());
        assert_ne!(a.uuid_v4(), IdGen::new(8).uuid_v4());
    }

    #[test]
    fn uuid_has_version_and_variant() {
        let mut g = IdGen::new(1);
        for _ in 0..100 {
            let u = g.uuid_v4();
            assert_eq!(u.len(), 36);
            assert_eq!(&u[14..15], "4");
            assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"), "{u}");
        }
    }

    #[test]
    fn below_stays_below() {
        let mut g = IdGen::new(3);
        assert!((0..1000).all(|_| g.below(10) < 10));
        assert_eq!(g.token(24).len(), 24);
    }
}
