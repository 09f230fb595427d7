//! A space's log file of grants and revocations, damaged: the input chooses the entries,
//! then bytes flipped, cut, removed and repeated, and a snapshot's position. Reading the
//! damaged file (`mew_core::cluster::journal::scan_log`) must never panic, and whatever it
//! accepts must be a prefix of the intact log that holds every entry before the first
//! damaged byte and leaves out no entry still whole in the file past its cut: so no
//! capability it grants was revoked by an entry the file still holds. Raw bytes are read
//! as a log and as a snapshot too.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use mew_core::cluster::journal::{self, LOG_HEADER};

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn word(data: &mut &[u8]) -> usize {
    let mut w = [0u8; 2];
    for b in &mut w {
        if let Some((first, rest)) = data.split_first() {
            *b = *first;
            *data = rest;
        }
    }
    u16::from_le_bytes(w) as usize
}

fuzz_target!(|data: &[u8]| {
    let raw = Bytes::copy_from_slice(data);
    let _ = journal::scan_log(&raw, 0);
    let _ = journal::decode_snapshot(&raw);
    let Some((&n, mut data)) = data.split_first() else {
        return;
    };
    // Entries after a snapshot at `after` (0: none).
    let after = u64::from(n >> 5);
    let n = usize::from(n & 31) + 1;
    let mut ops = Vec::with_capacity(n);
    for _ in 0..n {
        let b = data.first().copied().unwrap_or(0);
        data = data.get(1..).unwrap_or_default();
        ops.push((b & 1 == 1, (b >> 1) & 3, b >> 3));
    }
    let mut intact = LOG_HEADER.to_vec();
    let mut spans = Vec::new();
    for (i, (grant, cap, pad)) in ops.iter().enumerate() {
        let verb = if *grant { "grant" } else { "revoke" };
        let body = format!(
            "{{\"{verb}\":\"cap-{cap}\",\"pad\":\"{}\"}}",
            "p".repeat(*pad as usize)
        );
        let at = intact.len();
        intact.extend_from_slice(&journal::encode_entry(
            after + i as u64 + 1,
            body.as_bytes(),
        ));
        spans.push(at..intact.len());
    }
    let mut bytes = intact.clone();
    while !data.is_empty() && !bytes.is_empty() {
        let how = data[0] % 4;
        data = &data[1..];
        let len = bytes.len();
        let at = word(&mut data) % len;
        match how {
            0 => {
                let xor = data.first().copied().unwrap_or(1).max(1);
                data = data.get(1..).unwrap_or_default();
                bytes[at] ^= xor;
            }
            1 => bytes.truncate(at),
            2 => {
                let k = word(&mut data) % 64 + 1;
                bytes.drain(at..(at + k).min(len));
            }
            _ => {
                let k = word(&mut data) % 64 + 1;
                let to = word(&mut data) % (len + 1);
                let piece = bytes[at..(at + k).min(len)].to_vec();
                bytes.splice(to..to, piece);
            }
        }
    }
    let first_harm = intact
        .iter()
        .zip(&bytes)
        .position(|(a, b)| a != b)
        .unwrap_or(intact.len().min(bytes.len()));
    let Ok(scan) = journal::scan_log(&Bytes::from(bytes.clone()), after) else {
        return;
    };
    if scan.damaged.is_some() {
        return;
    }
    for (i, (seq, body)) in scan.entries.iter().enumerate() {
        let want = &intact[spans[i].start + 16..spans[i].end];
        assert_eq!((*seq, &body[..]), (after + i as u64 + 1, want));
    }
    let before = spans.iter().filter(|s| s.end <= first_harm).count();
    assert!(
        scan.entries.len() >= before,
        "an entry before the damage is lost"
    );
    let rest = &bytes[scan.good_len.min(bytes.len())..];
    for span in spans.iter().skip(scan.entries.len()) {
        assert!(
            !contains(rest, &intact[span.clone()]),
            "an entry is whole past the cut at {}",
            scan.good_len
        );
    }
});
