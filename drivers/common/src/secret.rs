//! Secrets (tokens) from the operating system's CSPRNG, never from the seeded generator the
//! core uses for ids: an id a participant sees says nothing about any token.

/// Random bytes in a generated token: 192 bits.
pub const TOKEN_BYTES: usize = 24;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

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
        let mut out = String::with_capacity(TOKEN_BYTES / 3 * 4);
        for c in bytes.chunks_exact(3) {
            let n = (u32::from(c[0]) << 16) | (u32::from(c[1]) << 8) | u32::from(c[2]);
            for shift in [18, 12, 6, 0] {
                out.push(ALPHABET[((n >> shift) & 63) as usize] as char);
            }
        }
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
        assert!(a.bytes().all(|c| ALPHABET.contains(&c)));
        assert!(equal(a.as_bytes(), a.clone().as_bytes()));
        assert!(!equal(a.as_bytes(), b.as_bytes()));
        assert!(!equal(b"ab", b"abc"));
    }

    #[test]
    fn no_token_begins_with_a_dash() {
        // One draw in 64 would: 4,000 draws would hold about 60.
        assert!((0..4_000).all(|_| !token().starts_with('-')));
    }
}
