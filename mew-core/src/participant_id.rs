//! The one rule for a participant id, whoever names it: `space.yaml`, an invitation, an
//! anonymous join, a JWT's subject, an HTTP path, `mew client --id`.
//!
//! An id is at most [`MAX_BYTES`] bytes and not empty; it holds no control character (Cc),
//! no format character (Cf: zero-width space, bidi overrides, soft hyphen, BOM...), no
//! character Unicode ignores by default (variation selectors, Hangul fillers...) and no
//! whitespace; it is a usable file name (no `/`, `\` or `..`, no leading `.`); it is outside
//! the gateway's `system:` namespace. Within a space, no two participants' ids share a
//! confusable [`skeleton`] (Unicode TR39): `bot` and `bоt` (Cyrillic `о`) cannot both be
//! members. The skeleton is `unicode-security`'s.

use std::fmt;

/// Bytes of an id at most.
pub const MAX_BYTES: usize = 128;

/// Why an id is refused ([`check`]). Its message never repeats a long id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvalidId {
    /// Empty.
    Empty,
    /// Longer than [`MAX_BYTES`].
    TooLong {
        /// Its length in bytes.
        bytes: usize,
    },
    /// A control, format, default-ignorable or whitespace character.
    Character {
        /// The character.
        ch: char,
        /// Its byte offset.
        at: usize,
    },
    /// `/`, `\`, `..` or a leading `.`: not a plain file name.
    PathLike,
    /// The gateway's namespace.
    Reserved,
}

impl fmt::Display for InvalidId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidId::Empty => f.write_str("a participant id cannot be empty"),
            InvalidId::TooLong { bytes } => write!(
                f,
                "a participant id is at most {MAX_BYTES} bytes (this one has {bytes})"
            ),
            InvalidId::Character { ch, at } => write!(
                f,
                "a participant id cannot hold U+{:04X} (byte {at}): no control, format, invisible or whitespace characters",
                u32::from(*ch)
            ),
            // The reference's words, which its clients' scripts look for.
            InvalidId::PathLike => f.write_str("participant_id contains invalid characters"),
            InvalidId::Reserved => {
                f.write_str("participant ids starting with `system:` are the gateway's")
            }
        }
    }
}

impl std::error::Error for InvalidId {}

/// Checks `id` against the rule (all but the confusable check, which needs the space's
/// other members: see [`skeleton`]).
pub fn check(id: &str) -> Result<(), InvalidId> {
    if id.is_empty() {
        return Err(InvalidId::Empty);
    }
    if id.len() > MAX_BYTES {
        return Err(InvalidId::TooLong { bytes: id.len() });
    }
    if let Some((at, ch)) = id.char_indices().find(|(_, c)| refused_char(*c)) {
        return Err(InvalidId::Character { ch, at });
    }
    if id.contains(['/', '\\']) || id.contains("..") || id.starts_with('.') {
        return Err(InvalidId::PathLike);
    }
    if id.starts_with("system:") {
        return Err(InvalidId::Reserved);
    }
    Ok(())
}

/// The id's confusable skeleton (Unicode TR39): two ids with the same skeleton look alike.
/// Computed for checked ids (at most [`MAX_BYTES`] bytes).
pub fn skeleton(id: &str) -> String {
    unicode_security::skeleton(id).collect()
}

/// Whether two ids are distinct but look alike.
pub fn confusable(a: &str, b: &str) -> bool {
    a != b && skeleton(a) == skeleton(b)
}

fn refused_char(c: char) -> bool {
    c.is_control() || c.is_whitespace() || is_format(c) || is_default_ignorable(c)
}

/// General category Cf (Unicode 16).
fn is_format(c: char) -> bool {
    const CF: &[(u32, u32)] = &[
        (0x00AD, 0x00AD),
        (0x0600, 0x0605),
        (0x061C, 0x061C),
        (0x06DD, 0x06DD),
        (0x070F, 0x070F),
        (0x0890, 0x0891),
        (0x08E2, 0x08E2),
        (0x180E, 0x180E),
        (0x200B, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x2064),
        (0x2066, 0x206F),
        (0xFEFF, 0xFEFF),
        (0xFFF9, 0xFFFB),
        (0x110BD, 0x110BD),
        (0x110CD, 0x110CD),
        (0x13430, 0x1343F),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        (0xE0001, 0xE0001),
        (0xE0020, 0xE007F),
    ];
    let c = u32::from(c);
    CF.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
}

/// Default_Ignorable_Code_Point: the skeleton drops exactly these (after NFD), so a
/// character whose skeleton is empty displays as nothing.
fn is_default_ignorable(c: char) -> bool {
    !c.is_ascii() && {
        let mut buf = [0u8; 4];
        unicode_security::skeleton(c.encode_utf8(&mut buf))
            .next()
            .is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ids_pass() {
        for id in [
            "human",
            "agent-1",
            "robot_2",
            "Zoë",
            "δοκιμή",
            "名前",
            "a:b",
            "a.b",
        ] {
            assert_eq!(check(id), Ok(()), "{id}");
        }
        assert_eq!(check(&"x".repeat(MAX_BYTES)), Ok(()));
    }

    #[test]
    fn lengths() {
        assert_eq!(check(""), Err(InvalidId::Empty));
        assert_eq!(
            check(&"x".repeat(MAX_BYTES + 1)),
            Err(InvalidId::TooLong { bytes: 129 })
        );
        // Counted in bytes: 43 three-byte characters are 129 bytes.
        assert_eq!(
            check(&"名".repeat(43)),
            Err(InvalidId::TooLong { bytes: 129 })
        );
        let long = check(&"a".repeat(100_000)).unwrap_err().to_string();
        assert!(long.len() < 100 && long.contains("100000"), "{long}");
    }

    #[test]
    fn invisible_and_control_characters_are_refused() {
        for (id, ch) in [
            ("bo\u{200B}t", '\u{200B}'),   // zero-width space
            ("\u{202E}tob", '\u{202E}'),   // right-to-left override
            ("bo\u{00AD}t", '\u{00AD}'),   // soft hyphen
            ("\u{FEFF}bot", '\u{FEFF}'),   // byte order mark
            ("bot\u{2066}", '\u{2066}'),   // left-to-right isolate
            ("bot\u{FE0F}", '\u{FE0F}'),   // variation selector (default ignorable)
            ("\u{3164}bot", '\u{3164}'),   // Hangul filler (default ignorable)
            ("bot\u{E0041}", '\u{E0041}'), // tag character
            ("bo\u{0}t", '\0'),
            ("bo\u{1B}t", '\u{1B}'),
            ("bo\u{85}t", '\u{85}'),
            ("bo t", ' '),
            ("bo\u{3000}t", '\u{3000}'),
            ("bo\u{2028}t", '\u{2028}'),
        ] {
            match check(id) {
                Err(InvalidId::Character { ch: c, .. }) => assert_eq!(c, ch, "{id:?}"),
                other => panic!("{id:?}: {other:?}"),
            }
        }
        let msg = check("bo\u{200B}t").unwrap_err().to_string();
        assert!(msg.contains("U+200B") && msg.contains("byte 2"), "{msg}");
    }

    #[test]
    fn file_names_and_the_gateways_namespace() {
        for id in ["a/b", "a\\b", "..", "a..b", ".hidden", "../etc/passwd"] {
            assert_eq!(check(id), Err(InvalidId::PathLike), "{id}");
        }
        assert_eq!(check("system:gateway"), Err(InvalidId::Reserved));
        assert_eq!(check("system"), Ok(()));
    }

    #[test]
    fn lookalikes_share_a_skeleton() {
        // Cyrillic а (U+0430) in place of Latin a.
        assert!(confusable("admin", "\u{0430}dmin"));
        assert_eq!(skeleton("\u{0430}dmin"), skeleton("admin"));
        // Greek omicron, fullwidth letters, digits for letters.
        assert!(confusable("bot", "b\u{03BF}t"));
        assert!(confusable("bot", "\u{FF42}\u{FF4F}\u{FF54}"));
        assert!(confusable("agent-l", "agent-1"));
        // Not the same id twice, and not ids that merely differ.
        assert!(!confusable("bot", "bot"));
        assert!(!confusable("bot", "bat"));
        assert!(!confusable("agent-1", "agent-2"));
        // A check passes the lookalike itself: only a space knows what it resembles.
        assert_eq!(check("\u{0430}dmin"), Ok(()));
    }
}
