//! Text helpers every kind of pattern uses: byte equality tuned for short strings, and
//! error reasons on one line.

/// Byte equality that stays inline for the short strings patterns and payload keys are
/// made of; a `memcmp` call costs more than the comparison itself at these sizes.
#[inline]
pub(crate) fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    // Two overlapping loads cover every length in the range.
    fn two<const N: usize>(a: &[u8], b: &[u8]) -> bool {
        a.first_chunk::<N>() == b.first_chunk::<N>() && a.last_chunk::<N>() == b.last_chunk::<N>()
    }
    match a.len() {
        0 => true,
        1..4 => a.iter().zip(b).all(|(x, y)| x == y),
        4..8 => two::<4>(a, b),
        8..=16 => two::<8>(a, b),
        _ => a == b,
    }
}

/// The `regex` crate's syntax errors span several lines; reasons are shown on one.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_equality() {
        let words = [
            "",
            "a",
            "ab",
            "abc",
            "abcd",
            "abcde",
            "abcdefg",
            "abcdefgh",
            "abcdefghi",
            "abcdefghijklmnop",
            "abcdefghijklmnopq",
            "abcdefghijklmnoq",
            "xbcdefghijklmnop",
            "abcdefgX",
            "Abcd",
            "abCd",
            "abXde",
        ];
        for a in words {
            for b in words {
                assert_eq!(bytes_eq(a.as_bytes(), b.as_bytes()), a == b, "{a} {b}");
            }
        }
    }
}
