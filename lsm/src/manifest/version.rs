//! A `Version`: the immutable set of live tables, level by level.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::edit::{NewFile, NUM_LEVELS};
use crate::cache::TableCache;
use crate::iter::BoxedIter;
use crate::key;
use crate::memtable::Lookup;
use crate::sstable::{bloom, Table};
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
        }
    }

    /// The open table, from the table cache.
    pub fn table(&self) -> Result<Arc<Table>> {
        match &self.tables {
            Some(t) => t.get(self.number),
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

    /// The newest version of `user_key` with sequence number `<= seq` in the tables.
    pub fn get(&self, user_key: &[u8], seq: u64) -> Result<Option<Lookup>> {
        let hash = bloom::hash_key(user_key);
        for f in &self.levels[0] {
            if f.covers(user_key) {
                if let Some(l) = f.table()?.get(user_key, seq, hash)? {
                    return Ok(Some(l));
                }
            }
        }
        for level in &self.levels[1..] {
            // First file whose largest key is >= user_key (files in a level never share a user key).
            let i = level.partition_point(|f| key::user_key(&f.largest) < user_key);
            if let Some(f) = level.get(i) {
                if f.covers(user_key) {
                    if let Some(l) = f.table()?.get(user_key, seq, hash)? {
                        return Ok(Some(l));
                    }
                }
            }
        }
        Ok(None)
    }

    /// One cursor per L0 table (newest first), then one concatenating cursor per deeper level.
    pub fn iterators(&self, out: &mut Vec<BoxedIter>, fill_cache: bool) -> Result<()> {
        for f in &self.levels[0] {
            out.push(Box::new(f.table()?.iter_with(fill_cache)));
        }
        for level in &self.levels[1..] {
            if !level.is_empty() {
                out.push(Box::new(crate::iter::LevelIter::new(level.clone(), fill_cache)));
            }
        }
        Ok(())
    }

    /// Number of tables in `level`.
    pub fn num_files(&self, level: usize) -> usize {
        self.levels[level].len()
    }
}
