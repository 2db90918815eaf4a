//! Background work: flushing frozen memtables to L0 tables, and the everysec WAL syncer.

use std::io::BufWriter;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{lock, DbInner, SuperVersion};
use crate::cache::BlockCache;
use crate::filename;
use crate::iter::InternalIterator;
use crate::key;
use crate::manifest::{NewFile, VersionEdit};
use crate::memtable::Memtable;
use crate::sstable::{TableBuilder, TableOptions};
use crate::{Result, SyncMode};

/// Writes a memtable's entries and range tombstones to table `number` in `dir`; `None` if it
/// holds nothing. The file is fsynced; on failure it is removed.
///
/// As RocksDB's flush does, a version shadowed by a newer one of the same key that every
/// snapshot able to see it would see instead (both between the same two of `snapshots`, the
/// live snapshots' sequence numbers, ascending) is left out: a key overwritten a thousand
/// times since the last flush — a counter, a list's metadata, a bitmap segment each SETBIT
/// rewrites — reaches level 0 once, not a thousand times, and no later read or compaction
/// steps over the rest. Every write of the memtable is visible by the time it is flushed (a
/// memtable is frozen between write groups), so a reader without a snapshot reads at or past
/// all of them. Tombstones are kept (older versions may lie in tables), and range tombstones
/// are all written. With `cache`, its data blocks
/// go into that block cache as they are written (see [`crate::Options::prepopulate_block_cache`];
/// uncompressed ones only for a table read with `pread`).
pub(crate) fn build_table(
    dir: &Path,
    number: u64,
    mem: &Arc<Memtable>,
    opts: &TableOptions,
    cache: Option<(Arc<BlockCache>, crate::TableReadMode)>,
    snapshots: &[u64],
) -> Result<Option<NewFile>> {
    let mut iter = mem.iter();
    iter.seek_to_first()?;
    let tombstones = mem.range_tombstones();
    if !iter.valid() && tombstones.is_empty() {
        return Ok(None);
    }
    let path = filename::table_path(dir, number);
    let result = (|| {
        let file = std::fs::File::create(&path)?;
        let mut b = TableBuilder::new(BufWriter::with_capacity(1 << 20, file), opts.clone())?;
        // No more user keys than entries.
        b.expect_keys(mem.len());
        if let Some((cache, mode)) = cache {
            b.cache_blocks(cache, number, mode == crate::TableReadMode::Pread);
        }
        for t in tombstones {
            b.add_range_tombstone(t);
        }
        // The user key of the last version written, and its stripe: the first snapshot that
        // sees it (`snapshots.len()`: only readers without one).
        let mut last_key: Vec<u8> = Vec::new();
        let mut last_stripe: Option<usize> = None;
        let mut shadowed = 0u64;
        while iter.valid() {
            let ikey = iter.key();
            let (user, seq) = (key::user_key(ikey), key::trailer(ikey) >> 8);
            let stripe = snapshots.partition_point(|&s| s < seq);
            if user == last_key.as_slice() {
                if last_stripe == Some(stripe) {
                    shadowed += 1;
                    iter.next()?;
                    continue;
                }
            } else {
                last_key.clear();
                last_key.extend_from_slice(user);
            }
            last_stripe = Some(stripe);
            b.add(ikey, iter.value())?;
            iter.next()?;
        }
        if shadowed > 0 {
            tracing::debug!(target: "lsm::flush", table = number, shadowed, "left out versions no reader can see");
        }
        finish_table_file(&path, number, b, opts)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&path);
    }
    result.map(Some)
}

/// Finishes table `number`, fsyncs it, and returns its manifest record.
pub(crate) fn finish_table_file(
    path: &Path,
    number: u64,
    b: TableBuilder<BufWriter<std::fs::File>>,
    opts: &TableOptions,
) -> Result<NewFile> {
    let (w, props, size) = b.finish()?;
    let file = w.into_inner().map_err(|e| e.into_error())?;
    crate::fault::check(&opts.faults, crate::fault::IoOp::TableSync, path)?;
    file.sync_all()?;
    Ok(NewFile::from_properties(number, size, &props))
}

impl DbInner {
    /// The flush thread: waits for frozen memtables and writes the oldest to L0, one at a time.
    pub(super) fn flush_loop(self: Arc<Self>) {
        loop {
            {
                let mut bg = lock(&self.bg);
                loop {
                    if bg.shutdown {
                        return;
                    }
                    if !self.is_poisoned.load(Ordering::Acquire) && !self.super_version().imm.is_empty() {
                        break;
                    }
                    bg = self.bg_cv.wait(bg).unwrap_or_else(|e| e.into_inner());
                }
            }
            let sv = self.super_version();
            // A memtable was frozen, so the active one is new: make its lookup structures'
            // pages resident before the writer reaches them (see `Memtable::prefault`).
            sv.mem.prefault();
            let Some(imm) = sv.imm.last().cloned() else {
                continue;
            };
            drop(sv);
            let flushed = self.flush_memtable(&imm);
            drop(imm);
            match flushed {
                // The memtable's memory is free now (unless a reader still holds it): the
                // application may hand it back to the OS.
                Ok(()) => {
                    if let Some(release) = &self.opts().memory_release {
                        (release.0)();
                    }
                }
                // A table that could not be built was removed: retryable on a full disk. A
                // failed manifest write was already recorded as fatal by flush_memtable.
                Err(e) => {
                    self.poison_retryable(e);
                }
            }
            self.signal_work();
        }
    }

    /// Writes `imm` (the oldest frozen memtable) to an L0 table and drops it and its WAL.
    fn flush_memtable(&self, imm: &Arc<Memtable>) -> Result<()> {
        let number = lock(&self.versions).new_file_number();
        let options = self.opts();
        let opts = TableOptions::from_options(&options);
        // A memtable with range deletions, or one frozen to return the memory of data just
        // dropped, mostly holds dead data (a deleted collection, a flushed database), which
        // compaction is about to remove: not worth the cache.
        let cache = (options.prepopulate_block_cache && !imm.has_range_tombstones() && !imm.is_dropped())
            .then(|| (Arc::clone(self.tables.block_cache()), options.table_read_mode));
        let snapshots = self.snapshots.all();
        let file = build_table(&self.dir, number, imm, &opts, cache, &snapshots)?;
        if let Some(f) = &file {
            // Opened now, as RocksDB does after a flush (its index and filter read while the
            // file is in the page cache): a memory-only read cannot open a table, so until a
            // plain read opened it, every memory-only lookup reaching it would fail, even one
            // its bloom filter answers.
            if let Err(e) = self.tables.get(f.number) {
                let _ = std::fs::remove_file(filename::table_path(&self.dir, f.number));
                return Err(e);
            }
        }
        let bytes = file.as_ref().map_or(0, |f| f.size);
        let mut edit =
            VersionEdit { last_sequence: Some(self.visible_seq.load(Ordering::Acquire)), ..Default::default() };
        edit.added.extend(file.map(|f| (0, f)));
        {
            let mut versions = lock(&self.versions);
            // WALs older than the next memtable's are now reflected in tables.
            let next_log = {
                let sv = self.super_version();
                let i = sv.imm.iter().position(|m| Arc::ptr_eq(m, imm)).unwrap_or(0);
                if i == 0 {
                    sv.mem.wal_number()
                } else {
                    sv.imm[i - 1].wal_number()
                }
            };
            edit.log_number = Some(next_log);
            versions.log_and_apply(edit).map_err(|e| self.poison(e))?;
            let version = versions.current();
            self.set_super_version(|sv| SuperVersion {
                mem: Arc::clone(&sv.mem),
                imm: sv.imm.iter().filter(|m| !Arc::ptr_eq(m, imm)).cloned().collect(),
                version,
            });
        }
        self.retire_wal(imm.wal_number());
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes_flushed.fetch_add(bytes, Ordering::Relaxed);
        tracing::debug!(target: "lsm::flush", table = number, bytes, entries = imm.len(), "memtable flushed to L0");
        Ok(())
    }

    /// The everysec syncer: fsyncs the active WAL once a second.
    pub(super) fn sync_loop(self: Arc<Self>) {
        loop {
            let deadline = std::time::Instant::now() + Duration::from_secs(1);
            let mut bg = lock(&self.bg);
            loop {
                if bg.shutdown {
                    return;
                }
                let now = std::time::Instant::now();
                if now >= deadline {
                    break;
                }
                bg = self.bg_cv.wait_timeout(bg, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
            }
            drop(bg);
            if self.sync_mode() == SyncMode::EverySec {
                let file = Arc::clone(&lock(&self.wal_file));
                let path = filename::wal_path(&self.dir, lock(&self.wal).log.number());
                let synced = crate::fault::check(&self.opts().faults, crate::fault::IoOp::WalSync, &path)
                    .and_then(|()| file.sync_data());
                if let Err(e) = synced {
                    self.poison(e.into()); // a failed fsync is never retried
                }
            }
            if !self.opts().wal_ttl.is_zero() {
                self.purge_wals();
            }
        }
    }
}
