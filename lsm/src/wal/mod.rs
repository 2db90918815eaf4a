//! The log format shared by write-ahead logs and the manifest.
//!
//! A log is a sequence of 32 KiB blocks. A record never starts in the last 6 bytes of a block
//! (those are zero-filled); a payload that does not fit in the rest of a block is split into
//! FIRST / MIDDLE… / LAST fragments, otherwise it is one FULL fragment.
//!
//! ```text
//! fragment = checksum u32 LE | length u16 LE | type u8 | payload[length]
//! checksum = low 32 bits of xxh3-64(payload, seed = type)
//! type     = 1 FULL | 2 FIRST | 3 MIDDLE | 4 LAST
//! ```
//!
//! Each WAL payload is one [`crate::WriteBatch`]; each manifest payload is one version edit.

mod reader;
mod writer;

pub use reader::{Damage, LogReader, Record};
pub use writer::LogWriter;

/// Bytes in a log block.
pub const BLOCK_SIZE: usize = 32 * 1024;
/// Bytes in a fragment header.
pub const HEADER_SIZE: usize = 7;

/// Fragment types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum FragmentType {
    Full = 1,
    First = 2,
    Middle = 3,
    Last = 4,
}

impl FragmentType {
    fn from_u8(b: u8) -> Option<Self> {
        match b {
            1 => Some(Self::Full),
            2 => Some(Self::First),
            3 => Some(Self::Middle),
            4 => Some(Self::Last),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
