//! A `Version`: the immutable set of live tables, level by level.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::edit::{NewFile, NUM_LEVELS};
use crate::cache::TableCache;
use crate::iter::BoxedIter;
use crate::key;
use crate::memtable::Lookup;
use crate::sstable::{bloom, Fetch, PointFetch, Table};
use crate::Result;

/// A live table and what the manifest records about it. Shared by every version that lists it.
#[derive(Debug)]
pub struct FileMeta {
    /// File number.
    pub number: u64,
    /// Bytes on disk.
    pub size: u64,
    /// Smallest internal key.
    pub smallest: Vec<u8>,
    /// Largest internal key.
    pub largest: Vec<u8>,
    /// Smallest sequence number.
    pub smallest_seq: u64,
    /// Largest sequence number.
    pub largest_seq: u64,
    /// Entries.
    pub num_entries: u64,
    /// Range tombstones.
    pub num_range_dels: u64,
    /// Point tombstones.
    pub num_deletions: u64,
    /// A window of entries is mostly tombstones (see `sstable::DELETION_TRIGGER`).
    pub marked_for_compaction: bool,
    path: PathBuf,
    tables: Option<Arc<TableCache>>,
    /// Set once no future version lists this table: the file is deleted when the last version
    /// (and so the last reader) holding it lets go.
    obsolete: AtomicBool,
}

impl Drop for FileMeta {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            if let Some(t) = &self.tables {
                t.evict(self.number);
            }
            match std::fs::remove_file(&self.path) {
                Ok(()) => {
                    tracing::debug!(target: "lsm::compaction", file = %self.path.display(), "deleted obsolete table")
                }
                Err(e) => {
                    tracing::warn!(target: "lsm::compaction", file = %self.path.display(), error = %e, "could not delete obsolete table")
                }
            }
        }
    }
}

impl FileMeta {
    /// The metadata of `f`, a table in `dir`, opened through `tables` when given.
    pub fn new(dir: &Path, f: &NewFile, tables: Option<Arc<TableCache>>) -> FileMeta {
        FileMeta {
            number: f.number,
            size: f.size,
            smallest: f.smallest.clone(),
            largest: f.largest.clone(),
            smallest_seq: f.smallest_seq,
            largest_seq: f.largest_seq,
            num_entries: f.num_entries,
            num_range_dels: f.num_range_dels,
            num_deletions: f.num_deletions,
            marked_for_compaction: f.marked_for_compaction,
            path: crate::filename::table_path(dir, f.number),
            tables,
            obsolete: AtomicBool::new(false),
        }
    }

    /// Marks the table for deletion once no version holds it.
    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }

    /// The manifest record for this file.
    pub fn to_new_file(&self) -> NewFile {
        NewFile {
            number: self.number,
            size: self.size,
            smallest: self.smallest.clone(),
            largest: self.largest.clone(),
            smallest_seq: self.smallest_seq,
            largest_seq: self.largest_seq,
            num_entries: self.num_entries,
            num_range_dels: self.num_range_dels,
            num_deletions: self.num_deletions,
            marked_for_compaction: self.marked_for_compaction,
        }
    }

    /// The open table, from the table cache.
    pub fn table(&self) -> Result<Arc<Table>> {
        self.table_fetch(false)
    }

    /// [`FileMeta::table`]; with `cache_only`, only if it is open already (opening reads the
    /// file): otherwise [`Error::WouldBlock`](crate::Error::WouldBlock).
    pub fn table_fetch(&self, cache_only: bool) -> Result<Arc<Table>> {
        match &self.tables {
            Some(t) if cache_only => t.get_open(self.number).ok_or(crate::Error::WouldBlock),
            Some(t) => t.get(self.number),
            None if cache_only => Err(crate::Error::WouldBlock),
            None => Table::open(&self.path),
        }
    }

    /// True if `user_key` lies within this file's key range.
    pub fn covers(&self, user_key: &[u8]) -> bool {
        user_key >= key::user_key(&self.smallest) && user_key <= key::user_key(&self.largest)
    }
}

/// An immutable snapshot of the live tables. L0 tables may overlap and are ordered newest first;
/// every other level is one sorted run ordered by smallest key.
#[derive(Debug, Default, Clone)]
pub struct Version {
    /// Tables per level.
    pub levels: [Vec<Arc<FileMeta>>; NUM_LEVELS],
}

impl Version {
    /// Sorts each level into its canonical order.
    pub fn sort_levels(&mut self) {
        self.levels[0].sort_by(|a, b| b.largest_seq.cmp(&a.largest_seq).then(b.number.cmp(&a.number)));
        for level in &mut self.levels[1..] {
            level.sort_by(|a, b| key::compare(&a.smallest, &b.smallest));
        }
    }

    /// Every live table.
    pub fn files(&self) -> impl Iterator<Item = (usize, &Arc<FileMeta>)> {
        self.levels.iter().enumerate().flat_map(|(l, fs)| fs.iter().map(move |f| (l, f)))
    }

    /// The newest visible version of `user_key` at `seq` in the tables, given the newest range
    /// tombstone `tomb` already seen above them (memtables). Returns the point version found
    /// (if any) and the newest covering tombstone seen, for the caller to weigh.
    ///
    /// Sources are searched newest first; every version of a key in a deeper source is older
    /// than every version (and covering tombstone) in a shallower one, so the search stops at the
    /// first point version or covering tombstone.
    ///
    /// With `fetch.cache_only`, a lookup that needs disk I/O fails with
    /// [`Error::WouldBlock`](crate::Error::WouldBlock) (see [`crate::ReadOptions::cache_only`]).
    pub fn get(
        &self,
        user_key: &[u8],
        seq: u64,
        mut tomb: Option<u64>,
        fetch: PointFetch,
    ) -> Result<(Option<Lookup>, Option<u64>)> {
        let cache_only = fetch.cache_only;
        if tomb.is_some() {
            return Ok((None, tomb));
        }
        let hash = bloom::hash_key(user_key);
        let target = key::seek_key(user_key, seq);
        // Tables the cache has open are borrowed from its lock-free copy (no reference count
        // written per lookup: two threads reading one hot table would bounce it).
        let open = self.files().find_map(|(_, f)| f.tables.as_ref()).map(|t| t.open_tables());
        for f in self.candidates(user_key, &target) {
            let fetched;
            let table = match open.as_ref().and_then(|o| o.get(&f.number)) {
                Some(t) => {
                    t.mark_used();
                    t
                }
                None => {
                    fetched = f.table_fetch(cache_only)?;
                    &fetched
                }
            };
            if f.num_range_dels > 0 {
                tomb = tomb.max(table.max_covering_tombstone(user_key, seq));
            }
            let found = table.get_fetch(user_key, seq, hash, fetch)?;
            if found.is_some() || tomb.is_some() {
                return Ok((found, tomb));
            }
        }
        Ok((None, tomb))
    }

    /// The tables a lookup of `user_key` at `target` (its seek key) searches, newest first: the
    /// L0 tables whose range covers it, then the one table of each deeper level that may hold
    /// it.
    fn candidates<'a>(&'a self, user_key: &'a [u8], target: &'a [u8]) -> impl Iterator<Item = &'a Arc<FileMeta>> {
        let level_files = self.levels[1..].iter().filter_map(move |level| {
            // Compared as internal keys, so a tombstone's end sentinel does not claim the key
            // it stops before.
            let i = level.partition_point(|f| key::compare(&f.largest, target).is_lt());
            level.get(i).filter(|f| key::user_key(&f.smallest) <= user_key)
        });
        self.levels[0].iter().filter(move |f| f.covers(user_key)).chain(level_files)
    }

    /// Starts loading into the CPU's cache the filter lines a lookup of `user_key` (whose
    /// [`bloom::hash_key`] is `hash`) reads first in the open tables it would search.
    pub fn prefetch_point(&self, user_key: &[u8], hash: u64) {
        let Some(open) = self.files().find_map(|(_, f)| f.tables.as_ref()).map(|t| t.open_tables()) else {
            return;
        };
        let target = key::seek_key(user_key, key::MAX_SEQUENCE);
        for f in self.candidates(user_key, &target) {
            if let Some(t) = open.get(&f.number) {
                t.prefetch_filter(hash);
            }
        }
    }

    /// The tables with range tombstones (opening them, unless `cache_only`).
    pub fn tombstone_sources(
        &self,
        out: &mut Vec<Arc<dyn crate::range_del::TombstoneSource>>,
        cache_only: bool,
    ) -> Result<()> {
        for (_, f) in self.files().filter(|(_, f)| f.num_range_dels > 0) {
            out.push(f.table_fetch(cache_only)?);
        }
        Ok(())
    }

    /// One cursor per L0 table (newest first), then one concatenating cursor per deeper level.
    pub fn iterators(&self, out: &mut Vec<BoxedIter>, fetch: Fetch) -> Result<()> {
        for f in &self.levels[0] {
            out.push(Box::new(f.table_fetch(fetch.cache_only)?.iter_fetch(fetch)));
        }
        for level in &self.levels[1..] {
            if !level.is_empty() {
                out.push(Box::new(crate::iter::LevelIter::with_fetch(level.clone(), fetch)));
            }
        }
        Ok(())
    }

    /// Number of tables in `level`.
    pub fn num_files(&self, level: usize) -> usize {
        self.levels[level].len()
    }
}
