//! Delegation: is a granted capability covered by the granter's own?
//!
//! The check is **sound, not complete**: `true` means every message the granted capability
//! matches is matched by the granter's set; `false` may refuse a grant that would have been
//! safe. The rule, applied per alternative of the granted `kind`:
//!
//! * some one capability of the granter must cover that kind alternative (with the granted
//!   payload pattern);
//! * **kind**: a string pattern `A` covers `B` when they are the same text; when `B` is a
//!   plain string `A` matches; when `A` is `*`/`**`; for two globs, when every brace
//!   alternative of `B` is absorbed token by token by some alternative of `A` (a literal by
//!   the same literal, `?`, `*` or `**`; `?` by `?`, `*`, `**`; `*` by `*`, `**`; `**` by `**`);
//!   `!P` covers `!Q` when `Q` covers `P`. Regular expressions only cover themselves;
//! * **payload**: no payload pattern on the granter's side covers anything; a payload
//!   pattern never covers a grant without one. Otherwise value pattern `A` covers `B`:
//!   - `B` an array: `A` covers each alternative; `A` an array: one alternative covers `B`;
//!   - `B` a number, bool, null or plain string: `A` matches that one value;
//!   - both strings: as for kinds;
//!   - both objects: every entry of `A` is implied by some entry of `B` — a field by the
//!     same field whose pattern it covers; a glob key by a field it names or the same glob
//!     key; a path by the same path; `"**"` by `A`'s own pattern covering `B` itself, or
//!     covering the pattern of any of `B`'s fields, glob keys or `"**"` entries;
//!   - anything else: not covered.

use super::glob::tokens_cover;
use super::string::{Positive, StrPat};
use super::value::{Compiled, Entry, ValuePat};
use serde_json::Value;

/// Whether `mine` covers the `alt`-th kind alternative of `theirs` (with its payload).
pub(crate) fn covers_alt(mine: &Compiled, theirs: &Compiled, alt: usize) -> bool {
    let Some(tk) = theirs.kind.get(alt) else {
        return false;
    };
    mine.kind.iter().any(|mk| str_covers(mk, tk))
        && match (&mine.payload, &theirs.payload) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(b)) => val_covers(a, b),
        }
}

fn same_text(a: &Positive, b: &Positive) -> bool {
    match (a, b) {
        (Positive::Exact(x), Positive::Exact(y)) => x == y,
        (Positive::Glob(x), Positive::Glob(y)) => x.src() == y.src(),
        (Positive::Regex { src: x, .. }, Positive::Regex { src: y, .. }) => x == y,
        _ => false,
    }
}

/// Whether every string positive `b` matches, positive `a` matches.
fn positive_covers(a: &Positive, b: &Positive) -> bool {
    if a.is_any() || same_text(a, b) {
        return true;
    }
    if let Positive::Exact(s) = b {
        return a.matches(s);
    }
    let (Positive::Glob(gb), Some(alts_a)) = (b, tokens_of(a)) else {
        return false;
    };
    let Some(alts_b) = gb.expand() else {
        return false;
    };
    alts_b
        .iter()
        .all(|tb| alts_a.iter().any(|ta| tokens_cover(ta, tb)))
}

fn tokens_of(p: &Positive) -> Option<Vec<Vec<super::glob::Tok>>> {
    match p {
        Positive::Exact(s) => Some(vec![s.chars().map(super::glob::Tok::Char).collect()]),
        Positive::Glob(g) => g.expand(),
        Positive::Regex { .. } => None,
    }
}

/// Whether every (present) string `b` matches, `a` matches.
pub(crate) fn str_covers(a: &StrPat, b: &StrPat) -> bool {
    if let Some(s) = b.literal() {
        return a.matches(s);
    }
    match (a.negated, b.negated) {
        (false, false) => positive_covers(&a.positive, &b.positive),
        // not-Q ⊆ not-P  ⇔  P ⊆ Q
        (true, true) => positive_covers(&b.positive, &a.positive),
        (false, true) => a.positive.is_any(),
        (true, false) => false,
    }
}

fn val_covers(a: &ValuePat, b: &ValuePat) -> bool {
    if let ValuePat::AnyOf(bs) = b {
        return bs.iter().all(|x| val_covers(a, x));
    }
    if let ValuePat::AnyOf(as_) = a {
        return as_.iter().any(|x| val_covers(x, b));
    }
    match (a, b) {
        (_, ValuePat::Null) => a.matches(&Value::Null),
        (_, ValuePat::Bool(x)) => a.matches(&Value::Bool(*x)),
        (_, ValuePat::Num(n)) => a.matches(&Value::Number(n.clone())),
        (ValuePat::Str(x), ValuePat::Str(y)) => str_covers(x, y),
        (ValuePat::Object(ea), ValuePat::Object(eb)) => ea.iter().all(|e| entry_implied(e, eb, b)),
        _ => false,
    }
}

fn entry_implied(e: &Entry, eb: &[Entry], whole_b: &ValuePat) -> bool {
    match e {
        Entry::Field(k, pa) => eb
            .iter()
            .any(|x| matches!(x, Entry::Field(k2, pb) if k == k2 && val_covers(pa, pb))),
        Entry::GlobKey(g, pa) => eb.iter().any(|x| match x {
            Entry::Field(k2, pb) => g.matches(k2) && val_covers(pa, pb),
            Entry::GlobKey(g2, pb) => g.src() == g2.src() && val_covers(pa, pb),
            _ => false,
        }),
        Entry::Path(p, pa) => eb
            .iter()
            .any(|x| matches!(x, Entry::Path(p2, pb) if p.src() == p2.src() && val_covers(pa, pb))),
        Entry::Deep(pa) => {
            val_covers(pa, whole_b)
                || eb.iter().any(|x| match x {
                    Entry::Field(_, pb) | Entry::GlobKey(_, pb) | Entry::Deep(pb) => {
                        val_covers(pa, pb)
                    }
                    Entry::Path(..) => false,
                })
        }
    }
}
