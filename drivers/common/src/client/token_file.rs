//! A participant's token from a file read before every connection (`MEW_TOKEN_FILE`): an
//! identity provider's tokens expire, and whatever renews them (a sidecar, a cron job, a
//! login command) writes the fresh one there.

use std::path::PathBuf;

use mew_core::participant::{Participant, authorization};

/// The environment variable naming the token file.
pub const TOKEN_FILE_ENV: &str = "MEW_TOKEN_FILE";
/// Bytes of a token file at most (a JWT with many claims is a few KiB).
pub const MAX_TOKEN_FILE: u64 = 64 * 1024;

/// A file holding the participant's current token (surrounding whitespace ignored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFile(pub PathBuf);

impl TokenFile {
    /// The file `MEW_TOKEN_FILE` names, if set.
    pub fn from_env() -> Option<TokenFile> {
        std::env::var_os(TOKEN_FILE_ENV)
            .filter(|v| !v.is_empty())
            .map(|v| TokenFile(PathBuf::from(v)))
    }

    /// The token in the file now.
    pub fn read(&self) -> Result<String, String> {
        use std::io::Read;
        let file = std::fs::File::open(&self.0)
            .map_err(|e| format!("cannot read the token file {}: {e}", self.0.display()))?;
        let mut text = String::new();
        file.take(MAX_TOKEN_FILE)
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read the token file {}: {e}", self.0.display()))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(format!("the token file {} is empty", self.0.display()));
        }
        Ok(token.to_owned())
    }

    /// Before a connection is opened: reads the file, gives the core its token and puts it
    /// on the opening request's headers. A file that cannot be read keeps the last token
    /// (and says so in the log).
    pub fn refresh(&self, p: &mut Participant, headers: &mut [(String, String)]) {
        let token = match self.read() {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("{e}; connecting with the previous token");
                return;
            }
        };
        let (name, value) = authorization(&token);
        for h in headers.iter_mut() {
            if h.0.eq_ignore_ascii_case(&name) {
                h.1 = value.clone();
            }
        }
        p.set_token(token);
    }
}
