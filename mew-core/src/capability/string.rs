//! String patterns: plain, glob, `/regex/` and their `!` negations.
//!
//! Classification of a pattern string `s`:
//! - `!P` (with `P` non-empty) is the negation of the positive pattern `P`; `"!"` alone and a
//!   double negation `"!!P"` are refused.
//! - `/re/` (length > 2) is an unanchored regular expression for the linear-time `regex`
//!   engine (`!/re/` negates it).
//! - a string containing `*`, `?` or `{` is a glob.
//! - anything else is compared for equality.

use super::glob::{Glob, REGEX_SIZE_LIMIT};
use super::text::{bytes_eq, one_line};
use regex::Regex;

/// The positive part of a string pattern.
#[derive(Debug)]
pub(crate) enum Positive {
    Exact(Box<str>),
    Glob(Glob),
    Regex { re: Regex, src: Box<str> },
}

impl Positive {
    #[inline]
    pub(crate) fn matches(&self, s: &str) -> bool {
        match self {
            Positive::Exact(e) => bytes_eq(e.as_bytes(), s.as_bytes()),
            Positive::Glob(g) => g.matches(s),
            Positive::Regex { re, .. } => re.is_match(s),
        }
    }

    /// Whether this pattern matches every string.
    pub(crate) fn is_any(&self) -> bool {
        matches!(self, Positive::Glob(g) if g.is_any())
    }

    fn compile(s: &str) -> Result<Positive, String> {
        if s.len() > 2 && s.starts_with('/') && s.ends_with('/') {
            let body = &s[1..s.len() - 1];
            let re = regex::RegexBuilder::new(body)
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| format!("invalid regex {s:?}: {}", one_line(&e.to_string())))?;
            Ok(Positive::Regex { re, src: s.into() })
        } else if s.contains(['*', '?', '{']) {
            Ok(Positive::Glob(
                Glob::compile(s).map_err(|e| format!("{e} (in {s:?})"))?,
            ))
        } else {
            Ok(Positive::Exact(s.into()))
        }
    }
}

/// A compiled string pattern.
#[derive(Debug)]
pub(crate) struct StrPat {
    pub(crate) negated: bool,
    pub(crate) positive: Positive,
}

impl StrPat {
    /// Compiles one string pattern.
    pub(crate) fn compile(s: &str) -> Result<StrPat, String> {
        match s.strip_prefix('!') {
            Some("") => Err("`!` alone is not a pattern".into()),
            Some(rest) if rest.starts_with('!') => {
                Err(format!("double negation {s:?} is not a pattern"))
            }
            Some(rest) => Ok(StrPat {
                negated: true,
                positive: Positive::compile(rest)?,
            }),
            None => Ok(StrPat {
                negated: false,
                positive: Positive::compile(s)?,
            }),
        }
    }

    /// Whether the (present) string matches.
    #[inline]
    pub(crate) fn matches(&self, s: &str) -> bool {
        self.positive.matches(s) != self.negated
    }

    /// The literal string this pattern matches exactly, if it is a plain positive pattern.
    pub(crate) fn literal(&self) -> Option<&str> {
        match (&self.positive, self.negated) {
            (Positive::Exact(e), false) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        StrPat::compile(p).unwrap().matches(s)
    }

    #[test]
    fn kinds_of_string_pattern() {
        assert!(m("chat", "chat"));
        assert!(!m("chat", "chats"));
        assert!(m("a}b", "a}b"));
        assert!(m("!tools/*", "resources/list"));
        assert!(!m("!tools/*", "tools/list"));
        assert!(m("!/^rm /", "ls"));
        assert!(!m("!/^rm /", "rm -rf"));
        assert!(m("/SELECT/", "xx SELECT yy"));
        assert!(!m("/^SELECT .* FROM public\\./", "DELETE FROM users"));
        assert!(m("/public/**", "/public/docs/a.md"));
        assert!(m("/", "/"));
        assert!(m("//", "//"));
        assert!(!m("//", "x"));
    }

    #[test]
    fn refused() {
        assert!(StrPat::compile("!").unwrap_err().contains("alone"));
        assert!(StrPat::compile("!!x").is_err());
        assert!(StrPat::compile("/(/").unwrap_err().contains("regex"));
        assert!(
            StrPat::compile("read_{a")
                .unwrap_err()
                .contains("unbalanced")
        );
    }
}
