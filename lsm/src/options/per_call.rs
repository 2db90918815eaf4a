//! Options of one call: a read or iterator ([`ReadOptions`]), a write ([`WriteOptions`]).

use crate::snapshot::Snapshot;

/// Options for one read or iterator.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Read as of this snapshot instead of the latest state.
    pub snapshot: Option<Snapshot>,
    /// Keep blocks read by this operation in the block cache (default `true`; bulk scans may
    /// turn it off).
    pub fill_cache: bool,
    /// Verify block checksums (default `true`; blocks are always verified the first time
    /// they are read from disk, this only matters for blocks read in place).
    pub verify_checksums: bool,
    /// Serve the read from memory only — memtables, tables already open, blocks already in the
    /// block cache — and fail with [`Error::WouldBlock`](crate::Error::WouldBlock) where disk
    /// I/O would be needed (RocksDB's `kBlockCacheTier`). For callers that must never block,
    /// such as an async runtime's thread, which retry elsewhere on that error. Tables read
    /// in place (`TableReadMode::Mmap`) count as disk: touching their pages may fault.
    pub cache_only: bool,
    /// Keep the row a point lookup finds in a table in the row cache (default `true`; see
    /// [`Options::row_cache_size`]). A read made to decide a write of the same key (a
    /// read-modify-write, or a check whether the key exists before it is overwritten) is
    /// better off without it: the write puts a newer version in the memtable, which every
    /// later lookup finds first, so the cached row would never answer again while it takes the
    /// place of one that might.
    pub fill_row_cache: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl ReadOptions {
    /// Defaults: latest state, fill the cache, verify checksums.
    pub fn new() -> Self {
        ReadOptions {
            snapshot: None,
            fill_cache: true,
            verify_checksums: true,
            cache_only: false,
            fill_row_cache: true,
        }
    }

    /// Keeps (or not) the rows point lookups find in the row cache (see
    /// [`ReadOptions::fill_row_cache`]).
    #[must_use]
    pub fn fill_row_cache(mut self, yes: bool) -> Self {
        self.fill_row_cache = yes;
        self
    }

    /// Reads from memory only (see [`ReadOptions::cache_only`]).
    #[must_use]
    pub fn cache_only(mut self, yes: bool) -> Self {
        self.cache_only = yes;
        self
    }
    /// Reads as of `snapshot`.
    #[must_use]
    pub fn snapshot(mut self, snapshot: &Snapshot) -> Self {
        self.snapshot = Some(snapshot.clone());
        self
    }
}

/// Options for one write.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Fsync the WAL before returning, whatever the database's [`SyncMode`] (default `false`).
    pub sync: bool,
}

impl WriteOptions {
    /// A write that is durable when it returns.
    pub fn synced() -> Self {
        WriteOptions { sync: true }
    }
}
