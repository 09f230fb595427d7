//! The bytes of a space's log and snapshots kept in local files (a single node's durable
//! state): pure encoding, decoding and torn-tail detection. Files, `fsync` and rotation
//! belong to the driver.
//!
//! A log file is a header line (`MEWLOG 1\n`) then entries, each
//! `[length: u32 LE][crc32 of seq and record: u32 LE][seq: u64 LE][record]`, the record
//! being a [`super::Record`]'s bytes. A snapshot file is a header line (`MEWSNAP 1\n`) then
//! `[length: u32 LE][crc32: u32 LE][applied: u64 LE][snapshot]`, the snapshot being
//! [`super::Replica::snapshot`]'s bytes. A crash may leave the log's last entry half
//! written: [`scan_log`] stops at the first entry that is incomplete, fails its checksum or
//! breaks the entries' order, and says how many bytes are good, so the driver cuts the
//! rest; unless a whole entry follows, which no crash leaves ([`LogScan::damaged`]: the
//! driver refuses the file, since cutting would drop acknowledged entries). A header
//! naming another version is an error, never guessed at.
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
    /// A whole entry lies after the unreadable bytes: they are damage, not a crash's torn
    /// tail, and cutting them would drop entries that were written (and may have been
    /// acknowledged) after them.
    pub damaged: Option<Resumes>,
}

/// The first whole entry found after damage in a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resumes {
    /// Where it starts, in bytes from the file's start.
    pub offset: usize,
    /// Its sequence number.
    pub seq: u64,
}

/// Bytes of the disk written whole or not at all (a sector): a crash that loses a write
/// leaves whole sectors of zeros in a file the write was extending.
pub const SECTOR: usize = 512;

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

/// Reads a log file's bytes: its complete, intact entries and where they end. `after` is
/// the entry the snapshot beside the log ends at (0 without one).
///
/// A file holds consecutive entries, the first no later than `after + 1`. The first
/// entry that is cut short, fails its checksum or breaks that order ends the scan. A
/// crash can only leave such bytes at the end: the writer appends, and anything written
/// after them was never flushed (their flush would have covered them). So the bytes after
/// them are searched for a whole entry later than the last one read ([`LogScan::damaged`]):
/// if there is one, the file was damaged where it had been written, and the entries after
/// the damage are as much the space's history as those before it. Whole sectors of zeros
/// between are the exception: a write the disk never got in a power loss, after which the
/// entries found were never flushed.
pub fn scan_log(bytes: &Bytes, after: u64) -> Result<LogScan, FormatError> {
    if !header(bytes, LOG_HEADER)? {
        return Ok(LogScan {
            entries: Vec::new(),
            good_len: 0,
            torn: (!bytes.is_empty()).then(|| "the header is cut short".to_owned()),
            damaged: None,
        });
    }
    let mut at = LOG_HEADER.len();
    let mut entries: Vec<(u64, Bytes)> = Vec::new();
    let mut torn = None;
    let mut damaged = None;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.iter().all(|&b| b == 0) {
            // Space allocated ahead, never written.
            break;
        }
        let last = entries.last().map(|(s, _)| *s);
        let (why, from) = match entry_at(rest) {
            Err(why) => (why, at + 1),
            Ok((seq, len)) => {
                let next = last.map_or(after.saturating_add(1), |l| l.saturating_add(1));
                if seq == next || (last.is_none() && seq <= next) {
                    entries.push((seq, bytes.slice(at + ENTRY_HEAD..at + ENTRY_HEAD + len)));
                    at += ENTRY_HEAD + len;
                    continue;
                }
                if seq > next {
                    // Whole, but entries before it are missing: never a crash's doing.
                    torn = Some(format!("entries {next} to {} are missing", seq - 1));
                    damaged = Some(Resumes { offset: at, seq });
                    break;
                }
                (
                    format!("entry {seq} is out of order"),
                    at + ENTRY_HEAD + len,
                )
            }
        };
        torn = Some(why);
        damaged = find_entry(
            bytes,
            at,
            from,
            last.map_or(1, |l| l + 1),
            last.unwrap_or(after),
        );
        break;
    }
    Ok(LogScan {
        entries,
        good_len: at,
        torn,
        damaged,
    })
}

/// The entry at the start of `rest`: its sequence number and record length, or why it is
/// not a whole entry.
fn entry_at(rest: &[u8]) -> Result<(u64, usize), String> {
    if rest.len() < ENTRY_HEAD {
        return Err(format!("{} bytes of an entry's head", rest.len()));
    }
    let word = |i: usize| u32::from_le_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
    let len = word(0) as usize;
    let crc = word(4);
    let mut s = [0u8; 8];
    s.copy_from_slice(&rest[8..16]);
    let seq = u64::from_le_bytes(s);
    if len > MAX_RECORD {
        return Err(format!("an entry claims {len} bytes"));
    }
    if rest.len() < ENTRY_HEAD + len {
        return Err(format!(
            "entry {seq} is cut short ({} of {len} bytes)",
            rest.len() - ENTRY_HEAD
        ));
    }
    if checksum(seq, &rest[ENTRY_HEAD..ENTRY_HEAD + len]) != crc {
        return Err(format!("an entry fails its checksum (claims entry {seq})"));
    }
    Ok((seq, len))
}

/// The first whole entry at or after `from` numbered from `lo` (and not absurdly far past
/// `base`, which keeps the search linear over bytes that are not entries), unless whole
/// zero sectors lie between `damage` and it.
fn find_entry(bytes: &[u8], damage: usize, from: usize, lo: u64, base: u64) -> Option<Resumes> {
    let hi = base.saturating_add(1 << 32);
    let end = bytes.len().checked_sub(ENTRY_HEAD)?;
    let found = (from..=end).find_map(|p| {
        let rest = &bytes[p..];
        let seq = u64::from_le_bytes(rest[8..16].try_into().unwrap_or_default());
        if !(lo..=hi).contains(&seq) {
            return None;
        }
        let (seq, _) = entry_at(rest).ok()?;
        Some(Resumes { offset: p, seq })
    })?;
    let lost_sector = (damage.next_multiple_of(SECTOR)..)
        .step_by(SECTOR)
        .take_while(|s| s + SECTOR <= found.offset)
        .any(|s| bytes[s..s + SECTOR].iter().all(|&b| b == 0));
    (!lost_sector).then_some(found)
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
    let scan = scan_log(&Bytes::from(with_log_header), u64::MAX)?;
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
        let scan = scan_log(&Bytes::from(bytes.clone()), 0).unwrap();
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
        // A cut never leaves damage: nothing whole follows the last whole entry.
        for cut in 0..bytes.len() {
            let scan = scan_log(&Bytes::from(bytes[..cut].to_vec()), 0).unwrap();
            let whole = ends.iter().rev().find(|e| **e <= cut).copied().unwrap();
            assert_eq!(scan.good_len, whole, "cut at {cut}");
            // Zeros are space allocated ahead (the first bytes of an empty record's head).
            let zeros = bytes[whole..cut].iter().all(|b| *b == 0);
            assert_eq!(scan.torn.is_some(), !zeros, "cut at {cut}");
            assert_eq!(scan.damaged, None, "cut at {cut}");
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
            scan_log(&unsealed, 0).unwrap().entries.len(),
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
            let scan = scan_log(&Bytes::from(b), 0).unwrap();
            assert_eq!(
                (scan.good_len, scan.torn, scan.entries.len()),
                (end, None, 2)
            );
        }
        bytes.extend_from_slice(&[0; 100]);
        // A later page written before an earlier one, then a crash.
        bytes[end + 60] = 1;
        let scan = scan_log(&Bytes::from(bytes.clone()), 0).unwrap();
        assert_eq!((scan.good_len, scan.entries.len()), (end, 2));
        assert!(scan.torn.is_some());
        // A half-written entry in the allocated space.
        let mut bytes = log(&[(1, b"one")]);
        let end = bytes.len();
        let next = encode_entry(2, b"two");
        bytes.extend_from_slice(&next[..10]);
        bytes.extend_from_slice(&[0; 64]);
        let scan = scan_log(&Bytes::from(bytes), 0).unwrap();
        assert_eq!(scan.good_len, end);
        assert!(scan.torn.is_some());
    }

    #[test]
    fn a_flipped_byte_in_the_last_entry_is_a_torn_tail_and_before_it_damage() {
        let bytes = log(&[(1, b"one"), (2, b"two")]);
        let second = LOG_HEADER.len() + ENTRY_HEAD + 3;
        for i in LOG_HEADER.len()..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x20;
            let scan = scan_log(&Bytes::from(b), 0).unwrap();
            assert!(scan.torn.is_some(), "byte {i}");
            if i < second {
                // Entry 2 is whole after the damage: never a crash's doing.
                assert_eq!(scan.entries, vec![], "byte {i}");
                assert_eq!(scan.good_len, LOG_HEADER.len(), "byte {i}");
                assert_eq!(
                    scan.damaged,
                    Some(Resumes {
                        offset: second,
                        seq: 2
                    }),
                    "byte {i}"
                );
            } else {
                assert_eq!(scan.entries, vec![(1, Bytes::from_static(b"one"))]);
                assert_eq!((scan.good_len, scan.damaged), (second, None), "byte {i}");
            }
        }
    }

    #[test]
    fn missing_or_repeated_entries_are_damage_and_a_log_follows_its_snapshot() {
        let e = |seq: u64, body: &[u8]| encode_entry(seq, body);
        let with = |parts: &[Vec<u8>]| {
            let mut out = LOG_HEADER.to_vec();
            for p in parts {
                out.extend_from_slice(p);
            }
            Bytes::from(out)
        };
        // Entry 2 cut out whole: 3 follows 1.
        let scan = scan_log(&with(&[e(1, b"a"), e(3, b"c")]), 0).unwrap();
        assert_eq!(scan.entries.len(), 1);
        let at = LOG_HEADER.len() + ENTRY_HEAD + 1;
        assert_eq!(scan.damaged, Some(Resumes { offset: at, seq: 3 }));
        // Without a snapshot the log starts at entry 1; after one at 7, at 8 or before.
        let late = with(&[e(5, b"e"), e(6, b"f")]);
        let scan = scan_log(&late, 0).unwrap();
        assert_eq!(
            (scan.entries.len(), scan.damaged.map(|d| d.seq)),
            (0, Some(5))
        );
        assert_eq!(scan_log(&late, 7).unwrap().entries.len(), 2);
        assert_eq!(scan_log(&late, 4).unwrap().entries.len(), 2);
        assert!(scan_log(&late, 3).unwrap().damaged.is_some());
        // An entry repeated, then later ones: damage; repeated at the end: a torn tail.
        let scan = scan_log(&with(&[e(1, b"a"), e(2, b"b"), e(1, b"a"), e(3, b"c")]), 0).unwrap();
        assert_eq!(
            (scan.entries.len(), scan.damaged.map(|d| d.seq)),
            (2, Some(3))
        );
        let scan = scan_log(&with(&[e(1, b"a"), e(2, b"b"), e(2, b"b")]), 0).unwrap();
        assert_eq!((scan.entries.len(), scan.damaged), (2, None));
        assert!(scan.torn.is_some());
    }

    #[test]
    fn whole_zero_sectors_before_later_entries_are_a_lost_write_not_damage() {
        // A power loss: the disk got a later sector of a write but not an earlier one.
        let mut bytes = log(&[(1, b"one")]);
        let end = bytes.len();
        let two = encode_entry(2, &[b'x'; 1200]);
        bytes.extend_from_slice(&two);
        let three = bytes.len();
        bytes.extend_from_slice(&encode_entry(3, b"three"));
        let mut lost = bytes.clone();
        lost[SECTOR..2 * SECTOR].fill(0);
        let scan = scan_log(&Bytes::from(lost), 0).unwrap();
        assert_eq!((scan.good_len, scan.damaged), (end, None));
        assert!(scan.torn.is_some());
        // The same bytes zeroed short of a whole sector: damage.
        let mut flipped = bytes.clone();
        flipped[SECTOR + 1..2 * SECTOR].fill(0);
        let scan = scan_log(&Bytes::from(flipped), 0).unwrap();
        assert_eq!(
            scan.damaged,
            Some(Resumes {
                offset: three,
                seq: 3
            })
        );
    }

    #[test]
    fn other_versions_and_other_files_are_errors() {
        assert!(matches!(
            scan_log(&Bytes::from_static(b"MEWLOG 2\nxxxx"), 0),
            Err(FormatError::Newer { .. })
        ));
        assert!(matches!(
            scan_log(&Bytes::from_static(b"{\"hello\":1}\n"), 0),
            Err(FormatError::Unknown(_))
        ));
        let empty = scan_log(&Bytes::new(), 0).unwrap();
        assert_eq!((empty.good_len, empty.torn), (0, None));
        assert_eq!(
            scan_log(&Bytes::from_static(b"MEWL"), 0).unwrap().good_len,
            0
        );
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

    /// Damage done to an intact log in the property test.
    #[derive(Debug, Clone)]
    enum Harm {
        Flip { at: usize, xor: u8 },
        Cut { len: usize },
        Remove { at: usize, n: usize },
        Repeat { at: usize, n: usize, to: usize },
    }

    fn harm(bytes: &[u8], h: &Harm) -> Vec<u8> {
        let len = bytes.len();
        let mut b = bytes.to_vec();
        match *h {
            Harm::Flip { at, xor } => b[at % len] ^= xor,
            Harm::Cut { len: l } => b.truncate(l % (len + 1)),
            Harm::Remove { at, n } => {
                let at = at % len;
                b.drain(at..(at + n).min(len));
            }
            Harm::Repeat { at, n, to } => {
                let at = at % len;
                let piece = bytes[at..(at + n).min(len)].to_vec();
                let to = to % (len + 1);
                b.splice(to..to, piece);
            }
        }
        b
    }

    fn harms() -> impl proptest::strategy::Strategy<Value = Harm> {
        use proptest::prelude::*;
        prop_oneof![
            (any::<usize>(), 1..=255u8).prop_map(|(at, xor)| Harm::Flip { at, xor }),
            any::<usize>().prop_map(|len| Harm::Cut { len }),
            (any::<usize>(), 1..64usize).prop_map(|(at, n)| Harm::Remove { at, n }),
            (any::<usize>(), 1..64usize, any::<usize>()).prop_map(|(at, n, to)| Harm::Repeat {
                at,
                n,
                to
            }),
        ]
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// A log of grants and revocations, flipped, cut and spliced: a recovery that
        /// starts holds a prefix of the log's entries, holds every entry before the first
        /// harmed byte, and leaves out no revocation whose entry is still whole in the
        /// file; so no capability it grants was revoked by an entry the file still holds.
        /// Whatever else it may find, it refuses.
        #[test]
        fn a_recovered_state_never_holds_a_revoked_capability(
            ops in proptest::collection::vec((proptest::bool::ANY, 0..4u8), 1..24),
            harmed in proptest::collection::vec(harms(), 1..3),
        ) {
            let bodies: Vec<Vec<u8>> = ops
                .iter()
                .map(|(grant, cap)| {
                    let verb = if *grant { "grant" } else { "revoke" };
                    format!("{{\"{verb}\":\"cap-{cap}\"}}").into_bytes()
                })
                .collect();
            let mut intact = LOG_HEADER.to_vec();
            let mut spans = Vec::new();
            for (i, body) in bodies.iter().enumerate() {
                let at = intact.len();
                intact.extend_from_slice(&encode_entry(i as u64 + 1, body));
                spans.push(at..intact.len());
            }
            let mut bytes = intact.clone();
            for h in &harmed {
                if !bytes.is_empty() {
                    bytes = harm(&bytes, h);
                }
            }
            let first_harm = intact
                .iter()
                .zip(&bytes)
                .position(|(a, b)| a != b)
                .unwrap_or(intact.len().min(bytes.len()));
            let Ok(scan) = scan_log(&Bytes::from(bytes.clone()), 0) else {
                // A damaged header: refused.
                return Ok(());
            };
            if scan.damaged.is_some() {
                return Ok(());
            }
            // A prefix of the log, and all of it before the first harmed byte.
            for (i, (seq, body)) in scan.entries.iter().enumerate() {
                proptest::prop_assert_eq!(*seq, i as u64 + 1);
                proptest::prop_assert_eq!(&body[..], &bodies[i][..]);
            }
            let before = spans.iter().filter(|s| s.end <= first_harm).count();
            proptest::prop_assert!(scan.entries.len() >= before);
            // Nothing left out of it is still whole in the file past the cut.
            let rest = &bytes[scan.good_len.min(bytes.len())..];
            for (i, span) in spans.iter().enumerate().skip(scan.entries.len()) {
                proptest::prop_assert!(
                    !contains(rest, &intact[span.clone()]),
                    "entry {} is whole past the cut at {}", i + 1, scan.good_len
                );
            }
            // So the state it holds revokes all that the file still revokes.
            let mut held = std::collections::BTreeSet::new();
            for (grant, cap) in &ops[..scan.entries.len()] {
                if *grant { held.insert(*cap); } else { held.remove(cap); }
            }
            for (i, (grant, cap)) in ops.iter().enumerate().skip(scan.entries.len()) {
                if !grant && held.contains(cap) {
                    proptest::prop_assert!(!contains(&bytes, &intact[spans[i].clone()]));
                }
            }
        }

        /// A log cut anywhere (a crash) always starts, with every entry before the cut.
        #[test]
        fn a_cut_log_always_starts(n in 1..20usize, cut in proptest::prelude::any::<usize>()) {
            let mut intact = LOG_HEADER.to_vec();
            let mut ends = Vec::new();
            for i in 0..n {
                intact.extend_from_slice(&encode_entry(i as u64 + 1, format!("entry {i}").as_bytes()));
                ends.push(intact.len());
            }
            let cut = cut % (intact.len() + 1);
            let scan = scan_log(&Bytes::from(intact[..cut].to_vec()), 0).unwrap();
            proptest::prop_assert_eq!(scan.damaged, None);
            proptest::prop_assert_eq!(scan.entries.len(), ends.iter().filter(|e| **e <= cut).count());
        }
    }
}
