//! The engine's one error type.

use std::path::PathBuf;

/// Everything that can go wrong inside the engine.
///
/// Corruption is never silent: a bad checksum, a truncated block or an impossible length in a file
/// is reported with the file and the byte offset where it was found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error (full disk, permissions, …).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),

    /// Bytes on disk are not what the engine wrote.
    #[error("corruption in {file} at offset {offset}: {reason}", file = file.display())]
    Corruption {
        /// The file in which the corruption was found.
        file: PathBuf,
        /// Byte offset inside `file`.
        offset: u64,
        /// What was wrong.
        reason: String,
    },

    /// The caller passed something the engine cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A table needs a compression codec that this build does not include.
    #[error("{0} compression is not compiled into this build (enable the `{1}` feature of `lsm`)")]
    CodecUnavailable(&'static str, &'static str),

    /// The write-ahead log holding the requested sequence number is gone.
    #[error("the WAL holding sequence {0} has been deleted")]
    WalGone(u64),

    /// Another process (or another `Db` in this one) holds the directory's lock.
    #[error("database directory {0} is locked by another process")]
    Locked(PathBuf),

    /// The database has been closed.
    #[error("database is closed")]
    Closed,

    /// An earlier background or WAL failure left the database read-only until it is reopened.
    #[error("database is read-only after an earlier failure: {0}")]
    Poisoned(String),

    /// A read made with [`ReadOptions::cache_only`](crate::ReadOptions::cache_only) needs disk
    /// I/O (a table not open, a block not in the block cache): nothing was read; retry it
    /// without the option where blocking is allowed.
    #[error("the read needs disk I/O and was asked to use memory only")]
    WouldBlock,
}

/// Result type of the `lsm` crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Builds a [`Error::Corruption`].
    pub(crate) fn corruption(file: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Error {
        Error::Corruption { file: file.into(), offset, reason: reason.into() }
    }

    /// True for [`Error::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }

    /// A copy good enough to hand to every writer of a failed group (`io::Error` is not `Clone`).
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Io(e) => Error::Io(std::io::Error::new(e.kind(), e.to_string())),
            Error::Corruption { file, offset, reason } => {
                Error::Corruption { file: file.clone(), offset: *offset, reason: reason.clone() }
            }
            Error::InvalidArgument(s) => Error::InvalidArgument(s.clone()),
            Error::CodecUnavailable(a, b) => Error::CodecUnavailable(a, b),
            Error::WalGone(s) => Error::WalGone(*s),
            Error::Locked(p) => Error::Locked(p.clone()),
            Error::Closed => Error::Closed,
            Error::Poisoned(s) => Error::Poisoned(s.clone()),
            Error::WouldBlock => Error::WouldBlock,
        }
    }
}
