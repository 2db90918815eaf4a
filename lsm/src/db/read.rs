//! The read path: point lookups (one key or many at one point in time) and the merged cursor
//! over every source (memtables, then tables newest first).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::{DbInner, SuperVersion};
use crate::cache::ReadCounters;
use crate::iter::{BoxedIter, DbIterator, MergingIterator};
use crate::memtable::Lookup;
use crate::options::ReadOptions;
use crate::snapshot::Snapshot;
use crate::sstable::{Fetch, PointFetch};
use crate::Result;

/// Keys whose lookups [`DbInner::multi_get`] starts loading together.
const PREFETCH_WINDOW: usize = 16;

pub(super) fn new_iterator(
    sv: Arc<SuperVersion>,
    seq: u64,
    snapshot: Option<Snapshot>,
    fetch: Fetch,
    counters: Arc<ReadCounters>,
) -> DbIterator {
    let mut children: Vec<BoxedIter> = Vec::with_capacity(1 + sv.imm.len() + sv.version.num_files(0) + 6);
    let mut sources: Vec<Arc<dyn crate::range_del::TombstoneSource>> = Vec::new();
    for m in std::iter::once(&sv.mem).chain(sv.imm.iter()) {
        children.push(Box::new(m.iter()));
        if m.has_range_tombstones() {
            sources.push(Arc::clone(m) as Arc<dyn crate::range_del::TombstoneSource>);
        }
    }
    let built = sv
        .version
        .iterators(&mut children, fetch)
        .and_then(|_| sv.version.tombstone_sources(&mut sources, fetch.cache_only));
    if let Err(e) = built {
        return DbIterator::failed(e);
    }
    let tombstones = crate::range_del::Tombstones::new(sources, seq);
    DbIterator::new(MergingIterator::new(children), seq, tombstones, sv, snapshot, counters)
}

impl DbInner {
    /// The sequence number and super version a read uses. The sequence is read first, so every
    /// write it covers is in the super version read after it.
    pub(super) fn read_view(&self, opts: &ReadOptions) -> (u64, Arc<SuperVersion>) {
        (self.read_seq(opts), self.super_version())
    }

    /// The sequence number a read sees; read before its super version (see `read_view`).
    fn read_seq(&self, opts: &ReadOptions) -> u64 {
        match &opts.snapshot {
            Some(s) => s.sequence(),
            None => self.visible_seq.load(Ordering::Acquire),
        }
    }

    pub(super) fn get_with(&self, key: &[u8], opts: &ReadOptions) -> Result<Option<Bytes>> {
        self.check_open()?;
        let seq = self.read_seq(opts);
        Self::get_in(&self.borrow_super_version(), key, seq, PointFetch::from_options(opts))
    }

    pub(super) fn multi_get(&self, keys: &[&[u8]], opts: &ReadOptions) -> Result<Vec<Option<Bytes>>> {
        self.check_open()?;
        let seq = self.read_seq(opts);
        let sv = self.borrow_super_version();
        // In key order, so keys that share tables and blocks find them in the CPU's caches.
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_unstable_by(|&a, &b| keys[a].cmp(keys[b]));
        let mut values = vec![None; keys.len()];
        // A window at a time: its keys' first loads started together, then its lookups.
        let mut window = Vec::with_capacity(PREFETCH_WINDOW);
        for chunk in order.chunks(PREFETCH_WINDOW) {
            window.clear();
            window.extend(chunk.iter().map(|&i| keys[i]));
            Self::prefetch_in(&sv, &window);
            for &i in chunk {
                values[i] = Self::get_in(&sv, keys[i], seq, PointFetch::from_options(opts))?;
            }
        }
        Ok(values)
    }

    pub(super) fn prefetch_gets(&self, keys: &[&[u8]]) {
        Self::prefetch_in(&self.borrow_super_version(), keys);
    }

    /// Starts loading what lookups of `keys` in the sources of `sv` read first, stage by stage
    /// across the keys (see [`crate::Db::prefetch_gets`]).
    fn prefetch_in(sv: &SuperVersion, keys: &[&[u8]]) {
        let hashes: Vec<u64> = keys.iter().map(|k| crate::sstable::bloom::hash_key(k)).collect();
        let mems = || std::iter::once(&sv.mem).chain(sv.imm.iter());
        for (key, &hash) in keys.iter().zip(&hashes) {
            mems().for_each(|m| m.prefetch_lookup(key, hash, 0));
            sv.version.prefetch_point(key, hash);
        }
        for stage in 1..=2 {
            for (key, &hash) in keys.iter().zip(&hashes) {
                mems().for_each(|m| m.prefetch_lookup(key, hash, stage));
            }
        }
    }

    /// `key`'s value at `seq` in the sources of `sv`.
    fn get_in(sv: &SuperVersion, key: &[u8], seq: u64, fetch: PointFetch) -> Result<Option<Bytes>> {
        // Newest source first; stop at the first point version or covering range tombstone
        // (everything below either is older). Point lookups always fill the block cache.
        let mut tomb = None;
        let mut found = None;
        for m in std::iter::once(&sv.mem).chain(sv.imm.iter()) {
            tomb = tomb.max(m.max_covering_tombstone(key, seq));
            found = m.get_pinned(key, seq);
            if found.is_some() || tomb.is_some() {
                break;
            }
        }
        if found.is_none() {
            (found, tomb) = sv.version.get(key, seq, tomb, fetch)?;
        }
        Ok(match found {
            Some(Lookup::Found(v, s)) if tomb.is_none_or(|t| t < s) => Some(v),
            _ => None,
        })
    }
}
