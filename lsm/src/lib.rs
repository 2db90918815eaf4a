//! `lsm`: the log-structured merge-tree storage engine under Shale.
//!
//! An embedded, persistent, ordered key-value store in the family of LevelDB and RocksDB:
//! writes go to a write-ahead log and a skip-list memtable, memtables are flushed to immutable
//! block-based sorted tables (with bloom filters and snappy/zstd compression), and reads merge
//! the memtables and tables newest first.
//!
//! ```
//! use lsm::{Db, Options, ReadOptions, WriteBatch, WriteOptions};
//!
//! let dir = tempfile::tempdir()?;
//! let db = Db::open(dir.path(), Options::default())?;
//!
//! db.put(b"user:1", b"ada")?;
//! let mut batch = WriteBatch::new();
//! batch.put(b"user:2", b"grace").put(b"user:3", b"barbara").delete(b"user:1");
//! db.write(batch, &WriteOptions::synced())?;
//!
//! let snapshot = db.snapshot();
//! db.put(b"user:2", b"hopper")?;
//! assert_eq!(db.get(b"user:2")?.as_deref(), Some(&b"hopper"[..]));
//! assert_eq!(db.get_with(b"user:2", &ReadOptions::new().snapshot(&snapshot))?.as_deref(), Some(&b"grace"[..]));
//!
//! let users: Vec<_> = db.prefix(b"user:").map(|kv| kv.map(|(k, _)| k)).collect::<Result<_, _>>()?;
//! assert_eq!(users, [&b"user:2"[..], &b"user:3"[..]]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The on-disk formats are described in `FORMAT.md` next to this crate's `Cargo.toml`.

#![warn(missing_docs)]

pub mod allocator;
pub mod batch;
pub mod cache;
mod coding;
pub mod compaction;
mod db;
mod error;
pub mod fault;
pub mod filename;
pub mod iter;
pub mod key;
pub mod manifest;
pub mod memtable;
mod options;
mod pages;
pub mod range_del;
pub mod repair;
mod snapshot;
pub mod sstable;
pub mod stripe;
pub mod wal;

pub use batch::WriteBatch;
pub use bytes::Bytes;
pub use compaction::{CompactionFilter, Decision};
pub use db::{Commit, Committed, Db, LevelStats, LiveFile, Stats, WalTail, WeakDb, WeakSnapshot, WriteTicket};
pub use error::{Error, Result};
pub use iter::{DbIterator, Range};
pub use options::{
    Compression, MutableOptions, Options, ReadOptions, SyncMode, TableReadMode, WalRecoveryMode, WriteOptions,
};
pub use repair::{repair, RepairReport};
pub use snapshot::Snapshot;

/// Starts loading the cache line at `p` into the CPU's cache, so that a lookup soon after finds
/// it there (a hint: it never faults and changes nothing; a no-op off x86-64). The memtable
/// prefetches the bloom lines and point-index slots of a batch's next updates; the server does
/// the same for its own tables larger than the caches.
#[inline]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint to the CPU; it reads nothing the program sees, never
    // faults, and any address may be given.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
