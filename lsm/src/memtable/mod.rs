//! The memtable: recent writes in a lock-free skip list, ordered by internal key.
//!
//! Writers insert concurrently with readers (`crossbeam_skiplist`'s base `SkipList`); only the
//! write leader inserts, so inserts are in sequence order. When its memory (entries, bloom
//! filter and point index) reaches `write_buffer_size` the memtable is frozen and a background
//! thread flushes it to an L0 table.
//!
//! A node holds the internal key (inline up to [`key::INLINE_KEY`] bytes) and where the value
//! is in the memtable's [`arena`], which keeps every value back to back in large chunks: an
//! entry of a 16-byte key and a 100-byte value occupies about 175 bytes, and the memtable
//! charges what its entries really occupy against `write_buffer_size`.
//!
//! Nothing is ever removed from a memtable's skip list: it only grows until the whole memtable
//! is dropped, which needs the last reference to it. So no node can be freed while anyone
//! reads it, and the list is used without epoch pins or per-entry reference counts (see
//! [`no_removals`]): a lookup or a cursor step costs no atomic read-modify-write, where the
//! reference-counted `SkipMap` API paid two per entry stepped over (about a fifth of a list
//! range read).
//!
//! Point lookups ask a bloom filter of the user keys first (an absent key skips everything),
//! then the [`point_index`], a hash table of each key's newest version: a lookup at the latest
//! sequence number is answered without descending the list, which only older snapshots and
//! keys the index has no slot for still need. Both are sized when the memtable is made and
//! count against the write buffer: entries fill the rest. The first memtable sizes them for
//! the smallest entries (about a seventh of the buffer); each later one for entries the size
//! of its predecessor's (see [`Memtable::with_budget_after`]).
//! They and the value chunks are anonymous mappings ([`crate::pages`]), zeroed by the kernel
//! and resident only once touched, and unmapped when the memtable is dropped; only the skip
//! list's nodes come from the allocator.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use crossbeam_epoch::Guard;
use crossbeam_skiplist::base::Entry;
use crossbeam_skiplist::SkipList;

use crate::batch::WriteBatch;
use crate::iter::InternalIterator;
use crate::key::{self, InternalKey, InternalKeyRef, ValueKind};
use crate::range_del::{FragmentMap, RangeTombstone, Region, TombstoneSource};
use crate::sstable::bloom::{self, AtomicBloom};
use crate::Result;

mod arena;
mod point_index;
use arena::{Arena, ArenaSlice};
use point_index::{PointIndex, Probe};

/// One entry of the skip list: an internal key and its value, ordered by the key alone. The
/// value lives in the list's key (the list's own value is `()`), so a pointer to a node's key
/// reaches both, which is what the [`point_index`] keeps. The value's bytes are in the
/// memtable's [`arena`].
#[derive(Debug)]
struct Record {
    key: InternalKey,
    value: ArenaSlice,
}

impl Record {
    /// The value's bytes.
    #[inline]
    fn value(&self) -> &[u8] {
        // SAFETY: a record is made in `Memtable::insert` from the memtable's own arena and moved
        // into its skip list; it is reached only through that list (or the point index, which
        // points into it), so only while the memtable, arena included, is alive.
        unsafe { self.value.get() }
    }
}

impl PartialEq for Record {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Record {}
impl Ord for Record {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}
impl PartialOrd for Record {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl std::borrow::Borrow<InternalKeyRef> for Record {
    fn borrow(&self) -> &InternalKeyRef {
        self.key.borrow()
    }
}

/// The skip-list node of one entry: the key (inline up to [`key::INLINE_KEY`] bytes), where the
/// value is in the arena, the node's reference count and height, and a tower of 2 links on
/// average (`crossbeam_skiplist` gives a node height `h` with probability `2^-h`).
const NODE_BYTES: usize = std::mem::size_of::<InternalKey>() + std::mem::size_of::<ArenaSlice>() + 8 + 16;

/// What one entry really occupies on the heap, so `write_buffer_size` bounds the memory a
/// memtable holds rather than the bytes its writes carried: the node, a key too long to be
/// inline, and what the value took in the arena (`arena_bytes`).
fn entry_charge(internal_key_len: usize, arena_bytes: usize) -> usize {
    let key_heap = if internal_key_len > key::INLINE_KEY { internal_key_len.next_multiple_of(16) } else { 0 };
    NODE_BYTES + key_heap + arena_bytes
}

/// Updates [`Memtable::apply`] prefetches for at a time.
const APPLY_WINDOW: usize = 8;

/// The memtable's bloom filter is sized for one key per this many bytes of capacity...
const BLOOM_BYTES_PER_KEY: usize = 64;
/// ...at this many bits a key: about 2 % of the memtable's size.
const BLOOM_BITS_PER_KEY: u32 = 10;

/// A sorted in-memory table of recent writes.
#[derive(Debug)]
pub struct Memtable {
    map: SkipList<Record, ()>,
    /// The values of `map`'s records.
    arena: Arena,
    size: AtomicUsize,
    /// The WAL file that holds this memtable's writes.
    wal_number: u64,
    largest_seq: AtomicU64,
    /// Range tombstones, kept apart from the point entries (see [`crate::range_del`]).
    range_dels: RwLock<MemTombstones>,
    /// Number of range tombstones: reads skip the lock while it is zero.
    range_del_count: AtomicUsize,
    /// What point lookups ask before the list (none in a memtable made without a capacity).
    lookups: Option<Lookups>,
    /// Set by the first [`Memtable::prefault`].
    prefaulted: std::sync::atomic::AtomicBool,
}

/// How large a memtable's bloom filter (in keys) and point index (in slots) are made.
#[derive(Debug, Clone, Copy)]
struct LookupSizes {
    bloom_keys: usize,
    index_slots: usize,
}

impl LookupSizes {
    /// For `capacity` bytes of the smallest entries: what a memtable with no history gets.
    fn for_capacity(capacity: usize) -> LookupSizes {
        LookupSizes { bloom_keys: capacity / BLOOM_BYTES_PER_KEY, index_slots: PointIndex::slots_for(capacity) }
    }
}

/// A memtable's aids to point lookups, both sized from its capacity and both keyed by the same
/// hash of the user key.
#[derive(Debug)]
struct Lookups {
    /// User keys inserted: a lookup of an absent key skips the skip-list descent (which cost a
    /// quarter of a random read with a full memtable).
    bloom: AtomicBloom,
    /// The newest version of each user key: most lookups of present keys skip it too (see
    /// [`point_index`]).
    index: PointIndex,
}

/// A memtable's range tombstones: as inserted (what a flush writes) and fragmented (what reads
/// ask).
#[derive(Debug, Default)]
struct MemTombstones {
    list: Vec<RangeTombstone>,
    fragments: FragmentMap,
}

impl TombstoneSource for Memtable {
    fn tombstone_region(&self, key: &[u8], upper: u64) -> Region {
        self.range_dels.read().unwrap_or_else(|e| e.into_inner()).fragments.region(key, upper)
    }
}

/// What a memtable (or a table) knows about a key at a snapshot: its newest visible point
/// version (range tombstones are asked for separately).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The newest visible version is this value, written at this sequence number.
    Found(Bytes, u64),
    /// The newest visible version is a tombstone written at this sequence number.
    Deleted(u64),
}

impl Lookup {
    /// The sequence number of the version found.
    pub fn seq(&self) -> u64 {
        match self {
            Lookup::Found(_, s) | Lookup::Deleted(s) => *s,
        }
    }
}

impl Memtable {
    /// An empty memtable whose writes are logged in WAL `wal_number` (no bloom filter).
    pub fn new(wal_number: u64) -> Self {
        Self::with_capacity(wal_number, 0)
    }

    /// An empty memtable with a bloom filter and a point index sized for `capacity` bytes of
    /// entries (0: neither).
    pub fn with_capacity(wal_number: u64, capacity: usize) -> Self {
        Self::with_lookups(wal_number, (capacity > 0).then(|| LookupSizes::for_capacity(capacity)))
    }

    fn with_lookups(wal_number: u64, sizes: Option<LookupSizes>) -> Self {
        let lookups = sizes.map(|s| Lookups {
            bloom: AtomicBloom::new(s.bloom_keys, BLOOM_BITS_PER_KEY),
            index: PointIndex::with_slots(s.index_slots),
        });
        Memtable {
            map: SkipList::new(crossbeam_epoch::default_collector().clone()),
            arena: Arena::default(),
            size: AtomicUsize::new(0),
            wal_number,
            largest_seq: AtomicU64::new(0),
            range_dels: RwLock::new(MemTombstones::default()),
            range_del_count: AtomicUsize::new(0),
            lookups,
            prefaulted: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// An empty memtable whose whole memory once full (entries, bloom filter and point index,
    /// see [`Memtable::memory_usage`]) is `budget` bytes: the lookups are sized from the budget
    /// and the entries get the rest. A budget too small to spare a quarter for the lookups
    /// gets none.
    pub fn with_budget(wal_number: u64, budget: usize) -> Self {
        Self::with_lookups(wal_number, Self::with_budget_sizes(budget))
    }

    /// Like [`Memtable::with_budget`], for a memtable that follows one whose entries took
    /// `entry_bytes` each on average (see [`Memtable::entry_bytes`]): the lookups are sized
    /// for the entries the budget then holds, with a quarter to spare, and never larger than
    /// [`Memtable::with_budget`] makes them. With 16-byte keys and 100-byte values a 64 MiB
    /// budget holds ~300,000 entries, whose lookups then take ~4.6 MB instead of ~9.2: the
    /// entries get the difference, and a process with a full memtable holds that much less.
    /// Entries smaller than foreseen only make the lookups fuller: a key the index has no
    /// slot for is found in the list, and a fuller bloom filter answers "maybe" more often;
    /// the lookups are never made smaller than a quarter of the default, so that costs speed
    /// within bounds.
    pub fn with_budget_after(wal_number: u64, budget: usize, entry_bytes: Option<usize>) -> Self {
        let default = Self::with_budget_sizes(budget);
        let Some(entry_bytes) = entry_bytes.filter(|&b| b > 0) else {
            return Self::with_lookups(wal_number, default);
        };
        let keys = budget / entry_bytes;
        let keys = keys.saturating_add(keys / 4);
        // Never below a quarter of the default either: after a run of large values, a memtable
        // of small ones is slower to read (fuller lookups) but not by a cliff.
        let sizes = default.map(|d| LookupSizes {
            bloom_keys: keys.clamp(d.bloom_keys / 4, d.bloom_keys),
            index_slots: PointIndex::slots_for_keys(keys).clamp(d.index_slots / 4, d.index_slots),
        });
        Self::with_lookups(wal_number, sizes)
    }

    /// The lookups [`Memtable::with_budget`] gives a memtable (`None`: the budget is too small).
    fn with_budget_sizes(budget: usize) -> Option<LookupSizes> {
        let lookups = Self::memory_for(budget) - budget;
        (lookups * 4 <= budget).then(|| LookupSizes::for_capacity(budget - lookups))
    }

    /// Average bytes an entry takes (what [`Memtable::approximate_size`] counts), or `None`
    /// before a thousand entries: the hint [`Memtable::with_budget_after`] takes.
    pub fn entry_bytes(&self) -> Option<usize> {
        let n = self.len();
        (n >= 1000).then(|| self.approximate_size() / n)
    }

    /// Bytes a memtable made with `capacity` holds once full: the entries, the bloom filter
    /// and the point index.
    pub fn memory_for(capacity: usize) -> usize {
        capacity
            + AtomicBloom::memory_for(capacity / BLOOM_BYTES_PER_KEY, BLOOM_BITS_PER_KEY)
            + PointIndex::memory_for(capacity)
    }

    /// Bytes the bloom filter and the point index take (fixed at creation, not counted in
    /// [`Memtable::approximate_size`]).
    pub fn index_memory(&self) -> usize {
        self.lookups.as_ref().map_or(0, |l| l.bloom.memory() + l.index.memory())
    }

    /// The WAL holding this memtable's writes.
    pub fn wal_number(&self) -> u64 {
        self.wal_number
    }

    /// Approximate bytes the entries use.
    pub fn approximate_size(&self) -> usize {
        self.size.load(Ordering::Relaxed)
    }

    /// Approximate bytes the whole memtable uses: its entries, bloom filter and point index
    /// (what `write_buffer_size` bounds).
    pub fn memory_usage(&self) -> usize {
        self.approximate_size() + self.index_memory()
    }

    /// True when nothing was inserted.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty() && !self.has_range_tombstones()
    }

    /// Number of entries (versions, not distinct keys).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Largest sequence number inserted.
    pub fn largest_seq(&self) -> u64 {
        self.largest_seq.load(Ordering::Relaxed)
    }

    /// Makes the pages of the bloom filter and the point index resident now, once per memtable.
    /// The flush thread calls it for the memtable a rotation just made active, so the writer
    /// filling it meets no page fault there: a point-index slot is read before it is written,
    /// so a page first touched by the writer faults twice, the second time with a TLB flush
    /// across CPUs (together 8 % of a random fill's time at 10 M entries). Left alone, the
    /// pages still become resident as writes reach them; a full memtable has touched them all.
    pub fn prefault(&self) {
        if self.prefaulted.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Some(l) = &self.lookups {
            l.bloom.populate();
            l.index.populate();
        }
    }

    /// Inserts one record (for a range delete, `user_key..value` is the range).
    pub fn insert(&self, seq: u64, kind: ValueKind, user_key: &[u8], value: &[u8]) {
        self.insert_hashed(seq, kind, user_key, value, bloom::hash_key(user_key));
    }

    /// [`Memtable::insert`] of a key whose [`bloom::hash_key`] is `hash`.
    fn insert_hashed(&self, seq: u64, kind: ValueKind, user_key: &[u8], value: &[u8], hash: u64) {
        if kind == ValueKind::RangeDelete {
            self.size.fetch_add(entry_charge(user_key.len(), value.len()), Ordering::Relaxed);
            let t = RangeTombstone { start: user_key.to_vec(), end: value.to_vec(), seq };
            let mut dels = self.range_dels.write().unwrap_or_else(|e| e.into_inner());
            dels.fragments.insert(&t);
            dels.list.push(t);
            self.range_del_count.fetch_add(1, Ordering::Release);
            self.largest_seq.fetch_max(seq, Ordering::Relaxed);
            return;
        }
        let ikey = InternalKey::from_parts(user_key, seq, kind);
        let (value, arena_bytes) = ArenaSlice::copy_into(&self.arena, value);
        self.size.fetch_add(entry_charge(user_key.len() + key::TRAILER_LEN, arena_bytes), Ordering::Relaxed);
        let hash = self.lookups.as_ref().map(|l| {
            l.bloom.add(hash);
            hash
        });
        // An internal key is unique (its sequence number is), so this inserts: the entry only
        // repeats when a write is applied twice, with the same value.
        let record = Record { key: ikey, value };
        let entry = self.map.get_or_insert(record, (), no_removals());
        if let (Some(l), Some(hash)) = (&self.lookups, hash) {
            // Before the write's sequence number is published (see `point_index`).
            l.index.note(hash, user_key, entry.key());
        }
        entry.release(no_removals());
        self.largest_seq.fetch_max(seq, Ordering::Relaxed);
    }

    /// Inserts every update of `batch`, numbered from the batch's sequence number.
    ///
    /// The updates go in windows of [`APPLY_WINDOW`]: the bloom-filter line and point-index
    /// slot of every key of a window are prefetched before the first is inserted, so a batch of
    /// random keys waits on memory for those once per window instead of twice per key.
    pub fn apply(&self, batch: &WriteBatch) -> Result<()> {
        let mut entries = batch.iter();
        let mut seq = batch.sequence();
        let mut window = [(ValueKind::Put, &[][..], &[][..], 0u64); APPLY_WINDOW];
        loop {
            let (mut n, mut failed) = (0, None);
            while n < APPLY_WINDOW {
                let e = match entries.next() {
                    None => break,
                    Some(Ok(e)) => e,
                    Some(Err(e)) => {
                        // The updates before a damaged one go in, as one at a time would.
                        failed = Some(e);
                        break;
                    }
                };
                let hash = bloom::hash_key(e.key);
                if let Some(l) = &self.lookups {
                    l.bloom.prefetch(hash);
                    l.index.prefetch(hash);
                }
                window[n] = (e.kind, e.key, e.value, hash);
                n += 1;
            }
            for &(kind, key, value, hash) in &window[..n] {
                self.insert_hashed(seq, kind, key, value, hash);
                seq += 1;
            }
            if let Some(e) = failed {
                return Err(e);
            }
            if n < APPLY_WINDOW {
                return Ok(());
            }
        }
    }

    /// The newest version of `user_key` with sequence number `<= seq`.
    pub fn get(&self, user_key: &[u8], seq: u64) -> Option<Lookup> {
        if let Some(l) = &self.lookups {
            let hash = bloom::hash_key(user_key);
            if !l.bloom.may_contain(hash) {
                return None;
            }
            match l.index.probe(hash, user_key) {
                Probe::Absent => return None,
                Probe::Newest(record) => {
                    let parsed = key::parse(record.key.as_bytes())?;
                    if parsed.seq <= seq {
                        return Some(Self::lookup_of(parsed.kind, parsed.seq, record.value()));
                    }
                    // A snapshot older than the newest version: the list has the older ones.
                }
                Probe::Unknown => {}
            }
        }
        let target = key::seek_key(user_key, seq);
        let entry = self.map.lower_bound(Bound::Included(InternalKeyRef::new(&target)), no_removals())?;
        let record = entry.key();
        let parsed = key::parse(record.key.as_bytes())?;
        if parsed.user_key != user_key {
            return None;
        }
        Some(Self::lookup_of(parsed.kind, parsed.seq, record.value()))
    }

    /// What a lookup that found `value` answers: a copy of it (the arena's bytes live only as
    /// long as the memtable).
    fn lookup_of(kind: ValueKind, seq: u64, value: &[u8]) -> Lookup {
        match kind {
            ValueKind::Put => Lookup::Found(Bytes::copy_from_slice(value), seq),
            ValueKind::Delete | ValueKind::RangeDelete => Lookup::Deleted(seq),
        }
    }

    /// The range tombstones, in insertion order.
    pub fn range_tombstones(&self) -> Vec<RangeTombstone> {
        self.range_dels.read().unwrap_or_else(|e| e.into_inner()).list.clone()
    }

    /// True if the memtable holds a range tombstone.
    pub fn has_range_tombstones(&self) -> bool {
        self.range_del_count.load(Ordering::Acquire) > 0
    }

    /// The newest range tombstone covering `user_key` with sequence number `<= seq`: one
    /// ordered-map search, however many tombstones the memtable holds.
    pub fn max_covering_tombstone(&self, user_key: &[u8], seq: u64) -> Option<u64> {
        if !self.has_range_tombstones() {
            return None;
        }
        self.range_dels.read().unwrap_or_else(|e| e.into_inner()).fragments.max_covering(user_key, seq)
    }

    /// A cursor over the memtable; it keeps the memtable alive.
    pub fn iter(self: &Arc<Self>) -> MemIter {
        MemIter { entry: None, _mem: Arc::clone(self) }
    }
}

/// The guard of every access to a memtable's skip list: none, as nothing is ever removed.
///
/// A guard keeps the nodes a thread reads from being freed while it reads them; a skip list
/// frees a node only after it was removed (nodes unlinked and retired through the guard's
/// collector), or when the list itself is dropped. A memtable never removes an entry (it
/// inserts, with `get_or_insert`, which never replaces one), and it drops its list only once
/// the last `Arc<Memtable>` — and with it every cursor — is gone. So `unprotected()` is sound
/// here: no node can be freed while it is reachable, and no deferred destruction is ever
/// queued through this guard.
fn no_removals() -> &'static Guard {
    // SAFETY: see above: nothing is ever removed from a memtable's skip list.
    unsafe { crossbeam_epoch::unprotected() }
}

/// Cursor over a memtable.
pub struct MemIter {
    // Declared before `_mem` so it is dropped first: the entry borrows the skip list that `_mem`
    // keeps alive.
    entry: Option<Entry<'static, 'static, Record, ()>>,
    _mem: Arc<Memtable>,
}

// SAFETY: the entry refers to the skip list (`Send + Sync`), one of its nodes, which lives as
// long as the list (see `no_removals`), and the unprotected guard, which holds no thread-local
// state (it is a static with no participant): nothing in it is tied to the thread that made it.
unsafe impl Send for MemIter {}

impl std::fmt::Debug for MemIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemIter").field("valid", &self.entry.is_some()).finish()
    }
}

impl MemIter {
    fn map(&self) -> &'static SkipList<Record, ()> {
        let map: *const SkipList<Record, ()> = &self._mem.map;
        // SAFETY: the skip list lives inside an `Arc<Memtable>` that this iterator owns and that
        // is never moved out of its allocation; every `Entry` borrowing it is stored in `self.entry`,
        // which is dropped before `_mem`. The `'static` lifetime never escapes this struct.
        unsafe { &*map }
    }
}

impl InternalIterator for MemIter {
    fn valid(&self) -> bool {
        self.entry.is_some()
    }
    fn key(&self) -> &[u8] {
        self.entry.as_ref().map_or(&[], |e| e.key().key.as_bytes())
    }
    fn value(&self) -> &[u8] {
        self.entry.as_ref().map_or(&[], |e| e.key().value())
    }
    fn value_bytes(&self) -> Bytes {
        self.entry.as_ref().map(|e| Bytes::copy_from_slice(e.key().value())).unwrap_or_default()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.entry = self.map().front(no_removals());
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.entry = self.map().back(no_removals());
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.entry = self.map().lower_bound(Bound::Included(InternalKeyRef::new(target)), no_removals());
        Ok(())
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.entry = self.map().upper_bound(Bound::Included(InternalKeyRef::new(target)), no_removals());
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        self.entry = self.entry.take().and_then(|e| e.next());
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        self.entry = self.entry.take().and_then(|e| e.prev());
        Ok(())
    }
}

#[cfg(test)]
mod tests;
