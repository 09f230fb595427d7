//! The bytes of a space's log and snapshots kept in local files (a single node's durable
//! state): pure encoding, decoding and torn-tail detection. Files, `fsync` and rotation
//! belong to the driver.
//!
//! A log file is a header line (`MEWLOG 1\n`) then entries, each
//! `[length: u32 LE][crc32 of seq and record: u32 LE][seq: u64 LE][record]`, the record
//! being a [`super::Record`]'s bytes. A snapshot file is a header line (`MEWSNAP 1\n`) then
//! `[length: u32 LE][crc32: u32 LE][applied: u64 LE][snapshot]`, the snapshot being
//! [`super::Replica::snapshot`]'s bytes. A crash may leave the log's last entry half
//! written: [`scan_log`] stops at the first entry that is incomplete or fails its checksum
//! and says how many bytes are good, so the driver cuts the rest. A header naming another
//! version is an error, never guessed at.
//!
//! A log may end in zero bytes: space a writer allocated ahead (earlier versions did: a
//! flush of a file whose blocks exist costs the disk a write, while one that grows the file
//! also commits the file system's journal). No entry begins with a zero head (sequence
//! numbers start at 1), so zeros to the end of the file are its clean end; zeros followed
//! by anything else are a torn tail like any other.

use bytes::Bytes;

/// The log file's header.
pub const LOG_HEADER: &[u8] = b"MEWLOG 1\n";
/// The snapshot file's header.
pub const SNAPSHOT_HEADER: &[u8] = b"MEWSNAP 1\n";
/// An entry's bytes before its record.
const ENTRY_HEAD: usize = 16;
/// Largest record a log entry may hold (a frame is far smaller; a length past it is a
/// corrupt length, not a record to allocate for).
pub const MAX_RECORD: usize = 256 << 20;

/// Why state files cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Written by a newer version of this format.
    #[error("written by a newer version of mew (format {found}, this build reads {known})")]
    Newer {
        /// The version found.
        found: String,
        /// The version this build writes.
        known: u32,
    },
    /// Not a file of this kind at all.
    #[error("not a mew state file (header {0:?})")]
    Unknown(String),
    /// A snapshot that fails its checksum or is cut short (snapshots are written whole and
    /// renamed into place, so this is damage, not a crash).
    #[error("the snapshot is damaged: {0}")]
    Damaged(String),
}

/// What [`scan_log`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogScan {
    /// Complete entries, `(seq, record bytes)`, in file order.
    pub entries: Vec<(u64, Bytes)>,
    /// Bytes from the file's start that hold the header and those entries.
    pub good_len: usize,
    /// Why the bytes after `good_len` were not read (`None`: the file ends cleanly).
    pub torn: Option<String>,
}

/// One log entry's bytes.
pub fn encode_entry(seq: u64, record: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ENTRY_HEAD + record.len());
    push_framed(&mut out, seq, record);
    out
}

/// Appends one log entry's bytes to `out`.
pub fn push_framed(out: &mut Vec<u8>, seq: u64, body: &[u8]) {
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&checksum(seq, body).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(body);
}

/// Appends one log entry to `out` whose record `write` appends (a record encoded in place,
/// not copied from a buffer of its own).
pub fn push_with(out: &mut Vec<u8>, seq: u64, write: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    push_unsealed(out, seq, write);
    seal(&mut out[at..]);
}

/// [`push_with`] without the entry's checksum, which [`seal`] adds: a writer can encode
/// entries where they are made and checksum them where they are written. An entry left
/// unsealed fails its checksum, so it is never read as written.
pub fn push_unsealed(out: &mut Vec<u8>, seq: u64, write: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0; ENTRY_HEAD]);
    write(out);
    let len = u32::try_from(out.len() - at - ENTRY_HEAD).unwrap_or(u32::MAX);
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    out[at + 8..at + ENTRY_HEAD].copy_from_slice(&seq.to_le_bytes());
}

/// Writes the checksums of whole entries lying back to back in `buf` (made by
/// [`push_unsealed`], or sealed already: the same checksum again).
///
/// # Panics
/// When `buf` does not hold whole entries: its maker broke that.
pub fn seal(buf: &mut [u8]) {
    let mut at = 0;
    while at < buf.len() {
        let head: [u8; ENTRY_HEAD] = buf[at..at + ENTRY_HEAD].try_into().expect("an entry head");
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let end = at + ENTRY_HEAD + len;
        // The sequence number and the record lie side by side: one pass over both is the
        // checksum of the two (the 8 bytes alone would take the slow path).
        let crc = crc32fast::hash(&buf[at + 8..end]);
        buf[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
}

fn checksum(seq: u64, body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(body);
    h.finalize()
}

/// Checks a header line: `Ok(true)` for this version, `Ok(false)` for an empty file.
fn header(bytes: &[u8], want: &[u8]) -> Result<bool, FormatError> {
    if bytes.is_empty() {
        return Ok(false);
    }
    if bytes.starts_with(want) {
        return Ok(true);
    }
    let line_end = bytes
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(bytes.len().min(32));
    let line = String::from_utf8_lossy(&bytes[..line_end.min(32)]).into_owned();
    let magic = &want[..want.len() - 3];
    // A header cut short by a crash right after the file was created.
    if want.starts_with(bytes) {
        return Ok(false);
    }
    if let Some(v) = line.strip_prefix(std::str::from_utf8(magic).unwrap_or_default()) {
        let known = 1;
        return Err(FormatError::Newer {
            found: v.trim().to_owned(),
            known,
        });
    }
    Err(FormatError::Unknown(line))
}

/// Reads a log file's bytes: its complete, intact entries and where they end.
pub fn scan_log(bytes: &Bytes) -> Result<LogScan, FormatError> {
    if !header(bytes, LOG_HEADER)? {
        return Ok(LogScan {
            entries: Vec::new(),
            good_len: 0,
            torn: (!bytes.is_empty()).then(|| "the header is cut short".to_owned()),
        });
    }
    let mut at = LOG_HEADER.len();
    let mut entries = Vec::new();
    let mut torn = None;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.iter().all(|&b| b == 0) {
            // Space allocated ahead, never written.
            break;
        }
        if rest.len() < ENTRY_HEAD {
            torn = Some(format!("{} bytes of an entry's head", rest.len()));
            break;
        }
        let word = |i: usize| u32::from_le_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
        let len = word(0) as usize;
        let crc = word(4);
        let mut s = [0u8; 8];
        s.copy_from_slice(&rest[8..16]);
        let seq = u64::from_le_bytes(s);
        if len > MAX_RECORD {
            torn = Some(format!("an entry claims {len} bytes"));
            break;
        }
        if rest.len() < ENTRY_HEAD + len {
            torn = Some(format!(
                "entry {seq} is cut short ({} of {len} bytes)",
                rest.len() - ENTRY_HEAD
            ));
            break;
        }
        let body = &rest[ENTRY_HEAD..ENTRY_HEAD + len];
        if checksum(seq, body) != crc {
            torn = Some(format!("an entry fails its checksum (claims entry {seq})"));
            break;
        }
        if entries
            .last()
            .is_some_and(|(prev, _): &(u64, Bytes)| seq <= *prev)
        {
            torn = Some(format!("entry {seq} is out of order"));
            break;
        }
        entries.push((seq, bytes.slice(at + ENTRY_HEAD..at + ENTRY_HEAD + len)));
        at += ENTRY_HEAD + len;
    }
    Ok(LogScan {
        entries,
        good_len: at,
        torn,
    })
}

/// A snapshot file's bytes.
pub fn encode_snapshot(applied: u64, snapshot: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SNAPSHOT_HEADER.len() + ENTRY_HEAD + snapshot.len());
    out.extend_from_slice(SNAPSHOT_HEADER);
    push_framed(&mut out, applied, snapshot);
    out
}

/// Reads a snapshot file's bytes: the entry it ends at and the replica's state.
pub fn decode_snapshot(bytes: &Bytes) -> Result<(u64, Bytes), FormatError> {
    if !header(bytes, SNAPSHOT_HEADER)? {
        return Err(FormatError::Damaged("the header is cut short".into()));
    }
    let mut with_log_header = Vec::with_capacity(LOG_HEADER.len() + bytes.len());
    with_log_header.extend_from_slice(LOG_HEADER);
    with_log_header.extend_from_slice(&bytes[SNAPSHOT_HEADER.len()..]);
    let scan = scan_log(&Bytes::from(with_log_header))?;
    match (scan.entries.as_slice(), scan.torn) {
        ([one], None) => Ok(one.clone()),
        (_, Some(why)) => Err(FormatError::Damaged(why)),
        _ => Err(FormatError::Damaged("no state in it".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(entries: &[(u64, &[u8])]) -> Vec<u8> {
        let mut out = LOG_HEADER.to_vec();
        for (s, r) in entries {
            out.extend_from_slice(&encode_entry(*s, r));
        }
        out
    }

    #[test]
    fn a_log_reads_back_and_every_cut_is_detected_at_the_last_whole_entry() {
        let bytes = log(&[(1, b"one"), (2, b"two\nlines"), (3, b"")]);
        let scan = scan_log(&Bytes::from(bytes.clone())).unwrap();
        assert_eq!(scan.good_len, bytes.len());
        assert_eq!(scan.torn, None);
        assert_eq!(
            scan.entries,
            vec![
                (1, Bytes::from_static(b"one")),
                (2, Bytes::from_static(b"two\nlines")),
                (3, Bytes::new())
            ]
        );
        let ends = [0, LOG_HEADER.len(), LOG_HEADER.len() + 19, bytes.len() - 16];
        for cut in 0..bytes.len() {
            let scan = scan_log(&Bytes::from(bytes[..cut].to_vec())).unwrap();
            let whole = ends.iter().rev().find(|e| **e <= cut).copied().unwrap();
            assert_eq!(scan.good_len, whole, "cut at {cut}");
            // Zeros are space allocated ahead (the first bytes of an empty record's head).
            let zeros = bytes[whole..cut].iter().all(|b| *b == 0);
            assert_eq!(scan.torn.is_some(), !zeros, "cut at {cut}");
        }
    }

    #[test]
    fn an_entry_written_in_place_is_the_entry_framed_from_a_buffer() {
        let mut a = b"x".to_vec();
        push_with(&mut a, 9, |o| o.extend_from_slice(b"record"));
        let mut b = b"x".to_vec();
        push_framed(&mut b, 9, b"record");
        assert_eq!(a, b);
        // Sealed later, several at once: the same bytes; unsealed, not an entry at all.
        let mut c = LOG_HEADER.to_vec();
        let mut d = LOG_HEADER.to_vec();
        for (seq, body) in [(1, &b"one"[..]), (2, b""), (3, b"three")] {
            push_unsealed(&mut c, seq, |o| o.extend_from_slice(body));
            push_framed(&mut d, seq, body);
        }
        let unsealed = Bytes::from(c.clone());
        assert_eq!(
            scan_log(&unsealed).unwrap().entries.len(),
            0,
            "unsealed entries fail"
        );
        seal(&mut c[LOG_HEADER.len()..]);
        assert_eq!(c, d);
        seal(&mut c[LOG_HEADER.len()..]);
        assert_eq!(c, d, "sealing again changes nothing");
    }

    #[test]
    fn zeros_to_the_end_are_the_clean_end_and_zeros_before_data_are_torn() {
        let mut bytes = log(&[(1, b"one"), (2, b"two")]);
        let end = bytes.len();
        for zeros in [1, 15, 16, 100] {
            let mut b = bytes.clone();
            b.extend_from_slice(&vec![0; zeros]);
            let scan = scan_log(&Bytes::from(b)).unwrap();
            assert_eq!(
                (scan.good_len, scan.torn, scan.entries.len()),
                (end, None, 2)
            );
        }
        bytes.extend_from_slice(&[0; 100]);
        // A later page written before an earlier one, then a crash.
        bytes[end + 60] = 1;
        let scan = scan_log(&Bytes::from(bytes.clone())).unwrap();
        assert_eq!((scan.good_len, scan.entries.len()), (end, 2));
        assert!(scan.torn.is_some());
        // A half-written entry in the allocated space.
        let mut bytes = log(&[(1, b"one")]);
        let end = bytes.len();
        let next = encode_entry(2, b"two");
        bytes.extend_from_slice(&next[..10]);
        bytes.extend_from_slice(&[0; 64]);
        let scan = scan_log(&Bytes::from(bytes)).unwrap();
        assert_eq!(scan.good_len, end);
        assert!(scan.torn.is_some());
    }

    #[test]
    fn a_flipped_byte_ends_the_log_before_it() {
        let bytes = log(&[(1, b"one"), (2, b"two")]);
        for i in LOG_HEADER.len()..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x20;
            let scan = scan_log(&Bytes::from(b)).unwrap();
            assert!(scan.torn.is_some(), "byte {i}");
            assert!(scan.entries.len() < 2, "byte {i}");
            for (s, r) in &scan.entries {
                assert_eq!((*s, &r[..]), (1, &b"one"[..]));
            }
        }
    }

    #[test]
    fn other_versions_and_other_files_are_errors() {
        assert!(matches!(
            scan_log(&Bytes::from_static(b"MEWLOG 2\nxxxx")),
            Err(FormatError::Newer { .. })
        ));
        assert!(matches!(
            scan_log(&Bytes::from_static(b"{\"hello\":1}\n")),
            Err(FormatError::Unknown(_))
        ));
        let empty = scan_log(&Bytes::new()).unwrap();
        assert_eq!((empty.good_len, empty.torn), (0, None));
        assert_eq!(scan_log(&Bytes::from_static(b"MEWL")).unwrap().good_len, 0);
    }

    #[test]
    fn snapshots_round_trip_and_damage_is_an_error() {
        let s = encode_snapshot(42, b"{\"state\":1}");
        assert_eq!(
            decode_snapshot(&Bytes::from(s.clone())).unwrap(),
            (42, Bytes::from_static(b"{\"state\":1}"))
        );
        let mut bad = s.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(
            decode_snapshot(&Bytes::from(bad)),
            Err(FormatError::Damaged(_))
        ));
        assert!(matches!(
            decode_snapshot(&Bytes::from(s[..s.len() - 3].to_vec())),
            Err(FormatError::Damaged(_))
        ));
        assert!(matches!(
            decode_snapshot(&Bytes::from_static(b"MEWSNAP 9\n")),
            Err(FormatError::Newer { .. })
        ));
    }
}
