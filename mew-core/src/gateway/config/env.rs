//! What a space's configuration takes from its surroundings: the participants' tokens
//! (environment, token files, generated) and `${NAME}` in what started participants run.

use super::SpaceConfig;

/// A token [`SpaceConfig::resolve_tokens`] generated; the driver stores it in
/// `.mew/tokens/<participant>.token` (mode 0600).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedToken {
    /// Whose token.
    pub participant: String,
    /// The token.
    pub token: String,
}

/// Length of generated tokens.
pub const TOKEN_LEN: usize = 32;

/// The environment variable the reference reads a participant's token from.
pub fn token_env_var(participant: &str) -> String {
    let mut s = String::from("MEW_TOKEN_");
    s.extend(participant.chars().map(|c| {
        if c == '-' {
            '_'
        } else {
            c.to_ascii_uppercase()
        }
    }));
    s
}

impl SpaceConfig {
    /// Settles every participant's tokens the way the reference accepts them: the
    /// environment variable [`token_env_var`], the token file (`.mew/tokens/<id>.token`, read
    /// by `token_file`) and every literal of `tokens:` all authenticate, in that order (the
    /// first is the one handed to a process the space starts). A participant with none gets
    /// a fresh token from `fresh`, returned so the driver can write that file.
    pub fn resolve_tokens(
        &mut self,
        mut env: impl FnMut(&str) -> Option<String>,
        mut token_file: impl FnMut(&str) -> Option<String>,
        mut fresh: impl FnMut() -> String,
    ) -> Vec<GeneratedToken> {
        let mut generated = Vec::new();
        for p in &mut self.participants {
            let clean = |t: Option<String>| {
                t.map(|t| t.trim().to_owned())
                    .filter(|t: &String| !t.is_empty())
            };
            let mut tokens: Vec<String> = Vec::with_capacity(p.tokens.len() + 2);
            for t in [clean(env(&token_env_var(&p.id))), clean(token_file(&p.id))]
                .into_iter()
                .flatten()
                .chain(std::mem::take(&mut p.tokens))
            {
                if !tokens.contains(&t) {
                    tokens.push(t);
                }
            }
            if tokens.is_empty() {
                let token = fresh();
                tokens.push(token.clone());
                generated.push(GeneratedToken {
                    participant: p.id.clone(),
                    token,
                });
            }
            p.tokens = tokens;
        }
        generated
    }
}

/// Replaces `${NAME}` in `text` with `lookup(NAME)`, as the reference does in the `command`,
/// `args`, `env` and `mcp_server` of started participants. A name `lookup` does not know
/// becomes the empty string and is returned in the second value so the caller can warn;
/// `$` not followed by `{` and an unclosed `${` are kept as they are.
pub fn substitute(
    text: &str,
    mut lookup: impl FnMut(&str) -> Option<String>,
) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut missing = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find('}') {
            Some(end) => {
                let name = &after[..end];
                match lookup(name) {
                    Some(v) => out.push_str(&v),
                    None => missing.push(name.to_owned()),
                }
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    (out, missing)
}
