//! Appending records to a log file.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{FragmentType, BLOCK_SIZE, HEADER_SIZE};
use crate::coding::checksum;

/// Appends records to a log file. Records are framed into an in-memory buffer by
/// [`LogWriter::add_record`] and reach the file with one `write` in [`LogWriter::write_pending`],
/// which is how a whole commit group costs one system call.
#[derive(Debug)]
pub struct LogWriter {
    file: Arc<File>,
    path: PathBuf,
    number: u64,
    block_offset: usize,
    written: u64,
    buf: Vec<u8>,
}

impl LogWriter {
    /// Creates (truncating) the log file at `path`.
    pub fn create(path: &Path, number: u64) -> std::io::Result<LogWriter> {
        let file = File::create(path)?;
        Ok(LogWriter {
            file: Arc::new(file),
            path: path.to_path_buf(),
            number,
            block_offset: 0,
            written: 0,
            buf: Vec::new(),
        })
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

    /// Writes every pending record to the file (one `write_all`).
    pub fn write_pending(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let r = (&*self.file).write_all(&self.buf);
        if r.is_ok() {
            self.written += self.buf.len() as u64;
        }
        self.buf.clear();
        r
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

    /// fsyncs the file's data.
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
}
