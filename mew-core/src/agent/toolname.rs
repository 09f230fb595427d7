//! How `participant/tool` names are shown to a model.
//!
//! Model APIs accept function names matching `[A-Za-z0-9_-]{1,64}`, and models choose tools
//! by reading their names, so a name must read as the tool it stands for. The name of a pair
//! is, in order of preference:
//!
//! 1. plain `participant__tool` (`filesystem` + `write_file` is `filesystem__write_file`),
//!    when that is a valid name and no other pair of the offer has the same plain name
//!    (`a_` + `_b` and `a` + `__b` both read `a___b`: neither gets it);
//! 2. otherwise a readable fallback: every character outside `[A-Za-z0-9_-]` becomes `_`,
//!    the result is cut to leave room for `_h` and 8 hex digits of a hash of the pair
//!    (`svc.v2` + `read` is `svc_v2__read_h1a2b3c4d`);
//! 3. should even that be taken, a counter replaces the hash's last digits.
//!
//! Names are assigned for a whole offer at once ([`ToolNames::new`]), so a pair's name does
//! not depend on the order tools were discovered in, and [`ToolNames`] maps every name back:
//! decoding always goes through the table of the tools actually offered.

use std::collections::{BTreeMap, BTreeSet};

/// Longest function name model APIs accept.
pub const MAX_LEN: usize = 64;

/// Whether model APIs accept `name` as a function name.
pub fn is_valid(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `participant__tool`, when that is a valid function name.
pub fn plain(participant: &str, tool: &str) -> Option<String> {
    let name = format!("{participant}__{tool}");
    is_valid(&name).then_some(name)
}

/// FNV-1a over both parts with a separator byte no UTF-8 text contains.
fn hash(participant: &str, tool: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in participant
        .bytes()
        .chain(std::iter::once(0xff))
        .chain(tool.bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn sanitize(part: &str, out: &mut String) {
    for c in part.chars() {
        out.push(if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            c
        } else {
            '_'
        });
    }
}

/// The readable fallback name of a pair (rule 2), with `suffix` after `_h`.
fn fallback(participant: &str, tool: &str, suffix: &str) -> String {
    let mut base = String::new();
    sanitize(participant, &mut base);
    base.push_str("__");
    sanitize(tool, &mut base);
    // Only ASCII is left, so any byte index is a char boundary.
    base.truncate(MAX_LEN - 2 - suffix.len());
    format!("{base}_h{suffix}")
}

/// The names of the tools offered in one model call, both ways.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolNames {
    by_name: BTreeMap<String, (String, String)>,
    by_pair: BTreeMap<(String, String), String>,
}

impl ToolNames {
    /// Names every pair of an offer (duplicates are named once).
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> ToolNames {
        let pairs: BTreeSet<(String, String)> = pairs
            .into_iter()
            .map(|(p, t)| (p.to_owned(), t.to_owned()))
            .collect();
        let mut plain_count: BTreeMap<String, usize> = BTreeMap::new();
        for (p, t) in &pairs {
            if let Some(n) = plain(p, t) {
                *plain_count.entry(n).or_default() += 1;
            }
        }
        let mut names = ToolNames::default();
        let mut rest = Vec::new();
        for (p, t) in &pairs {
            match plain(p, t) {
                Some(n) if plain_count.get(&n) == Some(&1) => names.put(n, p, t),
                _ => rest.push((p, t)),
            }
        }
        for (p, t) in rest {
            let mut name = fallback(p, t, &format!("{:08x}", hash(p, t) as u32));
            let mut n = 0u32;
            // Another pair's plain name or a hash collision: count until free.
            while names.by_name.contains_key(&name) {
                n += 1;
                name = fallback(p, t, &format!("{n:08}"));
            }
            names.put(name, p, t);
        }
        names
    }

    /// Names every pair of an offer to an MCP host: a tool's own name when no other pair of
    /// the offer has it (and it is a valid name), else its [`ToolNames::new`] name, so a
    /// host that sees one server sees that server's names unchanged.
    pub fn preferring_own<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> ToolNames {
        let pairs: BTreeSet<(String, String)> = pairs
            .into_iter()
            .map(|(p, t)| (p.to_owned(), t.to_owned()))
            .collect();
        let mut own: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, t) in &pairs {
            *own.entry(t.as_str()).or_default() += 1;
        }
        let ambiguous: Vec<(&str, &str)> = pairs
            .iter()
            .filter(|(_, t)| own[t.as_str()] > 1 || !is_valid(t))
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        let mut names = ToolNames::new(ambiguous);
        for (p, t) in &pairs {
            if own[t.as_str()] == 1 && is_valid(t) && !names.by_name.contains_key(t) {
                names.put(t.clone(), p, t);
            } else if !names.by_pair.contains_key(&(p.clone(), t.clone())) {
                // Its own name is another pair's `participant__tool`: the fallback, counted.
                let mut n = 0u32;
                let mut name = fallback(p, t, &format!("{:08x}", hash(p, t) as u32));
                while names.by_name.contains_key(&name) {
                    n += 1;
                    name = fallback(p, t, &format!("{n:08}"));
                }
                names.put(name, p, t);
            }
        }
        names
    }

    fn put(&mut self, name: String, p: &str, t: &str) {
        self.by_pair
            .insert((p.to_owned(), t.to_owned()), name.clone());
        self.by_name.insert(name, (p.to_owned(), t.to_owned()));
    }

    /// The name shown for a pair of the offer.
    pub fn name_of(&self, participant: &str, tool: &str) -> Option<&str> {
        self.by_pair
            .get(&(participant.to_owned(), tool.to_owned()))
            .map(String::as_str)
    }

    /// The pair a name the model used stands for. Also takes `participant/tool` as written
    /// in text, when that names an offered tool.
    pub fn resolve(&self, name: &str) -> Option<(&str, &str)> {
        if let Some((p, t)) = self.by_name.get(name) {
            return Some((p, t));
        }
        let (p, t) = name.split_once('/')?;
        self.by_pair
            .get_key_value(&(p.to_owned(), t.to_owned()))
            .map(|((p, t), _)| (p.as_str(), t.as_str()))
            .or_else(|| {
                // A participant id may hold `/` itself: try every split.
                self.by_name
                    .values()
                    .find(|(p, t)| {
                        name.len() == p.len() + 1 + t.len() && name == format!("{p}/{t}")
                    })
                    .map(|(p, t)| (p.as_str(), t.as_str()))
            })
    }

    /// How many names are known.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether none is known.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hosts_see_own_names_unless_two_participants_share_one() {
        let names = ToolNames::preferring_own([
            ("weather", "forecast"),
            ("files", "read"),
            ("notes", "read"),
            ("odd", "has space"),
        ]);
        assert_eq!(names.name_of("weather", "forecast"), Some("forecast"));
        assert_eq!(names.name_of("files", "read"), Some("files__read"));
        assert_eq!(names.name_of("notes", "read"), Some("notes__read"));
        assert_eq!(names.resolve("forecast"), Some(("weather", "forecast")));
        let odd = names.name_of("odd", "has space").unwrap();
        assert!(odd.starts_with("odd__has_space_h"), "{odd}");
        assert_eq!(names.len(), 4);
    }

    #[test]
    fn plain_names_read_as_the_tool() {
        let names = ToolNames::new([
            ("filesystem", "write_file"),
            ("filesystem", "list_directory"),
            ("weather-service", "get_weather"),
            ("svc.v2", "read"),
            ("a_", "_b"),
            ("a", "__b"),
            ("日本", "天気"),
        ]);
        assert_eq!(
            names.name_of("filesystem", "write_file"),
            Some("filesystem__write_file")
        );
        assert_eq!(
            names.name_of("filesystem", "list_directory"),
            Some("filesystem__list_directory")
        );
        assert_eq!(
            names.resolve("weather-service__get_weather"),
            Some(("weather-service", "get_weather"))
        );
        let v2 = names.name_of("svc.v2", "read").unwrap();
        assert!(v2.starts_with("svc_v2__read_h") && is_valid(v2), "{v2}");
        // Both read `a___b`: neither may have it.
        let a = names.name_of("a_", "_b").unwrap();
        let b = names.name_of("a", "__b").unwrap();
        assert!(a != b && a != "a___b" && b != "a___b", "{a} {b}");
        assert_eq!(names.resolve(a), Some(("a_", "_b")));
        assert_eq!(names.resolve("svc.v2/read"), Some(("svc.v2", "read")));
        assert_eq!(names.resolve("nope__nope"), None);
        assert_eq!(names.len(), 7);
    }

    #[test]
    fn long_names_are_cut_and_stay_distinct() {
        let p = "a-participant-with-a-very-long-identifier-indeed";
        let names = ToolNames::new([
            (p, "read_text_file_with_a_long_name"),
            (p, "read_text_file_with_a_long_name_2"),
        ]);
        let a = names.name_of(p, "read_text_file_with_a_long_name").unwrap();
        let b = names
            .name_of(p, "read_text_file_with_a_long_name_2")
            .unwrap();
        assert!(is_valid(a) && is_valid(b) && a != b, "{a} {b}");
        assert_eq!(
            names.resolve(a),
            Some((p, "read_text_file_with_a_long_name"))
        );
    }

    fn ids() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z][a-z0-9_-]{0,12}",
            "[a-z_]{1,3}",
            "[a-zA-Z0-9_./:é日-]{1,40}",
            "[a-z]{20,40}",
        ]
    }

    proptest! {
        /// For any set of participant ids and tool names, the names shown are valid,
        /// unique, map back to their pair, and are the plain `participant__tool` whenever
        /// that is valid and no other pair reads the same.
        #[test]
        fn names_are_valid_unique_reversible_and_plain_when_possible(
            pairs in proptest::collection::vec((ids(), ids()), 1..24)
        ) {
            let names = ToolNames::new(pairs.iter().map(|(p, t)| (p.as_str(), t.as_str())));
            let distinct: BTreeSet<&(String, String)> = pairs.iter().collect();
            prop_assert_eq!(names.len(), distinct.len());
            let mut seen = BTreeSet::new();
            for (p, t) in &distinct {
                let n = names.name_of(p, t).expect("every pair is named");
                prop_assert!(is_valid(n), "{}", n);
                prop_assert!(seen.insert(n.to_owned()), "{} twice", n);
                prop_assert_eq!(names.resolve(n), Some((p.as_str(), t.as_str())));
                if let Some(pl) = plain(p, t) {
                    let others = distinct
                        .iter()
                        .filter(|(q, u)| plain(q, u).as_deref() == Some(pl.as_str()))
                        .count();
                    if others == 1 {
                        prop_assert_eq!(n, pl.as_str());
                    } else {
                        prop_assert_ne!(n, pl.as_str());
                    }
                }
            }
        }
    }
}
