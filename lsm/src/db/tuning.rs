//! Settings that change while the database is open: the WAL sync policy and the options of
//! [`MutableOptions`](crate::MutableOptions) (RocksDB's `SetOptions`), and what memory the
//! engine holds.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{lock, Db};
use crate::{Result, SyncMode};

impl Db {
    /// Changes the WAL sync policy for writes from now on (Redis's `CONFIG SET appendfsync`).
    /// Switching away from [`SyncMode::Never`] fsyncs what is already written.
    pub fn set_sync_mode(&self, mode: SyncMode) -> Result<()> {
        self.inner.sync_mode.store(mode as u8, Ordering::Release);
        if mode != SyncMode::Never {
            let file = Arc::clone(&lock(&self.inner.wal_file));
            file.sync_data()?;
        }
        Ok(())
    }

    /// Changes options while the database is open (RocksDB's `SetOptions`; see
    /// [`MutableOptions`](crate::MutableOptions) for when each takes effect). Invalid values
    /// (a codec this build lacks) change nothing and return `Err`.
    pub fn set_options(&self, changes: &crate::MutableOptions) -> Result<()> {
        let inner = &self.inner;
        let next = {
            let mut current = inner.options.write().unwrap_or_else(|e| e.into_inner());
            let next = changes.apply_to(&current);
            next.validate()?;
            *current = Arc::new(next.clone());
            next
        };
        if changes.block_cache_size.is_some() {
            inner.tables.block_cache().set_capacity(next.block_cache_size);
        }
        if let (Some(rows), Some(_)) = (inner.tables.block_cache().rows(), changes.row_cache_size) {
            rows.set_capacity(next.row_cache_size);
        }
        tracing::info!(target: "lsm::db", ?changes, "options changed");
        // Writers waiting in a stall and idle compaction threads look again.
        inner.signal_work();
        if changes.wal_ttl.is_some() || changes.wal_size_limit.is_some() {
            inner.purge_wals();
        }
        Ok(())
    }

    /// Bytes held in memory by the memtables (active and frozen, with their bloom filters and
    /// point indexes), the block cache, the open tables' indexes and filters (charged to the
    /// block cache's capacity by default, see [`crate::Options::charge_table_readers`]) and
    /// the row cache: what the engine's memory use depends on, cheap enough to ask before
    /// every write.
    pub fn memory_usage(&self) -> usize {
        let sv = self.inner.super_version();
        let memtables: usize =
            std::iter::once(&sv.mem).chain(sv.imm.iter()).map(|m| m.approximate_size() + m.index_memory()).sum();
        let caches = self.inner.tables.block_cache();
        memtables + caches.usage() + caches.readers_memory() + caches.row_usage()
    }
}
