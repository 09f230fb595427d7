//! JSON text written by hand where the core writes it on a hot path (audit lines, log
//! records' heads): strings and numbers, the same way everywhere.

/// A JSON string literal: quotes, backslashes and every control character escaped.
pub(crate) fn push_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    // Ids and names almost never need escaping: one pass to check, one copy.
    if bytes
        .iter()
        .all(|&b| b >= 0x20 && b != b'"' && b != b'\\' && b != 0x7f)
    {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f | 0x7f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// A JSON number from an unsigned integer.
pub(crate) fn push_u64(out: &mut Vec<u8>, n: u64) {
    // Two digits at a time from a table: a 13-digit timestamp in a few dozen instructions
    // rather than one division per digit (every log record and audit line carries one).
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_strings_read_back_as_written() {
        for n in [0, 9, 10, 99, 1_736_416_800_000, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
        for s in ["local", "a\"b\\c", "tab\there", "\u{1}\u{7f}é"] {
            let mut out = Vec::new();
            push_str(&mut out, s);
            assert_eq!(serde_json::from_slice::<String>(&out).unwrap(), s);
        }
    }
}
