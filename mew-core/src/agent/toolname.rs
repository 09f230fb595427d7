//! How `participant/tool` names are shown to a model.
//!
//! Model APIs accept function names matching `[A-Za-z0-9_-]{1,64}`, while participant ids
//! may hold any non-space character (`_`, `/`, `.`, `:` and non-ASCII included) and tool
//! names are free text. The spec's rule (slash to underscore) is ambiguous as soon as an id
//! contains `_`. The encoding here is unambiguous for every pair:
//!
//! - each of the two parts is escaped: `[A-Za-z0-9-]` stay as they are, `_` becomes `_u`,
//!   every other byte of its UTF-8 form becomes `_x` and two lower-case hex digits;
//! - the parts are joined with `__`.
//!
//! An escaped part never contains `__` (every `_` it holds is followed by `u` or `x`), so
//! reading left to right, `__` can only be the separator. `weather-service` + `get_weather`
//! is `weather-service__get_uweather`.
//!
//! A result longer than 64 characters is shortened to its first 46 characters, `_h` and 16
//! hex digits of a hash of the whole pair; [`ToolNames`] keeps the table that maps such names
//! back, so decoding always goes through the table of the tools actually offered.

use std::collections::BTreeMap;

/// Longest function name model APIs accept.
pub const MAX_LEN: usize = 64;

fn escape(part: &str, out: &mut String) {
    for b in part.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' => out.push(b as char),
            b'_' => out.push_str("_u"),
            other => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("_x");
                out.push(HEX[usize::from(other >> 4)] as char);
                out.push(HEX[usize::from(other & 15)] as char);
            }
        }
    }
}

/// The full (possibly over-long) encoding of a pair.
pub fn encode_full(participant: &str, tool: &str) -> String {
    let mut out = String::with_capacity(participant.len() + tool.len() + 2);
    escape(participant, &mut out);
    out.push_str("__");
    escape(tool, &mut out);
    out
}

/// The name shown to the model: [`encode_full`], shortened with a hash when too long.
pub fn encode(participant: &str, tool: &str) -> String {
    let full = encode_full(participant, tool);
    if full.len() <= MAX_LEN {
        return full;
    }
    // FNV-1a over both parts with a separator byte no UTF-8 text contains.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in participant
        .bytes()
        .chain(std::iter::once(0xff))
        .chain(tool.bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{}_h{h:016x}", &full[..46])
}

/// Reverses [`encode_full`]; `None` for text no pair encodes to.
pub fn decode_full(name: &str) -> Option<(String, String)> {
    let b = name.as_bytes();
    let mut parts: Vec<Vec<u8>> = vec![Vec::new()];
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'_' => match b.get(i + 1)? {
                b'_' => {
                    if parts.len() == 2 {
                        return None;
                    }
                    parts.push(Vec::new());
                    i += 2;
                }
                b'u' => {
                    parts.last_mut()?.push(b'_');
                    i += 2;
                }
                b'x' => {
                    let hex = std::str::from_utf8(b.get(i + 2..i + 4)?).ok()?;
                    parts.last_mut()?.push(u8::from_str_radix(hex, 16).ok()?);
                    i += 4;
                }
                _ => return None,
            },
            c if c.is_ascii_alphanumeric() || c == b'-' => {
                parts.last_mut()?.push(c);
                i += 1;
            }
            _ => return None,
        }
    }
    if parts.len() != 2 {
        return None;
    }
    let tool = String::from_utf8(parts.pop()?).ok()?;
    let participant = String::from_utf8(parts.pop()?).ok()?;
    Some((participant, tool))
}

/// The names of the tools offered in one model call, both ways.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolNames {
    by_name: BTreeMap<String, (String, String)>,
}

impl ToolNames {
    /// Adds a pair; returns its encoded name. Two pairs can only share a shortened name
    /// through a hash collision; the later one then gets a counter appended.
    pub fn insert(&mut self, participant: &str, tool: &str) -> String {
        let mut name = encode(participant, tool);
        let pair = (participant.to_owned(), tool.to_owned());
        let mut n = 0;
        while let Some(existing) = self.by_name.get(&name) {
            if *existing == pair {
                return name;
            }
            n += 1;
            name = format!("{}{n}", &encode(participant, tool)[..MAX_LEN - 3]);
        }
        self.by_name.insert(name.clone(), pair);
        name
    }

    /// The pair a name the model used stands for. Also takes `participant/tool` as written
    /// in text, when that names an offered tool.
    pub fn resolve(&self, name: &str) -> Option<(&str, &str)> {
        if let Some((p, t)) = self.by_name.get(name) {
            return Some((p, t));
        }
        self.by_name
            .values()
            .find(|(p, t)| name.len() == p.len() + 1 + t.len() && name == format!("{p}/{t}"))
            .map(|(p, t)| (p.as_str(), t.as_str()))
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

    fn legal(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= MAX_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    }

    #[test]
    fn awkward_ids_round_trip() {
        let pairs = [
            ("weather-service", "get_weather"),
            ("weather_service", "get_weather"),
            ("a_", "_b"),
            ("a__", "b"),
            ("a", "__b"),
            ("_u", "_x41"),
            ("x/y", "z/w"),
            ("svc.v2:eu", "tool.name"),
            ("météo", "température"),
            ("日本", "天気"),
            ("-", "-"),
            ("a", ""),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (p, t) in pairs {
            let full = encode_full(p, t);
            assert_eq!(
                decode_full(&full),
                Some((p.to_owned(), t.to_owned())),
                "{full}"
            );
            let short = encode(p, t);
            assert!(legal(&short), "{short}");
            assert!(seen.insert(short), "distinct names for distinct pairs");
        }
        assert_eq!(
            encode("weather-service", "get_weather"),
            "weather-service__get_uweather"
        );
        assert_eq!(decode_full("a__b__c"), None);
        assert_eq!(decode_full("a_b"), None);
        assert_eq!(decode_full("ab"), None);
    }

    #[test]
    fn long_names_go_through_the_table() {
        let p = "a-participant-with-a-very-long-identifier-indeed";
        let mut names = ToolNames::default();
        let a = names.insert(p, "read_text_file_with_a_long_name");
        let b = names.insert(p, "read_text_file_with_a_long_name_2");
        assert!(legal(&a) && legal(&b) && a != b, "{a} {b}");
        assert_eq!(
            names.resolve(&a),
            Some((p, "read_text_file_with_a_long_name"))
        );
        assert_eq!(
            names.resolve(&format!("{p}/read_text_file_with_a_long_name_2")),
            Some((p, "read_text_file_with_a_long_name_2"))
        );
        assert_eq!(names.resolve("nope__nope"), None);
        assert_eq!(names.insert(p, "read_text_file_with_a_long_name"), a);
        assert_eq!(names.len(), 2);
    }
}
