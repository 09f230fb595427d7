//! Secrets (tokens) from the operating system's CSPRNG, never from the seeded generator the
//! core uses for ids: an id a participant sees says nothing about any token.

/// Random bytes in a generated token: 192 bits.
pub const TOKEN_BYTES: usize = 24;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// A fresh token: [`TOKEN_BYTES`] bytes from the OS CSPRNG, base64url (32 characters),
/// never beginning with `-` (one draw in 64 would, and be taken for an option by every
/// command line it is pasted into: such a draw is thrown away, which costs 0.02 bits).
///
/// # Panics
/// When the OS has no entropy source at all, which leaves nothing safe to hand out.
pub fn token() -> String {
    loop {
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut bytes).expect("the OS random source is available");
        let out = URL_SAFE_NO_PAD.encode(bytes);
        if !out.starts_with('-') {
            return out;
        }
    }
}

/// The operating system's CSPRNG as the core's token source (invites, the default space).
#[derive(Debug, Default, Clone, Copy)]
pub struct OsTokens;

impl mew_core::secret::TokenSource for OsTokens {
    fn token(&mut self) -> String {
        token()
    }
}

/// Entropy for a replicated space's records ([`mew_core::cluster::Node`] draws 16 bytes for
/// every frame that might create a token): OS CSPRNG bytes drawn a block at a time, so that
/// a busy space makes one `getrandom` call per 64 frames rather than one per frame. Bytes
/// handed out are wiped from the block.
pub struct EntropyPool {
    block: Box<[u8; EntropyPool::BLOCK]>,
    at: usize,
}

impl EntropyPool {
    const BLOCK: usize = 1024;

    /// An empty pool (it fills at the first draw).
    pub fn new() -> EntropyPool {
        EntropyPool {
            block: Box::new([0; EntropyPool::BLOCK]),
            at: EntropyPool::BLOCK,
        }
    }

    /// 16 bytes never handed out before.
    ///
    /// # Panics
    /// When the OS has no entropy source at all, which leaves nothing safe to hand out.
    pub fn draw(&mut self) -> [u8; 16] {
        if self.at + 16 > EntropyPool::BLOCK {
            getrandom::fill(&mut self.block[..]).expect("the OS random source is available");
            self.at = 0;
        }
        let mut e = [0u8; 16];
        let part = &mut self.block[self.at..self.at + 16];
        e.copy_from_slice(part);
        part.fill(0);
        self.at += 16;
        e
    }

    /// The pool as a [`mew_core::cluster::Node`]'s entropy source.
    pub fn source() -> Box<dyn FnMut() -> [u8; 16] + Send> {
        let mut pool = EntropyPool::new();
        Box::new(move || pool.draw())
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
        let raw = URL_SAFE_NO_PAD.decode(&a).unwrap();
        assert_eq!(raw.len(), TOKEN_BYTES);
        assert!(equal(a.as_bytes(), a.clone().as_bytes()));
        assert!(!equal(a.as_bytes(), b.as_bytes()));
        assert!(!equal(b"ab", b"abc"));
    }

    #[test]
    fn pooled_entropy_is_never_handed_out_twice() {
        let mut pool = EntropyPool::new();
        let draws: std::collections::HashSet<[u8; 16]> = (0..200).map(|_| pool.draw()).collect();
        // 200 draws cross three blocks; 128-bit draws do not repeat.
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
