//! Appending records to a log file.
//!
//! A WAL is written through a shared memory map of a preallocated file: appending is a `memcpy`
//! into the page cache instead of a `write` system call per commit group. Bytes in the page
//! cache survive a process crash just as `write`'s do, and `fsync` on the file makes them
//! durable. The zero-filled preallocated tail reads as the end of the log (see the reader), and
//! the file is truncated to its written length when the writer finishes. The manifest, written
//! rarely, uses plain `write` calls.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::MmapMut;

use super::{FragmentType, BLOCK_SIZE, HEADER_SIZE};
use crate::coding::checksum;

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
        }
    }

    /// Creates (truncating) the log file at `path`, preallocated to `capacity` bytes (rounded
    /// up to whole blocks) and written through a memory map that grows as needed.
    pub fn create_mapped(path: &Path, number: u64, capacity: u64) -> std::io::Result<LogWriter> {
        let file = File::options().read(true).write(true).create(true).truncate(true).open(path)?;
        let mut w = Self::with_file(file, path, number);
        w.remap(capacity.max(BLOCK_SIZE as u64).next_multiple_of(BLOCK_SIZE as u64))?;
        Ok(w)
    }

    /// Grows the file to `len` bytes and maps all of it.
    fn remap(&mut self, len: u64) -> std::io::Result<()> {
        self.sink = Sink::File; // unmap before resizing
        self.file.set_len(len)?;
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
                Ok(())
            }
        }
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

impl Drop for LogWriter {
    fn drop(&mut self) {
        let _ = self.write_pending();
        let _ = self.finish();
    }
}
