//! Glob strings: `*` (a run without `/`), `**` (any run), `?` (one char, not `/`),
//! `{a,b}` (alternatives, nestable). Matching is whole-string.
//!
//! There is no escape character. A run of three or more `*` means the same as `**`.
//! The exact pattern `"*"` matches every string, `/` included (the spec's "all kinds").
//!
//! The shapes seen in practice (`mcp/*`, `read_*`, `*/list`, `/public/**`, `a*b`, and braces
//! over up to 16 such shapes or literals, `mcp/{request,response}`) are matched by hand over
//! bytes; anything else (`?`, several wildcards in one alternative) is compiled once to an
//! anchored expression for the linear-time `regex` engine, which never backtracks.

use super::text::bytes_eq;
use regex::Regex;

/// Deepest brace nesting accepted.
pub(crate) const MAX_BRACE_DEPTH: usize = 32;

/// Most alternatives a brace expansion may produce when comparing patterns (delegation).
const MAX_EXPANSION: usize = 256;

/// Size ceiling for one compiled expression, bounding memory per pattern.
pub(crate) const REGEX_SIZE_LIMIT: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Lit(String),
    Star,
    DStar,
    Quest,
    Alt(Vec<Vec<Node>>),
}

/// One token of a brace-free glob, used by the inclusion check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tok {
    Char(char),
    Star,
    DStar,
    Quest,
}

#[derive(Debug)]
enum Matcher {
    /// Every string.
    Any,
    /// One string (a brace alternative without wildcards).
    Literal(Box<str>),
    /// A few simple shapes, from braces (`mcp/{request,response}`).
    Alts(Box<[Matcher]>),
    /// `prefix` + one wildcard + `suffix`; `cross` when the wildcard is `**`.
    Affix {
        prefix: Box<str>,
        suffix: Box<str>,
        cross: bool,
    },
    /// Everything else.
    Regex(Regex),
}

impl Matcher {
    #[inline]
    fn matches(&self, s: &str) -> bool {
        match self {
            Matcher::Any => true,
            Matcher::Literal(l) => bytes_eq(l.as_bytes(), s.as_bytes()),
            Matcher::Alts(alts) => alts.iter().any(|m| m.matches(s)),
            Matcher::Affix {
                prefix,
                suffix,
                cross,
            } => {
                let (s, p, x) = (s.as_bytes(), prefix.as_bytes(), suffix.as_bytes());
                s.len() >= p.len() + x.len()
                    && bytes_eq(&s[..p.len()], p)
                    && bytes_eq(&s[s.len() - x.len()..], x)
                    && (*cross || !s[p.len()..s.len() - x.len()].contains(&b'/'))
            }
            Matcher::Regex(re) => re.is_match(s),
        }
    }
}

/// Most brace alternatives matched one by one rather than by an expression.
const MAX_SIMPLE_ALTS: usize = 16;

/// Braces whose alternatives are all literals or one-wildcard shapes.
fn simple_alternatives(ast: &[Node]) -> Option<Matcher> {
    let mut alts = vec![Vec::new()];
    expand_seq(ast, &mut alts)?;
    if alts.len() > MAX_SIMPLE_ALTS {
        return None;
    }
    let shapes = alts
        .iter()
        .map(|toks| {
            let nodes = nodes_of(toks);
            match nodes.as_slice() {
                [] => Some(Matcher::Literal("".into())),
                [Node::Lit(l)] => Some(Matcher::Literal(l.as_str().into())),
                _ => affix(&nodes),
            }
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Matcher::Alts(shapes.into()))
}

fn nodes_of(toks: &[Tok]) -> Vec<Node> {
    let mut out = Vec::new();
    let mut lit = String::new();
    for t in toks {
        match t {
            Tok::Char(c) => lit.push(*c),
            Tok::Star => {
                flush(&mut lit, &mut out);
                out.push(Node::Star);
            }
            Tok::DStar => {
                flush(&mut lit, &mut out);
                out.push(Node::DStar);
            }
            Tok::Quest => {
                flush(&mut lit, &mut out);
                out.push(Node::Quest);
            }
        }
    }
    flush(&mut lit, &mut out);
    out
}

/// A compiled glob.
#[derive(Debug)]
pub(crate) struct Glob {
    src: Box<str>,
    ast: Vec<Node>,
    matcher: Matcher,
}

impl Glob {
    /// Compiles a glob; errors name the problem (unbalanced braces, nesting too deep).
    pub(crate) fn compile(src: &str) -> Result<Glob, String> {
        let mut chars = src.chars().peekable();
        let ast = parse_seq(&mut chars, 0, false)?;
        if chars.next().is_some() {
            return Err(format!("unbalanced braces in glob {src:?}"));
        }
        let matcher = if src == "*" || ast == [Node::DStar] {
            Matcher::Any
        } else if let Some(m) = affix(&ast) {
            m
        } else if let Some(m) = simple_alternatives(&ast) {
            m
        } else {
            let mut re = String::with_capacity(src.len() * 2 + 8);
            re.push_str("(?s)^(?:");
            to_regex(&ast, &mut re);
            re.push_str(")$");
            let compiled = regex::RegexBuilder::new(&re)
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| {
                    format!(
                        "glob {src:?} is too complex: {}",
                        super::text::one_line(&e.to_string())
                    )
                })?;
            Matcher::Regex(compiled)
        };
        Ok(Glob {
            src: src.into(),
            ast,
            matcher,
        })
    }

    /// The glob's text.
    pub(crate) fn src(&self) -> &str {
        &self.src
    }

    /// Whether the glob matches every string.
    pub(crate) fn is_any(&self) -> bool {
        matches!(self.matcher, Matcher::Any)
    }

    /// Whole-string match; never allocates.
    #[inline]
    pub(crate) fn matches(&self, s: &str) -> bool {
        self.matcher.matches(s)
    }

    /// The brace-free alternatives this glob stands for, or `None` when there are more than
    /// the expansion limit. The whole-pattern `*` expands to `[DStar]`.
    pub(crate) fn expand(&self) -> Option<Vec<Vec<Tok>>> {
        if self.is_any() {
            return Some(vec![vec![Tok::DStar]]);
        }
        let mut out = vec![Vec::new()];
        expand_seq(&self.ast, &mut out)?;
        Some(out)
    }
}

fn parse_seq(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    depth: usize,
    in_alt: bool,
) -> Result<Vec<Node>, String> {
    let mut seq = Vec::new();
    let mut lit = String::new();
    while let Some(&c) = chars.peek() {
        match c {
            '*' => {
                chars.next();
                flush(&mut lit, &mut seq);
                if chars.peek() == Some(&'*') {
                    while chars.peek() == Some(&'*') {
                        chars.next();
                    }
                    seq.push(Node::DStar);
                } else {
                    seq.push(Node::Star);
                }
            }
            '?' => {
                chars.next();
                flush(&mut lit, &mut seq);
                seq.push(Node::Quest);
            }
            '{' => {
                chars.next();
                flush(&mut lit, &mut seq);
                if depth + 1 > MAX_BRACE_DEPTH {
                    return Err(format!(
                        "braces nested deeper than {MAX_BRACE_DEPTH} levels"
                    ));
                }
                let mut alts = Vec::new();
                loop {
                    alts.push(parse_seq(chars, depth + 1, true)?);
                    match chars.next() {
                        Some(',') => continue,
                        Some('}') => break,
                        _ => return Err("unbalanced braces: `{` without `}`".into()),
                    }
                }
                seq.push(Node::Alt(alts));
            }
            ',' | '}' if in_alt => break,
            '}' => return Err("unbalanced braces: `}` without `{`".into()),
            _ => {
                chars.next();
                lit.push(c);
            }
        }
    }
    flush(&mut lit, &mut seq);
    Ok(seq)
}

fn flush(lit: &mut String, seq: &mut Vec<Node>) {
    if !lit.is_empty() {
        seq.push(Node::Lit(std::mem::take(lit)));
    }
}

fn affix(ast: &[Node]) -> Option<Matcher> {
    let (prefix, rest) = match ast {
        [Node::Lit(p), rest @ ..] => (p.as_str(), rest),
        rest => ("", rest),
    };
    let (cross, rest) = match rest {
        [Node::Star, rest @ ..] => (false, rest),
        [Node::DStar, rest @ ..] => (true, rest),
        _ => return None,
    };
    let suffix = match rest {
        [] => "",
        [Node::Lit(s)] => s.as_str(),
        _ => return None,
    };
    Some(Matcher::Affix {
        prefix: prefix.into(),
        suffix: suffix.into(),
        cross,
    })
}

fn to_regex(seq: &[Node], out: &mut String) {
    for n in seq {
        match n {
            Node::Lit(s) => out.push_str(&regex::escape(s)),
            Node::Star => out.push_str("[^/]*"),
            Node::DStar => out.push_str(".*"),
            Node::Quest => out.push_str("[^/]"),
            Node::Alt(alts) => {
                out.push_str("(?:");
                for (i, a) in alts.iter().enumerate() {
                    if i > 0 {
                        out.push('|');
                    }
                    to_regex(a, out);
                }
                out.push(')');
            }
        }
    }
}

fn expand_seq(seq: &[Node], out: &mut Vec<Vec<Tok>>) -> Option<()> {
    for n in seq {
        match n {
            Node::Lit(s) => out
                .iter_mut()
                .for_each(|o| o.extend(s.chars().map(Tok::Char))),
            Node::Star => out.iter_mut().for_each(|o| o.push(Tok::Star)),
            Node::DStar => out.iter_mut().for_each(|o| o.push(Tok::DStar)),
            Node::Quest => out.iter_mut().for_each(|o| o.push(Tok::Quest)),
            Node::Alt(alts) => {
                let mut next = Vec::new();
                for alt in alts {
                    let mut branch = out.clone();
                    expand_seq(alt, &mut branch)?;
                    next.extend(branch);
                    if next.len() > MAX_EXPANSION {
                        return None;
                    }
                }
                *out = next;
            }
        }
    }
    Some(())
}

/// Largest `|a| * |b|` table the inclusion check builds.
const MAX_TABLE: usize = 1 << 20;

/// Sound inclusion of brace-free token strings: `true` only if every string `b` matches is
/// matched by `a`. Each token of `b` must be absorbed by a token of `a` that covers it:
/// a literal by the same literal, `?` (not `/`), `*` (not `/`) or `**`; `?` by `?`, `*` or
/// `**`; `*` by `*` or `**`; `**` by `**` only.
pub(crate) fn tokens_cover(a: &[Tok], b: &[Tok]) -> bool {
    let (n, m) = (a.len(), b.len());
    if (n + 1).saturating_mul(m + 1) > MAX_TABLE {
        return false;
    }
    let w = m + 1;
    let mut reach = vec![false; (n + 1) * w];
    reach[0] = true;
    for i in 0..=n {
        for j in 0..=m {
            if !reach[i * w + j] {
                continue;
            }
            let Some(&ta) = a.get(i) else { continue };
            let tb = b.get(j).copied();
            match ta {
                Tok::Char(c) => {
                    if tb == Some(Tok::Char(c)) {
                        reach[(i + 1) * w + j + 1] = true;
                    }
                }
                Tok::Quest => {
                    if matches!(tb, Some(Tok::Quest))
                        || matches!(tb, Some(Tok::Char(c)) if c != '/')
                    {
                        reach[(i + 1) * w + j + 1] = true;
                    }
                }
                Tok::Star => {
                    reach[(i + 1) * w + j] = true;
                    if matches!(tb, Some(Tok::Quest | Tok::Star))
                        || matches!(tb, Some(Tok::Char(c)) if c != '/')
                    {
                        reach[i * w + j + 1] = true;
                    }
                }
                Tok::DStar => {
                    reach[(i + 1) * w + j] = true;
                    if tb.is_some() {
                        reach[i * w + j + 1] = true;
                    }
                }
            }
        }
    }
    reach[n * w + m]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> Glob {
        Glob::compile(s).unwrap()
    }

    #[test]
    fn shapes() {
        assert!(matches!(g("*").matcher, Matcher::Any));
        assert!(matches!(g("**").matcher, Matcher::Any));
        assert!(matches!(g("mcp/*").matcher, Matcher::Affix { .. }));
        assert!(matches!(g("*/list").matcher, Matcher::Affix { .. }));
        assert!(matches!(g("a*b").matcher, Matcher::Affix { .. }));
        assert!(matches!(g("a?b").matcher, Matcher::Regex(_)));
        assert!(matches!(g("{a,b}").matcher, Matcher::Alts(_)));
        assert!(matches!(g("mcp/{request,re*}").matcher, Matcher::Alts(_)));
        assert!(matches!(g("{a,b}*{c,d}*").matcher, Matcher::Regex(_)));
        assert!(matches!(g("{a*,b}*").matcher, Matcher::Regex(_)));
    }

    #[test]
    fn matching() {
        assert!(g("*").matches("a/b"));
        assert!(g("mcp/*").matches("mcp/request"));
        assert!(!g("mcp/*").matches("mcp/a/b"));
        assert!(!g("mcp/*").matches("mcp"));
        assert!(g("mcp/*").matches("mcp/"));
        assert!(g("mcp/**").matches("mcp/a/b"));
        assert!(g("*/list").matches("tools/list"));
        assert!(!g("*/list").matches("a/tools/list"));
        assert!(g("a*b").matches("ab"));
        assert!(!g("a*b").matches("a"));
        assert!(!g("ab*ba").matches("aba"));
        assert!(g("f?o").matches("fxo"));
        assert!(g("f?o").matches("fé o".replace(' ', "").as_str()));
        assert!(!g("f?o").matches("f/o"));
        assert!(g("{read,write}_*").matches("write_file"));
        assert!(!g("{read,write}_*").matches("delete_file"));
        assert!(g("a{b,{c,d}}e").matches("ade"));
        assert!(g("x{,y}").matches("x"));
        assert!(g("mcp/{request,re*}").matches("mcp/response"));
        assert!(!g("mcp/{request,re*}").matches("mcp/re/x"));
        assert!(g("mcp/{request,response}").matches("mcp/request"));
        assert!(!g("mcp/{request,response}").matches("mcp/proposal"));
        assert!(g("{a*,b}*").matches("axx"));
        assert!(!g("{a*,b}*").matches("a/x"));
        assert!(g("{}").matches(""));
        assert!(g("a***b").matches("a/x/b"));
        assert!(g("a.b*").matches("a.bc"));
        assert!(!g("a.b*").matches("axbc"));
    }

    #[test]
    fn errors() {
        assert!(Glob::compile("{a").is_err());
        assert!(Glob::compile("a}").is_err());
        assert!(Glob::compile("{a,{b}").is_err());
        let deep = "{".repeat(33) + &"}".repeat(33);
        assert!(Glob::compile(&deep).unwrap_err().contains("deeper"));
        let ok = "{".repeat(32) + &"}".repeat(32);
        assert!(Glob::compile(&ok).is_ok());
    }

    proptest::proptest! {
        #[test]
        fn hand_matchers_agree_with_the_expression(
            p in "([ab/]|\\*|\\*\\*|\\{[ab*]{0,2},[ab/*]{0,2}\\}){1,4}",
            s in "[ab/]{0,6}",
        ) {
            let glob = g(&p);
            let mut re = String::from("(?s)^(?:");
            to_regex(&glob.ast, &mut re);
            re.push_str(")$");
            let expected = if glob.is_any() { true } else { Regex::new(&re).unwrap().is_match(&s) };
            proptest::prop_assert_eq!(glob.matches(&s), expected, "{} {:?}", p, glob.matcher);
        }
    }

    fn cov(a: &str, b: &str) -> bool {
        let (a, b) = (g(a).expand().unwrap(), g(b).expand().unwrap());
        b.iter().all(|bt| a.iter().any(|at| tokens_cover(at, bt)))
    }

    #[test]
    fn inclusion() {
        assert!(cov("*", "mcp/**"));
        assert!(cov("mcp/*", "mcp/req*"));
        assert!(cov("mcp/**", "mcp/*"));
        assert!(!cov("mcp/*", "mcp/**"));
        assert!(cov("mcp/*", "mcp/{request,response}"));
        assert!(!cov("mcp/{request,response}", "mcp/*"));
        assert!(cov("a?c", "abc*".trim_end_matches('*')));
        assert!(!cov("a?c", "a/c*".trim_end_matches('*')));
        assert!(cov("*_file", "read_file"));
        assert!(!cov("read_*", "*_file"));
    }
}
