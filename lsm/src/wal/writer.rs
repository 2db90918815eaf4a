//! Appending records to a log file.
//!
//! A WAL is written through a shared memory map of a preallocated file: appending is a `memcpy`
//! into the page cache instead of a `write` system call per commit group. Bytes in the page
//! cache survive a process crash just as `write`'s do, and `fsync` on the file makes them
//! durable. The zero-filled preallocated tail reads as the end of the log (see the reader), and
//! the file is truncated to its written length when the writer finishes. Every
//! [`RELEASE_EVERY`] bytes, the pages behind the write position leave the process's resident set
//! (`MADV_DONTNEED`: for a shared file mapping this drops only the page table entries, and the
//! page cache keeps the data, dirty pages included), so a log costs no more resident memory than
//! `write` calls would. The manifest, written rarely, uses plain `write` calls.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::{MmapMut, UncheckedAdvice};

use super::{FragmentType, BLOCK_SIZE, HEADER_SIZE};
use crate::coding::checksum;

/// A mapped log releases the pages behind its write position each time it has written this
/// many bytes past the last release.
pub const RELEASE_EVERY: u64 = 1 << 20;

/// Releases are page-aligned to this (pages may be larger; a larger page only means the last
/// page written is released too, and faults back in from the page cache when written again).
const PAGE: u64 = 4096;

#[derive(Debug)]
enum Sink {
    /// Plain `write` calls.
    File,
    /// A shared mapping of the file's first `map.len()` bytes.
    Mapped(MmapMut),
}

/// Appends records to a log file. Records are framed into an in-memory buffer by
/// [`LogWriter::add_record`] and reach the file in [`LogWriter::write_pending`], so a whole
/// commit group costs one copy (or one system call).
#[derive(Debug)]
pub struct LogWriter {
    file: Arc<File>,
    path: PathBuf,
    number: u64,
    block_offset: usize,
    written: u64,
    buf: Vec<u8>,
    sink: Sink,
    /// Written through a mapping (which a failed growth drops: see `restore_after_failure`).
    mapped: bool,
    /// Mapped pages below this offset were released from the resident set.
    released: u64,
}

impl LogWriter {
    /// Creates (truncating) the log file at `path`, written with `write` calls.
    pub fn create(path: &Path, number: u64) -> std::io::Result<LogWriter> {
        Ok(Self::with_file(File::create(path)?, path, number))
    }

    fn with_file(file: File, path: &Path, number: u64) -> LogWriter {
        LogWriter {
            file: Arc::new(file),
            path: path.to_path_buf(),
            number,
            block_offset: 0,
            written: 0,
            buf: Vec::new(),
            sink: Sink::File,
            mapped: false,
            released: 0,
        }
    }

    /// Creates (truncating) the log file at `path`, preallocated to `capacity` bytes (rounded
    /// up to whole blocks) and written through a memory map that grows as needed.
    pub fn create_mapped(path: &Path, number: u64, capacity: u64) -> std::io::Result<LogWriter> {
        let file = File::options().read(true).write(true).create(true).truncate(true).open(path)?;
        let mut w = Self::with_file(file, path, number);
        w.mapped = true;
        if let Err(e) = w.remap(capacity.max(BLOCK_SIZE as u64).next_multiple_of(BLOCK_SIZE as u64)) {
            let _ = std::fs::remove_file(path); // no log is better than one that cannot be written
            return Err(e);
        }
        Ok(w)
    }

    /// Grows the file to `len` bytes, with disk space really reserved, and maps all of it.
    fn remap(&mut self, len: u64) -> std::io::Result<()> {
        self.sink = Sink::File; // unmap before resizing
        reserve(&self.file, len)?;
        // SAFETY: the file is this writer's own, opened read-write; nothing else maps it
        // writable or truncates it while the mapping lives (readers only `read` it, and the
        // writer drops the mapping before it truncates the file in `finish`/`Drop`).
        let map = unsafe { memmap2::MmapOptions::new().len(len as usize).map_mut(&*self.file)? };
        self.sink = Sink::Mapped(map);
        Ok(())
    }

    /// The file number of this log.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A handle another thread may `sync_data` on (the everysec syncer).
    pub fn file(&self) -> Arc<File> {
        Arc::clone(&self.file)
    }

    /// Bytes written to the file plus those still buffered.
    pub fn size(&self) -> u64 {
        self.written + self.buf.len() as u64
    }

    /// Frames `payload` into the pending buffer.
    pub fn add_record(&mut self, payload: &[u8]) {
        let mut rest = payload;
        let mut first = true;
        loop {
            let left_in_block = BLOCK_SIZE - self.block_offset;
            if left_in_block < HEADER_SIZE {
                // Too small for a header: zero-fill the block's trailer.
                self.buf.extend(std::iter::repeat_n(0u8, left_in_block));
                self.block_offset = 0;
            }
            let avail = BLOCK_SIZE - self.block_offset - HEADER_SIZE;
            let take = rest.len().min(avail);
            let last = take == rest.len();
            let kind = match (first, last) {
                (true, true) => FragmentType::Full,
                (true, false) => FragmentType::First,
                (false, true) => FragmentType::Last,
                (false, false) => FragmentType::Middle,
            };
            let (chunk, tail) = rest.split_at(take);
            self.buf.extend_from_slice(&checksum(kind as u8, chunk).to_le_bytes());
            self.buf.extend_from_slice(&(take as u16).to_le_bytes());
            self.buf.push(kind as u8);
            self.buf.extend_from_slice(chunk);
            self.block_offset += HEADER_SIZE + take;
            rest = tail;
            first = false;
            if last {
                return;
            }
        }
    }

    /// Writes every pending record to the file.
    pub fn write_pending(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let r = self.write_buf();
        if r.is_ok() {
            self.written += self.buf.len() as u64;
        }
        self.buf.clear();
        r
    }

    fn write_buf(&mut self) -> std::io::Result<()> {
        let end = self.written + self.buf.len() as u64;
        if let Sink::Mapped(map) = &self.sink {
            if end > map.len() as u64 {
                let mut len = (map.len() as u64).max(BLOCK_SIZE as u64);
                while len < end {
                    len *= 2;
                }
                self.remap(len)?;
            }
        }
        match &mut self.sink {
            Sink::File => (&*self.file).write_all(&self.buf),
            Sink::Mapped(map) => {
                map[self.written as usize..end as usize].copy_from_slice(&self.buf);
                let upto = end / PAGE * PAGE;
                if upto >= self.released + RELEASE_EVERY {
                    // SAFETY: a shared file mapping: MADV_DONTNEED drops this process's page
                    // table entries for the range and nothing else (the page cache keeps the
                    // bytes, dirty ones still to be written back); a later access faults the
                    // same bytes back in from the file. No reference into the range is held.
                    // Failing to release costs only memory, so the result is ignored.
                    let released = self.released as usize;
                    let _ = unsafe {
                        map.unchecked_advise_range(UncheckedAdvice::DontNeed, released, upto as usize - released)
                    };
                    self.released = upto;
                }
                Ok(())
            }
        }
    }

    /// Drops the records framed but not yet written (their write failed before it started),
    /// so framing continues from the last written byte.
    pub fn discard_pending(&mut self) {
        self.buf.clear();
        self.block_offset = (self.written % BLOCK_SIZE as u64) as usize;
    }

    /// Makes the writer usable again after a failed [`LogWriter::write_pending`] that left
    /// nothing of its records in the file (a mapped log that could not grow, e.g. on a full
    /// disk): the failed records are forgotten, framing continues from the last written byte,
    /// and the mapping is restored.
    pub fn restore_after_failure(&mut self) -> std::io::Result<()> {
        self.discard_pending();
        if self.mapped && matches!(self.sink, Sink::File) {
            let len = self.file.metadata()?.len().max(self.written).next_multiple_of(BLOCK_SIZE as u64);
            self.remap(len.max(BLOCK_SIZE as u64))?;
        }
        Ok(())
    }

    /// True if a failed write can have left part of a record in the file: only a log written
    /// with `write` calls (a mapped log reserves its space before copying anything).
    pub fn may_hold_partial_records(&self) -> bool {
        !self.mapped
    }

    /// Frames `payload`, writes it, and fsyncs when `sync`.
    pub fn append(&mut self, payload: &[u8], sync: bool) -> std::io::Result<()> {
        self.add_record(payload);
        self.write_pending()?;
        if sync {
            self.sync()?;
        }
        Ok(())
    }

    /// fsyncs the file's data (pages written through the mapping included).
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    /// Unmaps and cuts the preallocated tail off, leaving exactly the records written.
    pub fn finish(&mut self) -> std::io::Result<()> {
        if matches!(self.sink, Sink::Mapped(_)) {
            self.sink = Sink::File;
            self.file.set_len(self.written)?;
        }
        Ok(())
    }
}

/// Makes `file` `len` bytes long with its blocks allocated (`posix_fallocate`), so stores
/// through a mapping of it can never hit a full disk: a sparse `set_len` would let the disk
/// fill up later and turn a store into SIGBUS. A full disk is reported here, as an error.
fn reserve(file: &File, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let current = file.metadata()?.len();
    if len < current {
        return file.set_len(len);
    }
    let Ok(size) = libc::off_t::try_from(len) else {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "WAL size out of range"));
    };
    // SAFETY: the descriptor is valid for as long as `file` is borrowed; the call only
    // allocates blocks of that file and reads no memory of ours.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, size) };
    match rc {
        0 => Ok(()),
        // File systems that cannot preallocate: fall back to a sized (sparse) file.
        libc::EOPNOTSUPP | libc::EINVAL => file.set_len(len),
        errno => Err(std::io::Error::from_raw_os_error(errno)),
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        let _ = self.write_pending();
        let _ = self.finish();
    }
}
