//! Secrets (tokens) from the operating system's CSPRNG, never from the seeded generator the
//! core uses for ids: an id a participant sees says nothing about any token.

/// Random bytes in a generated token: 192 bits, as in every token the core mints.
pub const TOKEN_BYTES: usize = mew_core::secret::TOKEN_ENTROPY;

use mew_core::secret::{Entropy, TokenSource, token_of};

/// [`TOKEN_BYTES`] fresh bytes from the OS CSPRNG.
///
/// # Panics
/// When the OS has no entropy source at all, which leaves nothing safe to hand out.
fn os_entropy() -> Entropy {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    bytes
}

/// A fresh token: [`TOKEN_BYTES`] bytes from the OS CSPRNG, written as the core writes every
/// token ([`mew_core::secret::token_of`]: base64url, 32 characters, never beginning with
/// `-`).
///
/// # Panics
/// When the OS has no entropy source at all, which leaves nothing safe to hand out.
pub fn token() -> String {
    token_of(&os_entropy())
}

/// The operating system's CSPRNG as the core's token source (invites, the default space).
#[derive(Debug, Default, Clone, Copy)]
pub struct OsTokens;

impl TokenSource for OsTokens {
    fn entropy(&mut self) -> Option<Entropy> {
        Some(os_entropy())
    }
}

/// The token source of a replicated space's node ([`mew_core::cluster::Node`] draws
/// [`TOKEN_BYTES`] for every frame that might mint a token): OS CSPRNG bytes drawn a block
/// at a time, so that a busy space makes one `getrandom` call per 64 such frames rather
/// than one per frame. Bytes handed out are wiped from the block.
pub struct EntropyPool {
    block: Box<[u8; EntropyPool::BLOCK]>,
    at: usize,
}

impl EntropyPool {
    const BLOCK: usize = 64 * TOKEN_BYTES;

    /// An empty pool (it fills at the first draw).
    pub fn new() -> EntropyPool {
        EntropyPool {
            block: Box::new([0; EntropyPool::BLOCK]),
            at: EntropyPool::BLOCK,
        }
    }

    /// [`TOKEN_BYTES`] bytes never handed out before.
    ///
    /// # Panics
    /// When the OS has no entropy source at all, which leaves nothing safe to hand out.
    pub fn draw(&mut self) -> Entropy {
        if self.at + TOKEN_BYTES > EntropyPool::BLOCK {
            getrandom::fill(&mut self.block[..]).expect("the OS random source is available");
            self.at = 0;
        }
        let mut e = [0u8; TOKEN_BYTES];
        let part = &mut self.block[self.at..self.at + TOKEN_BYTES];
        e.copy_from_slice(part);
        part.fill(0);
        self.at += TOKEN_BYTES;
        e
    }

    /// The pool as a [`mew_core::cluster::Node`]'s token source.
    pub fn source() -> Box<dyn TokenSource> {
        Box::new(EntropyPool::new())
    }
}

impl TokenSource for EntropyPool {
    fn entropy(&mut self) -> Option<Entropy> {
        Some(self.draw())
    }
}

impl Default for EntropyPool {
    fn default() -> Self {
        EntropyPool::new()
    }
}

/// Whether an environment variable is one of a participant's connection settings
/// (`MEW_GATEWAY`, `MEW_SPACE`, `MEW_PARTICIPANT_ID`, or a token: `MEW_TOKEN`,
/// `MEW_TOKEN_<ID>`). A process that is not that participant (the MCP server behind a
/// bridge) must not inherit them: the token is a secret, and the rest would make a `mew`
/// program it runs join the space as the same participant.
pub fn is_connection_env(name: &str) -> bool {
    name.starts_with("MEW_TOKEN")
        || matches!(name, "MEW_GATEWAY" | "MEW_SPACE" | "MEW_PARTICIPANT_ID")
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use mew_core::secret::equal;

    #[test]
    fn tokens_are_long_distinct_and_url_safe() {
        let a = token();
        let b = token();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&a)
            .unwrap();
        assert_eq!(raw.len(), TOKEN_BYTES);
        assert!(equal(a.as_bytes(), a.clone().as_bytes()));
        assert!(!equal(a.as_bytes(), b.as_bytes()));
        assert!(!equal(b"ab", b"abc"));
    }

    #[test]
    fn pooled_entropy_is_never_handed_out_twice() {
        let mut pool = EntropyPool::new();
        let draws: std::collections::HashSet<Entropy> = (0..200).map(|_| pool.draw()).collect();
        // 200 draws cross four blocks; 192-bit draws do not repeat.
        assert_eq!(draws.len(), 200);
        assert!(
            pool.block[..pool.at].iter().all(|b| *b == 0),
            "handed out bytes are wiped"
        );
    }

    #[test]
    fn no_token_begins_with_a_dash() {
        // One draw in 64 would: 4,000 draws would hold about 60.
        assert!((0..4_000).all(|_| !token().starts_with('-')));
    }
}
