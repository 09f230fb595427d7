//! Appending to a large, busy file without the page cache.
//!
//! The audit trail of a busy space writes a few kilobytes per envelope. Through the page
//! cache that costs the writing thread more than formatting them did: every page is
//! allocated, zeroed, copied into and accounted for, and freed again when a rotated file is
//! deleted. Written with `O_DIRECT` (Linux), whole blocks go from this file's buffer to the
//! disk: a fraction of the CPU time per byte on ext4, and nothing left to evict.
//!
//! Direct writes must start and end on block boundaries. So [`DirectAppend::settle`], which
//! makes every byte appended visible to readers of the file, writes the whole blocks held
//! directly and the partial last block through the page cache; that block is then completed
//! through the page cache too (a direct write over a page the cache holds would first wait
//! for the cache to write it out), and the blocks after it go directly again. A busy writer
//! thus sends all but a few kilobytes per settle around the cache, and an idle one writes
//! as it always did. A file system that refuses direct I/O (tmpfs on older kernels, some
//! network file systems) gets everything through the page cache.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The alignment of offsets, lengths and memory that direct I/O asks for (4 KiB covers
/// devices with 512-byte and 4 KiB logical blocks).
const BLOCK: usize = 4096;
/// Bytes held before they are written. A direct write costs mostly per request (on a
/// virtio disk, 1 GiB took 0.45 s of system time in 64 KiB writes, 0.21 s in 256 KiB,
/// 0.08 s in 1 MiB, 0.05 s in 4 MiB; through the page cache, 0.25-0.3 s); the buffer is
/// the memory an open audit file costs.
pub const CAPACITY: usize = 1024 * 1024;

/// A file appended to from one thread, in whole blocks with `O_DIRECT` where the file
/// system allows it.
pub struct DirectAppend {
    /// The direct descriptor, `None` where the file system refused it.
    direct: Option<File>,
    /// An ordinary descriptor: the partial last block, and everything when `direct` is
    /// `None`.
    plain: File,
    /// [`CAPACITY`] bytes at a block-aligned address, at `buf[base..]`.
    buf: Box<[u8]>,
    base: usize,
    /// Bytes held, from `buf[base]`, which is at file offset `at` (a block boundary).
    len: usize,
    at: u64,
    /// Whether the held bytes are all in the file already (written by [`Self::settle`]).
    settled: bool,
    /// Whether the block at `at` went (in part) through the page cache: it is completed
    /// that way.
    cached_head: bool,
}

impl DirectAppend {
    /// Opens (creating, mode 0600) `path` for appending.
    pub fn open(path: &Path) -> io::Result<DirectAppend> {
        Self::open_with(path, true)
    }

    /// [`DirectAppend::open`], with direct I/O only if `direct` (and the file system lets).
    fn open_with(path: &Path, direct: bool) -> io::Result<DirectAppend> {
        let mut o = OpenOptions::new();
        o.read(true).write(true).create(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        // Created first: the direct descriptor opens the file that exists then.
        let plain = o.open(path)?;
        let direct = direct.then(|| open_direct(path)).flatten();
        let buf = vec![0u8; CAPACITY + BLOCK].into_boxed_slice();
        let base = buf.as_ptr().align_offset(BLOCK);
        let size = plain.metadata()?.len();
        let mut f = DirectAppend {
            direct,
            plain,
            buf,
            base,
            len: 0,
            at: size,
            settled: true,
            cached_head: false,
        };
        if f.direct.is_some() {
            // The partial last block is held, to be written again whole.
            let partial = (size % BLOCK as u64) as usize;
            f.at = size - partial as u64;
            f.plain
                .read_exact_at(&mut f.buf[base..base + partial], f.at)?;
            f.len = partial;
            f.cached_head = partial > 0;
        }
        Ok(f)
    }

    /// Flushes the file's data to the disk (what [`Self::settle`] wrote included).
    pub fn sync_data(&self) -> io::Result<()> {
        self.plain.sync_data()
    }

    /// Whether writes bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// The file's length once everything appended is written.
    pub fn size(&self) -> u64 {
        self.at + self.len as u64
    }

    /// Appends `bytes`, writing whole blocks whenever the buffer fills.
    pub fn append(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let n = bytes.len().min(CAPACITY - self.len);
            let from = self.base + self.len;
            self.buf[from..from + n].copy_from_slice(&bytes[..n]);
            self.len += n;
            self.settled = false;
            bytes = &bytes[n..];
            if self.len == CAPACITY {
                self.write_blocks()?;
            }
        }
        Ok(())
    }

    /// Writes every whole block held; the partial last one stays (all of it without direct
    /// I/O).
    pub fn write_blocks(&mut self) -> io::Result<()> {
        if self.direct.is_none() {
            let all = self.len;
            return self.write_plain(all);
        }
        // The head block first, through the page cache, when it went that way before; the
        // bytes held move once, after both writes.
        let mut head = 0;
        if self.cached_head {
            if self.len < BLOCK {
                return Ok(());
            }
            self.plain
                .write_all_at(&self.buf[self.base..self.base + BLOCK], self.at)?;
            self.cached_head = false;
            head = BLOCK;
        }
        let whole = (self.len - head) - (self.len - head) % BLOCK;
        if whole > 0
            && let Some(d) = &self.direct
        {
            let from = self.base + head;
            if let Err(e) = d.write_all_at(&self.buf[from..from + whole], self.at + head as u64) {
                self.consume(head);
                if e.raw_os_error() == Some(libc::EINVAL) {
                    // Opened, then refused (some file systems only check at the write).
                    self.direct = None;
                    return self.write_blocks();
                }
                return Err(e);
            }
        }
        self.consume(head + whole);
        Ok(())
    }

    /// Writes the first `n` bytes held through the page cache, and lets them go.
    fn write_plain(&mut self, n: usize) -> io::Result<()> {
        if n > 0 {
            self.plain
                .write_all_at(&self.buf[self.base..self.base + n], self.at)?;
            self.consume(n);
        }
        Ok(())
    }

    /// Lets the first `n` bytes held go (they are in the file).
    fn consume(&mut self, n: usize) {
        self.buf
            .copy_within(self.base + n..self.base + self.len, self.base);
        self.len -= n;
        self.at += n as u64;
    }

    /// Writes everything held, the partial last block through the page cache, so that a
    /// reader of the file sees every byte appended.
    pub fn settle(&mut self) -> io::Result<()> {
        self.write_blocks()?;
        if self.len > 0 && !self.settled {
            self.plain
                .write_all_at(&self.buf[self.base..self.base + self.len], self.at)?;
            self.cached_head = self.direct.is_some();
        }
        self.settled = true;
        Ok(())
    }
}

impl DirectAppend {
    /// [`Self::settle`] for a file whose readers take zeros after its data for its end (a
    /// state log): the partial last block goes directly too, padded with zeros to a whole
    /// block, and is written again whole as it fills, so that nothing goes through the page
    /// cache (a page the cache holds is written again by the next flush, and direct writes
    /// beside cached pages cost the file system more). The file may end in up to a block of
    /// zeros. The block held when the file was opened still goes through the cache until it
    /// is whole.
    pub fn settle_padded(&mut self) -> io::Result<()> {
        if self.cached_head {
            // Completes the cached block when enough is held (and clears the flag).
            self.write_blocks()?;
        }
        if self.cached_head || self.direct.is_none() {
            return self.settle();
        }
        if self.len == 0 || self.settled {
            self.settled = true;
            return Ok(());
        }
        // One request for the whole blocks and the padded last one: a direct write costs
        // mostly per request.
        let padded = self.len.next_multiple_of(BLOCK);
        self.buf[self.base + self.len..self.base + padded].fill(0);
        if let Some(d) = &self.direct
            && let Err(e) = d.write_all_at(&self.buf[self.base..self.base + padded], self.at)
        {
            if e.raw_os_error() == Some(libc::EINVAL) {
                self.direct = None;
                return self.settle();
            }
            return Err(e);
        }
        self.consume(self.len - self.len % BLOCK);
        self.settled = true;
        Ok(())
    }
}

impl Drop for DirectAppend {
    fn drop(&mut self) {
        // Whatever is held reaches the file (errors were reported by earlier writes).
        let _ = self.settle();
    }
}

#[cfg(target_os = "linux")]
fn open_direct(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok()
}

#[cfg(not(target_os = "linux"))]
fn open_direct(_: &Path) -> Option<File> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(name: &str) -> mew_tests::scratch::Scratch {
        mew_tests::scratch::Scratch::new("direct", name)
    }

    fn line(i: usize) -> Vec<u8> {
        format!("{{\"n\":{i},\"pad\":\"{}\"}}\n", "x".repeat(i % 300)).into_bytes()
    }

    #[test]
    fn appends_across_blocks_and_reopens_a_partial_block() {
        let d = tempdir("append");
        let p = d.join("a.jsonl");
        let mut want = Vec::new();
        let mut f = DirectAppend::open(&p).unwrap();
        for i in 0..5000 {
            let l = line(i);
            f.append(&l).unwrap();
            want.extend_from_slice(&l);
            if i % 997 == 0 {
                // Settling midway puts the partial block in the file; later direct writes
                // cover it again.
                f.settle().unwrap();
                assert_eq!(std::fs::read(&p).unwrap(), want);
            }
        }
        assert_eq!(f.size(), want.len() as u64);
        // Dropped without a settle: what it held still reaches the file.
        drop(f);
        assert_eq!(std::fs::read(&p).unwrap(), want);
        // A file that ends mid-block is appended to after its last byte.
        let mut f = DirectAppend::open(&p).unwrap();
        assert_eq!(f.size(), want.len() as u64);
        f.append(b"tail\n").unwrap();
        want.extend_from_slice(b"tail\n");
        f.settle().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), want);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn without_direct_io_the_same_bytes_go_through_the_page_cache() {
        let d = tempdir("plain");
        let p = d.join("c.jsonl");
        std::fs::write(&p, b"earlier\n").unwrap();
        let mut f = DirectAppend::open_with(&p, false).unwrap();
        assert!(!f.is_direct());
        assert_eq!(f.size(), 8);
        let mut want = b"earlier\n".to_vec();
        for i in 0..3000 {
            let l = line(i);
            f.append(&l).unwrap();
            want.extend_from_slice(&l);
        }
        f.write_blocks().unwrap();
        assert_eq!(
            std::fs::read(&p).unwrap(),
            want,
            "everything, not whole blocks only"
        );
        f.append(b"last\n").unwrap();
        want.extend_from_slice(b"last\n");
        f.settle().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), want);
    }

    #[test]
    fn whole_blocks_reach_the_file_before_settling_and_the_rest_after() {
        let d = tempdir("blocks");
        let p = d.join("b.jsonl");
        let mut f = DirectAppend::open(&p).unwrap();
        // A new file gets direct I/O wherever a file the same folder already holds does.
        let probe = d.join("probe");
        std::fs::write(&probe, b"").unwrap();
        assert_eq!(f.is_direct(), open_direct(&probe).is_some());
        let bytes = vec![b'y'; BLOCK * 2 + 100];
        f.append(&bytes).unwrap();
        f.write_blocks().unwrap();
        let on_disk = std::fs::read(&p).unwrap().len();
        if f.is_direct() {
            assert_eq!(on_disk, BLOCK * 2, "the partial block waits");
        } else {
            assert_eq!(on_disk, bytes.len());
        }
        f.settle().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), bytes);
        // The settled partial block is completed through the page cache, the next whole
        // one goes directly, the new partial one waits again.
        let more = vec![b'z'; BLOCK * 2];
        f.append(&more).unwrap();
        f.write_blocks().unwrap();
        let mut want = bytes.clone();
        want.extend_from_slice(&more);
        let on_disk = std::fs::read(&p).unwrap();
        if f.is_direct() {
            assert_eq!(
                on_disk,
                want[..BLOCK * 4],
                "two more blocks, not the partial one"
            );
        } else {
            assert_eq!(on_disk, want);
        }
        f.settle().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), want);
    }

    #[test]
    fn padded_settles_leave_zeros_after_the_data_and_write_over_them() {
        let d = tempdir("padded");
        let p = d.join("log");
        std::fs::write(&p, b"HEAD\n").unwrap();
        let mut f = DirectAppend::open(&p).unwrap();
        let direct = f.is_direct();
        let mut want = b"HEAD\n".to_vec();
        // What a reader sees: the data, then zeros to the end (up to a block of them).
        let check = |want: &[u8], padded: bool| {
            let got = std::fs::read(&p).unwrap();
            assert_eq!(&got[..want.len()], want);
            assert!(got[want.len()..].iter().all(|b| *b == 0));
            assert!(got.len() - want.len() < BLOCK);
            if direct && padded {
                assert_eq!(got.len() % BLOCK, 0, "padded to a block");
            }
        };
        for i in 0..4000 {
            let l = line(i);
            f.append(&l).unwrap();
            want.extend_from_slice(&l);
            if i % 333 == 0 {
                f.settle_padded().unwrap();
                // The block held at opening goes through the page cache until it is whole.
                check(&want, want.len() > BLOCK);
            }
        }
        f.settle_padded().unwrap();
        check(&want, true);
        assert_eq!(f.size(), want.len() as u64);
        // Opened again after the data (the zeros cut, as a log's reader does).
        drop(f);
        let f = OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(want.len() as u64).unwrap();
        drop(f);
        let mut f = DirectAppend::open(&p).unwrap();
        f.append(b"more\n").unwrap();
        want.extend_from_slice(b"more\n");
        f.settle_padded().unwrap();
        check(&want, false);
        let big = vec![b'q'; BLOCK * 3];
        f.append(&big).unwrap();
        want.extend_from_slice(&big);
        f.settle_padded().unwrap();
        check(&want, true);
    }
}
