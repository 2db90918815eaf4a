//! Where a table's bytes come from: a memory map read in place, or the open file read with
//! `pread` block by block (see [`crate::TableReadMode`]).

use std::path::Path;

use bytes::Bytes;

use super::format::{decode_block, read_block_checked, BlockHandle, BLOCK_TRAILER_LEN};
use crate::{Error, Result};

/// Where a table's bytes come from.
#[derive(Debug)]
pub(super) enum Source {
    /// The whole file, memory-mapped (or held in memory).
    Mapped(Bytes),
    /// The open file, read with `pread` block by block.
    File { file: std::fs::File, len: u64 },
}

impl Source {
    pub(super) fn len(&self) -> u64 {
        match self {
            Source::Mapped(b) => b.len() as u64,
            Source::File { len, .. } => *len,
        }
    }

    /// `len` bytes at `offset`, which the caller checked lie inside the file.
    pub(super) fn read(&self, offset: u64, len: usize, path: &Path) -> Result<Bytes> {
        match self {
            Source::Mapped(b) => {
                let start = usize::try_from(offset).map_err(|_| Error::corruption(path, offset, "offset overflows"))?;
                b.get(start..start + len)
                    .map(|_| b.slice(start..start + len))
                    .ok_or_else(|| Error::corruption(path, offset, "read past the end of the file"))
            }
            Source::File { file, len: file_len } => {
                if offset.checked_add(len as u64).is_none_or(|end| end > *file_len) {
                    return Err(Error::corruption(path, offset, "read past the end of the file"));
                }
                Ok(Bytes::from(pread_exact(file, offset, len, path)?))
            }
        }
    }

    /// A block with its trailer, checked and decoded.
    pub(super) fn block(&self, h: BlockHandle, path: &Path, verify: bool) -> Result<Bytes> {
        match self {
            Source::Mapped(b) => read_block_checked(b, h, path, verify),
            Source::File { .. } => {
                let len = usize::try_from(h.size)
                    .ok()
                    .and_then(|s| s.checked_add(BLOCK_TRAILER_LEN))
                    .ok_or_else(|| Error::corruption(path, h.offset, "block size overflows"))?;
                let raw = self.read(h.offset, len, path).map_err(|_| {
                    Error::corruption(
                        path,
                        h.offset,
                        format!("block of {} bytes runs past the end of the file", h.size),
                    )
                })?;
                let block = decode_block(raw, h, path, verify)?;
                // An uncompressed block is a slice of the buffer read, whose trailer takes a
                // block of `block_size` bytes into the allocator's next size class (4 KiB + 5
                // bytes is served from 5 KiB): the cache keeps a copy of just the block.
                Ok(if block.len() as u64 == h.size { Bytes::copy_from_slice(&block) } else { block })
            }
        }
    }
}

/// `len` bytes at `offset` of `file`, read into a buffer that is not zeroed first (every block
/// read would otherwise pay a memset of its size).
fn pread_exact(file: &std::fs::File, offset: u64, len: usize, path: &Path) -> Result<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let mut buf: Vec<u8> = Vec::with_capacity(len);
    let mut done = 0;
    while done < len {
        let at = libc::off_t::try_from(offset + done as u64)
            .map_err(|_| Error::corruption(path, offset, "offset overflows"))?;
        // SAFETY: the destination is the buffer's spare capacity from `done` (at least
        // `len - done` bytes); pread writes at most that many bytes there.
        let n = unsafe { libc::pread(file.as_raw_fd(), buf.as_mut_ptr().add(done).cast(), len - done, at) };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(Error::corruption(path, offset, "read past the end of the file")),
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e.into());
                }
            }
        }
    }
    // SAFETY: pread initialised all `len` bytes.
    unsafe { buf.set_len(len) };
    Ok(buf)
}
